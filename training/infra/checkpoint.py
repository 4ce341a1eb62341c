"""Checkpoints without pickle: weights, optimizer and RNG tensors in safetensors, the rest JSON.

Layout of ``<output_dir>/checkpoints/step-000010/``:

    model/               peft adapter (adapter_model.safetensors) or full model (model.safetensors)
    critic.safetensors   PPO critic weights (PPO only)
    optimizer.safetensors + optimizer.json      per-parameter state tensors / param groups
    critic_optimizer.*   same for the critic (PPO only)
    state.json           step, scheduler states, Python/NumPy RNG states, metrics so far
    rng.safetensors      torch CPU (and CUDA) RNG states
"""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from run_files.data_files import DataFileError
from run_files.outputs import (IncompleteOutput, IntegrityError, check_folder, verify_output,
                               write_text_atomically)
from training.infra.data_files import read_checkpoint_state
from training.infra.model_config import is_adapter_dir
from training.infra.metrics_log import run_folder

STEP_PREFIX = "step-"
#: A checkpoint folder's name: ``step-`` and the step, 6 digits or more (``step-000002-backup``
#: or ``step-000003.damaged-…`` is not one: the user's, or set aside).
STEP_NAME = re.compile(rf"{STEP_PREFIX}([0-9]{{6,}})")
#: The patterns of the names a run writes checkpoints at (steps up to 10^12 - 1).
STEP_PATTERNS = tuple(STEP_PREFIX + "[0-9]" * digits for digits in range(6, 13))


def checkpoint_dir(output_dir: str | Path, step: int) -> Path:
    return Path(output_dir) / "checkpoints" / f"{STEP_PREFIX}{step:06d}"


def checkpoint_step(path: str | Path) -> int:
    """The step of a checkpoint folder, read from its name (:data:`STEP_NAME`): the inverse of
    :func:`checkpoint_dir`."""
    match = STEP_NAME.fullmatch(Path(path).name)
    if match is None:
        raise ValueError(f"{path} is not a checkpoint folder: expected a name like "
                         f"{STEP_PREFIX}000002")
    return int(match[1])


class CheckpointError(ValueError):
    """A checkpoint file is damaged (the message names it)."""


