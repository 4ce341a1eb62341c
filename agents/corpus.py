"""Text for the tiny model's tokenizer: what the agent loop of each env actually shows and says."""

from __future__ import annotations

from typing import Any, Iterator, Sequence


def template_texts() -> list[str]:
    """The paper's prompt templates (and the generic one) as plain text."""
    from agents.envs import GENERIC_FIRST_STEP, GENERIC_TEMPLATE
    from agents.prompting import REACT_INSTRUCTION, REFLECTION_PROMPT
    from wrappers import TEMPLATES

    texts = [text for pair in TEMPLATES.values() for text in pair]
    return texts + [GENERIC_TEMPLATE, GENERIC_FIRST_STEP, REACT_INSTRUCTION, REFLECTION_PROMPT]


def env_texts(env_ids: Sequence[str], episodes: int = 16, max_steps: int = 15, seed: int = 0,
              progress: bool = False, **env_kwargs: Any) -> Iterator[str]:
    """Prompts, raw observations and actions of random and expert episodes in each env.

    Each env plays ``episodes`` tasks with :class:`~agents.baselines.RandomAgent` and the same
    number with :class:`~agents.baselines.ExpertAgent` (when the env has one), through the same
    wrappers a policy sees (``HistoryPrompt`` + ``ParseAction``); ``env_kwargs`` go to
    ``gym.make``.
    """
    from agents.baselines import ExpertAgent, RandomAgent
    from agents.envs import make_agent_env
    from agents.rollout import rollout

    for env_id in env_ids:
        probe = make_agent_env(env_id, **env_kwargs)
        # A TextAdapter always has expert_action() but says through has_expert whether it works.
        has_expert = getattr(probe.unwrapped, "has_expert",
                             hasattr(probe.unwrapped, "expert_action"))
        probe.close()
        agents = [RandomAgent()] + ([ExpertAgent()] if has_expert else [])
        for index, agent in enumerate(agents):
            trajectories = rollout(agent, env_id, episodes, 1, seed=seed + index,
                                   max_steps=max_steps, progress=progress, **env_kwargs)
            for trajectory in trajectories:
                yield trajectory.initial_observation
                for t in trajectory.transitions:
                    yield t.prompt
                    yield t.output.text
                    yield t.next_observation
