"""Runs that collapse (issue 49): when the trainer's collapse watch calls a run collapsed, what
rolling back to the best checkpoint does, and whether the PaW term should train on groups
without advantage signal or on invalid actions.

* ``--watch``: every stored run with its per-update training success (the small-env studies,
  the demo seeds, the async runs in ``benchmarks/results``) replayed through
  :class:`training.infra.collapse.CollapseWatch` at patience K = 1 … 6 (64 episodes an
  update; the studies' validations included). A run *failed to its end* when its rollouts won
  nothing from some update to its last, after a win; the table counts those the watch found,
  those it missed (most have fewer failed updates left than K), and the runs it found that
  recovered (false alarms).
* ``--report``: the runs of ``benchmarks.study_small``'s issue-49 variants against the stored
  ones, paired per seed: ``<variant>_rollback`` (``on_collapse: rollback``, a checkpoint every
  update) on the runs the watch finds at K = 3, and ``<algo>_paw_signal`` /
  ``<algo>_paw_valid`` (``wm_zero_signal_groups`` / ``wm_invalid_actions`` false) on the PaW
  cells of the fair-start study that collapsed. Made by

      python -m benchmarks.study_small --env shelf --starts no_next_obs \\
          --variants grpo_paw_signal grpo_paw_valid
      python -m benchmarks.study_small --env frozenlake --starts no_next_obs \\
          --variants gigpo_paw_signal gigpo_paw_valid
      # and for each run --watch finds: its cell with the _rollback variant, e.g.
      python -c "from benchmarks.study_small import run_cell; ..."   # see benchmarks/README.md

    python -m benchmarks.collapse --watch
    python -m benchmarks.collapse --report
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
#: Episodes of an update in every stored run (8 tasks × 8).
EPISODES = 64


def stored_runs() -> list[tuple[str, dict[str, Any]]]:
    """(name, result) of every stored run with a per-update success curve, but this
    benchmark's own variants."""
    runs = []
    for path in sorted([*RESULTS.glob("study_*_u*/*.json"), *RESULTS.glob("demo_seeds/*__s*.json"),
                        *RESULTS.glob("async_rollouts/*__s*.json")]):
        result = json.loads(path.read_text(encoding="utf-8"))
        if any("success" in row for row in result.get("curve", [])) and not str(
                result.get("variant", "")).endswith(("_rollback", "_signal", "_valid")):
            runs.append((f"{path.parent.name}/{path.stem}", result))
    return runs


def found(result: dict[str, Any], patience: int) -> list[int]:
    """The updates where the watch calls ``result`` collapsed."""
    from training.infra.collapse import CollapseWatch

    watch = CollapseWatch()
    validations = {v["step"]: v["success"] / 100 for v in result.get("val", [])}
    if 0 in validations:
        watch.observe(0, {"val_success": validations[0]}, 0)
    steps = []
    for row in result["curve"]:
        if row.get("success") is None:
            continue
        metrics = {"success": row["success"]}
        if row["step"] in validations:
            metrics["val_success"] = validations[row["step"]]
        if watch.observe(row["step"], metrics, EPISODES, patience):
            steps.append(row["step"])
    return steps


def failed_to_the_end(result: dict[str, Any]) -> int:
    """How many updates at the end of ``result`` won nothing after an earlier win (0: none)."""
    successes = [row["success"] for row in result["curve"] if row.get("success") is not None]
    tail = len(successes)
    while tail and successes[tail - 1] == 0:
        tail -= 1
    return len(successes) - tail if any(successes[:tail]) else 0


def watch_table(patiences=range(1, 7)) -> str:
    runs = stored_runs()
    lines = [f"{len(runs)} stored runs, {sum(failed_to_the_end(r) > 0 for _, r in runs)} of them "
             "failed to their end", "",
             "| patience K | found, failed to the end | found, recovered (false alarm) | "
             "failed to the end, not found (of them: fewer than K failed updates) |",
             "|---:|---:|---:|---:|"]
    for k in patiences:
        said = alarms = missed = short = 0
        for _, result in runs:
            tail, hit = failed_to_the_end(result), bool(found(result, k))
            said += hit and tail > 0
            alarms += hit and tail == 0
            missed += not hit and tail > 0
            short += not hit and 0 < tail < k
        lines.append(f"| {k} | {said} | {alarms} | {missed} ({short}) |")
    lines += ["", "Found at K = 3: " + ", ".join(
        f"{name} (update {found(result, 3)[0]}, failed to the end: "
        f"{'yes' if failed_to_the_end(result) else 'no'})"
        for name, result in runs if found(result, 3))]
    return "\n".join(lines)


