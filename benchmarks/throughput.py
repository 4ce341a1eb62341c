"""Throughput of the pieces of a PaW training step, and how its cost grows.

* env steps/s of each built-in env (raw env, random admissible actions: the env's own cost);
* rollout tokens/s (generated and prompt tokens) and update tokens/s (training pass tokens)
  of the tiny model with the PaW trainer;
* the cost of one step as the group size and the history length grow (1×, 2×, 4×, 8×), with
  the log-log slope (1.0 = linear in the factor).

Times are CPU seconds of the main thread with one torch thread (robust on a shared machine);
wall seconds are kept in the JSON.

    python -m benchmarks.throughput           # ~8 min on 2 busy CPU cores
    python -m benchmarks.throughput --quick   # ~3 min
"""

from __future__ import annotations

import argparse
import math
import random
import time
from pathlib import Path

from benchmarks import common as C

ENV_IDS = {"webshop": ("PaW/WebShop-v0", {"split": "dev"}),
           "alfworld": ("PaW/ALFWorld-v0", {"split": "train", "progress": False}),
           "searchqa": ("PaW/SearchQA-v0", {})}


def env_speed(env_id: str, kwargs: dict, steps: int, seed: int = 0) -> dict:
    """Random admissible actions on the raw env (resets included), steps per CPU second of the
    whole process (an env may run helper threads, e.g. ALFWorld's planner)."""
    import gymnasium as gym

    import paw_gym  # noqa: F401

    env = gym.make(env_id, **kwargs)
    rng = random.Random(seed)
    _, info = env.reset(seed=seed)
    done, episodes = 0, 1
    wall, cpu = time.perf_counter(), time.process_time()
    while done < steps:
        actions = info.get("admissible_actions") or ["search[something]"]
        _, _, terminated, truncated, info = env.step(rng.choice(list(actions)))
        done += 1
        if terminated or truncated:
            _, info = env.reset(seed=seed + episodes)
            episodes += 1
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    env.close()
    return {"env": env_id, "steps": done, "episodes": episodes, "cpu_s": cpu, "wall_s": wall,
            "steps_per_cpu_s": done / cpu, "steps_per_wall_s": done / wall}


def step_cost(model: Path, env: str, group_size: int, history: int, groups: int,
              max_steps: int, seed: int = 0) -> dict:
    """One rollout + PaW update (lr = 0) with these settings; CPU/wall seconds and tokens."""
    from training.infra.seeding import seed_everything
    from training.trainer import PaWTrainer

    config = C.train_config(env, model, C.CACHE / "throughput", lr=0.0, n_groups=groups,
                            group_size=group_size, history_length=history,
                            max_episode_steps=max_steps, max_obs_tokens=512,
                            mini_batch_size=64, seed=seed)
    trainer = PaWTrainer(config)
    seed_everything(seed)
    rng = random.Random(seed)
    tasks = [rng.randrange(10**6) for _ in range(groups)]
    wall, cpu = time.perf_counter(), time.thread_time()
    trajectories = trainer.collect(trainer.policy, tasks, group_size, config.temperature, seed)
    rollout_cpu, rollout_wall = time.thread_time() - cpu, time.perf_counter() - wall
    transitions = [s for t in trajectories for s in t.transitions]
    generated = sum(len(s.output.response_ids) for s in transitions)
    prompt = sum(len(s.output.prompt_ids) for s in transitions)
    wall, cpu = time.perf_counter(), time.thread_time()
    metrics = trainer.update(trajectories)
    update_cpu, update_wall = time.thread_time() - cpu, time.perf_counter() - wall
    train_tokens = metrics["tokens_per_s"] * metrics["update_time"]
    return {"group_size": group_size, "history_length": history, "groups": groups,
            "transitions": len(transitions), "generated_tokens": generated,
            "prompt_tokens": prompt, "train_tokens": train_tokens,
            "rollout_cpu_s": rollout_cpu, "rollout_wall_s": rollout_wall,
            "update_cpu_s": update_cpu, "update_wall_s": update_wall,
            "step_cpu_s": rollout_cpu + update_cpu,
            "gen_tokens_per_cpu_s": generated / rollout_cpu,
            "prompt_tokens_per_cpu_s": prompt / rollout_cpu,
            "update_tokens_per_cpu_s": train_tokens / update_cpu,
            "transitions_per_cpu_s": len(transitions) / (rollout_cpu + update_cpu)}


