"""CUDA paths (``pytest -m gpu``; skipped without a GPU). ``scripts/gpu_check.sh`` runs them,
then ``benchmarks/gpu_check.py``'s measurements."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

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


def test_fsdp_training_on_every_gpu_saves_resumes_and_exports(tmp_path):
    """``paw-gym train`` with ``sharding: fsdp`` and bf16 mixed precision under torchrun, one
    process per visible GPU (NCCL): two GRPO + PaW updates with a KL reference, a sharded
    checkpoint per update (torch.distributed.checkpoint) plus rank 0's HF export, a resume to a
    third update, and the exported float32 model loads and plays a validation episode."""
    from agents.tiny_model import build_tiny_model

    processes = torch.cuda.device_count()
    model = build_tiny_model(gpu_check.tiny_texts(), tmp_path / "nano", size="nano")
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(dict(
        model=str(model), env_id="PaW/Shelf-v0", algo="grpo", paw=True, lora=False, lr=1e-4,
        kl_coef=0.05, n_groups=2 * processes, group_size=4, max_new_tokens=24,
        max_episode_steps=4, total_steps=2, save_every=1, device="cuda", dtype="float32",
        sharding="fsdp", mixed_precision="bf16", progress=False, seed=0)))
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(repo), *filter(None, [os.environ.get("PYTHONPATH")])])}
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                f"--nproc_per_node={processes}", "-m", "training.cli", "train",
                "--config", str(config), "--output_dir", str(tmp_path / "run")]
    first = subprocess.run(torchrun, env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-4000:]
    resumed = subprocess.run([*torchrun, "--resume", "--total_steps", "3"], env=env,
                             capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert "resuming" in resumed.stderr
    records = [json.loads(line) for line in
               (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3]
    assert all(0 < r["weight_sync_time"] < r["rollout_time"] for r in records)
    assert all(r["wm_selected"] > 0 and r["rollout_logprob_gap"] < 0.05 for r in records)
    checkpoint = tmp_path / "run" / "checkpoints" / "step-000003"
    shards = sorted(p.name for p in (checkpoint / "sharded").iterdir())
    assert shards == [".metadata", *[f"__{rank}_0.distcp" for rank in range(processes)]]

    from transformers import AutoModelForCausalLM

    exported = AutoModelForCausalLM.from_pretrained(checkpoint / "model")
    assert all(p.dtype == torch.float32 and torch.isfinite(p).all()
               for p in exported.parameters())
    played = subprocess.run([sys.executable, "-m", "training.cli", "eval", "--checkpoint",
                             str(tmp_path / "run"), "--limit", "2", "--device", "cuda",
                             "--output_dir", str(tmp_path / "eval")],
                            env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert played.returncode == 0, played.stderr[-4000:]
