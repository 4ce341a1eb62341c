"""One PaW update: a rollout's trajectories → the batch → the objective's optimizer steps.

:class:`PolicyUpdate` owns what an update changes: the optimizer and its learning-rate
schedule, the training pass (:class:`~training.rl.objective.PolicyScorer`, DDP-wrapped or
sharded), the KL reference, PPO's critic and its optimizer. Its contract:

* :meth:`PolicyUpdate.run` takes this rank's trajectories (groups numbered globally), gathers
  every rank's, builds the :class:`~training.rl.rollout_batch.RolloutBatch` (advantages, λ_g,
  the entropy selection), and minimises the objective of :mod:`training.rl.objective` over
  ``ppo_epochs`` passes of ``mini_batch_size`` rows, one guarded optimizer step per mini-batch
  (a non-finite gradient skips the step: weights and optimizer state stay as they were).
* The rollout correction (:mod:`training.rl.correction`) is decided once per update, in
  :meth:`PolicyUpdate.correction_plan`: none; in the pass (one optimizer step on the whole
  rollout: π_old is that pass's own weights, so no scoring pass); or scored before the update
  (several steps: π_old scored with the weights the update starts from, the weights carried in
  the batch's samples).
* In a multi-process run each rank computes its share of the rows, token-balanced, with its
  loss scaled by the world size, so that DDP's gradient average is the single-process
  gradient; every rank returns the same metrics.

The learning-rate schedule is linear warm-up then constant or cosine over the run's optimizer
steps (:meth:`PolicyUpdate.lr_factor`).
"""

from __future__ import annotations

import math
import time
import warnings
from typing import Any, Callable

import numpy as np
import torch

from agents.serialization import TransitionSerializer
from agents.types import Trajectory
from paw_gym.progress import Progress, progress_bar
from training.config import TrainConfig
from training.infra import distributed
from training.models import Reference, ValueModel, trainable_parameters
from training.rl.batch import collate, token_budget_batches
from training.rl.correction import correction_weights, ratio_bound
from training.rl.diagnostics import gradient_shares, noisy_token_mask
from training.rl.objective import (ObjectiveSettings, PolicyScorer, gather_logprobs,
                                   micro_batch_loss, objective_weights)
from training.rl.rollout_batch import RolloutBatch, build_batch
from training.rl.value import critic_loss, critic_values

#: Update totals that every rank keeps identically (not summed over ranks): counters, and the
#: term gradients' figures (read from the all-reduced gradient).
RANK_INDEPENDENT_TOTALS = ("optimizer_steps", "skipped", "critic_steps", "term_grad_steps",
                           "grad_norm_rl_sum", "grad_norm_wm_sum", "grad_cos_rl_wm_sum")


def objective_settings(config: TrainConfig) -> ObjectiveSettings:
    """The objective's settings from a run's config (its world-model settings are the config's
    own :class:`~training.infra.paw_settings.PaWSettings` fields)."""
    return ObjectiveSettings(
        world_model=config, clip_eps=config.clip_eps,
        clip_eps_high=config.clip_eps_high, kl_coef=config.kl_coef, rl_agg=config.rl_agg,
        action_temperature=config.temperature, entropy_coef=config.entropy_coef,
        rollout_correction=config.rollout_correction,
        rollout_correction_cap=config.rollout_correction_cap,
        rollout_correction_two_sided=config.rollout_correction_two_sided)


def correction_metrics(totals: dict[str, float]) -> dict[str, float]:
    """The rollout correction's metrics (named as :meth:`PolicyUpdate.score_correction` names
    them) from the sums of the passes that computed it in the pass
    (``training.rl.objective._correction_sums``)."""
    total = lambda key: totals.get(key, 0.0)  # noqa: E731 (absent: every pass was skipped)
    tokens, units = total("correction_tokens"), total("correction_units")
    return {"rollout_logprob_gap": total("correction_gap_sum") / tokens if tokens else 0.0,
            "rollout_logprob_gap_max": total("correction_gap_max"),
            "rollout_corrected_frac": total("correction_corrected") / units if units else 0.0,
            "rollout_weight_mean": total("correction_weight_sum") / tokens if tokens else 1.0}


