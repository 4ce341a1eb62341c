"""Multi-process training: each process (rank) rolls out whole groups, and all of them optimise
the single-process PaW objective together, on accelerate's DDP.

Launch the same command under ``torchrun --nproc_per_node N`` or ``accelerate launch
--multi_gpu --num_processes N`` (see the README's "Scale out"); a plain ``paw-gym train`` is a
world of one and never imports accelerate.

Why the update is exactly the single-process one. With W ranks:

* Rollout: the update's G groups are split into W contiguous blocks (:func:`group_shard`); rank
  r rolls out block r with its own sampler and seed, and renumbers its groups globally.
* Every rank then gathers all W blocks (trajectories, and PPO's critic values of its own
  steps), so advantages (group-relative, GiGPO's anchor groups, PPO's whitened GAE), the top-α
  entropy selection over the whole update, λ_g and the mini-batch permutation are computed on
  identical data and are identical on every rank.
* A mini-batch's rows are split over the ranks by tokens (:func:`balance_rows`). The objective
  is ``L = Σ_rows w_i · ℓ_i`` with weights from the *whole* mini-batch
  (``training.rl.objective.objective_weights``), so ``L = Σ_r L_r`` where ``L_r`` sums rank r's
  rows. Each rank back-propagates ``W · L_r``; DDP averages gradients over ranks, giving
  ``(1/W) Σ_r W ∇L_r = ∇L``: the single-process gradient, up to float summation order. Every
  rank then clips and steps on that same gradient.
* A rank without rows in a mini-batch (fewer rows than ranks) runs one row with zero weights,
  so that it still joins DDP's gradient all-reduce; it adds nothing.

With ``sharding: fsdp`` (:class:`ShardedProcess`) the same holds with FSDP2 in place of DDP:
each decoder layer of the scorer (and of PPO's critic) and the scorer itself are
``fully_shard``-ed, FSDP's reduce-scatter averages the gradients as DDP's all-reduce does, and
since every forward all-gathers each layer's parameters, every rank runs the same number of
passes (:meth:`SingleProcess.equal_passes`; the extra ones are zero-weight), the critic's value
passes during the rollout included. HF rollouts are sampled by an unsharded copy of the
weights that every rank refreshes before each rollout (:meth:`ShardedProcess.copy_full_weights`),
so ranks generate episodes of any length without collectives; a vLLM engine gets the gathered
weights instead.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Sequence

import torch


def launched_world_size() -> int:
    """Processes in this launch (``WORLD_SIZE``, set by torchrun and accelerate launch)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


#: Seconds a launch's processes wait for each other to join (``paw-gym train --launch_timeout``;
#: a peer that never starts otherwise leaves the others waiting for torch's 30 minutes).
DEFAULT_LAUNCH_TIMEOUT = 120.0


class LaunchError(ValueError):
    """A launch whose processes did not all join, in one line."""


def join_launch(device: str | None, timeout: float = DEFAULT_LAUNCH_TIMEOUT) -> None:
    """Under a launch of several processes (``WORLD_SIZE`` > 1), join its process group, waiting
    at most ``timeout`` seconds for every peer; a :class:`LaunchError` saying how many joined
    when one never does. Collectives afterwards keep torch's own timeout. Nothing in a world of
    one or when the group exists (accelerate then finds it made)."""
    import datetime

    world_size = launched_world_size()
    if world_size <= 1 or not torch.distributed.is_available() or \
            torch.distributed.is_initialized():
        return
    cpu = device == "cpu" or (device is None and not torch.cuda.is_available())
    where = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
    rank = os.environ.get("RANK", "?")
    try:
        with _quiet_native_stderr():  # c10d logs each failed connect attempt in C++
            store, rank_, size = next(torch.distributed.rendezvous(
                "env://", timeout=datetime.timedelta(seconds=timeout)))
    except (RuntimeError, ValueError) as error:  # DistStoreError / DistNetworkError; bad env
        detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise LaunchError(
            f"the launch of WORLD_SIZE={world_size} processes did not come together within "
            f"{timeout:g} s (this is RANK={rank}, rendezvous at {where}: {detail}); start every "
            f"rank (torchrun --nproc_per_node {world_size} ...), raise --launch_timeout, or "
            f"unset WORLD_SIZE for one process") from None
    store.set_timeout(datetime.timedelta(minutes=30))
    if not cpu and "LOCAL_RANK" in os.environ:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.distributed.init_process_group("gloo" if cpu else "nccl", store=store, rank=rank_,
                                         world_size=size)


