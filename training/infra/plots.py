"""Training curves fit for a paper, from the ``metrics.jsonl`` of one or more runs.

A *run* is a folder written by the trainer (``metrics.jsonl``, and ``config.yaml`` for the
title and the PaW / vanilla distinction) or a bare ``metrics.jsonl`` file. Each figure has one
panel per metric, and:

* every panel has a human title, wrapped rather than cut, and a y-axis unit
  (:data:`METRICS`); fractions (success, invalid actions, clipped tokens) are shown in % on a
  0-100 axis; tick values are plain (no offset); x is the update step, with integer ticks;
* each curve is smoothed with TensorBoard's debiased exponential moving average (weight
  ``smooth`` per logged point; 0 draws the raw values only), over its raw values drawn faint;
* a metric whose values are all equal (``kl`` with ``kl_coef: 0``) gets no panel, unless it
  has a single point or is one of :data:`ALWAYS_SHOWN` (success stuck at 0 and invalid actions
  stuck at 100 % are results);
* held-out validation, logged on its own records at some steps (``val_success``, ...), is
  drawn with markers in the panel of its training metric (:data:`VALIDATION_OF`);
* several runs are overlaid, one colour each; a :class:`Series` of several runs (the seeds of
  one variant) is drawn as their mean with a band of ± one sample standard deviation, at the
  steps every one of them logged;
* world-model panels (:data:`WORLD_MODEL_METRICS`) leave out vanilla runs (``paw: false`` in
  their config, or the metric absent or all zero), which would only add a flat line at 0.

matplotlib is imported when a figure is drawn, and figures are built as
:class:`matplotlib.figure.Figure` objects (no pyplot state, Agg canvas when saved), so this
module is cheap to import and safe in threads and notebooks.
"""

from __future__ import annotations

import math
import statistics
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from run_files.outputs import atomic_file
from training.infra.metrics_log import CURVES, read_metrics, run_folder

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

#: key -> (panel title, y-axis unit, scale applied to the logged value; 100 turns 0-1 into %).
METRICS: dict[str, tuple[str, str, float]] = {
    "reward": ("episode return", "return", 1.0),
    "success": ("success rate", "% of episodes", 100.0),
    "episode_length": ("episode length", "steps", 1.0),
    "invalid_frac": ("invalid actions", "% of steps", 100.0),
    "policy_loss": ("policy loss", "loss", 1.0),
    "clip_frac": ("PPO-clipped action tokens", "% of tokens", 100.0),
    "kl": ("KL to the reference policy", "nats / token", 1.0),
    "action_entropy": ("action entropy", "nats / token", 1.0),
    "rollout_logprob_gap": ("rollout vs update log-prob gap", "nats / token", 1.0),
    "advantage_abs_mean": ("mean |advantage|", "advantage", 1.0),
    "grad_norm": ("gradient norm", "L2 norm", 1.0),
    "lr": ("learning rate", "learning rate", 1.0),
    "value_loss": ("critic loss", "loss", 1.0),
    "lambda_mean": ("world-model weight λ_g (mean)", "λ_g", 1.0),
    "wm_leak": ("leak: p(o_{t+1}'s first token) inside the policy's turn", "%", 100.0),
    "wm_loss": ("world-model loss", "loss / transition", 1.0),
    "wm_term": ("world-model term of the objective", "loss", 1.0),
    "wm_clipped_frac": ("observation tokens already learned (p > ρ, left out)", "% of tokens",
                        100.0),
    "wm_selected": ("transitions selected by action entropy (top α)", "transitions", 1.0),
    "wm_trained_frac": ("transitions the world-model term trains on (selected, λ_g > 0)",
                        "% of transitions", 100.0),
    "wm_active_tokens": ("observation tokens with a world-model gradient", "tokens / update",
                         1.0),
    "tokens_per_s": ("training throughput", "tokens / s", 1.0),
    "gen_tokens_per_s": ("generation throughput", "tokens / s", 1.0),
    "step_time": ("time per update", "s", 1.0),
    "peak_mem_mb": ("peak memory", "MiB", 1.0),
    "val_success": ("held-out success rate", "% of episodes", 100.0),
    "val_return": ("held-out episode return", "return", 1.0),
    "val_score": ("held-out score", "% of the maximum score", 100.0),
    "val_invalid_frac": ("held-out invalid actions", "% of steps", 100.0),
    "val_episode_length": ("held-out episode length", "steps", 1.0),
    "val_wm_exact": ("held-out next observations predicted exactly", "% of transitions", 100.0),
    "val_wm_token": ("held-out next-observation tokens predicted", "% of tokens", 100.0),
    "val_wm_token_kept": ("held-out next-observation tokens the prompt shows, predicted",
                          "% of tokens", 100.0),
    "val_wm_token_changed": ("held-out next-observation tokens the action changed, predicted",
                             "% of tokens", 100.0),
}
#: Training metric -> its validation counterpart, drawn in the same panel.
VALIDATION_OF = {"reward": "val_return", "success": "val_success",
                 "invalid_frac": "val_invalid_frac", "episode_length": "val_episode_length"}
