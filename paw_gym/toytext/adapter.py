"""``TextAdapter``: any Gymnasium env with a discrete action space as a PaW text env.

The adapter keeps the wrapped env's dynamics and adds what a language agent needs: the state as
text (the env's ``render_mode="ansi"`` output with colour codes removed, or a function of
yours), named actions (``left``/``down``/``right``/``up`` instead of ``0..3``) and the PaW
``info`` contract (``admissible_actions``, ``won``, ``task_id``, ``task_type``,
``invalid_action``). A name that is not one of the actions is an invalid no-op, as in every PaW
env, so ``ParseAction``'s penalty applies.

    >>> import gymnasium as gym, paw_gym
    >>> env = paw_gym.TextAdapter("CliffWalking-v1")          # Gymnasium's own env, by id
    >>> text, info = env.reset(seed=0)
    >>> info["admissible_actions"]
    ['up', 'right', 'down', 'left']
    >>> text, reward, terminated, truncated, info = env.step("up")
    >>> env = gym.make("PaW/Text-v0", env_id="FrozenLake-v1", is_slippery=False)  # one line

Tabular envs (``env.unwrapped.P``, as Gymnasium's FrozenLake, CliffWalking and Taxi have) get
an optimal expert for free (value iteration, :mod:`paw_gym.toytext.planning`); any other env
gets one by passing ``expert=``.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from typing import Any, Callable, Sequence

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from paw_gym.core import TextEnv
from paw_gym.toytext.planning import greedy_policy

#: Action names of Gymnasium's toy-text envs, in action-index order (from their docs).
TOY_TEXT_ACTIONS: dict[str, tuple[str, ...]] = {
    "FrozenLakeEnv": ("left", "down", "right", "up"),
    "CliffWalkingEnv": ("up", "right", "down", "left"),
    "TaxiEnv": ("south", "north", "east", "west", "pickup", "dropoff"),
    "BlackjackEnv": ("stick", "hit"),
}

_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

Render = Callable[[gym.Env, Any], str]
Won = Callable[[Any, float, bool, dict], bool]


def ansi_text(env: gym.Env, observation: Any) -> str:
    """``env.render()`` in ``"ansi"`` mode, without colour codes and surrounding blank lines."""
    return _ANSI_ESCAPE.sub("", str(env.render())).strip("\n")


def reward_won(observation: Any, reward: float, terminated: bool, info: dict) -> bool:
    """The default success test: the episode ended with a positive reward."""
    return bool(terminated and reward > 0)


class TextAdapter(TextEnv, gym.utils.RecordConstructorArgs):
    """Wrap a Gymnasium env with a ``Discrete`` or ``MultiDiscrete`` action space as a text env.

    Args:
        env: the env, or a Gymnasium id to ``gym.make`` (with ``render_mode="ansi"`` when
            ``render`` is None, and ``env_kwargs``).
        render: ``render(env, observation) -> str``, the state as text; ``env`` is the wrapped
            env's ``unwrapped``. None: the env's ANSI rendering (it must have
            ``render_mode="ansi"``).
        actions: one name per action (``Discrete``), or one list of names per dimension
            (``MultiDiscrete``: an action is the names joined by spaces, e.g. ``"up fast"``).
            None: Gymnasium's names for its toy-text envs, else the action numbers.
        won: ``won(observation, reward, terminated, info) -> bool`` on the wrapped env's step.
            None: the episode ended with a positive reward.
        task_type: the per-task evaluation key, or ``task_type(env) -> str`` evaluated at
            reset. None: the env's id (or class name).
        task_description: the goal shown in the prompt, a string or ``f(env) -> str``.
        win_reward: if set, the reward is ``win_reward`` on a won step and 0 otherwise (PaW's
            10 × success); None keeps the env's own reward.
        expert: ``expert(env) -> action index or name`` for ``expert_action()``. None: the
            value-iteration planner when the env has a tabular model ``P``, else no expert.
        env_kwargs: constructor arguments when ``env`` is an id.

    ``task_id`` is the env id plus a hash of the first observation's text, so resets that
    produce the same start (the same map, the same deal) are the same task.
    """

    def __init__(self, env: gym.Env | str, *, render: Render | None = None,
                 actions: Sequence[str] | Sequence[Sequence[str]] | None = None,
                 won: Won | None = None, task_type: str | Callable[[gym.Env], str] | None = None,
                 task_description: str | Callable[[gym.Env], str] = "",
                 win_reward: float | None = None,
                 expert: Callable[[gym.Env], Any] | None = None,
                 render_mode: str | None = None, **env_kwargs: Any):
        gym.utils.RecordConstructorArgs.__init__(
            self, env=env, render=render, actions=actions, won=won, task_type=task_type,
            task_description=task_description, win_reward=win_reward, expert=expert,
            **env_kwargs)
        super().__init__(render_mode=render_mode)
        if isinstance(env, str):
            if env not in gym.registry:
                raise ValueError(f"unknown Gymnasium env id {env!r}")
            if render is None:
                _check_ansi(env, _declared_render_modes(env))  # before gym.make warns
                env_kwargs = {"render_mode": "ansi", **env_kwargs}
            env = gym.make(env, **env_kwargs)
            if render is None:
                _check_ansi(_name(env), env.metadata.get("render_modes"))
        elif env_kwargs:
            raise ValueError(f"constructor arguments {sorted(env_kwargs)} only apply when env "
                             "is an id; build the env with them yourself")
        if not isinstance(env, gym.Env):
            raise TypeError(f"env must be a gymnasium.Env or an env id, got {type(env).__name__}")
        if render is None and getattr(env, "render_mode", None) != "ansi":
            raise ValueError(f"{_name(env)} has render_mode={getattr(env, 'render_mode', None)!r}; "
                             "create it with render_mode='ansi' or pass render=<function>")
        self.env = env
        self.name = _name(env)
        self._render = render or ansi_text
        self._won = won or reward_won
        self._task_type = task_type
        self._task_description = task_description
        self.win_reward = win_reward
        self._expert = expert
        self._names, self._to_env = _action_table(env, actions)
        self._policy: np.ndarray | None = None
        self._truncated = False

    # -- Gymnasium API ----------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self._reset_seed = seed
        return super().reset(seed=seed, options=options)

    def step(self, action: str):
        observation, reward, terminated, truncated, info = super().step(action)
        return observation, reward, terminated, truncated or self._truncated, info

    def close(self):
        self.env.close()

    # -- TextEnv ----------------------------------------------------------------------------
    def _reset(self, options: dict[str, Any]):
        # The caller's seed goes straight to the wrapped env (same start as a plain Gymnasium
        # reset); without one, the next seed comes from this env's generator.
        seed = self._reset_seed
        if seed is None:
            seed = int(self.np_random.integers(2**31 - 1))
        observation, _ = self._start(seed, options)
        self._truncated = False
        self._policy = None
        text = self._render(self.env.unwrapped, observation)
        inner = self.env.unwrapped
        task_type = self._task_type(inner) if callable(self._task_type) else self._task_type
        description = (self._task_description(inner) if callable(self._task_description)
                       else self._task_description)
        digest = hashlib.sha1(text.encode()).hexdigest()[:12]
        self._task = dict(task_id=f"{self.name}:{digest}", task_type=task_type or self.name,
                          task_description=description)
        return text, self.make_info(admissible_actions=self._names, **self._task)

    def _start(self, seed: int, options: dict[str, Any]) -> tuple[Any, dict]:
        """Reset the wrapped env for a new task (subclasses draw layouts here)."""
        return self.env.reset(seed=seed, options=options or None)

    def _step(self, action: str):
        if action not in self._last_info["admissible_actions"]:
            return self._last_observation, 0.0, False, {"invalid_action": True}
        observation, reward, terminated, truncated, info = self.env.step(self._to_env[action])
        won = self._won(observation, float(reward), bool(terminated), info)
        if self.win_reward is not None:
            reward = self.win_reward if won else 0.0
        self._truncated = bool(truncated)
        over = terminated or truncated
        text = self._render(self.env.unwrapped, observation)
        return text, float(reward), bool(terminated), self.make_info(
            admissible_actions=[] if over else self._names, won=won, **self._task)

    # -- expert -----------------------------------------------------------------------------
    @property
    def has_expert(self) -> bool:
        """Whether :meth:`expert_action` can answer (an ``expert=`` or a tabular model)."""
        return self._expert is not None or _tabular(self.env.unwrapped)

    def _expert_action(self) -> str:
        """The expert's next action name (the optimal plan for tabular envs)."""
        inner = self.env.unwrapped
        if self._expert is not None:
            choice = self._expert(inner)
            return choice if isinstance(choice, str) else self._names[int(choice)]
        if not _tabular(inner):
            raise NotImplementedError(f"{self.name} has no tabular model P; pass "
                                      "TextAdapter(..., expert=fn) to give it an expert")
        if self._policy is None:
            self._policy = greedy_policy(inner.P)
        return self._names[int(self._policy[int(inner.s)])]


