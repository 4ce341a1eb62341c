"""The models and the steps of the three world-model methods: the trainable policy, sampled
predictions, and one loss step of ``sft`` / ``cmae`` (:func:`target_loss_step`) or ``rwml``
(:func:`rwml_step`).

**Methods** (:class:`WorldModelConfig.method`):

* ``rwml``: GRPO. Per prompt q, K answers y_1..y_K at temperature 1, rewards r_k = r(ŝ_k, s),
  advantages A_k = (r_k − mean r) / (std r + ε) (``training.rl.advantages.grpo``), and the loss

      L = mean_q (1 / Σ_k |y_k|) Σ_k Σ_i [ max(−A_k ρ_ki, −A_k clip(ρ_ki, 1−ε, 1+ε))
                                            + β · k3(π_θ, π_ref)_ki ]

  with ρ_ki the ratio of the token's probability now and at sampling (one update per batch,
  as the paper's mini-batch = batch) and k3 = exp(Δ) − Δ − 1, Δ = log π_ref − log π_θ, π_ref =
  the model with its LoRA adapters disabled, or a frozen copy (``training.rl.objective``). A group
  whose K rewards are equal has zero advantage: no signal (logged as ``nonuniform_groups``).
* ``sft`` (RWML's "WM SFT" baseline): cross-entropy on the target answer
  ``<think></think><observation>s</observation><eos>`` (:func:`target_answer`), mean over its
  tokens, mean over the batch.
* ``cmae``: the PaW world-model term alone, offline, without RL: PaW's clipped MAE
  ℓ = Σ_i 1[p_i ≤ ρ] (1 − p_i) / |o| (``training.rl.losses.wm_token_loss``) on the o_next tokens
  of the transition in the PaW term's serialisation chat(h) ⊕ a ⊕ s ⊕ o_next
  (``wm_context``, :mod:`agents.serialization`), not in the prompt format of
  :mod:`training.world_model.data`: it trains the policy's own world model, which
  :func:`training.warmstart.pretrain.next_observation_accuracy` reads.
"""

from __future__ import annotations

from typing import Any, Sequence

from training.world_model.config import WorldModelConfig
from training.world_model.data import (OBSERVATION_OPEN, OBSERVATION_STOP, WMExample,
                                       parse_prediction, target_answer, wm_prompt)
from training.world_model.rewards import Reward, score


def sample_predictions(policy, examples: Sequence[WMExample], samples: int, *,
                       temperature: float, max_new_tokens: int, seed: int,
                       batch_prompts: int = 8) -> list[list[Any]]:
    """``samples`` answers (``PolicyOutput``) per example, stopping at ``</observation>``."""
    outputs: list[list[Any]] = []
    for start in range(0, len(examples), batch_prompts):
        chunk = examples[start:start + batch_prompts]
        prompts = [wm_prompt(e.h, e.a) for e in chunk for _ in range(samples)]
        flat = policy.act(prompts, temperature=temperature, max_new_tokens=max_new_tokens,
                          stop=(OBSERVATION_STOP,), seed=seed + start)
        outputs.extend(flat[i * samples:(i + 1) * samples] for i in range(len(chunk)))
    return outputs


def load_trainable_policy(config: WorldModelConfig):
    """An ``HFPolicy`` on the configured weights, as training starts them
    (:func:`training.models.start_weights`: the ``init_checkpoint`` adapter, a fresh LoRA
    adapter, or every weight)."""
    from training.models import trainable_policy

    policy = trainable_policy(config, device=config.device, seed=config.seed,
                              max_context=config.max_seq_len)
    policy.model.eval()  # no dropout: sampling and training passes must agree
    return policy


def make_optimizer(model, lr: float):
    import torch

    return torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)


def target_rows(policy, examples: Sequence[WMExample], max_seq_len: int) -> list:
    """``training.rl.batch.Sample`` rows chat(prompt) ⊕ target answer ⊕ <eos>, the answer tokens
    marked as observation tokens (the prompt is cut from the left to fit)."""
    from training.rl.batch import Sample

    rows = []
    eos = policy.eos_ids[0]
    for example in examples:
        prompt_ids, _ = policy.encode_prompt(wm_prompt(example.h, example.a), max_new_tokens=1)
        answer_ids = policy.tokenizer(target_answer(example.o_next),
                                      add_special_tokens=False)["input_ids"] + [eos]
        answer_ids = answer_ids[:max_seq_len - 1]
        prompt_ids = prompt_ids[-(max_seq_len - len(answer_ids)):]
        rows.append(Sample(prompt_ids + answer_ids, len(prompt_ids), 0, len(answer_ids), []))
    return rows


def transition_rows(policy, examples: Sequence[WMExample], max_seq_len: int,
                    wm_context: str) -> list:
    """``training.rl.batch.Sample`` rows of the transitions in the PaW term's serialisation
    chat(h) ⊕ a ⊕ s ⊕ o_next, the o_next tokens marked as observation tokens."""
    from agents.serialization import TransitionSerializer
    from training.rl.batch import Sample

    serializer = TransitionSerializer.for_policy(policy, wm_context)
    rows = []
    for example in examples:
        row = serializer.encode(policy, example.h, example.a, example.o_next, max_seq_len)
        rows.append(Sample(row.ids, row.prompt_len, row.action_len, row.obs_len,
                           [0.0] * row.action_len, separator_len=row.separator_len))
    return rows


