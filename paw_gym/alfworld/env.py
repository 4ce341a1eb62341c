"""``PaW/ALFWorld-v0``: ALFWorld's text household tasks on the real TextWorld/PDDL engine.

Observations are ALFWorld's own text (the intro with ``Your task is to: ...`` at reset, the
engine's feedback after each step); actions are bare ALFWorld commands (``go to countertop 1``).
Reward is 10 when the task is won (the episode then terminates), 0 otherwise. A command that is
not admissible changes nothing: ALFWorld answers ``Nothing happens.``, reward 0 and
``info["invalid_action"] = True``. A copy of the env (``pickle``, ``copy.deepcopy``) holds its
episode as the game and the commands played: the engine (a ctypes handle) is not copied but
loaded again, and the commands replayed, so the copy goes on exactly as the original would.

Example:
    >>> import gymnasium as gym, paw_gym
    >>> env = gym.make("PaW/ALFWorld-v0", split="train")            # doctest: +SKIP
    >>> obs, info = env.reset(seed=0)                                 # doctest: +SKIP
    >>> obs, reward, terminated, truncated, info = env.step(info["admissible_actions"][0])  # doctest: +SKIP
    >>> env.unwrapped.expert_action()                                 # doctest: +SKIP
    'take mug 1 from countertop 2'
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, Mapping

from paw_gym.alfworld.data import (
    DEFAULT_CACHE_PER_TYPE,
    DEFAULT_CACHE_SEED,
    GameRecord,
    list_games,
    resolve_source,
)
from paw_gym.alfworld.engine import NOTHING_HAPPENS
from paw_gym.alfworld.expert import EpisodeExpert
from paw_gym.alfworld.tasks import TASK_TYPES
from paw_gym.core import Task, TaskList, TextEnv

#: Reward for a won episode (the paper's setting: 10 x success).
WIN_REWARD = 10.0
_TASK_PREFIX = "Your task is to: "


def task_sentence(intro: str) -> str:
    """The goal of an ALFWorld intro, without ``Your task is to:`` and the final period."""
    _, _, tail = intro.rpartition(_TASK_PREFIX)
    return tail.strip().rstrip(".").strip()


def _require_engine() -> None:
    import importlib.util

    missing = [m for m in ("alfworld", "textworld", "fast_downward") if importlib.util.find_spec(m) is None]
    if missing:
        raise ImportError(
            f"PaW/ALFWorld-v0 needs {', '.join(missing)}: pip install 'paw-gym[alfworld]' "
            "(fast-downward is compiled by pip; run it with your environment's bin/ first on PATH)")


class ALFWorldEnv(TextEnv):
    """ALFWorld's household tasks, text only, on the TextWorld PDDL engine.

    Args:
        split: ``"train"``, ``"eval_in_distribution"`` (ALFWorld's valid_seen) or
            ``"eval_out_of_distribution"`` (valid_unseen: held-out rooms).
        data_dir: a data root in ALFWorld's layout (``json_2.1.1/<split dir>/...``). Without it,
            ``$ALFWORLD_DATA`` (the official download) is used, else a cache of generated games
            (``$PAW_GYM_CACHE`` or ``~/.cache/paw-gym``), built on first use.
        task_types: keep only these of the six task types (default: all).
        num_games: keep only the first ``num_games`` games of the split (sorted by task id).
        generated_per_type: games per task type in the generated cache.
        generated_seed: seed of the generated cache.
        cache_size: games kept parsed in memory (resetting into a cached game is fast).
        progress: show a progress bar while the generated cache is built.
        render_mode: ``"ansi"`` or ``"human"`` (prints the last observation).
    """

    held_out_split = "eval_out_of_distribution"

    def __init__(self, split: Literal["train", "eval_in_distribution",
                                   "eval_out_of_distribution"] = "train",
                 data_dir: str | Path | None = None,
                 task_types: Sequence[str] | None = None, num_games: int | None = None,
                 generated_per_type: int = DEFAULT_CACHE_PER_TYPE,
                 generated_seed: int = DEFAULT_CACHE_SEED, cache_size: int = 64,
                 progress: bool = True, render_mode: str | None = None):
        super().__init__(render_mode=render_mode)
        _require_engine()
        types = tuple(task_types) if task_types else TASK_TYPES
        unknown = sorted(set(types) - set(TASK_TYPES))
        if unknown:
            raise ValueError(f"task_types {unknown} are not ALFWorld task types; use {TASK_TYPES}")
        if num_games is not None and num_games < 1:
            raise ValueError(f"num_games={num_games} must be at least 1 (or None for all)")
        self.split = split
        self.source, self.split_dir = resolve_source(split, data_dir, generated_per_type,
                                                     generated_seed, progress)
        games = list_games(self.split_dir, types)
        if num_games is not None:
            games = games[:num_games]
        if not games:
            raise FileNotFoundError(f"no solvable ALFWorld games of types {list(types)} under "
                                    f"{str(self.split_dir)!r}")
        self.games: list[GameRecord] = games
        self._cache_size = cache_size
        self._engine = None
        self._expert = None
        self.game: GameRecord | None = None
        #: The expert's seed and every command of the episode so far (what a copy replays).
        self._expert_seed = 0
        self._commands: list[str] = []

    def __repr__(self) -> str:
        return (f"ALFWorldEnv(split={self.split!r}, source={self.source!r}, games={len(self.games)}, "
                f"dir={str(self.split_dir)!r})")

    __str__ = __repr__

    @property
    def engine(self):
        if self._engine is None:
            from paw_gym.alfworld.engine import ALFWorldEngine

            self._engine = ALFWorldEngine(cache_size=self._cache_size)
        return self._engine

    # -- TextEnv ----------------------------------------------------------------------------
    def tasks(self) -> TaskList:
        """Every game of the split, by ``game_index``."""
        return TaskList(len(self.games), lambda i: Task({"game_index": i}, self.games[i].task_type))

    def _reset(self, options: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        self.game = self._pick_game(options)
        self._expert_seed = int(self.np_random.integers(2**31))
        self._commands = []
        intro = self._start_episode()
        engine = self.engine
        return intro, self.make_info(
            task_description=task_sentence(intro), task_type=self.game.task_type,
            task_id=self.game.task_id, admissible_actions=engine.admissible_commands,
            won=engine.won, data_source=self.source, game_file=self.game.game_file)

    def _step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        if self.game is None:
            raise RuntimeError("call reset() before step()")
        command = action.strip()
        self._commands.append(command)
        feedback, valid = self._play(command)
        engine = self.engine
        info = {"admissible_actions": engine.admissible_commands, "won": engine.won,
                "invalid_action": not valid}
        return feedback, WIN_REWARD * engine.won, engine.won, info

    def _start_episode(self) -> str:
        """Load ``self.game`` into the engine and start its expert; returns the intro."""
        engine = self.engine
        intro = engine.reset(self.game.game_file)
        self._expert = EpisodeExpert(self.game.game_file, self._walkthrough(),
                                     self._expert_seed, engine.name_facts)
        self._expert.record("", True, intro, engine.admissible_commands, engine.raw_facts(),
                            engine.won)
        return intro

    def _play(self, command: str) -> tuple[str, bool]:
        """One command in the engine, told to the expert; returns the feedback and whether it
        was admissible."""
        engine = self.engine
        valid = command in engine.admissible_commands
        if valid:
            feedback, _ = engine.step(command)
            facts = engine.raw_facts()
        else:  # what ALFWorld answers; the state (and so the facts) stay as they were
            feedback, facts = NOTHING_HAPPENS, self._expert.last_facts
        self._expert.record(command, valid, feedback, engine.admissible_commands, facts,
                            engine.won)
        return feedback, valid

    def __getstate__(self) -> dict[str, Any]:
        """The env without its engine and expert (ctypes handles, no Python objects to copy);
        :meth:`__setstate__` makes them again from the game and the commands played."""
        return {**self.__dict__, "_engine": None, "_expert": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self.game is not None:  # mid-episode: the same game, the same commands
            self._start_episode()
            for command in self._commands:
                self._play(command)

    # -- expert -----------------------------------------------------------------------------
    def _expert_action(self) -> str:
        """The next command of an expert from the current state (see :mod:`.expert`)."""
        return self._expert.next_action()

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None
        super().close()

    # -- internals --------------------------------------------------------------------------
    def _pick_game(self, options: Mapping[str, Any]) -> GameRecord:
        if "task_id" in options:
            for game in self.games:
                if game.task_id == options["task_id"]:
                    return game
            raise ValueError(f"options['task_id']={options['task_id']!r} is not a game of this split")
        if "game_index" in options:
            index = int(options["game_index"])
            if not 0 <= index < len(self.games):
                raise ValueError(f"options['game_index']={index} is outside 0..{len(self.games) - 1}")
            return self.games[index]
        return self.games[int(self.np_random.integers(len(self.games)))]

    def _walkthrough(self) -> list[str] | None:
        return self.engine.game.data.get("walkthrough") or None
