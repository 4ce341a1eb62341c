"""What every ``paw-gym`` command shares besides its flags: :class:`UserError` (a mistake
printed as one line, no traceback), the claim of output folders and files, and the
``env_kwargs`` text. The checks of an env id, a model and a writable folder are
:mod:`training.preflight`'s (its :class:`~training.preflight.PreflightError` is printed as a
:class:`UserError` is)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from training.preflight import check_writable


class UserError(Exception):
    """A mistake in what the user asked for: printed as one line, no traceback."""


def claim_output_folder(folder: str | Path, command: str, overwrite: bool,
                        flag: str = "--output_dir", writes=()):
    """A command's output folder, before any work: writable, and claimed through the output
    guard (:func:`run_files.outputs.claim_folder`: ``writes`` as there); either mistake is one
    :class:`UserError`. The claim ends with the command (``training.cli``)."""
    from run_files.outputs import OutputExists, claim_folder

    check_writable(folder, flag)
    try:
        return claim_folder(folder, command, overwrite, flag=flag, writes=writes)
    except OutputExists as error:
        raise UserError(str(error)) from None


def claim_output_files(paths: list[Path], overwrite: bool, flag: str, folder_flag: str) -> None:
    """A command's output files (all in one folder), before any work: none there already unless
    ``overwrite`` (:func:`run_files.outputs.claim_file`), and their folder writable."""
    from run_files.outputs import OutputExists, claim_file

    try:
        for path in paths:
            claim_file(path, overwrite, flag)
    except OutputExists as error:
        raise UserError(str(error)) from None
    check_writable(Path(paths[0]).parent, folder_flag)


def parse_env_kwargs(text: str) -> dict[str, Any]:
    """The one env-kwargs syntax of every command: ``'{split: test, n_items: 8}'`` (YAML or
    JSON) or ``split=test,n_items=8`` (values read as YAML); a :class:`UserError` names the
    bad item."""
    from training.infra.config_values import parse_mapping

    try:
        return parse_mapping(text)
    except ValueError as error:
        raise UserError(f"env_kwargs {error}") from None