def target_loss_step(policy, optimizer, examples: Sequence[WMExample],
                     config: WorldModelConfig) -> dict[str, float]:
    """One optimizer step of ``sft`` (cross-entropy on the target answers) or ``cmae`` (on the
    o_next tokens of the serialised transitions); the loss is the mean over examples of the
    per-example token loss."""
    import torch

    from training.rl.batch import collate, token_budget_batches
    from training.rl.losses import clipped_token_fraction, wm_token_loss
    from training.rl.objective import gather_logprobs

    kind = "ce" if config.method == "sft" else "cmae"
    rows = target_rows(policy, examples, config.max_seq_len) if config.method == "sft" else \
        transition_rows(policy, examples, config.max_seq_len, config.wm_context)
    device = next(policy.model.parameters()).device
    optimizer.zero_grad(set_to_none=True)
    loss_sum = clipped = tokens = 0.0
    for chunk in token_budget_batches([len(r) for r in rows], config.token_budget):
        batch = collate(rows, chunk, policy.pad_id, device)
        logprobs = gather_logprobs(policy.model, batch, score_obs=True).logprobs
        per_row = wm_token_loss(logprobs, batch.obs_mask, kind=kind, rho=config.rho)
        (per_row.sum() / len(rows)).backward()
        loss_sum += float(per_row.detach().sum())
        n_tokens = float(batch.obs_mask.sum())
        clipped += float(clipped_token_fraction(logprobs, batch.obs_mask, config.rho)) * n_tokens
        tokens += n_tokens
    params = [p for p in policy.model.parameters() if p.requires_grad]
    grad_norm = torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
    optimizer.step()
    return {"wm_loss": loss_sum / len(rows), "wm_clipped_frac": clipped / max(1.0, tokens),
            "grad_norm": float(grad_norm)}


def rwml_step(policy, optimizer, reference, examples: Sequence[WMExample], reward: Reward,
              config: WorldModelConfig, seed: int) -> dict[str, float]:
    """One GRPO step on ``examples``: sample K answers each, reward them, one PPO-clip + k3 KL
    update (``training.rl.objective.micro_batch_loss`` with the world-model term off)."""
    import torch

    from training.rl.advantages import grpo
    from training.rl.batch import Sample, collate, token_budget_batches
    from training.infra.paw_settings import PaWSettings
    from training.rl.objective import (ObjectiveSettings, gather_logprobs, micro_batch_loss,
                                       objective_weights)

    k = config.group_size
    groups = sample_predictions(policy, examples, k, temperature=config.temperature,
                                max_new_tokens=config.max_new_tokens, seed=seed,
                                batch_prompts=len(examples))
    outputs = [o for group in groups for o in group]
    predictions = [parse_prediction(o.text) for o in outputs]
    targets = [e.o_next for e in examples for _ in range(k)]
    rewards = torch.tensor(score(reward, predictions, targets))
    group_ids = [i // k for i in range(len(outputs))]
    advantages = grpo(rewards, group_ids)
    samples = [Sample(list(o.prompt_ids) + list(o.response_ids), len(o.prompt_ids),
                      len(o.response_ids), 0, list(o.logprobs), advantage=float(adv), group=g)
               for o, adv, g in zip(outputs, advantages, group_ids) if o.response_ids]
    settings = ObjectiveSettings(world_model=PaWSettings(paw=False), clip_eps=config.clip_eps,
                                 kl_coef=config.kl_coef, action_temperature=config.temperature)
    device = next(policy.model.parameters()).device
    batches = token_budget_batches([len(s) for s in samples], config.token_budget)
    if config.kl_coef > 0:
        with torch.no_grad(), reference.active() as reference_model:
            for chunk in batches:
                batch = collate(samples, chunk, policy.pad_id, device, with_obs=False)
                logprobs = gather_logprobs(reference_model, batch, score_obs=False,
                                           action_temperature=config.temperature).logprobs
                for row, index in enumerate(chunk):
                    s = samples[index]
                    s.ref_logprobs = logprobs[row, s.prompt_len:s.prompt_len + s.action_len
                                              ].tolist()
    w_rl, w_wm = objective_weights(samples, torch.zeros(len(samples), dtype=torch.bool), {},
                                   settings)
    optimizer.zero_grad(set_to_none=True)
    totals: dict[str, float] = {}
    for chunk in batches:
        batch = collate(samples, chunk, policy.pad_id, device, with_obs=False)
        loss, stats = micro_batch_loss(policy.model, batch, w_rl[chunk], w_wm[chunk], settings)
        loss.backward()
        for key, value in stats.items():
            totals[key] = totals.get(key, 0.0) + value
    params = [p for p in policy.model.parameters() if p.requires_grad]
    grad_norm = torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
    optimizer.step()
    grouped = rewards.view(len(examples), k)
    tokens = max(1.0, totals.get("action_tokens", 0.0))
    return {"reward": float(rewards.mean()),
            "nonuniform_groups": float((grouped.max(1).values > grouped.min(1).values
                                        ).float().mean()),
            "tag_frac": sum(bool(OBSERVATION_OPEN.search(o.text)) for o in outputs) / len(outputs),
            "answer_tokens": sum(len(o.response_ids) for o in outputs) / len(outputs),
            "policy_loss": totals.get("rl_loss", 0.0),
            "clip_frac": totals.get("clipped_tokens", 0.0) / tokens,
            "kl": totals.get("kl_sum", 0.0) / tokens,
            "grad_norm": float(grad_norm)}


