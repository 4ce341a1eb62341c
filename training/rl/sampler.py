"""Where each update's rollout comes from: one interface over the four ways a run samples.

:class:`RolloutSampler` gives update ``step`` its rollout with exactly the weights the update
starts from (or, with ``async_rollouts``, weights at most ``max_staleness`` updates older):

* **sync** (the default): the training model itself samples, in this process;
* **sharded** (FSDP with HF rollouts): an unsharded copy of the model, given the current
  weights (gathered from the shards) before each rollout;
* **vLLM** (``rollout_backend: vllm``): the engine, given the current LoRA adapter (saved to
  ``<output_dir>/rollout-adapter``) or every weight before each rollout;
* **async** (``async_rollouts``): :class:`~training.rl.async_rollout.AsyncRollouts`' worker
  process, sampling ahead while earlier updates train, told each update's new weights.

Every way samples rollout ``step`` from the same :meth:`RolloutSampler.request` (its tasks,
drawn from (seed, step), and its seeds), so one seed gives the same tasks whichever way runs.
"""

from __future__ import annotations

import copy
import random
import sys
import time
from pathlib import Path
from typing import Any, Callable

from agents.types import Trajectory
from run_files.outputs import staged
from training.config import TrainConfig
from training.infra import distributed
from training.infra.seeding import seed_everything
from training.models import build_vllm_policy
from training.rl.async_rollout import (AsyncRollouts, Rollout, RolloutRequest, all_weights,
                                       available_cores, trainable_weights)

#: collect(policy, task_seeds, group_size, temperature, seed) -> trajectories grouped by task.
Collector = Callable[[Any, list[int], int, float, int], list[Trajectory]]


class RolloutSampler:
    """The rollouts of a run (module docstring). Made before the update shards the model:
    under FSDP it keeps an unsharded copy."""

    def __init__(self, config: TrainConfig, world, policy, collect: Collector):
        self.config, self.world, self.policy, self.collect = config, world, policy, collect
        self.copy = None  # FSDP with HF rollouts: the unsharded sampler
        if world.sharded and config.rollout_backend == "hf":
            self.copy = copy.copy(policy)
            self.copy.model = copy.deepcopy(policy.model).requires_grad_(False).to(
                world.compute_dtype or next(policy.model.parameters()).dtype)
        self.vllm = build_vllm_policy(config) if config.rollout_backend == "vllm" else None
        self._synced_step: int | None = None  # the update whose weights the sampler holds
        self.weight_sync_time = 0.0  # seconds of the last full-weight refresh of the sampler
        self.worker: AsyncRollouts | None = None  # async_rollouts' worker, from the 1st update
        self.ahead: list[Rollout] = []  # sampled ahead, restored from a checkpoint

    def request(self, step: int) -> RolloutRequest:
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

    def rollout(self, step: int, model) -> tuple[Rollout, float | None]:
        """Rollout ``step`` (its groups numbered globally) and, with ``async_rollouts``, the
        seconds the update waited for it (None: sampled here, now). Sets the global seeds from
        (seed, step) either way, so the update that follows draws the same numbers."""
        request = self.request(step)
        if self.config.async_rollouts:
            rollout, waited = self._worker(step, model).take(step)
            seed_everything(request.step_seed)
        else:
            waited = None
            start = time.perf_counter()
            seed_everything(request.step_seed)
            trajectories = self.collect(self.policy_for(step, model), request.task_seeds,
                                        request.group_size, request.temperature,
                                        request.sampling_seed)
            rollout = Rollout(step, step, trajectories, time.perf_counter() - start)
        for trajectory in rollout.trajectories:
            trajectory.group_index += request.group_offset
        return rollout, waited

    def _worker(self, step: int, model) -> AsyncRollouts:
        """The rollout worker, started at update ``step`` with the current weights and the
        rollouts a resumed checkpoint stored."""
        if self.worker is None:
            self.worker = AsyncRollouts(self.config, self.request)
            self.worker.start(step, all_weights(model), self.ahead)
            self.ahead = []
        return self.worker

    def policy_for(self, step: int, model):
        """The policy that samples update ``step``'s rollout (or a validation there), with
        exactly ``model``'s weights. With vLLM and LoRA, the adapter as trained so far is
        saved to ``<output_dir>/rollout-adapter`` and registered under a new id; with vLLM and
        full fine-tuning, every weight is copied into the engine, one parameter at a time
        (under FSDP gathered from the shards). Under FSDP with HF rollouts, the unsharded copy
        gets the current weights. Collective under FSDP: every rank calls this."""
        if self.copy is None and self.vllm is None:
            return self.policy
        if self._synced_step != step:
            start = time.perf_counter()
            if self.copy is not None:
                self.world.copy_full_weights(model, self.copy.model)
            elif self.config.lora:
                name = "rollout-adapter" if self.world.world_size == 1 else \
                    f"rollout-adapter-rank{self.world.rank}"
                path = Path(self.config.output_dir) / name
                with staged(path) as folder:  # recorded as the run's, replaced whole
                    model.save_pretrained(folder)
                self.vllm.load_adapter(path)
            else:
                self.vllm.load_weights((name, distributed.whole(param))
                                       for name, param in model.named_parameters())
            self.weight_sync_time = time.perf_counter() - start
            self._synced_step = step
        return self.copy if self.copy is not None else self.vllm

    def unsharded_model(self, model):
        """The unsharded model with the weights of this update's rollout (``model`` itself
        unless it is sharded)."""
        return model if self.copy is None else self.copy.model

    def after_update(self, step: int, model, rollout: Rollout, waited: float | None,
                     metrics: dict[str, Any]) -> None:
        """Tell the worker the weights of update ``step + 1`` and add the sampler's metrics:
        the async wait, staleness and overlap (:class:`~training.rl.async_rollout.Overlap`,
        with one line when async runs slower than sync would), or the full-weight refresh's
        time (included in ``rollout_time``)."""
        if waited is not None:
            self.worker.publish(step + 1, trainable_weights(model))
            metrics.update(rollout_wait_time=waited, policy_version=rollout.version,
                           staleness=rollout.staleness,
                           weight_sync_time=self.worker.weight_sync_time)
        elif self.copy is not None or (self.vllm is not None and not self.config.lora):
            metrics["weight_sync_time"] = self.world.reduce({"s": self.weight_sync_time},
                                                            "max")["s"]

    def account_overlap(self, rollout: Rollout, generated: float,
                        metrics: dict[str, Any]) -> None:
        """``async_speedup`` and ``sync_step_estimate`` into ``metrics`` (needs the update's
        ``step_time``), and the one line when async is slower than sync would be."""
        worker = self.worker
        trained = metrics["tokens_per_s"] * metrics["update_time"]
        if worker.timed_update == rollout.step:
            worker.overlap.time_update(metrics["update_time"], trained)
        metrics.update(worker.overlap.add(generated, trained, metrics["step_time"]))
        line = worker.overlap.slower_line(worker.threads, available_cores())
        if line and self.world.is_main:
            print(line, file=sys.stderr, flush=True)

    def drain(self, step: int) -> list[Rollout] | None:
        """The rollouts sampled ahead of update ``step`` (for a checkpoint), or None without a
        worker."""
        return self.worker.drain(step) if self.worker is not None else None

    def forget_weights(self) -> None:
        """After the model's weights were replaced (a rollback): every sampler takes them anew,
        and the rollouts sampled ahead (from the replaced weights) go."""
        self._synced_step = None
        self.close()

    def close(self) -> None:
        """Stop the asynchronous rollout worker, if one runs."""
        if self.worker is not None:
            self.worker.close()
            self.worker = None
