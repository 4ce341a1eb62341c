"""The PaW objective from one forward pass over ``h ⊕ a ⊕ o_next``.

    L = mean_g [ L_RL(g) + λ_g · mean_{t ∈ S_α ∩ P_g} ℓ_WM(t) ]

L_RL(g) is the PPO-clip loss (+ optional KL to the reference, − optional entropy bonus β·H of
the full next-token distribution) averaged over the action tokens of group g ("token"
aggregation) or over its transitions ("sequence"); with a rollout correction on, each action
token's PPO-clip term carries its importance weight (``training.rl.correction``), its KL term
none. A group with no selected transition has no WM term. The objective is linear in per-row
terms whose weights depend only on counts known before the pass (:func:`objective_weights`), so
any split of a mini-batch into token-budget micro-batches, with the micro-batch losses summed
(gradient accumulation), gives exactly the gradient of the whole mini-batch.

Memory and compute: the model's backbone runs once; the LM head is applied only at scored
positions (action tokens, and observation tokens of rows with a WM weight), in chunks, by
:class:`HeadTargetLogprobs`, which never stores ``[positions, vocab]`` logits for backward and
recomputes them in backward only for positions whose gradient is non-zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from training.infra.paw_settings import PaWSettings
from training.rl.batch import MicroBatch, Sample
from training.rl.correction import correction_weights, ratio_bound
from training.rl.losses import (clipped_token_fraction, kl_k3, ppo_clip_token_loss,
                                wm_token_loss)


@dataclass
class ObjectiveSettings:
    """The objective's settings: the world-model term's, shared with the run's config, and the
    RL term's (PPO-clip, KL, aggregation, entropy bonus, rollout correction)."""

    world_model: PaWSettings = field(default_factory=PaWSettings)
    """The world-model term's settings (a run's ``TrainConfig`` is one): the objective reads
    ``paw`` (False: the plain RL baseline), ``wm_loss`` and ``rho``; the transitions selected
    and λ_g come with the batch."""
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
    entropy_coef: float = 0.0
    """Entropy bonus: subtract this × the action-token entropy, aggregated like L_RL(g)."""
    rollout_correction: str = "none"
    """``training.rl.correction``'s mode, computed in the pass when :func:`micro_batch_loss`
    is told ``correct_in_pass`` (π_old is then the weights of this very pass)."""
    rollout_correction_cap: float = 2.0
    """Its cap C."""
    rollout_correction_two_sided: bool = False
    """Its mask modes also mask a ratio below 1 / C."""


