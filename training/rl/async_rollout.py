"""Asynchronous rollouts: a worker process samples the next rollouts while the trainer updates.

Schedule. Update s trains on rollout s. With ``max_staleness`` k, rollout s is sampled by the
policy version

    v(s) = max(v_0, s − k)

where version v is the weights after v updates and v_0 is the update the worker started at (0
for a new run). The trainer publishes version v as soon as update v − 1 ends and at once asks
for rollout v + k, which the worker samples while the trainer runs updates v, v + 1, ...; so up
to k rollouts are sampled ahead, each trained on exactly s − v(s) ≤ k versions after the one
that sampled it. With k = 0 the worker waits for every update: the synchronous trainer's
schedule, in another process.

Why a fixed version per rollout, with waiting, rather than "the newest weights the worker has"
with old rollouts dropped (prime-rl's ``max_off_policy_steps``) or held back (AReaL's
``max_head_offpolicyness``, SkyRL)? One worker samples whole rollouts in order, so each one's
staleness is known when it is asked for: nothing sampled is ever wasted, the bound holds by
construction, and which weights sampled which rollout does not depend on timing, so the same
seed gives the same run (and ``--resume`` the same continuation). The price: the worker idles
when it is k rollouts ahead.

The gap between the sampling version and the trained one: with ``rollout_correction: none``
the PPO ratio is taken against the sampler's log-probs, so its clip bounds how far an update
moves from the weights that sampled the rollout; a correction mode (:mod:`training.rl.correction`)
takes it against the update's starting weights instead. On the main job at k = 1 the first
kept learning and the second collapsed 8 of 10 seeds (docs/training.md, "Asynchronous
rollouts").

Weights travel as safetensors bytes through a pipe: every parameter once at the start, then the
trainable ones (the LoRA adapter, or all weights) after each update. Rollouts come back as
:class:`Rollout` objects. A checkpoint at update s stores the rollouts sampled ahead by weights
older than its own (rollouts s .. s + k − 1, waiting for any still being sampled;
:func:`rollouts_to_json`); a resume queues them and asks for the rest again, which the
checkpoint's weights sample with the same seeds, so the resumed run trains on exactly the
rollouts the uninterrupted one would have.

Example (what ``PaWTrainer`` does with ``async_rollouts: true``)::

    source = AsyncRollouts(config, request_for_step)
    source.start(step, all_weights(model))
    rollout = source.take(step)            # waits for rollout ``step``
    ...update...
    source.publish(step + 1, trainable_weights(model))
    source.close()
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import queue
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable

import torch

from agents.types import PolicyOutput, Trajectory, Transition
from training.config import TrainConfig

#: Seconds between checks that the other side is still alive (the trainer waiting for a
#: rollout, the worker waiting for a message).
POLL_S = 1.0


@dataclass
class RolloutRequest:
    """What the worker needs to sample rollout ``step`` exactly as the synchronous trainer
    would: the tasks, the group size, the temperature and the seeds."""

    step: int
    task_seeds: list[int]
    group_size: int
    temperature: float
    sampling_seed: int
    """The rollout's own sampling seed (``agents.rollout``'s ``seed``)."""
    step_seed: int
    """Global seeds (Python, NumPy, torch) are set from this before sampling."""
    group_offset: int = 0
    """The first group's global index (a rank's share of a multi-process rollout)."""
    version: int = 0
    """The policy version that samples it (set by :class:`AsyncRollouts`)."""


@dataclass
class Rollout:
    """One sampled rollout, and which weights sampled it."""

    step: int
    version: int
    trajectories: list[Trajectory]
    seconds: float
    """Sampling time in the worker."""

    @property
    def staleness(self) -> int:
        """Updates between the sampling weights and the ones trained on it."""
        return self.step - self.version


def tensors_to_bytes(state: dict[str, torch.Tensor]) -> bytes:
    """``state`` as safetensors bytes (what travels to the worker)."""
    from safetensors.torch import save

    return save({name: tensor.detach().to("cpu").contiguous() for name, tensor in state.items()})


def all_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter (the worker's first weights: a LoRA init or a loaded checkpoint)."""
    return dict(model.named_parameters())


