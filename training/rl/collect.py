"""Rollout collection for the trainer and the evaluator, on top of ``agents.rollout``."""

from __future__ import annotations

from typing import Any

from agents.types import Trajectory
from paw_gym.progress import Progress
from training.config import TrainConfig


def prompt_kwargs(config: TrainConfig) -> dict[str, Any]:
    """The configured ``make_agent_env`` prompt settings (template, history, parsing)."""
    return {"template": config.template, "action_format": config.action_format,
            "history_length": config.history_length, "invalid_penalty": config.invalid_penalty}


def env_settings(config: TrainConfig) -> dict[str, Any]:
    """``agents.rollout`` keyword arguments that build the configured prompt env."""
    return {**prompt_kwargs(config), **config.env_kwargs}


class EnvCollector:
    """``collect(policy, task_seeds, group_size, temperature, seed)`` on ``config.env_id``:
    one group of ``group_size`` episodes per task seed, all groups stepped in one batch (the
    envs in ``config.num_env_workers`` worker processes when set, see ``agents.rollout``)."""

    def __init__(self, config: TrainConfig, progress: Progress = False):
        self.config = config
        self.progress = progress

    def __call__(self, policy, task_seeds: list[int], group_size: int, temperature: float,
                 seed: int) -> list[Trajectory]:
        from agents.envs import env_factory
        from agents.rollout import rollout

        # A factory, not the id + flat kwargs: an env argument named like a rollout argument
        # (ALFWorldEnv's ``progress``) must reach the env.
        return rollout(policy, env_factory(self.config.env_id, **env_settings(self.config)),
                       len(task_seeds), group_size,
                       temperature=temperature, max_new_tokens=self.config.max_new_tokens,
                       seed=seed, task_seeds=task_seeds, max_steps=self.config.max_episode_steps,
                       progress=self.progress,
                       num_env_workers=self.config.num_env_workers)