def _cell(folder: str, start: str, variant: str) -> dict[int, dict[str, Any]]:
    by_seed = {}
    for path in sorted((RESULTS / folder).glob(f"{start}__{variant}__s*.json")):
        result = json.loads(path.read_text(encoding="utf-8"))
        by_seed[result["seed"]] = result
    return by_seed


def _final(result: dict[str, Any], key: str) -> float:
    return result["val"][-1].get(key, float("nan"))


def report() -> str:
    """The rollback runs and the PaW options against the stored runs, every seed."""
    from benchmarks.study_small import mean_ci

    lines = ["| run | held-out % stored → with rollback | found collapsed at (K = 3) |",
             "|---|---|---|"]
    for folder in sorted(p.name for p in RESULTS.glob("study_*_u*") if p.is_dir()):
        for path in sorted((RESULTS / folder).glob("*_rollback__s*.json")):
            result = json.loads(path.read_text(encoding="utf-8"))
            base = result["variant"].removesuffix("_rollback")
            stored = _cell(folder, result["start"], base).get(result["seed"])
            if stored is None:
                continue
            lines.append(f"| {folder}/{result['start']}/{base}/s{result['seed']} | "
                         f"{stored['after']:.1f} → {result['after']:.1f} | "
                         f"{', '.join(map(str, found(result, 3))) or '—'} |")
    for folder, start, algo in (("study_shelf_u16", "no_next_obs", "grpo"),
                                ("study_frozenlake_u48", "no_next_obs", "gigpo")):
        base = _cell(folder, start, f"{algo}_paw")
        for option in ("signal", "valid"):
            runs = _cell(folder, start, f"{algo}_paw_{option}")
            seeds = sorted(set(runs) & set(base))
            if not seeds:
                continue
            lines += ["", f"{folder}, start {start}, {algo}_paw_{option} against {algo}_paw",
                      "", "| | stored | option | Δ (95 % CI) |", "|---|---|---|---|"]
            for label, key in (("held-out success % after RL", "success"),
                               ("next-observation token accuracy % after RL", "wm_token")):
                a = [_final(base[s], key) for s in seeds]
                b = [_final(runs[s], key) for s in seeds]
                delta, ci = mean_ci([y - x for x, y in zip(a, b)])
                lines.append(f"| {label} | {mean_ci(a)[0]:.1f} | {mean_ci(b)[0]:.1f} | "
                             f"{delta:+.1f} ± {ci:.1f} |")
            lines.append(f"| runs below 10 % | {sum(base[s]['after'] < 10 for s in seeds)} | "
                         f"{sum(runs[s]['after'] < 10 for s in seeds)} | |")
            lines.append(f"| wm_leak at the last update | "
                         f"{mean_ci([base[s]['curve'][-1]['wm_leak'] for s in seeds])[0]:.3f} | "
                         f"{mean_ci([runs[s]['curve'][-1]['wm_leak'] for s in seeds])[0]:.3f}"
                         " | |")
            lines.append(f"| CPU s / run | {mean_ci([base[s]['cpu_s'] for s in seeds])[0]:.0f} "
                         f"| {mean_ci([runs[s]['cpu_s'] for s in seeds])[0]:.0f} | |")
            lines += ["", "Per seed, held-out % stored → option: " + ", ".join(
                f"s{s} {base[s]['after']:.0f} → {runs[s]['after']:.0f}" for s in seeds)]
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--watch", action="store_true")
    parser.add_argument("--report", action="store_true")
    args = parser.parse_args(argv)
    if args.watch:
        print(watch_table())
    if args.report:
        print(report())


if __name__ == "__main__":
    main()
