"""A run's state and its life on disk: the update counter, checkpoints, resume, the collapse
watch and its rollback.

:class:`RunState` owns ``step`` (updates done), the run's claimed output folder, and the
:class:`~training.infra.collapse.CollapseWatch`. Its contract:

* :meth:`RunState.save` writes ``checkpoints/step-NNNNNN/``: the weights (a plain HF model
  folder, or the LoRA adapter), the optimizers, the scheduler, every rank's RNG state, the
  rollouts an asynchronous run sampled ahead, the config and the machine, with ``state.json``
  last (a checkpoint without it is incomplete). It is staged in a hidden folder and renamed
  into place whole.
* :meth:`RunState.resume` restores all of it, so that a resumed run computes exactly what the
  uninterrupted one would have (every update reseeds from (seed, step)); a damaged newer
  checkpoint is moved aside whole and the newest intact one is taken.
* :meth:`RunState.watch_collapse` scores each update against the run's best
  (:mod:`training.infra.collapse`) and acts as ``on_collapse`` says: warn, stop, or roll the
  weights back to the best checkpoint.
"""

from __future__ import annotations

import sys
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any

from run_files.outputs import Output, claim_folder, write_text_atomically
from training.config import TrainConfig
from training.infra import checkpoint as ckpt
from training.infra.collapse import CollapseWatch
from training.infra.numerics import kernels_phrase, machine, mode_in_effect, numerics_key
from training.rl.async_rollout import Rollout, read_rollouts_ahead, rollouts_to_json
from training.rl.sampler import RolloutSampler
from training.rl.update import PolicyUpdate

#: Settings that change how a run is shown or stored, not what it computes: a resume may
#: change them without a warning.
RUN_ONLY_FIELDS = ("overwrite", "progress", "log_every", "tensorboard", "wandb",
                   "wandb_project", "record_replay")

#: A checkpoint's rollouts sampled ahead by the asynchronous worker (``async_rollouts``).
AHEAD_FILE = "rollouts-ahead.json"


