"""Training rows of serialised transitions, packed into token-budget micro-batches.

Each transition is one row ``h ⊕ a ⊕ s ⊕ o`` (:mod:`agents.serialization`): the prompt ids
``h`` the policy saw, the response ids ``a`` it generated, the separator ``s`` of the
``wm_context``, then the tokens of the next observation ``o`` (the world-model target). Target
position ``j`` holds token ``ids[j]``, predicted from the logits at ``j − 1``; the action mask
marks the ``a`` positions, the observation mask the ``o`` positions (never ``s``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class Sample:
    """One serialised transition plus everything the losses need about it."""

    input_ids: list[int]
    """``h ⊕ a ⊕ o`` token ids (already truncated to the row budget)."""
    prompt_len: int
    """Tokens of ``h`` in ``input_ids``."""
    action_len: int
    """Tokens of ``a`` (the RL targets)."""
    obs_len: int
    """Tokens of ``o_next`` (the WM targets); 0 when the WM term does not need this row."""
    old_logprobs: list[float]
    """Behaviour-policy log-prob of each action token."""
    advantage: float = 0.0
    """Advantage of this step, shared by all its action tokens."""
    group: int = 0
    """Rollout-group index (same task ⇒ same group)."""
    entropy: float = 0.0
    """The WM selection score H(a|h) from the rollout (``TrainConfig.entropy_score``)."""
    ref_logprobs: list[float] | None = None
    """Reference-policy log-prob of each action token (KL term), when computed."""
    is_weights: list[float] | None = None
    """Rollout-correction weight of each action token (``training.rl.correction``), when the
    correction is on; ``old_logprobs`` then hold the trained policy's log-probs."""
    sampler_logprobs: list[float] | None = None
    """The sampler's log-prob of each action token, kept when ``rollout_correction`` is
    ``sampler_clip`` (whose clip also bounds the ratio to them)."""
    value_target: float = 0.0
    """PPO only: the critic's regression target (GAE return)."""
    old_value: float = 0.0
    """PPO only: the critic's value at rollout time (value clipping)."""
    separator_len: int = 0
    """Tokens between ``a`` and ``o_next`` (the ``wm_context`` separator; never a target)."""
    leak_target: int | None = None
    """First token of ``o_next`` when the transition has one: the leak metric scores its
    probability right after the action, inside the policy's own turn."""
    extra: dict = field(default_factory=dict)
    """Free-form bookkeeping (e.g. task type) that the losses ignore."""

    def __len__(self) -> int:
        return len(self.input_ids)

    def length(self, with_obs: bool = True) -> int:
        """Tokens of ``h ⊕ a ⊕ s ⊕ o`` (``with_obs``) or of ``h ⊕ a`` only."""
        return len(self) if with_obs else self.prompt_len + self.action_len

    @property
    def obs_start(self) -> int:
        """Index of the first observation token."""
        return self.prompt_len + self.action_len + self.separator_len


def token_budget_batches(lengths: list[int], token_budget: int) -> list[list[int]]:
    """Split row indices into micro-batches whose padded size (rows × longest) ≤ ``token_budget``.

    Rows are taken longest first, so padding stays small; a row longer than the budget gets a
    micro-batch of its own. The split is deterministic.
    """
    if token_budget < 1:
        raise ValueError(f"token_budget={token_budget} must be >= 1")
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    current: list[int] = []
    for index in order:
        widest = lengths[current[0]] if current else lengths[index]
        if current and (len(current) + 1) * widest > token_budget:
            batches.append(current)
            current = []
        current.append(index)
    if current:
        batches.append(current)
    return batches


