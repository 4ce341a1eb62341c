"""``PaWTrainer``: rollout groups → advantages → PPO-clip + world-model co-training updates."""

from __future__ import annotations

import copy
import math
import os
import random
import resource
import sys
import time
import warnings
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from agents.serialization import TransitionSerializer
from agents.types import Trajectory
from paw_gym.outputs import Output, claim_folder, seal, staged, write_text_atomically
from paw_gym.progress import Progress, is_terminal, progress_bar, quiet_outside_terminal
from training.config import TrainConfig, save_config
from training.infra import checkpoint as ckpt
from training.infra.collapse import CollapseWatch
from training.infra import distributed
from training.infra.seeding import seed_everything
from training.infra.metrics_log import MetricsLogger
from training.infra.numerics import machine, mode_in_effect
from training.infra.plots import plot_curves
from training.models import (Reference, ValueModel, build_policy, build_vllm_policy,
                             trainable_parameters)
from training.preflight import preflight
from training.rl.async_rollout import (AsyncRollouts, Rollout, RolloutRequest, all_weights,
                                       available_cores, read_rollouts_ahead, rollouts_to_json,
                                       trainable_weights)
from training.rl.batch import collate, token_budget_batches
from training.rl.correction import correction_weights
from training.rl.diagnostics import gradient_shares, noisy_token_mask
from training.rl.objective import (ObjectiveSettings, PolicyScorer, gather_logprobs,
                                   micro_batch_loss, objective_weights)
from training.rl.rollout_batch import RolloutBatch, build_batch
from training.rl.value import critic_loss, critic_values
from wrappers.replay import WMReplay

#: Settings that change how a run is shown or stored, not what it computes: a resume may
#: change them without a warning.
RUN_ONLY_FIELDS = ("overwrite", "progress", "log_every", "tensorboard", "wandb",
                   "wandb_project", "record_replay")

#: The run's replay of every on-policy transition, under ``output_dir``.
REPLAY_DIR = "replay"

#: Update counters that every rank keeps identically (not summed over ranks).
RANK_INDEPENDENT_TOTALS = ("optimizer_steps", "skipped", "critic_steps")


def replay_shard(step: int, rank: int, world_size: int) -> str:
    """The replay shard of update ``step`` written by ``rank``: ``update-000012``, or
    ``update-000012-rank1`` in a multi-process run (each rank records the groups it rolled
    out)."""
    name = f"update-{step:06d}"
    return name if world_size == 1 else f"{name}-rank{rank}"


def drop_replay_after(output: Output, step: int) -> None:
    """Remove the replay shards of updates after ``step`` that the run recorded writing (a
    resumed run redoes those updates and records them again, so the replay holds every
    transition exactly once). A recorded shard changed since (by hand) is the user's: moved
    aside whole, as ``<name>.changed-<time>`` (no longer read as a shard), in one line, since
    the run appends to that name again."""
    for name in list(output.manifest["files"]):
        folder, _, shard = name.rpartition("/")
        number = shard.removeprefix("update-").split("-")[0].split(".")[0]
        if folder == REPLAY_DIR and shard.startswith("update-") and number.isdigit() and \
                int(number) > step:
            if output.remove(name) and os.path.lexists(output.folder / name):
                aside = output.set_aside(name, label="changed")
                print(f"paw-gym: {name} changed since the run wrote it, and the resumed run "
                      f"writes that update again; moved it aside to {aside} (delete it when "
                      "you wish)", file=sys.stderr, flush=True)


#: collect(policy, task_seeds, group_size, temperature, seed) -> trajectories grouped by task.
Collector = Callable[[Any, list[int], int, float, int], list[Trajectory]]


def _correction_metrics(totals: dict[str, float]) -> dict[str, float]:
    """The rollout correction's metrics from the sums of the passes that computed it (named as
    :meth:`PaWTrainer._apply_rollout_correction` names them)."""
    total = lambda key: totals.get(key, 0.0)  # noqa: E731 (absent: every pass was skipped)
    tokens, units = total("correction_tokens"), total("correction_units")
    return {"rollout_logprob_gap": total("correction_gap_sum") / tokens if tokens else 0.0,
            "rollout_logprob_gap_max": total("correction_gap_max"),
            "rollout_corrected_frac": total("correction_corrected") / units if units else 0.0,
            "rollout_weight_mean": total("correction_weight_sum") / tokens if tokens else 1.0}


