"""``init_checkpoint``: every command that trains (``train``, ``sft``, ``train-wm``) and the TRL
integration start from a saved LoRA adapter's weights, trainable, through one function
(``training.models.start_weights``); an adapter without ``lora`` is refused by the config."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")

from training.config import TrainConfig  # noqa: E402
from training.infra.model_config import ModelConfig  # noqa: E402
from training.warmstart.sft import SFTConfig  # noqa: E402
from training.world_model.config import WorldModelConfig  # noqa: E402


@pytest.fixture(scope="module")
def adapter(tiny_model_dir, tmp_path_factory) -> Path:
    """A LoRA adapter (r 2 on q_proj and v_proj) of the tiny model whose every weight is random,
    B included (a fresh adapter's B is 0): a start that ignored it could not match it."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    model = peft.get_peft_model(model, peft.LoraConfig(r=2, lora_alpha=4,
                                                       target_modules=["q_proj", "v_proj"]))
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if "lora_" in name:
                weight.copy_(torch.randn(weight.shape, generator=generator))
    folder = tmp_path_factory.mktemp("adapter")
    model.save_pretrained(folder)
    return folder


def saved_weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(folder / "adapter_model.safetensors")


def assert_starts_from(model, adapter: Path) -> None:
    """``model``'s adapter weights are the saved ones, and they (only they) are trainable."""
    loaded = peft.get_peft_model_state_dict(model)
    saved = saved_weights(adapter)
    assert loaded.keys() == saved.keys()
    for name, weight in saved.items():
        assert torch.equal(loaded[name], weight), name
    trainable = [name for name, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in name for name in trainable)


@pytest.mark.parametrize("kind", [ModelConfig, TrainConfig, SFTConfig, WorldModelConfig])
def test_an_adapter_start_without_lora_is_refused_by_the_config(kind, tiny_model_dir, adapter):
    with pytest.raises(ValueError, match=rf"^init_checkpoint='{adapter}' is a LoRA adapter; "
                                         r"expected lora: true with it"):
        kind(model=str(tiny_model_dir), init_checkpoint=str(adapter), lora=False)


def test_train_starts_from_the_adapter(tiny_model_dir, adapter, one_torch_thread):
    from training.models import build_policy

    policy = build_policy(TrainConfig(model=str(tiny_model_dir), init_checkpoint=str(adapter),
                                      device="cpu", dtype="float32"))
    assert_starts_from(policy.model, adapter)


def test_train_wm_starts_from_the_adapter(tiny_model_dir, adapter, one_torch_thread):
    from training.world_model.methods import load_trainable_policy

    policy = load_trainable_policy(WorldModelConfig(
        model=str(tiny_model_dir), init_checkpoint=str(adapter), lora=True, device="cpu",
        dtype="float32"))
    assert_starts_from(policy.model, adapter)


def test_trl_starts_from_the_adapter(tiny_model_dir, adapter):
    from training.integrations.trl import load_model

    model, peft_config = load_model(ModelConfig(model=str(tiny_model_dir),
                                                init_checkpoint=str(adapter), dtype="float32"))
    assert peft_config is None  # TRL takes the adapter as it comes, and wraps nothing more
    assert_starts_from(model, adapter)


def test_sft_goes_on_training_the_adapter(tiny_model_dir, adapter, tmp_path, one_torch_thread):
    """sft from the adapter at learning rate 0 saves the adapter unchanged (a fresh adapter
    would have saved other weights); at 1e-3 it moves every tensor it trains."""
    from training.warmstart.sft import record_expert_episodes, run_sft

    record_expert_episodes("PaW/Shelf-v0", 2, tmp_path / "demos", split="train")
    for lr, kept in ((0.0, True), (1e-3, False)):
        out, _ = run_sft(SFTConfig(model=str(tiny_model_dir), init_checkpoint=str(adapter),
                                   lora=True, lr=lr, epochs=1, device="cpu", dtype="float32",
                                   replay=str(tmp_path / "demos"), output_dir=str(tmp_path / f"sft-{lr}"),
                                   progress=False))
        saved, start = saved_weights(out), saved_weights(adapter)
        assert saved.keys() == start.keys()
        assert all(torch.equal(saved[k], start[k]) == kept for k in start), lr