class RunState:
    """The state of a run (module docstring) over its parts: ``update`` (weights, optimizers,
    schedule) and ``sampler`` (the rollouts sampled ahead)."""

    def __init__(self, config: TrainConfig, world, update: PolicyUpdate,
                 sampler: RolloutSampler, tokenizer):
        self.config, self.world, self.update, self.sampler = config, world, update, sampler
        self.tokenizer = tokenizer
        self.step = 0
        self.collapse = CollapseWatch()
        self.output: Output | None = None  # output_dir, claimed by rank 0 in PaWTrainer.train
        self.resumed_from: Path | None = None
        self.resumed_config: dict[str, Any] | None = None
        self.resumed_machine: dict[str, Any] | None = None

    # -- checkpoints --------------------------------------------------------------------------
    def save(self, metrics: dict[str, Any] | None = None) -> Path:
        """Rank 0 writes the weights, optimizers and state (under FSDP every rank also writes
        its shards); every rank its RNG state. Written into a hidden folder beside the
        checkpoint, which rank 0 records (with each weight file's sha256) and renames into
        place when complete (:meth:`run_files.outputs.Output.staged`). A failed write (a full
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
                    self._write(staging)
                ckpt.prune(self.output, self.config.keep_checkpoints,
                           also=self.collapse.protected())
            else:
                self._write(path.with_name(f".{path.name}.partial"))
            self.world.barrier()  # renamed before any rank goes on
            return path
        except (OSError, SafetensorError) as error:  # safetensors' own I/O error
            earlier = ckpt.latest_intact_checkpoint(self.config.output_dir)
            after = (f"the latest intact checkpoint is {earlier.name}, which --resume takes"
                     if earlier else "no intact checkpoint is left")
            reason = getattr(error, "strerror", None) or error
            raise ckpt.CheckpointWriteError(f"could not write checkpoint {path} ({reason}); "
                                            f"removed the partial one; {after}") from None

    def _write(self, path: Path) -> None:
        """Every rank's part of a checkpoint, into the staging folder ``path`` (made by rank 0)."""
        from safetensors.torch import save_file

        world, update = self.world, self.update
        model, optimizer = update.model, update.optimizer
        world.barrier()  # rank 0 has made the folder
        if world.sharded:  # each rank its shards; the whole weights gathered on rank 0
            world.save_sharded(model, optimizer, path / "sharded")
            model_state = world.full_weights(model)
            if update.critic is not None:  # only resume reads the critic: its shards suffice
                world.save_sharded(update.critic, update.critic_optimizer,
                                   path / "critic-sharded")
        if world.is_main:  # (DDP: the ranks' weights and optimizer states are identical)
            if world.sharded:  # a plain HF folder, for paw-gym eval and HFPolicy
                model.save_pretrained(str(path / "model"), state_dict=model_state,
                                      safe_serialization=True)
            else:
                ckpt.save_model(model, path / "model")
                ckpt.save_optimizer(optimizer, path / "optimizer")
            self.tokenizer.save_pretrained(str(path / "model"))  # the model dir loads on its own
            if update.critic is not None and not world.sharded:
                save_file({k: v.contiguous() for k, v in update.critic.state_dict().items()},
                          str(path / "critic.safetensors"))
                ckpt.save_optimizer(update.critic_optimizer, path / "critic_optimizer")
        ahead = self.sampler.drain(self.step)
        if ahead is not None:  # async_rollouts (one process): what the next updates train on
            (path / AHEAD_FILE).write_text(rollouts_to_json(ahead), encoding="utf-8")
        tensors, rng_meta = ckpt.rng_state()
        save_file(tensors, str(path / ckpt.rng_file(world.rank)))
        rng_states = world.gather([rng_meta])
        world.barrier()
        if world.is_main:
            state = {"step": self.step, "skipped_updates": update.skipped_updates,
                     "scheduler": update.scheduler.state_dict(), "rng": rng_states[0],
                     "world_size": world.world_size, "rank_rng": rng_states[1:],
                     "config": asdict(self.config), "collapse": self.collapse.state(),
                     "machine": machine()}
            if ahead is not None:
                state["rollouts_ahead"] = {"max_staleness": self.config.max_staleness,
                                           "steps": [rollout.step for rollout in ahead]}
            # state.json last: a checkpoint without it is incomplete.
            ckpt.write_json_atomically(path / "state.json", state)
        world.barrier()

    # -- resume -------------------------------------------------------------------------------
    def resume(self, out: Path, resume: str | Path | bool) -> None:
        """Load the given checkpoint, or (``resume=True``) the newest intact one in ``out``: a
        damaged newer checkpoint (a kill while it was written, a bad disk) is moved aside whole
        (:func:`training.infra.checkpoint.set_aside`: the run writes that step again), and a
        warning names the damage and the step the run really continues from."""
        if resume is not True:
            self.load(resume)
            return
        candidates = ckpt.checkpoints_newest_first(out)
        if not candidates:
            raise FileNotFoundError(f"--resume: no checkpoint under {out / 'checkpoints'}")
        damaged: list[tuple[Path, Exception]] = []
        taken = None
        for path in candidates:
            try:
                self.load(path)
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

    def load(self, path: str | Path) -> None:
        """Restore everything from ``path`` (checked first: a damaged file is a
        ``CheckpointError`` naming it, raised before anything is loaded)."""
        path = Path(path)
        state = ckpt.verify_checkpoint(path)
        ckpt.check_same_weights(path, state.get("config") or {}, self.config)
        self._load_weights(path)
        self.update.scheduler.load_state_dict(state["scheduler"])
        self.update.set_learning_rates()
        self.sampler.ahead = self._rollouts_ahead(path, state)
        self._restore_rng(path, state)
        self.step = int(state["step"])
        self.update.skipped_updates = int(state.get("skipped_updates", 0))
        self.collapse = CollapseWatch.from_state(state.get("collapse", {}))
        self.resumed_from, self.resumed_config = path, state.get("config")
        self.resumed_machine = state.get("machine") if isinstance(state.get("machine"), dict) \
            else None

    def _load_weights(self, path: Path) -> None:
        """The weights and optimizer state (and the critic's) of the checkpoint ``path``."""
        from safetensors.torch import load_file

        update = self.update
        if self.world.sharded:
            shards = [(update.model, update.optimizer, path / "sharded")]
            if update.critic is not None:
                shards.append((update.critic, update.critic_optimizer, path / "critic-sharded"))
            for module, optimizer, folder in shards:
                try:
                    self.world.load_sharded(module, optimizer, folder)
                except Exception as error:  # noqa: BLE001  (DCP reports damage in many ways)
                    reason = f"{type(error).__name__}: {str(error)[:200]}"
                    raise ckpt.CheckpointError(f"{folder} is damaged or incomplete "
                                               f"({reason})") from None
        else:
            ckpt.load_trainable_weights(update.model, path / "model")
            ckpt.load_optimizer(update.optimizer, path / "optimizer")
            if update.critic is not None:
                update.critic.load_state_dict(load_file(str(path / "critic.safetensors")))
                ckpt.load_optimizer(update.critic_optimizer, path / "critic_optimizer")

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
        except (OSError, ValueError) as error:  # ValueError: the data file's file:line
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

    def announce_resume(self, out: Path) -> None:
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
        elif saved_mode == "native" and {"cpu_kind", "cpu_capability"} <= set(
                self.resumed_machine) and numerics_key(self.resumed_machine) != numerics_key():
            print(f"warning: {self.resumed_from.name} was computed on "
                  f"{kernels_phrase(self.resumed_machine)} and this run computes on "
                  f"{kernels_phrase(machine())}: in 'native' numerics another CPU kind or "
                  "kernel choice can round float sums differently, so the run continues but "
                  "its numbers from here may not be those it would have made there (a run "
                  "started with PAW_GYM_NUMERICS=portable computes the same on every x86-64 CPU "
                  "with SSE4.1)", file=sys.stderr, flush=True)
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

    def interrupt_report(self, out: Path) -> str:
        """What an interrupted run has on disk and how to continue it."""
        saved = ckpt.checkpoints_newest_first(out)
        if not saved:
            return (f"interrupted at step {self.step}: no checkpoint was saved yet (save_every="
                    f"{self.config.save_every}); metrics and curves are in {out}")
        return (f"interrupted at step {self.step}; the last checkpoint is {saved[0]}; metrics "
                f"and curves are in {out}.\nContinue with: paw-gym train --config "
                f"{out / 'config.yaml'} --resume")

    # -- collapse -----------------------------------------------------------------------------
    def watch_collapse(self, metrics: dict[str, Any], episodes: int, version: int) -> bool:
        """Whether the update just done (``episodes`` rollouts sampled by weights ``version``)
        collapsed the run (:mod:`training.infra.collapse`): then one line says so and names
        the best checkpoint, and ``on_collapse`` acts. True when the run stops."""
        if not self.collapse.observe(self.step, metrics, episodes, self.config.collapse_patience,
                                     version):
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
            self.update.set_learning_rates()
            self.collapse.restart()
            self.sampler.forget_weights()  # the rollouts sampled ahead came from the collapse
        return action == "stop"