#: Panels only PaW runs fill.
WORLD_MODEL_METRICS = frozenset({"wm_loss", "wm_clipped_frac", "lambda_mean", "wm_term",
                                 "wm_selected", "wm_trained_frac", "wm_active_tokens"})
ALGORITHMS = {"grpo": "GRPO", "gigpo": "GiGPO", "rloo": "RLOO", "ppo": "PPO"}
#: TensorBoard's default smoothing weight.
DEFAULT_SMOOTH = 0.6


@dataclass(frozen=True)
class Run:
    """One training run: its metric records and its config (empty when unknown)."""

    label: str
    records: tuple[dict[str, Any], ...]
    config: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Series:
    """What one colour shows: a run as a line, or several runs (seeds) as mean ± sd."""

    label: str
    runs: tuple[Run, ...]


def load_run(path: str | Path, label: str | None = None) -> Run:
    """The run in folder ``path`` (a ``paw-gym demo`` folder: its ``rl/`` run; or of the
    ``metrics.jsonl`` file ``path``), labelled with
    ``label`` or its folder's name. :class:`FileNotFoundError` when there is no metrics file,
    :class:`ValueError` when its ``config.yaml`` does not parse."""
    import yaml

    path = Path(path)
    metrics = run_folder(path) / "metrics.jsonl" if path.is_dir() else path
    label = label or (path if path.is_dir() else path.parent).resolve().name
    if not metrics.is_file():
        raise FileNotFoundError(f"{str(path)!r} has no metrics.jsonl: give a run folder written "
                                "by `paw-gym train` or `paw-gym demo`, or a metrics.jsonl file")
    config_path = metrics.parent / "config.yaml"
    try:
        config = yaml.safe_load(config_path.read_text(encoding="utf-8")) \
            if config_path.is_file() else {}
    except yaml.YAMLError as error:
        raise ValueError(f"{str(config_path)!r} is not valid YAML: {error}") from None
    return Run(label, tuple(read_metrics(metrics)),
               config if isinstance(config, dict) else {})


def metric_info(key: str) -> tuple[str, str, float]:
    """(title, unit, scale) of ``key``; a per-task key such as ``val_success/pick`` takes its
    base metric's, named after the task."""
    base, _, task = key.partition("/")
    if base in METRICS:
        label, unit, scale = METRICS[base]
        return (f"{label}: {task}" if task else label), unit, scale
    return key, "", 1.0


def logged_metrics(runs: Sequence[Run]) -> set[str]:
    """Every metric with at least one finite number in ``runs``."""
    return {key for run in runs for record in run.records for key, value in record.items()
            if key != "step" and _is_number(value)}


