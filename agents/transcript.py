"""``TranscriptAgent``: an episode as one chat transcript, token for token.

The native agent loop shows the policy a fresh prompt h_t at every step (``HistoryPrompt``).
Trainers that train a whole episode as one sequence (TRL's ``GRPOTrainer`` with a
``rollout_func``, :mod:`training.integrations.trl`) need the policy to act on the growing
transcript instead, and need its ids to be exactly the ones it acted on:

    chat(p_1) ⊕ a_1 ⊕ turn(p_2) ⊕ a_2 ⊕ … ⊕ a_T ⊕ s ⊕ o_{T+1} ⊕ e

``p_t`` is the wrapped env's prompt at step t (use ``history_length=0``: the transcript already
holds the history), ``a_t`` the generated response ids, kept as generated (rendering the text
again would retokenise them), and ``turn(p) = s ⊕ p ⊕ g``: the separator ``s`` a chat template
puts between an assistant message and the next user message (:mod:`agents.serialization`'s
``next_turn`` separator), the prompt, and the template's generation prompt ``g`` (end of the user
turn, assistant header). The final observation and the end-of-turn token ``e`` close the
transcript, so o_{T+1} is a world-model target like the others.

Inside ``turn(p_{t+1})`` the raw observation o_{t+1} (``info["raw_observation"]``) is tokenised
on its own, between the template text before and after it. With a template that starts with
the observation (:data:`TRANSCRIPT_TEMPLATE`), the ids that precede o_{t+1} are those of the
native PaW row ``chat(h_t) ⊕ a_t ⊕ s ⊕ o_{t+1}`` with the transcript as h_t, so the world-model
term sees the same targets in the same context.

Example:
    >>> from agents import HFPolicy, rollout                                    # doctest: +SKIP
    >>> agent = TranscriptAgent(HFPolicy("Qwen/Qwen2.5-1.5B-Instruct"))        # doctest: +SKIP
    >>> episodes = rollout(agent, "PaW/Shelf-v0", 4, 2, template=TRANSCRIPT_TEMPLATE,
    ...                    history_length=0)                                    # doctest: +SKIP
    >>> row = agent.turns.episode(episodes[0])                                  # doctest: +SKIP
    >>> row.completion_ids[row.obs_spans[0][0]]       # first token of o_2       # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

from agents.base import Agent
from agents.types import PolicyOutput, Trajectory

#: A Markov prompt whose turn starts with the observation (the small envs' study template).
TRANSCRIPT_TEMPLATE = "{current_observation} Actions: [{admissible_actions}]."
_MARK = "\x1eUSER\x1e"


class Turn(NamedTuple):
    """The ids of one environment turn and where the observation sits in them."""

    ids: list[int]
    obs_start: int
    obs_len: int


class EpisodeSequence(NamedTuple):
    """A transcript split as TRL trains it: the first prompt, then everything after it."""

    prompt_ids: list[int]
    completion_ids: list[int]
    action_mask: list[int]
    """1 on generated tokens, 0 on the environment's."""
    logprobs: list[float]
    """Sampling log-prob of each generated token; 0.0 on the environment's."""
    obs_spans: list[tuple[int, int]]
    """Per transition t: ``(start, length)`` of o_{t+1} in ``completion_ids`` (length 0: no
    observation, or none found in the turn)."""


