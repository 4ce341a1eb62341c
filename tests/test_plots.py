"""Training curves (training.infra.plots, `paw-gym plot`): readable panels, validation, seed bands."""

import json
import statistics
from pathlib import Path

import pytest
import yaml

pytest.importorskip("matplotlib")

from training.commands.common import UserError  # noqa: E402
from training.infra.plots import plot_curves  # noqa: E402
from training.infra.plots import Run, Series, ema, load_run, make_figure, plot_runs  # noqa: E402

STEPS = range(1, 6)


def write_run(folder: Path, *, paw: bool = True, offset: float = 0.0,
              validation: dict[int, float] | None = None, config: bool = True) -> Path:
    """A run folder like the trainer's: five updates, kl constant (kl_coef 0), and vanilla
    runs logging λ_g = 1 and a zero world-model loss, as the trainer does."""
    folder.mkdir(parents=True)
    if config:
        (folder / "config.yaml").write_text(yaml.safe_dump(
            {"algo": "grpo", "paw": paw, "env_id": "PaW/Shelf-v0", "model": "runs/tiny/nano"}))
    with open(folder / "metrics.jsonl", "w", encoding="utf-8") as handle:
        for step in STEPS:
            handle.write(json.dumps({
                "step": step, "reward": step + offset, "success": step / 10 + offset / 100,
                "invalid_frac": 0.5 - step / 20, "kl": 0.0,
                "lambda_mean": 1.0 + step / 10 if paw else 1.0,
                "wm_loss": 3.0 - step / 5 if paw else 0.0}) + "\n")
            if validation and step in validation:
                handle.write(json.dumps({"step": step, "val_success": validation[step]}) + "\n")
    return folder


def panels(fig) -> dict:
    return {ax.get_label(): ax for ax in fig.axes if ax.get_visible()}


def one(run: Run) -> Series:
    return Series(run.label, (run,))


def test_curves_png_is_written_for_a_trainer_run_and_skipped_without_metrics(tmp_path):
    run = write_run(tmp_path / "run")
    out = plot_curves(run / "metrics.jsonl", run / "curves.png")
    assert out == run / "curves.png" and out.stat().st_size > 10_000
    assert plot_curves(tmp_path / "missing.jsonl", tmp_path / "none.png") is None
    assert not (tmp_path / "none.png").exists()


def test_panels_have_titles_units_and_leave_out_a_constant_metric(tmp_path):
    fig = make_figure([one(load_run(write_run(tmp_path / "run")))], smooth=0.0)
    shown = panels(fig)
    assert "kl" not in shown  # kl_coef 0: a flat line at 0 says nothing
    assert {"reward", "success", "invalid_frac", "lambda_mean", "wm_loss"} <= set(shown)
    assert shown["success"].get_title() == "success rate"
    assert shown["wm_loss"].get_ylabel() == "loss / transition"
    assert all(ax.get_xlabel() == "update step" for ax in shown.values())
    assert fig.get_suptitle() == "run: GRPO + PaW on PaW/Shelf-v0 (nano)"


def test_a_success_rate_stuck_at_zero_keeps_its_panel(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(
        json.dumps({"step": step, "success": 0.0, "kl": 0.0, "reward": step}) + "\n"
        for step in STEPS))
    shown = panels(make_figure([one(load_run(run))], smooth=0.0))
    assert "success" in shown and "kl" not in shown


def test_fractions_are_shown_in_percent(tmp_path):
    fig = make_figure([one(load_run(write_run(tmp_path / "run")))], smooth=0.0)
    success, invalid = panels(fig)["success"], panels(fig)["invalid_frac"]
    assert list(success.get_lines()[0].get_ydata()) == pytest.approx([10, 20, 30, 40, 50])
    assert list(invalid.get_lines()[0].get_ydata()) == pytest.approx([45, 40, 35, 30, 25])
    assert "%" in success.get_ylabel() and "%" in invalid.get_ylabel()


