"""What every ``paw-gym`` command shares besides its flags: :class:`UserError` (a mistake
printed as one line, no traceback) and the checks a command makes before any work (an env id
and its settings, ``env_kwargs`` text, output folders and files)."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any


class UserError(Exception):
    """A mistake in what the user asked for: printed as one line, no traceback."""


def check_file_name(name: str | None, flag: str) -> None:
    """A ``--name`` that names files inside ``--out``: a plain file name, so that nothing is
    written outside ``--out`` (``--name ../../x`` did)."""
    if name is not None and (not name.strip() or Path(name).name != name
                             or name in (".", "..")):
        raise UserError(f"{flag} {name!r}: give a plain file name (no folders); the files go "
                        "into --out")


def require_writable(folder: str | Path, flag: str) -> None:
    """Fail before any work when ``folder`` cannot be created or written (a read-only disk, a
    file in the way), instead of after an evaluation or a training run."""
    import tempfile

    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise UserError(f"{flag} {str(folder)!r} is not writable ({error.strerror or error}); "
                        "choose a folder you can write") from error


def claim_output_folder(folder: str | Path, command: str, overwrite: bool,
                        flag: str = "--output_dir") -> None:
    """A command's output folder, before any work: writable, and claimed through the output
    guard (:func:`training.infra.outputs.claim_folder`); either mistake is one :class:`UserError`."""
    from training.infra.outputs import OutputExists, claim_folder

    require_writable(folder, flag)
    try:
        claim_folder(folder, command, overwrite, flag=flag)
    except OutputExists as error:
        raise UserError(str(error)) from None


def claim_output_files(paths: list[Path], overwrite: bool, flag: str, folder_flag: str) -> None:
    """A command's output files (all in one folder), before any work: none there already unless
    ``overwrite`` (:func:`training.infra.outputs.claim_file`), and their folder writable."""
    from training.infra.outputs import OutputExists, claim_file

    try:
        for path in paths:
            claim_file(path, overwrite, flag)
    except OutputExists as error:
        raise UserError(str(error)) from None
    require_writable(Path(paths[0]).parent, folder_flag)


def check_env(env_id: str, env_kwargs: dict[str, Any] | None = None) -> None:
    """A :class:`UserError` (one line) when ``env_id`` is not a registered env, listing this
    project's and the user's text envs and the nearest id, or when ``env_kwargs`` holds a key
    its constructor does not take. Builds nothing (an env can be expensive to build)."""
    import gymnasium as gym

    from agents.envs import check_env_settings
    import paw_gym

    if env_id not in gym.registry:
        text_envs = list(paw_gym.list_text_envs())
        nearest = difflib.get_close_matches(env_id, text_envs, n=1)
        hint = f"did you mean {nearest[0]}? " if nearest else ""
        raise UserError(f"unknown env id {env_id!r}; {hint}registered text envs: "
                        f"{', '.join(text_envs)} (`paw-gym envs` describes them)")
    try:
        check_env_settings(env_id, env_kwargs)
    except ValueError as error:
        raise UserError(str(error)) from None


def parse_env_kwargs(text: str) -> dict[str, Any]:
    """The one env-kwargs syntax of every command: ``'{split: test, n_items: 8}'`` (YAML or
    JSON) or ``split=test,n_items=8`` (values read as YAML); a :class:`UserError` names the
    bad item."""
    from training.infra.config_values import parse_mapping

    try:
        return parse_mapping(text)
    except ValueError as error:
        raise UserError(f"env_kwargs {error}") from None