def split_causal_lm(model):
    """``(decoder, lm_head)`` of a causal LM, looking through a peft wrapper."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder, head = base.get_decoder(), base.get_output_embeddings()
    if decoder is None or head is None:
        raise TypeError(f"{type(base).__name__} does not expose a decoder and an LM head")
    return decoder, head


class HeadTargetLogprobs(torch.autograd.Function):
    """``log_softmax((h Wᵀ + b) / s)[target]`` per row, without keeping ``[rows, vocab]`` logits.

    Forward computes the logits of the rows once and keeps only ``h`` and the row's log-sum-exp.
    Backward recomputes the logits of the rows whose incoming gradient is non-zero (CMAE-clipped
    observation tokens, zero-advantage actions and unweighted rows have none) and forms the
    gradient ``g · (onehot − softmax)`` in place. Compared with autograd through
    ``log_softmax().gather()`` under activation checkpointing, this skips the recompute of the
    forward's elementwise work, the zero-filled scatter of ``gather``'s backward and every
    ``[rows, vocab]`` op of rows without gradient, and the weight gradient when the head is
    frozen (LoRA).

    Also returns the entropy H of the tempered distribution at rows flagged in ``entropy_rows``
    (0 elsewhere), from the same logits; it is differentiable (dH/dz = −p (log p + H)), for an
    entropy bonus, and costs nothing in backward when no gradient reaches it. And, without
    gradient, the log-prob of a second target per row (``extra_targets``; NaN where it is −1),
    which the leak metric reads.
    """

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, scale, entropy_rows, extra_targets):
        logits = _scaled_logits(hidden, weight, bias, scale)
        lse = logits.logsumexp(-1)
        logprobs = logits.gather(-1, targets[:, None]).squeeze(-1) - lse
        entropies = torch.zeros_like(lse)
        if entropy_rows.any():  # H = lse - sum(p * logit)
            part, part_lse = logits[entropy_rows], lse[entropy_rows]
            probs = (part - part_lse[:, None]).exp_()
            entropies[entropy_rows] = part_lse - (probs * part).sum(-1)
        extra = torch.full_like(lse, float("nan"))
        has_extra = extra_targets >= 0
        if has_extra.any():
            extra[has_extra] = logits[has_extra].gather(
                -1, extra_targets[has_extra, None]).squeeze(-1) - lse[has_extra]
        ctx.mark_non_differentiable(extra)
        ctx.save_for_backward(hidden, weight, bias, targets, scale, lse, entropies, entropy_rows)
        ctx.set_materialize_grads(False)  # an unused entropy output sends None, not zeros
        return logprobs, entropies, extra

    @staticmethod
    def backward(ctx, grad, grad_entropies, _grad_extra):
        hidden, weight, bias, targets, scale, lse, entropies, entropy_rows = ctx.saved_tensors
        need_hidden, need_weight, need_bias = ctx.needs_input_grad[:3]
        if grad is None:
            grad = torch.zeros_like(lse)
        has_entropy_grad = grad_entropies is not None
        if has_entropy_grad:  # entropies of unflagged rows are constant 0
            grad_entropies = torch.where(entropy_rows, grad_entropies, 0.0)
            has_entropy_grad = bool(grad_entropies.any())
        active = grad != 0
        if has_entropy_grad:
            active |= grad_entropies != 0
        rows = active.nonzero().squeeze(-1)
        g = grad[rows]
        # d logp / d logits = onehot(target) − p and dH / d logits = −p (log p + H), then chain
        # through the 1/s scaling.
        grad_logits = _scaled_logits(hidden[rows], weight, bias, scale[rows])
        grad_logits.sub_(lse[rows, None])  # log p
        if has_entropy_grad:
            coef = g[:, None] + grad_entropies[rows, None] * (grad_logits + entropies[rows, None])
            grad_logits.exp_().mul_(-coef)
        else:
            grad_logits.exp_().mul_(-g[:, None])
        grad_logits[torch.arange(len(rows), device=rows.device), targets[rows]] += g
        grad_logits.div_(scale[rows, None].to(grad_logits.dtype))
        grad_logits = grad_logits.to(hidden.dtype)
        grad_hidden = grad_weight = grad_bias = None
        if need_hidden:
            grad_hidden = torch.zeros_like(hidden)
            grad_hidden[rows] = grad_logits @ weight
        if need_weight:
            grad_weight = (grad_logits.t() @ hidden[rows]).to(weight.dtype)
        if need_bias and bias is not None:
            grad_bias = grad_logits.sum(0).to(bias.dtype)
        return grad_hidden, grad_weight, grad_bias, None, None, None, None


def _scaled_logits(hidden, weight, bias, scale):
    """``(h Wᵀ + b) / s`` in at least float32; the 1/s scaling is applied to ``h`` ([rows,
    hidden]), not to the much wider logits."""
    dtype = torch.promote_types(hidden.dtype, torch.float32)
    logits = torch.nn.functional.linear(hidden / scale[:, None].to(hidden.dtype), weight).to(dtype)
    if bias is not None:
        logits += bias.to(dtype)[None, :] / scale[:, None].to(dtype)
    return logits


class TokenScores(NamedTuple):
    """What :func:`gather_logprobs` returns."""

    logprobs: torch.Tensor
    """``[B, L]`` target-token log-probs, zero at unscored positions."""
    entropies: torch.Tensor | None
    """``[B, L]`` tempered entropies at action positions (differentiable), or None."""
    leak_logprobs: torch.Tensor | None
    """``[B]`` the leak of each row (no gradient): the largest log-prob, tempered like the
    actions, that the policy gives the row's first o_next token at any position of its own turn
    (before each action token and after the last); NaN for rows without one. None unless asked
    for."""


def gather_logprobs(model, batch: MicroBatch, *, score_obs: bool | torch.Tensor = True,
                    action_temperature: float = 1.0, with_entropy: bool = False,
                    with_leak: bool = False, chunk_size: int = 512) -> TokenScores:
    """Target-token log-probs at the action (and observation) positions of ``batch``, whose
    rows must be right-padded (as :func:`training.rl.batch.collate` makes them).

    ``score_obs`` is a bool for all rows or a ``[B]`` bool tensor of the rows whose observation
    tokens are scored. ``entropies`` (action positions only, tempered like the action logits)
    are computed with ``with_entropy``, the leak log-probs (from the logits of the action
    positions, and one extra head row per transition for the position after the action) with
    ``with_leak``.
    """
    decoder, head = split_causal_lm(model)
    # Rows are right-padded, so under the causal mask a real token never attends to padding:
    # no padding mask is needed, and without one the attention takes its plain causal path
    # instead of building and applying a [rows, 1, L, L] mask.
    hidden = decoder(input_ids=batch.input_ids, use_cache=False).last_hidden_state
    if isinstance(score_obs, bool):
        score_obs = torch.full(batch.action_mask.shape[:1], score_obs, device=hidden.device)
    score = batch.action_mask | (batch.obs_mask & score_obs[:, None])
    score[:, 0] = False  # position 0 has no predecessor (serialize() keeps >= 1 prompt token)
    rows, cols = score.nonzero(as_tuple=True)
    states = hidden[rows, cols - 1]
    targets = batch.input_ids[rows, cols]
    temperature = action_temperature if action_temperature > 0 else 1.0
    is_action = batch.action_mask[rows, cols]
    scale = torch.where(is_action, temperature, 1.0).to(torch.float32)
    want_entropy = is_action & with_entropy
    no_target = torch.full_like(targets, -1)
    extra_targets = no_target if not with_leak or batch.leak_targets is None else \
        torch.where(is_action, batch.leak_targets[rows], no_target)
    pieces, entropy_pieces, extra_pieces = [], [], []
    for start in range(0, len(rows), chunk_size):
        part = slice(start, start + chunk_size)
        logprobs, entropies, extra = HeadTargetLogprobs.apply(
            states[part], head.weight, head.bias, targets[part], scale[part],
            want_entropy[part], extra_targets[part])
        pieces.append(logprobs)
        entropy_pieces.append(entropies)
        extra_pieces.append(extra)
    dtype = torch.promote_types(states.dtype, torch.float32)  # float64 models stay float64
    values = torch.cat(pieces) if pieces else states.new_zeros(0, dtype=dtype)
    logprobs = torch.zeros(score.shape, dtype=dtype, device=values.device)
    logprobs = logprobs.index_put((rows, cols), values)
    entropies = None
    if with_entropy:
        entropies = torch.zeros(score.shape, dtype=dtype, device=values.device)
        if entropy_pieces:
            entropies[rows, cols] = torch.cat(entropy_pieces)
    leak = None
    if with_leak:
        inside = torch.cat(extra_pieces) if extra_pieces else values.new_zeros(0)
        leak = _leak_logprobs(hidden, head, batch, temperature, dtype, rows, inside)
    return TokenScores(logprobs, entropies, leak)


@torch.no_grad()
def _leak_logprobs(hidden, head, batch: MicroBatch, temperature: float, dtype,
                   position_rows: torch.Tensor, inside: torch.Tensor) -> torch.Tensor:
    """Per row: the max of log p(o_1 | h, a_<j) over the action positions (``inside``, one per
    scored position of ``position_rows``; NaN off the action positions) and the position after
    the last action token; NaN for rows without a leak target."""
    leak = torch.full(hidden.shape[:1], float("nan"), dtype=dtype, device=hidden.device)
    if batch.leak_targets is None:
        return leak
    rows = (batch.leak_targets >= 0).nonzero().squeeze(-1)
    if not len(rows):
        return leak
    states = hidden[rows, batch.leak_positions[rows]].detach()
    scale = torch.full((len(rows),), temperature, dtype=torch.float32, device=hidden.device)
    logits = _scaled_logits(states, head.weight.detach(),
                            None if head.bias is None else head.bias.detach(), scale)
    leak[rows] = logits.log_softmax(-1).gather(-1, batch.leak_targets[rows, None]).squeeze(-1) \
        .to(dtype)
    scored = ~inside.isnan()
    return leak.scatter_reduce(0, position_rows[scored], inside[scored].to(dtype), "amax")


class PolicyScorer(torch.nn.Module):
    """:func:`gather_logprobs` of ``model`` as a module's forward, so that a
    ``DistributedDataParallel`` wrapper, which all-reduces the gradients of the passes run
    through its own forward, sees the training pass (see ``training.infra.distributed``).

    Example:
        >>> scorer = PolicyScorer(model)                                    # doctest: +SKIP
        >>> scores = scorer(batch, score_obs=True, with_entropy=True)      # doctest: +SKIP
    """

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, batch: MicroBatch, **kwargs) -> TokenScores:
        return gather_logprobs(self.model, batch, **kwargs)

    def fsdp_units(self) -> list[torch.nn.Module]:
        """The modules FSDP shards one by one (``training.infra.distributed.shard_module``): the
        decoder layers."""
        return list(split_causal_lm(self.model)[0].layers)


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
    for s in samples:
        tokens[s.group] += s.action_len
        rows[s.group] += 1
    w_rl = torch.zeros(len(samples))
    for i, s in enumerate(samples):
        if settings.rl_agg == "token":
            w_rl[i] = 1.0 / (n_groups * tokens[s.group])
        else:
            w_rl[i] = 1.0 / (n_groups * rows[s.group] * s.action_len)
    w_wm = (wm_weights([s.group for s in samples], selected, group_lambda)
            if settings.world_model.paw else torch.zeros(len(samples)))
    return w_rl, w_wm


def wm_weights(groups: list[int], selected: torch.Tensor, group_lambda: dict[int, float]
               ) -> torch.Tensor:
    """``w_wm`` of :func:`objective_weights`: λ_g / (G · |S_g|) for each selected transition
    (``groups[i]``: its group; G: the number of distinct groups), 0 for the others."""
    n_groups = len(set(groups))
    picked: dict[int, int] = {}
    for group, chosen in zip(groups, selected):
        picked[group] = picked.get(group, 0) + int(bool(chosen))
    return torch.tensor([group_lambda[g] / (n_groups * picked[g]) if chosen else 0.0
                         for g, chosen in zip(groups, selected)])


def _correction_sums(result, action: torch.Tensor, mode: str) -> dict[str, float]:
    """A correction computed in the pass (:func:`micro_batch_loss`) as sums over this
    micro-batch, which the trainer adds over micro-batches (``*_max``: the largest) into the
    metrics :class:`training.rl.correction.Correction` gives for a whole rollout."""
    tokens = float(action.sum())
    units = float(action.any(-1).sum()) if mode.startswith("sequence") else tokens
    return {"correction_tokens": tokens, "correction_units": units,
            "correction_gap_sum": result.gap_mean * tokens,
            "correction_gap_max": result.gap_max,
            "correction_corrected": result.corrected_frac * units,
            "correction_weight_sum": result.weight_mean * tokens}


def micro_batch_loss(model, batch: MicroBatch, w_rl: torch.Tensor, w_wm: torch.Tensor,
                     settings: ObjectiveSettings, chunk_size: int = 512,
                     correct_in_pass: bool = False) -> tuple[torch.Tensor, dict[str, float]]:
    """This micro-batch's share of the objective, and summed statistics for logging.

    ``model`` is the causal LM, or a :class:`PolicyScorer` of it (possibly DDP-wrapped).
    ``w_rl`` / ``w_wm`` are the rows' weights from :func:`objective_weights`. The returned
    stats are *sums* (token counts, clipped tokens, weighted WM loss ...) so that the trainer can
    add them over micro-batches before dividing. The rollout correction is the caller's choice
    (``training.rl.update.PolicyUpdate.correction_plan``): weights carried in the batch
    (``is_weights``, scored before the update), or ``correct_in_pass`` (the update takes one
    optimizer step on the whole rollout, so π_old is this pass's own weights: the correction
    ``settings.rollout_correction`` is computed here, from this forward's log-probs).
    """
    device = batch.input_ids.device
    w_rl, w_wm = w_rl.to(device), w_wm.to(device)
    wm_rows = w_wm > 0
    wrapped = isinstance(model, (PolicyScorer, torch.nn.parallel.DistributedDataParallel))
    scorer = model if wrapped else PolicyScorer(model)
    logprobs, entropies, leak = scorer(
        batch, score_obs=wm_rows, action_temperature=settings.action_temperature,
        with_entropy=True, with_leak=True, chunk_size=chunk_size)
    action = batch.action_mask
    old, weights, sampler = batch.old_logprobs, batch.is_weights, batch.sampler_logprobs
    correction_stats: dict[str, float] = {}
    if correct_in_pass:
        if weights is not None:
            raise ValueError("correct_in_pass with weights already in the batch: the "
                             "correction would be applied twice")
        # π_old is this forward's log-probs, detached: no scoring pass (training.rl.correction).
        # batch.old_logprobs hold the sampler's, μ.
        old = (logprobs.detach() * action).float()
        result = correction_weights(old, batch.old_logprobs, action,
                                    settings.rollout_correction, settings.rollout_correction_cap,
                                    settings.rollout_correction_two_sided)
        weights = result.weights.to(logprobs.dtype)
        sampler = ratio_bound(settings.rollout_correction, batch.old_logprobs)
        correction_stats = _correction_sums(result, action, settings.rollout_correction)
    token_loss, clipped = ppo_clip_token_loss(logprobs, old, batch.advantages[:, None],
                                              settings.clip_eps, settings.clip_eps_high, sampler)
    if weights is not None:  # rollout correction (training.rl.correction)
        token_loss = token_loss * weights
    if settings.kl_coef > 0:  # to the reference, whoever sampled the token: not weighted
        if batch.ref_logprobs is None:
            raise ValueError("kl_coef > 0 needs reference log-probs on every sample")
        kl = kl_k3(logprobs, batch.ref_logprobs)
        token_loss = token_loss + settings.kl_coef * kl
    else:
        kl = torch.zeros_like(logprobs)
    per_row_rl = (token_loss * action).sum(-1)
    loss = (w_rl * per_row_rl).sum()
    if settings.entropy_coef > 0:  # same weights as the RL tokens: a per-group mean entropy
        loss = loss - settings.entropy_coef * (w_rl * (entropies * action).sum(-1)).sum()
    stats = {
        "action_tokens": float(action.sum()),
        # |log pi_train(a) - log pi_rollout(a)|: ~0 before the first optimizer step of an update
        # unless the sampler's weights or numerics differ from the trained model's
        "logprob_gap_sum": float(((logprobs.detach() - batch.old_logprobs).abs() * action).sum()),
        "clipped_tokens": float((clipped & action).sum()),
        "kl_sum": float((kl.detach() * action).sum()),
        "entropy_sum": float((entropies.detach() * action).sum()),
        "rl_loss": float((w_rl * per_row_rl).sum().detach()),
        # probability that the policy's turn goes on with the environment's text (wm_leak)
        "leak_prob_sum": float(leak[~leak.isnan()].exp().sum()),
        "leak_rows": float((~leak.isnan()).sum()),
        "wm_rows": 0.0, "wm_loss_sum": 0.0, "wm_term": 0.0,
        "obs_tokens": 0.0, "obs_clipped_tokens": 0.0,
        **correction_stats,
    }
    if wm_rows.any():
        obs = batch.obs_mask & wm_rows[:, None]
        per_row_wm = wm_token_loss(logprobs, obs, kind=settings.world_model.wm_loss,
                                   rho=settings.world_model.rho)
        wm_term = (w_wm * per_row_wm).sum()
        loss = loss + wm_term
        n_obs = float(obs.sum())
        stats.update(
            wm_rows=float(wm_rows.sum()),
            wm_loss_sum=float(per_row_wm.detach()[wm_rows].sum()),
            wm_term=float(wm_term.detach()),
            obs_tokens=n_obs,
            obs_clipped_tokens=float(clipped_token_fraction(logprobs, obs,
                                                            settings.world_model.rho)) * n_obs,
        )
    return loss, stats

