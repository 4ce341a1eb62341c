"""Token-level losses of PaW: the world-model (WM) token loss, entropy selection, the adaptive
coefficient, and the PPO-clip / KL policy terms.

All functions are pure torch: they take tensors, return tensors, and never touch a model.
Shapes: ``B`` transitions (rows), ``T`` token positions; masks are ``bool`` or 0/1 tensors.
"""

from __future__ import annotations

import math
import typing

import torch

from training.infra.paw_settings import WMLoss

#: The world-model token losses (``PaWSettings.wm_loss``'s choices).
WM_LOSS_KINDS: tuple[str, ...] = typing.get_args(WMLoss)


def wm_token_loss(logprobs: torch.Tensor, mask: torch.Tensor, kind: str = "cmae",
                  rho: float = 0.2) -> torch.Tensor:
    """World-model loss of each transition from its observation-token log-probs.

    Args:
        logprobs: ``[B, T]`` log-probability of each target token (``log p_i``).
        mask: ``[B, T]`` observation-token mask (1 where the token belongs to ``o_{t+1}``).
        kind: ``"cmae"`` = Σ m_i (1 − p_i) / |o| with m_i = 1[p_i ≤ ρ] (no gradient through the
            mask); ``"mae"`` = Σ (1 − p_i) / |o|; ``"ce"`` = Σ (−log p_i) / |o|.
        rho: confidence threshold of ``cmae`` (ignored by the other kinds).

    Returns:
        ``[B]`` loss per transition. |o| counts *all* observation tokens of the row (clipped ones
        included); a row without observation tokens gets 0.
    """
    if kind not in WM_LOSS_KINDS:
        raise ValueError(f"wm loss kind {kind!r} is not one of {WM_LOSS_KINDS}")
    if logprobs.shape != mask.shape:
        raise ValueError(f"logprobs {tuple(logprobs.shape)} and mask {tuple(mask.shape)} differ")
    mask = mask.to(logprobs.dtype)
    # Padding positions may hold any value (even -inf); zero them before exp/log arithmetic
    # so they cannot leak NaN into the gradient.
    safe = torch.where(mask > 0, logprobs, torch.zeros_like(logprobs))
    if kind == "ce":
        per_token = -safe
    else:
        prob = safe.exp()
        per_token = 1.0 - prob
        if kind == "cmae":
            per_token = per_token * (prob.detach() <= rho).to(prob.dtype)
    count = mask.sum(dim=-1).clamp(min=1.0)
    return (per_token * mask).sum(dim=-1) / count


def clipped_token_fraction(logprobs: torch.Tensor, mask: torch.Tensor, rho: float) -> torch.Tensor:
    """Fraction of observation tokens that CMAE drops (p_i > ρ), over all masked tokens."""
    mask = mask.bool()
    total = mask.sum()
    if total == 0:
        return torch.zeros((), dtype=logprobs.dtype)
    clipped = (logprobs.detach().exp() > rho) & mask
    return clipped.sum().to(logprobs.dtype) / total


def sampled_token_entropy(logprobs) -> float:
    """The paper's §3.1 score −(1/|a|) Σ_i q_i log q_i, with q_i the probability of the *sampled*
    i-th action token (``logprobs``: its log-probabilities); 0.0 for an empty action.

    The alternative (``entropy_score: full``) is the mean entropy of the full next-token
    distribution at each action token, :attr:`agents.types.PolicyOutput.mean_entropy`.
    """
    values = [float(lp) for lp in logprobs]
    return -sum(math.exp(lp) * lp for lp in values) / len(values) if values else 0.0


