"""Asynchronous rollouts on the main job (issue 40): updates per hour, and learning.

The main job is ``paw-gym demo``'s RL stage: GRPO + PaW on PaW/Shelf-v0, 8 tasks × 8 episodes
per update, 20 updates, from the seed's pretrained nano base (``benchmarks.demo_seeds`` builds
and caches the demos and the bases). Variants (``VARIANTS``):

* ``sync``: the trainer as the demo runs it;
* ``async1`` / ``async2``: ``async_rollouts`` with ``max_staleness`` 1 / 2 and
  ``rollout_correction: token_truncate``;
* ``async2_uncorrected``: staleness 2 without the correction (what the correction does).

Parts:

* ``--throughput``: seed 0's base, ``--updates`` updates of each variant without validation,
  in ``--rounds`` rounds whose variant order rotates; every process on one torch thread.
  Updates per hour from the median update time (``step_time``: waiting for the rollout plus
  the update; the first update, which waits for the worker to start, is left out), and each
  async variant's ratio to ``sync`` within a round, median over rounds.
* ``--learning``: seeds 0..N−1, each variant's RL stage from the seed's base, then the demo's
  own held-out evaluation (``training.demo.evaluate_held_out``: 48 tasks × 4, temperature
  0.4): held-out success after RL, paired per seed; the report gives each variant's mean and
  the paired difference with its 95 % CI, and the CPU time. A run's result is one JSON file in
  ``benchmarks/results/async_rollouts/``; existing ones are skipped, so the script resumes.

    python -m benchmarks.async_rollouts --throughput --rounds 3 --updates 8
    python -m benchmarks.async_rollouts --learning --seeds 10 --variants sync async1
    python -m benchmarks.async_rollouts --report
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results" / "async_rollouts"
WORK = Path(__file__).resolve().parents[1] / "runs" / "async_rollouts"
VARIANTS: dict[str, dict[str, Any]] = {
    "sync": {},
    "sync_corrected": {"rollout_correction": "token_truncate"},
    "async1": {"async_rollouts": True, "max_staleness": 1,
               "rollout_correction": "token_truncate"},
    "async2": {"async_rollouts": True, "max_staleness": 2,
               "rollout_correction": "token_truncate"},
    "async1_uncorrected": {"async_rollouts": True, "max_staleness": 1},
    "async2_uncorrected": {"async_rollouts": True, "max_staleness": 2},
}


def cpu_seconds() -> float:
    """CPU time of this process and its finished children (the rollout worker)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def rl_stage(seed: int, variant: str, output_dir: Path, **changes: Any):
    """The demo's RL TrainConfig of ``seed`` from its cached base, in ``variant``."""
    from dataclasses import replace

    from benchmarks.demo_seeds import build_base, record_demos
    from training.demo import DemoConfig, rl_config

    record_demos(seed)
    base = Path(build_base(seed, "next_turn")) / "model"
    config = rl_config(DemoConfig(seed=seed), base, output_dir)
    return replace(config, **VARIANTS[variant], **changes)


def learning_run(variant: str, seed: int) -> Path:
    """One RL stage and its held-out evaluation; its result file."""
    import torch

    from training.infra.metrics_log import read_metrics
    from training.trainer import PaWTrainer

    path = RESULTS / f"{variant}__s{seed}.json"
    if path.is_file():
        return path
    torch.set_num_threads(1)
    out = WORK / f"{variant}__s{seed}"
    config = rl_stage(seed, variant, out)
    cpu, wall = cpu_seconds(), time.perf_counter()
    trainer = PaWTrainer(config)
    trainer.train()
    train_wall = time.perf_counter() - wall
    from training.demo import DemoConfig, evaluate_held_out

    row = evaluate_held_out(trainer.policy, DemoConfig(seed=seed)).row()
    after = {"success": row.success, "invalid": row.invalid}
    rows = read_metrics(out / "metrics.jsonl")
    result = {"variant": variant, "seed": seed, "settings": VARIANTS[variant],
              "after": after["success"], "invalid_after": after["invalid"],
              "step_time_median": statistics.median(r["step_time"] for r in rows[1:]),
              "train_wall_s": round(train_wall, 1),
              "curve": [{k: r[k] for k in ("step", "success", "val_success", "staleness",
                                           "rollout_logprob_gap", "rollout_weight_mean",
                                           "rollout_corrected_frac", "step_time") if k in r}
                        for r in rows],
              "cpu_s": round(cpu_seconds() - cpu, 1),
              "wall_s": round(time.perf_counter() - wall, 1)}
    RESULTS.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1), encoding="utf-8")
    print(f"{variant} seed {seed}: held-out {after['success']:.1f} %, "
          f"{result['step_time_median']:.1f} s per update", flush=True)
    return path


