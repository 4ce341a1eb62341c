"""ALFWorld speed: our engine vs the upstream TextWorld PDDL path, and vectorised throughput.

Measures, on the same games and the same command sequences (A/B alternated per game):

* reset: upstream ``PddlEnv`` + alfworld's demangler (``load`` + ``reset``, what ``AlfredTWEnv``
  does for each new game) vs ``ALFWorldEngine.reset``: first time (translating the game), with
  the translation on disk but nothing in memory (a new process, or a game evicted from the
  in-memory cache), and from the in-memory cache;
* step: p50 / p99 per command for both;
* steps/s of ``PaW/ALFWorld-v0`` with 1 env, and 2 and 8 envs in ``AsyncVectorEnv`` (random
  admissible actions, autoreset, after every game was parsed once: the steady state of training);
* memory: resident set size after many resets (leak check).

Run::

    python -m benchmarks.alfworld_speed                 # generated cache (built on first use)
    python -m benchmarks.alfworld_speed --data-dir DIR  # e.g. $ALFWORLD_DATA or gen-alfworld output
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import shutil
import time
from pathlib import Path

import numpy as np


def pct(values, q):
    return 1000 * float(np.percentile(values, q))


def upstream_env():
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
    from textworld.envs import PddlEnv

    return AlfredDemangler(PddlEnv(textworld.EnvInfos(admissible_commands=True, won=True)))


def commands_for(game_file: str) -> list[str]:
    """The walkthrough with looks and examines mixed in (what an agent does)."""
    walk = json.loads(Path(game_file).read_text()).get("walkthrough") or []
    out = []
    for command in walk:
        out += [command, "look"] if command.startswith("go to") else [command]
    return out + ["inventory"]


def bench_engines(games, rounds: int) -> None:
    import tempfile

    from paw_gym.alfworld import engine as engine_module

    # An empty translation cache, so that the first reset of a game really translates it.
    disk_cache = Path(tempfile.mkdtemp(prefix="paw_gym_sas_"))
    engine_module.translation_cache_dir = lambda: disk_cache  # looked up at each load
    reference = upstream_env()
    ours = engine_module.ALFWorldEngine(cache_size=len(games) + 1)
    times = {"ref_reset": [], "our_first_reset": [], "our_disk_reset": [], "our_reset": [],
             "ref_step": [], "our_step": []}
    for round_index in range(rounds):
        for game in games:
            commands = commands_for(game.game_file)
            for engine in ("ref", "ours") if round_index % 2 == 0 else ("ours", "ref"):
                if engine == "ref":
                    start = time.perf_counter()
                    reference.load(game.game_file)
                    reference.reset()
                    times["ref_reset"].append(time.perf_counter() - start)
                    for command in commands:
                        start = time.perf_counter()
                        reference.step(command)
                        times["ref_step"].append(time.perf_counter() - start)
                else:
                    first = game.game_file not in ours._games
                    start = time.perf_counter()
                    ours.reset(game.game_file)
                    times["our_first_reset" if first else "our_reset"].append(time.perf_counter() - start)
                    if first:  # again, with the translation on disk but nothing in memory
                        ours.forget(game.game_file)
                        start = time.perf_counter()
                        ours.reset(game.game_file)
                        times["our_disk_reset"].append(time.perf_counter() - start)
                    for command in commands:
                        start = time.perf_counter()
                        ours.step(command)
                        times["our_step"].append(time.perf_counter() - start)
    print(f"\n== engine, {len(games)} games x {rounds} rounds (ms) ==")
    print(f"{'':28}{'p50':>9}{'p99':>9}{'n':>7}")
    for key, values in times.items():
        if values:
            print(f"{key:28}{pct(values, 50):9.1f}{pct(values, 99):9.1f}{len(values):7d}")
    ref_reset = np.median(times["ref_reset"])
    for label, key in (("reset, game not cached yet", "our_first_reset"),
                       ("reset, translation on disk", "our_disk_reset"),
                       ("reset, game in the cache", "our_reset"), ("step", "our_step")):
        ref = ref_reset if "reset" in key else np.median(times["ref_step"])
        if times[key]:
            print(f"{label:28}speed-up (p50, upstream / ours): {ref / np.median(times[key]):.1f}x")
    ours.close()
    shutil.rmtree(disk_cache, ignore_errors=True)


def random_policy_steps(env, steps: int, rng: random.Random) -> float:
    _, info = env.reset(seed=0)
    for index in range(len(env.unwrapped.games)):  # steady state: every game parsed once
        _, info = env.reset(options={"game_index": index})
    start = time.perf_counter()
    for _ in range(steps):
        _, _, terminated, truncated, info = env.step(rng.choice(info["admissible_actions"]))
        if terminated or truncated:
            _, info = env.reset()
    return steps / (time.perf_counter() - start)


def bench_throughput(data_dir: str, steps: int) -> None:
    import gymnasium as gym

    import paw_gym  # noqa: F401

    print(f"\n== PaW/ALFWorld-v0 throughput, random admissible actions, {steps} steps per env ==")
    env = gym.make("PaW/ALFWorld-v0", data_dir=data_dir)
    print(f"1 env              : {random_policy_steps(env, steps, random.Random(0)):7.1f} steps/s")
    env.close()
    for n in (2, 8):
        envs = gym.make_vec("PaW/ALFWorld-v0", num_envs=n, vectorization_mode="async",
                            vector_kwargs={"shared_memory": False}, data_dir=data_dir)
        rng = random.Random(0)
        _, infos = envs.reset(seed=list(range(n)))
        for index in range(len(envs.get_attr("games")[0])):  # every worker parses every game once
            _, infos = envs.reset(options={"game_index": index})
        for phase in ("warm", "timed"):
            start = time.perf_counter()
            for _ in range(steps if phase == "timed" else 10):
                actions = [rng.choice(a) for a in infos["admissible_actions"]]
                _, _, _, _, infos = envs.step(actions)
        rate = steps * n / (time.perf_counter() - start)
        print(f"{n} envs (async)     : {rate:7.1f} steps/s")
        envs.close()


def bench_memory(data_dir: str, resets: int) -> None:
    from paw_gym.alfworld.env import ALFWorldEnv

    env = ALFWorldEnv(data_dir=data_dir)
    rss = []
    for i in range(resets):
        _, info = env.reset(seed=i)
        env.step(info["admissible_actions"][0])
        if i + 1 in (resets // 10, resets):
            rss.append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print(f"\n== memory: max RSS after {resets // 10} resets {rss[0]:.0f} MB, "
          f"after {resets} resets {rss[1]:.0f} MB ==")
    env.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", help="ALFWorld data root (default: the generated cache)")
    parser.add_argument("--games", type=int, default=12, help="games used for the engine A/B")
    parser.add_argument("--rounds", type=int, default=2, help="A/B rounds over those games")
    parser.add_argument("--steps", type=int, default=200, help="steps per env for throughput")
    parser.add_argument("--resets", type=int, default=1000, help="resets for the memory check")
    args = parser.parse_args()

    from paw_gym.alfworld.data import list_games, resolve_source

    source, split_dir = resolve_source("train", args.data_dir)
    data_dir = args.data_dir or str(split_dir.parent.parent)
    games = list_games(split_dir)
    games = [games[i] for i in np.linspace(0, len(games) - 1, min(args.games, len(games))).astype(int)]
    print(f"data: {source} ({split_dir}), {len(games)} games for the engine A/B")
    bench_engines(games, args.rounds)
    bench_throughput(data_dir, args.steps)
    bench_memory(data_dir, args.resets)


if __name__ == "__main__":
    main()
