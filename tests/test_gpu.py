"""CUDA paths (``pytest -m gpu``; skipped without a GPU). ``scripts/gpu_check.sh`` runs them,
then ``benchmarks/gpu_check.py``'s measurements."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from benchmarks import gpu_check  # noqa: E402

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_trainer_runs_a_grpo_paw_update_on_the_gpu(tmp_path, dtype):
    """Rollouts and one GRPO + PaW update of the nano model on CUDA: finite weights that moved,
    and the training pass scores the sampled actions as the rollout did (float32: to rounding)."""
    result = gpu_check.tiny_update("cuda", dtype, tmp_path, updates=1)
    assert result["device"].startswith("cuda")
    assert result["dtype"] == f"torch.{dtype}"
    assert result["max_weight_change"] > 0 and result["peak_mem_mb"] > 0
    assert result["wm_selected"] > 0 and result["wm_loss"] == pytest.approx(result["wm_loss"])
    if dtype == "float32":
        assert result["rollout_logprob_gap"] < 1e-3


def test_the_chunked_objective_gives_the_cpu_loss_and_gradients_on_the_gpu():
    """The same rows through micro_batch_loss on the CPU and on CUDA (float32, TF32 off)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    samples = gpu_check.paper_rows(4, 512, dict(prompt=48, action=16, obs=16))
    grads = {}
    for device in ("cpu", "cuda"):
        model = gpu_check.qwen_model_small(512, torch.float32).to(device)
        loss = gpu_check.objective_loss(model, samples, [0, 1, 2, 3], chunk=32)
        grads[device] = (loss, {n: p.grad.cpu() for n, p in model.named_parameters()})
    assert grads["cuda"][0] == pytest.approx(grads["cpu"][0], rel=1e-5)
    for name, grad in grads["cpu"][1].items():  # float32 sums in another order: ~1e-6 of the max
        gap = (grads["cuda"][1][name] - grad).abs().max() / grad.abs().max()
        assert gap < 1e-4, (name, float(gap))


def test_the_logits_chunking_bounds_memory_at_qwens_vocabulary():
    """One forward + backward of 8k tokens of 2 Qwen2.5-1.5B layers (151,936-token vocabulary):
    the chunked LM head's peak is under half that of the same pass with the full logits."""
    model = gpu_check.qwen_model(2, "cuda", torch.bfloat16)
    samples = gpu_check.paper_rows(4, gpu_check.QWEN25_1_5B["vocab_size"],
                                   dict(prompt=1024, action=512, obs=512))
    peaks, losses = {}, {}
    for full in (False, True):
        model.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        losses[full] = gpu_check.objective_loss(model, samples, [0, 1, 2, 3], full_logits=full)
        peaks[full] = torch.cuda.max_memory_allocated() - base
    assert losses[False] == pytest.approx(losses[True], rel=2e-2)
    assert peaks[False] < peaks[True] / 2, {k: v / 2**30 for k, v in peaks.items()}


def test_a_config_larger_than_the_gpu_is_refused_before_loading(tmp_path):
    """Full fine-tuning of the Qwen2.5-14B architecture on one GPU (DDP, KL reference): the
    estimate exceeds any single GPU of today, so PaWTrainer refuses with one line naming
    what to change, before reading a weight (the folder holds only config.json)."""
    from transformers import Qwen2Config

    from training.config import TrainConfig
    from training.trainer import PaWTrainer

    Qwen2Config(vocab_size=152064, hidden_size=5120, intermediate_size=13824,
                num_hidden_layers=48, num_attention_heads=40, num_key_value_heads=8,
                tie_word_embeddings=False, torch_dtype="bfloat16").save_pretrained(tmp_path)
    config = TrainConfig(model=str(tmp_path), env_id="PaW/Shelf-v0", lora=False,
                         dtype="bfloat16", kl_coef=0.01, device="cuda",
                         output_dir=str(tmp_path / "run"))
    allocated = torch.cuda.memory_allocated()
    with pytest.raises(ValueError, match=r"does not fit one GPU of \d+\.\d GiB: estimated memory "
                                         r"per process \(1 process, 14\.\d+ B parameters\).*"
                                         r"change: lora: true; sharding: fsdp over more GPUs"):
        PaWTrainer(config)
    assert torch.cuda.memory_allocated() == allocated  # nothing was loaded