def trainable_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The parameters an update changes (the LoRA adapter, or all of them)."""
    return {name: p for name, p in model.named_parameters() if p.requires_grad}


def _worker(config: TrainConfig, env_spec, threads: int, inbox, outbox) -> None:
    """The rollout process: build the policy as the trainer does, then apply weights and
    sample rollouts in the order the messages come. ``env_spec`` is the trainer's registration
    of the env (a spawned process starts with the built-in ids only)."""
    try:
        torch.set_num_threads(threads)
        import gymnasium as gym
        from safetensors.torch import load

        import paw_gym  # noqa: F401  (registers the built-in ids first)

        if env_spec.id not in gym.registry:
            gym.registry[env_spec.id] = env_spec

        from paw_gym.progress import quiet_libraries
        from training.infra.seeding import seed_everything
        from training.models import build_policy
        from training.rl.collect import EnvCollector

        quiet_libraries()  # the trainer reports; the worker's library noise helps nobody
        policy = build_policy(config)
        parameters = dict(policy.model.named_parameters())
        collect = EnvCollector(config)
        version = None
        trainer = multiprocessing.parent_process()
        while True:
            try:
                message = inbox.get(timeout=POLL_S)
            except queue.Empty:
                if trainer is not None and not trainer.is_alive():
                    return  # the trainer was killed: nobody will ask again
                continue
            if message[0] == "stop":
                return
            if message[0] == "weights":
                _, version, payload = message
                with torch.no_grad():
                    for name, tensor in load(payload).items():
                        parameters[name].copy_(tensor)
                continue
            request: RolloutRequest = message[1]
            if request.version != version:
                raise RuntimeError(f"rollout {request.step} wants policy version "
                                   f"{request.version}, the worker holds {version}")
            seed_everything(request.step_seed)
            start = time.perf_counter()
            trajectories = collect(policy, request.task_seeds, request.group_size,
                                   request.temperature, request.sampling_seed)
            outbox.put(("rollout", Rollout(request.step, version, trajectories,
                                           time.perf_counter() - start)))
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group; the trainer reports
        return
    except BaseException:  # noqa: BLE001  (every failure goes back to the trainer)
        outbox.put(("error", traceback.format_exc()))


class AsyncRollouts:
    """The trainer's side: the worker process, the schedule and the rollouts sampled ahead.

    ``request_for_step(step)`` gives the :class:`RolloutRequest` of an update (the trainer's
    task and seed plan, the same as in the synchronous loop)."""

    def __init__(self, config: TrainConfig, request_for_step: Callable[[int], RolloutRequest],
                 threads: int | None = None):
        self.config = config
        self.max_staleness = config.max_staleness
        self.request_for_step = request_for_step
        import gymnasium as gym

        # spawn, not fork: a forked child of a process whose torch thread pool already runs
        # can deadlock. The child imports the main module: a script needs a __main__ guard.
        context = torch.multiprocessing.get_context("spawn")
        self._inbox, self._outbox = context.Queue(), context.Queue()
        self._process = context.Process(
            target=_worker, name="paw-gym-rollouts", daemon=True,
            args=(config, gym.spec(config.env_id), threads or torch.get_num_threads(),
                  self._inbox, self._outbox))
        self._process.start()
        self._ready: dict[int, Rollout] = {}
        self._next_request = 0
        self._first_version = 0
        self.weight_sync_time = 0.0

    def start(self, step: int, weights: dict[str, torch.Tensor],
              restored: list[Rollout] = ()) -> None:
        """Begin at update ``step`` with the current ``weights`` (all of them) and the
        rollouts a checkpoint stored (those of ``step``, ``step + 1`` ...)."""
        self._first_version = step
        self._ready = {rollout.step: rollout for rollout in restored}
        self._next_request = max([step - 1, *self._ready]) + 1
        self.publish(step, weights)

    def publish(self, version: int, weights: dict[str, torch.Tensor]) -> None:
        """Send the weights after ``version`` updates, then ask for every rollout the schedule
        lets them sample."""
        start = time.perf_counter()
        self._inbox.put(("weights", version, tensors_to_bytes(weights)))
        self.weight_sync_time = time.perf_counter() - start
        while (self._next_request < self.config.total_steps
               and self.version_for(self._next_request) == version):
            request = self.request_for_step(self._next_request)
            request.version = version
            self._inbox.put(("rollout", request))
            self._next_request += 1

    def version_for(self, step: int) -> int:
        """v(step) = max(v_0, step − k): the weights that sample rollout ``step``."""
        return max(self._first_version, step - self.max_staleness)

    def take(self, step: int) -> tuple[Rollout, float]:
        """Rollout ``step`` and the seconds spent waiting for it."""
        start = time.perf_counter()
        while step not in self._ready:
            self._receive()
        return self._ready.pop(step), time.perf_counter() - start

    def drain(self, step: int) -> list[Rollout]:
        """The rollouts asked for from update ``step`` on that older weights than the current
        ones sample, waiting for those still being sampled (a checkpoint stores them: its own
        weights cannot sample them again). They stay queued for their updates. Those the
        current weights sample are not waited for: a resume asks for them again."""
        older = [ahead for ahead in range(step, self._next_request)
                 if self.version_for(ahead) < step]
        while any(ahead not in self._ready for ahead in older):
            self._receive()
        return [self._ready[ahead] for ahead in older]

    def _receive(self) -> None:
        while True:
            try:
                kind, payload = self._outbox.get(timeout=POLL_S)
                break
            except queue.Empty:
                if not self._process.is_alive():
                    raise RuntimeError(
                        f"the rollout worker exited (code {self._process.exitcode}) without a "
                        f"message; a script that starts training needs an `if __name__ == "
                        f"'__main__':` guard, since the worker imports it") from None
        if kind == "error":
            raise RuntimeError(f"the rollout worker failed:\n{payload}")
        self._ready[payload.step] = payload

    def close(self) -> None:
        """Stop the worker (the rollouts sampled ahead are dropped)."""
        if self._process.is_alive():
            self._inbox.put(("stop",))
            self._process.join(timeout=10)
            if self._process.is_alive():
                self._process.terminate()
                self._process.join(timeout=5)
        for channel in (self._inbox, self._outbox):
            channel.cancel_join_thread()
            channel.close()


# -- rollouts in a checkpoint ---------------------------------------------------------------


def rollouts_to_json(rollouts: list[Rollout]) -> str:
    """The rollouts sampled ahead, as JSON (floats round-trip exactly)."""
    return json.dumps([dataclasses.asdict(rollout) for rollout in rollouts])


def read_rollouts_ahead(path: str | os.PathLike) -> list[Rollout]:
    """A checkpoint's ``rollouts-ahead.json`` (``path``: the file), checked against
    :data:`paw_gym.data_files.ROLLOUTS_AHEAD`: a ``DataFileError`` (a ``ValueError``)
    ``file:line: reason`` names the bad field and what is accepted."""
    from paw_gym.data_files import read_rollouts_ahead_file

    return _rollouts(read_rollouts_ahead_file(path))


def _rollouts(items: list[dict[str, Any]]) -> list[Rollout]:
    def trajectory(data: dict[str, Any]) -> Trajectory:
        steps = [Transition(**{**step, "output": PolicyOutput(**step["output"])})
                 for step in data.pop("transitions")]
        return Trajectory(**data, transitions=steps)

    return [Rollout(item["step"], item["version"],
                    [trajectory(dict(t)) for t in item["trajectories"]], item["seconds"])
            for item in items]
