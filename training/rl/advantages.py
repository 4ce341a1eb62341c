"""Advantage estimators: GRPO, GiGPO, RLOO and GAE (PPO).

Pure torch functions over flat tensors. ``group_ids`` is any sequence of hashable group keys
(one per trajectory); trajectories with the same key belong to the same rollout group (same
task). An episode group of one trajectory follows verl's convention: mean 0 and std 1, i.e. the
raw return passes through. A GiGPO *step* group of one step (an anchor state seen once) gets a
step advantage of 0, as in GiGPO's step-level normalisation and verl-agent's reference code:
its mean is its own return, so there is no relative signal.

Group statistics are taken in float64, and a group whose members are all equal is centred on
their common value exactly and not divided, so it gets advantage 0 (what is left of a member
is only a GiGPO step penalty). In float32 the mean of eight returns of 9.9 is one ulp
(≈ 1e-6, the size of ``EPS``) off, and such a group, won by every rollout, got advantage
−0.47 on every token.

``normalize=False`` everywhere is the "Dr. GRPO" variant: mean-centring without the division by
the group std, which otherwise scales a group whose returns differ only by small penalties
(e.g. −0.1 for an invalid action) to advantages of ±1, as strong as a win.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Hashable, Sequence

import numpy as np
import torch

EPS = 1e-6


def _groups(keys: Sequence[Hashable]) -> dict[Hashable, list[int]]:
    # A tensor or array of ids iterates as 0-d tensors hashed by identity: every element would
    # be its own group. Compare their values instead.
    if isinstance(keys, (torch.Tensor, np.ndarray)):
        keys = keys.tolist()
    members: dict[Hashable, list[int]] = defaultdict(list)
    for index, key in enumerate(keys):
        members[key].append(index)
    return members


def _group_stats(values: torch.Tensor, keys: Sequence[Hashable], eps: float
                 ) -> dict[Hashable, tuple[torch.Tensor, torch.Tensor]]:
    """``(mean, divisor)`` of each group, in float64: ``(mean, unbiased std + eps)``; a group
    of one member gets ``(0, 1)`` (verl's convention: its raw value passes through), a group of
    equal members ``(their value, 1)``, so that it centres to exactly 0."""
    values = torch.as_tensor(values, dtype=torch.float64).reshape(-1)
    if len(keys) != values.numel():
        raise ValueError(f"{len(keys)} group keys for {values.numel()} values")
    one = torch.ones((), dtype=torch.float64)
    stats = {}
    for key, indices in _groups(keys).items():
        group = values[torch.tensor(indices)]
        if len(indices) == 1:
            stats[key] = (torch.zeros((), dtype=torch.float64), one)
        elif bool((group == group[0]).all()):
            stats[key] = (group[0], one)
        else:
            stats[key] = (group.mean(), group.std() + eps)
    return stats


def _group_normalize(values: torch.Tensor, keys: Sequence[Hashable], normalize: bool,
                     eps: float, singleton_zero: bool = False) -> torch.Tensor:
    """(x − mean_group) / (std_group + eps) per group (unbiased std), or just x − mean.

    A group of one member keeps its raw value, or gets 0 with ``singleton_zero``."""
    values = torch.as_tensor(values, dtype=torch.float64).reshape(-1)
    stats = _group_stats(values, keys, eps)
    out = torch.empty_like(values)
    for key, indices in _groups(keys).items():
        idx = torch.tensor(indices)
        group = values[idx]
        mean, divisor = stats[key]
        if singleton_zero and len(indices) == 1:
            mean = group[0]
        out[idx] = (group - mean) / divisor if normalize else group - mean
    return out.float()


def grpo(returns: torch.Tensor, group_ids: Sequence[Hashable], normalize: bool = True,
         eps: float = EPS) -> torch.Tensor:
    """GRPO episode advantage: (R_i − mean_g R) / (std_g R + eps) for each trajectory.

    Args:
        returns: ``[N]`` episode returns.
        group_ids: ``N`` group keys.
        normalize: divide by the group std (``False``: mean-centring only, "Dr. GRPO").
    """
    return _group_normalize(returns, group_ids, normalize, eps)


def rloo(returns: torch.Tensor, group_ids: Sequence[Hashable]) -> torch.Tensor:
    """RLOO advantage: R_i − mean_{j ≠ i, j ∈ g} R_j (singleton groups keep R_i)."""
    returns = torch.as_tensor(returns, dtype=torch.float64).reshape(-1)
    if len(group_ids) != returns.numel():
        raise ValueError(f"{len(group_ids)} group keys for {returns.numel()} returns")
    out = returns.clone()
    for indices in _groups(group_ids).values():
        k = len(indices)
        if k > 1:
            idx = torch.tensor(indices)
            group = returns[idx]
            out[idx] = group - (group.sum() - group) / (k - 1)
    return out.float()


def discounted_returns(rewards: torch.Tensor, gamma: float) -> torch.Tensor:
    """G_t = Σ_k γ^k r_{t+k} within one trajectory (``rewards``: ``[T]``), in float64 like the
    group statistics it feeds."""
    rewards = torch.as_tensor(rewards, dtype=torch.float64).reshape(-1)
    out = torch.empty_like(rewards)
    running = torch.zeros((), dtype=torch.float64)
    for t in range(rewards.numel() - 1, -1, -1):
        running = rewards[t] + gamma * running
        out[t] = running
    return out


def gigpo(episode_returns: torch.Tensor, group_ids: Sequence[Hashable],
          step_rewards: Sequence[torch.Tensor], anchor_keys: Sequence[Sequence[Hashable]],
          gamma: float = 0.95, omega: float = 1.0, normalize: bool = True,
          similarity: float = 1.0, eps: float = EPS,
          step_penalties: Sequence[torch.Tensor] | None = None,
          episode_norm: str = "trajectory") -> list[torch.Tensor]:
    """GiGPO advantages: episode-level GRPO advantage + ω × step-level anchor-state advantage.

    The step level groups every step of a rollout group by its anchor state (the observation
    the step acted on); within an anchor group, the step's discounted return G_t (γ) is
    normalised like GRPO. Identical states reached in different trajectories of the same task
    thus compare the actions taken there; a state reached once has step advantage 0.

    Args:
        episode_returns: ``[N]`` return of each trajectory.
        group_ids: ``N`` rollout-group keys (same task ⇒ same key).
        step_rewards: ``N`` tensors ``[T_i]`` of per-step rewards.
        anchor_keys: ``N`` sequences of ``T_i`` hashable anchor-state keys (e.g. observation text).
        gamma: discount of the step-level return.
        omega: weight of the step-level advantage.
        normalize: std-normalise both levels (the paper uses the normalised version).
        similarity: 1.0 groups identical anchor states only. Below 1, text states of the same
            rollout group that are at least this similar share an anchor group (the paper uses
            0.9 for search QA, whose observations rarely repeat verbatim); see
            :func:`cluster_similar_states`.
        step_penalties: None when penalties are already in ``episode_returns`` and
            ``step_rewards``. Otherwise ``N`` tensors ``[T_i]`` of each step's own penalty
            (verl-agent's handling), with penalty-free returns and rewards: step t's episode
            score is R_i + p_{i,t} and its step return G_t + p_{i,t}.
        episode_norm: the episode level's group statistics over the group's ``trajectory``
            returns (each once) or over its ``step`` scores (verl-agent's
            ``compute_mean_std_cross_steps``: a trajectory counts once per step).

    Returns:
        ``N`` tensors ``[T_i]`` of per-step advantages.
    """
    if isinstance(group_ids, (torch.Tensor, np.ndarray)):
        group_ids = group_ids.tolist()
    n = len(group_ids)
    if episode_norm not in ("trajectory", "step"):
        raise ValueError(f"episode_norm={episode_norm!r} must be 'trajectory' or 'step'")
    if similarity < 1.0:
        anchor_keys = cluster_similar_states(group_ids, anchor_keys, similarity)
    if not (len(step_rewards) == len(anchor_keys) == n):
        raise ValueError(f"gigpo needs one entry per trajectory: {n} groups, "
                         f"{len(step_rewards)} reward lists, {len(anchor_keys)} anchor lists")
    if step_penalties is not None and len(step_penalties) != n:
        raise ValueError(f"gigpo: {len(step_penalties)} penalty lists for {n} trajectories")
    returns = torch.as_tensor(episode_returns, dtype=torch.float64).reshape(-1)
    flat_returns, flat_keys, scores, score_keys, lengths = [], [], [], [], []
    for i in range(n):
        rewards = torch.as_tensor(step_rewards[i], dtype=torch.float64).reshape(-1)
        if len(anchor_keys[i]) != rewards.numel():
            raise ValueError(f"trajectory {i}: {rewards.numel()} rewards but "
                             f"{len(anchor_keys[i])} anchor keys")
        own = torch.zeros_like(rewards) if step_penalties is None else \
            torch.as_tensor(step_penalties[i], dtype=torch.float64).reshape(-1)
        if own.numel() != rewards.numel():
            raise ValueError(f"trajectory {i}: {rewards.numel()} rewards but {own.numel()} "
                             "penalties")
        flat_returns.append(discounted_returns(rewards, gamma) + own)
        flat_keys.extend((group_ids[i], key) for key in anchor_keys[i])
        scores.append(returns[i] + own)
        score_keys.extend([group_ids[i]] * rewards.numel())
        lengths.append(rewards.numel())
    if not flat_keys:
        return [torch.zeros(0) for _ in range(n)]
    if episode_norm == "step":
        episode = _group_normalize(torch.cat(scores), score_keys, normalize, eps)
    else:
        stats = _group_stats(returns, group_ids, eps)
        mean = torch.stack([stats[key][0] for key in score_keys])
        divisor = torch.stack([stats[key][1] for key in score_keys])
        centred = torch.cat(scores) - mean
        episode = centred / divisor if normalize else centred
    step = _group_normalize(torch.cat(flat_returns), flat_keys, normalize, eps,
                            singleton_zero=True)
    return [(e + omega * part).float()
            for e, part in zip(episode.split(lengths), step.split(lengths))]


def cluster_similar_states(group_ids: Sequence[Hashable], anchor_keys: Sequence[Sequence[str]],
                           threshold: float) -> list[list[str]]:
    """Replace each anchor state by the representative of its similarity cluster.

    Within one rollout group, states are visited in trajectory order; a state joins the first
    cluster whose representative (its first member) it matches with a normalised similarity of
    at least ``threshold``, otherwise it starts a new cluster (the greedy scheme of the GiGPO
    reference code). The similarity is rapidfuzz's normalised Indel similarity,
    ``1 − (insertions + deletions) / (len a + len b)``, the exact form of the ratio that the
    reference code estimates with ``difflib.SequenceMatcher``.
    """
    from rapidfuzz.distance import Indel

    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"similarity threshold {threshold} must be in (0, 1]")
    representatives: dict[Hashable, list[str]] = {}
    clustered = []
    for group, keys in zip(group_ids, anchor_keys):
        reps = representatives.setdefault(group, [])
        row = []
        for key in keys:
            key = str(key)
            match = next((rep for rep in reps if rep == key or Indel.normalized_similarity(
                key, rep, score_cutoff=threshold)), None)
            if match is None:
                reps.append(key)
                match = key
            row.append(match)
        clustered.append(row)
    return clustered


def gae(rewards: torch.Tensor, values: torch.Tensor, gamma: float = 1.0, lam: float = 1.0,
        bootstrap_value: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over the steps of one trajectory.

    δ_t = r_t + γ V_{t+1} − V_t (V_T = ``bootstrap_value``, 0 at termination);
    A_t = δ_t + γλ A_{t+1}. Returns ``(advantages, value_targets = A + V)``.
    """
    rewards = torch.as_tensor(rewards, dtype=torch.float32).reshape(-1)
    values = torch.as_tensor(values, dtype=torch.float32).reshape(-1).detach()
    if rewards.shape != values.shape:
        raise ValueError(f"gae: {rewards.numel()} rewards but {values.numel()} values")
    advantages = torch.empty_like(rewards)
    running = torch.zeros(())
    next_value = torch.tensor(float(bootstrap_value))
    for t in range(rewards.numel() - 1, -1, -1):
        delta = rewards[t] + gamma * next_value - values[t]
        running = delta + gamma * lam * running
        advantages[t] = running
        next_value = values[t]
    return advantages, advantages + values


def whiten(values: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """(x − mean) / (std + eps) over the whole batch (PPO advantage normalisation)."""
    values = torch.as_tensor(values, dtype=torch.float32)
    if values.numel() < 2:
        return values - values.mean() if values.numel() else values
    return (values - values.mean()) / (values.std() + eps)