def test_a_stuck_run_reads_at_a_glance(tmp_path):
    """An ALFWorld-like run: success stuck at 0, every action invalid, a return nearly constant
    (-1.4992 ... -1.4991). Every title is whole on its panel, percentages span 0-100 (no
    negative success axis), the invalid-action panel is there, and no tick needs an offset."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    records = [{"step": s, "success": 0.0, "invalid_frac": 1.0, "reward": -1.4992 + s / 1e5,
                "wm_leak": 0.004 * s, "lambda_mean": 1.0, "wm_loss": 3.0 - s / 5,
                "kl": 0.0} for s in STEPS]
    fig = make_figure([one(Run("alfworld", tuple(records), {"paw": True}))], smooth=0.0)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    shown = panels(fig)
    assert {"success", "invalid_frac", "reward", "wm_leak"} <= set(shown)
    renderer = canvas.get_renderer()
    for key, ax in shown.items():
        title = ax.title.get_window_extent(renderer)
        panel = ax.get_window_extent(renderer)
        assert title.x0 >= panel.x0 - 40 and title.x1 <= panel.x1 + 40, (key, ax.get_title())
        assert ax.yaxis.get_major_formatter().get_offset() == "", key
    for key in ("success", "invalid_frac", "wm_leak"):
        assert shown[key].get_ylim() == (0, 100), key
    assert "\n" in shown["wm_leak"].get_title()  # wrapped, not cut


def test_x_ticks_are_whole_update_steps():
    # Three steps: matplotlib's default ticks would be 1.0, 1.25, 1.5, ...
    run = Run("short", tuple({"step": s, "reward": s, "success": s / 4} for s in (1, 2, 3)))
    for ax in panels(make_figure([one(run)])).values():
        ticks = [t for t in ax.get_xticks() if 1 <= t <= 3]
        assert ticks == [1, 2, 3], (ax.get_label(), ticks)


def test_smoothed_line_over_faint_raw_values(tmp_path):
    assert ema([0.0, 10.0, 10.0], 0.0) == [0.0, 10.0, 10.0]
    assert ema([4.0, 4.0], 0.9) == pytest.approx([4.0, 4.0])  # debiased: no pull towards 0
    assert ema([0.0, 10.0], 0.5) == pytest.approx([0.0, 5.0 / 0.75])
    fig = make_figure([one(load_run(write_run(tmp_path / "run")))], smooth=0.5)
    raw, smoothed = panels(fig)["reward"].get_lines()
    assert list(raw.get_ydata()) == [1, 2, 3, 4, 5] and raw.get_alpha() < 1
    assert list(smoothed.get_ydata()) == pytest.approx(ema([1, 2, 3, 4, 5], 0.5))
    assert "thick lines: smoothed (EMA weight 0.5); faint lines: raw values" in \
        fig._suptitle.get_text()


def test_validation_success_shares_the_success_panel_with_markers(tmp_path):
    run = load_run(write_run(tmp_path / "run", validation={2: 0.25, 4: 0.75}))
    fig = make_figure([one(run)], smooth=0.0)
    shown = panels(fig)
    assert "val_success" not in shown
    lines = shown["success"].get_lines()
    validation = [line for line in lines if line.get_marker() == "o"]
    assert len(lines) == 2 and len(validation) == 1
    assert list(validation[0].get_xdata()) == [2, 4]
    assert list(validation[0].get_ydata()) == pytest.approx([25, 75])
    legend = [t.get_text() for t in shown["success"].get_legend().get_texts()]
    assert legend == ["training rollouts", "held-out validation"]
    no_validation = make_figure([one(load_run(write_run(tmp_path / "plain")))], smooth=0.0)
    assert panels(no_validation)["success"].get_legend() is None


def test_validation_alone_gets_its_own_panel(tmp_path):
    run = load_run(write_run(tmp_path / "run", validation={2: 0.25, 4: 0.75}))
    shown = panels(make_figure([one(run)], ["val_success"], smooth=0.0))
    assert list(shown) == ["val_success"]
    assert list(shown["val_success"].get_lines()[0].get_ydata()) == pytest.approx([25, 75])
    per_task = Run("run", ({"step": 2, "val_success/pick": 0.5},
                           {"step": 4, "val_success/pick": 1.0}))
    panel = panels(make_figure([one(per_task)], ["val_success/pick"]))["val_success/pick"]
    assert panel.get_title() == "held-out success rate: pick"
    assert list(panel.get_lines()[0].get_ydata()) == pytest.approx([50, 100])


def test_vanilla_runs_stay_out_of_world_model_panels(tmp_path):
    paw = load_run(write_run(tmp_path / "paw"))
    vanilla = load_run(write_run(tmp_path / "vanilla", paw=False))
    # Without a config the vanilla run is known by its all-zero world-model loss.
    bare = load_run(write_run(tmp_path / "bare", paw=False, config=False))
    fig = make_figure([one(paw), one(vanilla), one(bare)], smooth=0.0)
    shown = panels(fig)
    paw_color, vanilla_color, bare_color = [line.get_color()
                                            for line in shown["reward"].get_lines()]
    assert [line.get_color() for line in shown["wm_loss"].get_lines()] == [paw_color]
    # λ_g = 1 is logged by vanilla runs too: the config's paw: false leaves it out; the bare
    # run, with no config and a non-zero λ_g, cannot be told from a PaW run and stays.
    assert [line.get_color() for line in shown["lambda_mean"].get_lines()] == \
        [paw_color, bare_color]
    assert vanilla_color not in (paw_color, bare_color)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["paw", "vanilla", "bare"]
    assert make_figure([one(vanilla)], ["wm_loss", "lambda_mean"]) is None


def test_seed_groups_are_drawn_as_mean_and_sd_band(tmp_path):
    seeds = [load_run(write_run(tmp_path / f"paw-s{i}", offset=offset))
             for i, offset in enumerate((0.0, 1.0, 3.0))]
    fig = make_figure([Series("PaW", tuple(seeds))], smooth=0.0)
    reward = panels(fig)["reward"]
    mean = [statistics.fmean(step + o for o in (0.0, 1.0, 3.0)) for step in STEPS]
    sd = statistics.stdev((0.0, 1.0, 3.0))
    assert list(reward.get_lines()[0].get_ydata()) == pytest.approx(mean)
    (band,) = reward.collections
    heights = band.get_paths()[0].vertices[:, 1]
    assert max(heights) == pytest.approx(mean[-1] + sd)
    assert min(heights) == pytest.approx(mean[0] - sd)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["PaW (mean ± sd, n=3)"]


def test_percent_band_stays_within_0_and_100(tmp_path):
    high = [Run(f"s{i}", tuple({"step": s, "success": v} for s in STEPS), {})
            for i, v in enumerate((0.9, 1.0, 1.0))]
    low = [Run("t", ({"step": 1, "success": 0.5}, {"step": 2, "success": 0.6}), {})]
    fig = make_figure([Series("high", tuple(high)), Series("low", tuple(low))], smooth=0.0)
    (band,) = panels(fig)["success"].collections
    assert band.get_paths()[0].vertices[:, 1].max() <= 100.0


def test_plot_runs_overlays_runs_and_groups(tmp_path):
    runs = [write_run(tmp_path / "single")]
    groups = {"PaW": [write_run(tmp_path / f"paw-s{i}", offset=i) for i in range(2)],
              "vanilla": [write_run(tmp_path / f"van-s{i}", paw=False, offset=i)
                          for i in range(2)]}
    out = plot_runs(runs, tmp_path / "figure.pdf", groups=groups, keys=["reward", "wm_loss"])
    assert out == tmp_path / "figure.pdf" and out.read_bytes().startswith(b"%PDF")
    with pytest.raises(ValueError, match="group 'empty' has no runs"):
        plot_runs([], tmp_path / "x.png", groups={"empty": []})


def cli(*argv: str) -> int:
    from training.cli import build_parser

    args = build_parser().parse_args(["plot", *argv])
    return args.func(args)


def test_cli_writes_a_figure_and_refuses_to_overwrite_it_without_force(tmp_path, capsys):
    write_run(tmp_path / "paw-s0")
    write_run(tmp_path / "paw-s1", offset=1)
    vanilla = write_run(tmp_path / "vanilla", paw=False)
    assert cli(str(vanilla), "--label", "GRPO", "--group", f"PaW={tmp_path}/paw-s*") == 0
    out = vanilla / "curves_compare.png"  # default: next to the first RUN
    assert out.stat().st_size > 0 and f"wrote {out}" in capsys.readouterr().out
    out.write_bytes(b"the user's own file")
    with pytest.raises(UserError, match="already exists; pass --overwrite true"):
        cli(str(vanilla))
    assert out.read_bytes() == b"the user's own file"
    assert cli(str(vanilla), "--overwrite", "true", "--metrics", "reward,success", "--title", "Shelf") == 0
    assert out.read_bytes().startswith(b"\x89PNG")
    assert cli("--group", f"PaW={tmp_path}/paw-s*") == 0
    assert (tmp_path / "paw-s0" / "curves_compare.png").is_file()


def test_cli_names_the_bad_input(tmp_path):
    run = write_run(tmp_path / "run")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match=r"'.*empty' has no metrics.jsonl"):
        cli(str(tmp_path / "empty"))
    with pytest.raises(UserError, match=r"--metrics rewrd: not a metric these runs logged; "
                                        r"choose from: .*reward"):
        cli(str(run), "--metrics", "reward,rewrd", "--out", str(tmp_path / "x.png"))
    with pytest.raises(UserError, match="groups='PaW' is invalid; expected NAME=GLOB"):
        cli("--group", "PaW")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "metrics.jsonl").write_text('{"step": 1, "reward": 1.0}\n')
    (tmp_path / "broken" / "config.yaml").write_text("algo: [grpo\n")
    with pytest.raises(UserError, match=r"config.yaml' is not valid YAML"):
        cli(str(tmp_path / "broken"))
    with pytest.raises(UserError, match="matches no path"):
        cli("--group", f"PaW={tmp_path}/nothing-*")
    with pytest.raises(UserError, match="unknown image type"):
        cli(str(run), "--out", str(tmp_path / "figure.txt"))
    with pytest.raises(UserError, match="nothing to plot: kl never change"):
        cli(str(run), "--metrics", "kl", "--out", str(tmp_path / "kl.png"))
    assert not (tmp_path / "kl.png").exists()


def test_every_panel_spans_the_same_updates():
    # Validation before the first update logs step 0, which only the success panel draws.
    records = [{"step": 0, "val_success": 0.2}] + [
        {"step": step, "reward": float(step), "success": step / 10, "kl": 0.01 * step}
        for step in range(1, 6)]
    shown = panels(make_figure([one(Run("run", tuple(records)))], smooth=0.0))
    assert {"reward", "success"} <= set(shown)
    assert len({ax.get_xlim() for ax in shown.values()}) == 1
    assert shown["reward"].get_xlim()[0] <= 0 < 1
