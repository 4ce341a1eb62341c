"""Batched rollout vs a naive one-env-at-a-time loop: generated tokens/s and env steps/s.

A: ``agents.rollout`` of ``groups x group_size`` episodes (one ``act`` call per step for every
live env). B: the same policy, one env at a time, one ``act([prompt])`` per step, on the first
``--naive-episodes`` of the same tasks (it is slow; rates are per second, so the subset is fair).
A and B alternate ``--repeats`` times; medians are printed with the ratio A/B.

    python -m benchmarks.agents_rollout                     # WebShop, micro tiny model, 16 x 8
    python -m benchmarks.agents_rollout --model DIR --max-new-tokens 256 --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path


def batched(policy, args, env_kwargs) -> tuple[int, int, float]:
    from agents import rollout

    start = time.perf_counter()
    trajectories = rollout(policy, args.env, args.groups, args.group_size,
                           temperature=1.0, max_new_tokens=args.max_new_tokens,
                           max_steps=args.max_steps, seed=args.seed, **env_kwargs)
    seconds = time.perf_counter() - start
    steps = [s for t in trajectories for s in t.transitions]
    return sum(len(s.output.response_ids) for s in steps), len(steps), seconds


def naive(policy, args, env_kwargs, task_seeds: list[int]) -> tuple[int, int, float]:
    from agents.envs import make_agent_env
    from wrappers import PolicyAction

    tokens = steps = 0
    start = time.perf_counter()
    for episode in range(args.naive_episodes):
        env = make_agent_env(args.env, **env_kwargs)
        prompt, _ = env.reset(seed=task_seeds[episode // args.group_size])
        for step in range(args.max_steps):
            output = policy.act([prompt], temperature=1.0, max_new_tokens=args.max_new_tokens,
                                seed=args.seed * 1000 + episode * 100 + step)[0]
            prompt, _, terminated, truncated, _ = env.step(
                PolicyAction(output.text, action_entropy=output.mean_entropy))
            tokens += len(output.response_ids)
            steps += 1
            if terminated or truncated:
                break
        env.close()
    return tokens, steps, time.perf_counter() - start


def build_model(args, env_kwargs) -> str:
    from agents.corpus import env_texts, template_texts
    from agents.tiny_model import build_tiny_model

    out = Path(tempfile.mkdtemp(prefix="paw-bench-")) / args.size
    texts = template_texts() + list(env_texts([args.env], 16, 15, 0, **env_kwargs))
    return str(build_tiny_model(texts, out, size=args.size))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="PaW/WebShop-v0")
    parser.add_argument("--env-kwargs", default="", metavar="KEY=VALUE[,...]",
                        help="env constructor arguments (paw-gym's --env_kwargs syntax)")
    parser.add_argument("--model", help="model directory (default: build a tiny model)")
    parser.add_argument("--size", default="micro", choices=("nano", "micro", "mini"))
    parser.add_argument("--groups", type=int, default=16)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--max-steps", type=int, default=3, help="steps per episode")
    parser.add_argument("--naive-episodes", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (both sides)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import numpy as np
    import torch

    import paw_gym  # noqa: F401
    from agents import HFPolicy
    from training.commands.common import parse_env_kwargs

    torch.set_num_threads(args.threads)
    env_kwargs = parse_env_kwargs(args.env_kwargs)
    model = args.model or build_model(args, env_kwargs)
    policy = HFPolicy(model)
    # The same task draw as rollout(seed=args.seed) makes, so B plays A's first tasks.
    task_seeds = np.random.default_rng(args.seed).integers(0, 2**31 - 1,
                                                           size=args.groups).tolist()
    results: dict[str, list[tuple[float, float]]] = {"batched": [], "naive": []}
    for repeat in range(args.repeats):
        for name in ("batched", "naive"):
            tokens, steps, seconds = (batched(policy, args, env_kwargs) if name == "batched"
                                      else naive(policy, args, env_kwargs, task_seeds))
            results[name].append((tokens / seconds, steps / seconds))
            print(f"repeat {repeat + 1} {name:>7}: {tokens} tokens, {steps} env steps in "
                  f"{seconds:.1f}s -> {tokens / seconds:.1f} tok/s, {steps / seconds:.2f} steps/s",
                  flush=True)
    tok = {k: statistics.median(r[0] for r in v) for k, v in results.items()}
    stp = {k: statistics.median(r[1] for r in v) for k, v in results.items()}
    print(f"\n{args.env}, {Path(model).name} model, {args.groups}x{args.group_size} episodes, "
          f"{args.max_steps} steps, max_new_tokens={args.max_new_tokens}, "
          f"{args.threads} torch thread(s), medians of {args.repeats}")
    print(f"{'':>10}{'tokens/s':>12}{'steps/s':>10}")
    for name in ("batched", "naive"):
        print(f"{name:>10}{tok[name]:>12.1f}{stp[name]:>10.2f}")
    print(f"{'ratio':>10}{tok['batched'] / tok['naive']:>11.1f}x"
          f"{stp['batched'] / stp['naive']:>9.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
