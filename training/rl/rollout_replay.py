"""The run's replay: every on-policy transition of every update, for world models and audits.

Under ``<output_dir>/replay/`` each update's transitions go into one shard
(``update-000012.jsonl``; ``update-000012-rank1.jsonl`` for rank 1 of a multi-process run,
which records the groups it rolled out), each record with the update index, its group, the
group's λ_g, whether PaW selected it for the world-model term, and its advantage
(:func:`wrappers.record.transition_record`'s schema). A resumed run redoes the updates after
its checkpoint, so it first drops the shards it wrote for them (:func:`drop_replay_after`):
the replay holds every transition exactly once.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from run_files.outputs import Output, seal
from training.rl.rollout_batch import RolloutBatch
from wrappers.replay import WMReplay

#: The run's replay of every on-policy transition, under ``output_dir``.
REPLAY_DIR = "replay"


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


def record_update(folder: Path, batch: RolloutBatch, step: int, own: range, world) -> None:
    """Update ``step``'s transitions (``batch``; this rank's trajectories are ``own``) into
    their shard under ``folder``; in a multi-process run rank 0 then records every rank's
    shard as the run's."""
    rows = iter(range(len(batch.samples)))
    replay = WMReplay(folder, shard=replay_shard(step, world.rank, world.world_size),
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
            if index not in own:  # another rank records it
                continue
            replay.extend(trajectory.to_records(
                f"update-{step:06d}-episode-{index:04d}", per_step, source="train",
                update=step, group=trajectory.group_index,
                lambda_g=float(batch.group_lambda.get(trajectory.group_index, 0.0))))
    finally:
        replay.close()
    if world.world_size > 1:  # the other ranks' shards, recorded once written
        world.barrier()
        if world.is_main:
            for rank in range(world.world_size):
                seal(folder / f"{replay_shard(step, rank, world.world_size)}.jsonl")
