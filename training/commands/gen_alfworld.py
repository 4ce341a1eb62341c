"""``paw-gym gen-alfworld``: generate ALFWorld games offline, in ALFWorld's own data layout.

Example::

    paw-gym gen-alfworld --out data/alfworld --per-type 20 --seed 0
    python -c "import gymnasium as gym, paw_gym; gym.make('PaW/ALFWorld-v0', data_dir='data/alfworld')"
"""

from __future__ import annotations

SPLIT_CHOICES = ("train", "eval_in_distribution", "eval_out_of_distribution")
TYPE_CHOICES = ("pick_and_place_simple", "look_at_obj_in_light", "pick_clean_then_place_in_recep",
                "pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep",
                "pick_two_obj_and_place")


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "gen-alfworld", help="generate verified ALFWorld games (json_2.1.1/<split>/<task>/<trial>/)",
        description="Generate ALFWorld games from the scene layouts and object rules shipped with "
                    "the alfworld package; every game is replayed in the engine before it is "
                    "marked solvable. Needs: pip install paw-gym[alfworld].")
    parser.add_argument("--out", required=True, help="data root to write (json_2.1.1/... under it)")
    parser.add_argument("--per-type", type=int, default=5, help="games per task type and split (default 5)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--splits", nargs="+", choices=SPLIT_CHOICES, default=list(SPLIT_CHOICES),
                        help="splits to build (default: all three)")
    parser.add_argument("--task-types", nargs="+", choices=TYPE_CHOICES, default=list(TYPE_CHOICES),
                        help="task types to build (default: all six)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.set_defaults(func=run)


def run(args) -> int:
    from pathlib import Path

    from training.cli import UserError

    try:
        from paw_gym.alfworld.generate import GenerationConfig, generate, split_dir
    except ImportError as error:  # the [alfworld] extra is missing
        raise UserError(f"{error}; install it with: pip install 'paw-gym[alfworld]'") from error
    if args.per_type < 1:
        raise UserError(f"--per-type {args.per_type} must be at least 1")
    config = GenerationConfig(out=Path(args.out), per_type=args.per_type, seed=args.seed,
                              splits=tuple(args.splits), task_types=tuple(args.task_types),
                              progress=not args.no_progress)
    try:
        report = generate(config)
    except (ImportError, ModuleNotFoundError) as error:
        raise UserError(f"{error}; install it with: pip install 'paw-gym[alfworld]'") from error
    for split in config.splits:
        state = f"{report.written[split]} games written" if split in report.written \
            else "already complete, kept"
        print(f"{split:<26} {state}  ->  {split_dir(config.out, split)}")
    if report.rejected:
        print(f"({report.rejected} sampled games failed verification in the engine and were resampled)")
    return 0
