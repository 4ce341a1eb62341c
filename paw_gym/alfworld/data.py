"""Where ALFWorld games come from, and the list of games of a split.

Source order: the ``data_dir`` argument, then ``$ALFWORLD_DATA`` (the official download, read
as is), then a cache of generated games (``$PAW_GYM_CACHE/alfworld`` or
``~/.cache/paw-gym/alfworld``), built on first use. Both layouts are ALFWorld's own:
``<root>/json_2.1.1/<train|valid_seen|valid_unseen>/<task>/<trial>/{game.tw-pddl,traj_data.json}``
(a root that already is ``json_2.1.1`` or a split folder works too).
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from paw_gym.alfworld.generate import (
    DATA_VERSION_DIR,
    GENERATOR_VERSION,
    IN_PROGRESS,
    MANIFEST,
    GenerationConfig,
    generate,
    split_dir,
)
from paw_gym.alfworld.scenes import SPLIT_DIRS, SPLITS
from paw_gym.alfworld.tasks import TASK_TYPES
from paw_gym.cache import alfworld_cache
from run_files.data_files import DataFileError

#: Games per task type and split in the cache built on first use (the CLI makes more).
DEFAULT_CACHE_PER_TYPE = 3
#: Seed of the cache built on first use.
DEFAULT_CACHE_SEED = 0


@dataclass(frozen=True)
class GameRecord:
    """One playable game of a split."""

    game_file: str
    """Path of ``game.tw-pddl``."""
    task_id: str
    """Game folder relative to the split folder (stable across machines)."""
    task_type: str
    """One of ALFWorld's six task types."""
    pddl_params: dict
    """``traj_data.json``'s ``pddl_params`` (targets of the goal)."""


def generated_root(per_type: int = DEFAULT_CACHE_PER_TYPE, seed: int = DEFAULT_CACHE_SEED) -> Path:
    return alfworld_cache() / f"generated-v{GENERATOR_VERSION}-n{per_type}-s{seed}"


@contextmanager
def _exclusive(lock_file: Path):
    """Hold an exclusive lock so parallel workers build a cache once, not N times."""
    import fcntl

    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ensure_generated(split: str, per_type: int = DEFAULT_CACHE_PER_TYPE,
                     seed: int = DEFAULT_CACHE_SEED, progress: bool = True) -> Path:
    """The generated data root holding a complete ``split`` (building it if needed)."""
    root = generated_root(per_type, seed)
    if (split_dir(root, split) / MANIFEST).exists():
        return root
    try:
        with _exclusive(root.parent / f"{root.name}.lock"):
            if split_dir(root, split).is_dir():  # an interrupted build of paw-gym's own cache
                (split_dir(root, split) / IN_PROGRESS).touch()
            generate(GenerationConfig(out=root, per_type=per_type, seed=seed, splits=(split,),
                                      progress=progress))
        return root
    except OSError as error:  # a read-only or misplaced cache: this process keeps its own copy
        fallback = _process_scratch() / root.name
        warnings.warn(f"the ALFWorld cache {str(root.parent)!r} is not writable "
                      f"({error.strerror or error}); generating the games into {str(fallback)!r}, "
                      "removed when this process exits", RuntimeWarning, stacklevel=2)
        if not (split_dir(fallback, split) / MANIFEST).exists():
            generate(GenerationConfig(out=fallback, per_type=per_type, seed=seed,
                                      splits=(split,), progress=progress))
        return fallback


@lru_cache(maxsize=None)
def _process_scratch() -> Path:
    """A temporary folder for this process, deleted at exit."""
    folder = Path(tempfile.mkdtemp(prefix="paw-gym-alfworld-"))
    atexit.register(shutil.rmtree, folder, True)
    return folder


def resolve_source(split: str, data_dir: str | Path | None = None,
                   per_type: int = DEFAULT_CACHE_PER_TYPE, seed: int = DEFAULT_CACHE_SEED,
                   progress: bool = True) -> tuple[str, Path]:
    """``(source name, split folder)``: ``"data_dir"``, ``"ALFWORLD_DATA"`` or ``"generated"``."""
    if split not in SPLITS:
        raise ValueError(f"split={split!r} is not one of {SPLITS}")
    if data_dir is not None:
        return "data_dir", find_split_dir(Path(data_dir), split)
    official = official_data_root(split)
    if official is not None:
        return "ALFWORLD_DATA", find_split_dir(official, split)
    root = ensure_generated(split, per_type, seed, progress)
    return "generated", split_dir(root, split)


