"""The CPU memory estimate ``paw-gym train`` prints, against a real model's measured peak
(``benchmarks/memory_peak.py``, issue 56 item 3)."""

from __future__ import annotations

import json

import pytest

from benchmarks import memory_peak


@pytest.mark.heavy
def test_the_cpu_estimate_holds_within_15_percent_of_a_real_models_peak(smollm2_dir, tmp_path):
    """SmolLM2-135M-Instruct with the sparse Shelf recipe's LoRA (one group of 4 episodes, the
    recipe's 2,048-token budget), in a fresh process: the estimate printed before the model
    loaded is within 15 % of the process's peak resident set over a rollout and an update, and
    the peak is the update's (the part the estimate models)."""
    out = tmp_path / "memory_peak.json"
    assert memory_peak.main(["--model", str(smollm2_dir), "--n_groups", "1", "--token_budget",
                             "2048", "--val_limit", "0", "--out", str(out)]) == 0
    [row] = json.loads(out.read_text(encoding="utf-8"))["rows"]
    assert row["update"]["transitions"] >= 4 and row["update"]["optimizer_steps"] == 1
    phases = row["phase_peak_mib"]
    assert max(phases, key=phases.get) == "update", phases
    assert 0.85 <= row["estimate_over_peak"] <= 1.15, row
