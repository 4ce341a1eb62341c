"""``paw-gym plot``: training curves of one or more runs in one figure, seeds as mean ± sd."""

from __future__ import annotations

from pathlib import Path

#: Name of the figure written next to the first run when ``--out`` is not given.
DEFAULT_NAME = "curves_compare.png"


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "plot", help="draw the training curves of runs in one figure (seeds as mean ± sd)",
        description="One panel per metric (title, unit, % for fractions, smoothed over the raw "
                    "values), for runs written by `paw-gym train`. Each RUN gets its own colour; "
                    "each --group gets one colour for the mean of its runs, with a band of ± one "
                    "sample standard deviation. Metrics that never change are left out, "
                    "held-out validation shares the panel of its training metric, and vanilla "
                    "runs are left out of the world-model panels.",
        epilog="example: paw-gym plot --group 'PaW=runs/paw-s*' --group 'vanilla=runs/van-s*' "
               "--out figures/shelf.pdf")
    parser.add_argument("runs", nargs="*", metavar="RUN",
                        help="run folder (holding metrics.jsonl) or metrics.jsonl file")
    parser.add_argument("--label", action="append", dest="labels", default=[], metavar="NAME",
                        help="legend name of the RUNs, in order, one per --label (default: the "
                        "run's folder name)")
    parser.add_argument("--group", action="append", dest="groups", default=[],
                        metavar="NAME=GLOB", help="the runs GLOB matches (quote it) drawn as one "
                        "series NAME, mean ± sd over them; repeatable, a repeated NAME adds runs")
    parser.add_argument("--metrics", default=None, metavar="A,B,C",
                        help="panels to draw, comma-separated metric names as logged in "
                        "metrics.jsonl (default: reward, success, invalid actions, losses, "
                        "world-model terms, throughput)")
    parser.add_argument("--title", default=None,
                        help="figure title (default: algorithm(s), env and model from the runs' "
                        "config.yaml)")
    parser.add_argument("--smooth", type=float, default=None, metavar="W",
                        help="exponential-moving-average weight in [0, 1), 0 = raw values "
                        "(default 0.6, TensorBoard's)")
    parser.add_argument("--out", default=None, metavar="PATH",
                        help=f"image to write; PNG, PDF, SVG, ... by its suffix (default: "
                        f"{DEFAULT_NAME} in the first run's folder)")
    parser.add_argument("--overwrite", type=_true_or_false, default=False,
                        metavar="true|false", help="replace an existing --out (refused "
                        "otherwise)")
    parser.set_defaults(func=run)


def run(args) -> int:
    from training.commands.common import UserError, claim_output_files
    from training.infra.plots import DEFAULT_SMOOTH, load_run, logged_metrics, plot_runs

    if not args.runs and not args.groups:
        raise UserError("give at least one RUN folder or a --group NAME=GLOB")
    if len(args.labels) > len(args.runs):
        raise UserError(f"{len(args.labels)} --label for {len(args.runs)} RUN(s): give at most "
                        "one --label per RUN, in the RUNs' order")
    smooth = DEFAULT_SMOOTH if args.smooth is None else args.smooth
    if not 0.0 <= smooth < 1.0:
        raise UserError(f"--smooth must be in [0, 1), got {args.smooth}")
    group_paths = _group_paths(args.groups, UserError)
    try:
        runs = [load_run(path, label) for path, label in
                zip(args.runs, args.labels + [None] * len(args.runs))]
        groups = {name: [load_run(path) for path in paths] for name, paths in group_paths.items()}
    except (FileNotFoundError, ValueError) as error:
        raise UserError(str(error)) from None
    keys = _metric_keys(args.metrics, logged_metrics(
        runs + [member for members in groups.values() for member in members]), UserError)
    first = Path(args.runs[0] if args.runs else next(iter(group_paths.values()))[0])
    out = Path(args.out) if args.out else (first if first.is_dir() else first.parent) / DEFAULT_NAME
    if out.suffix.lstrip(".").lower() not in _image_formats():
        raise UserError(f"--out {str(out)!r}: unknown image type; end it with one of "
                        f"{', '.join('.' + f for f in sorted(_image_formats()))}")
    claim_output_files([out], args.overwrite, "--out", "--out")
    written = plot_runs(runs, out, groups=groups, title=args.title, keys=keys, smooth=smooth)
    if written is None:
        asked = ", ".join(keys) if keys else "the default metrics"
        raise UserError(f"nothing to plot: {asked} never change (or are not logged) in these "
                        "runs; pick others with --metrics")
    print(f"wrote {written}")
    return 0


def _true_or_false(text: str) -> bool:
    """``--overwrite``'s value, spelled as every other command's boolean flags."""
    import argparse

    from training.infra.config_values import parse_value

    try:
        return parse_value(text, bool)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _group_paths(specs: list[str], error: type[Exception]) -> dict[str, list[str]]:
    """{name: matching paths} from ``--group NAME=GLOB`` values."""
    import glob

    groups: dict[str, list[str]] = {}
    for spec in specs:
        name, sep, pattern = spec.partition("=")
        if not (sep and name and pattern):
            raise error(f"--group {spec!r} must look like NAME=GLOB, e.g. 'PaW=runs/paw-s*'")
        matches = sorted(glob.glob(pattern))
        if not matches:
            raise error(f"--group {spec!r}: {pattern!r} matches no path")
        groups.setdefault(name, []).extend(matches)
    return groups


def _metric_keys(text: str | None, logged: set[str], error: type[Exception]) -> list[str] | None:
    """The ``--metrics`` names (None: the default panels), each one the runs logged."""
    if text is None:
        return None
    keys = [key.strip() for key in text.split(",") if key.strip()]
    unknown = [key for key in keys if key not in logged]
    if unknown or not keys:
        raise error(f"--metrics {', '.join(unknown) or repr(text)}: not a metric these runs "
                    f"logged; choose from: {', '.join(sorted(logged))}")
    return keys


def _image_formats() -> set[str]:
    from matplotlib.backend_bases import FigureCanvasBase

    return set(FigureCanvasBase.get_supported_filetypes())