def slope(rows: list[dict], x: str, y: str) -> float:
    """Least-squares slope of log y on log x (1: linear, 2: quadratic)."""
    pts = [(math.log(r[x]), math.log(r[y])) for r in rows if r[x] > 0 and r[y] > 0]
    if len(pts) < 2:
        return float("nan")
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    den = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / den if den else float("nan")


def run(args) -> dict:
    C.set_threads(args.threads)
    from tqdm.auto import tqdm

    envs = {}
    for name in tqdm(args.envs, desc="env speed", disable=not args.progress):
        try:
            envs[name] = env_speed(*ENV_IDS[name], args.env_steps)
        except Exception as error:  # an env that cannot run here is reported, not fatal
            envs[name] = {"error": f"{type(error).__name__}: {error}"}
    model = C.bench_model(args.env)
    factors = [1, 2, 4, 8][:3 if args.quick else 4]
    # (curve, group size, history length): one grows, the other stays at 2.
    jobs = [("group_size", f, 2) for f in factors] + [("history_length", 2, f) for f in factors]
    curves: dict[str, list[dict]] = {"group_size": [], "history_length": []}
    step_cost(model, args.env, 1, 1, 1, 2)  # warm-up: first-call costs out of the figures
    for curve, g, h in tqdm(jobs, desc="cost curves", disable=not args.progress):
        row = step_cost(model, args.env, g, h, args.groups, args.max_steps)
        curves[curve].append(row)
    slopes = {curve: {y: slope(rows, curve, y) for y in
                      ("rollout_cpu_s", "update_cpu_s", "step_cpu_s", "train_tokens")}
              for curve, rows in curves.items()}
    return {"machine": C.machine(), "settings": vars(args) | {"model": str(model)},
            "env_speed": envs, "curves": curves, "loglog_slopes": slopes}


def tables(result: dict) -> str:
    lines = ["| env | steps/s (CPU) | steps/s (wall) | episodes |", "|---|---:|---:|---:|"]
    for name, row in result["env_speed"].items():
        if "error" in row:
            lines.append(f"| {name} | n/a ({row['error'][:60]}) | | |")
        else:
            lines.append(f"| {row['env']} | {row['steps_per_cpu_s']:.0f} | "
                         f"{row['steps_per_wall_s']:.0f} | {row['episodes']} |")
    for curve, rows in result["curves"].items():
        lines += ["", f"Cost vs {curve.replace('_', ' ')} (one step, PaW on):", "",
                  f"| {curve} | transitions | gen tok/s | prompt tok/s | update tok/s | "
                  "rollout CPU s | update CPU s | step CPU s | step / base |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        base = rows[0]["step_cpu_s"] if rows else 1.0
        for r in rows:
            lines.append(f"| {r[curve]} | {r['transitions']} | {r['gen_tokens_per_cpu_s']:.0f} | "
                         f"{r['prompt_tokens_per_cpu_s']:.0f} | "
                         f"{r['update_tokens_per_cpu_s']:.0f} | {r['rollout_cpu_s']:.2f} | "
                         f"{r['update_cpu_s']:.2f} | {r['step_cpu_s']:.2f} | "
                         f"{r['step_cpu_s'] / base:.2f} |")
        s = result["loglog_slopes"][curve]
        lines.append("")
        lines.append(f"log-log slope vs {curve}: rollout {s['rollout_cpu_s']:.2f}, update "
                     f"{s['update_cpu_s']:.2f}, step {s['step_cpu_s']:.2f}, training tokens "
                     f"{s['train_tokens']:.2f} (1.00 = linear)")
    return "\n".join(lines)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="factors 1-4, fewer env steps")
    parser.add_argument("--env", default="webshop", choices=sorted(C.PRESETS),
                        help="env of the rollout/update curves")
    parser.add_argument("--envs", nargs="+", default=list(ENV_IDS), choices=list(ENV_IDS))
    parser.add_argument("--env-steps", type=int, default=None)
    parser.add_argument("--groups", type=int, default=2, help="groups per step")
    parser.add_argument("--max-steps", type=int, default=None, help="episode step cap")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=str(C.RESULTS / "throughput.json"))
    parser.add_argument("--no-progress", dest="progress", action="store_false")
    args = parser.parse_args(argv)
    if args.env_steps is None:
        args.env_steps = 200 if args.quick else 1000
    if args.max_steps is None:
        args.max_steps = 4 if args.quick else 8
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    result = run(args)
    C.write_json(Path(args.out), result)
    print(tables(result))
    print(f"written to {args.out}")
    return result


if __name__ == "__main__":
    main()
