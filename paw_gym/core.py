"""The text-environment contract shared by every PaW environment.

A PaW environment is a plain Gymnasium ``Env`` whose observations and actions are ``str``.
:class:`TextEnv` fixes the parts every such env shares: the spaces, seeding, and the ``info``
contract of docs/design.md (``admissible_actions``, ``won``, ``task_id``, ``task_type``,
``invalid_action``). Subclasses implement two methods::

    class Echo(TextEnv):
        task_type = "echo"

        def _reset(self, options):
            self.target = str(self.np_random.integers(10))
            return f"Say {self.target}.", self.make_info(task_id=f"echo-{self.target}",
                                                          admissible_actions=list("0123456789"))

        def _step(self, action):
            won = action == self.target
            return "Correct." if won else "Wrong.", 10.0 * won, won, self.make_info(won=won)

and may implement ``_expert_action()``, the scripted expert behind the public
``expert_action()`` (which refuses with Gymnasium's ``ResetNeeded`` before the first reset).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.error import ResetNeeded
from gymnasium.vector.utils import create_shared_memory

#: Longest observation string (characters) that the observation space accepts. Generous on
#: purpose: a WebShop results page or a search <information> block can run to a few thousand.
MAX_OBSERVATION_LENGTH = 1_000_000
#: Longest action string (characters). Raw model output is cut by the policy's token budget
#: long before this; the bound exists so the space is well defined.
MAX_ACTION_LENGTH = 100_000

#: Characters ``TextSpace.sample()`` draws from (the space itself *contains* any character).
SAMPLE_CHARSET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 []<>/.,'-_"

#: Keys every ``info`` dict of a PaW env carries (docs/design.md, "Contracts between the layers").
INFO_KEYS = ("admissible_actions", "won", "task_id", "task_type", "invalid_action")


@dataclass(frozen=True)
class Task:
    """One item of an env's split: ``env.reset(options=task.options)`` starts it."""

    options: Mapping[str, Any]
    """The reset options that pick this task (e.g. ``{"goal_index": 17}``)."""
    task_type: str
    """Its ``info["task_type"]``, known before the episode starts (evaluation stratifies by it)."""


class TaskList(Sequence):
    """A split's tasks as a read-only sequence, built on access (WebShop's train split has
    hundreds of thousands): ``TaskList(len(goals), lambda i: Task({"goal_index": i}, ...))``."""

    def __init__(self, size: int, task: Callable[[int], Task]):
        self._size, self._task = int(size), task

    def __len__(self) -> int:
        return self._size

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._size))]
        if not -self._size <= index < self._size:
            raise IndexError(f"task index {index} is outside 0..{self._size - 1}")
        return self._task(index % self._size)

    def __repr__(self) -> str:
        return f"TaskList({self._size} tasks)"


