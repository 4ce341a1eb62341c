"""Everything a training run can get wrong in its config, checked once, before any weight loads.

:func:`preflight` takes a :class:`~training.config.TrainConfig` (already valid field by field:
its own ``__post_init__`` checks types and ranges) and checks what needs the world outside it,
the local checks first and the one that may ask the hub last:

1. the env: a registered id and ``env_kwargs`` its constructor takes, each of the type its
   annotation declares (a split among the declared ones), and, with validation on, a
   ``val_split`` the env has; the env's own ``check_settings`` (``PaW/Remote-v0``: a server
   answers at ``url``). Nothing is built;
   the machine: a ``device`` it has, a ``dtype`` that runs there, an importable vLLM for
   ``rollout_backend: vllm`` (:func:`check_arguments`, which every command's arguments also
   go through);
2. the launch: at least one rollout group per process;
3. the outputs: ``output_dir`` holds no earlier run (unless resuming or ``overwrite``);
4. the model: a folder holding a Hugging Face model, or a hub id the cache or the hub has
   (``init_checkpoint``, like every path a field reads, is checked when the config is made);
   with LoRA, every ``lora_target_modules`` name is a layer of it (built on the meta device
   from its config);
5. ``output_dir`` can be written (created if missing: the only thing preflight leaves).

The first mistake is one :class:`PreflightError` (a ``ValueError``) naming the bad value and
what is accepted. ``paw-gym train`` and ``paw-gym demo`` call it before any other work, and
:class:`~training.trainer.PaWTrainer` calls it before it loads the model, for callers that
build a trainer in Python; the TRL integration calls the same env and model checks
(:func:`check_env`, :func:`check_model`) for its own config. None of it builds an env or loads
a weight, so calling it twice costs milliseconds.

Example:
    >>> from training.config import TrainConfig
    >>> preflight(TrainConfig(model="no/such-model-folder/x"))
    Traceback (most recent call last):
    ...
    training.preflight.PreflightError: model folder 'no/such-model-folder/x' does not exist
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any


class PreflightError(ValueError):
    """A mistake in a training config found before any work, in one line."""

    def __init__(self, message: str, missing_file: bool = False):
        super().__init__(message)
        #: The mistake is a file or folder that does not exist (a config may say how to build
        #: it: :func:`training.config.first_steps`).
        self.missing_file = missing_file


def check_env(env_id: str, env_kwargs: dict[str, Any] | None = None) -> None:
    """``env_id`` is registered (else the nearest id and the list), ``env_kwargs`` are
    arguments of its constructor (and give every one it needs), each value fits the
    argument's annotation (``n_items=abc`` for an ``int``, ``split=dev`` for
    ``Literal['train', 'test']``), and the env's own ``check_settings`` classmethod, if it has
    one, accepts them (``PaW/Remote-v0``: a server answers at ``url``). Builds nothing; the one
    check of env settings every command runs (train, eval, play, serve-env, sft, train-wm,
    build-tiny-model, demo). Torch-free."""
    import inspect

    from paw_gym.registration import check_env_settings, env_creator, env_parameters
    from training.infra.checked_config import describe_kind, fits_type

    try:
        check_env_settings(env_id, env_kwargs)
        parameters = env_parameters(env_id) or {}
        for name, value in (env_kwargs or {}).items():
            kind = parameters[name].annotation if name in parameters else inspect.Parameter.empty
            if kind is inspect.Parameter.empty or isinstance(kind, str):
                continue  # nothing declared (or an annotation that does not resolve)
            if not fits_type(value, kind):
                raise ValueError(f"env_kwargs {name}={value!r} is invalid for {env_id}; "
                                 f"expected {describe_kind(kind)}")
        check_settings = getattr(env_creator(env_id), "check_settings", None)
        if callable(check_settings):
            check_settings(**(env_kwargs or {}))
    except ValueError as error:
        raise PreflightError(str(error)) from None


def check_expert(env_id: str, name: str = "agent") -> None:
    """``env_id`` has a scripted expert (``expert_action()``), which the expert agent, expert
    demos and build-tiny-model's episodes follow; ``PaW/Remote-v0``'s protocol has none."""
    from paw_gym.registration import has_expert

    if not has_expert(env_id):
        raise PreflightError(f"{name}: {env_id} has no scripted expert (expert_action()), so "
                             "no expert can play it; use the random agent or a policy")


def check_split(env_id: str, env_kwargs: dict[str, Any] | None, split: str | None,
                name: str = "val_split") -> None:
    """``split`` (``held-out``: the env's held-out split; None: no split) is a split of
    ``env_id``: one its constructor's ``split`` argument declares; then :func:`check_env` of
    ``env_kwargs`` with that split in place of theirs. Builds nothing."""
    import inspect

    from paw_gym.registration import check_env_id, env_creator, env_parameters
    from training.infra.checked_config import describe_kind, fits_type

    try:
        check_env_id(env_id)
    except ValueError as error:
        raise PreflightError(str(error)) from None
    kwargs = {k: v for k, v in (env_kwargs or {}).items() if k != "split"}
    if split == "held-out":  # an env without one plays its tasks unsplit
        split = getattr(env_creator(env_id), "held_out_split", None)
    if split is not None:
        parameters = env_parameters(env_id)
        if parameters is not None and "split" not in parameters:
            raise PreflightError(f"{name}={split!r}: {env_id} has no splits (it takes no split "
                                 f"argument); give none")
        kind = parameters["split"].annotation if parameters else inspect.Parameter.empty
        if kind is not inspect.Parameter.empty and not isinstance(kind, str) and \
                not fits_type(split, kind):
            raise PreflightError(f"{name}={split!r} is not a split of {env_id}; expected "
                                 f"{describe_kind(kind)}")
        kwargs["split"] = split
    check_env(env_id, kwargs)


#: Accepted spellings of a device (the machine is asked by :func:`check_device`).
DEVICE_PATTERN = r"cpu|cuda(:\d+)?|mps|xpu(:\d+)?"


def machine_devices() -> list[str]:
    """The devices this machine (this Python's torch) can run on: ``cpu`` and each GPU."""
    import torch

    devices = ["cpu"]
    if torch.cuda.is_available():
        devices += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        devices.append("mps")
    if hasattr(torch, "xpu") and torch.xpu.is_available():
        devices += [f"xpu:{i}" for i in range(torch.xpu.device_count())]
    return devices


def check_device(device: str | None, name: str = "device") -> None:
    """``device`` (None: CUDA when available) is spelled right and exists on this machine;
    the error names the devices it has."""
    import re

    if device is None or device == "cpu":
        return  # no torch import for the common case
    if not isinstance(device, str) or not re.fullmatch(DEVICE_PATTERN, device):
        raise PreflightError(f"{name}={device!r} is invalid; expected cpu, cuda, cuda:N, mps, "
                             f"xpu or none (CUDA when available)")
    have = machine_devices()
    kind, _, index = device.partition(":")
    if any(d == device or d.split(":")[0] == kind and not index for d in have):
        return
    import torch

    why = {"cuda": "no CUDA GPU" + ("" if torch.version.cuda else
                                    ", and this torch is built without CUDA"),
           "mps": "no Apple MPS device", "xpu": "no Intel XPU"}[kind]
    if index and any(d.startswith(kind) for d in have):
        why = f"no {device}"
    raise PreflightError(f"{name}={device!r} is not available: this machine has {why}; its "
                         f"devices: {', '.join(have)}")


def check_dtype(dtype: str, device: str | None, name: str = "dtype") -> None:
    """``dtype`` is one of :data:`training.infra.model_config.WeightDtype` and runs on
    ``device`` (resolved as the trainer resolves None): bfloat16 on a GPU without it, float64
    on MPS are refused."""
    import typing

    from training.infra.model_config import WeightDtype

    accepted = typing.get_args(WeightDtype)
    if dtype not in accepted:
        raise PreflightError(f"{name}={dtype!r} is invalid; expected {' | '.join(accepted)}")
    if dtype in ("auto", "float32") or device == "cpu":
        return
    import torch

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and dtype == "bfloat16" and torch.cuda.is_available() and \
            not torch.cuda.is_bf16_supported():
        raise PreflightError(f"{name}='bfloat16' does not run on this machine's GPU "
                             f"({torch.cuda.get_device_name()}); use float16 or float32")
    if device == "mps" and dtype == "float64":
        raise PreflightError(f"{name}='float64' does not run on mps; use float32 or device cpu")


def check_rollout_backend(backend: str, name: str = "rollout_backend") -> None:
    """``vllm`` needs vLLM importable by this Python (:func:`training.models.check_vllm_installed`)."""
    from training.models import check_vllm_installed

    if backend == "vllm":
        try:
            check_vllm_installed(name)
        except ValueError as error:
            raise PreflightError(str(error)) from None


#: Fields of a command's arguments (any dataclass, by name) that name something of this
#: machine, checked by :func:`check_arguments` once the values are valid field by field.
MACHINE_FIELDS = ("device", "dtype", "rollout_backend")


def check_arguments(arguments: Any) -> None:
    """What a command's arguments say about this machine, for every command alike
    (``training.commands.flags.arguments_from`` calls it): a ``device`` it has, a ``dtype``
    that runs there, a ``rollout_backend`` that is installed."""
    device = getattr(arguments, "device", None)
    if isinstance(device, str) or device is None and hasattr(arguments, "device"):
        check_device(device)
    dtype = getattr(arguments, "dtype", None)
    if isinstance(dtype, str):
        check_dtype(dtype, device if isinstance(device, str) else None)
    backend = getattr(arguments, "rollout_backend", None)
    if isinstance(backend, str):
        check_rollout_backend(backend)


def check_model(model: str | Path) -> str:
    """``model`` is a model folder, a hub id, a .gguf file or an offline model's name that can
    be loaded (no weight is read; a name or .gguf file is fetched or converted the first time:
    :mod:`agents.model_sources`); returns what to load (the folder of a name or .gguf)."""
    from agents.hf_policy import check_model_source

    try:
        return check_model_source(model)
    except FileNotFoundError as error:
        raise PreflightError(str(error), missing_file=True) from None
    except ValueError as error:
        raise PreflightError(str(error)) from None


def model_context(source: str | Path | None) -> int | None:
    """The context length (``max_position_embeddings``) the model at ``source`` declares in
    its ``config.json``: a model folder, a checkpoint (its ``model/``), or a LoRA adapter (its
    base model's); a hub id or offline name from the cache. None where it cannot be read here
    (the load says it then). No weight is read."""
    import json

    from agents.model_sources import resolve_model

    if source is None:
        return None
    try:
        folder = Path(resolve_model(str(source)))
    except (OSError, ValueError):
        return None
    for _ in range(3):  # a checkpoint's model/, an adapter's base: a few hops at most
        if (folder / "model").is_dir() and not (folder / "config.json").is_file():
            folder = folder / "model"
        try:
            if (folder / "config.json").is_file():
                value = json.loads((folder / "config.json").read_text(encoding="utf-8")).get(
                    "max_position_embeddings")
                return value if isinstance(value, int) and value > 0 else None
            base = json.loads((folder / "adapter_config.json").read_text(encoding="utf-8")).get(
                "base_model_name_or_path")
            folder = Path(resolve_model(str(base)))
        except (OSError, ValueError, TypeError, AttributeError):
            return None
    return None


def check_context(source: str | Path | None, max_new_tokens: int,
                  max_prompt_len: int | None = None, flag: str = "--max_new_tokens") -> None:
    """``max_new_tokens`` leaves room for a prompt in the context of the model at ``source``
    (:func:`model_context`, before any weight loads; with ``max_prompt_len`` the sampler's
    context is their sum: always room)."""
    context = None if max_prompt_len is not None else model_context(source)
    if context is not None and max_new_tokens >= context:
        raise PreflightError(f"{flag} {max_new_tokens} leaves no room for the prompt in the "
                             f"{context}-token context of {str(source)!r}; give at most "
                             f"{context - 1} (or fewer, so the prompts fit)")


def check_lora_targets(config) -> None:
    """With ``lora``, every ``lora_target_modules`` name is a layer of the model LoRA can wrap
    (read from its config on the meta device: no weight is read); a model whose config cannot
    be read here is checked when it loads (``training.models.build_policy``)."""
    from training.infra.model_config import is_adapter_dir
    from training.models import check_lora_targets as check, lora_layer_names

    if not config.lora or is_adapter_dir(config.init_checkpoint):
        return
    source = config.init_checkpoint or config.model
    names = lora_layer_names(str(source))
    if names is not None:
        try:
            check(config.lora_target_modules, names)
        except ValueError as error:
            raise PreflightError(str(error)) from None


def check_writable(folder: str | Path, name: str = "output_dir") -> None:
    """``folder`` can be created and written (not a read-only disk, no file in the way)."""
    if os.path.lexists(folder) and not Path(folder).is_dir():  # mkdir would say "File exists"
        what = "a symlink that leads to no folder (a loop, or a missing target)" \
            if Path(folder).is_symlink() else "not a folder"
        raise PreflightError(f"{name} {str(folder)!r} is {what}; give a folder")
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise PreflightError(f"{name} {str(folder)!r} is not writable "
                             f"({error.strerror or error}); choose a folder you can write"
                             ) from None


def preflight(config, *, resume: bool | str | Path = False, world_size: int = 1,
              model: bool = True, outputs: bool = True) -> None:
    """Check ``config``'s env, model, launch and outputs (see the module docstring).

    Args:
        config: a :class:`~training.config.TrainConfig`.
        resume: the run continues one in ``output_dir`` (its files are expected there): True
            from its latest checkpoint, or from the checkpoint folder given (either was
            saved with the same model, LoRA, sharding and algorithm).
        world_size: processes in the launch.
        model: check ``config.model`` (False where the caller builds it first, as the demo).
        outputs: check ``output_dir`` (False where the caller owns the folder, as the demo).
    """
    check_env(config.env_id, config.env_kwargs)
    if config.val_every > 0 or config.val_before_train:
        check_split(config.env_id, config.env_kwargs, config.val_split)
    check_arguments(config)  # device, dtype, rollout backend
    from training.infra.checkpoint import check_output_dir  # torch: once the env is known
    from training.infra.distributed import check_group_count

    try:
        check_group_count(config, world_size)
        if outputs:
            check_output_dir(config, resume)
    except (ValueError, FileExistsError) as error:
        raise PreflightError(str(error)) from None
    if model:
        check_model(config.model)
        check_lora_targets(config)
        check_context(config.init_checkpoint or config.model, config.max_new_tokens,
                      config.max_prompt_len)
    if outputs:  # last: it creates the folder, which no refused run should leave behind
        check_writable(config.output_dir)