@contextlib.contextmanager
def _quiet_native_stderr():
    """File descriptor 2 sent to /dev/null for the block (C++ logging bypasses Python's
    ``sys.stderr``); restored after."""
    import sys

    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield
        return
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def whole(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` gathered whole if FSDP shards it (a DTensor: collective, every rank calls
    it); any other tensor as it is."""
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def group_shard(n_groups: int, world_size: int, rank: int) -> range:
    """The groups rank ``rank`` rolls out: a contiguous block, block sizes differing by at most
    one, earlier ranks taking the larger ones (so concatenating the blocks in rank order gives
    the single-process group order)."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in a world of {world_size}")
    size, extra = divmod(n_groups, world_size)
    start = rank * size + min(rank, extra)
    return range(start, start + size + (rank < extra))


def balance_rows(rows: Sequence[int], lengths: Sequence[int], world_size: int) -> list[list[int]]:
    """Split ``rows`` (with their token ``lengths``) over ``world_size`` ranks so that token
    counts stay close: longest first, each to the rank with the fewest tokens so far (lowest
    rank on ties). Deterministic, so every rank computes the same split; each share keeps the
    order of ``rows``."""
    if len(rows) != len(lengths):
        raise ValueError(f"{len(rows)} rows but {len(lengths)} lengths")
    load = [0] * world_size
    owner = {}
    for k in sorted(range(len(rows)), key=lambda k: (-lengths[k], k)):
        rank = min(range(world_size), key=lambda r: (load[r], r))
        owner[k] = rank
        load[rank] += lengths[k]
    return [[rows[k] for k in range(len(rows)) if owner[k] == rank] for rank in range(world_size)]


def check_group_count(config, world_size: int) -> None:
    """A ValueError when a ``TrainConfig``'s update has fewer rollout groups than there are
    processes (each process rolls out whole groups), or an asynchronous rollout run is
    launched on several processes (its one worker serves one trainer)."""
    if config.async_rollouts and world_size > 1:
        raise ValueError(f"async_rollouts runs in one process, not a launch of {world_size}: "
                         f"launch without torchrun, or set async_rollouts: false")
    groups = config.rollout_groups
    if groups < world_size:
        what = (f"n_groups × group_size = {groups} PPO rollout groups" if config.algo == "ppo"
                else f"n_groups={groups} rollout groups")
        raise ValueError(f"{what} per update are fewer than the {world_size} processes: each "
                         f"process rolls out whole groups; raise n_groups or launch fewer "
                         f"processes")


class SingleProcess:
    """The world of one: every collective is the identity."""

    rank = 0
    world_size = 1
    is_main = True

    def model_device(self, configured: str | None) -> str | None:
        """The device this rank's model goes on: the configured one."""
        return configured

    def prepare(self, module: torch.nn.Module) -> torch.nn.Module:
        return module

    def no_sync(self, module: torch.nn.Module, sync: bool):
        return contextlib.nullcontext()

    def gather(self, items: list) -> list:
        return list(items)

    def reduce(self, values: dict[str, float], op: str = "sum") -> dict[str, float]:
        return dict(values)

    def all_true(self, flag: bool) -> bool:
        return bool(flag)

    def barrier(self) -> None:
        pass

    def pass_count(self, passes: int) -> int:
        """How many forward + backward passes this rank runs when it needs ``passes``: its own
        number, except under FSDP (every rank the largest)."""
        return passes

    def equal_passes(self, items: Sequence) -> list[tuple[Any, bool]]:
        """``(item, extra)`` for each pass over ``items`` (non-empty): every item once
        (``extra`` False), then, where another rank needs more passes (FSDP: each pass is a
        collective), ``items[0]`` again with ``extra`` True: a pass to run with zero weight or
        discard."""
        count = self.pass_count(len(items))
        return [(item, False) for item in items] + [(items[0], True)] * (count - len(items))

    sharded = False
    #: The dtype of the training passes when it is not the weights' (FSDP mixed precision).
    compute_dtype: torch.dtype | None = None


class MultiProcess(SingleProcess):
    """One rank of a torchrun / accelerate launch: DDP from accelerate, collectives over its
    process group (gloo on CPU, NCCL on GPU)."""

    #: accelerate's launch modes this world runs under.
    ACCEPTED = ("MULTI_CPU", "MULTI_GPU")

    def __init__(self, cpu: bool):
        from accelerate import Accelerator, DistributedDataParallelKwargs

        # broadcast_buffers=False: a buffer broadcast is a collective inside every forward, and
        # ranks run different numbers of micro-batch forwards.
        self.accelerator = Accelerator(
            cpu=cpu, device_placement=False,
            kwargs_handlers=[DistributedDataParallelKwargs(broadcast_buffers=False)])
        kind = self.accelerator.distributed_type
        if kind.value not in self.ACCEPTED:
            raise ValueError(f"accelerate's distributed_type {kind.value} is not supported with "
                             f"sharding: {'fsdp' if self.sharded else 'ddp'} (accepted: "
                             f"{', '.join(self.ACCEPTED)}); DeepSpeed is not wired in, and an "
                             f"accelerate FSDP config needs sharding: fsdp in the training config")
        self.rank = self.accelerator.process_index
        self.world_size = self.accelerator.num_processes
        self.is_main = self.accelerator.is_main_process
        self.device = self.accelerator.device

    def model_device(self, configured: str | None) -> str | None:
        """The rank's own GPU (``setup`` refused a pinned ``cuda:N``), or the CPU."""
        return str(self.device)

    def prepare(self, module: torch.nn.Module) -> torch.nn.Module:
        return self.accelerator.prepare_model(module, device_placement=False)

    def no_sync(self, module: torch.nn.Module, sync: bool):
        """Accumulate gradients locally unless ``sync`` (the last backward of an optimizer
        step, which all-reduces them)."""
        return contextlib.nullcontext() if sync else self.accelerator.no_sync(module)

    def gather(self, items: list) -> list:
        """Every rank's ``items``, concatenated in rank order, on every rank."""
        from accelerate.utils import gather_object

        return gather_object(list(items))

    def reduce(self, values: dict[str, float], op: str = "sum") -> dict[str, float]:
        """``values`` summed (or max-ed) over ranks; the keys may differ between ranks."""
        keys = sorted({key for part in self.gather([sorted(values)]) for key in part})
        tensor = torch.tensor([float(values.get(key, 0.0 if op == "sum" else float("-inf")))
                               for key in keys], dtype=torch.float64, device=self.device)
        reduce_op = {"sum": torch.distributed.ReduceOp.SUM,
                     "max": torch.distributed.ReduceOp.MAX}[op]
        torch.distributed.all_reduce(tensor, op=reduce_op)
        return dict(zip(keys, tensor.tolist()))

    def all_true(self, flag: bool) -> bool:
        tensor = torch.tensor([0.0 if flag else 1.0], device=self.device)  # NCCL: a GPU tensor
        torch.distributed.all_reduce(tensor, op=torch.distributed.ReduceOp.MAX)
        return tensor.item() == 0.0

    def barrier(self) -> None:
        self.accelerator.wait_for_everyone()


def shard_module(module: torch.nn.Module, compute_dtype: torch.dtype | None = None
                 ) -> torch.nn.Module:
    """FSDP2 over ``module`` (the policy's ``training.rl.objective.PolicyScorer`` or PPO's
    ``training.models.ValueModel``: anything with an ``fsdp_units()`` method), in place: each
    of its units (decoder layers) is sharded on its own, the root holds the rest (embeddings,
    final norm, LM head). With a ``compute_dtype``, the weights are gathered in it and
    gradients reduced in float32."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    # The module's inputs stay as they are: the rollout's log-probs in them are float32.
    policy = (MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32,
                                   cast_forward_inputs=False)
              if compute_dtype else MixedPrecisionPolicy())
    for unit in module.fsdp_units():
        fully_shard(unit, mp_policy=policy)
    fully_shard(module, mp_policy=policy)
    # FSDP takes the first module whose forward runs as its root; make it this one now.
    module._get_fsdp_state()._lazy_init()
    return module


class ShardedProcess(MultiProcess):
    """One rank of a launch with ``sharding: fsdp``: FSDP2 (``fully_shard``) instead of DDP.

    accelerate sets up the process group (under ``accelerate launch`` with an FSDP config, or
    torchrun); the sharding itself calls ``fully_shard``, so the same code runs on GPUs (NCCL)
    and on CPUs (gloo), where accelerate does not select FSDP."""

    #: NO: a world of one that :func:`setup` made itself (no launcher).
    ACCEPTED = ("MULTI_CPU", "MULTI_GPU", "FSDP", "NO")
    sharded = True

    def __init__(self, cpu: bool, compute_dtype: torch.dtype | None = None):
        super().__init__(cpu)
        self.compute_dtype = compute_dtype

    def prepare(self, module: torch.nn.Module) -> torch.nn.Module:
        return shard_module(module, self.compute_dtype)

    def no_sync(self, module: torch.nn.Module, sync: bool):
        """Reduce-scatter the accumulated gradients only in the last backward of a step."""
        @contextlib.contextmanager
        def gradient_sync():
            module.set_requires_gradient_sync(sync)
            try:
                yield
            finally:
                module.set_requires_gradient_sync(True)
        return gradient_sync()

    def pass_count(self, passes: int) -> int:
        return int(self.reduce({"passes": passes}, "max")["passes"])

    @staticmethod
    @torch.no_grad()
    def copy_full_weights(sharded: torch.nn.Module, full: torch.nn.Module) -> None:
        """Every parameter of ``sharded`` gathered, one at a time, into the unsharded model
        ``full`` of the same architecture (collective: every rank calls it)."""
        for source, target in zip(sharded.parameters(), full.parameters(), strict=True):
            target.copy_(whole(source))

    @staticmethod
    def save_sharded(module: torch.nn.Module, optimizer, folder) -> None:
        """Every rank writes its shards of the weights and optimizer states to ``folder``
        (``torch.distributed.checkpoint``; nothing is gathered; collective)."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_state, optimizer_state = get_state_dict(module, optimizer)
        dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=str(folder))

    @staticmethod
    def full_weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
        """The whole weights of sharded ``module`` in rank 0's CPU memory (empty on the other
        ranks), for the consolidated model folder (collective)."""
        from torch.distributed.checkpoint.state_dict import (StateDictOptions,
                                                             get_model_state_dict)

        return get_model_state_dict(module, options=StateDictOptions(full_state_dict=True,
                                                                     cpu_offload=True))

    @staticmethod
    def load_sharded(module: torch.nn.Module, optimizer, folder) -> None:
        """Each rank reads its shards from a :meth:`save_sharded` folder (collective)."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

        model_state, optimizer_state = get_state_dict(module, optimizer)
        state = {"model": model_state, "optimizer": optimizer_state}
        dcp.load(state, checkpoint_id=str(folder))
        set_state_dict(module, optimizer, model_state_dict=state["model"],
                       optim_state_dict=state["optimizer"])


def setup(device: str | None, sharding: str = "ddp", mixed_precision: str = "no"
          ) -> SingleProcess:
    """The world this process runs in: :class:`MultiProcess` (``sharding`` ``ddp``) under a
    launcher with more than one process, :class:`ShardedProcess` (``fsdp``, computing in
    bfloat16 with ``mixed_precision`` ``bf16``) with any number of processes (one without a
    launcher included), else :class:`SingleProcess`.
    ``device`` is ``TrainConfig.device``."""
    cpu = device == "cpu" or (device is None and not torch.cuda.is_available())
    compute_dtype = torch.bfloat16 if mixed_precision == "bf16" else None
    if sharding == "fsdp" and launched_world_size() <= 1:
        # A world of one: the same sharded path (mixed precision, sharded checkpoints) as a
        # launch, so a config behaves the same with 1 GPU and with 8.
        if not torch.distributed.is_initialized():
            if device is not None and device.startswith("cuda:"):
                torch.cuda.set_device(torch.device(device))
            torch.distributed.init_process_group("gloo" if cpu else "nccl", rank=0,
                                                 world_size=1,
                                                 store=torch.distributed.HashStore())
        return ShardedProcess(cpu=cpu, compute_dtype=compute_dtype)
    if launched_world_size() <= 1:
        return SingleProcess()
    if device is not None and device.startswith("cuda:"):
        raise ValueError(f"device={device!r} would put every process on one GPU; with "
                         f"{launched_world_size()} processes leave device unset or set it to "
                         f"'cuda' (each process takes its LOCAL_RANK's GPU) or 'cpu'")
    join_launch(device)  # bounded: a peer that never starts is one error, not a hang
    if sharding == "fsdp":
        return ShardedProcess(cpu=cpu, compute_dtype=compute_dtype)
    return MultiProcess(cpu=cpu)


def shutdown() -> None:
    """End this process's part of a launch: wait for every rank, then destroy the process group
    (a process that exits with it alive can abort in its C++ destructors, and torchrun then
    kills the other ranks). Nothing in a world of one."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()