def points(run: Run, key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of ``key`` in ``run``, in display units (% for fractions)."""
    scale = metric_info(key)[2]
    by_step = {int(r["step"]): float(r[key]) * scale for r in run.records
               if _is_number(r.get(key)) and _is_number(r.get("step"))}
    steps = sorted(by_step)
    return steps, [by_step[s] for s in steps]


def ema(values: Sequence[float], weight: float) -> list[float]:
    """TensorBoard's smoothing: an exponential moving average with ``weight`` on the past,
    divided by ``1 - weight**i`` so the first points are not pulled towards 0."""
    smoothed, average = [], 0.0
    for i, value in enumerate(values, 1):
        average = weight * average + (1 - weight) * value
        smoothed.append(average / (1 - weight ** i) if weight else value)
    return smoothed


def is_vanilla(run: Run, key: str) -> bool:
    """Whether ``run`` has nothing to show in world-model panel ``key``."""
    return run.config.get("paw") is False or not any(points(run, key)[1])


def shown_runs(series: Series, key: str) -> tuple[Run, ...]:
    """The runs of ``series`` drawn in panel ``key`` (those that logged it; PaW runs only in a
    world-model panel)."""
    return tuple(run for run in series.runs if points(run, key)[0]
                 and not (key in WORLD_MODEL_METRICS and is_vanilla(run, key)))


#: Panels drawn whenever logged, even flat: a success rate stuck at 0 is the news.
ALWAYS_SHOWN = frozenset({"reward", "success", "val_success", "invalid_frac"})
#: Characters per line of a panel title (a 3.8-inch panel at font size 10).
TITLE_WIDTH = 42


def panel_keys(series: Sequence[Series], keys: Sequence[str]) -> list[str]:
    """The metrics of ``keys`` worth a panel: logged by some shown run and not constant (or in
    :data:`ALWAYS_SHOWN`). A validation metric joins its training metric's panel when that
    panel is drawn."""
    drawn = []
    for key in keys:
        values = [v for s in series for run in shown_runs(s, key) for v in points(run, key)[1]]
        if key in VALIDATION_OF:
            partner = VALIDATION_OF[key]
            values += [v for s in series for run in shown_runs(s, partner)
                       for v in points(run, partner)[1]]
        if values and (key in ALWAYS_SHOWN or len(values) == 1
                       or min(values) != max(values)):
            drawn.append(key)
    joined = {VALIDATION_OF[key] for key in drawn if key in VALIDATION_OF}
    # Where the score is the success rate (every env but WebShop), its panel would repeat it.
    if all(points(run, "val_score") == points(run, "val_success")
           for s in series for run in s.runs):
        joined.add("val_score")
    return [key for key in drawn if key not in joined]


def series_colors(count: int) -> list[tuple[float, ...]]:
    """``count`` distinct colours (matplotlib's tab10, repeating after 10)."""
    from matplotlib import colormaps

    palette = colormaps["tab10"].colors
    return [palette[i % len(palette)] for i in range(count)]


def draw_panel(ax: Axes, key: str, series: Sequence[Series], colors: Sequence[Any], *,
               smooth: float = DEFAULT_SMOOTH, title: str | None = None) -> None:
    """Panel ``key`` on ``ax``: every series in its colour, with the validation counterpart
    (markers, dashed) and a legend telling the two apart when one was logged."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    label, unit, scale = metric_info(key)
    partner = VALIDATION_OF.get(key)
    has_validation = False
    for one, color in zip(series, colors):
        _draw_curve(ax, shown_runs(one, key), key, color, smooth, scale, validation=False)
        if partner and shown_runs(one, partner):
            _draw_curve(ax, shown_runs(one, partner), partner, color, smooth, scale,
                        validation=True)
            has_validation = True
    # Whole titles: a long one wraps onto a second line instead of running past the panel.
    ax.set_title(textwrap.fill(title or label, TITLE_WIDTH), fontsize=10)
    ax.set_xlabel("update step", fontsize=9)
    ax.set_ylabel(unit, fontsize=9)
    if scale == 100.0:  # every percentage reads on the same 0-100 axis
        ax.set_ylim(0, 100)
    # Plain tick values: no "1e-5 + 9.992e-1" offset for a nearly constant metric.
    ax.ticklabel_format(axis="y", useOffset=False)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole updates
    ax.tick_params(labelsize=8)
    ax.grid(alpha=0.3)
    ax.set_label(key)  # lets callers find a panel by metric: {ax.get_label(): ax}
    if has_validation:
        ax.legend(handles=[Line2D([], [], color="0.3", linewidth=1.8, label="training rollouts"),
                           Line2D([], [], color="0.3", linestyle="--", marker="o",
                                  label="held-out validation")], fontsize=7)


def _draw_curve(ax: Axes, runs: Sequence[Run], key: str, color: Any, smooth: float,
                scale: float, *, validation: bool) -> None:
    """The mean over ``runs`` at the steps they all logged, ± one sample sd when several.

    Validation points are few and far between: drawn as markers, never smoothed."""
    if not runs:
        return
    by_run = [dict(zip(*points(run, key))) for run in runs]
    steps = sorted(set.intersection(*(set(values) for values in by_run)))
    if not steps:
        return
    matrix = [[values[s] for s in steps] for values in by_run]
    if validation:
        curves = matrix
        mean = [statistics.fmean(column) for column in zip(*curves)]
        ax.plot(steps, mean, color=color, linestyle="--", marker="o", markersize=4,
                linewidth=1.2)
    else:
        curves = [ema(row, smooth) for row in matrix]
        mean = [statistics.fmean(column) for column in zip(*curves)]
        if smooth:
            raw = [statistics.fmean(column) for column in zip(*matrix)]
            ax.plot(steps, raw, color=color, alpha=0.3, linewidth=0.8)
        ax.plot(steps, mean, color=color, linewidth=1.8)
    if len(curves) > 1:
        sd = [statistics.stdev(column) for column in zip(*curves)]
        low, high = [m - d for m, d in zip(mean, sd)], [m + d for m, d in zip(mean, sd)]
        if scale == 100.0:  # a percentage band stays within [0, 100]
            low, high = [max(v, 0.0) for v in low], [min(v, 100.0) for v in high]
        ax.fill_between(steps, low, high, color=color, alpha=0.1 if validation else 0.2,
                        linewidth=0)


def series_label(one: Series) -> str:
    """A series' legend text; a band's says what it shows."""
    return one.label if len(one.runs) == 1 else f"{one.label} (mean ± sd, n={len(one.runs)})"


def add_series_legend(fig: Figure, labels: Sequence[str], colors: Sequence[Any]) -> None:
    """One figure-wide legend entry per series (``labels``, ``colors``), under the panels."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=color, linewidth=1.8, label=label)
               for label, color in zip(labels, colors)]
    fig.legend(handles=handles, loc="outside lower center", ncols=min(4, len(handles)),
               fontsize=8, frameon=False)


def default_title(series: Sequence[Series]) -> str:
    """'<run>: <algorithm> on <env> (<model>)' for one run; '<algorithm> vs <algorithm> on
    <env>' for several; from the runs' configs, falling back on their labels."""
    configs = [run.config for one in series for run in one.runs]
    methods = _unique(_method(c) for c in configs)
    envs = _unique(str(c["env_id"]) for c in configs if c.get("env_id"))
    models = _unique(Path(str(c["model"])).name for c in configs if c.get("model"))
    text = " vs ".join(methods)
    if envs:
        text += f" on {', '.join(envs)}"
    if len(models) == 1:
        text += f" ({models[0]})"
    text = text.strip()
    if len(series) == 1 and len(series[0].runs) == 1:
        return f"{series[0].label}: {text}" if text else series[0].label
    return text or " vs ".join(one.label for one in series)


def make_figure(series: Sequence[Series], keys: Sequence[str] | None = None, *,
                title: str | None = None, smooth: float = DEFAULT_SMOOTH,
                titles: Mapping[str, str] | None = None) -> Figure | None:
    """The figure of ``series`` over the panels of ``keys`` (default :data:`CURVES`) worth
    drawing, or None when there are none. ``titles`` overrides panel titles by metric; each
    panel's ``get_label()`` is its metric."""
    from matplotlib.figure import Figure

    keys = panel_keys(series, CURVES if keys is None else keys)
    if not keys:
        return None
    columns = min(4, len(keys))
    rows = math.ceil(len(keys) / columns)
    columns = math.ceil(len(keys) / rows)  # 6 panels: 2 x 3, not 2 x 4 with two empty
    fig = Figure(figsize=(3.8 * columns, 2.9 * rows + 0.8), layout="constrained")
    axes = list(fig.subplots(rows, columns, squeeze=False).flat)
    colors = series_colors(len(series))
    for ax, key in zip(axes, keys):
        draw_panel(ax, key, series, colors, smooth=smooth, title=(titles or {}).get(key))
    for ax in axes[len(keys):]:
        ax.set_visible(False)
    # One step range for every panel, so that a point means the same update across panels.
    shown = axes[:len(keys)]
    left = min(ax.get_xlim()[0] for ax in shown)
    right = max(ax.get_xlim()[1] for ax in shown)
    for ax in shown:
        ax.set_xlim(left, right)
    note = f"\nthick lines: smoothed (EMA weight {smooth}); faint lines: raw values" \
        if smooth else ""
    fig.suptitle((title or default_title(series)) + note, fontsize=12)
    if len(series) > 1 or any(len(one.runs) > 1 for one in series):
        add_series_legend(fig, [series_label(one) for one in series], colors)
    return fig


def plot_runs(runs: Sequence[str | Path | Run], out_path: str | Path, *,
              groups: Mapping[str, Sequence[str | Path | Run]] | None = None,
              title: str | None = None, keys: Sequence[str] | None = None,
              smooth: float = DEFAULT_SMOOTH) -> Path | None:
    """Write the figure of ``runs`` (one colour each) and ``groups`` (one colour per group:
    mean ± sd over its runs) to ``out_path`` (PNG, PDF, SVG, ... by its suffix); returns the
    path, or None when no metric of ``keys`` (default :data:`CURVES`) is worth a panel.

    A run is a run folder, a ``metrics.jsonl`` file or a :class:`Run`."""
    series = [Series(run.label, (run,)) for run in map(_as_run, runs)]
    for name, members in (groups or {}).items():
        if not members:
            raise ValueError(f"group {name!r} has no runs")
        series.append(Series(name, tuple(map(_as_run, members))))
    fig = make_figure(series, keys, title=title, smooth=smooth)
    if fig is None:
        return None
    out_path = Path(out_path)
    with atomic_file(out_path) as temporary:  # a kill leaves no half-drawn image
        fig.savefig(temporary, dpi=150, format=out_path.suffix.lstrip(".").lower() or None)
    return out_path


def plot_curves(metrics_path: str | Path, out_path: str | Path,
                keys: tuple[str, ...] = CURVES, title: str | None = None) -> Path | None:
    """The end-of-training figure (``curves.png``) of the run that wrote ``metrics_path``: one
    panel per metric of ``keys`` that varies (see the module docstring); returns the image
    path, or None when there is nothing to draw."""
    if not Path(metrics_path).is_file():
        return None
    return plot_runs([metrics_path], out_path, title=title, keys=keys)


def _as_run(run: str | Path | Run) -> Run:
    return run if isinstance(run, Run) else load_run(run)


def _method(config: Mapping[str, Any]) -> str:
    algo = str(config.get("algo") or "")
    if not algo:
        return ""
    name = ALGORITHMS.get(algo.lower(), algo)
    return f"{name} + PaW" if config.get("paw") else name


def _unique(texts) -> list[str]:
    return [t for t in dict.fromkeys(texts) if t]


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)