def _declared_render_modes(env_id: str) -> list | None:
    """The render modes the class of the Gymnasium id ``env_id`` declares (None: unknown)."""
    entry = gym.spec(env_id).entry_point
    try:
        creator = gym.envs.registration.load_env_creator(entry) if isinstance(entry, str) \
            else entry
    except (ImportError, AttributeError, ValueError):
        return None
    metadata = getattr(creator, "metadata", None)
    return metadata.get("render_modes") if isinstance(metadata, dict) else None


def _check_ansi(name: str, modes: list | None) -> None:
    """A ValueError when ``modes`` (declared) lack ``ansi``: the env would render through
    pygame (CartPole), which a text env cannot show."""
    if modes is not None and "ansi" not in modes:
        raise ValueError(f"{name} cannot show its state as text (its render modes: "
                         f"{', '.join(map(str, modes)) or 'none'}; PaW/Text-v0 needs 'ansi', as "
                         "Gymnasium's toy-text envs have); in Python, pass TextAdapter(env, "
                         "render=<function>)")


def make_text_env(env_id: str, **kwargs: Any) -> TextAdapter:
    """Entry point of ``gym.make("PaW/Text-v0", env_id=..., **kwargs)``: ``TextAdapter(env_id, ...)``."""
    return TextAdapter(env_id, **kwargs)


