"""Refactors change no number a user sees (issue 57): the demo and a real-model run, in the
``portable`` numerics mode (the same bits on every x86 CPU, ``tests/test_numerics.py``), must
compute exactly the numbers pinned in ``tests/data/pins/`` before the trainer was split into
parts: every update's metrics row (timings left out), every validation, the weights' sha256.

A change that is meant to change numbers (a new default, a fixed bug) rewrites the pins on
purpose and says so in its commit: ``PAW_GYM_WRITE_PINS=1 pytest -m heavy
tests/test_pinned_metrics.py``."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.common import TIMING_METRICS
from tests.emulated_cpus import SHORT_DEMO, demo_numbers, first_difference
from training.infra import numerics

REPO = Path(__file__).resolve().parents[1]
PINS = REPO / "tests" / "data" / "pins"
#: The demo, shortened (the emulated-CPU test's), with an SFT start whose groups win and lose
#: (non-zero advantages: the RL term trains beside the PaW term) and a validation after every
#: update; about 1.5 CPU minutes in portable mode. (The default demo takes over 30 there.)
DEMO = [*SHORT_DEMO[:-2], "--val_every", "1", "--sft_epochs", "3"]
#: Two LoRA updates of GRPO + PaW on Shelf with the real model, validated before and after.
REAL = ["--model", "smollm2-135m-instruct", "--env_id", "PaW/Shelf-v0", "--env_kwargs",
        "split=train", "--lora", "true", "--n_groups", "2", "--group_size", "2",
        "--max_new_tokens", "12", "--max_episode_steps", "2", "--max_obs_tokens", "32",
        "--history_length", "1", "--temperature", "1.0", "--lr", "2e-4", "--token_budget", "2048",
        "--total_steps", "2", "--paw", "true", "--val_every", "2", "--val_before_train", "true",
        "--val_split", "test", "--val_limit", "4", "--save_every", "2", "--device", "cpu",
        "--seed", "0", "--progress", "false"]


def _paw_gym(*args: str, cache: Path | None = None) -> None:
    """``paw-gym ARGS`` in portable mode on one thread; ``cache``: a fresh paw-gym cache (the
    demo then builds its base model; the real model is read from the machine's cache)."""
    clean = {k: v for k, v in os.environ.items()
             if k not in (numerics.VARIABLE, *numerics.SETTINGS)}
    env = {**clean, numerics.VARIABLE: "portable", "OMP_NUM_THREADS": "1",
           **({"PAW_GYM_CACHE": str(cache)} if cache else {})}
    done = subprocess.run([sys.executable, "-m", "training.cli", *args], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]


def _check(name: str, numbers: dict) -> None:
    pin = PINS / f"{name}.json"
    if os.environ.get("PAW_GYM_WRITE_PINS") == "1":
        pin.parent.mkdir(parents=True, exist_ok=True)
        pin.write_text(json.dumps(numbers, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    pinned = json.loads(pin.read_text(encoding="utf-8"))
    numbers = json.loads(json.dumps(numbers))  # the pin's own types (tuples are lists there)
    assert first_difference(pinned, numbers) is None, first_difference(pinned, numbers)
    assert numbers == pinned


@pytest.mark.heavy
def test_the_demo_computes_its_pinned_numbers(tmp_path):
    """Every number of the demo: its base and trained weights, every update's row, every
    validation, the reading probe and the before/after tables."""
    out = tmp_path / "demo"
    _paw_gym("demo", *DEMO, "--output_dir", str(out), cache=tmp_path / "cache")
    numbers = demo_numbers(out)
    updates = [m for m in numbers["updates"] if "advantage_abs_mean" in m]
    assert len(updates) == 3 and all(m["advantage_abs_mean"] > 0 for m in updates)
    assert len([m for m in numbers["updates"] if "val_success" in m]) == 4
    _check("demo-short-sft-portable", numbers)


@pytest.mark.heavy
def test_a_real_model_run_computes_its_pinned_numbers(smollm2_dir, tmp_path):
    out = tmp_path / "run"
    _paw_gym("train", *REAL, "--output_dir", str(out))
    rows = [json.loads(line) for line in
            (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    adapter = next((out / "checkpoints").glob("*/model/adapter_model.safetensors"))
    numbers = {"updates": [{k: v for k, v in row.items() if k not in TIMING_METRICS}
                           for row in rows],
               "adapter": hashlib.sha256(adapter.read_bytes()).hexdigest()}
    assert [row["step"] for row in rows if "step_time" in row] == [1, 2]
    assert len([row for row in rows if "val_success" in row]) == 2
    _check("real-shelf-two-updates-portable", numbers)
