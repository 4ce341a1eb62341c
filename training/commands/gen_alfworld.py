"""``paw-gym gen-alfworld``: generate ALFWorld games offline, in ALFWorld's own data layout.

Example::

    paw-gym gen-alfworld --output_dir data/alfworld --per-type 20 --seed 0
    python -c "import gymnasium as gym, paw_gym; gym.make('PaW/ALFWorld-v0', data_dir='data/alfworld')"
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from typing import Literal

Split = Literal["train", "eval_in_distribution", "eval_out_of_distribution"]
TaskType = Literal["pick_and_place_simple", "look_at_obj_in_light",
                   "pick_clean_then_place_in_recep", "pick_heat_then_place_in_recep",
                   "pick_cool_then_place_in_recep", "pick_two_obj_and_place"]

from training.commands.flags import former_names
from training.infra.checked_config import CheckedConfig, bounded, output_folder


#: Games per task type and split beyond which a generation would run for days.
MAX_PER_TYPE = 100_000


@dataclass
class GenAlfworldArguments(CheckedConfig):
    """Which ALFWorld games ``paw-gym gen-alfworld`` generates, and where."""

    output_dir: str = output_folder(**former_names("out"))
    """Data root to write (json_2.1.1/... under it)."""
    per_type: int = bounded(5, 1, MAX_PER_TYPE, note="games per task type and split; the official data has about 600 per type in train, and each game takes seconds")
    """Games per task type and split."""
    seed: int = 0
    """Random seed."""
    splits: list[Split] = field(default_factory=lambda: list(typing.get_args(Split)))
    """Splits to build."""
    task_types: list[TaskType] = field(default_factory=lambda: list(typing.get_args(TaskType)))
    """Task types to build."""
    progress: bool = True
    """Show a progress bar (--no_progress hides it)."""


def add_parser(subparsers) -> None:
    from training.commands.flags import add_command

    add_command(subparsers, "gen-alfworld", GenAlfworldArguments,
                help="generate verified ALFWorld games (json_2.1.1/<split>/<task>/<trial>/)",
                description="Generate ALFWorld games from the scene layouts and object rules "
                            "shipped with the alfworld package; every game is replayed in the "
                            "engine before it is marked solvable. Needs: pip install "
                            "paw-gym[alfworld].").set_defaults(func=run)


def run(args) -> int:
    from pathlib import Path

    from training.commands.common import UserError
    from training.commands.flags import arguments_from

    arguments = arguments_from(args, GenAlfworldArguments)
    try:
        from paw_gym.alfworld.generate import GenerationConfig, generate, split_dir
    except ImportError as error:  # the [alfworld] extra is missing
        raise UserError(f"{error}; install it with: pip install 'paw-gym[alfworld]'") from error
    config = GenerationConfig(out=Path(arguments.output_dir), per_type=arguments.per_type,
                              seed=arguments.seed, splits=tuple(arguments.splits),
                              task_types=tuple(arguments.task_types), progress=arguments.progress)
    try:
        report = generate(config)
    except (ImportError, ModuleNotFoundError) as error:
        raise UserError(f"{error}; install it with: pip install 'paw-gym[alfworld]'") from error
    except FileExistsError as error:
        raise UserError(str(error)) from None
    for split in config.splits:
        state = f"{report.written[split]} games written" if split in report.written \
            else "already complete, kept"
        print(f"{split:<26} {state}  ->  {split_dir(config.out, split)}")
    if report.rejected:
        print(f"({report.rejected} sampled games failed verification in the engine and were resampled)")
    return 0