class CheckpointMismatch(ValueError):
    """An intact checkpoint of another model or LoRA setting than the run resuming it."""


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (a full disk, a quota); the partial one is removed and
    the earlier checkpoints are untouched."""


#: The settings that fix the shapes of the saved weights: a resume must keep them.
WEIGHT_SETTINGS = ("model", "lora", "lora_r", "lora_target_modules", "sharding", "algo")


def checkpoints_newest_first(output_dir: str | Path) -> list[Path]:
    """The complete checkpoints (with a ``state.json``) under ``output_dir``, newest first
    (only folders named as a run names them: :data:`STEP_NAME`)."""
    root = Path(output_dir) / "checkpoints"
    found = [(int(match[1]), p) for p in root.glob(f"{STEP_PREFIX}*")
             if (match := STEP_NAME.fullmatch(p.name)) and (p / "state.json").is_file()]
    return [path for _, path in sorted(found, reverse=True)]


def verify_checkpoint(path: str | Path, hashes: bool = True) -> dict[str, Any]:
    """The checkpoint's state, once its weight files match the sizes and sha256 its run's
    manifest recorded, its ``state.json`` matches its schema
    (:data:`training.infra.data_files.CHECKPOINT_STATE`) and every safetensors file in it has an
    intact header covering its data; a damaged file is a :class:`CheckpointError` naming it.
    ``hashes=False`` leaves the sha256 to the load that follows (``eval`` reads the model only,
    and its load checks it)."""
    path = Path(path)
    try:  # an interrupted save, a weight file other than the one recorded when it was written
        verify_output(path, hashes=hashes)
    except (IncompleteOutput, IntegrityError) as error:
        raise CheckpointError(str(error)) from None
    state_file = path / "state.json"
    if not state_file.is_file():
        raise FileNotFoundError(f"{path} is not a complete checkpoint (no state.json)")
    try:
        state = read_checkpoint_state(state_file)
    except DataFileError as error:
        raise CheckpointError(f"{state_file} is damaged (line {error.line}: {error.reason})") \
            from None
    for optimizer in sorted(path.glob("*optimizer.json")):
        try:
            meta = json.loads(optimizer.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise CheckpointError(f"{optimizer} is damaged (not valid JSON: {error})") from None
        if not isinstance(meta, dict) or not {"param_groups", "scalars"} <= set(meta):
            raise CheckpointError(f"{optimizer} is damaged (no 'param_groups' and 'scalars')")
    check_safetensors(path.rglob("*.safetensors"))
    return state


def check_same_weights(path: Path, recorded: dict[str, Any], config: Any) -> None:
    """A :class:`CheckpointMismatch` when the checkpoint at ``path`` was trained with other
    :data:`WEIGHT_SETTINGS` than ``config``: its weights have other shapes."""
    changed = [f"{key} {recorded[key]!r} there, {getattr(config, key)!r} here"
               for key in WEIGHT_SETTINGS if key in recorded
               and recorded[key] != getattr(config, key)]
    if changed:
        raise CheckpointMismatch(f"{path} was saved with other weight settings "
                                 f"({'; '.join(changed)}); resume with the run's own settings, "
                                 "or start a new run in another --output_dir")


def check_safetensors(files) -> None:
    """A safetensors file whose header is damaged or does not cover its data (empty,
    truncated, garbage) is a :class:`CheckpointError` naming it (the loaders would fail with
    a bare ``StopIteration`` or a header error)."""
    from safetensors import SafetensorError, safe_open

    for tensors in sorted(files):
        try:
            with safe_open(str(tensors), "pt") as handle:
                handle.keys()
        except (SafetensorError, OSError) as error:
            raise CheckpointError(f"{tensors} is damaged ({error})") from None


def write_json_atomically(path: Path, payload: Any) -> None:
    """Write JSON through :func:`run_files.outputs.write_text_atomically`."""
    write_text_atomically(path, json.dumps(payload))


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    """The highest-step complete checkpoint under ``output_dir`` (None if there is none)."""
    done = checkpoints_newest_first(output_dir)
    return done[0] if done else None


def latest_intact_checkpoint(output_dir: str | Path) -> Path | None:
    """The highest-step checkpoint under ``output_dir`` that :func:`verify_checkpoint` passes
    (the one ``--resume`` takes; None if there is none)."""
    for path in checkpoints_newest_first(output_dir):
        try:
            verify_checkpoint(path)
        except (CheckpointError, OSError):
            continue
        return path
    return None


def set_aside(output, path: Path) -> Path:
    """Move the damaged checkpoint ``path`` of the claimed run folder ``output``
    (:class:`run_files.outputs.Output`) aside whole, as ``<name>.damaged-<time>``, before the run
    writes that step again: nothing in it is deleted (a damaged file is not provably paw-gym's,
    and its intact files are the evidence), and from then on it is the user's. The caller says
    so in one line. Returns the new path."""
    return output.set_aside(path.relative_to(output.folder).as_posix())


def resolve_checkpoint(path: str | Path) -> tuple[Path, str | None]:
    """What ``paw-gym eval --checkpoint`` loads from ``path``: a checkpoint, saved model or
    adapter folder as given; a training run folder, or a ``paw-gym demo`` folder (its run is
    ``rl/``), its latest complete checkpoint. Returns ``(folder, note)``, the note saying which
    checkpoint was picked (None when ``path`` is used as given)."""
    path = Path(path)
    if any((path / name).is_file() for name in ("state.json", "config.json",
                                                 "adapter_config.json")):
        return path, None
    run = run_folder(path)
    if (run / "checkpoints").is_dir():
        latest = latest_checkpoint(run)
        if latest is None:
            raise FileNotFoundError(f"{str(path)!r} is a training run with no complete "
                                    f"checkpoint in {str(run / 'checkpoints')!r}")
        return latest, f"using {latest}, the latest checkpoint of {path}"
    return path, None


def train_writes(config) -> tuple[str, ...]:
    """Where a run of ``config`` writes in its output_dir: the output guard
    (:mod:`run_files.outputs`) refuses, before any work, a user's entry there; each file is
    recorded by its own path as it is written."""
    writes = ["config.yaml", *(f"config.before-{step}.yaml" for step in STEP_PATTERNS),
              "metrics.jsonl", "curves.png",
              *(f"checkpoints/{step}/**" for step in STEP_PATTERNS),
              *(f"checkpoints/.{step}.partial/**" for step in STEP_PATTERNS)]
    if config.record_replay:
        writes.append("replay/update-[0-9]*.jsonl")
    if config.tensorboard:
        writes.append("tensorboard/**")
    if config.wandb:
        writes.append("wandb/**")
    if config.rollout_backend == "vllm" and config.lora:
        writes.append("rollout-adapter*/**")
    return tuple(writes)


def check_model_override(checkpoint: Path, model: str | None) -> None:
    """A ``--model`` given with a ``--checkpoint`` that holds a whole model (its weights and
    tokenizer: the model evaluated is its own) would do nothing and be named in the results:
    a ValueError. A LoRA adapter's checkpoint takes it as its base model."""
    if model is None:
        return
    folder = checkpoint / "model" if (checkpoint / "model").is_dir() else checkpoint
    if folder.is_dir() and not is_adapter_dir(folder) and (folder / "config.json").is_file() \
            and (folder / "tokenizer_config.json").is_file():
        raise ValueError(f"{str(checkpoint)!r} holds a whole model, which is what is "
                         f"evaluated; --model {model!r} would do nothing: leave it out (--model "
                         "is the base model of a LoRA adapter checkpoint)")


