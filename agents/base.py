"""What ``rollout`` drives: an ``Agent`` decides one action for each live env of a batch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, Sequence

import gymnasium as gym

from agents.sampling import DEFAULT_STOP
from agents.types import PolicyOutput, Trajectory


@dataclass(frozen=True)
class Sampling:
    """Generation settings passed to a policy's ``act``."""

    temperature: float = 1.0
    """Sampling temperature (paper: 1.0 for rollouts, 0.4 validation, 0.0 for search QA)."""
    max_new_tokens: int = 256
    """Most tokens per response."""
    stop: tuple[str, ...] | None = DEFAULT_STOP
    """Stop strings (kept at the end of the response)."""


class Policy(Protocol):
    """A generation backend (``HFPolicy``, ``VLLMPolicy``)."""

    def act(self, prompts: Sequence[str], temperature: float = 1.0, max_new_tokens: int = 256,
            stop: Sequence[str] | None = ..., seed: int | None = None) -> list[PolicyOutput]:
        ...


class Agent:
    """Chooses the next action for a batch of envs; :func:`agents.rollout` calls it once a step.

    Subclasses implement :meth:`decide`. ``envs[i]`` is the (wrapped) env behind ``prompts[i]``
    and ``infos[i]``; agents that read the env (scripted experts) use it, others ignore it.
    :meth:`end_episodes` is called with the finished trajectories at the end of a rollout
    (Reflexion learns from them).
    """

    def decide(self, prompts: Sequence[str], infos: Sequence[dict[str, Any]],
               envs: Sequence[gym.Env], sampling: Sampling, seed: int) -> list[PolicyOutput]:
        raise NotImplementedError

    def end_episodes(self, trajectories: Sequence[Trajectory]) -> None:
        """Hook after a rollout; the default does nothing."""


class PolicyAgent(Agent):
    """An agent that sends the prompts unchanged to a policy backend (one ``act`` per step)."""

    def __init__(self, policy: Policy):
        self.policy = policy

    def decide(self, prompts, infos, envs, sampling, seed):
        return self.policy.act(list(prompts), temperature=sampling.temperature,
                               max_new_tokens=sampling.max_new_tokens, stop=sampling.stop,
                               seed=seed)


def as_agent(agent_or_policy: Agent | Policy) -> Agent:
    """An :class:`Agent` as is; a policy (anything with ``act``) as a :class:`PolicyAgent`."""
    if isinstance(agent_or_policy, Agent):
        return agent_or_policy
    if callable(getattr(agent_or_policy, "act", None)):
        return PolicyAgent(agent_or_policy)
    raise TypeError(f"expected an Agent or a policy with .act(prompts, ...), got "
                    f"{type(agent_or_policy).__name__}")


def text_output(text: str) -> PolicyOutput:
    """A response that no model produced (scripted agents): text only, no token data."""
    return PolicyOutput(text=text, prompt_ids=[], response_ids=[], logprobs=[], entropies=[])