class TurnFormat:
    """How environment turns are written into a transcript for one tokenizer.

    Args:
        tokenizer: the policy's tokenizer (it needs a chat template).
        eos_ids: the policy's end-of-turn / EOS ids (``HFPolicy.eos_ids``).
    """

    def __init__(self, tokenizer: Any, eos_ids: Sequence[int]):
        from agents.chat import render_chat
        from agents.serialization import TransitionSerializer, observation_separator

        self.tokenizer = tokenizer
        self.serializer = TransitionSerializer(tokenizer, "next_turn", eos_ids)
        text = render_chat(tokenizer, [{"role": "user", "content": _MARK}],
                           add_generation_prompt=True)
        self.generation_prompt = self.encode(text[text.index(_MARK) + len(_MARK):])
        self.end_of_turn = observation_separator(tokenizer, "end_of_turn", tuple(eos_ids))

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []

    def env_turn(self, response_ids: Sequence[int], prompt: str, observation: str,
                 final: bool = False) -> Turn:
        """``s ⊕ p ⊕ g`` after ``response_ids``, with ``observation`` tokenised on its own
        where ``prompt`` first shows it; the final turn is ``s ⊕ observation ⊕ e``, closed by
        the end-of-turn token e as the template closes a turn (so a trainer sees the
        transcript end where a turn ends)."""
        separator = self.serializer.separator_after(response_ids)
        if final:
            obs = self.encode(observation)
            return Turn(separator + obs + self.end_of_turn, len(separator), len(obs))
        at = prompt.find(observation) if observation else -1
        if at < 0:
            return Turn(separator + self.encode(prompt) + self.generation_prompt, 0, 0)
        before = self.encode(prompt[:at])
        obs = self.encode(observation)
        after = self.encode(prompt[at + len(observation):])
        return Turn(separator + before + obs + after + self.generation_prompt,
                    len(separator) + len(before), len(obs))

    def episode(self, trajectory: Trajectory) -> EpisodeSequence:
        """The transcript a :class:`TranscriptAgent` played, rebuilt from its trajectory (and
        checked against the ids each step was sampled from)."""
        steps = trajectory.transitions
        if not steps or not steps[0].output.prompt_ids:
            raise ValueError("a transcript needs at least one step with token ids")
        sequence, contexts = self.assemble(
            steps[0].output.prompt_ids,
            [(s.prompt, s.output.response_ids, s.output.logprobs, s.next_observation)
             for s in steps])
        whole = sequence.prompt_ids + sequence.completion_ids
        for t, (step, length) in enumerate(zip(steps, contexts)):
            if list(step.output.prompt_ids) != whole[:length]:
                raise ValueError(f"step {t} of episode {trajectory.task_id!r} was not sampled "
                                 "from its transcript: play it with a TranscriptAgent")
        return sequence

    def assemble(self, prompt_ids: Sequence[int],
                 steps: Sequence[tuple[str, Sequence[int], Sequence[float], str]]
                 ) -> tuple[EpisodeSequence, list[int]]:
        """The transcript of ``steps`` (per step: its prompt p_t, response ids a_t, their
        log-probs, o_{t+1}) after the first prompt's ids, and the length of the context each
        step's response was generated from."""
        completion: list[int] = []
        mask: list[int] = []
        logprobs: list[float] = []
        spans: list[tuple[int, int]] = []
        contexts: list[int] = []

        def add_turn(turn: Turn) -> None:
            spans.append((len(completion) + turn.obs_start, turn.obs_len))
            completion.extend(turn.ids)
            mask.extend([0] * len(turn.ids))
            logprobs.extend([0.0] * len(turn.ids))

        for t, (_, response_ids, response_logprobs, _) in enumerate(steps):
            if t > 0:
                previous = steps[t - 1]
                add_turn(self.env_turn(previous[1], steps[t][0], previous[3]))
            contexts.append(len(prompt_ids) + len(completion))
            completion.extend(response_ids)
            mask.extend([1] * len(response_ids))
            logprobs.extend(response_logprobs)
        _, last_response, _, last_observation = steps[-1]
        if last_observation:
            add_turn(self.env_turn(last_response, "", last_observation, final=True))
        else:
            spans.append((len(completion), 0))
        return EpisodeSequence(list(prompt_ids), completion, mask, logprobs, spans), contexts


class TranscriptAgent(Agent):
    """Acts on the episode's whole transcript (see the module docstring).

    Args:
        policy: a backend with ``act_ids`` and ``encode_prompt`` (:class:`agents.HFPolicy`).
    """

    def __init__(self, policy: Any):
        if not callable(getattr(policy, "act_ids", None)):
            raise TypeError(f"TranscriptAgent needs a policy that samples from token ids "
                            f"(act_ids, e.g. agents.HFPolicy), got {type(policy).__name__}")
        self.policy = policy
        self.turns = TurnFormat(policy.tokenizer, policy.eos_ids)
        # Keyed by the env handle itself (held, so no other env can take its id) until
        # end_episodes.
        self._transcripts: dict[Any, tuple[list[int], PolicyOutput]] = {}

    def decide(self, prompts, infos, envs, sampling, seed):
        contexts = []
        for prompt, info, env in zip(prompts, infos, envs):
            if env in self._transcripts:
                ids, last = self._transcripts[env]
                observation = str(info.get("raw_observation", ""))
                ids = ids + self.turns.env_turn(last.response_ids, prompt, observation).ids
            else:
                ids, _ = self.policy.encode_prompt(prompt, sampling.max_new_tokens)
            contexts.append(ids)
        outputs = self.policy.act_ids(contexts, temperature=sampling.temperature,
                                      max_new_tokens=sampling.max_new_tokens, stop=sampling.stop,
                                      seed=seed)
        for env, ids, out in zip(envs, contexts, outputs):
            self._transcripts[env] = (ids + list(out.response_ids), out)
        return outputs

    def end_episodes(self, trajectories: Sequence[Trajectory]) -> None:
        self._transcripts.clear()
