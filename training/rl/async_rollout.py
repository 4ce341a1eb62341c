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

Timing alone. A run compares itself with the synchronous trainer (:class:`Overlap`), which needs
each phase's time alone, with the threads a synchronous run would use. So at updates 1, 1 + N,
1 + 2N ... (N = :data:`Overlap.RETIME_EVERY`; the first update of a fresh start is left to
warm up) with k ≥ 1: before update t the trainer waits for every rollout in flight and holds
back the weights it would publish, so that update t runs while the worker waits; after it, the
first rollout asked is sampled, on the trainer's threads, while the trainer waits. Only the
timing changes: every rollout is still sampled by the weights v(s), so the same seed gives the
same run, and a resume times the same updates.

Why a fixed version per rollout, with waiting, rather than "the newest weights the worker has"
with old rollouts dropped (prime-rl's ``max_off_policy_steps``) or held back (AReaL's
``max_head_offpolicyness``, SkyRL)? One worker samples whole rollouts in order, so each one's
staleness is known when it is asked for: nothing sampled is ever wasted, the bound holds by
construction, and which weights sampled which rollout does not depend on timing, so the same
seed gives the same run (and ``--resume`` the same continuation). The price: the worker idles
when it is k rollouts ahead.

The gap between the sampling version and the trained one. With ``rollout_correction: none``
the PPO ratio is taken against the sampler's log-probs μ, so its clip is a trust region around
the weights that sampled the rollout. The other corrections (:mod:`training.rl.correction`)
take the ratio against the update's starting weights π_old, which with one optimizer step per
update is 1 at that step: nothing bounds the step. What broke the main job at k = 1 (8 of 10
seeds collapsed with ``token_truncate``) were the tokens of negative advantage that the
previous update had already pushed down (π_old / μ < 1 − ε), which ``none``'s clip stops and
the weight min(π_old / μ, C) does not (benchmarks/README.md, "Asynchronous rollouts", the
replay). ``sampler_clip`` keeps the weight and the clip against μ; the config refuses the others
with a stale sampler.