def peak_memory_mb(device: torch.device) -> float:
    """The process's peak memory: allocated on a GPU, resident on the CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


class PolicyUpdate:
    """The update of a run (module docstring), made after every copy of the unsharded weights
    was taken (the sampler's under FSDP), since it shards the model. ``sampler_model``: the
    unsharded model with the weights that sampled the current rollout (the noise-gradient
    diagnostic reads it); ``progress``: how the mini-batch bar shows
    (:class:`paw_gym.progress.Progress`)."""

    def __init__(self, config: TrainConfig, world, policy, serializer: TransitionSerializer,
                 sampler_model: Callable[[], torch.nn.Module], progress: Progress = False):
        self.config, self.world, self.policy = config, world, policy
        self.model = policy.model
        self.serializer = serializer
        self.sampler_model = sampler_model
        self.progress = progress
        self.device = next(self.model.parameters()).device
        self.settings = objective_settings(config)
        if not trainable_parameters(self.model):
            raise ValueError("the model has no trainable parameters")
        # Copies of the unsharded weights, before sharding: the KL reference and PPO's critic
        # (its own decoder).
        self.reference = Reference(self.model, config.lora, world.compute_dtype) \
            if config.kl_coef > 0 else None
        self.critic = ValueModel(self.model).to(self.device) if config.algo == "ppo" else None
        # The training pass runs through this module: DDP-wrapped, or sharded with the model
        # (whose parameters FSDP replaces, so the optimizer takes them afterwards).
        self.scorer = world.prepare(PolicyScorer(self.model))
        self.optimizer = torch.optim.AdamW(trainable_parameters(self.model), lr=config.lr,
                                           weight_decay=config.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self.lr_factor)
        self.critic_optimizer = self.critic_trainer = None
        if self.critic is not None:  # DDP-wrapped, or sharded in place (as the scorer)
            self.critic_trainer = world.prepare(self.critic)
            self.critic_optimizer = torch.optim.AdamW(self.critic.parameters(),
                                                      lr=config.critic_lr)
        self.skipped_updates = 0
        self.last_batch: RolloutBatch | None = None
        self.own_trajectories = range(0)  # this rank's rollout within last_batch
        self._warned_cut_prompts = False

    # -- schedule -----------------------------------------------------------------------------
    def optimizer_steps_per_update(self) -> int:
        rollout = self.config.n_groups * self.config.group_size
        per_epoch = 1 if self.config.mini_batch_size <= 0 else \
            max(1, math.ceil(rollout / self.config.mini_batch_size))
        return per_epoch * self.config.ppo_epochs

    def lr_factor(self, optimizer_step: int) -> float:
        warm = self.config.warmup_steps
        if warm and optimizer_step < warm:
            return (optimizer_step + 1) / warm
        if self.config.lr_schedule == "constant":
            return 1.0
        total = max(1, self.config.total_steps * self.optimizer_steps_per_update() - warm)
        progress = min(1.0, (optimizer_step - warm) / total)
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    def set_learning_rates(self) -> None:
        """The config's learning rates at the schedule's current step: after a checkpoint's
        optimizer and scheduler state, which hold the rates they were saved with (a resume may
        change ``lr``; a rollback's checkpoint is from an earlier step)."""
        self.scheduler.base_lrs = [self.config.lr] * len(self.optimizer.param_groups)
        for group in self.optimizer.param_groups:
            group["initial_lr"] = self.config.lr
            group["lr"] = self.config.lr * self.lr_factor(self.scheduler.last_epoch)
        self.scheduler._last_lr = [group["lr"] for group in self.optimizer.param_groups]
        for group in (self.critic_optimizer.param_groups if self.critic_optimizer else []):
            group["lr"] = self.config.critic_lr

    # -- the update ---------------------------------------------------------------------------
    def correction_plan(self, rows: int) -> str:
        """How this update corrects for the sampler (decided here only): ``none``, ``in_pass``
        (one optimizer step on all ``rows``: the pass computes π_old itself) or ``scored``
        (several steps: π_old scored before the first)."""
        config = self.config
        if config.rollout_correction == "none":
            return "none"
        size = rows if config.mini_batch_size <= 0 else config.mini_batch_size
        return "in_pass" if config.ppo_epochs == 1 and size >= rows else "scored"

    def run(self, trajectories: list[Trajectory], step: int) -> dict[str, Any]:
        """Advantages and optimizer steps on one rollout (update ``step``, from 0); returns this
        update's metrics."""
        config = self.config
        start = time.perf_counter()
        values = (critic_values(self.critic, trajectories, config, self.policy.pad_id,
                                self.device, self.world)
                  if self.critic is not None else None)
        # The gather waits for the slowest rank's rollout: that time is rollout time.
        gather_start = time.perf_counter()
        trajectories, values = self._gather_rollout(trajectories, values)
        waited = time.perf_counter() - gather_start
        batch = build_batch(trajectories, self.serializer, config, values)
        self.last_batch = batch
        if not batch.samples:
            raise RuntimeError("the rollout produced no transition with a non-empty response")
        if batch.cut_prompts and not self._warned_cut_prompts and self.world.is_main:
            self._warned_cut_prompts = True
            longest = max(len(t.output.prompt_ids) + len(t.output.response_ids)
                          for trajectory in trajectories for t in trajectory.transitions)
            warnings.warn(
                f"{batch.cut_prompts} of {len(batch.samples)} transitions had their prompt cut "
                f"from the left to fit max_seq_len={config.max_seq_len}, so their PPO ratios "
                f"compare the policy on a shorter context than the one that sampled the action. "
                f"Set max_seq_len >= {longest} (the longest prompt + response of this rollout). "
                f"Warned once; the metric 'cut_prompts' counts them at every update.",
                RuntimeWarning, stacklevel=3)
        if self.reference is not None:
            self._attach_reference_logprobs(batch)
        n = len(batch.samples)
        size = n if config.mini_batch_size <= 0 else config.mini_batch_size
        plan = self.correction_plan(n)
        correction = self.score_correction(batch) if plan == "scored" else {}
        # Measured on the weights that sampled the rollout, before this update changes them.
        noise = self.noise_gradient_shares(batch) if config.noise_gradient_metric else {}
        totals: dict[str, float] = {}
        order_rng = torch.Generator().manual_seed(config.seed * 7919 + step)
        norms = []
        bar = progress_bar(total=config.ppo_epochs * math.ceil(n / size), desc="update",
                           unit="mini-batch", leave=False, progress=self.progress)
        for _ in range(config.ppo_epochs):
            order = torch.randperm(n, generator=order_rng).tolist()
            for begin in range(0, n, size):
                bar.update(1)
                rows = order[begin:begin + size]
                norm = self.optimize(batch, rows, totals, plan == "in_pass")
                if "rollout_gap_sum" not in totals:  # first mini-batch: still the sampler's weights
                    totals["rollout_gap_sum"] = totals.get("logprob_gap_sum", 0.0)
                    totals["rollout_gap_tokens"] = totals.get("action_tokens", 0.0)
                if norm is not None:
                    norms.append(norm)
                if self.critic is not None:
                    self._optimize_critic(batch, rows, totals)
        bar.close()
        summed = self.world.reduce({k: v for k, v in totals.items()
                                    if k not in RANK_INDEPENDENT_TOTALS and not k.endswith("_max")})
        totals = {**totals, **summed}
        if plan == "in_pass":  # every rank knows it from the config: the max-reduce runs on all
            largest = {k: v for k, v in totals.items() if k.endswith("_max")}
            totals.update(self.world.reduce(largest, "max"))
            correction = correction_metrics(totals)
        update_time = time.perf_counter() - start - waited
        return {**self._metrics(batch, totals, norms, update_time), **noise, **correction}

    def _gather_rollout(self, trajectories: list[Trajectory], values: list[list[float]] | None
                        ) -> tuple[list[Trajectory], list[list[float]] | None]:
        """Every rank's trajectories (and critic values), in rank order, on every rank."""
        parts = self.world.gather([(trajectories, values)])
        start = sum(len(part[0]) for part in parts[:self.world.rank])
        self.own_trajectories = range(start, start + len(trajectories))
        if len(parts) == 1:
            return trajectories, values
        gathered = [t for part in parts for t in part[0]]
        return gathered, (None if values is None else [v for part in parts for v in part[1]])

    def _own_rows(self, batch: RolloutBatch, rows: list[int], with_obs: bool = True
                  ) -> list[int]:
        """This rank's share of ``rows`` (balanced by tokens); empty when there are fewer
        rows than ranks."""
        return distributed.balance_rows(rows, [batch.samples[i].length(with_obs) for i in rows],
                                        self.world.world_size)[self.world.rank]

    def _share(self, batch: RolloutBatch, rows: list[int], with_obs: bool = True
               ) -> tuple[list[int], bool]:
        """This rank's rows for a gradient pass, and whether it has none: then it gets
        ``rows[:1]`` to run with zero weight, so that it still joins the all-reduce."""
        share = self._own_rows(batch, rows, with_obs)
        return (share, False) if share else (rows[:1], True)

    def micro_batches(self, batch: RolloutBatch, rows: list[int],
                      with_obs: bool = True) -> list[list[int]]:
        """``rows`` split into micro-batches of at most ``token_budget`` tokens each."""
        lengths = [batch.samples[i].length(with_obs) for i in rows]
        parts = token_budget_batches(lengths, self.config.token_budget)
        return [[rows[i] for i in part] for part in parts]

    @torch.no_grad()
    def _attach_reference_logprobs(self, batch: RolloutBatch) -> None:
        with self.reference.active() as reference:
            scored = self._action_logprobs(batch, lambda mb: gather_logprobs(
                reference, mb, score_obs=False,
                action_temperature=self.settings.action_temperature,
                chunk_size=self.config.logits_chunk).logprobs)
        for i, logprobs in scored.items():
            batch.samples[i].ref_logprobs = logprobs

    @torch.no_grad()
    def _action_logprobs(self, batch: RolloutBatch, score, collective: bool = False
                         ) -> dict[int, list[float]]:
        """Every sample's action-token log-probs under ``score`` (a micro-batch -> its
        ``[B, L]`` log-probs). Action tokens only, so the rows go without their observations.
        Each rank scores its share of the rows and the results are gathered on every rank; with
        ``collective`` (FSDP's passes are) every rank joins each pass, one with no rows of its
        own included."""
        samples = batch.samples
        mine = self._own_rows(batch, list(range(len(samples))), with_obs=False)
        parts = self.micro_batches(batch, mine, with_obs=False)
        passes = self.world.equal_passes(parts or [[0]]) if collective else \
            [(part, False) for part in parts]
        scored = {}
        for micro, extra in passes:
            logprobs = score(collate(samples, micro, self.policy.pad_id, self.device,
                                     with_obs=False))
            if extra or not mine:
                continue
            for r, i in enumerate(micro):
                s = samples[i]
                scored[i] = logprobs[r, s.prompt_len:s.prompt_len + s.action_len].tolist()
        for part in self.world.gather([scored]):
            scored.update(part)
        return scored

    @torch.no_grad()
    def noise_gradient_shares(self, batch: RolloutBatch) -> dict[str, float]:
        """Appendix A.4 over this update's WM targets (rows carrying observation tokens)."""
        rows = [i for i, s in enumerate(batch.samples) if s.obs_len]
        probabilities, noisy = [], []
        tokenizer = self.policy.tokenizer
        for micro in self.micro_batches(batch, self._own_rows(batch, rows)):
            mb = collate(batch.samples, micro, self.policy.pad_id, self.device)
            logprobs = gather_logprobs(self.sampler_model(), mb, score_obs=True,
                                       action_temperature=self.settings.action_temperature,
                                       chunk_size=self.config.logits_chunk).logprobs
            for r, i in enumerate(micro):
                s = batch.samples[i]
                start = s.obs_start
                probabilities += logprobs[r, start:start + s.obs_len].exp().tolist()
                noisy += noisy_token_mask([tokenizer.decode([token]) for token
                                           in s.input_ids[start:start + s.obs_len]])
        parts = self.world.gather([(probabilities, noisy)])
        probabilities = [p for part in parts for p in part[0]]
        noisy = [flag for part in parts for flag in part[1]]
        if not probabilities:
            return {}
        shares = gradient_shares(probabilities, noisy, self.config.rho)
        return {**{f"wm_noise_share_{loss}": share for loss, share in shares.items()},
                "wm_noise_token_frac": float(np.mean(noisy))}

    @torch.no_grad()
    def score_correction(self, batch: RolloutBatch) -> dict[str, float]:
        """The ``scored`` correction (:meth:`correction_plan`): score every action token with
        the weights the update starts from (π_old), weight it by ``rollout_correction``
        against the rollout's own log-probs (μ), and take the PPO ratio against π_old from
        here on (``training.rl.correction``). Returns the correction's metrics."""
        config, samples = self.config, batch.samples
        scored = self._action_logprobs(batch, lambda mb: self.scorer(
            mb, score_obs=False, action_temperature=self.settings.action_temperature,
            chunk_size=config.logits_chunk).logprobs, collective=True)
        width = max(s.action_len for s in samples)
        pad = lambda rows: torch.tensor([row + [0.0] * (width - len(row))  # noqa: E731
                                         for row in rows], dtype=torch.float64)
        result = correction_weights(
            pad([scored[i] for i in range(len(samples))]), pad([s.old_logprobs for s in samples]),
            pad([[1.0] * s.action_len for s in samples]).bool(), config.rollout_correction,
            config.rollout_correction_cap, config.rollout_correction_two_sided)
        for i, s in enumerate(samples):
            s.sampler_logprobs = ratio_bound(config.rollout_correction, s.old_logprobs)
            s.old_logprobs = scored[i]
            s.is_weights = result.weights[i, :s.action_len].tolist()
        return {"rollout_logprob_gap": result.gap_mean, "rollout_logprob_gap_max": result.gap_max,
                "rollout_corrected_frac": result.corrected_frac,
                "rollout_weight_mean": result.weight_mean}

    def optimize(self, batch: RolloutBatch, rows: list[int], totals: dict[str, float],
                 correct_in_pass: bool = False) -> float | None:
        """Accumulate gradients over the micro-batches of ``rows``; one guarded optimizer step.
        Returns the gradient norm, or None when the step was skipped (non-finite).

        The weights come from the whole mini-batch; each rank runs its share of the rows with
        its loss scaled by the world size, so DDP's gradient average is the whole gradient."""
        samples = [batch.samples[i] for i in rows]
        w_rl, w_wm = objective_weights(samples, batch.selected[rows], batch.group_lambda,
                                       self.settings)
        finite = self.world.all_true(
            self._backward(batch, rows, w_rl, w_wm, totals, correct_in_pass))
        params = trainable_parameters(self.model)
        if finite and self.config.term_gradient_metric:
            for key, value in self.term_gradients(batch, rows, w_wm, params,
                                                  correct_in_pass).items():
                totals[key] = totals.get(key, 0.0) + value
        # FSDP's norm is a DTensor of the global norm.
        norm = distributed.whole(torch.nn.utils.clip_grad_norm_(
            params, self.config.max_grad_norm)) if finite else None
        if not finite or not torch.isfinite(norm):
            # Skip the step: the weights and the optimizer state stay exactly as they were.
            self.optimizer.zero_grad(set_to_none=True)
            self.skipped_updates += 1
            totals["skipped"] = totals.get("skipped", 0.0) + 1
            return None
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        totals["optimizer_steps"] = totals.get("optimizer_steps", 0.0) + 1
        return float(norm)

    def _backward(self, batch: RolloutBatch, rows: list[int], w_rl: torch.Tensor,
                  w_wm: torch.Tensor, totals: dict[str, float] | None,
                  correct_in_pass: bool) -> bool:
        """Backward passes of the objective over this rank's micro-batches of ``rows``
        (``w_rl``/``w_wm``: the rows' weights, in ``rows``' order), gradients accumulating
        in the parameters; the pass statistics are added to ``totals`` (None: not kept).
        Returns whether every loss of this rank was finite."""
        position = {row: k for k, row in enumerate(rows)}
        mine, idle = self._share(batch, rows)
        scale = 0.0 if idle else float(self.world.world_size)
        finite = True
        passes = self.world.equal_passes(self.micro_batches(batch, mine))
        for k, (micro, extra) in enumerate(passes):
            mb = collate(batch.samples, micro, self.policy.pad_id, self.device)
            local = [position[i] for i in micro]
            # Only the last backward of the step all-reduces the accumulated gradients.
            with self.world.no_sync(self.scorer, sync=k == len(passes) - 1):
                loss, stats = micro_batch_loss(self.scorer, mb, w_rl[local], w_wm[local],
                                               self.settings, self.config.logits_chunk,
                                               correct_in_pass=correct_in_pass)
                (loss * (0.0 if extra else scale)).backward()
            if extra:
                continue
            finite = finite and bool(torch.isfinite(loss))
            if idle or not finite or totals is None:
                continue
            stats["train_tokens"] = float(mb.attention_mask.sum())
            stats["train_positions"] = float(mb.attention_mask.numel())  # padding included
            for key, value in stats.items():
                totals[key] = (max(totals.get(key, value), value) if key.endswith("_max")
                               else totals.get(key, 0.0) + value)
        return finite

    def term_gradients(self, batch: RolloutBatch, rows: list[int], w_wm: torch.Tensor,
                       params: list[torch.nn.Parameter], correct_in_pass: bool
                       ) -> dict[str, float]:
        """``term_gradient_metric``: how the accumulated gradient g of ``rows`` (in the
        parameters' ``.grad``, before clipping) splits into the world-model term's g_wm (a
        second backward pass with w_rl = 0: the next-observation loss alone) and the rest,
        g_rl = g − g_wm (the clipped policy-gradient loss with its KL and entropy terms).
        Returns sums over this optimizer step for ``totals``: ‖g_rl‖, ‖g_wm‖ and cos(g_rl,
        g_wm). ``.grad`` is g again afterwards, so the optimizer step is the one it would have
        been without the measurement."""
        whole = [p.grad for p in params]  # a parameter without a gradient keeps None
        for p in params:
            p.grad = None
        self._backward(batch, rows, torch.zeros_like(w_wm), w_wm, None, correct_in_pass)
        zero = lambda p: torch.zeros_like(p, dtype=torch.float64)  # noqa: E731
        wm = [zero(p) if p.grad is None else p.grad.double() for p in params]
        for p, g in zip(params, whole):
            p.grad = g
        rl = [(zero(p) if g is None else g.double()) - g_wm
              for p, g, g_wm in zip(params, whole, wm)]
        norm_rl = math.sqrt(sum(float(g.square().sum()) for g in rl))
        norm_wm = math.sqrt(sum(float(g.square().sum()) for g in wm))
        dot = sum(float((a * b).sum()) for a, b in zip(rl, wm))
        return {"term_grad_steps": 1.0, "grad_norm_rl_sum": norm_rl, "grad_norm_wm_sum": norm_wm,
                "grad_cos_rl_wm_sum": dot / (norm_rl * norm_wm) if norm_rl and norm_wm
                else 0.0}

    def _optimize_critic(self, batch: RolloutBatch, rows: list[int], totals: dict[str, float]):
        """One critic step on the mean value loss of ``rows``, shared over ranks like
        :meth:`optimize`."""
        mine, idle = self._share(batch, rows, with_obs=False)
        scale = 0.0 if idle else float(self.world.world_size)
        parts = token_budget_batches([batch.samples[i].prompt_len for i in mine],
                                     self.config.token_budget)
        passes = self.world.equal_passes(parts)
        total = 0.0
        for k, (part, extra) in enumerate(passes):
            with self.world.no_sync(self.critic_trainer, sync=k == len(passes) - 1):
                loss = critic_loss(self.critic_trainer, [batch.samples[mine[j]] for j in part],
                                   self.policy.pad_id, self.device) / len(rows)
                (loss * (0.0 if extra else scale)).backward()
            total += 0.0 if idle or extra else float(loss.detach())
        if not self.world.all_true(math.isfinite(total)):
            self.critic_optimizer.zero_grad(set_to_none=True)
            return
        torch.nn.utils.clip_grad_norm_(self.critic.parameters(), self.config.max_grad_norm)
        self.critic_optimizer.step()
        self.critic_optimizer.zero_grad(set_to_none=True)
        totals["value_loss_sum"] = totals.get("value_loss_sum", 0.0) + total
        totals["critic_steps"] = totals.get("critic_steps", 0.0) + 1

    def _metrics(self, batch: RolloutBatch, totals: dict[str, float], norms: list[float],
                 update_time: float) -> dict[str, Any]:
        trajectories = batch.trajectories
        transitions = [s for t in trajectories for s in t.transitions]
        n_steps = max(1.0, totals.get("optimizer_steps", 0.0) + totals.get("skipped", 0.0))
        per = lambda key, by: totals.get(key, 0.0) / by if by else 0.0  # noqa: E731
        lambdas = list(batch.group_lambda.values())
        metrics = {
            "reward": float(np.mean([t.total_reward for t in trajectories])),
            "success": float(np.mean([t.won for t in trajectories])),
            "episode_length": float(np.mean([len(t) for t in trajectories])),
            "invalid_frac": float(np.mean([s.invalid_action for s in transitions]))
            if transitions else 0.0,
            "policy_loss": totals.get("rl_loss", 0.0) / n_steps,
            "clip_frac": per("clipped_tokens", totals.get("action_tokens", 0.0)),
            "kl": per("kl_sum", totals.get("action_tokens", 0.0)),
            "rollout_logprob_gap": per("rollout_gap_sum", totals.get("rollout_gap_tokens", 0.0)),
            "action_entropy": per("entropy_sum", totals.get("action_tokens", 0.0)),
            "lambda_mean": float(np.mean(lambdas)) if lambdas else 0.0,
            "lambda_max": float(np.max(lambdas)) if lambdas else 0.0,
            "wm_leak": per("leak_prob_sum", totals.get("leak_rows", 0.0)),
            "wm_loss": per("wm_loss_sum", totals.get("wm_rows", 0.0)),
            "wm_term": totals.get("wm_term", 0.0) / n_steps,
            "wm_clipped_frac": per("obs_clipped_tokens", totals.get("obs_tokens", 0.0)),
            "wm_selected": int(batch.selected.sum()),
            # How much the PaW term actually trains on: the share of the update's transitions
            # with a WM weight (selected, in a group with λ_g > 0), and the observation tokens
            # that get a gradient per pass over the rollout (CMAE leaves out p > ρ).
            "wm_trained_frac": float(np.mean([
                bool(batch.selected[i]) and batch.group_lambda.get(s.group, 0.0) > 0
                for i, s in enumerate(batch.samples)])) if batch.samples else 0.0,
            "wm_active_tokens": (totals.get("obs_tokens", 0.0) - (
                totals.get("obs_clipped_tokens", 0.0) if self.config.wm_loss == "cmae" else 0.0)
            ) / self.config.ppo_epochs,
            # Padded positions the update's passes ran over, of all it ran over (rows are
            # right-padded to their micro-batch's longest: work that trains nothing).
            "pad_frac": 1.0 - per("train_tokens", totals.get("train_positions", 0.0))
            if totals.get("train_positions") else 0.0,
            "advantage_abs_mean": float(np.mean([abs(s.advantage) for s in batch.samples])),
            "zero_advantage_groups": batch.zero_advantage_groups,
            "transitions": len(batch.samples),
            "cut_prompts": batch.cut_prompts,
            "grad_norm": float(np.mean(norms)) if norms else float("nan"),
            **({name: per(f"{name}_sum", totals["term_grad_steps"])
                for name in ("grad_norm_rl", "grad_norm_wm", "grad_cos_rl_wm")}
               if totals.get("term_grad_steps") else {}),
            "lr": self.scheduler.get_last_lr()[0],
            "optimizer_steps": int(totals.get("optimizer_steps", 0)),
            "skipped_updates": int(totals.get("skipped", 0)),
        }
        # The slowest rank's time and the largest rank's memory.
        slowest = self.world.reduce({"update_time": update_time,
                                     "peak_mem_mb": peak_memory_mb(self.device)}, "max")
        metrics.update(slowest, tokens_per_s=totals.get("train_tokens", 0.0) /
                       max(slowest["update_time"], 1e-9))
        if self.critic is not None:
            metrics["value_loss"] = per("value_loss_sum", totals.get("critic_steps", 0.0))
        return metrics