def _name(env: gym.Env) -> str:
    spec = getattr(env, "spec", None)
    return spec.id if spec is not None else type(env.unwrapped).__name__


def _tabular(env: gym.Env) -> bool:
    return isinstance(getattr(env, "P", None), dict) and hasattr(env, "s")


def _toy_text_names(env: gym.Env) -> tuple[str, ...] | None:
    # Through the class hierarchy, so subclasses of Gymnasium's envs keep their names.
    for cls in type(env.unwrapped).__mro__:
        if cls.__name__ in TOY_TEXT_ACTIONS:
            return TOY_TEXT_ACTIONS[cls.__name__]
    return None


def _action_table(env: gym.Env, actions) -> tuple[list[str], dict[str, Any]]:
    """Action names in order and ``name -> env action``."""
    space = env.action_space
    if isinstance(space, spaces.Discrete):
        numbers = [int(space.start) + i for i in range(int(space.n))]
        if actions is None:
            actions = _toy_text_names(env) or [str(n) for n in numbers]
        names = [str(a) for a in actions]
        if len(names) != len(numbers):
            raise ValueError(f"actions has {len(names)} names but {_name(env)}'s action space "
                             f"{space} has {len(numbers)} actions")
        table = dict(zip(names, numbers))
    elif isinstance(space, spaces.MultiDiscrete) and space.nvec.ndim == 1:
        sizes = [int(n) for n in space.nvec]
        starts = [int(s) for s in space.start]
        if actions is None:
            actions = [[str(s + i) for i in range(n)] for s, n in zip(starts, sizes)]
        per_dimension = [[str(a) for a in names] for names in actions]
        if [len(names) for names in per_dimension] != sizes:
            raise ValueError(f"actions must give {sizes} names per dimension for {space}, got "
                             f"{[len(names) for names in per_dimension]}")
        table = {}
        for combo in itertools.product(*(range(n) for n in sizes)):
            name = " ".join(per_dimension[d][i] for d, i in enumerate(combo))
            table[name] = np.array([s + i for s, i in zip(starts, combo)], dtype=space.dtype)
        names = list(table)
        if len(names) != int(np.prod(sizes)):
            raise ValueError("actions' names must be distinct within each dimension")
    else:
        raise ValueError(f"TextAdapter needs a Discrete or 1-D MultiDiscrete action space; "
                         f"{_name(env)} has {space}")
    if len(set(names)) != len(names) or any(not name.strip() for name in names):
        raise ValueError(f"action names must be distinct and non-empty, got {names}")
    return names, table
