"""Steps per second of the toy-text envs, and what the text layer costs over raw Gymnasium.

* every toy-text env (``PaW/FrozenLake-v0`` … ``PaW/Blackjack-v0``) and Shelf: random admissible
  actions on the raw env, resets included (a reset draws a new layout), steps per CPU second;
* the adapter's overhead: ``TextAdapter("CliffWalking-v1")`` (named actions, text rendering,
  the ``info`` contract) against the same Gymnasium env stepped with action numbers, timed in
  alternating rounds on one thread; the ratio of their medians is the text layer's cost.

    python -m benchmarks.toytext_speed            # ~1 min
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

from benchmarks import common as C
from benchmarks.throughput import env_speed

ENVS = ["PaW/FrozenLake-v0", "PaW/CliffWalking-v0", "PaW/Taxi-v0", "PaW/Sokoban-v0",
        "PaW/Blackjack-v0", "PaW/Shelf-v0"]


def adapter_round(steps: int, text: bool, seed: int = 0) -> float:
    """CPU seconds per step of CliffWalking-v1 through the adapter (``text``) or raw."""
    import gymnasium as gym

    from paw_gym import TextAdapter

    env = (TextAdapter("CliffWalking-v1") if text
           else gym.make("CliffWalking-v1", render_mode="ansi"))
    names = ["up", "right", "down", "left"]
    rng = random.Random(seed)
    env.reset(seed=seed)
    clock = time.process_time()
    for step in range(steps):
        action = rng.randrange(4)
        # The raw env still renders (unwrapped, as the adapter does): both sides produce the
        # state's text, so the ratio is the cost of the adapter's own work (names, the info
        # contract, checks, removing colour codes).
        if text:
            env.step(names[action])
        else:
            env.step(action)
            env.unwrapped.render()
    return (time.process_time() - clock) / steps


def run(steps: int, rounds: int) -> dict:
    speeds = {env_id: env_speed(env_id, {}, steps) for env_id in ENVS}
    raw, text = [], []
    for round_index in range(rounds):  # alternate, so a load change hits both sides alike
        raw.append(adapter_round(steps, False, round_index))
        text.append(adapter_round(steps, True, round_index))
    overhead = {"raw_s_per_step": statistics.median(raw),
                "adapter_s_per_step": statistics.median(text)}
    overhead["ratio"] = overhead["adapter_s_per_step"] / overhead["raw_s_per_step"]
    return {"machine": C.machine(), "steps": steps, "rounds": rounds, "env_speed": speeds,
            "adapter_overhead": overhead}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", default=str(C.RESULTS / "toytext_speed.json"))
    args = parser.parse_args(argv)
    C.set_threads(1)
    result = run(args.steps, args.rounds)
    print("| env | steps/CPU s | episodes |\n|---|---:|---:|")
    for env_id, row in result["env_speed"].items():
        print(f"| {env_id} | {row['steps_per_cpu_s']:,.0f} | {row['episodes']} |")
    overhead = result["adapter_overhead"]
    print(f"\nTextAdapter('CliffWalking-v1') vs raw step + render: "
          f"{1e6 * overhead['adapter_s_per_step']:.1f} vs {1e6 * overhead['raw_s_per_step']:.1f}"
          f" µs/step, ratio {overhead['ratio']:.2f} (median of {args.rounds} alternating rounds)")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1), encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
