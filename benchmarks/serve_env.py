"""What a served env costs: stepping through ``paw-gym serve-env`` against stepping in process,
and the server's memory per session.

* **speed**: the same seeded episodes (uniform random admissible actions, a fixed search on
  WebShop's search page; resets included) stepped in process (``gym.make(env)``) and through
  ``gym.make("PaW/Remote-v0", url=...)`` against ``paw-gym serve-env`` running in its own
  process, in alternating rounds (a change of load hits both sides alike); medians of wall
  seconds per step, and CPU seconds per step (remote: client and server together, the
  server's read through psutil); and the transport alone, ``state()`` round trips (no env
  work), timed the same way;
* **memory**: the server process's resident memory (RSS) with 0, 1, 10 and 50 open sessions,
  each reset once; per session = (RSS at 50 - RSS at 1) / 49.

    python -m benchmarks.serve_env            # ~3 min on 2 busy cores
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil

from benchmarks import common as C

ENVS = ["PaW/Shelf-v0", "PaW/WebShop-v0"]
#: WebShop's search page admits any search[...]: one fixed query there.
SEARCH = "search[red cotton shirt]"
SESSION_COUNTS = (1, 10, 50)


class ServedEnv:
    """``paw-gym serve-env --env ENV --port 0`` in its own process."""

    def __init__(self, env_id: str, max_sessions: int = 64):
        command = [sys.executable, "-m", "training.cli", "serve-env", "--env", env_id,
                   "--port", "0", "--max_sessions", str(max_sessions)]
        # psutil's Popen: subprocess's, which also reads the process's memory and CPU time
        self.process = psutil.Popen(command, cwd=C.REPO, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True)
        lines = []
        for line in self.process.stdout:  # other lines (a library's warning) may come first
            lines.append(line)
            if found := re.search(r"^serving \S+ at (http://\S+) ", line):
                self.url = found.group(1)
                return
        raise RuntimeError(f"serve-env did not start: {''.join(lines)}")

    def rss_mb(self) -> float:
        return self.process.memory_info().rss / 2**20

    def cpu_s(self) -> float:
        times = self.process.cpu_times()
        return times.user + times.system

    def close(self) -> None:
        self.process.terminate()  # SIGTERM: a benchmark run in the background ignores SIGINT
        self.process.communicate(timeout=60)


def play(env, steps: int, seed: int) -> tuple[float, float]:
    """Wall and CPU seconds (of this process) per step over ``steps`` steps of seeded episodes."""
    rng = random.Random(seed)
    episode = 0
    wall, cpu = time.perf_counter(), time.process_time()
    observation, info = env.reset(seed=seed)
    for _ in range(steps):
        action = rng.choice(info["admissible_actions"] or [SEARCH])
        observation, reward, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            episode += 1
            observation, info = env.reset(seed=seed + episode)
    return (time.perf_counter() - wall) / steps, (time.process_time() - cpu) / steps


def round_trips(env, count: int) -> tuple[float, float]:
    """Wall and CPU seconds (of this process) per ``state()`` request: a round trip with no env
    work, the transport's own cost."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(count):
        env.state()
    return (time.perf_counter() - wall) / count, (time.process_time() - cpu) / count


