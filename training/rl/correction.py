"""Rollout correction: importance weights for the gap between the policy that sampled a rollout
and the policy the update trains.

A rollout stores, for each action token, the log-prob under the policy that sampled it, μ
(``PolicyOutput.logprobs``: HF ``generate`` or vLLM). The update starts from the trained model's
weights, π_old. The two differ when the sampler's numerics differ from the trainer's (vLLM's
kernels, bf16 generation) or when the sampler's weights are older than the trainer's (a stale
rollout, ``async_rollouts``). With ``rollout_correction`` on, the PPO-clip objective becomes

    L_RL = Σ_t w_t · max(−ρ_t A, −clip(ρ_t, 1 − ε, 1 + ε_high) A) + β KL_t
           ρ_t = π_θ(a_t) / π_old(a_t)

(the KL term, when on, is not weighted, as in verl, TRL and AReaL), with the importance weight
w_t built from

    r_t = π_old(a_t) / μ(a_t) = exp(log π_old − log μ)       (per token)
    R   = Π_t r_t = exp(Σ_t (log π_old − log μ))             (per action, all its tokens)

and the cap C (``rollout_correction_cap``):

    sampler_clip        w_t = min(r_t, C), and the token gets no gradient while π_θ / μ is
                        past the clip in the advantage's direction (A > 0 and π_θ / μ > 1 + ε_high,
                        or A < 0 and π_θ / μ < 1 − ε): the trust region against the sampler
                        that ``none`` has, kept (``training.rl.losses.ppo_clip_token_loss``)
    token_truncate      w_t = min(r_t, C)                    truncated IS (Yao et al., "Your
                                                             efficient RL framework secretly
                                                             brings you off-policy RL
                                                             training"; verl's token TIS, C = 2)
    token_mask          w_t = r_t if r_t ≤ C, else 0         masked IS ("When speed kills
                                                             stability"; TRL's token_mask)
    sequence_truncate   w_t = min(R, C) for every token
    sequence_mask       w_t = R if R ≤ C, else 0             TRL's default mode (C = 3)

With ``rollout_correction_two_sided`` the mask modes also mask a ratio below 1 / C (verl's
rejection sampling); a masked token keeps its place in the group's token count, as in TRL.

Why ``sampler_clip`` for stale rollouts. With one optimizer step per update π_θ = π_old at
that step, so ρ_t = 1 and its clip never binds: the four other modes turn the update into
importance-weighted REINFORCE with no trust region at all. ``none`` takes the ratio against μ,
and its clip is then the only bound on how far an update moves from the sampling weights. At the
first step with r_t ≤ C, ``sampler_clip``'s gradient is exactly ``none``'s (−A r_t ∇log π_θ
where the clip on π_θ / μ does not bind, 0 where it does); where r_t > C the weight is
truncated, and later optimizer steps of the update add the clip on ρ_t (the proximal policy
of AReaL's decoupled PPO). The weights carry no gradient. ``none`` keeps the earlier objective:
ρ_t = π_θ / μ and w_t = 1, with no extra pass. The PaW term is a supervised loss on observation
tokens, which no policy sampled, so it takes no weight.

Where π_old's log-probs come from. An update of several optimizer steps (mini-batches or PPO
epochs) scores every action token with π_old before its first step, one no-grad pass over the
rollout (``training.rl.update.PolicyUpdate.score_correction``). An update of one optimizer step on the
whole rollout, the main job's and async runs' setting, needs no such pass: π_old is the weights
of that step's own forward pass, so its log-probs, detached, are π_old's, and the pass computes
the weights itself (``training.rl.objective.micro_batch_loss``). The pass cost the corrected
async run a third of its update time (``benchmarks/README.md``, "Asynchronous rollouts").

Reference: :func:`correction_weights` on padded ``[rows, tokens]`` tensors, a pure function.
"""

from __future__ import annotations

import math
from typing import NamedTuple, get_args

import torch

from training.config import RolloutCorrection

#: The ``rollout_correction`` modes; "none" skips the π_old pass.
CORRECTIONS: tuple[str, ...] = get_args(RolloutCorrection)


class Correction(NamedTuple):
    """Weights and what they did, for one rollout."""

    weights: torch.Tensor
    """``[rows, tokens]`` w_t (0 at padding)."""
    gap_mean: float
    """Mean |log π_old − log μ| over the action tokens."""
    gap_max: float
    """Largest |log π_old − log μ| over the action tokens."""
    corrected_frac: float
    """Share of action tokens (token modes) or actions (sequence modes) truncated or masked."""
    weight_mean: float
    """Mean w_t over the action tokens."""


def correction_weights(train_logprobs: torch.Tensor, rollout_logprobs: torch.Tensor,
                       mask: torch.Tensor, mode: str, cap: float,
                       two_sided: bool = False) -> Correction:
    """The rollout correction's weights (module docstring) for padded ``[rows, tokens]``
    log-probs under π_old (``train_logprobs``) and μ (``rollout_logprobs``); ``mask`` marks
    the action tokens; ``two_sided`` (mask modes) also masks a ratio below 1 / ``cap``.
    Computed in float64."""
    if mode not in CORRECTIONS or mode == "none":
        raise ValueError(f"mode={mode!r}: use one of {CORRECTIONS[1:]}")
    if not cap >= 1:
        raise ValueError(f"cap={cap!r}: a number >= 1")
    if two_sided and not mode.endswith("mask"):
        raise ValueError(f"two_sided=True with mode={mode!r}: only the mask modes mask")
    mask = mask.bool()
    log_ratio = ((train_logprobs.double() - rollout_logprobs.double()) * mask).nan_to_num(0.0)
    log_cap = math.log(cap)

    def outside(logs: torch.Tensor) -> torch.Tensor:
        return (logs > log_cap) | (logs < -log_cap) if two_sided else logs > log_cap

    if mode.startswith("sequence"):
        log_ratio_rows = log_ratio.sum(-1, keepdim=True)
        over = outside(log_ratio_rows).expand_as(log_ratio)
        # exp of the capped log: no overflow for a very stale action
        weights = log_ratio_rows.clamp(max=log_cap).exp().clamp(max=cap).expand_as(
            log_ratio).clone()
        has_tokens = mask.any(-1)
        corrected = float(over[:, 0][has_tokens].double().mean()) if has_tokens.any() else 0.0
    else:
        over = outside(log_ratio)
        weights = log_ratio.clamp(max=log_cap).exp().clamp(max=cap)  # exactly C when capped
        corrected = float(over[mask].double().mean()) if mask.any() else 0.0
    if mode.endswith("mask"):
        weights = weights.masked_fill(over, 0.0)
    weights = weights * mask
    tokens = int(mask.sum())
    gaps = log_ratio.abs()[mask]
    return Correction(weights=weights,
                      gap_mean=float(gaps.mean()) if tokens else 0.0,
                      gap_max=float(gaps.max()) if tokens else 0.0,
                      corrected_frac=corrected,
                      weight_mean=float(weights[mask].mean()) if tokens else 1.0)


def ratio_bound(mode: str, rollout_logprobs):
    """What PPO's clip also bounds the ratio π_θ / μ by: the sampler's log-probs under
    ``sampler_clip`` (its clip bounds π_θ / μ as well as π_θ / π_old), else None."""
    return rollout_logprobs if mode == "sampler_clip" else None
