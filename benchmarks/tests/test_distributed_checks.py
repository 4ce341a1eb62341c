"""The distributed checks of ``benchmarks/``: one process against two on the same rollouts
(``benchmarks/distributed.py``) and FSDP2's sharded gradients (``benchmarks/gpu_check.py``'s
FSDP part, on 2 gloo processes here, on every GPU in ``scripts/gpu_check.sh``)."""

from __future__ import annotations

import pytest

from benchmarks import gpu_check
from benchmarks.distributed import exactness


@pytest.mark.heavy
def test_two_processes_match_one_process_on_the_same_rollouts(tiny_model_dir, one_torch_thread):
    """Two updates of fixed, on-policy rollouts in 2 gloo processes (torchrun) and in 1: in
    float64 every gradient and parameter agrees to float summation order (~1e-12), for the
    group-relative RL + PaW with LoRA, GiGPO + PaW and PPO's critic with full fine-tuning, and
    sharded by FSDP2 (``sharding: fsdp``): GRPO with and without PaW (with a KL reference), and
    PPO + PaW with its critic sharded too."""
    variants = {"grpo+paw lora": dict(algo="grpo", lora=True, lr=1e-3, kl_coef=0.05),
                "gigpo+paw full": dict(algo="gigpo", lora=False, lr=1e-4),
                "ppo+paw full": dict(algo="ppo", lora=False, lr=1e-4),
                "grpo+paw fsdp": dict(algo="grpo", lora=False, lr=1e-4, kl_coef=0.05,
                                      sharding="fsdp"),
                "grpo fsdp": dict(algo="grpo", paw=False, lora=False, lr=1e-4, sharding="fsdp"),
                "ppo+paw fsdp": dict(algo="ppo", lora=False, lr=1e-4, sharding="fsdp")}
    # The nano model's actions are all invalid: rewards are spread so advantages are not zero.
    report = exactness(str(tiny_model_dir), variants, updates=2, reward_spread=True,
                             dtype="float64", n_groups=3, group_size=2, max_new_tokens=12,
                             max_episode_steps=2, mini_batch_size=5, token_budget=600)
    for name, row in report.items():
        assert row["sharded"] == ("fsdp" in name), name    # 2 processes: FSDP or DDP
        assert row["optimizer_steps"] >= 4, name           # two mini-batches per update
        assert row["max_param_change"] > 1e-5, name        # the updates moved the weights
        assert row["max_rel_grad_diff"] < 1e-9, (name, row)
        assert row["max_param_diff"] < 1e-9, (name, row)
        assert row["max_metric_diff"] < 1e-6, (name, row)


@pytest.mark.heavy
def test_fsdp2_shards_give_one_process_gradients_in_float64():
    """FSDP2 (``fully_shard`` per decoder layer and on the scorer) in 2 gloo processes, each
    scoring its half of the rows: the gathered gradients of the training objective (GRPO + PaW)
    are one unsharded process's to float64 rounding. The primitive the trainer's sharding will
    use (issue 29); ``scripts/gpu_check.sh`` runs the same check over NCCL."""
    result = gpu_check.fsdp(quick=True)
    assert result["processes"] == 2
    for rank in result["ranks"]:
        check = rank["exactness"]
        assert rank["backend"] == "gloo" and check["dtype"] == "torch.float64"
        assert check["max_rel_grad_diff"] < 1e-12, check
        assert abs(check["loss_sharded"] - check["loss_one_process"]) < 1e-9 * abs(
            check["loss_one_process"]), check
