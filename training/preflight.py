"""Everything a training run can get wrong in its config, checked once, before any weight loads.

:func:`preflight` takes a :class:`~training.config.TrainConfig` (already valid field by field:
its own ``__post_init__`` checks types and ranges) and checks what needs the world outside it,
the local checks first and the one that may ask the hub last:

1. the env: a registered id and ``env_kwargs`` its constructor takes (nothing is built);
2. the launch: at least one rollout group per process;
3. the outputs: ``output_dir`` holds no earlier run (unless resuming or ``overwrite``);
4. the model: ``init_checkpoint``, when set, is a folder; the model is a folder holding a
   Hugging Face model, or a hub id the cache or the hub has;
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
    """``env_id`` is registered (else the nearest id and the list) and ``env_kwargs`` are
    arguments of its constructor; builds nothing."""
    from agents.envs import check_env_settings

    try:
        check_env_settings(env_id, env_kwargs)
    except ValueError as error:
        raise PreflightError(str(error)) from None


def check_model(model: str | Path) -> None:
    """``model`` is a model folder or a hub id that can be loaded (no weight is read)."""
    from agents.hf_policy import check_model_source

    try:
        check_model_source(model)
    except FileNotFoundError as error:
        raise PreflightError(str(error), missing_file=True) from None
    except ValueError as error:
        raise PreflightError(str(error)) from None


def check_writable(folder: str | Path, name: str = "output_dir") -> None:
    """``folder`` can be created and written (not a read-only disk, no file in the way)."""
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise PreflightError(f"{name} {str(folder)!r} is not writable "
                             f"({error.strerror or error}); choose a folder you can write"
                             ) from None


def preflight(config, *, resume: bool = False, world_size: int = 1, model: bool = True,
              outputs: bool = True) -> None:
    """Check ``config``'s env, model, launch and outputs (see the module docstring).

    Args:
        config: a :class:`~training.config.TrainConfig`.
        resume: the run continues one in ``output_dir`` (its files are expected there).
        world_size: processes in the launch.
        model: check ``config.model`` (False where the caller builds it first, as the demo).
        outputs: check ``output_dir`` (False where the caller owns the folder, as the demo).
    """
    check_env(config.env_id, config.env_kwargs)
    from training.infra.checkpoint import check_output_dir  # torch: once the env is known
    from training.infra.distributed import check_group_count

    try:
        check_group_count(config, world_size)
        if outputs:
            check_output_dir(config.output_dir, resume, config.overwrite)
    except (ValueError, FileExistsError) as error:
        raise PreflightError(str(error)) from None
    if config.init_checkpoint and not Path(config.init_checkpoint).is_dir():
        raise PreflightError(f"init_checkpoint {config.init_checkpoint!r} is not a folder",
                             missing_file=True)
    if model:
        check_model(config.model)
    if outputs:  # last: it creates the folder, which no refused run should leave behind
        check_writable(config.output_dir)
