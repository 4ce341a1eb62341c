"""PPO critic passes: V(h_t) for every step of a rollout, and the clipped value loss."""

from __future__ import annotations

import torch

from agents.types import Trajectory
from training.infra.distributed import SingleProcess
from training.rl.batch import Sample, token_budget_batches

#: verl's default value-clip range.
VALUE_CLIP = 0.5


def _prompt_tensors(prompts: list[list[int]], pad_id: int, device):
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for r, p in enumerate(prompts):
        ids[r, :len(p)] = torch.tensor(p, dtype=torch.long)
        mask[r, :len(p)] = 1
    last = torch.tensor([len(p) - 1 for p in prompts])
    return ids.to(device), mask.to(device), last.to(device)


@torch.no_grad()
def critic_values(critic, trajectories: list[Trajectory], config, pad_id: int, device,
                  world: SingleProcess | None = None) -> list[list[float]]:
    """V(h_t) per step per trajectory (prompts cut to ``max_seq_len`` from the left).

    ``world``: this process's (default: a single process). A sharded critic's passes are
    collectives, so every rank runs as many as the rank that needs most
    (:meth:`~training.infra.distributed.SingleProcess.equal_passes`); the extra ones are discarded."""
    prompts = [s.output.prompt_ids[-config.max_seq_len:] or [pad_id]
               for t in trajectories for s in t.transitions] or [[pad_id]]
    flat: list[float] = [0.0] * len(prompts)
    batches = token_budget_batches([len(p) for p in prompts], config.token_budget)
    for rows, extra in (world or SingleProcess()).equal_passes(batches):
        ids, mask, last = _prompt_tensors([prompts[i] for i in rows], pad_id, device)
        values = critic(ids, mask, last).tolist()
        if not extra:
            for i, v in zip(rows, values):
                flat[i] = v
    out, k = [], 0
    for t in trajectories:
        out.append(flat[k:k + len(t)])
        k += len(t)
    return out


def critic_loss(critic, samples: list[Sample], pad_id: int, device) -> torch.Tensor:
    """Summed clipped value loss Σ ½·max((V−R)², (V_clip−R)²) over ``samples`` (one
    micro-batch; the trainer divides by the mini-batch's size)."""
    ids, mask, last = _prompt_tensors([s.input_ids[:s.prompt_len] for s in samples], pad_id,
                                      device)
    values = critic(ids, mask, last)
    target = torch.tensor([s.value_target for s in samples], device=values.device)
    old = torch.tensor([s.old_value for s in samples], device=values.device)
    clipped = old + (values - old).clamp(-VALUE_CLIP, VALUE_CLIP)
    return 0.5 * torch.maximum((values - target) ** 2, (clipped - target) ** 2).sum()
