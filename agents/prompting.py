"""Prompting baselines on any policy backend: ReAct and Reflexion.

Both keep the env's prompt (the paper's template, which already asks for ``<think>`` reasoning
before the action) and put their own instructions in front of it.

    >>> agent = ReflexionAgent(HFPolicy("tiny-micro"))                       # doctest: +SKIP
    >>> for trial in range(3):                                               # doctest: +SKIP
    ...     trajectories = rollout(agent, "PaW/ALFWorld-v0", 8, 1, seed=0)   # same 8 tasks
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

from agents.base import Policy, PolicyAgent
from agents.types import Trajectory

REACT_INSTRUCTION = (
    "Solve the task by interleaving reasoning and acting. At every step, first think about "
    "what the last observation tells you and what to do next, then take exactly one action."
)
REFLECTION_PROMPT = (
    "You attempted the task below and failed. Task: {task}\n"
    "Your trajectory:\n{trajectory}\n"
    "In a few sentences, diagnose what went wrong and write a concrete plan for your next "
    "attempt. Enclose the plan within <reflection> </reflection> tags."
)


class ReActAgent(PolicyAgent):
    """ReAct (reason + act) prompting: an instruction and optional worked examples in front of
    every prompt, then one batched ``act`` call per step.

    Args:
        policy: any backend with ``act`` (``HFPolicy``, ``VLLMPolicy``).
        examples: worked episodes shown before the task (e.g. from :func:`expert_examples`).
        instruction: the ReAct instruction.
    """

    def __init__(self, policy: Policy, examples: Sequence[str] = (),
                 instruction: str = REACT_INSTRUCTION):
        super().__init__(policy)
        self.examples = list(examples)
        self.instruction = instruction

    def decide(self, prompts, infos, envs, sampling, seed):
        prompts = [self.build_prompt(p, info) for p, info in zip(prompts, infos)]
        return super().decide(prompts, infos, envs, sampling, seed)

    def build_prompt(self, prompt: str, info: dict) -> str:
        parts = [self.instruction]
        if self.examples:
            parts.append("Examples of solved tasks:\n" + "\n\n".join(self.examples))
        parts.append(prompt)
        return "\n\n".join(parts)


class ReflexionAgent(ReActAgent):
    """Reflexion: ReAct plus verbal self-reflection kept across trials of the same task.

    After each rollout the policy writes one reflection per *failed* task (batched in one
    ``act`` call); later trials of that task (same ``task_id``) see its reflections in front of
    the prompt. Run trials by calling :func:`agents.rollout` again with the same ``seed``.

    Args:
        policy: any backend with ``act``.
        max_reflections: reflections kept per task (the most recent).
        reflection_tokens: token budget of a reflection.
        examples, instruction: as for :class:`ReActAgent`.
    """

    def __init__(self, policy: Policy, max_reflections: int = 3, reflection_tokens: int = 256,
                 examples: Sequence[str] = (), instruction: str = REACT_INSTRUCTION):
        super().__init__(policy, examples, instruction)
        self.max_reflections = max_reflections
        self.reflection_tokens = reflection_tokens
        self.reflections: dict[str, list[str]] = defaultdict(list)

    def build_prompt(self, prompt: str, info: dict) -> str:
        notes = self.reflections.get(str(info.get("task_id", "")), [])
        if not notes:
            return super().build_prompt(prompt, info)
        memory = "\n".join(f"- Trial {i + 1}: {note}" for i, note in enumerate(notes))
        return super().build_prompt(
            f"Reflections from your earlier attempts at this task:\n{memory}\n\n{prompt}", info)

    def end_episodes(self, trajectories: Sequence[Trajectory]) -> None:
        # One reflection per failed task (its first failed trajectory), all in one call.
        failed: dict[str, Trajectory] = {}
        for trajectory in trajectories:
            if not trajectory.won and trajectory.transitions:
                failed.setdefault(trajectory.task_id, trajectory)
        if not failed:
            return
        prompts = [REFLECTION_PROMPT.format(task=t.transitions[0].info.get("task_description")
                                            or t.task_id, trajectory=transcript(t))
                   for t in failed.values()]
        outputs = self.policy.act(prompts, temperature=0.0, max_new_tokens=self.reflection_tokens,
                                  stop=("</reflection>",), seed=0)
        for task_id, output in zip(failed, outputs):
            note = output.text.replace("<reflection>", "").replace("</reflection>", "").strip()
            kept = self.reflections[task_id]
            kept.append(note or "(no reflection)")
            del kept[:-self.max_reflections]


def transcript(trajectory: Trajectory, max_chars: int = 2000) -> str:
    """``Action: …`` / ``Observation: …`` lines of a trajectory (the tail if too long)."""
    lines = []
    for t in trajectory.transitions:
        lines.append(f"Action: {t.action or '(invalid) ' + t.output.text[:200]}")
        lines.append(f"Observation: {t.next_observation}")
    text = "\n".join(lines)
    return text if len(text) <= max_chars else "..." + text[-max_chars:]


def expert_examples(env, num_episodes: int = 1, seed: int = 10_000) -> list[str]:
    """Worked examples for :class:`ReActAgent`: transcripts of the scripted expert.

    ``env`` is an env id or a factory, as for :func:`agents.rollout`.
    """
    from agents.baselines import ExpertAgent
    from agents.rollout import rollout

    episodes = rollout(ExpertAgent(), env, num_episodes, 1, seed=seed)
    return [f"Task: {t.transitions[0].info.get('task_description') or t.task_id}\n"
            f"Observation: {t.initial_observation}\n{transcript(t)}"
            for t in episodes if t.transitions]
