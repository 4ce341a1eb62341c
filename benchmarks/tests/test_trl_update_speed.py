"""``benchmarks.trl_update_speed``: paw-gym's update and TRL's GRPOTrainer's, alternated, on the
same model, LoRA and Shelf episodes (here the tiny model, a round of each)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("trl")


@pytest.mark.heavy
def test_both_sides_train_and_report_time_and_tokens(tiny_model_dir, tmp_path):
    from benchmarks.trl_update_speed import main

    out = tmp_path / "speed.json"
    result = main(["--model", str(tiny_model_dir), "--rounds", "1", "--new-tokens", "6",
                   "--groups", "2", "--group-size", "2", "--work", str(tmp_path / "work"),
                   "--out", str(out)])
    assert json.loads(out.read_text())["ratios"] == result["ratios"]
    for side in ("paw-gym", "trl"):
        [row] = result["rounds"][side]  # the warm-up round is not reported
        assert row["step_s"] >= row["update_s"] > 0 and row["rollout_s"] > 0
        # every update trained: tokens went backward through the decoder on both sides
        assert row["tokens_backward"] > 0 and row["tokens_forward"] > row["tokens_backward"]
    assert set(result["ratios"]) == {f"paw-gym / trl {key}" for key in (
        "step_s", "update_s", "tokens_backward", "update_s_per_1k_tokens_backward")}