Threads. The worker and the trainer split the cores: the worker takes half of them (at most
the trainer's own thread count), the trainer the rest, so that two processes never run more
compute threads than there are cores; the worker's OpenMP and MKL pools are sized before its
interpreter imports torch, and its tokenizer runs on its own thread. What async gains is then
the overlap of two phases that each keep their speed, which holds only where the cores do not
slow each other down (:class:`Overlap` measures it in every run).

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

import contextlib
import dataclasses
import json
import multiprocessing
import os
import queue
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Iterator

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
    threads: int = 0
    """Torch threads the worker samples it with; 0: the worker's share of the cores. A rollout
    timed alone takes the trainer's own count, as a synchronous run would."""


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
            torch.set_num_threads(request.threads or threads)
            start = time.perf_counter()
            trajectories = collect(policy, request.task_seeds, request.group_size,
                                   request.temperature, request.sampling_seed)
            seconds = time.perf_counter() - start
            torch.set_num_threads(threads)
            outbox.put(("rollout", Rollout(request.step, version, trajectories, seconds)))
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group; the trainer reports
        return
    except BaseException:  # noqa: BLE001  (every failure goes back to the trainer)
        outbox.put(("error", traceback.format_exc()))


def split_threads(trainer_threads: int, cores: int) -> tuple[int, int]:
    """``(trainer, worker)`` torch threads: the worker half the cores, at most the trainer's
    count; the trainer what is left, at least one."""
    worker = max(1, min(trainer_threads, cores // 2))
    return max(1, min(trainer_threads, cores - worker)), worker


def available_cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


@contextlib.contextmanager
def _environment(**values: str) -> Iterator[None]:
    """``os.environ`` with ``values`` while a spawned child copies it, then as it was."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@dataclass
class Schedule:
    """Which rollouts the worker is asked for, and when: rollout s is sampled by the weights
    after v(s) = max(first, s − max_staleness) updates, asked for as soon as they are sent."""

    total: int
    """Rollouts in the run (``total_steps``)."""
    max_staleness: int
    first: int = 0
    """The update the worker started at."""
    next: int = 0
    """The next rollout to ask for."""

    def version_for(self, step: int) -> int:
        """v(step) = max(first, step − k): the weights that sample rollout ``step``."""
        return max(self.first, step - self.max_staleness)

    def start(self, first: int, ready: set[int]) -> list[int]:
        """Begin at update ``first`` with the rollouts ``ready`` (a checkpoint's): the rollouts
        to ask for with its weights."""
        self.first = first
        self.next = max([first - 1, *ready]) + 1
        return self.due(first)

    def times_alone(self, step: int) -> bool:
        """Whether update ``step`` and the rollout asked after it run alone (module docstring):
        updates 1, 1 + N, 1 + 2N ... after ``first`` with ``max_staleness`` ≥ 1 (at 0 each
        phase runs alone anyway, on the split threads, and there is nothing to compare)."""
        return (self.max_staleness > 0 and step > self.first
                and (step - 1) % Overlap.RETIME_EVERY == 0)

    def due(self, version: int, last: int | None = None) -> list[int]:
        """The next rollouts that weights up to ``version`` sample (up to rollout ``last``)."""
        steps: list[int] = []
        while (self.next < self.total and self.version_for(self.next) <= version
               and (last is None or self.next <= last)):
            steps.append(self.next)
            self.next += 1
        return steps


class AsyncRollouts:
    """The trainer's side: the worker process, the schedule and the rollouts sampled ahead.

    ``request_for_step(step)`` gives the :class:`RolloutRequest` of an update (the trainer's
    task and seed plan, the same as in the synchronous loop). While it runs, the trainer's
    process uses its share of the cores (:func:`split_threads`; :meth:`close` gives them
    back)."""

    def __init__(self, config: TrainConfig, request_for_step: Callable[[int], RolloutRequest]):
        self.config = config
        self.request_for_step = request_for_step
        import gymnasium as gym

        self._trainer_threads = torch.get_num_threads()
        trainer, worker = split_threads(self._trainer_threads, available_cores())
        torch.set_num_threads(trainer)
        # spawn, not fork: a forked child of a process whose torch thread pool already runs
        # can deadlock. The child imports the main module: a script needs a __main__ guard.
        context = torch.multiprocessing.get_context("spawn")
        self._inbox, self._outbox = context.Queue(), context.Queue()
        self._process = context.Process(
            target=_worker, name="paw-gym-rollouts", daemon=True,
            args=(config, gym.spec(config.env_id), worker, self._inbox, self._outbox))
        # The child's OpenMP and MKL pools start with its share (it imports torch while it
        # unpickles these arguments, before _worker runs), its tokenizer on its own thread.
        with _environment(OMP_NUM_THREADS=str(worker), MKL_NUM_THREADS=str(worker),
                          TOKENIZERS_PARALLELISM="false"):
            self._process.start()
        self.threads = (trainer, worker)
        self.overlap = Overlap()
        self.schedule = Schedule(config.total_steps, config.max_staleness)
        self._ready: dict[int, Rollout] = {}
        self._in_flight: set[int] = set()  # asked for, not received yet
        self._held: tuple[int, bytes] | None = None  # weights held back, serialised
        self._rollout_alone: int | None = None  # the rollout being asked for to time alone
        self.weight_sync_time = 0.0
        self.timed_update: int | None = None
        """The update that runs (or ran) alone, while it is the current one."""

    def start(self, step: int, weights: dict[str, torch.Tensor],
              restored: list[Rollout] = ()) -> None:
        """Begin at update ``step`` with the current ``weights`` (all of them) and the
        rollouts a checkpoint stored (those of ``step``, ``step + 1`` ...)."""
        self._ready = {rollout.step: rollout for rollout in restored}
        due = self.schedule.start(step, set(self._ready))
        self._inbox.put(("weights", step, self._serialised(weights)))
        self._ask(due)

    def publish(self, version: int, weights: dict[str, torch.Tensor]) -> None:
        """Send the weights after ``version`` updates, then ask for every rollout the schedule
        lets them sample (after those that older weights, still the worker's, sample). Before
        an update timed alone the weights are held back (the rollout it trains on is asked
        for); after it they go with the next ones, and the first rollout they ask for is
        sampled, timed, while this waits."""
        torch.set_num_threads(self.threads[0])  # the split again, after an update timed alone
        payload = self._serialised(weights)  # now: the next update changes them in place
        if self.schedule.times_alone(version):
            self._ask(self.schedule.due(version - 1, last=version))
            self._held = (version, payload)
            return
        if self._held is None:
            self._publish(version, payload)
            return
        self._rollout_alone = self.schedule.next
        self._publish(*self._held)
        self._held = None
        self._publish(version, payload)
        if self._rollout_alone < self.schedule.next:  # none is left after the last update
            self._time_rollout_alone(self._rollout_alone)
        self._rollout_alone = None

    def _publish(self, version: int, payload: bytes) -> None:
        self._ask(self.schedule.due(version - 1))
        self._inbox.put(("weights", version, payload))
        self._ask(self.schedule.due(version))

    def _serialised(self, weights: dict[str, torch.Tensor]) -> bytes:
        start = time.perf_counter()
        payload = tensors_to_bytes(weights)
        self.weight_sync_time = time.perf_counter() - start
        return payload

    def _ask(self, steps: list[int]) -> None:
        for step in steps:
            request = self.request_for_step(step)
            request.version = self.schedule.version_for(step)
            if step == self._rollout_alone:  # sampled as a synchronous run would
                request.threads = self._trainer_threads
            self._in_flight.add(step)
            self._inbox.put(("rollout", request))

    def _time_rollout_alone(self, step: int) -> None:
        """Wait for rollout ``step`` (asked first after an update timed alone: the worker
        samples it while this waits) and give its time to :attr:`overlap`."""
        while step not in self._ready:
            self._receive()
        rollout = self._ready[step]
        self.overlap.time_rollout(rollout.seconds, generated_tokens(rollout.trajectories))

    def take(self, step: int) -> tuple[Rollout, float]:
        """Rollout ``step`` and the seconds spent waiting for it. Before an update timed alone,
        also every rollout in flight; the update then runs on the trainer's own threads."""
        start = time.perf_counter()
        alone = self.schedule.times_alone(step) and self._held is not None
        while step not in self._ready or (alone and self._in_flight):
            self._receive()
        self.timed_update = step if alone else None
        if alone:
            torch.set_num_threads(self._trainer_threads)
        return self._ready.pop(step), time.perf_counter() - start

    def drain(self, step: int) -> list[Rollout]:
        """The rollouts asked for from update ``step`` on that older weights than the current
        ones sample, waiting for those still being sampled (a checkpoint stores them: its own
        weights cannot sample them again). They stay queued for their updates. Those the
        current weights sample are not waited for: a resume asks for them again. Weights held
        back for an update timed alone first ask for what the worker's weights still sample."""
        if self._held is not None:
            self._ask(self.schedule.due(self._held[0] - 1))
        older = [ahead for ahead in range(step, self.schedule.next)
                 if self.schedule.version_for(ahead) < step]
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
        self._in_flight.discard(payload.step)

    def close(self) -> None:
        """Stop the worker (the rollouts sampled ahead are dropped) and give the trainer its
        threads back."""
        torch.set_num_threads(self._trainer_threads)
        if self._process.is_alive():
            self._inbox.put(("stop",))
            self._process.join(timeout=10)
            if self._process.is_alive():
                self._process.terminate()
                self._process.join(timeout=5)
        for channel in (self._inbox, self._outbox):
            channel.cancel_join_thread()
            channel.close()


def generated_tokens(trajectories: list[Trajectory]) -> int:
    """The tokens a rollout's policy generated."""
    return sum(len(step.output.response_ids) for t in trajectories for step in t.transitions)


class Overlap:
    """What the asynchronous schedule gains in this run, against the synchronous trainer.

    Every :data:`RETIME_EVERY` updates, from the second (module docstring, "Timing alone"), one
    update runs while the worker waits and one rollout is sampled while the trainer waits,
    each on the threads a synchronous run would use. Their rates (seconds per trained token,
    per generated token) estimate each update's synchronous time, from the latest re-timing:

        sync_t = generated_t · (rollout_s / generated) + trained_t · (update_s / trained)

    ``async_speedup`` = Σ sync_t / Σ step_t over the updates from the first re-timing on, the
    re-timed ones (run one phase after the other, so slower) included: above 1 the overlap
    pays, below 1 the two processes slow each other down more than they overlap."""

    #: Updates between two re-timings of the phases alone. Each costs about one update's
    #: overlap (the update and the rollout after it run one after the other), and keeps the
    #: estimate to what a synchronous run would take at that time of the run.
    RETIME_EVERY = 10
    #: Updates counted before the run says that async is slower: one re-timing period, so
    #: that the re-timed update weighs in the figure as much as over a whole run (at 5, a
    #: one-core run said so and ended at 1.04x or 1.07x; at 3, a loaded one said so at 1.00x
    #: and ended at 1.09x).
    SETTLE = RETIME_EVERY

    def __init__(self) -> None:
        self.alone: dict[str, float] = {}
        """The latest phases timed alone: ``rollout`` / ``update`` seconds, and per token."""
        self.sync_s = self.async_s = 0.0
        self.updates = 0
        self._said = False

    def time_rollout(self, seconds: float, generated: float) -> None:
        """A rollout sampled alone: ``generated`` tokens in ``seconds``."""
        self.alone.update(rollout=seconds, rollout_per_token=seconds / max(generated, 1.0))

    def time_update(self, seconds: float, trained: float) -> None:
        """An update run alone: ``trained`` tokens in ``seconds``."""
        self.alone.update(update=seconds, update_per_token=seconds / max(trained, 1.0))

    def add(self, generated: float, trained: float, step_s: float) -> dict[str, float]:
        """Account one update (``step_s``: its step time); its metrics, once both phases have
        been timed alone."""
        if "rollout" not in self.alone or "update" not in self.alone:
            return {}
        sync = (generated * self.alone["rollout_per_token"]
                + trained * self.alone["update_per_token"])
        self.sync_s += sync
        self.async_s += step_s
        self.updates += 1
        return {"sync_step_estimate": sync, "async_speedup": self.sync_s / self.async_s}

    def slower_line(self, threads: tuple[int, int], cores: int) -> str | None:
        """One line, once, when async has been slower than sync would be over
        :data:`SETTLE` updates; else None."""
        if self._said or self.updates < self.SETTLE or self.async_s <= self.sync_s:
            return None
        self._said = True
        return (f"async_rollouts is slower here than the synchronous trainer: "
                f"{self.async_s / self.updates:.2f} s per update against about "
                f"{self.sync_s / self.updates:.2f} s for the same rollouts and updates one "
                f"after the other ({self.sync_s / self.async_s:.2f}x; each phase timed alone "
                f"every {self.RETIME_EVERY} updates, lately rollout "
                f"{self.alone['rollout']:.2f} s, update {self.alone['update']:.2f} s): the two "
                f"processes ({threads[0]} + {threads[1]} threads on {cores} cores) slow each "
                f"other down more than they overlap, so async_rollouts: false trains faster on "
                f"this machine (docs/training.md, \"When async pays\")")


# -- rollouts in a checkpoint ---------------------------------------------------------------


def rollouts_to_json(rollouts: list[Rollout]) -> str:
    """The rollouts sampled ahead, as JSON (floats round-trip exactly)."""
    return json.dumps([dataclasses.asdict(rollout) for rollout in rollouts])


def read_rollouts_ahead(path: str | os.PathLike) -> list[Rollout]:
    """A checkpoint's ``rollouts-ahead.json`` (``path``: the file), checked against
    :data:`training.infra.data_files.ROLLOUTS_AHEAD`: a ``DataFileError`` (a ``ValueError``)
    ``file:line: reason`` names the bad field and what is accepted."""
    from training.infra.data_files import read_rollouts_ahead_file

    return _rollouts(read_rollouts_ahead_file(path))


def _rollouts(items: list[dict[str, Any]]) -> list[Rollout]:
    def trajectory(data: dict[str, Any]) -> Trajectory:
        steps = [Transition(**{**step, "output": PolicyOutput(**step["output"])})
                 for step in data.pop("transitions")]
        return Trajectory(**data, transitions=steps)

    return [Rollout(item["step"], item["version"],
                    [trajectory(dict(t)) for t in item["trajectories"]], item["seconds"])
            for item in items]
