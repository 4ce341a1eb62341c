"""``PaW/FrozenLake-v0``, ``PaW/CliffWalking-v0``, ``PaW/Taxi-v0``: Gymnasium's grid worlds as
text tasks with a new layout per seeded reset and held-out layouts.

Each is a :class:`~paw_gym.toytext.adapter.TextAdapter` over Gymnasium's own env class (its
dynamics unchanged) with

- a layout drawn per reset from the reset seed: a random FrozenLake map
  (``generate_random_map``), a random CliffWalking grid (size and extra cliff cells), a random
  Taxi start (taxi cell, passenger depot, destination);
- a ``train``/``test``/``all`` split: a layout is held out when a SHA-1 of its first observation is ≡ 0
  mod 5 (Taxi: when the destination is the depot diagonally opposite the passenger), and each
  split redraws until the layout is its own, so ``test`` layouts never occur in ``train``;
- the state as a text grid with a legend (cells separated by spaces, so every cell is its own
  word to a tokenizer), and PaW's reward: 10 on success, else 0;
- an optimal expert (value iteration on the env's exact model ``P``).

    >>> import gymnasium as gym, paw_gym
    >>> env = gym.make("PaW/FrozenLake-v0", split="test", sizes=(4,))
    >>> text, info = env.reset(seed=0)
    >>> print(text)                                  # doctest: +SKIP
    P _ _ _
    O _ O _
    _ _ _ _
    _ _ _ G
    >>> env.step(env.unwrapped.expert_action())      # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

import numpy as np
from gymnasium.envs.toy_text.cliffwalking import CliffWalkingEnv
from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv, generate_random_map
from gymnasium.envs.toy_text.taxi import TaxiEnv

from paw_gym.toytext.adapter import TextAdapter
from paw_gym.toytext.planning import greedy_policy, plan_length

WIN_REWARD = 10.0
SPLITS = ("train", "test", "all")
#: A toy-text env's ``split`` argument (declared, so commands check it before building one).
Split = Literal["train", "test", "all"]
#: Held-out share of layouts: a layout is in ``test`` when its SHA-1 is ≡ 0 mod this.
TEST_MODULUS = 5


def is_test_layout(text: str) -> bool:
    """Whether a layout (its text) belongs to the held-out ``test`` split."""
    return int(hashlib.sha1(text.encode()).hexdigest(), 16) % TEST_MODULUS == 0


def in_split(split: str, held_out: bool) -> bool:
    """Whether a layout (held out or not) may be drawn by ``split``."""
    return split == "all" or (split == "test") == held_out


def check_split(split: str) -> None:
    """A ``ValueError`` naming ``split`` unless it is one of :data:`SPLITS`."""
    if split not in SPLITS:
        raise ValueError(f"split {split!r} is not one of {list(SPLITS)}")


# -- FrozenLake -------------------------------------------------------------------------------
FROZEN_LAKE_SYMBOLS = {"S": "_", "F": "_", "H": "O", "G": "G"}


def frozen_lake_text(env: FrozenLakeEnv, observation: Any = None) -> str:
    """The map with ``P`` you, ``_`` ice, ``O`` hole, ``G`` goal (the start is ice)."""
    rows = [[FROZEN_LAKE_SYMBOLS[c.decode()] for c in row] for row in env.desc]
    row, col = divmod(int(env.s), env.ncol)
    rows[row][col] = "P"
    return "\n".join(" ".join(cells) for cells in rows)


class FrozenLakeText(TextAdapter):
    """Reach the goal on a random frozen lake without falling into a hole.

    Args:
        split: ``train``, ``test`` (held-out maps) or ``all``.
        sizes: map sides a task draws from; ``task_type`` is ``"4x4"`` (``"4x4 slippery"``).
        is_slippery: Gymnasium's slippery ice (a move goes sideways with probability 2/3).
        frozen_prob: probability that a cell is ice in ``generate_random_map``.
    """

    held_out_split = "test"

    def __init__(self, split: Split = "train", sizes: tuple[int, ...] = (4,),
                 is_slippery: bool = False, frozen_prob: float = 0.8,
                 render_mode: str | None = None):
        check_split(split)
        sizes = tuple(int(n) for n in sizes)
        if not sizes or not all(3 <= n <= 12 for n in sizes):
            raise ValueError(f"sizes {sizes!r} must be map sides in [3, 12]")
        if not 0.5 <= frozen_prob < 1.0:
            raise ValueError(f"frozen_prob={frozen_prob!r} must be in [0.5, 1)")
        self.split, self.sizes = split, sizes
        self.is_slippery, self.frozen_prob = bool(is_slippery), float(frozen_prob)
        super().__init__(FrozenLakeEnv(map_name="4x4", is_slippery=self.is_slippery),
                         render=frozen_lake_text, task_type=self._kind, win_reward=WIN_REWARD,
                         task_description="reach the goal G without falling into a hole O",
                         render_mode=render_mode)

    def _kind(self, env: FrozenLakeEnv) -> str:
        return f"{env.nrow}x{env.ncol}" + (" slippery" if self.is_slippery else "")

    def _start(self, seed: int, options: dict[str, Any]):
        rng = np.random.default_rng(seed)
        size = int(rng.choice(self.sizes))
        while True:
            desc = generate_random_map(size, self.frozen_prob, seed=int(rng.integers(2**31 - 1)))
            self.env = FrozenLakeEnv(desc=desc, is_slippery=self.is_slippery)
            start = self.env.reset(seed=seed)
            if in_split(self.split, is_test_layout(frozen_lake_text(self.env))):
                return start


# -- CliffWalking -----------------------------------------------------------------------------
class RandomCliffWalking(CliffWalkingEnv):
    """Gymnasium's CliffWalking on a ``shape`` grid with extra ``cliff`` cells.

    Start bottom-left, goal bottom-right, the bottom row between them is cliff (as in
    Gymnasium's 4x12 map); stepping onto cliff costs −100 and returns to the start.
    """

    def __init__(self, shape: tuple[int, int], cliff: np.ndarray, is_slippery: bool = False):
        super().__init__(is_slippery=is_slippery)
        self.shape = tuple(shape)
        self.nS = int(np.prod(self.shape))
        self.start_state_index = int(np.ravel_multi_index((self.shape[0] - 1, 0), self.shape))
        self._cliff = np.asarray(cliff, dtype=bool)
        self.P = {s: {a: self._calculate_transition_prob(np.unravel_index(s, self.shape), a)
                      for a in range(self.nA)} for s in range(self.nS)}
        self.initial_state_distrib = np.zeros(self.nS)
        self.initial_state_distrib[self.start_state_index] = 1.0
        self.observation_space = type(self.observation_space)(self.nS)


def cliff_walking_text(env: RandomCliffWalking, observation: Any = None) -> str:
    """The grid with ``P`` you, ``_`` ground, ``C`` cliff, ``G`` goal."""
    return _cliff_grid(env._cliff, np.unravel_index(int(env.s), env.shape))


def _cliff_grid(cliff: np.ndarray, player: tuple[int, int]) -> str:
    rows, cols = cliff.shape
    cells = [["C" if cliff[r, c] else "_" for c in range(cols)] for r in range(rows)]
    cells[rows - 1][cols - 1] = "G"
    cells[player[0]][player[1]] = "P"
    return "\n".join(" ".join(line) for line in cells)


class CliffWalkingText(TextAdapter):
    """Walk from the bottom-left corner to the goal without stepping onto the cliff.

    Args:
        split: ``train``, ``test`` (held-out grids) or ``all``.
        shapes: ``(rows, columns)`` a task draws from; ``task_type`` is ``"4x6"`` etc.
        extra_cliffs: how many cliff cells a task adds above the bottom row (drawn from this
            range, inclusive; a layout with no safe path is redrawn).
    """

    held_out_split = "test"

    def __init__(self, split: Split = "train",
                 shapes: tuple[tuple[int, int], ...] = ((3, 5), (4, 6)),
                 extra_cliffs: tuple[int, int] = (0, 2), render_mode: str | None = None):
        check_split(split)
        shapes = tuple((int(r), int(c)) for r, c in shapes)
        if not shapes or not all(2 <= r <= 12 and 3 <= c <= 16 for r, c in shapes):
            raise ValueError(f"shapes {shapes!r} must be (rows in [2, 12], columns in [3, 16])")
        low, high = (int(n) for n in extra_cliffs)
        if not 0 <= low <= high <= 6:
            raise ValueError(f"extra_cliffs {extra_cliffs!r} must be a range (low, high) "
                             "with 0 <= low <= high <= 6")
        self.split, self.shapes, self.extra_cliffs = split, shapes, (low, high)
        super().__init__(RandomCliffWalking((4, 12), _bottom_cliff((4, 12))),
                         render=cliff_walking_text, task_type=self._kind,
                         task_description="reach the goal G without stepping onto the cliff C",
                         won=reached_goal, win_reward=WIN_REWARD, render_mode=render_mode)

    @staticmethod
    def _kind(env: RandomCliffWalking) -> str:
        return f"{env.shape[0]}x{env.shape[1]}"

    def _start(self, seed: int, options: dict[str, Any]):
        rng = np.random.default_rng(seed)
        shape = self.shapes[int(rng.integers(len(self.shapes)))]
        rows, cols = shape
        while True:
            cliff = _bottom_cliff(shape)
            free = [(r, c) for r in range(rows - 1) for c in range(cols)]
            count = min(int(rng.integers(self.extra_cliffs[0], self.extra_cliffs[1] + 1)),
                        len(free) - 1)
            for index in rng.choice(len(free), size=count, replace=False):
                cliff[free[index]] = True
            if _has_safe_path(cliff) and in_split(
                    self.split, is_test_layout(_cliff_grid(cliff, (rows - 1, 0)))):
                break
        self.env = RandomCliffWalking(shape, cliff)
        return self.env.reset(seed=seed)


def reached_goal(observation: Any, reward: float, terminated: bool, info: dict) -> bool:
    """CliffWalking ends only at the goal (its reward there is −1 like any step)."""
    return bool(terminated)


def _has_safe_path(cliff: np.ndarray) -> bool:
    """Whether the goal (bottom-right) is reachable from the start (bottom-left) off the cliff."""
    rows, cols = cliff.shape
    start, goal = (rows - 1, 0), (rows - 1, cols - 1)
    seen, frontier = {start}, [start]
    while frontier:
        r, c = frontier.pop()
        for nr, nc in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1)):
            if 0 <= nr < rows and 0 <= nc < cols and not cliff[nr, nc] and (nr, nc) not in seen:
                seen.add((nr, nc))
                frontier.append((nr, nc))
    return goal in seen


def _bottom_cliff(shape: tuple[int, int]) -> np.ndarray:
    cliff = np.zeros(shape, dtype=bool)
    cliff[shape[0] - 1, 1:-1] = True
    return cliff


# -- Taxi -------------------------------------------------------------------------------------
TAXI_DEPOTS = ("R", "G", "Y", "B")


def taxi_text(env: TaxiEnv, observation: Any = None) -> str:
    """Gymnasium's Taxi map with ``T`` for the taxi, then where the passenger is and goes."""
    taxi_row, taxi_col, passenger, destination = env.decode(int(env.s))
    grid = [[cell.decode() for cell in row] for row in env.desc]
    grid[taxi_row + 1][2 * taxi_col + 1] = "T"
    where = ("in the taxi" if passenger == 4 else f"at {TAXI_DEPOTS[passenger]}")
    return ("\n".join("".join(line) for line in grid) +
            f"\nPassenger: {where}. Destination: {TAXI_DEPOTS[destination]}.")


class TaxiText(TextAdapter):
    """Pick the passenger up at one depot and drop them off at another (Gymnasium's Taxi map).

    Args:
        split: ``train``, ``test`` or ``all``. ``test`` holds out the four passenger →
            destination routes between diagonally opposite depots (R→B, B→R, G→Y, Y→G);
            ``train`` has the other eight.

    ``task_type`` is the optimal plan's length: ``"1-10 steps"``, ``"11-14 steps"``,
    ``"15+ steps"``.
    """

    held_out_split = "test"

    def __init__(self, split: Split = "train", render_mode: str | None = None):
        check_split(split)
        self.split = split
        super().__init__(TaxiEnv(), render=taxi_text, task_type=self._kind,
                         task_description="pick up the passenger and drop them off at the "
                         "destination", win_reward=WIN_REWARD, render_mode=render_mode)
        self._taxi_policy = greedy_policy(self.env.P)

    def _kind(self, env: TaxiEnv) -> str:
        steps = plan_length(env.P, self._taxi_policy, int(env.s))
        return "1-10 steps" if steps <= 10 else "11-14 steps" if steps <= 14 else "15+ steps"

    def _start(self, seed: int, options: dict[str, Any]):
        rng = np.random.default_rng(seed)
        draw = seed
        while True:
            observation, info = self.env.reset(seed=draw)
            _, _, passenger, destination = self.env.decode(int(self.env.s))
            if in_split(self.split, passenger + destination == 3):
                return observation, info
            draw = int(rng.integers(2**31 - 1))

    def _reset(self, options: dict[str, Any]):
        text, info = super()._reset(options)
        self._policy = self._taxi_policy  # one fixed map: plan once
        return text, info
