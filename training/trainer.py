"""``PaWTrainer``: the loop of a run, over parts that each do one job.

    for each update:  rollout  = sampler.rollout(step)           (training.rl.sampler)
                      metrics  = updater.run(rollout)            (training.rl.update)
                      record the transitions in the replay       (training.rl.rollout_replay)
                      validate every val_every updates           (PaWTrainer.validate)
                      watch for collapse, checkpoint             (training.run_state)

Read this file top to bottom for what a run does; each part's docstring states its contract.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch

from agents.serialization import TransitionSerializer
from agents.types import Trajectory
from run_files.outputs import claim_folder
from paw_gym.progress import Progress, is_terminal, progress_bar, quiet_outside_terminal
from training.config import TrainConfig, save_config
from training.infra import checkpoint as ckpt
from training.infra import distributed
from training.infra.metrics_log import MetricsLogger
from training.infra.plots import plot_curves
from training.infra.seeding import seed_everything
from training.models import build_policy
from training.preflight import preflight
from training.rl.async_rollout import generated_tokens
from training.rl.rollout_replay import REPLAY_DIR, drop_replay_after, record_update
from training.rl.sampler import Collector, RolloutSampler
from training.rl.update import PolicyUpdate
from training.run_state import RunState


class PaWTrainer:
    """On-policy agentic RL (GRPO / GiGPO / RLOO / PPO) with PaW world-model co-training.

    Each :meth:`train_step` samples ``n_groups`` tasks, rolls out ``group_size`` trajectories
    per task with the current policy, and updates the policy on the PaW objective
    (see :mod:`training.rl.objective`). Steps are seeded from ``(seed, step)``, so a run resumed
    from a checkpoint continues exactly as the uninterrupted run would have. Under torchrun or
    ``accelerate launch`` each process rolls out its share of the groups and the update stays
    the single-process one (see :mod:`training.infra.distributed`).

    Its parts: :attr:`sampler` (:class:`~training.rl.sampler.RolloutSampler`), :attr:`updater`
    (:class:`~training.rl.update.PolicyUpdate`: the optimizer, the schedule, the objective) and
    :attr:`run_state` (:class:`~training.run_state.RunState`: the step, checkpoints, resume,
    the collapse watch).

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
        #: The per-process memory estimate printed before the model loaded (None: a policy was
        #: given, or the model's config could not be read offline).
        self.memory_estimate = self._check_memory() if policy is None else None
        self.policy = policy if policy is not None else build_policy(
            config, device=self.world.model_device(config.device))
        self.model = self.policy.model
        self.tokenizer = self.policy.tokenizer
        self.serializer = TransitionSerializer.for_policy(self.policy, config.wm_context)
        if collect is None:
            from training.rl.collect import EnvCollector

            collect = EnvCollector(config, progress=self._phase_progress())
        self.device = next(self.model.parameters()).device
        # The sampler first: under FSDP it copies the weights the update then shards.
        self.sampler = RolloutSampler(config, self.world, self.policy, collect)
        self.updater = PolicyUpdate(config, self.world, self.policy, self.serializer,
                                    lambda: self.sampler.unsharded_model(self.model),
                                    progress=self._phase_progress())
        self.run_state = RunState(config, self.world, self.updater, self.sampler,
                                  self.tokenizer)
        self._validation_plan = None
        self._last_version = 0  # the weights version that sampled the last rollout

    @property
    def step(self) -> int:
        """Updates done (the next update is ``step + 1``); read-only: the count is
        :attr:`run_state`'s (``run_state.step``), which checkpoints save and resume."""
        return self.run_state.step

    @property
    def collect(self) -> Collector:
        """The collector rollouts come from; read-only: it is :attr:`sampler`'s
        (``sampler.collect``), the one every rollout, synchronous or ahead, goes through."""
        return self.sampler.collect

    def _check_memory(self):
        """Print the per-process memory estimate (rank 0; on a GPU, or for a model of 100 M
        parameters or more, so that tiny CPU runs stay quiet) and return it; on a GPU, refuse a
        config whose estimate exceeds the GPU's memory, before any weight is loaded."""
        from training.infra.memory import check_fits

        device = self.world.model_device(self.config.device) or (
            "cuda" if torch.cuda.is_available() else "cpu")
        capacity = (torch.cuda.get_device_properties(torch.device(device)).total_memory
                    if device.startswith("cuda") else None)
        found = check_fits(self.config, self.world.world_size, capacity)
        if found is not None and self.world.is_main and (capacity or found.parameters >= 1e8):
            print(found.line(), file=sys.stderr, flush=True)
        return found

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
            self.run_state.output = claim_folder(out, "train", config.overwrite,
                                                 writes=ckpt.train_writes(config),
                                                 resume=bool(resume))
        world.barrier()
        try:
            history = self._train(out, resume)
        except BaseException:
            if self.run_state.output is not None:  # incomplete: its checkpoints are whole
                self.run_state.output.release()
            raise
        if self.run_state.output is not None:
            self.run_state.output.finish()
        return history

    def _train(self, out: Path, resume: str | Path | bool | None) -> list[dict[str, Any]]:
        """:meth:`train` in its claimed ``out``."""
        config, world = self.config, self.world
        if resume:
            self.run_state.resume(out, resume)
            if world.is_main:
                self.run_state.announce_resume(out)
                drop_replay_after(self.run_state.output, self.step)
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
                self.run_state.collapse.observe(0, validation, episodes=0)  # the run's best so far
                if logger:
                    logger.log(0, validation)
                    bar.write(metrics_line(0, config.total_steps, validation))
            while self.step < config.total_steps:
                metrics = self.train_step()
                if config.record_replay:
                    record_update(out / REPLAY_DIR, self.updater.last_batch, self.step,
                                  self.updater.own_trajectories, world)
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
                stop = self.run_state.watch_collapse(
                    metrics, len(self.updater.last_batch.trajectories), self._last_version)
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
                    print(self.run_state.interrupt_report(out), file=sys.stderr, flush=True)
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
        policy = self.sampler.policy_for(self.step, self.model)
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

    def train_step(self) -> dict[str, Any]:
        """One rollout + update; increments :attr:`step`. With ``async_rollouts`` the rollout
        comes from the worker, sampled while earlier updates ran."""
        start = time.perf_counter()
        rollout, waited = self.sampler.rollout(self.step, self.model)
        trajectories = rollout.trajectories
        self._last_version = rollout.version
        self._log_phase(f"rollout: {len(trajectories)} episodes, "
                        f"{sum(len(t) for t in trajectories)} env steps in "
                        f"{rollout.seconds:.1f} s" + (f" (waited {waited:.1f} s, policy "
                                                      f"version {rollout.version})"
                                                      if waited is not None else ""))
        metrics = self.update(trajectories)
        self._log_phase(f"update: {metrics['transitions']} transitions, "
                        f"{metrics['optimizer_steps']} optimizer step(s) in "
                        f"{metrics['update_time']:.1f} s")
        generated = self.world.reduce({"tokens": generated_tokens(trajectories)})["tokens"]
        # The slowest rank's rollout is the one the update waits for.
        rollout_time = self.world.reduce({"time": rollout.seconds}, "max")["time"]
        metrics.update(rollout_time=rollout_time, gen_tokens_per_s=generated / max(rollout_time,
                                                                                   1e-9))
        self.sampler.after_update(self.step, self.model, rollout, waited, metrics)
        metrics["step_time"] = time.perf_counter() - start
        if waited is not None:
            self.sampler.account_overlap(rollout, generated, metrics)
        self.run_state.step += 1
        return metrics

    def update(self, trajectories: list[Trajectory]) -> dict[str, Any]:
        """Advantages and optimizer steps on one rollout (:class:`PolicyUpdate`); returns this
        update's metrics. In a multi-process run ``trajectories`` are this rank's groups
        (numbered globally); the update gathers every rank's."""
        return self.updater.run(trajectories, self.step)

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

    def save_checkpoint(self, metrics: dict[str, Any] | None = None) -> Path:
        """Write a checkpoint of this step (:meth:`RunState.save`)."""
        return self.run_state.save(metrics)

    def load_checkpoint(self, path: str | Path) -> None:
        """Restore everything from the checkpoint ``path`` (:meth:`RunState.load`)."""
        self.run_state.load(path)

    def close(self) -> None:
        """Stop the asynchronous rollout worker, if one runs (``train`` does this itself)."""
        self.sampler.close()


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