def select_by_entropy(entropies: torch.Tensor, alpha: float,
                      eligible: torch.Tensor | None = None) -> torch.Tensor:
    """Keep the ⌈α·N⌉ highest-entropy transitions of the update (ties: lower index first).

    Args:
        entropies: ``[N]`` mean action-token entropy H(a_t | h_t) of each transition.
        alpha: retained fraction in (0, 1].
        eligible: ``[N]`` bool, the transitions that can be selected (default: all); N then
            counts the eligible ones only. Transitions without a next observation (search QA
            after ``<answer>``) have no world-model target and are not eligible.

    Returns:
        ``[N]`` bool mask of the selected transitions.
    """
    if not 0.0 < alpha <= 1.0:
        raise ValueError(f"alpha={alpha!r} must be in (0, 1]")
    entropies = torch.as_tensor(entropies, dtype=torch.float64).reshape(-1)
    eligible = (torch.ones(entropies.numel(), dtype=torch.bool) if eligible is None
                else torch.as_tensor(eligible, dtype=torch.bool).reshape(-1))
    candidates = eligible.nonzero().squeeze(-1)
    n = candidates.numel()
    # A small tolerance so that e.g. 0.7 * 10 = 7.000000000000001 keeps 7, not 8.
    keep = min(n, math.ceil(alpha * n - 1e-9))
    # Stable descending sort keeps equal entropies in index order, so ties favour lower indices.
    order = torch.sort(entropies[candidates], descending=True, stable=True).indices
    selected = torch.zeros(entropies.numel(), dtype=torch.bool)
    selected[candidates[order[:keep]]] = True
    return selected


def adaptive_wm_coef(mean_return, r_max: float, clamp_above: bool = False):
    """Reward-adaptive WM weight λ_g = max(0, 1 − R̄_g / R_max) (the paper's Eq. 10).

    The equation has no upper bound: a group whose invalid-action penalties make R̄_g < 0 gets
    λ_g > 1. ``clamp_above`` also caps it at 1 (``lambda_clamp`` in the trainer's config). The
    floor at 0 only guards R̄_g > R_max, which a correct ``r_max`` never allows.

    Accepts a float (returns a float) or a tensor of group mean returns (returns a tensor).
    """
    if not r_max > 0:
        raise ValueError(f"r_max={r_max!r} must be positive")
    upper = 1.0 if clamp_above else None
    if isinstance(mean_return, torch.Tensor):
        return (1.0 - mean_return / r_max).clamp(min=0.0, max=upper)
    value = max(0.0, 1.0 - float(mean_return) / r_max)
    return min(1.0, value) if clamp_above else value


def ppo_clip_token_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor,
                        advantages: torch.Tensor, clip_eps: float = 0.2,
                        clip_eps_high: float | None = None,
                        sampler_logprobs: torch.Tensor | None = None
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token PPO-clip surrogate loss max(−A·r, −A·clip(r, 1−ε, 1+ε_high)).

    Args:
        logprobs: current log π_θ of each action token.
        old_logprobs: log-probs of the same tokens under the rollout (behaviour) policy, or
            under the update's starting weights with a rollout correction.
        advantages: advantage of each token (broadcastable to ``logprobs``).
        clip_eps: lower clip range ε; ``clip_eps_high`` defaults to ε (symmetric clipping).
        sampler_logprobs: log μ of the policy that sampled the tokens (``rollout_correction:
            sampler_clip``): the same clip condition also applies to π_θ / μ, so a token
            that has already moved past the trust region around the sampler, in the
            advantage's direction, gets no gradient (its loss keeps its value).

    Returns:
        ``(loss, clipped)``: the per-token loss and a bool tensor marking tokens whose clipped
        branch was active (the "clip fraction" numerator).
    """
    high = clip_eps if clip_eps_high is None else clip_eps_high
    # Clamp the log-ratio so one wild token cannot overflow exp() to inf.
    ratio = torch.exp((logprobs - old_logprobs).clamp(-20.0, 20.0))
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_eps, 1.0 + high)
    loss, is_clipped = torch.maximum(unclipped, clipped), clipped > unclipped
    if sampler_logprobs is not None:
        to_sampler = torch.exp((logprobs.detach() - sampler_logprobs).clamp(-20.0, 20.0))
        outside = (((advantages > 0) & (to_sampler > 1.0 + high))
                   | ((advantages < 0) & (to_sampler < 1.0 - clip_eps)))
        loss = torch.where(outside, loss.detach(), loss)
        is_clipped = is_clipped | outside
    return loss, is_clipped


def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token low-variance KL(π_θ ‖ π_ref) estimate exp(Δ) − Δ − 1 with Δ = ref − logp (k3)."""
    delta = (ref_logprobs - logprobs).clamp(-20.0, 20.0)
    return delta.exp() - delta - 1.0


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``values`` over positions where ``mask`` is set (0 when the mask is empty)."""
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp(min=1.0)
