"""``benchmarks/serve_env.py`` reads a real ``paw-gym serve-env`` process's memory and CPU time."""

from __future__ import annotations

import os
import time

import gymnasium as gym

import paw_gym  # noqa: F401 - registers the envs
from benchmarks.serve_env import ServedEnv, play


def test_a_served_env_reports_its_memory_and_the_cpu_its_steps_cost():
    server = ServedEnv("PaW/Shelf-v0")
    remote = gym.make("PaW/Remote-v0", url=server.url)
    try:
        assert 20 < server.rss_mb() < 4096  # a Python process with the env loaded, in MiB
        before, wall = server.cpu_s(), time.perf_counter()
        play(remote, 200, 0)
        spent, wall = server.cpu_s() - before, time.perf_counter() - wall
        assert spent > 0  # the server stepped the env: its CPU seconds moved
        assert spent <= wall * os.cpu_count()  # seconds (not clock ticks): within wall × cores
    finally:
        remote.close()
        server.close()