def throughput(rounds: int, updates: int, variants: list[str]) -> dict[str, Any]:
    """Median update time of each variant per round (rotating order) and the ratios."""
    import torch

    from training.trainer import PaWTrainer

    torch.set_num_threads(1)
    times: dict[str, list[float]] = {v: [] for v in variants}
    for r in range(rounds):
        order = variants[r % len(variants):] + variants[:r % len(variants)]
        for variant in order:
            config = rl_stage(0, variant, WORK / f"throughput-{variant}", total_steps=updates,
                              val_every=0, val_before_train=False, record_replay=False)
            history = PaWTrainer(config).train()
            times[variant].append(statistics.median(h["step_time"] for h in history[1:]))
            print(f"round {r + 1} {variant}: {times[variant][-1]:.2f} s per update", flush=True)
    result = {"rounds": rounds, "updates": updates, "median_step_s": times,
              "updates_per_hour": {v: 3600 / statistics.median(t) for v, t in times.items()}}
    if "sync" in times:
        result["speedup_vs_sync"] = {
            v: statistics.median(s / a for s, a in zip(times["sync"], times[v]))
            for v in variants if v != "sync"}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"throughput_{'_'.join(variants)}.json").write_text(json.dumps(result, indent=1),
                                                                 encoding="utf-8")
    return result


def report() -> str:
    """Markdown: each variant's held-out success, the paired differences, every seed."""
    from benchmarks.study_small import mean_ci

    runs: dict[str, dict[int, dict]] = {}
    for path in sorted(RESULTS.glob("*__s*.json")):
        r = json.loads(path.read_text(encoding="utf-8"))
        runs.setdefault(r["variant"], {})[r["seed"]] = r
    lines = ["| variant | seeds | held-out after RL % (95 % CI) | s per update (median) | "
             "CPU min / run |", "|---|---|---|---|---|"]
    for variant, by_seed in runs.items():
        after = [r["after"] for r in by_seed.values()]
        mean, ci = mean_ci(after)
        lines.append(f"| {variant} | {len(after)} | {mean:.1f} ± {ci:.1f} | "
                     f"{statistics.median(r['step_time_median'] for r in by_seed.values()):.1f}"
                     f" | {statistics.mean(r['cpu_s'] for r in by_seed.values()) / 60:.1f} |")
    lines += ["", "| pair | seeds | Δ held-out (pp, 95 % CI) |", "|---|---|---|"]
    for a, b in (("async1_uncorrected", "sync"), ("async1", "sync"),
                 ("async1", "async1_uncorrected"), ("sync_corrected", "sync"),
                 ("async2_uncorrected", "sync"), ("async2", "sync"),
                 ("async2", "async2_uncorrected")):
        seeds = sorted(set(runs.get(a, {})) & set(runs.get(b, {})))
        if seeds:
            mean, ci = mean_ci([runs[a][s]["after"] - runs[b][s]["after"] for s in seeds])
            lines.append(f"| {a} − {b} | {len(seeds)} | {mean:+.1f} ± {ci:.1f} |")
    seeds = sorted({s for by_seed in runs.values() for s in by_seed})
    lines += ["", "| seed | " + " | ".join(runs) + " |", "|---" * (len(runs) + 1) + "|"]
    for s in seeds:
        lines.append(f"| {s} | " + " | ".join(
            f"{runs[v][s]['after']:.1f}" if s in runs[v] else "—" for v in runs) + " |")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--throughput", action="store_true")
    parser.add_argument("--learning", action="store_true")
    parser.add_argument("--report", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--updates", type=int, default=8)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS),
                        default=["sync", "async1"])
    args = parser.parse_args(argv)
    if args.throughput:
        print(json.dumps(throughput(args.rounds, args.updates, args.variants), indent=1))
    if args.learning:
        for seed in range(args.seeds):
            for variant in args.variants:
                learning_run(variant, seed)
    if args.report:
        print(report())


if __name__ == "__main__":
    main()