def speed(env_id: str, steps: int, rounds: int) -> dict:
    import gymnasium as gym

    import paw_gym  # noqa: F401 - registers the envs

    server = ServedEnv(env_id)
    local, remote = gym.make(env_id), gym.make("PaW/Remote-v0", url=server.url)
    rows: dict[str, list[float]] = {key: [] for key in (
        "in_process_wall", "in_process_cpu", "remote_wall", "remote_cpu", "state_wall",
        "state_cpu")}
    try:
        play(local, 50, 0)  # warm both up (imports, first pages)
        play(remote, 50, 0)
        for round_index in range(rounds):
            wall, cpu = play(local, steps, round_index)
            rows["in_process_wall"].append(wall)
            rows["in_process_cpu"].append(cpu)
            server_cpu = server.cpu_s()
            wall, cpu = play(remote, steps, round_index)
            rows["remote_wall"].append(wall)
            rows["remote_cpu"].append(cpu + (server.cpu_s() - server_cpu) / steps)
            server_cpu = server.cpu_s()
            wall, cpu = round_trips(remote.unwrapped, steps)
            rows["state_wall"].append(wall)
            rows["state_cpu"].append(cpu + (server.cpu_s() - server_cpu) / steps)
    finally:
        remote.close()
        server.close()
    median = {key: statistics.median(values) for key, values in rows.items()}
    return {"env": env_id, "steps_per_round": steps, "rounds": rounds,
            "in_process_steps_per_s": 1 / median["in_process_wall"],
            "remote_steps_per_s": 1 / median["remote_wall"],
            "wall_ratio": median["remote_wall"] / median["in_process_wall"],
            "in_process_cpu_us_per_step": 1e6 * median["in_process_cpu"],
            "remote_cpu_us_per_step": 1e6 * median["remote_cpu"],
            "cpu_ratio": median["remote_cpu"] / median["in_process_cpu"],
            "state_round_trip_wall_us": 1e6 * median["state_wall"],
            "state_round_trip_cpu_us": 1e6 * median["state_cpu"],
            "rounds_s_per_step": rows}


def memory(env_id: str) -> dict:
    import gymnasium as gym

    import paw_gym  # noqa: F401 - registers the envs

    server = ServedEnv(env_id, max_sessions=max(SESSION_COUNTS))
    sessions = []
    try:
        time.sleep(1.0)  # let the server settle after its start
        rss = {0: server.rss_mb()}
        for count in SESSION_COUNTS:
            while len(sessions) < count:
                env = gym.make("PaW/Remote-v0", url=server.url)
                env.reset(seed=len(sessions))
                sessions.append(env)
            rss[count] = server.rss_mb()
    finally:
        for env in sessions:
            env.close()
        server.close()
    first, last = SESSION_COUNTS[0], SESSION_COUNTS[-1]
    return {"env": env_id, "rss_mb": rss,
            "mb_per_session": (rss[last] - rss[first]) / (last - first)}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", nargs="+", default=ENVS)
    parser.add_argument("--steps", type=int, default=2000, help="steps per round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", default=str(C.RESULTS / "serve_env.json"))
    args = parser.parse_args(argv)
    result = {"machine": C.machine(), "load_average_before": os.getloadavg(), "speed": {},
              "memory": {}}
    for env_id in args.envs:
        result["speed"][env_id] = speed(env_id, args.steps, args.rounds)
        result["memory"][env_id] = memory(env_id)
    result["load_average_after"] = os.getloadavg()
    print("| env | in-process steps/s | remote steps/s | wall ratio | CPU µs/step in-process "
          "| remote (client + server) | CPU ratio |\n|---|---:|---:|---:|---:|---:|---:|")
    for env_id, row in result["speed"].items():
        print(f"| {env_id} | {row['in_process_steps_per_s']:,.0f} | "
              f"{row['remote_steps_per_s']:,.0f} | {row['wall_ratio']:.1f} | "
              f"{row['in_process_cpu_us_per_step']:.0f} | {row['remote_cpu_us_per_step']:.0f} | "
              f"{row['cpu_ratio']:.1f} |")
    for env_id, row in result["speed"].items():
        print(f"{env_id}: a state() round trip (no env work) takes "
              f"{row['state_round_trip_wall_us']:.0f} µs, {row['state_round_trip_cpu_us']:.0f} "
              f"µs CPU (client + server)")
    counts = " | ".join(f"{n} sessions" for n in (0, *SESSION_COUNTS))
    print(f"\n| env | {counts} | MB per session |\n|---|" + "---:|" * (len(SESSION_COUNTS) + 2))
    for env_id, row in result["memory"].items():
        cells = " | ".join(f"{row['rss_mb'][n]:.0f} MB" for n in (0, *SESSION_COUNTS))
        print(f"| {env_id} | {cells} | {row['mb_per_session']:.2f} |")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1), encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
