"""The main job (``paw-gym demo``) over seeds, for each place of the world-model term.

Issue 25: with o_{t+1} trained right after the action (``wm_context: none``) the PaW term can
teach the policy to write environment text as its action. This runs the whole demo (demos,
base pretrained on them, GRPO ± PaW, every held-out Shelf task × 4 before and after RL) for
seeds 0..N−1 and these variants:

* ``next_turn``, ``end_of_turn``: GRPO + PaW, the base pretrained in the same serialisation
  as the PaW term (what ``paw-gym demo --wm_context X`` does);
* ``none``: the pipeline before the fix: the base pretrained with an end-of-turn token (as it
  was), the PaW term right after the action;
* ``vanilla_next_turn``, ``vanilla_end_of_turn``: GRPO without PaW from each base (the second
  is also the vanilla run of ``none``, whose base it shares).

Paired design: a seed fixes the demos, the base of each serialisation, the RL tasks and the
sampling, so PaW − vanilla and context − context differences are taken per seed. A run
*collapses* when its held-out success after RL is below its start; the report also counts the
runs whose training success fell below 10 % at some update (issue 25's seed 7 fell from 59 % to
1.6 % after one update). Each run's result (before
and after, the per-update curves with the leak metric, CPU time) is one JSON file in
``benchmarks/results/demo_seeds/``; existing files are skipped, so the script resumes.

    python -m benchmarks.demo_seeds --seeds 10 --workers 2
    python -m benchmarks.demo_seeds --report
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

RESULTS = Path(__file__).resolve().parent / "results" / "demo_seeds"
WORK = Path(__file__).resolve().parents[1] / "runs" / "demo_seeds"
#: variant -> DemoConfig fields
VARIANTS: dict[str, dict[str, Any]] = {
    "next_turn": {"wm_context": "next_turn"},
    "end_of_turn": {"wm_context": "end_of_turn"},
    "none": {"wm_context": "none", "pretrain_wm_context": "end_of_turn"},
    "vanilla_next_turn": {"wm_context": "next_turn", "paw": False},
    "vanilla_end_of_turn": {"wm_context": "end_of_turn", "paw": False},
}
#: (variant, baseline) pairs of the report.
PAIRS = [("next_turn", "vanilla_next_turn"), ("end_of_turn", "vanilla_end_of_turn"),
         ("none", "vanilla_end_of_turn"), ("next_turn", "end_of_turn"), ("next_turn", "none"),
         ("end_of_turn", "none")]
CURVE_KEYS = ("success", "val_success", "invalid_frac", "wm_leak", "lambda_mean", "lambda_max",
              "wm_loss")


def record_demos(seed: int) -> Path:
    """The demo replay of ``seed``, as ``paw-gym demo`` records it (recorded once; before the
    workers start, so that two of them never write one replay)."""
    from training.demo import DemoConfig
    from training.warmstart.sft import record_expert_demos

    config = DemoConfig(seed=seed)
    demos = WORK / f"demos-s{seed}"
    if not demos.is_dir():
        record_expert_demos(config.env_id, config.expert_episodes, demos, seed=seed,
                            max_steps=config.max_steps, split=config.train_split,
                            epsilon=config.expert_epsilon, history_length=config.history_length)
    return demos


def build_base(seed: int, context: str) -> str:
    """Build (or find cached) the base of ``seed`` pretrained in ``context`` from the demos of
    :func:`record_demos`; returns its cache folder."""
    import torch

    from training.demo import DemoConfig, cached_base

    torch.set_num_threads(1)
    folder, _ = cached_base(DemoConfig(seed=seed, wm_context=context), WORK / f"demos-s{seed}")
    return str(folder)


def run(variant: str, seed: int) -> Path:
    """One demo run; its result file."""
    from training.demo import DemoConfig, run_demo
    from training.infra.metrics_log import read_metrics

    path = RESULTS / f"{variant}__s{seed}.json"
    if path.is_file():
        return path
    out = WORK / f"{variant}__s{seed}"
    config = DemoConfig(seed=seed, output_dir=str(out), overwrite=True,  # its own scratch
                        **VARIANTS[variant])
    cpu, wall = time.process_time(), time.perf_counter()
    summary = run_demo(config, log=lambda _: None)
    records = read_metrics(out / "rl" / "metrics.jsonl")
    result = {
        "variant": variant, "seed": seed, "settings": VARIANTS[variant],
        "demo_config": asdict(config),
        "before": summary["before"]["success"], "after": summary["after"]["success"],
        "invalid_before": summary["before"]["invalid"], "invalid_after": summary["after"]["invalid"],
        "curve": [{k: r[k] for k in ("step", *CURVE_KEYS) if k in r} for r in records],
        "timings_s": summary["timings_s"],
        "cpu_s": round(time.process_time() - cpu, 1), "wall_s": round(time.perf_counter() - wall, 1),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1), encoding="utf-8")
    return path


def run_in_workers(seeds, stages: list[tuple[Callable[..., Any], list[tuple]]],
                   workers: int) -> None:
    """Record the demos of ``seeds`` (here, so that two workers never write one replay), then
    each stage's ``function(*cell)`` for every cell, ``workers`` processes at a time, one stage
    after the other; prints each result as it is done."""
    from concurrent.futures import ProcessPoolExecutor

    for seed in seeds:
        record_demos(seed)
    with ProcessPoolExecutor(workers) as pool:
        for function, cells in stages:
            for result in pool.map(function, *zip(*cells)):
                print("done", result, flush=True)


def load() -> dict[str, dict[int, dict]]:
    runs: dict[str, dict[int, dict]] = {}
    for path in sorted(RESULTS.glob("*.json")):
        r = json.loads(path.read_text(encoding="utf-8"))
        runs.setdefault(r["variant"], {})[r["seed"]] = r
    return runs


def report() -> str:
    """Markdown: per variant the held-out success before/after (mean over seeds), the gain with
    its 95 % CI, collapses, the leak; then paired differences; then every seed's pair."""
    from benchmarks.study_small import mean_ci

    runs = load()
    lines = ["| variant | seeds | held-out before % | after % | gain (pp, 95 % CI) | collapses "
             "(after < before) | training success < 10 % at some update | worst gain | "
             "max leak % (mean over seeds) | CPU min / run |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for variant in VARIANTS:
        rs = list(runs.get(variant, {}).values())
        if not rs:
            continue
        gains = [r["after"] - r["before"] for r in rs]
        gain, half = mean_ci(gains)
        leaks = [max((c.get("wm_leak", 0.0) for c in r["curve"]), default=0.0) for r in rs]
        lines.append(
            f"| {variant} | {len(rs)} | {mean_ci([r['before'] for r in rs])[0]:.1f} | "
            f"{mean_ci([r['after'] for r in rs])[0]:.1f} | {gain:+.1f} ± {half:.1f} | "
            f"{sum(g < 0 for g in gains)}/{len(rs)} | "
            f"{sum(min(c['success'] for c in r['curve'] if 'success' in c) < 0.1 for r in rs)}"
            f"/{len(rs)} | {min(gains):+.1f} | "
            f"{100 * sum(leaks) / len(leaks):.2f} | "
            f"{sum(r['cpu_s'] for r in rs) / len(rs) / 60:.1f} |")
    lines += ["", "| paired comparison | seeds | Δ held-out after (pp, 95 % CI) |",
              "|---|---:|---:|"]
    for variant, baseline in PAIRS:
        seeds = sorted(set(runs.get(variant, {})) & set(runs.get(baseline, {})))
        if len(seeds) >= 2:
            diff, half = mean_ci([runs[variant][s]["after"] - runs[baseline][s]["after"]
                                  for s in seeds])
            lines.append(f"| {variant} − {baseline} | {len(seeds)} | {diff:+.1f} ± {half:.1f} |")
    seeds = sorted({s for by_seed in runs.values() for s in by_seed})
    variants = [v for v in VARIANTS if v in runs]
    lines += ["", "Every seed, held-out success before → after (%):", "",
              "| seed | " + " | ".join(variants) + " |",
              "|---:|" + "---:|" * len(variants)]
    for seed in seeds:
        cells = [f"{runs[v][seed]['before']:.1f} → {runs[v][seed]['after']:.1f}"
                 if seed in runs[v] else "–" for v in variants]
        lines.append(f"| {seed} | " + " | ".join(cells) + " |")
    cpu = sum(r["cpu_s"] for by_seed in runs.values() for r in by_seed.values())
    lines += ["", f"CPU time of all {sum(map(len, runs.values()))} runs (base builds "
              f"included where a run built its base): {cpu / 3600:.1f} h."]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--workers", type=int, default=1, help="parallel runs (1 thread each)")
    parser.add_argument("--report", action="store_true", help="only print the report")
    args = parser.parse_args(argv)
    if not args.report:
        seeds = range(args.first_seed, args.first_seed + args.seeds)
        contexts = sorted({VARIANTS[v].get("pretrain_wm_context") or VARIANTS[v]["wm_context"]
                           for v in args.variants})
        # Bases first (each once), then the runs, seed-major so a cut-short study stays paired.
        bases = [(seed, context) for seed in seeds for context in contexts]
        cells = [(variant, seed) for seed in seeds for variant in args.variants]
        run_in_workers(seeds, [(build_base, bases), (run, cells)], args.workers)
    print(report())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
