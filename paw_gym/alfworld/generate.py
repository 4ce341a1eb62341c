"""Generating ALFWorld games offline, in ALFWorld's own data layout, verified in the engine.

Layout written under ``out`` (the same as the official download, so one loader reads both)::

    out/json_2.1.1/<train|valid_seen|valid_unseen>/<task>-<Obj>-None-<Recep>-<scene>/<trial>/
        game.tw-pddl      # pddl_domain, grammar, pddl_problem, solvable, walkthrough
        traj_data.json    # task_type, pddl_params, scene

Every game is replayed in the engine before it is marked ``solvable: true``: each walkthrough
command must be admissible, the game must not be won before the last one and must be won after it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from paw_gym.alfworld import pddl
from paw_gym.alfworld.scenes import SPLIT_DIRS, SPLITS, load_scene, scene_numbers
from paw_gym.alfworld.tasks import TASK_TYPES, NoTaskHere, TaskSpec, sample_task

#: Bumped whenever generated games change, so caches built by older code are not reused.
GENERATOR_VERSION = 1
#: Folder between the data root and the split folders in ALFWorld's layout.
DATA_VERSION_DIR = "json_2.1.1"
#: Written last in a split folder: its presence means the split is complete.
MANIFEST = "paw_gym_manifest.json"
#: Written into a split folder while its games are generated: a rerun may replace the folder.
IN_PROGRESS = "paw_gym_generating"
#: Scenes tried for one game before giving up on a task type in a split.
MAX_ATTEMPTS = 200


@dataclass
class GenerationConfig:
    """What ``paw-gym gen-alfworld`` builds."""

    out: Path
    """Data root; games go to ``out/json_2.1.1/<split dir>/...``."""
    per_type: int = 5
    """Games per task type and split."""
    seed: int = 0
    """Seed of every random choice (scene, objects, placements, goal sentence)."""
    splits: tuple[str, ...] = SPLITS
    """Splits to build (``train``, ``eval_in_distribution``, ``eval_out_of_distribution``)."""
    task_types: tuple[str, ...] = TASK_TYPES
    """Task types to build (ALFWorld's six by default)."""
    progress: bool = True
    """Show a tqdm progress bar."""


@dataclass
class GenerationReport:
    written: dict[str, int] = field(default_factory=dict)
    """split -> games written and verified."""
    rejected: int = 0
    """Sampled games that failed verification (resampled)."""


def split_dir(root: Path, split: str) -> Path:
    return Path(root) / DATA_VERSION_DIR / SPLIT_DIRS[split]


def is_complete(config: GenerationConfig, split: str) -> bool:
    """Whether ``split`` was fully generated with the same seed, size and task types."""
    manifest = split_dir(config.out, split) / MANIFEST
    if not manifest.exists():
        return False
    try:
        made = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # damaged: generated again
        return False
    if not isinstance(made, dict):
        return False
    made_with = (made.get("generator_version"), made.get("seed"), made.get("per_type"),
                 made.get("task_types"))
    return made_with == (GENERATOR_VERSION, config.seed, config.per_type, list(config.task_types))


def check_replaceable(config: GenerationConfig, split: str) -> None:
    """``FileExistsError`` when the folder of ``split`` holds games paw-gym did not generate
    (no manifest, no in-progress marker: e.g. the official ALFWorld data placed there), which
    generating would delete."""
    root = split_dir(config.out, split)
    if root.is_dir() and any(root.iterdir()) and not (root / MANIFEST).exists() \
            and not (root / IN_PROGRESS).exists():
        raise FileExistsError(f"{root} holds games paw-gym did not generate (the official "
                              "ALFWorld data?); generating would replace them, so give "
                              "another --output_dir")


def _scenes_for(split: str, task_type: str) -> list[int]:
    import alfworld.gen.constants as constants

    rooms = constants.GOALS_VALID[task_type]
    return [n for n in scene_numbers(split) if load_scene(n).room in rooms]


def verify(engine, game_file: Path, commands: list[str]) -> str | None:
    """Replay ``commands`` in the engine; returns why the game fails, or None if it is won."""
    engine.forget(game_file)
    engine.reset(game_file)
    if engine.won:
        return "won before the first step"
    for i, command in enumerate(commands):
        if command not in engine.admissible_commands:
            return f"step {i}: {command!r} is not admissible"
        engine.step(command)
        if engine.won != (i == len(commands) - 1):
            return f"step {i}: won={engine.won} after {command!r}"
    return None


def _write_game(folder: Path, task: TaskSpec, trial: str, description: str, solvable: bool) -> Path:
    from run_files.outputs import write_text_atomically  # recorded in the split's manifest

    folder.mkdir(parents=True, exist_ok=True)
    game = pddl.game_json(task, trial, description, solvable)
    game_file = folder / "game.tw-pddl"
    write_text_atomically(game_file, json.dumps(game))
    write_text_atomically(folder / "traj_data.json",
                          json.dumps(pddl.traj_json(task, description, trial), indent=1))
    return game_file


def generate_split(config: GenerationConfig, split: str, engine=None, bar=None) -> tuple[int, int]:
    """Write ``config.per_type`` verified games per task type for ``split``.

    Returns ``(written, rejected)``. An existing complete split (manifest present) is kept.
    """
    from run_files.outputs import claim_folder

    root = split_dir(config.out, split)
    if is_complete(config, split):
        return 0, 0
    check_replaceable(config, split)
    # paw-gym's own split (an interrupted run, or other settings) is replaced: the files the
    # output guard recorded go, anything else stays.
    with claim_folder(root, "gen-alfworld", overwrite=True, writes=SPLIT_FILES) as output:
        return _generate_split(config, split, root, output, engine, bar)


#: Where generating writes in a split's folder (the output guard refuses a user's entry there,
#: ``run_files.outputs``; each file is recorded as it is written).
SPLIT_FILES = (MANIFEST, IN_PROGRESS, "*/trial_paw_*/game.tw-pddl", "*/trial_paw_*/traj_data.json")


def _generate_split(config: GenerationConfig, split: str, root: Path, output, engine,
                    bar) -> tuple[int, int]:
    """:func:`generate_split` into its claimed ``root``."""
    from paw_gym.alfworld.engine import ALFWorldEngine

    from run_files.outputs import write_text_atomically

    write_text_atomically(root / IN_PROGRESS, "")
    own_engine = engine is None
    engine = engine or ALFWorldEngine(cache_size=1)
    written = rejected = 0
    games = []
    try:
        for t, task_type in enumerate(config.task_types):
            scenes = _scenes_for(split, task_type)
            if not scenes:
                raise ValueError(f"no {split} scene can host {task_type}")
            rng = np.random.default_rng([config.seed, SPLITS.index(split), TASK_TYPES.index(task_type)])
            for k in range(config.per_type):
                for _ in range(MAX_ATTEMPTS):
                    scene = load_scene(scenes[int(rng.integers(len(scenes)))])
                    try:
                        task = sample_task(scene, task_type, rng)
                    except NoTaskHere:
                        continue
                    description = pddl.task_description(task, rng)
                    name = f"{task_type}-{task.object_target}-None-" \
                           f"{task.parent_target or task.toggle_target}-{scene.number}"
                    trial = f"trial_paw_s{config.seed}_{k:05d}"
                    folder = root / name / trial
                    game_file = _write_game(folder, task, trial, description, solvable=False)
                    problem = verify(engine, game_file, pddl.walkthrough(task))
                    if problem is None:
                        _write_game(folder, task, trial, description, solvable=True)
                        games.append(str(folder.relative_to(root)))
                        written += 1
                        break
                    rejected += 1
                    output.remove(folder.relative_to(root).as_posix())
                else:
                    raise RuntimeError(f"could not generate a winnable {task_type} game in {split} "
                                       f"after {MAX_ATTEMPTS} attempts")
                if bar is not None:
                    bar.update(1)
    finally:
        if own_engine:
            engine.close()
    manifest = {"generator_version": GENERATOR_VERSION, "seed": config.seed,
                "per_type": config.per_type, "task_types": list(config.task_types),
                "games": games, "rejected": rejected}
    write_text_atomically(root / MANIFEST, json.dumps(manifest, indent=1))
    output.remove(IN_PROGRESS)
    return written, rejected


def generate(config: GenerationConfig) -> GenerationReport:
    """Build every split of ``config`` (skipping complete ones), with a progress bar."""
    from paw_gym.alfworld.engine import ALFWorldEngine
    from paw_gym.progress import progress_bar

    for split in config.splits:
        if split not in SPLITS:
            raise ValueError(f"split={split!r} is not one of {SPLITS}")
    for task_type in config.task_types:
        if task_type not in TASK_TYPES:
            raise ValueError(f"task_type={task_type!r} is not one of {TASK_TYPES}")
    if config.per_type < 1:
        raise ValueError(f"per_type={config.per_type} must be at least 1")
    todo = [s for s in config.splits if not is_complete(config, s)]
    for split in todo:  # before any work
        check_replaceable(config, split)
    report = GenerationReport()
    total = len(todo) * len(config.task_types) * config.per_type
    engine = ALFWorldEngine(cache_size=1)
    try:
        with progress_bar(total=total, desc="generating ALFWorld games", unit="game",
                          disable=not config.progress or total == 0) as bar:
            for split in todo:
                written, rejected = generate_split(config, split, engine=engine, bar=bar)
                report.written[split] = written
                report.rejected += rejected
    finally:
        engine.close()
    return report
