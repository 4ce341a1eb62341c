"""The first RL updates of the main job under other step sizes, on the training pool only.

Issue 25 item 5: over seeds 0–9, one early GRPO update of ``paw-gym demo`` sometimes broke the
response format (training success 61 % → 0 % after one update; vanilla GRPO on 4 of 10 seeds,
GRPO + PaW on 2). This screens RL settings on that symptom alone: from each seed's cached
base (the one ``benchmarks/demo_seeds.py`` used), it runs the first ``--updates`` updates of
the demo's RL stage with a setting's overrides and records the training success of every
update. No held-out task is played, so choosing a setting here does not look at the numbers
that ``demo_seeds.py`` reports afterwards.

    python -m benchmarks.demo_stability --seeds 2 3 6 8 --variants vanilla --settings one_step
    python -m benchmarks.demo_stability --report

One JSON per (setting, variant, seed) in ``benchmarks/results/demo_stability/``; existing
files are skipped.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results" / "demo_stability"
WORK = Path(__file__).resolve().parents[1] / "runs" / "demo_stability"
#: setting -> TrainConfig overrides of the demo's RL stage
SETTINGS: dict[str, dict[str, Any]] = {
    "ppo_48": {"mini_batch_size": 48},  # the demo's setting before the fix: 4-8 steps/update
    "lr1e-4": {"lr": 1e-4, "mini_batch_size": 48},
    "one_step": {"mini_batch_size": 0},  # the demo's setting since
}
VARIANTS = {"paw": True, "vanilla": False}


def run(setting: str, variant: str, seed: int, updates: int) -> Path:
    import torch

    from benchmarks.demo_seeds import record_demos
    from training.demo import DemoConfig, cached_base, rl_config
    from training.infra.metrics_log import read_metrics
    from training.trainer import PaWTrainer

    path = RESULTS / f"{setting}__{variant}__s{seed}.json"
    if path.is_file():
        return path
    torch.set_num_threads(1)
    config = DemoConfig(seed=seed, paw=VARIANTS[variant], rl_steps=updates, val_every=0)
    base, _ = cached_base(config, record_demos(seed))
    out = WORK / path.stem
    cpu = time.process_time()
    PaWTrainer(replace(rl_config(config, base / "model", out), progress=False,
                       **SETTINGS[setting])).train()
    records = read_metrics(out / "metrics.jsonl")
    result = {"setting": setting, "overrides": SETTINGS[setting], "variant": variant,
              "seed": seed, "success": [r["success"] for r in records],
              "invalid_frac": [r["invalid_frac"] for r in records],
              "cpu_s": round(time.process_time() - cpu, 1)}
    RESULTS.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1), encoding="utf-8")
    return path


def report() -> str:
    runs = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(RESULTS.glob("*.json"))]
    lines = ["| setting | variant | seed | training success per update (%) | CPU s |",
             "|---|---|---:|---|---:|"]
    for r in sorted(runs, key=lambda r: (list(SETTINGS).index(r["setting"]), r["variant"],
                                         r["seed"])):
        curve = " ".join(f"{100 * s:.0f}" for s in r["success"])
        lines.append(f"| {r['setting']} | {r['variant']} | {r['seed']} | {curve} | "
                     f"{r['cpu_s']:.0f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--settings", nargs="+", default=["one_step"], choices=list(SETTINGS))
    parser.add_argument("--updates", type=int, default=4)
    parser.add_argument("--workers", type=int, default=1, help="parallel runs (1 thread each)")
    parser.add_argument("--report", action="store_true", help="only print the report")
    args = parser.parse_args(argv)
    if not args.report:
        from benchmarks.demo_seeds import run_in_workers

        cells = [(s, v, seed, args.updates) for s in args.settings for seed in args.seeds
                 for v in args.variants]
        run_in_workers(args.seeds, [(run, cells)], args.workers)
    print(report())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
