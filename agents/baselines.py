"""Model-free baselines: a uniform random agent and the envs' scripted experts."""

from __future__ import annotations

import random
from typing import Any, Sequence

import gymnasium as gym

from agents.base import Agent, Sampling, text_output
from agents.envs import action_format_of
from agents.types import PolicyOutput


def format_action(action: str, action_format: str, thought: str) -> str:
    """Model-style output for a bare action: ``<think>…</think><action>…</action>``.

    A search-format action (already ``<search>…</search>`` / ``<answer>…</answer>``) only gets
    the ``<think>`` block in front.
    """
    if action_format == "search" or action.lstrip().startswith(("<search>", "<answer>")):
        return f"<think>{thought}</think>{action}"
    return f"<think>{thought}</think><action>{action}</action>"


class RandomAgent(Agent):
    """Picks uniformly among ``info["admissible_actions"]`` (plus a random-words
    ``search[...]`` where ``info["search_allowed"]``, as on WebShop's search page).

    Where the action space is open (no admissible list, e.g. search QA) it searches for, or
    answers with, a few random words of the observation. Seeded by the rollout.
    """

    def decide(self, prompts: Sequence[str], infos: Sequence[dict[str, Any]],
               envs: Sequence[gym.Env], sampling: Sampling, seed: int) -> list[PolicyOutput]:
        rng = random.Random(seed)
        outputs = []
        for prompt, info, env in zip(prompts, infos, envs):
            admissible = [a for a in info.get("admissible_actions", []) if a != "help"]
            if info.get("search_allowed"):  # WebShop's search page: a query from the goal words
                words = str(info.get("task_description") or prompt).split() or ["item"]
                admissible.append(f"search[{' '.join(rng.choices(words, k=min(4, len(words))))}]")
            fmt = action_format_of(env)
            if admissible:
                action = rng.choice(admissible)
            else:
                words = str(info.get("raw_observation") or prompt).split() or ["nothing"]
                phrase = " ".join(rng.choices(words, k=min(3, len(words))))
                tag = rng.choice(["search", "answer"]) if fmt == "search" else "action"
                action = f"<{tag}>{phrase}</{tag}>" if fmt == "search" else phrase
            outputs.append(text_output(format_action(action, fmt, "I pick at random.")))
        return outputs


class ExpertAgent(Agent):
    """The env's scripted expert: ``env.unwrapped.expert_action()`` formatted as model output.

    Every PaW env class provides ``expert_action()`` (the next action of its scripted solver);
    a custom env works here as soon as it does too (a :class:`~paw_gym.core.TextEnv` subclass
    implements ``_expert_action()``). With ``epsilon > 0`` each step takes a
    uniformly random admissible action instead with that probability (seeded by the rollout):
    imperfect demonstrations, whose clone leaves RL room to improve.
    """

    def __init__(self, epsilon: float = 0.0):
        if not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"epsilon={epsilon!r} must be a probability in [0, 1]")
        self.epsilon = epsilon

    def decide(self, prompts, infos, envs, sampling, seed):
        rng = random.Random(seed)
        outputs = []
        for info, env in zip(infos, envs):
            expert = getattr(env.unwrapped, "expert_action", None)
            if expert is None:
                raise TypeError(f"{type(env.unwrapped).__name__} has no expert_action(); "
                                "ExpertAgent needs an env with a scripted expert")
            admissible = info.get("admissible_actions") or []
            explore = bool(admissible) and self.epsilon > 0 and rng.random() < self.epsilon
            action = rng.choice(admissible) if explore else expert()
            outputs.append(text_output(format_action(action, action_format_of(env),
                                                     "I follow the expert plan.")))
        return outputs