def check_output_dir(config, resume: bool | str | Path) -> None:
    """Refuse, before any work, to start a new run where anything is (a new run's checkpoint
    pruning would delete its own checkpoints in favour of an old run's higher steps, and a
    later ``--resume`` would load the old run), a user's entry where the run writes, and a
    folder another command is writing (:func:`run_files.outputs.check_folder`); with
    ``resume`` (True: the latest checkpoint; or a checkpoint folder), a checkpoint saved with
    other :data:`WEIGHT_SETTINGS` than ``config``'s."""
    check_folder(config.output_dir, "train", config.overwrite, writes=train_writes(config),
                 resume=bool(resume))
    if resume:
        newest = checkpoints_newest_first(config.output_dir)
        path = Path(resume) if resume is not True else newest[0] if newest else None
        try:
            recorded = read_checkpoint_state(path).get("config") if path else None
        except (DataFileError, OSError):
            return  # damaged: the resume passes over it, saying so, or names it
        check_same_weights(path, recorded or {}, config)


def save_optimizer(optimizer: torch.optim.Optimizer, path: Path) -> None:
    state = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for index, values in state["state"].items():
        for name, value in values.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{index}.{name}"] = value.detach().cpu().contiguous()
            else:
                scalars.setdefault(str(index), {})[name] = value
    save_file(tensors, str(path.with_suffix(".safetensors")))
    path.with_suffix(".json").write_text(json.dumps(
        {"param_groups": state["param_groups"], "scalars": scalars}), encoding="utf-8")


def load_optimizer(optimizer: torch.optim.Optimizer, path: Path) -> None:
    meta = json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))
    tensors = load_file(str(path.with_suffix(".safetensors")))
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        index, name = key.split(".", 1)
        state.setdefault(int(index), {})[name] = value
    for index, values in meta["scalars"].items():
        state.setdefault(int(index), {}).update(values)
    optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})


def rng_state() -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    tensors = {"torch_cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"torch_cuda_{i}"] = s
    py = random.getstate()
    np_state = np.random.get_state()
    meta = {"python": [py[0], list(py[1]), py[2]],
            "numpy": [np_state[0], np_state[1].tolist(), *map(float, np_state[2:])]}
    return tensors, meta


def rng_file(rank: int) -> str:
    """The checkpoint file of rank ``rank``'s torch RNG state."""
    return "rng.safetensors" if rank == 0 else f"rng-rank{rank}.safetensors"


def restore_rng(tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
    torch.set_rng_state(tensors["torch_cpu"])
    if torch.cuda.is_available():
        states = [tensors[k] for k in sorted(tensors) if k.startswith("torch_cuda_")]
        if states:
            torch.cuda.set_rng_state_all(states)
    version, internal, gauss = meta["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = meta["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), int(pos), int(has_gauss), cached))


def save_model(model, path: Path) -> None:
    """peft adapter or full model, safetensors either way."""
    model.save_pretrained(str(path), safe_serialization=True)


def load_trainable_weights(model, path: Path) -> None:
    """Load weights written by :func:`save_model` into an already built ``model`` in place."""
    if hasattr(model, "get_base_model"):
        from peft.utils import set_peft_model_state_dict
        from peft.utils.save_and_load import load_peft_weights

        set_peft_model_state_dict(model, load_peft_weights(str(path)))
        return
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no safetensors weights in {path}")
    state: dict[str, torch.Tensor] = {}
    for file in files:
        state.update(load_file(str(file)))
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as error:  # a tensor of another shape: another model
        first = str(error).split("size mismatch for ", 1)[-1].split("\n", 1)[0]
        raise CheckpointMismatch(f"checkpoint {path} holds the weights of another model "
                                 f"({first}); resume with the model it was trained from") \
            from None
    # Tied embeddings are saved once; anything else missing means a different architecture.
    missing = [k for k in missing if "lm_head" not in k]
    if missing or unexpected:
        raise CheckpointMismatch(f"checkpoint {path} does not match the model: "
                                 f"missing={missing[:5]} unexpected={unexpected[:5]}")


def prune(output, keep: int, also: Sequence[str | Path] = ()) -> None:
    """Delete all but the ``keep`` most recent checkpoints of the claimed run folder
    ``output`` (:class:`run_files.outputs.Output`) and the checkpoints ``also`` (the run's best
    and those waiting for their score, :mod:`training.infra.collapse`): the files it recorded,
    nothing else."""
    kept = {Path(path).name for path in also}
    done = checkpoints_newest_first(output.folder)
    for old in done[keep:] if keep > 0 else []:
        if old.name not in kept:
            left = output.remove(old.relative_to(output.folder).as_posix())
            if left:  # a damaged file (no longer provably paw-gym's) or a user's: one line
                print(f"paw-gym: --keep_checkpoints {keep}: pruned {old.name} but kept "
                      f"{len(left)} entries in it paw-gym cannot prove it wrote (changed since, "
                      f"or the user's): {', '.join(map(repr, left[:4]))}; they are the user's "
                      "now", file=sys.stderr, flush=True)
