"""The PaW objective from one forward pass over ``h ⊕ a ⊕ o_next``.

    L = mean_g [ L_RL(g) + λ_g · mean_{t ∈ S_α ∩ P_g} ℓ_WM(t) ]

L_RL(g) is the PPO-clip loss (+ optional KL to the reference) averaged over the action tokens
of group g ("token" aggregation) or over its transitions ("sequence"). A group with no selected
transition has no WM term. The objective is linear in per-row terms whose weights depend only
on counts known before the pass (:func:`objective_weights`), so any split of a mini-batch into
token-budget micro-batches, with the micro-batch losses summed (gradient accumulation), gives
exactly the gradient of the whole mini-batch.

Memory: the model's backbone runs once; the LM head is applied only at scored positions, in
chunks, and (when gradients are on) under activation checkpointing, so the ``[positions, vocab]``
logits are never stored for backward: only the gathered target log-probs are kept.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils.checkpoint import checkpoint

from training.batch import MicroBatch, Sample
from training.losses import (clipped_token_fraction, kl_k3, ppo_clip_token_loss,
                             wm_token_loss)


@dataclass
class ObjectiveSettings:
    """Loss switches (the paper's ablations) and PPO-clip settings."""

    paw: bool = True
    """Add the world-model term (False: the plain RL baseline)."""
    wm_loss: str = "cmae"
    """WM token loss: ``cmae`` (PaW), ``mae`` or ``ce`` (ablations)."""
    rho: float = 0.2
    """CMAE confidence threshold ρ."""
    clip_eps: float = 0.2
    """PPO clip range ε (lower side)."""
    clip_eps_high: float | None = None
    """Upper clip range (None: same as ``clip_eps``)."""
    kl_coef: float = 0.0
    """Weight of the k3 KL to the reference policy (0: no reference pass)."""
    rl_agg: str = "token"
    """Within-group RL aggregation: ``token`` (mean over action tokens) or ``sequence``."""
    action_temperature: float = 1.0
    """Divide action logits by this (the rollout temperature) so ratios compare like with like."""


def split_causal_lm(model):
    """``(decoder, lm_head)`` of a causal LM, looking through a peft wrapper."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder, head = base.get_decoder(), base.get_output_embeddings()
    if decoder is None or head is None:
        raise TypeError(f"{type(base).__name__} does not expose a decoder and an LM head")
    return decoder, head


def _head_logprobs(hidden: torch.Tensor, targets: torch.Tensor, weight: torch.Tensor,
                   bias: torch.Tensor | None, scale: torch.Tensor) -> torch.Tensor:
    logits = torch.nn.functional.linear(hidden, weight, bias).float() / scale[:, None]
    return logits.log_softmax(-1).gather(-1, targets[:, None]).squeeze(-1)


def gather_logprobs(model, batch: MicroBatch, *, score_obs: bool = True,
                    action_temperature: float = 1.0, with_entropy: bool = False,
                    chunk_size: int = 2048) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Target-token log-probs at the action (and observation) positions of ``batch``.

    Returns ``(logprobs, entropies)``, both ``[B, L]`` and zero at unscored positions;
    ``entropies`` (no gradient; action positions only, tempered like the action logits) is None
    unless ``with_entropy``.
    """
    decoder, head = split_causal_lm(model)
    hidden = decoder(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                     use_cache=False).last_hidden_state
    score = batch.action_mask | batch.obs_mask if score_obs else batch.action_mask
    score = score.clone()
    score[:, 0] = False  # position 0 has no predecessor (serialize() keeps >= 1 prompt token)
    rows, cols = score.nonzero(as_tuple=True)
    states = hidden[rows, cols - 1]
    targets = batch.input_ids[rows, cols]
    temperature = action_temperature if action_temperature > 0 else 1.0
    scale = torch.where(batch.action_mask[rows, cols], temperature, 1.0).to(torch.float32)
    pieces = []
    for start in range(0, len(rows), chunk_size):
        part = slice(start, start + chunk_size)
        args = (states[part], targets[part], head.weight, head.bias, scale[part])
        if torch.is_grad_enabled():
            pieces.append(checkpoint(_head_logprobs, *args, use_reentrant=False))
        else:
            pieces.append(_head_logprobs(*args))
    values = torch.cat(pieces) if pieces else states.new_zeros(0, dtype=torch.float32)
    logprobs = torch.zeros(score.shape, dtype=torch.float32, device=values.device)
    logprobs = logprobs.index_put((rows, cols), values)
    entropies = None
    if with_entropy:
        entropies = torch.zeros(score.shape, dtype=torch.float32, device=values.device)
        action_pos = batch.action_mask[rows, cols]
        with torch.no_grad():
            a_states, a_rows, a_cols = states[action_pos], rows[action_pos], cols[action_pos]
            for start in range(0, len(a_rows), chunk_size):
                part = slice(start, start + chunk_size)
                logits = head(a_states[part]).float() / temperature
                logp = logits.log_softmax(-1)
                entropies[a_rows[part], a_cols[part]] = -(logp.exp() * logp).sum(-1)
    return logprobs, entropies


def objective_weights(samples: list[Sample], selected: torch.Tensor,
                      group_lambda: dict[int, float], settings: ObjectiveSettings
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row weights ``(w_rl, w_wm)`` that make Σ rows the PaW objective of ``samples``.

    ``w_rl[i]`` multiplies the *sum* of row i's per-token RL losses; ``w_wm[i]`` multiplies its
    WM loss ℓ_WM(i). With G groups, n_g rows and N_g action tokens in group g and S_g its
    selected rows: token aggregation gives w_rl = 1 / (G · N_g), sequence aggregation
    1 / (G · n_g · |a_i|); w_wm = λ_g / (G · |S_g|) for selected rows (0 otherwise, and 0 for
    all rows when ``paw`` is off).
    """
    if settings.rl_agg not in ("token", "sequence"):
        raise ValueError(f"rl_agg={settings.rl_agg!r} must be 'token' or 'sequence'")
    groups = sorted({s.group for s in samples})
    n_groups = len(groups)
    tokens = {g: 0 for g in groups}
    rows = {g: 0 for g in groups}
    picked = {g: 0 for g in groups}
    for i, s in enumerate(samples):
        tokens[s.group] += s.action_len
        rows[s.group] += 1
        picked[s.group] += int(bool(selected[i]))
    w_rl = torch.zeros(len(samples))
    w_wm = torch.zeros(len(samples))
    for i, s in enumerate(samples):
        if settings.rl_agg == "token":
            w_rl[i] = 1.0 / (n_groups * tokens[s.group])
        else:
            w_rl[i] = 1.0 / (n_groups * rows[s.group] * s.action_len)
        if settings.paw and selected[i]:
            w_wm[i] = group_lambda[s.group] / (n_groups * picked[s.group])
    return w_rl, w_wm


def micro_batch_loss(model, batch: MicroBatch, w_rl: torch.Tensor, w_wm: torch.Tensor,
                     settings: ObjectiveSettings, chunk_size: int = 2048
                     ) -> tuple[torch.Tensor, dict[str, float]]:
    """This micro-batch's share of the objective, and summed statistics for logging.

    ``w_rl`` / ``w_wm`` are the rows' weights from :func:`objective_weights`. The returned
    stats are *sums* (token counts, clipped tokens, weighted WM loss ...) so that the trainer can
    add them over micro-batches before dividing.
    """
    device = batch.input_ids.device
    w_rl, w_wm = w_rl.to(device), w_wm.to(device)
    wm_rows = w_wm > 0
    logprobs, entropies = gather_logprobs(
        model, batch, score_obs=bool(wm_rows.any()),
        action_temperature=settings.action_temperature, with_entropy=True, chunk_size=chunk_size)
    action = batch.action_mask
    token_loss, clipped = ppo_clip_token_loss(logprobs, batch.old_logprobs,
                                              batch.advantages[:, None], settings.clip_eps,
                                              settings.clip_eps_high)
    if settings.kl_coef > 0:
        if batch.ref_logprobs is None:
            raise ValueError("kl_coef > 0 needs reference log-probs on every sample")
        kl = kl_k3(logprobs, batch.ref_logprobs)
        token_loss = token_loss + settings.kl_coef * kl
    else:
        kl = torch.zeros_like(logprobs)
    per_row_rl = (token_loss * action).sum(-1)
    loss = (w_rl * per_row_rl).sum()
    stats = {
        "action_tokens": float(action.sum()),
        "clipped_tokens": float((clipped & action).sum()),
        "kl_sum": float((kl.detach() * action).sum()),
        "entropy_sum": float((entropies * action).sum()),
        "rl_loss": float((w_rl * per_row_rl).sum().detach()),
        "wm_rows": 0.0, "wm_loss_sum": 0.0, "wm_term": 0.0,
        "obs_tokens": 0.0, "obs_clipped_tokens": 0.0,
    }
    if wm_rows.any():
        obs = batch.obs_mask & wm_rows[:, None]
        per_row_wm = wm_token_loss(logprobs, obs, kind=settings.wm_loss, rho=settings.rho)
        wm_term = (w_wm * per_row_wm).sum()
        loss = loss + wm_term
        n_obs = float(obs.sum())
        stats.update(
            wm_rows=float(wm_rows.sum()),
            wm_loss_sum=float(per_row_wm.detach()[wm_rows].sum()),
            wm_term=float(wm_term.detach()),
            obs_tokens=n_obs,
            obs_clipped_tokens=float(clipped_token_fraction(logprobs, obs, settings.rho)) * n_obs,
        )
    return loss, stats

