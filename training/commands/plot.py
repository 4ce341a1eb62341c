"""``paw-gym plot``: training curves of one or more runs in one figure, seeds as mean ± sd."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from training.infra.checked_config import (CheckedConfig, bounded, input_path, output_file,
                                           text)

#: Name of the figure written next to the first run when ``--out`` is not given.
DEFAULT_NAME = "curves_compare.png"


@dataclass
class PlotArguments(CheckedConfig):
    """Which runs ``paw-gym plot`` draws, and where."""

    runs: list[str] = input_path(factory=list, positional="RUN")
    """Run folder (holding metrics.jsonl) or metrics.jsonl file."""
    labels: list[str] = text(factory=list, aliases=["--label"])
    """Legend names of the RUNs, in order (default: the run's folder name)."""
    groups: list[str] = text(factory=list, aliases=["--group"], pattern=r"[^=]+=.+",
                             what="NAME=GLOB, e.g. 'PaW=runs/paw-s*'")
    """NAME=GLOB: the runs GLOB matches (quote it) drawn as one series NAME, mean ± sd over
    them; repeatable, a repeated NAME adds runs."""
    metrics: str | None = text(None)
    """Panels to draw, comma-separated metric names as logged in metrics.jsonl (default:
    reward, success, invalid actions, losses, world-model terms, throughput)."""
    title: str | None = text(None)
    """Figure title (default: algorithm(s), env and model from the runs' config.yaml)."""
    smooth: float | None = bounded(None, 0, 1, high_open=True, note="none: 0.6, TensorBoard's")
    """Exponential-moving-average weight, 0 = raw values."""
    out: str | None = output_file(None)
    """Image to write; PNG, PDF, SVG, ... by its suffix (default: curves_compare.png in the
    first run's folder)."""
    overwrite: bool = False
    """Replace an existing --out (refused otherwise)."""

    def _check_relations(self) -> None:
        if not self.runs and not self.groups:
            raise ValueError("give at least one RUN folder or a --group NAME=GLOB")
        if len(self.labels) > len(self.runs):
            raise ValueError(f"{len(self.labels)} labels for {len(self.runs)} RUN(s): give at "
                             "most one --label per RUN, in the RUNs' order")


def add_parser(subparsers) -> None:
    from training.commands.flags import add_command

    add_command(subparsers, "plot", PlotArguments,
                help="draw the training curves of runs in one figure (seeds as mean ± sd)",
                description="One panel per metric (title, unit, % for fractions, smoothed over "
                            "the raw values), for runs written by `paw-gym train`. Each RUN gets "
                            "its own colour; each --group gets one colour for the mean of its "
                            "runs, with a band of ± one sample standard deviation. Metrics that "
                            "never change are left out, held-out validation shares the panel of "
                            "its training metric, and vanilla runs are left out of the "
                            "world-model panels.\n\nexample: paw-gym plot --group "
                            "'PaW=runs/paw-s*' --group 'vanilla=runs/van-s*' --out "
                            "figures/shelf.pdf").set_defaults(func=run)


def run(args) -> int:
    from training.commands.common import UserError, claim_output_files
    from training.commands.flags import arguments_from
    from training.infra.plots import DEFAULT_SMOOTH, load_run, logged_metrics, plot_runs

    arguments = arguments_from(args, PlotArguments)
    smooth = DEFAULT_SMOOTH if arguments.smooth is None else arguments.smooth
    group_paths = _group_paths(arguments.groups, UserError)
    try:
        runs = [load_run(path, label) for path, label in
                zip(arguments.runs, arguments.labels + [None] * len(arguments.runs))]
        groups = {name: [load_run(path) for path in paths] for name, paths in group_paths.items()}
    except (FileNotFoundError, ValueError) as error:
        raise UserError(str(error)) from None
    keys = _metric_keys(arguments.metrics, logged_metrics(
        runs + [member for members in groups.values() for member in members]), UserError)
    first = Path(arguments.runs[0] if arguments.runs else next(iter(group_paths.values()))[0])
    out = Path(arguments.out) if arguments.out else \
        (first if first.is_dir() else first.parent) / DEFAULT_NAME
    if out.suffix.lstrip(".").lower() not in _image_formats():
        raise UserError(f"--out {str(out)!r}: unknown image type; end it with one of "
                        f"{', '.join('.' + f for f in sorted(_image_formats()))}")
    claim_output_files([out], arguments.overwrite, "--out", "--out")
    written = plot_runs(runs, out, groups=groups, title=arguments.title, keys=keys,
                        smooth=smooth)
    if written is None:
        asked = ", ".join(keys) if keys else "the default metrics"
        raise UserError(f"nothing to plot: {asked} never change (or are not logged) in these "
                        "runs; pick others with --metrics")
    print(f"wrote {written}")
    return 0


def _group_paths(specs: list[str], error: type[Exception]) -> dict[str, list[str]]:
    """{name: matching paths} from ``--group NAME=GLOB`` values."""
    import glob

    groups: dict[str, list[str]] = {}
    for spec in specs:  # NAME=GLOB, as PlotArguments.groups declares
        name, _, pattern = spec.partition("=")
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
