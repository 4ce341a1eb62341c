"""Tables (success mean ± std over seeds, per task type) and training-dynamics plots from the
study's result files.

    python -m benchmarks.study_report            # reads benchmarks/results/study/
    python -m benchmarks.study_report --quick    # reads benchmarks/results/study_quick/

Writes ``study.md`` and ``study_<env>_<start>.png`` next to the results folder.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from benchmarks import common as C
from benchmarks.study_learning import BUDGET, RL_LR, STARTS, VARIANTS, results_dir

LABELS = {"init": "warm start (before RL)", "grpo": "GRPO", "grpo_paw": "GRPO + PaW",
          "gigpo": "GiGPO", "gigpo_paw": "GiGPO + PaW",
          "paw_no_adaptive": "GRPO + PaW w/o adaptive λ", "paw_ce": "GRPO + PaW, CE not CMAE"}
CURVES = [("reward", "episode return"), ("success", "train success"),
          ("lambda_mean", "λ_g mean"), ("wm_loss", "WM loss (per transition)"),
          ("clip_frac", "PPO clipped-token ratio"), ("wm_clipped_frac", "obs tokens with p > ρ")]


def load(folder: Path) -> dict[tuple[str, str], dict[str, list[dict]]]:
    """{(env, start): {variant: [result, ...]}} (the init tables count as variant 'init')."""
    grouped: dict[tuple[str, str], dict[str, list[dict]]] = {}
    for path in sorted(folder.glob("*.json")):
        data = C.load_json(path)
        run = data["run"]
        grouped.setdefault((run["env"], run["start"]), {}).setdefault(
            run["variant"], []).append(data)
    return grouped


def mean_std(values: list[float], digits: int = 1) -> str:
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def table(env: str, start: str, variants: dict[str, list[dict]], quick: bool = False) -> str:
    types = sorted({r["task_type"] for runs in variants.values() for d in runs
                    for r in d["eval"]["rows"] if r["task_type"] != "overall"})
    show_score = env == "webshop"
    head = ["variant", "seeds"] + types + ["**overall success %**"] + \
        (["score"] if show_score else []) + ["eval return", "eval invalid %",
                                             "train return (last 2 updates)"]
    lines = ["| " + " | ".join(head) + " |", "|---|---:|" + "---:|" * (len(head) - 2)]
    order = ["init"] + [v for v in VARIANTS if v in variants]
    for variant in order:
        runs = variants.get(variant)
        if not runs:
            continue
        rows = [{r["task_type"]: r for r in d["eval"]["rows"]} for d in runs]
        cells = [LABELS.get(variant, variant), str(len(runs))]
        for t in types:
            cells.append(mean_std([r[t]["success"] for r in rows if t in r]))
        cells.append(mean_std([r["overall"]["success"] for r in rows]))
        if show_score:
            cells.append(mean_std([r["overall"]["score"] for r in rows]))
        cells.append(mean_std([r["overall"]["mean_return"] for r in rows], 2))
        cells.append(mean_std([r["overall"]["invalid"] for r in rows]))
        last = [statistics.mean(h["reward"] for h in d["history"][-2:])
                for d in runs if d.get("history")]
        cells.append(f"{statistics.mean(last):.2f}" if last else "–")
        lines.append("| " + " | ".join(cells) + " |")
    episodes = runs[0]["eval"]["rows"][-1]["episodes"] if runs else 0
    title = f"### {env} — start: {start} ({_start_text('weak' if quick else start)})"
    return "\n".join([title, "", f"Success % on {episodes} held-out tasks per run "
                      "(mean ± sample std over seeds; per task type, then overall).", ""] + lines)


def _start_text(start: str) -> str:
    epochs, episodes = STARTS[start]
    demos = "all expert demos" if episodes is None else f"{episodes} expert episodes"
    return f"SFT {epochs} epoch(s) on {demos}"


def plot(env: str, start: str, variants: dict[str, list[dict]], out: Path) -> None:
    """Training dynamics per variant: the mean over seeds with a band of ± one sample standard
    deviation (the seeds' spread, as in the tables); vanilla variants stay out of the
    world-model panels."""
    from training.infra.plots import Run, Series, make_figure

    series = [Series(LABELS.get(variant, variant),
                     tuple(Run(f"seed {d['run'].get('seed', i)}", tuple(d["history"]),
                               d.get("config") or VARIANTS.get(variant, {}))
                           for i, d in enumerate(runs) if d.get("history")))
              for variant, runs in variants.items()]
    fig = make_figure([one for one in series if one.runs], [key for key, _ in CURVES],
                      title=f"{env} ({start} start): mean ± sd over seeds", smooth=0.0,
                      titles=dict(CURVES))  # a few updates per run: too few to smooth
    if fig is not None:
        fig.savefig(out, dpi=80)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    folder = results_dir(args.quick)
    grouped = load(folder)
    if not grouped:
        print(f"no results in {folder}")
        return 1
    parts = [f"Budget per run: {BUDGET} RL updates at lr {RL_LR} (full fine-tuning of the nano "
             "model), 1 torch thread."]
    for (env, start), variants in sorted(grouped.items()):
        parts.append(table(env, start, variants, args.quick))
        png = folder.parent / f"{folder.name}_{env}_{start}.png"
        plot(env, start, {v: r for v, r in variants.items() if v != "init"}, png)
        parts.append(f"![training dynamics]({png.name})")
    text = "\n\n".join(parts) + "\n"
    (folder.parent / f"{folder.name}.md").write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