#: Where ``import alfworld`` points ``$ALFWORLD_DATA`` when it is unset (it sets the variable).
ALFWORLD_DEFAULT_DATA = Path("~/.cache/alfworld").expanduser()


def official_data_root(split: str) -> Path | None:
    """``$ALFWORLD_DATA`` as a root of official games, or ``None`` when there is none.

    ``import alfworld`` sets ``$ALFWORLD_DATA`` to its default cache folder when the user did
    not; that default only counts once it holds the split's games (the official download).
    A folder the user named that lacks them is an error (``find_split_dir`` says so).
    """
    value = os.environ.get("ALFWORLD_DATA")
    if not value:
        return None
    root = Path(value).expanduser()
    if root.resolve() == ALFWORLD_DEFAULT_DATA.resolve():
        try:
            find_split_dir(root, split)
        except FileNotFoundError:
            return None
    return root


def find_split_dir(root: Path, split: str) -> Path:
    """The folder of ``split`` under ``root`` in ALFWorld's layout."""
    name = SPLIT_DIRS[split]
    for candidate in (root / DATA_VERSION_DIR / name, root / name):
        if candidate.is_dir():
            return candidate
    if root.is_dir() and root.name == name:
        return root
    raise FileNotFoundError(
        f"no {split!r} games under {str(root)!r}: expected {root / DATA_VERSION_DIR / name} "
        f"(ALFWorld's layout: json_2.1.1/{'|'.join(SPLIT_DIRS.values())}/<task>/<trial>/game.tw-pddl)")


def list_games(folder: Path, task_types: tuple[str, ...] = TASK_TYPES) -> list[GameRecord]:
    """Solvable games of the given task types under ``folder``, sorted by task id.

    Skips what ALFWorld's own loader skips: movable-receptacle and sliced tasks, folders without
    ``traj_data.json`` or ``game.tw-pddl``, and games not marked ``solvable``.
    """
    from paw_gym.progress import progress_bar

    records = []
    traj_files = sorted(folder.rglob("traj_data.json"))
    # The official train split has ~3.5k games: reading them takes a while, show it.
    for traj_file in progress_bar(traj_files, desc=f"reading ALFWorld games in {folder.name}",
                                  unit="game", disable=len(traj_files) < 500):
        trial = traj_file.parent
        game_file = trial / "game.tw-pddl"
        task_id = trial.relative_to(folder).as_posix()
        if "movable" in task_id or "Sliced" in task_id or not game_file.exists():
            continue
        traj = _read_json_object(traj_file)
        if traj.get("task_type") not in task_types:
            continue
        game = _read_json_object(game_file)
        if not game.get("solvable", False):
            continue
        _check_game(game_file, game)
        records.append(GameRecord(str(game_file), task_id, traj["task_type"], traj["pddl_params"]))
    return records


def _read_json_object(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise _refused(path, f"{path} is not valid JSON ({error})") from None
    if not isinstance(data, dict):
        raise _refused(path, f"{path} must hold a JSON object, got {type(data).__name__}")
    return data


def _check_game(path: Path, game: dict) -> None:
    """A game whose PDDL cannot parse, or whose grammar is not the stock one, fails when the
    games are listed, naming the file, rather than at the reset that happens to draw it."""
    for key in ("pddl_domain", "pddl_problem", "grammar"):
        if not isinstance(game.get(key), str) or not game[key].strip():
            raise _refused(path, f"{path}: {key!r} is missing or not text")
    for key in ("pddl_domain", "pddl_problem"):
        depth = 0
        for line in game[key].splitlines():
            for char in line.split(";", 1)[0]:  # ';' starts a PDDL comment
                depth += {"(": 1, ")": -1}.get(char, 0)
                if depth < 0:
                    break
            if depth < 0:
                break
        if depth != 0:
            raise _refused(path, f"{path}: {key!r} is not valid PDDL (unbalanced parentheses)")
    from paw_gym.alfworld.engine import is_stock_grammar

    if not is_stock_grammar(game["grammar"]):
        raise _refused(path, f"{path}: 'grammar' is not ALFWorld's stock alfred.twl2 with a "
                       "plain task sentence; TextWorld would run its expressions as code, so the "
                       "game is refused")


def _refused(path: Path, message: str) -> DataFileError:
    """A game file refused as data (every command prints it as one line)."""
    return DataFileError(path, 0, message, message=message)
