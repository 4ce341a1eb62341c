"""The preflight memory estimate against a real run's resident memory, phase by phase (issue 56).

``paw-gym train`` prints a per-process estimate before any weight is loaded
(:mod:`training.infra.memory`). On a CPU the number that decides whether two runs fit a machine
is the process's peak resident set (RSS). This script builds the trainer of a config in a fresh
process, as ``paw-gym train`` does, and reads that process's peak RSS in each phase of a run
(the kernel's high-water mark, reset as the phase starts), in their order: the held-out
validation before training (``val_limit`` tasks), one rollout, one update. Each case runs in
its own process (a fresh heap), one torch thread; it reports the estimate, its parts, the peak
of each phase and estimate / peak.

    python -m benchmarks.memory_peak                                # the sparse Shelf recipe
    python -m benchmarks.memory_peak --token_budget 1024 2048 4096 --paw true false

The recipe's LoRA start does not change the shapes, so by default the model starts from its
base weights (``--init_checkpoint`` names an SFT adapter to start from it instead).
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import REPO, RESULTS, RSSPeak, machine, write_json

CONFIG = "configs/real/shelf_smollm2_sparse_grpo_paw.yaml"
MiB = 2**20


def one_case(case: dict) -> dict:
    """Build the trainer of ``case`` (config path and overrides) and run validation, a rollout
    and an update, each under its own :class:`~benchmarks.common.RSSPeak` (the kernel's
    high-water mark, reset at the phase's start: exact); the estimate, each phase's peak and
    the process's peak as the trainer logs it."""
    import torch

    from benchmarks.common import set_threads

    set_threads(1)
    from training.config import load_config
    from training.rl.update import peak_memory_mb
    from training.trainer import PaWTrainer

    config = load_config(case["config"], case["overrides"])
    peaks, seconds = {}, {}

    def phase(name: str, work):
        with RSSPeak() as memory:
            start = time.perf_counter()
            done = work()
            seconds[name] = time.perf_counter() - start
        peaks[name] = memory.peak
        return done

    peaks["startup"] = RSSPeak.high_water_mb()  # the interpreter and the libraries
    trainer = phase("build", lambda: PaWTrainer(config))
    found = trainer.memory_estimate  # the one the run printed, made before the model loaded
    validation = phase("validation", trainer.validate if case["validate"] else dict)
    rollout, _ = phase("rollout", lambda: trainer.sampler.rollout(trainer.step, trainer.model))
    metrics = phase("update", lambda: trainer.update(rollout.trajectories))
    trainer.close()
    # The process's peak: the phases' (each high-water mark was reset) or what the trainer logs.
    peak = max(*peaks.values(), peak_memory_mb(torch.device("cpu")))
    return {"case": case, "estimate_gib": found.total / 2**30,
            "estimate_parts_gib": {k: v / 2**30 for k, v in found.parts.items()},
            "phase_peak_mib": peaks, "ru_maxrss_mib": peak,
            "estimate_over_peak": found.total / MiB / peak, "seconds": seconds,
            "gradient_checkpointing": config.gradient_checkpointing,
            "validation_episodes": validation.get("val_episodes"),
            "update": {k: metrics[k] for k in ("transitions", "optimizer_steps", "tokens_per_s",
                                               "wm_selected", "peak_mem_mb") if k in metrics}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=CONFIG)
    parser.add_argument("--init_checkpoint", default=None,
                        help="an SFT adapter to start from (default: the base model)")
    parser.add_argument("--model", default=None, help="the model (default: the config's)")
    parser.add_argument("--n_groups", type=int, default=None,
                        help="rollout groups (default: the config's)")
    parser.add_argument("--token_budget", type=int, nargs="+", default=[2048])
    parser.add_argument("--paw", choices=["true", "false"], nargs="+", default=["true"])
    parser.add_argument("--gradient_checkpointing", choices=["true", "false"], nargs="+",
                        default=["false"])
    parser.add_argument("--val_limit", type=int, default=48,
                        help="held-out tasks validated before the rollout (0: none)")
    parser.add_argument("--val_wm_replay", default=None,
                        help="held-out transitions the validation reads the world model on")
    parser.add_argument("--out", default=str(RESULTS / "memory_peak.json"))
    parser.add_argument("--case", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.case:
        print(json.dumps(one_case(json.loads(args.case))), flush=True)
        return 0
    rows = []
    for budget, paw, checkpointing in itertools.product(args.token_budget, args.paw,
                                                        args.gradient_checkpointing):
        overrides = {"token_budget": budget, "paw": paw == "true",
                     "gradient_checkpointing": checkpointing == "true",
                     "val_limit": args.val_limit or None,
                     "init_checkpoint": args.init_checkpoint, "progress": False,
                     "val_wm_replay": args.val_wm_replay,
                     "output_dir": str(REPO / "runs" / "bench" / "memory_peak"),
                     **{name: value for name, value in (("model", args.model),
                                                        ("n_groups", args.n_groups))
                        if value is not None}}
        case = {"config": args.config, "overrides": overrides,
                "validate": args.val_limit > 0}
        done = subprocess.run([sys.executable, "-m", "benchmarks.memory_peak", "--case",
                               json.dumps(case)], cwd=REPO, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"case {overrides} failed:\n{done.stderr[-3000:]}")
        row = json.loads(done.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(f"token_budget {budget}, paw {paw}, gradient_checkpointing {checkpointing}: "
              f"estimate {row['estimate_gib']:.2f} GiB, "
              f"peak {row['ru_maxrss_mib'] / 1024:.2f} GiB (x{row['estimate_over_peak']:.2f}"
              f"); phases " + ", ".join(f"{k} {v / 1024:.2f}"
                                         for k, v in row["phase_peak_mib"].items()),
              flush=True)
    out = Path(args.out)
    write_json(out, {"machine": machine(), "rows": rows})
    print("wrote", out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
