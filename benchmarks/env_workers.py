"""Env workers: rollout wall time with the envs in this process vs in 1 or 2 worker processes.

``agents.rollout(..., num_env_workers=N)`` (0: in-process). Every measurement runs in a fresh
child process that plays the rollout twice and times the second: the first warms what a
training run has warm after its first update (imports, module caches, the on-disk ALFWorld
translations), and with workers the parent never builds an env itself, as in a training run
with workers. The configurations alternate within each repeat (rotated order); medians over the
repeats are printed with the ratio to in-process. The agent is ``RandomAgent`` (no model), so
the time is env construction + resets + steps + the worker round trips.

    python -m benchmarks.env_workers                                # ALFWorld and Shelf, 32 envs
    python -m benchmarks.env_workers --repeats 7 --max-steps 20 --agent expert
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SLOW_ENV, FAST_ENV = "PaW/ALFWorld-v0", "PaW/Shelf-v0"


def timed_rollout(env_id: str, workers: int, args) -> dict:
    """In the child: a warm-up rollout, then the timed one (same tasks)."""
    import torch

    from agents import ExpertAgent, RandomAgent, rollout
    from agents.envs import env_factory

    torch.set_num_threads(1)
    agent = ExpertAgent() if args.agent == "expert" else RandomAgent()
    # ALFWorld's own ``progress`` (its cache build bar) clashes with rollout's: use a factory.
    env = env_factory(env_id, progress=False) if env_id == SLOW_ENV else env_id

    def play():
        return rollout(agent, env, args.groups, args.group_size, seed=args.seed,
                       max_steps=args.max_steps, num_env_workers=workers)

    play()
    start = time.perf_counter()
    trajectories = play()
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "steps": sum(len(t) for t in trajectories)}


def measure(env_id: str, workers: int, args) -> dict:
    command = [sys.executable, "-m", "benchmarks.env_workers", "--child", env_id, str(workers), "--groups",
               str(args.groups), "--group-size", str(args.group_size), "--max-steps",
               str(args.max_steps), "--seed", str(args.seed), "--agent", args.agent]
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=[SLOW_ENV, FAST_ENV])
    parser.add_argument("--workers", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--agent", choices=["random", "expert"], default="random")
    parser.add_argument("--child", nargs=2, metavar=("ENV", "WORKERS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(timed_rollout(args.child[0], int(args.child[1]), args)))
        return

    print(f"{args.groups * args.group_size} envs ({args.groups} x {args.group_size}), "
          f"<= {args.max_steps} steps, {args.agent} agent, {args.repeats} repeats, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    for env_id in args.envs:
        measure(env_id, 0, args)  # builds what lives on disk (ALFWorld's translations)
        runs: dict[int, list[dict]] = {workers: [] for workers in args.workers}
        for repeat in range(args.repeats):
            shift = repeat % len(args.workers)
            for workers in args.workers[shift:] + args.workers[:shift]:
                runs[workers].append(measure(env_id, workers, args))
        base = statistics.median(r["seconds"] for r in runs[args.workers[0]])
        print(f"\n{env_id}\n| env workers | rollout s (median) | min | max | env steps/s | "
              f"time / {args.workers[0]} workers |\n|---:|---:|---:|---:|---:|---:|")
        for workers, results in runs.items():
            seconds = [r["seconds"] for r in results]
            median = statistics.median(seconds)
            print(f"| {workers} | {median:.3f} | {min(seconds):.3f} | {max(seconds):.3f} | "
                  f"{results[0]['steps'] / median:.0f} | {median / base:.2f} |")
        print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