class TextSpace(spaces.Text):
    """A ``gymnasium.spaces.Text`` that contains *any* ``str`` up to ``max_length`` characters.

    Gymnasium's ``Text`` only admits characters of its charset (alphanumerics by default), so
    real text with spaces, ``›``, ``™`` or accents would fail ``check_env``. Sampling still draws
    from :data:`SAMPLE_CHARSET` so ``action_space.sample()`` gives printable strings.
    """

    def __init__(self, max_length: int, *, min_length: int = 0, seed: int | None = None):
        super().__init__(max_length, min_length=min_length, charset=SAMPLE_CHARSET, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"TextSpace(min_length={self.min_length}, max_length={self.max_length})"

    def __eq__(self, other: Any) -> bool:
        return (isinstance(other, TextSpace) and self.min_length == other.min_length
                and self.max_length == other.max_length)


@create_shared_memory.register(TextSpace)
def _no_shared_memory(space: TextSpace, n: int = 1, ctx: Any = None):
    # Gymnasium's shared memory stores Text as charset indices: any character outside the
    # sample charset (a space, '›', an accent) would fail later with an opaque KeyError.
    raise ValueError("PaW text observations cannot be stored in shared memory: create the vector "
                     "env with gymnasium.vector.AsyncVectorEnv(env_fns, shared_memory=False)")


class TextEnv(gym.Env[str, str]):
    """Base class for text environments honouring the PaW ``info`` contract.

    Subclasses set :attr:`task_type` (or pass it per task through :meth:`make_info`) and
    implement :meth:`_reset` and :meth:`_step`. The base class handles seeding
    (``self.np_random`` is reset by ``reset(seed=...)``, so the same seed gives the same
    episode), fills in missing ``info`` keys, and turns an action outside the action space into
    the env's answer to an invalid action (its ``_step("")``) instead of an exception.

    Observation space: :class:`TextSpace` up to :data:`MAX_OBSERVATION_LENGTH` characters.
    Action space: :class:`TextSpace` up to :data:`MAX_ACTION_LENGTH` characters.
    """

    metadata = {"render_modes": ["ansi", "human"]}
    #: Default ``info["task_type"]`` for this env (the per-task evaluation key).
    task_type: str = "default"
    #: The ``split`` argument that holds the held-out tasks (what evaluation plays by
    #: default); None for an env without splits.
    held_out_split: str | None = None

    def __init__(self, render_mode: str | None = None):
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode={render_mode!r} is not supported; "
                             f"use one of {self.metadata['render_modes']} or None")
        self.render_mode = render_mode
        self.observation_space = TextSpace(MAX_OBSERVATION_LENGTH)
        self.action_space = TextSpace(MAX_ACTION_LENGTH)
        self._last_observation = ""
        self._last_info: dict[str, Any] = {}
        self._has_reset = False

    # -- to implement -----------------------------------------------------------------------
    def _reset(self, options: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        """Start a new episode using ``self.np_random``; return ``(observation, info)``."""
        raise NotImplementedError

    def _step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        """Apply a valid-typed action; return ``(observation, reward, terminated, info)``.

        An action the env cannot execute must leave the state unchanged and return
        ``info["invalid_action"] = True`` (never raise); the empty action ``""`` is one (the
        base class answers non-text and over-long actions with ``_step("")``).
        """
        raise NotImplementedError

    def _expert_action(self) -> str:
        """The scripted expert's next action from the current state (called after a reset)."""
        raise NotImplementedError(f"{type(self).__name__} has no scripted expert")

    def tasks(self) -> Sequence[Task] | None:
        """The tasks of this env's split, each started by ``reset(options=task.options)``, so
        that evaluation can play every one exactly once. None (the default) for an env whose
        tasks are generated from the reset seed without end (random maps, card deals):
        evaluation then plays consecutive seeds."""
        return None

    # -- Gymnasium API ----------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        observation, info = self._reset(dict(options or {}))
        info = self._complete_info(info)
        self._last_observation, self._last_info = observation, info
        self._has_reset = True
        return observation, info

    def step(self, action: str):
        if not isinstance(action, str) or not self.action_space.contains(action):
            # Not text, or longer than the action space allows: answered as the env answers
            # any action it cannot execute (ALFWorld's "Nothing happens.", search QA's
            # correction). The empty action is never executable, in every PaW env.
            observation, reward, terminated, info = self._step("")
            info = {**info, "invalid_action": True}
        else:
            observation, reward, terminated, info = self._step(action)
        info = self._complete_info({**self._carry_info(), **info})
        self._last_observation, self._last_info = observation, info
        return observation, float(reward), bool(terminated), False, info

    def expert_action(self) -> str:
        """The env's scripted expert's next action from the current state, as the env takes
        it (what ``paw-gym play --agent expert`` and the demos follow); ``ResetNeeded``
        before the first ``reset()``."""
        if not self._has_reset:
            raise ResetNeeded(f"{type(self).__name__}: call reset() before expert_action()")
        return self._expert_action()

    def render(self) -> str | None:
        if self.render_mode == "human":
            print(self._last_observation)
            return None
        if self.render_mode == "ansi":
            return self._last_observation
        return None

    # -- helpers ----------------------------------------------------------------------------
    def make_info(self, **fields: Any) -> dict[str, Any]:
        """An ``info`` dict with the contract's keys defaulted and ``fields`` applied."""
        return self._complete_info(fields)

    def _carry_info(self) -> dict[str, Any]:
        """Per-episode keys that stay the same from one step to the next."""
        keep = ("task_id", "task_type", "task_description", "admissible_actions")
        return {k: self._last_info[k] for k in keep if k in self._last_info}

    def _complete_info(self, info: Mapping[str, Any]) -> dict[str, Any]:
        full = dict(info)
        full.setdefault("admissible_actions", [])
        full.setdefault("won", False)
        full.setdefault("task_id", "")
        full.setdefault("task_type", self.task_type)
        full.setdefault("invalid_action", False)
        full["admissible_actions"] = list(full["admissible_actions"])
        full["won"] = bool(full["won"])
        full["invalid_action"] = bool(full["invalid_action"])
        return full