class PaWTrainer:
    """On-policy agentic RL (GRPO / GiGPO / RLOO / PPO) with PaW world-model co-training.

    Each :meth:`train_step` samples ``n_groups`` tasks, rolls out ``group_size`` trajectories
    per task with the current policy, and updates the policy on the PaW objective
    (see :mod:`training.objective`). Steps are seeded from ``(seed, step)``, so a run resumed
    from a checkpoint continues exactly as the uninterrupted run would have. Under torchrun or
    ``accelerate launch`` each process rolls out its share of the groups and the update stays
    the single-process one (see :mod:`training.distributed`).

    Example:
        >>> config = load_config("configs/webshop_tiny_grpo_paw.yaml")      # doctest: +SKIP
        >>> PaWTrainer(config).train()                                      # doctest: +SKIP
    """

    def __init__(self, config: TrainConfig, policy=None, collect: Collector | None = None):
        self.config = config
        quiet_outside_terminal()  # transformers' own load/save bars in a log file
        self.world = distributed.setup(config.device, config.sharding, config.mixed_precision)
        # Mistakes surface before the model loads; output_dir is train()'s (it knows `resume`).
        preflight(config, world_size=self.world.world_size, model=policy is None, outputs=False)
        seed_everything(config.seed)
        if policy is None:
            self._check_memory()
        self.policy = policy if policy is not None else build_policy(
            config, device=self.world.model_device(config.device))
        self.model = self.policy.model
        self.tokenizer = self.policy.tokenizer
        self.serializer = TransitionSerializer.for_policy(self.policy, config.wm_context)
        if collect is None:
            from training.rl.collect import EnvCollector

            collect = EnvCollector(config, progress=self._phase_progress())
        self.collect = collect
        self.device = next(self.model.parameters()).device
        self.settings = ObjectiveSettings(
            paw=config.paw, wm_loss=config.wm_loss, rho=config.rho, clip_eps=config.clip_eps,
            clip_eps_high=config.clip_eps_high, kl_coef=config.kl_coef, rl_agg=config.rl_agg,
            action_temperature=config.temperature, entropy_coef=config.entropy_coef,
            rollout_correction=config.rollout_correction,
            rollout_correction_cap=config.rollout_correction_cap,
            rollout_correction_two_sided=config.rollout_correction_two_sided)
        if not trainable_parameters(self.model):
            raise ValueError("the model has no trainable parameters")
        # Copies of the unsharded weights, before sharding: the KL reference, PPO's critic
        # (its own decoder), and under FSDP the sampler (refreshed before every rollout, see
        # _rollout_policy).
        self.reference = Reference(self.model, config.lora, self.world.compute_dtype) \
            if config.kl_coef > 0 else None
        self.critic = ValueModel(self.model).to(self.device) if config.algo == "ppo" else None
        self.sampler = None
        if self.world.sharded and config.rollout_backend == "hf":
            self.sampler = copy.copy(self.policy)
            self.sampler.model = copy.deepcopy(self.model).requires_grad_(False).to(
                self.world.compute_dtype or next(self.model.parameters()).dtype)
        self._sampler_step: int | None = None
        self.weight_sync_time = 0.0  # seconds of the last full-weight refresh of the sampler
        # The training pass runs through this module: DDP-wrapped, or sharded with the model
        # (whose parameters FSDP replaces, so the optimizer takes them afterwards).
        self.scorer = self.world.prepare(PolicyScorer(self.model))
        self.optimizer = torch.optim.AdamW(trainable_parameters(self.model), lr=config.lr,
                                           weight_decay=config.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self._lr_factor)
        # The sampler: the training model itself, or a vLLM engine given the current adapter
        # or weights before every rollout (see _rollout_policy).
        self.vllm = build_vllm_policy(config) if config.rollout_backend == "vllm" else None
        self._vllm_synced_step: int | None = None
        self.critic_optimizer = self.critic_trainer = None
        if self.critic is not None:
            # DDP-wrapped, or sharded in place (the optimizer takes FSDP's parameters).
            self.critic_trainer = self.world.prepare(self.critic)
            self.critic_optimizer = torch.optim.AdamW(self.critic.parameters(), lr=config.critic_lr)
        self.step = 0
        self.skipped_updates = 0
        self._warned_cut_prompts = False
        self._validation_plan = None
        self._last_batch: RolloutBatch | None = None
        self._own_trajectories = range(0)  # this rank's rollout within _last_batch
        self.resumed_from: Path | None = None
        self.resumed_config: dict[str, Any] | None = None
        self.resumed_machine: dict[str, Any] | None = None
        self._async: AsyncRollouts | None = None  # async_rollouts' worker, from the 1st step
        self.output: Output | None = None  # output_dir, claimed by rank 0 in train()
        self._restored_rollouts: list[Rollout] = []  # sampled ahead, from a checkpoint
        self.collapse = CollapseWatch()
        self._last_version = 0  # the weights version that sampled the last rollout

    def _check_memory(self) -> None:
        """Print the per-process memory estimate (rank 0; on a GPU, or for a model of 100 M
        parameters or more, so that tiny CPU runs stay quiet); on a GPU, refuse a config whose
        estimate exceeds the GPU's memory, before any weight is loaded."""
        from training.infra.memory import check_fits

        device = self.world.model_device(self.config.device) or (
            "cuda" if torch.cuda.is_available() else "cpu")
        capacity = (torch.cuda.get_device_properties(torch.device(device)).total_memory
                    if device.startswith("cuda") else None)
        found = check_fits(self.config, self.world.world_size, capacity)
        if found is not None and self.world.is_main and (capacity or found.parameters >= 1e8):
            print(found.line(), file=sys.stderr, flush=True)

    # -- schedule -------------------------------------------------------------------------
    def _optimizer_steps_per_update(self) -> int:
        rollout = self.config.n_groups * self.config.group_size
        per_epoch = 1 if self.config.mini_batch_size <= 0 else \
            max(1, math.ceil(rollout / self.config.mini_batch_size))
        return per_epoch * self.config.ppo_epochs

    def _lr_factor(self, optimizer_step: int) -> float:
        warm = self.config.warmup_steps
        if warm and optimizer_step < warm:
            return (optimizer_step + 1) / warm
        if self.config.lr_schedule == "constant":
            return 1.0
        total = max(1, self.config.total_steps * self._optimizer_steps_per_update() - warm)
        progress = min(1.0, (optimizer_step - warm) / total)
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    # -- training loop ----------------------------------------------------------------------
    def train(self, resume: str | Path | bool | None = None) -> list[dict[str, Any]]:
        """Run until ``total_steps``; returns the metrics of the steps run by this call.

        ``resume``: a checkpoint directory, or True for the latest one in ``output_dir``.
        """
        config, world = self.config, self.world
        out = Path(config.output_dir)
        ckpt.check_output_dir(config, bool(resume))
        world.barrier()  # every rank has checked before rank 0 changes anything
        if world.is_main:  # with overwrite, the earlier run's recorded files go
            self.output = claim_folder(out, "train", config.overwrite,
                                       writes=ckpt.train_writes(config),
                                       resume=bool(resume))
        world.barrier()
        try:
            history = self._train(out, resume)
        except BaseException:
            if self.output is not None:  # incomplete: its checkpoints are whole, each one
                self.output.release()
            raise
        if self.output is not None:
            self.output.finish()
        return history

    def _train(self, out: Path, resume: str | Path | bool | None) -> list[dict[str, Any]]:
        """:meth:`train` in its claimed ``out``."""
        config, world = self.config, self.world
        if resume:
            self._resume(out, resume)
            if world.is_main:
                self._announce_resume(out)
                drop_replay_after(self.output, self.step)
            world.barrier()
        # Rank 0 writes the config, the logs, the curves and the checkpoints; every rank
        # writes its own replay shards.
        logger = None
        if world.is_main:
            save_config(config, out / "config.yaml")
            logger = MetricsLogger(out, tensorboard=config.tensorboard, wandb=config.wandb,
                                   wandb_project=config.wandb_project, config=asdict(config),
                                   start_step=self.step)
        history = []
        # In a log file the metrics lines say it all; a second, coarser progress line would
        # only repeat them.
        bar = progress_bar(total=config.total_steps, initial=self.step, desc="PaW training",
                           unit="update", disable=not world.is_main or not config.progress or (
                               config.log_every > 0 and not is_terminal()))
        interrupted = False
        try:
            if config.val_before_train and self.step == 0:
                validation = self.validate()
                self.collapse.observe(0, validation, episodes=0)  # the run's best so far
                if logger:
                    logger.log(0, validation)
                    bar.write(metrics_line(0, config.total_steps, validation))
            while self.step < config.total_steps:
                metrics = self.train_step()
                if config.record_replay:
                    self._record_rollout(out / REPLAY_DIR)
                if config.val_every and self.step % config.val_every == 0:
                    metrics.update(self.validate())
                history.append({"step": self.step, **metrics})
                if logger:
                    logger.log(self.step, metrics)
                    bar.update(1)
                    bar.set_postfix(reward=f"{metrics['reward']:.2f}",
                                    success=f"{metrics['success']:.2f}")
                    if config.log_every and self.step % config.log_every == 0:
                        bar.write(metrics_line(self.step, config.total_steps, metrics))
                stop = self._watch_collapse(metrics)
                if config.save_every and self.step % config.save_every == 0:
                    self.save_checkpoint(metrics)
                if stop:
                    break
            if not config.save_every or self.step % config.save_every:
                self.save_checkpoint(history[-1] if history else None)
        except KeyboardInterrupt:
            interrupted = True
            raise
        finally:
            bar.close()
            self.close()
            if logger:
                logger.close()
                if interrupted:  # the curves of the updates that ran, and how to go on
                    plot_curves(out / "metrics.jsonl", out / "curves.png")
                    print(self._interrupt_report(out), file=sys.stderr, flush=True)
        if world.is_main:
            plot_curves(out / "metrics.jsonl", out / "curves.png")
        return history

    def validate(self) -> dict[str, float]:
        """Play the validation tasks (``val_split``, ``val_limit``; the same tasks every time)
        with the current policy; ``val_*`` metrics, success-like ones as fractions. In a
        multi-process run each rank plays a contiguous block of the tasks (sampling seed
        ``seed · W + rank``) and every rank summarises all the episodes."""
        from training.evaluate import evaluate, plan_evaluation, summarize
        from training.rl.collect import prompt_kwargs

        config, world = self.config, self.world
        env_kwargs = {k: v for k, v in config.env_kwargs.items() if k != "split"}
        if self._validation_plan is None:
            self._validation_plan = plan_evaluation(
                config.env_id, split=config.val_split, limit=config.val_limit, seed=0,
                env_kwargs=env_kwargs)
        plan = self._validation_plan
        mine = distributed.group_shard(len(plan.task_seeds), world.world_size, world.rank)
        policy = self._rollout_policy()
        episodes = []
        if mine:  # fewer tasks than ranks leaves some ranks without one
            share = replace(plan, task_seeds=plan.task_seeds[mine.start:mine.stop],
                            task_options=plan.task_options[mine.start:mine.stop])
            episodes = evaluate(policy, config.env_id, share,
                                temperature=config.val_temperature,
                                max_new_tokens=config.max_new_tokens,
                                max_steps=config.max_episode_steps,
                                seed=config.seed * world.world_size + world.rank,
                                env_kwargs=env_kwargs, num_env_workers=config.num_env_workers,
                                progress=self._phase_progress(),
                                **prompt_kwargs(config)).trajectories
        result = summarize(world.gather(episodes))
        overall = result.row()
        metrics = {"val_success": overall.success / 100, "val_score": overall.score / 100,
                   "val_return": overall.mean_return, "val_episode_length": overall.mean_steps,
                   "val_invalid_frac": overall.invalid / 100, "val_episodes": overall.episodes}
        for row in result.rows[:-1]:
            metrics[f"val_success/{row.task_type}"] = row.success / 100
        if config.val_wm_replay and world.is_main:  # only rank 0 logs it
            from training.warmstart.pretrain import next_observation_accuracy

            with torch.no_grad():
                scores = next_observation_accuracy(policy, config.val_wm_replay,
                                                   config.max_seq_len, config.wm_context)
            metrics.update({f"val_wm_{key}": scores[key] / 100
                            for key in ("exact", "token", "token_kept", "token_changed")
                            if math.isfinite(scores[key])})
        return metrics

    def _record_rollout(self, folder: Path) -> None:
        """The last update's transitions into the run's replay, one shard per update
        (``update-000012.jsonl``), each with the update index, its group, the group's λ_g,
        whether PaW selected it for the world-model term, and its advantage."""
        batch = self._last_batch
        rows = iter(range(len(batch.samples)))
        replay = WMReplay(folder, shard=replay_shard(self.step, self.world.rank,
                                                     self.world.world_size),
                          keep_in_memory=False)
        try:
            for index, trajectory in enumerate(batch.trajectories):
                per_step = []
                for transition in trajectory.transitions:
                    # build_batch keeps the transitions with a response, in this order.
                    row = next(rows) if transition.output.response_ids else None
                    per_step.append({
                        "wm_selected": bool(batch.selected[row]) if row is not None else False,
                        "advantage": batch.samples[row].advantage if row is not None else 0.0})
                if index not in self._own_trajectories:  # another rank records it
                    continue
                replay.extend(trajectory.to_records(
                    f"update-{self.step:06d}-episode-{index:04d}", per_step, source="train",
                    update=self.step, group=trajectory.group_index,
                    lambda_g=float(batch.group_lambda.get(trajectory.group_index, 0.0))))
        finally:
            replay.close()
        if self.world.world_size > 1:  # the other ranks' shards, recorded once written
            self.world.barrier()
            if self.world.is_main:
                for rank in range(self.world.world_size):
                    seal(folder / f"{replay_shard(self.step, rank, self.world.world_size)}.jsonl")

    def _announce_resume(self, out: Path) -> None:
        """Say where the run continues, and warn (keeping the old ``config.yaml``) when the
        given settings differ from those the checkpoint was trained with."""
        config = self.config
        print(f"resuming {out} from {self.resumed_from.name}: step {self.step} of "
              f"{config.total_steps}", file=sys.stderr, flush=True)
        saved_mode = (self.resumed_machine or {}).get("numerics")
        if isinstance(saved_mode, str) and saved_mode != mode_in_effect():
            print(f"warning: {self.resumed_from.name} was computed in {saved_mode!r} numerics "
                  f"mode and this run computes in {mode_in_effect()!r} (PAW_GYM_NUMERICS): it "
                  "continues, but its numbers from here are not those the run would have "
                  f"made in {saved_mode!r}", file=sys.stderr, flush=True)
        recorded = self.resumed_config or {}
        current = asdict(config)
        changed = {k: (recorded[k], current[k]) for k in sorted(current)
                   if k in recorded and recorded[k] != current[k] and k not in RUN_ONLY_FIELDS}
        if not changed:
            return
        kept = out / f"config.before-step-{self.step:06d}.yaml"
        if (out / "config.yaml").is_file() and not kept.exists():
            write_text_atomically(kept, (out / "config.yaml").read_text(encoding="utf-8"))
        listing = ", ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in changed.items())
        warnings.warn(f"--resume with settings that differ from the checkpoint's ({listing}); "
                      f"the run continues with the new ones, and the previous config.yaml is "
                      f"kept as {kept.name}", RuntimeWarning, stacklevel=4)

    def _interrupt_report(self, out: Path) -> str:
        """What an interrupted run has on disk and how to continue it."""
        saved = ckpt.checkpoints_newest_first(out)
        if not saved:
            return (f"interrupted at step {self.step}: no checkpoint was saved yet (save_every="
                    f"{self.config.save_every}); metrics and curves are in {out}")
        return (f"interrupted at step {self.step}; the last checkpoint is {saved[0]}; metrics "
                f"and curves are in {out}.\nContinue with: paw-gym train --config "
                f"{out / 'config.yaml'} --resume")

    def train_step(self) -> dict[str, Any]:
        """One rollout + update; increments :attr:`step`. With ``async_rollouts`` the rollout
        comes from the worker, sampled while earlier updates ran."""
        config, world = self.config, self.world
        request = self._rollout_request(self.step)
        start = time.perf_counter()
        waited = None
        if config.async_rollouts:
            rollout, waited = self._async_rollouts().take(self.step)
            seed_everything(request.step_seed)
        else:
            seed_everything(request.step_seed)
            trajectories = self.collect(self._rollout_policy(), request.task_seeds,
                                        request.group_size, request.temperature,
                                        request.sampling_seed)
            rollout = Rollout(self.step, self.step, trajectories, time.perf_counter() - start)
        trajectories = rollout.trajectories
        self._last_version = rollout.version
        for trajectory in trajectories:
            trajectory.group_index += request.group_offset
        self._log_phase(f"rollout: {len(trajectories)} episodes, "
                        f"{sum(len(t) for t in trajectories)} env steps in "
                        f"{rollout.seconds:.1f} s" + (f" (waited {waited:.1f} s, policy "
                                                      f"version {rollout.version})"
                                                      if waited is not None else ""))
        metrics = self.update(trajectories)
        self._log_phase(f"update: {metrics['transitions']} transitions, "
                        f"{metrics['optimizer_steps']} optimizer step(s) in "
                        f"{metrics['update_time']:.1f} s")
        generated = sum(len(s.output.response_ids) for t in trajectories for s in t.transitions)
        generated = world.reduce({"tokens": generated})["tokens"]
        # The slowest rank's rollout is the one the update waits for.
        rollout_time = world.reduce({"time": rollout.seconds}, "max")["time"]
        metrics.update(rollout_time=rollout_time, gen_tokens_per_s=generated / max(rollout_time,
                                                                                   1e-9))
        if waited is not None:
            self._async.publish(self.step + 1, trainable_weights(self.model))
            metrics.update(rollout_wait_time=waited, policy_version=rollout.version,
                           staleness=rollout.staleness,
                           weight_sync_time=self._async.weight_sync_time)
        elif self.sampler is not None or (self.vllm is not None and not self.config.lora):
            # the full-weight refresh, included in rollout_time
            metrics["weight_sync_time"] = world.reduce({"s": self.weight_sync_time}, "max")["s"]
        metrics["step_time"] = time.perf_counter() - start
        if waited is not None:
            self._account_overlap(rollout, generated, metrics)
        self.step += 1
        return metrics

    def _account_overlap(self, rollout: Rollout, generated: float,
                         metrics: dict[str, Any]) -> None:
        """``async_speedup`` and ``sync_step_estimate`` into ``metrics``
        (:class:`training.rl.async_rollout.Overlap`), and the one line when async is slower
        than the synchronous trainer would be."""
        source = self._async
        metrics.update(source.overlap.add(
            rollout.step == source.timed_alone, rollout.seconds,
            generated, metrics["update_time"], metrics["tokens_per_s"] * metrics["update_time"],
            metrics["step_time"]))
        line = source.overlap.slower_line(source.threads, available_cores())
        if line and self.world.is_main:
            print(line, file=sys.stderr, flush=True)

    def _rollout_request(self, step: int) -> RolloutRequest:
        """This rank's rollout of update ``step``: its tasks (``rollout_groups`` seeds drawn
        from (seed, step), this rank's contiguous share) and seeds, the same whether it is
        sampled here or by the asynchronous worker."""
        config, world = self.config, self.world
        step_seed = config.seed * 1_000_003 + step
        rng = random.Random(step_seed)
        task_seeds = [rng.randrange(config.train_task_seeds) for _ in range(config.rollout_groups)]
        mine = distributed.group_shard(config.rollout_groups, world.world_size, world.rank)
        # Each rank samples with its own seed (= step_seed in a world of one).
        return RolloutRequest(step, task_seeds[mine.start:mine.stop],
                              1 if config.algo == "ppo" else config.group_size,
                              config.temperature, step_seed * world.world_size + world.rank,
                              step_seed, group_offset=mine.start)

    def _async_rollouts(self) -> AsyncRollouts:
        """The rollout worker, started at the current update with the current weights and the
        rollouts a resumed checkpoint stored."""
        if self._async is None:
            self._async = AsyncRollouts(self.config, self._rollout_request)
            self._async.start(self.step, all_weights(self.model), self._restored_rollouts)
            self._restored_rollouts = []
        return self._async

    def close(self) -> None:
        """Stop the asynchronous rollout worker, if one runs (``train`` does this itself)."""
        if self._async is not None:
            self._async.close()
            self._async = None

    def _phase_progress(self) -> Progress:
        """Progress within a phase (rollout, update, validation), on rank 0 unless ``progress``
        is off: a bar in a terminal; in a log, which gets a line per phase, only a line after
        each 15 s without one, so that no phase is silent for longer."""
        if not (self.config.progress and self.world.is_main):
            return False
        return True if is_terminal() else "heartbeat"

    def _log_phase(self, text: str) -> None:
        """Outside a terminal (a log file), one line per phase of an update that prints its
        metrics (``log_every``), so that a long update shows where it is."""
        config = self.config
        if (config.progress and self.world.is_main and not is_terminal() and config.log_every
                and (self.step + 1) % config.log_every == 0):
            print(f"step {self.step + 1}/{config.total_steps} {text}", file=sys.stderr,
                  flush=True)

    def _rollout_policy(self):
        """The policy that samples this step's rollout, with exactly the weights the update
        will start from. With vLLM and LoRA, the adapter as trained so far is saved to
        ``<output_dir>/rollout-adapter`` and registered under a new id; with vLLM and full
        fine-tuning, every weight is copied into the engine, one parameter at a time (under
        FSDP gathered from the shards). Under FSDP with HF rollouts, the unsharded sampler
        gets the current weights. Collective under FSDP: every rank calls this."""
        if self.sampler is not None:
            if self._sampler_step != self.step:
                start = time.perf_counter()
                self.world.copy_full_weights(self.model, self.sampler.model)
                self.weight_sync_time = time.perf_counter() - start
                self._sampler_step = self.step
            return self.sampler
        if self.vllm is None:
            return self.policy
        if self._vllm_synced_step != self.step:
            start = time.perf_counter()
            if self.config.lora:
                name = "rollout-adapter" if self.world.world_size == 1 else \
                    f"rollout-adapter-rank{self.world.rank}"
                path = Path(self.config.output_dir) / name
                with staged(path) as folder:  # recorded as the run's, replaced whole
                    self.model.save_pretrained(folder)
                self.vllm.load_adapter(path)
            else:
                self.vllm.load_weights((name, distributed.whole(param))
                                       for name, param in self.model.named_parameters())
            self.weight_sync_time = time.perf_counter() - start
            self._vllm_synced_step = self.step
        return self.vllm

    def update(self, trajectories: list[Trajectory]) -> dict[str, Any]:
        """Advantages and optimizer steps on one rollout; returns this update's metrics.

        In a multi-process run ``trajectories`` are this rank's groups (numbered globally);
        the update gathers every rank's and optimises the objective of all of them."""
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
        self._last_batch = batch
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
                RuntimeWarning, stacklevel=2)
        if self.reference is not None:
            self._attach_reference_logprobs(batch)
        n = len(batch.samples)
        size = n if config.mini_batch_size <= 0 else config.mini_batch_size
        # One optimizer step on the whole rollout: π_old is the step's own forward pass, which
        # computes the correction itself (training.rl.objective.micro_batch_loss).
        one_step = config.ppo_epochs == 1 and size >= n
        in_pass = config.rollout_correction != "none" and one_step
        correction = (self._apply_rollout_correction(batch)
                      if config.rollout_correction != "none" and not one_step else {})
        # Measured on the weights that sampled the rollout, before this update changes them.
        noise = self._noise_gradient_shares(batch) if config.noise_gradient_metric else {}
        totals: dict[str, float] = {}
        order_rng = torch.Generator().manual_seed(config.seed * 7919 + self.step)
        norms = []
        bar = progress_bar(total=config.ppo_epochs * math.ceil(n / size), desc="update",
                           unit="mini-batch", leave=False, progress=self._phase_progress())
        for _ in range(config.ppo_epochs):
            order = torch.randperm(n, generator=order_rng).tolist()
            for begin in range(0, n, size):
                bar.update(1)
                rows = order[begin:begin + size]
                norm = self._optimize(batch, rows, totals)
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
        if in_pass:  # every rank knows it from the config: the max-reduce runs on all or none
            largest = {k: v for k, v in totals.items() if k.endswith("_max")}
            totals.update(self.world.reduce(largest, "max"))
            correction = _correction_metrics(totals)
        update_time = time.perf_counter() - start - waited
        return {**self._metrics(batch, totals, norms, update_time), **noise, **correction}

    def _gather_rollout(self, trajectories: list[Trajectory], values: list[list[float]] | None
                        ) -> tuple[list[Trajectory], list[list[float]] | None]:
        """Every rank's trajectories (and critic values), in rank order, on every rank."""
        parts = self.world.gather([(trajectories, values)])
        start = sum(len(part[0]) for part in parts[:self.world.rank])
        self._own_trajectories = range(start, start + len(trajectories))
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

    # -- pieces of an update ------------------------------------------------------------------
    def _micro_batches(self, batch: RolloutBatch, rows: list[int],
                       with_obs: bool = True) -> list[list[int]]:
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
        parts = self._micro_batches(batch, mine, with_obs=False)
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
    def _noise_gradient_shares(self, batch: RolloutBatch) -> dict[str, float]:
        """Appendix A.4 over this update's WM targets (rows carrying observation tokens)."""
        rows = [i for i, s in enumerate(batch.samples) if s.obs_len]
        probabilities, noisy = [], []
        for micro in self._micro_batches(batch, self._own_rows(batch, rows)):
            mb = collate(batch.samples, micro, self.policy.pad_id, self.device)
            logprobs = gather_logprobs(self._sampler_model(), mb, score_obs=True,
                                       action_temperature=self.settings.action_temperature,
                                       chunk_size=self.config.logits_chunk).logprobs
            for r, i in enumerate(micro):
                s = batch.samples[i]
                start = s.obs_start
                probabilities += logprobs[r, start:start + s.obs_len].exp().tolist()
                noisy += noisy_token_mask([self.tokenizer.decode([token]) for token
                                           in s.input_ids[start:start + s.obs_len]])
        parts = self.world.gather([(probabilities, noisy)])
        probabilities = [p for part in parts for p in part[0]]
        noisy = [flag for part in parts for flag in part[1]]
        if not probabilities:
            return {}
        shares = gradient_shares(probabilities, noisy, self.config.rho)
        return {**{f"wm_noise_share_{loss}": share for loss, share in shares.items()},
                "wm_noise_token_frac": float(np.mean(noisy))}

    def _sampler_model(self):
        """The unsharded model with the weights of this step's rollout (the training model
        itself unless it is sharded)."""
        return self.model if self.sampler is None else self.sampler.model

    @torch.no_grad()
    def _apply_rollout_correction(self, batch: RolloutBatch) -> dict[str, float]:
        """For an update of several optimizer steps (one step computes it in its own pass):
        score every action token with the weights the update starts from (π_old), weight it
        by ``rollout_correction`` against the rollout's own log-probs (μ), and take the PPO
        ratio against π_old from here on (``training.rl.correction``). Returns the
        correction's metrics for this update."""
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
            if config.rollout_correction == "sampler_clip":  # its clip also bounds π_θ / μ
                s.sampler_logprobs = s.old_logprobs
            s.old_logprobs = scored[i]
            s.is_weights = result.weights[i, :s.action_len].tolist()
        return {"rollout_logprob_gap": result.gap_mean, "rollout_logprob_gap_max": result.gap_max,
                "rollout_corrected_frac": result.corrected_frac,
                "rollout_weight_mean": result.weight_mean}

    def _optimize(self, batch: RolloutBatch, rows: list[int], totals: dict[str, float]):
        """Accumulate gradients over the micro-batches of ``rows``; one guarded optimizer step.

        The weights come from the whole mini-batch; each rank runs its share of the rows with
        its loss scaled by the world size, so DDP's gradient average is the whole gradient."""
        samples = [batch.samples[i] for i in rows]
        w_rl, w_wm = objective_weights(samples, batch.selected[rows], batch.group_lambda,
                                       self.settings)
        position = {row: k for k, row in enumerate(rows)}
        mine, idle = self._share(batch, rows)
        scale = 0.0 if idle else float(self.world.world_size)
        finite = True
        passes = self.world.equal_passes(self._micro_batches(batch, mine))
        for k, (micro, extra) in enumerate(passes):
            mb = collate(batch.samples, micro, self.policy.pad_id, self.device)
            local = [position[i] for i in micro]
            # Only the last backward of the step all-reduces the accumulated gradients.
            with self.world.no_sync(self.scorer, sync=k == len(passes) - 1):
                loss, stats = micro_batch_loss(self.scorer, mb, w_rl[local], w_wm[local],
                                               self.settings, self.config.logits_chunk)
                (loss * (0.0 if extra else scale)).backward()
            if extra:
                continue
            finite = finite and bool(torch.isfinite(loss))
            if idle or not finite:
                continue
            stats["train_tokens"] = float(mb.attention_mask.sum())
            for key, value in stats.items():
                totals[key] = (max(totals.get(key, value), value) if key.endswith("_max")
                               else totals.get(key, 0.0) + value)
        finite = self.world.all_true(finite)
        params = trainable_parameters(self.model)
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

    def _optimize_critic(self, batch: RolloutBatch, rows: list[int], totals: dict[str, float]):
        """One critic step on the mean value loss of ``rows``, shared over ranks like
        :meth:`_optimize`."""
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
            "advantage_abs_mean": float(np.mean([abs(s.advantage) for s in batch.samples])),
            "zero_advantage_groups": batch.zero_advantage_groups,
            "transitions": len(batch.samples),
            "cut_prompts": batch.cut_prompts,
            "grad_norm": float(np.mean(norms)) if norms else float("nan"),
            "lr": self.scheduler.get_last_lr()[0],
            "optimizer_steps": int(totals.get("optimizer_steps", 0)),
            "skipped_updates": int(totals.get("skipped", 0)),
        }
        # The slowest rank's time and the largest rank's memory.
        slowest = self.world.reduce({"update_time": update_time,
                                     "peak_mem_mb": _peak_memory_mb(self.device)}, "max")
        metrics.update(slowest, tokens_per_s=totals.get("train_tokens", 0.0) /
                       max(slowest["update_time"], 1e-9))
        if self.critic is not None:
            metrics["value_loss"] = per("value_loss_sum", totals.get("critic_steps", 0.0))
        return metrics

    # -- checkpoints --------------------------------------------------------------------------
    def save_checkpoint(self, metrics: dict[str, Any] | None = None) -> Path:
        """Rank 0 writes the weights, optimizers and state (under FSDP every rank also writes
        its shards); every rank its RNG state. Written into a hidden folder beside the
        checkpoint, which rank 0 records (with each weight file's sha256) and renames into
        place when complete (:meth:`paw_gym.outputs.Output.staged`). A failed write (a full
        disk) is a ``CheckpointWriteError``, and the partial checkpoint goes. ``metrics``: the
        last update's, which score the checkpoint for the best one
        (:mod:`training.infra.collapse`), kept from pruning."""
        from safetensors import SafetensorError

        out = Path(self.config.output_dir)
        path = ckpt.checkpoint_dir(out, self.step)
        if metrics is not None:
            self.collapse.note_checkpoint(self.step, str(path), metrics)
        try:
            if self.world.is_main:
                if self.output is None:  # called outside train(): the run's folder, as it is
                    self.output = claim_folder(out, "train", False,
                                               writes=ckpt.train_writes(self.config),
                                               resume=True)
                relative = path.relative_to(out).as_posix()
                foreign = self.output.not_ours(relative) if path.is_dir() else []
                if foreign:  # a damaged earlier save of this step (or a user's file in it)
                    aside = ckpt.set_aside(self.output, path)
                    print(f"paw-gym: {path} held what paw-gym cannot prove it wrote ("
                          f"{', '.join(foreign[:4])}); moved it aside whole to {aside} (delete "
                          "it when you wish) before saving this step again", file=sys.stderr,
                          flush=True)
                with self.output.staged(relative) as staging:
                    self._write_checkpoint(staging)
                ckpt.prune(self.output, self.config.keep_checkpoints,
                           also=self.collapse.protected())
            else:
                self._write_checkpoint(path.with_name(f".{path.name}.partial"))
            self.world.barrier()  # renamed before any rank goes on
            return path
        except (OSError, SafetensorError) as error:  # safetensors' own I/O error
            earlier = ckpt.latest_intact_checkpoint(self.config.output_dir)
            after = (f"the latest intact checkpoint is {earlier.name}, which --resume takes"
                     if earlier else "no intact checkpoint is left")
            reason = getattr(error, "strerror", None) or error
            raise ckpt.CheckpointWriteError(f"could not write checkpoint {path} ({reason}); "
                                            f"removed the partial one; {after}") from None

    def _write_checkpoint(self, path: Path) -> None:
        """Every rank's part of a checkpoint, into the staging folder ``path`` (made by rank 0)."""
        from safetensors.torch import save_file

        world = self.world
        world.barrier()  # rank 0 has made the folder
        if world.sharded:  # each rank its shards; the whole weights gathered on rank 0
            world.save_sharded(self.model, self.optimizer, path / "sharded")
            model_state = world.full_weights(self.model)
            if self.critic is not None:  # only resume reads the critic: its shards suffice
                world.save_sharded(self.critic, self.critic_optimizer, path / "critic-sharded")
        if world.is_main:  # (DDP: the ranks' weights and optimizer states are identical)
            if world.sharded:  # a plain HF folder, for paw-gym eval and HFPolicy
                self.model.save_pretrained(str(path / "model"), state_dict=model_state,
                                           safe_serialization=True)
            else:
                ckpt.save_model(self.model, path / "model")
                ckpt.save_optimizer(self.optimizer, path / "optimizer")
            self.tokenizer.save_pretrained(str(path / "model"))  # the model dir loads on its own
            if self.critic is not None and not world.sharded:
                save_file({k: v.contiguous() for k, v in self.critic.state_dict().items()},
                          str(path / "critic.safetensors"))
                ckpt.save_optimizer(self.critic_optimizer, path / "critic_optimizer")
        ahead = self._async.drain(self.step) if self._async is not None else None
        if ahead is not None:  # async_rollouts (one process): what the next updates train on
            (path / AHEAD_FILE).write_text(rollouts_to_json(ahead), encoding="utf-8")
        tensors, rng_meta = ckpt.rng_state()
        save_file(tensors, str(path / ckpt.rng_file(world.rank)))
        rng_states = world.gather([rng_meta])
        world.barrier()
        if world.is_main:
            state = {"step": self.step, "skipped_updates": self.skipped_updates,
                     "scheduler": self.scheduler.state_dict(), "rng": rng_states[0],
                     "world_size": world.world_size, "rank_rng": rng_states[1:],
                     "config": asdict(self.config), "collapse": self.collapse.state(),
                     "machine": machine()}
            if ahead is not None:
                state["rollouts_ahead"] = {"max_staleness": self.config.max_staleness,
                                           "steps": [rollout.step for rollout in ahead]}
            # state.json last: a checkpoint without it is incomplete.
            ckpt.write_json_atomically(path / "state.json", state)
        world.barrier()

    def _resume(self, out: Path, resume: str | Path | bool) -> None:
        """Load the given checkpoint, or (``resume=True``) the newest intact one in ``out``: a
        damaged newer checkpoint (a kill while it was written, a bad disk) is moved aside whole
        (:func:`training.infra.checkpoint.set_aside`: the run writes that step again), and a
        warning names the damage and the step the run really continues from."""
        if resume is not True:
            self.load_checkpoint(resume)
            return
        candidates = ckpt.checkpoints_newest_first(out)
        if not candidates:
            raise FileNotFoundError(f"--resume: no checkpoint under {out / 'checkpoints'}")
        damaged: list[tuple[Path, Exception]] = []
        taken = None
        for path in candidates:
            try:
                self.load_checkpoint(path)
            except ckpt.CheckpointError as error:
                damaged.append((path, error))
                continue
            taken = path
            break
        if taken is None:  # left where they are: nothing to continue, nothing written
            raise ckpt.CheckpointError(f"--resume: no intact checkpoint under {out}; the "
                                       f"oldest: {damaged[-1][1]}")
        self.world.barrier()  # every rank has read them before rank 0 moves them
        if self.world.is_main:
            for path, error in damaged:
                aside = ckpt.set_aside(self.output, path)
                warnings.warn(f"{error}; moved {path.name} aside whole to {aside} (delete it "
                              f"when you wish); resuming from {taken.name} instead",
                              RuntimeWarning, stacklevel=4)
        self.world.barrier()

    def load_checkpoint(self, path: str | Path) -> None:
        """Restore everything from ``path`` (checked first: a damaged file is a
        ``CheckpointError`` naming it, raised before anything is loaded)."""
        path = Path(path)
        state = ckpt.verify_checkpoint(path)
        ckpt.check_same_weights(path, state.get("config") or {}, self.config)
        self._load_weights(path)
        self.scheduler.load_state_dict(state["scheduler"])
        self._set_learning_rates()
        self._restored_rollouts = self._rollouts_ahead(path, state)
        self._restore_rng(path, state)
        self.step = int(state["step"])
        self.skipped_updates = int(state.get("skipped_updates", 0))
        self.collapse = CollapseWatch.from_state(state.get("collapse", {}))
        self.resumed_from, self.resumed_config = path, state.get("config")
        self.resumed_machine = state.get("machine") if isinstance(state.get("machine"), dict) \
            else None

    def _load_weights(self, path: Path) -> None:
        """The weights and optimizer state (and the critic's) of the checkpoint ``path``."""
        from safetensors.torch import load_file

        if self.world.sharded:
            shards = [(self.model, self.optimizer, path / "sharded")]
            if self.critic is not None:
                shards.append((self.critic, self.critic_optimizer, path / "critic-sharded"))
            for module, optimizer, folder in shards:
                try:
                    self.world.load_sharded(module, optimizer, folder)
                except Exception as error:  # noqa: BLE001  (DCP reports damage in many ways)
                    reason = f"{type(error).__name__}: {str(error)[:200]}"
                    raise ckpt.CheckpointError(f"{folder} is damaged or incomplete "
                                               f"({reason})") from None
        else:
            ckpt.load_trainable_weights(self.model, path / "model")
            ckpt.load_optimizer(self.optimizer, path / "optimizer")
            if self.critic is not None:
                self.critic.load_state_dict(load_file(str(path / "critic.safetensors")))
                ckpt.load_optimizer(self.critic_optimizer, path / "critic_optimizer")

    def _set_learning_rates(self) -> None:
        """The config's learning rates at the schedule's current step: after a checkpoint's
        optimizer and scheduler state, which hold the rates they were saved with (a resume may
        change ``lr``; a rollback's checkpoint is from an earlier step)."""
        self.scheduler.base_lrs = [self.config.lr] * len(self.optimizer.param_groups)
        for group in self.optimizer.param_groups:
            group["initial_lr"] = self.config.lr
            group["lr"] = self.config.lr * self._lr_factor(self.scheduler.last_epoch)
        self.scheduler._last_lr = [group["lr"] for group in self.optimizer.param_groups]
        for group in (self.critic_optimizer.param_groups if self.critic_optimizer else []):
            group["lr"] = self.config.critic_lr

    def _watch_collapse(self, metrics: dict[str, Any]) -> bool:
        """Whether the update just done collapsed the run (:mod:`training.infra.collapse`):
        then one line says so and names the best checkpoint, and ``on_collapse`` acts. True
        when the run stops."""
        episodes = len(self._last_batch.trajectories)
        if not self.collapse.observe(self.step, metrics, episodes, self.config.collapse_patience,
                                     self._last_version):
            return False
        action = self.config.on_collapse
        if self.world.is_main:
            print(self.collapse.line(episodes, action, self.config.save_every), file=sys.stderr,
                  flush=True)
        best = self.collapse.best_checkpoint
        if action == "rollback" and best is not None:
            try:
                ckpt.verify_checkpoint(Path(best))
            except ckpt.CheckpointError as error:  # left as it is: nothing re-creates it
                if self.world.is_main:
                    print(f"cannot roll back: {error}; the run stops instead (on_collapse: "
                          "rollback, its best checkpoint damaged)", file=sys.stderr, flush=True)
                return True
            self._load_weights(Path(best))
            self._set_learning_rates()
            self.collapse.restart()
            self._sampler_step = self._vllm_synced_step = None  # samplers take the weights
            self.close()  # the rollouts sampled ahead came from the collapsed weights
        return action == "stop"

    def _rollouts_ahead(self, path: Path, state: dict[str, Any]) -> list[Rollout]:
        """The rollouts an asynchronous run had sampled ahead when it saved ``path``: queued
        for their updates when this run samples asynchronously with the same staleness (so it
        continues exactly as the uninterrupted run), else dropped with a warning."""
        ahead = state.get("rollouts_ahead")
        if ahead is None:
            return []
        if not (self.config.async_rollouts
                and self.config.max_staleness == ahead["max_staleness"]):
            warnings.warn(f"{path} holds {len(ahead['steps'])} rollout(s) sampled ahead with "
                          f"max_staleness={ahead['max_staleness']}; this run (async_rollouts="
                          f"{self.config.async_rollouts}, max_staleness="
                          f"{self.config.max_staleness}) samples them anew, so it does not "
                          f"continue exactly as the interrupted run would have",
                          RuntimeWarning, stacklevel=4)
            return []
        try:
            rollouts = read_rollouts_ahead(path / AHEAD_FILE)
        except (OSError, ValueError) as error:  # ValueError: paw_gym.data_files' file:line
            raise ckpt.CheckpointError(f"{path / AHEAD_FILE} is missing or damaged "
                                       f"({error})") from None
        if [rollout.step for rollout in rollouts] != ahead["steps"]:
            raise ckpt.CheckpointError(f"{path / AHEAD_FILE} holds other rollouts than "
                                       f"state.json lists ({ahead['steps']})")
        return rollouts

    def _restore_rng(self, path: Path, state: dict[str, Any]) -> None:
        """This rank's RNG state as saved; a rank the checkpoint's run did not have (it ran
        with fewer processes) keeps its seeded state, with a warning."""
        from safetensors.torch import load_file

        rank = self.world.rank
        metas = [state["rng"], *state.get("rank_rng", [])]
        if rank >= len(metas):
            warnings.warn(f"{path} was saved by {len(metas)} process(es); rank {rank} has no "
                          f"RNG state there and keeps its seeded one (every update reseeds "
                          f"from (seed, step) anyway)", RuntimeWarning, stacklevel=3)
            return
        ckpt.restore_rng(load_file(str(path / ckpt.rng_file(rank))), metas[rank])


#: A checkpoint's rollouts sampled ahead by the asynchronous worker (``async_rollouts``).
AHEAD_FILE = "rollouts-ahead.json"


def _peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


#: Metrics shown by :func:`metrics_line`, with their label and whether they are fractions
#: (shown in %).
LINE_METRICS = (("reward", "reward", False), ("success", "success", True),
                ("invalid_frac", "invalid", True), ("policy_loss", "pg_loss", False),
                ("wm_loss", "wm_loss", False), ("wm_leak", "leak", True),
                ("action_entropy", "entropy", False),
                ("val_success", "val_success", True), ("update_time", "update_s", False))


def metrics_line(step: int, total: int, metrics: dict[str, Any]) -> str:
    """One readable line of an update's main metrics (the ones it has)."""
    parts = [f"step {step}/{total}"]
    for key, label, percent in LINE_METRICS:
        value = metrics.get(key)
        if isinstance(value, (int, float)):
            parts.append(f"{label} {100 * value:.1f} %" if percent else f"{label} {value:.3g}")
    return " | ".join(parts)
