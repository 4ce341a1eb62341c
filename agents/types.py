"""Data passed between policies, rollouts and the trainer (the Policy contract of
docs/design.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class PolicyOutput:
    """One sampled response with the token-level data RL and PaW need."""

    text: str
    """Response text as generated (stop string included when generation stopped on one)."""
    prompt_ids: list[int]
    """Prompt token ids after the chat template and left truncation."""
    response_ids: list[int]
    """Generated token ids (no padding, no prompt)."""
    logprobs: list[float]
    """Per response token: log-probability under the sampling distribution."""
    entropies: list[float]
    """Per response token: entropy of the full next-token distribution."""
    finish_reason: str = "stop"
    """``"stop"`` (EOS or a stop string) or ``"length"`` (hit ``max_new_tokens``)."""
    prompt_truncated: bool = False
    """Whether the prompt was cut from the left to fit the context."""

    @property
    def mean_entropy(self) -> float:
        """H(a|h): mean over the action tokens of the per-token entropy (0.0 if empty)."""
        return sum(self.entropies) / len(self.entropies) if self.entropies else 0.0


@dataclass
class Transition:
    """One decision step (h_t, a_t, r_t, o_{t+1}) of a rollout."""

    prompt: str
    """h_t: the decision context shown to the policy (the HistoryPrompt text)."""
    output: PolicyOutput
    """a_t with its token data."""
    action: str
    """The action extracted by ParseAction and sent to the env."""
    next_observation: str
    """o_{t+1}: the env's raw next observation (the world-model target)."""
    reward: float
    """Env reward plus any invalid-action penalty."""
    terminated: bool
    truncated: bool
    invalid_action: bool
    info: dict[str, Any] = field(default_factory=dict)
    format_penalty: float = 0.0
    """The invalid-action penalty included in ``reward`` (0.0 for a valid action)."""

    @property
    def task_reward(self) -> float:
        """The env's own reward for the step, without the format penalty."""
        return self.reward - self.format_penalty


@dataclass
class Trajectory:
    """One episode; trajectories of the same task share a ``group_index``."""

    task_id: str
    task_type: str
    group_index: int
    transitions: list[Transition] = field(default_factory=list)
    won: bool = False
    initial_observation: str = ""
    """The env's raw observation at reset (o_0)."""

    @property
    def total_reward(self) -> float:
        """Episode return with the format penalties (what the advantages use)."""
        return sum(t.reward for t in self.transitions)

    @property
    def task_return(self) -> float:
        """Episode return of the env's own rewards, without format penalties (in [0, R_max]
        for the built-in envs)."""
        return sum(t.task_reward for t in self.transitions)

    def to_records(self, episode_id: str, per_step: list[dict[str, Any]] | None = None,
                   **fields: Any) -> list[dict[str, Any]]:
        """The episode as WM replay records, in the schema ``RecordTransitions`` writes
        (:func:`wrappers.record.transition_record`), with ``fields`` on every record and
        ``per_step[i]`` on step i's."""
        from wrappers.record import PolicyAction, transition_record

        records = []
        for number, step in enumerate(self.transitions):
            out = step.output
            action = PolicyAction(out.text, action_entropy=out.mean_entropy,
                                  prompt_ids=out.prompt_ids, response_ids=out.response_ids)
            info = {**step.info, "task_id": self.task_id, "task_type": self.task_type,
                    "invalid_action": step.invalid_action,
                    "parsed_action": step.info.get("parsed_action", step.action or None)}
            records.append(transition_record(
                step.prompt, action, step.next_observation, step.reward, step.terminated,
                step.truncated, info, episode_id, number,
                **fields, **(per_step[number] if per_step else {})))
        return records

    def __len__(self) -> int:
        return len(self.transitions)
