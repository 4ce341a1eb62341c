"""What the tests share besides fixtures (those are in the repository's ``conftest.py``): the
custom test env's id, registered on import, and where the real datasets are."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import gymnasium as gym

import paw_gym

#: Real datasets beside the repository (absent on a user's fresh checkout: tests skip).
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

GUESS_ID = "Test/GuessNumber-v0"
if GUESS_ID not in gym.registry:
    paw_gym.register_text_env(GUESS_ID, "tests.envs:GuessNumberEnv", max_episode_steps=6,
                              description="guess a hidden number (test env)")
RESET_TOKEN_ID = "Test/ResetToken-v0"
if RESET_TOKEN_ID not in gym.registry:
    paw_gym.register_text_env(RESET_TOKEN_ID, "tests.envs:ResetTokenEnv", max_episode_steps=3,
                              description="open a door whose reset text holds a unique word "
                                          "(test env)")


def replay_record_key(record: dict) -> tuple:
    """What identifies a trainer's replay record and what it says (resume tests compare runs'
    replays by it)."""
    return (record["update"], record["episode_id"], record["step"], record["h"], record["a"],
            record["o_next"], record["wm_selected"], record["lambda_g"])


#: Metrics that measure time or memory: they differ run to run, so runs are compared without them.
TIMING_METRICS = frozenset({"rollout_time", "step_time", "update_time", "tokens_per_s",
                            "gen_tokens_per_s", "peak_mem_mb", "rollout_wait_time",
                            "weight_sync_time", "sync_step_estimate", "async_speedup"})


_HOLD = ("import sys, time\nfrom run_files.outputs import claim_folder\n"
         "claim_folder(sys.argv[1], 'sft', sys.argv[2:] == ['overwrite'])\n"
         "print('claimed', flush=True)\ntime.sleep(60)")


@contextlib.contextmanager
def held_by_another_process(folder: Path, overwrite: bool = False
                            ) -> Iterator[subprocess.Popen]:
    """``folder`` claimed through the output guard by another Python process (its command line
    ``-c <folder>``; ``overwrite``: claimed with --overwrite) for the ``with`` block; that
    process is killed at its end."""
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(folder),
                               *(["overwrite"] if overwrite else [])],
                              cwd=Path(__file__).resolve().parents[1], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "claimed"
        yield holder
    finally:
        holder.kill()
        holder.wait()
