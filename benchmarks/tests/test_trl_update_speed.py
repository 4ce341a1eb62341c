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


@pytest.mark.heavy
def test_init_checkpoint_starts_both_sides_from_the_adapter(tiny_model_dir, tmp_path):
    """An SFT start: both trainers' LoRA weights are the adapter's before any update (a fresh
    adapter's B matrices are 0; this one's are not)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from benchmarks.trl_update_speed import TimedRollout, native_trainer, parse_args, trl_trainer

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                           LoraConfig(r=16, lora_alpha=32, target_modules=[
                               "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                               "down_proj"]))
    torch.manual_seed(0)
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if "lora_B" in name:
                weight.normal_()
    adapter = tmp_path / "adapter"
    model.save_pretrained(adapter)
    saved = {name.replace(".default", ""): weight.detach().clone()
             for name, weight in model.named_parameters() if "lora_" in name}

    args = parse_args(["--model", str(tiny_model_dir), "--init-checkpoint", str(adapter),
                       "--temperature", "0.6"])
    native = native_trainer(args, tmp_path / "work")
    trl, _ = trl_trainer(args, tmp_path / "work", TimedRollout())
    assert native.config.temperature == trl.args.temperature == 0.6
    for side in (native.policy.model, trl.model):
        trained = {name.replace(".default", ""): weight for name, weight in
                   side.named_parameters() if "lora_" in name}
        assert trained.keys() == saved.keys()
        for name, weight in trained.items():
            assert weight.requires_grad, name
            torch.testing.assert_close(weight, saved[name], rtol=0, atol=0, msg=name)