@dataclass
class MicroBatch:
    """Right-padded tensors for a list of samples."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    action_mask: torch.Tensor
    """``[B, L]`` bool: target positions of action tokens."""
    obs_mask: torch.Tensor
    """``[B, L]`` bool: target positions of observation tokens."""
    old_logprobs: torch.Tensor
    """``[B, L]`` behaviour log-probs at action positions (0 elsewhere)."""
    ref_logprobs: torch.Tensor | None
    """``[B, L]`` reference log-probs at action positions, or None."""
    advantages: torch.Tensor
    """``[B]`` per-row advantage."""
    rows: list[int]
    """Indices of these rows in the update's sample list."""
    leak_targets: torch.Tensor | None = None
    """``[B]`` first o_next token of each row (``Sample.leak_target``; −1 for none), scored
    right after the row's last action token by the leak metric."""
    leak_positions: torch.Tensor | None = None
    """``[B]`` position of each row's last action token (whose next-token distribution the
    leak metric reads)."""
    is_weights: torch.Tensor | None = None
    """``[B, L]`` rollout-correction weights at action positions (``Sample.is_weights``), or
    None when the correction is off."""
    sampler_logprobs: torch.Tensor | None = None
    """``[B, L]`` the sampler's log-probs at action positions (``Sample.sampler_logprobs``), or
    None."""


def collate(samples: list[Sample], rows: list[int], pad_id: int,
            device: torch.device | str = "cpu", with_obs: bool = True) -> MicroBatch:
    """Right-pad ``samples[rows]`` to a :class:`MicroBatch` on ``device``.

    ``with_obs=False`` leaves the observation tokens out (for passes that score only actions,
    such as the reference policy's: under the causal mask they cannot change action log-probs).
    """
    chosen = [samples[i] for i in rows]
    lengths = [s.length(with_obs) for s in chosen]
    shape = (len(chosen), max(lengths))
    input_ids = torch.full(shape, pad_id, dtype=torch.long)
    attention = torch.zeros(shape, dtype=torch.long)
    action = torch.zeros(shape, dtype=torch.bool)
    obs = torch.zeros(shape, dtype=torch.bool)
    old = torch.zeros(shape, dtype=torch.float32)
    has_ref = all(s.ref_logprobs is not None for s in chosen)
    ref = torch.zeros(shape, dtype=torch.float32) if has_ref else None
    has_weights = all(s.is_weights is not None for s in chosen)
    weights = torch.zeros(shape, dtype=torch.float32) if has_weights else None
    has_sampler = all(s.sampler_logprobs is not None for s in chosen)
    sampler = torch.zeros(shape, dtype=torch.float32) if has_sampler else None
    for r, (s, n) in enumerate(zip(chosen, lengths)):
        a0, a1 = s.prompt_len, s.prompt_len + s.action_len
        input_ids[r, :n] = torch.tensor(s.input_ids[:n], dtype=torch.long)
        attention[r, :n] = 1
        action[r, a0:a1] = True
        if with_obs:
            obs[r, s.obs_start:s.obs_start + s.obs_len] = True
        old[r, a0:a1] = torch.tensor(s.old_logprobs, dtype=torch.float32)
        if ref is not None:
            ref[r, a0:a1] = torch.tensor(s.ref_logprobs, dtype=torch.float32)
        if weights is not None:
            weights[r, a0:a1] = torch.tensor(s.is_weights, dtype=torch.float32)
        if sampler is not None:
            sampler[r, a0:a1] = torch.tensor(s.sampler_logprobs, dtype=torch.float32)
    advantages = torch.tensor([s.advantage for s in chosen], dtype=torch.float32)
    leak_targets = torch.tensor([-1 if s.leak_target is None else s.leak_target
                                 for s in chosen], dtype=torch.long)
    leak_positions = torch.tensor([s.prompt_len + s.action_len - 1 for s in chosen],
                                  dtype=torch.long)
    to = lambda t: None if t is None else t.to(device)  # noqa: E731
    return MicroBatch(to(input_ids), to(attention), to(action), to(obs), to(old), to(ref),
                      to(advantages), list(rows), to(leak_targets), to(leak_positions),
                      to(weights), to(sampler))
