"""One output guard for every command: nothing a user has is overwritten or deleted unless
they pass ``--overwrite true``.

A command claims the folder it writes into before any expensive work (:func:`claim_folder`):

* a folder that does not exist, or is empty, is created and claimed;
* a folder with anything in it is refused, naming the flag that replaces it;
* with ``overwrite``, what an earlier paw-gym command created there is removed first, and
  nothing else: the claim marker (:data:`MARKER`) lists the entries the folder already held
  when it was claimed, so a user's own files next to a run survive a rerun (without a
  readable marker nothing is removed; the command then writes over its own file names only).

A single output file (a figure, an exported corpus) is claimed with :func:`claim_file`: an
existing file is refused unless ``overwrite``.

    >>> claim_folder("runs/sft", "sft", overwrite=False)          # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

#: The file in a claimed folder naming the command and what the folder held before it.
MARKER = ".paw-gym-output.json"


class OutputExists(FileExistsError):
    """The output is there already, and ``--overwrite`` was not given."""


def claim_folder(folder: str | Path, command: str, overwrite: bool,
                 flag: str = "--output_dir") -> Path:
    """Create or take over ``folder`` as ``command``'s output; see the module docstring."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise OutputExists(f"{flag} {str(folder)!r} is a file; give a folder")
    # A folder holding nothing but a claim is empty: claiming it again (a command, then the
    # function it calls) is no overwrite.
    entries = sorted(p.name for p in folder.iterdir() if p.name != MARKER) \
        if folder.is_dir() else []
    if entries and not overwrite:
        earlier = _marker(folder).get("command")
        what = f"the output of an earlier `paw-gym {earlier}`" if earlier else \
            f"{len(entries)} entries paw-gym did not write"
        raise OutputExists(f"{flag} {str(folder)!r} already holds {what}; pass --overwrite true "
                           "to replace it (only what paw-gym wrote there is removed), or choose "
                           f"another {flag}")
    foreign = entries
    kept = _marker(folder).get("foreign")
    if isinstance(kept, list):  # the earlier claim's record of what was not paw-gym's
        for name in foreign:
            if name not in kept:
                path = folder / name
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()
        foreign = [name for name in foreign if name in kept]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MARKER).write_text(json.dumps({"command": command, "foreign": foreign}),
                                 encoding="utf-8")
    return folder


def claim_file(path: str | Path, overwrite: bool, flag: str) -> Path:
    """Refuse an existing ``path`` unless ``overwrite`` (whether its folder can be written is
    ``training.preflight.check_writable``'s question)."""
    path = Path(path)
    if path.is_dir():
        raise OutputExists(f"{flag} {str(path)!r} is a folder; give a file name")
    if path.exists() and not overwrite:
        raise OutputExists(f"{flag} {str(path)!r} already exists; pass --overwrite true to "
                           f"replace it, or choose another {flag}")
    return path


def write_text_atomically(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path`` and rename it into place: a kill
    leaves the old file or the new one, never half of one."""
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


def _marker(folder: Path) -> dict:
    try:
        marker = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return marker if isinstance(marker, dict) else {}
