"""training.infra.memory: the per-process memory estimate printed (and checked) before loading."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from training.config import TrainConfig, load_config
from training.infra.memory import GiB, check_fits, estimate, model_shape

REPO = Path(__file__).resolve().parents[1]
#: Qwen/Qwen2.5-7B-Instruct's config.json (the architecture only).
QWEN25_7B = dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944,
                 num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
                 max_position_embeddings=32768, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
                 tie_word_embeddings=False, torch_dtype="bfloat16")


@pytest.fixture(scope="module")
def qwen7b_folder(tmp_path_factory) -> Path:
    from transformers import Qwen2Config

    folder = tmp_path_factory.mktemp("qwen7b")
    Qwen2Config(**QWEN25_7B).save_pretrained(folder)
    return folder


def test_the_shape_counts_the_parameters_the_model_has(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    shape = model_shape(str(tiny_model_dir))
    assert shape["parameters"] == sum(p.numel() for p in model.parameters())
    assert shape["layers"] == model.config.num_hidden_layers


def test_sharding_divides_the_trained_state_by_the_processes(qwen7b_folder):
    shape = model_shape(str(qwen7b_folder))
    assert 7.5e9 < shape["parameters"] < 7.7e9  # Qwen2.5-7B: 7.62 B
    config = TrainConfig(model=str(qwen7b_folder), lora=False, dtype="bfloat16",
                         sharding="fsdp", kl_coef=0.0)
    one, two, eight = (estimate(config, shape, n).parts for n in (1, 2, 8))
    for part in ("weights", "gradients", "optimizer"):
        assert two[part] == pytest.approx(one[part] / 2) and eight[part] == pytest.approx(
            one[part] / 8)
    assert one["weights"] == pytest.approx(shape["parameters"] * 2)
    assert one["optimizer"] == pytest.approx(2 * one["weights"])
    # every process, one included, keeps an unsharded sampler
    assert one["sampler"] == pytest.approx(one["weights"]) == two["sampler"] == eight["sampler"]
    ddp = estimate(replace(config, sharding="ddp"), shape, 8).parts
    assert ddp["weights"] == one["weights"] and ddp["sampler"] == 0
    assert estimate(replace(config, rollout_backend="vllm"), shape, 8).parts["sampler"] == 0
    ppo = [estimate(replace(config, algo="ppo", n_groups=8, group_size=1), shape, n).parts
           for n in (1, 8)]
    assert ppo[0]["critic"] == pytest.approx(4 * shape["decoder_parameters"] * 2)
    assert ppo[1]["critic"] == pytest.approx(ppo[0]["critic"] / 8)  # the critic is sharded too


def test_lora_trains_only_the_adapters(qwen7b_folder):
    shape = model_shape(str(qwen7b_folder))
    config = TrainConfig(model=str(qwen7b_folder), lora=True, lora_r=16, dtype="bfloat16")
    parts = estimate(config, shape, 1).parts
    hidden, inter, kv = 3584, 18944, 512  # 4 KV heads of 128
    per_layer = 16 * ((hidden + hidden) * 2 + (hidden + kv) * 2 + (hidden + inter) * 2
                      + (inter + hidden))
    assert parts["gradients"] == pytest.approx(28 * per_layer * 2)
    assert parts["reference"] == 0  # LoRA's reference is the base with adapters disabled


def test_a_paper_7b_config_needs_fsdp_on_80_gib_gpus(qwen7b_folder, monkeypatch):
    """configs/paper's 7B full fine-tuning: refused for one 80 GiB GPU with what to change;
    with its sharding: fsdp over 8 GPUs it fits, and the estimate says how much it takes."""
    monkeypatch.setenv("ALFWORLD_DATA", "/data/alfworld")
    paper = load_config(REPO / "configs" / "paper" / "alfworld_qwen2.5-7b_grpo_paw.yaml")
    assert paper.sharding == "fsdp" and not paper.lora
    config = replace(paper, model=str(qwen7b_folder))
    with pytest.raises(ValueError, match=r"does not fit one GPU of 80.0 GiB: estimated memory "
                                         r"per process \(fsdp, 1 process, 7.62 B parameters\):"
                                         r" 98.9 GiB.*sampler 14.19.*"
                                         r"change: lora: true; sharding: fsdp over more GPUs"):
        check_fits(config, 1, 80 * GiB)
    fits = check_fits(config, 8, 80 * GiB)
    assert fits.total < 80 * GiB and "fsdp, 8 processes" in fits.line()
    assert re.search(r"sampler 14\.\d+, reference 14\.\d+", fits.line())


def test_a_model_whose_config_cannot_be_read_is_not_estimated(tmp_path):
    config = TrainConfig(model=str(tmp_path / "absent"), lora=False)
    assert check_fits(config, 1, 80 * GiB) is None


def test_the_trainer_prints_the_estimate_before_loading(qwen7b_folder, tmp_path, capsys):
    """A 7B full fine-tuning config on this CPU: the estimate comes first; then loading fails,
    as the folder holds the architecture and no weights."""
    from training.trainer import PaWTrainer

    with pytest.raises(OSError):
        PaWTrainer(TrainConfig(model=str(qwen7b_folder), env_id="PaW/Shelf-v0", lora=False,
                               dtype="bfloat16", device="cpu", output_dir=str(tmp_path / "run"),
                               progress=False))
    assert re.search(r"estimated memory per process \(1 process, 7.62 B parameters\): "
                     r"\d+\.\d GiB = runtime \d+\.\d\d, weights 14\.19, gradients 14\.19, "
                     r"optimizer 28\.37", capsys.readouterr().err)


def test_on_a_cpu_the_estimate_adds_the_runtime_and_the_resident_activations(qwen7b_folder):
    """A CPU run's estimate is its peak resident set: the process's bytes before the model
    loads, the same weights and trained state, and the decoder's activations as glibc keeps
    them resident (``training.infra.memory``'s docstring): one whole forward's intermediates
    L·T·(10·H + 4·I)·b with gradient checkpointing, twice that without; the LM head's chunk
    once."""
    config = TrainConfig(model=str(qwen7b_folder), lora=True, token_budget=2048)
    shape = model_shape(config.model)
    forward = 28 * 2048 * (10 * 3584 + 4 * 18944) * 2   # layers·T·(10H + 4I)·b, bfloat16
    head = 3 * 512 * 152064 * 4
    for checkpointing, resident in ((False, 2 * forward), (True, forward)):
        run = replace(config, gradient_checkpointing=checkpointing)
        gpu = estimate(run, shape, 1)
        cpu = estimate(run, shape, 1, cpu_runtime=1.5 * GiB)
        assert list(cpu.parts)[0] == "runtime" and cpu.parts["runtime"] == 1.5 * GiB
        assert cpu.parts["activations"] == resident + head
        assert {k: v for k, v in cpu.parts.items() if k not in ("runtime", "activations")} == \
            {k: v for k, v in gpu.parts.items() if k != "activations"}
    assert gpu.parts["activations"] == 28 * 2048 * 3584 * 2 + 2048 * (10 * 3584 + 4 * 18944) \
        * 2 + head
