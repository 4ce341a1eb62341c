"""One output guard for every command: nothing a user has is overwritten or deleted unless
they pass ``--overwrite true``, and then only what paw-gym recorded writing; one writer per
folder; no half-written output that looks whole; weight files checked when loaded.

A command claims the folder it writes into before any expensive work (:func:`claim_folder`),
which returns an :class:`Output`:

* **The manifest** (:data:`MARKER`, JSON in the folder) names the command, its arguments, and
  every file it writes, recorded *before* it is written: literal paths and patterns relative to
  the folder, matched one path component at a time (``*`` stays inside a component, ``**``
  spans any number of them; a trailing ``/`` names a folder). A path is paw-gym's when it
  matches a record; a folder is paw-gym's when it is recorded or lies on the way to a record
  (one starting with ``**``, as :data:`INTERNAL`'s, makes no folder paw-gym's).
* **Overwrite** removes exactly the recorded files, then the recorded folders left empty. It
  never follows a symlink (a symlink is never paw-gym's: it is kept), never removes a folder
  by name, and reports what it kept. A user's entry where the command will write (a file at a
  recorded name, a folder on the way to one) is *in the way*: the claim is refused, naming it.
  A folder without a readable manifest holds nothing of paw-gym's.
* **One writer**: the claim holds an exclusive ``flock`` on :data:`LOCK` until the command
  ends (the kernel drops it when the process dies); a second claim is refused with the
  holder's pid and command line.
* **Atomic outputs**: :meth:`Output.staged` writes a model, checkpoint or result set into a
  hidden folder beside its target (recorded first, so an interrupted one is removable), records
  each file and the size and sha256 of each weight file, then renames it into place. The
  manifest's ``complete`` is set last, by :meth:`Output.finish`.
* **Integrity**: :func:`verify_output` refuses an incomplete output (one line: what to rerun)
  and a weight file whose size or sha256 differs from the manifest (naming the file).

    >>> out = claim_folder("runs/sft", "sft", False, writes=MODEL_FILES)  # doctest: +SKIP
    >>> with out.staged(".") as folder:                                    # doctest: +SKIP
    ...     model.save_pretrained(folder)
    >>> out.finish()                                                       # doctest: +SKIP

A single output file (a figure, an exported corpus) is claimed with :func:`claim_file`: an
existing file is refused unless ``overwrite``; :func:`write_text_atomically` writes it.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import itertools
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Iterator, Sequence

#: The manifest of a claimed folder.
MARKER = ".paw-gym-output.json"
#: The lock file of a claimed folder (held with ``flock`` while a command writes it).
LOCK = ".paw-gym-lock"
#: The files of a saved Hugging Face model or peft adapter (what a model folder may hold).
MODEL_FILES = ("config.json", "generation_config.json", "*.safetensors", "*.safetensors.index.json",
               "tokenizer*", "special_tokens_map.json", "added_tokens.json", "vocab.json",
               "merges.txt", "chat_template.jinja", "adapter_config.json", "README.md")
#: Recorded in every claimed folder: the temporary files of :func:`write_text_atomically`.
INTERNAL = ("**/.*.tmp",)
#: Weight files: their size and sha256 go into the manifest and are checked on load.
WEIGHT_SUFFIXES = (".safetensors", ".bin")
_CHUNK = 1 << 22


class OutputExists(FileExistsError):
    """The output is there already (``--overwrite`` not given), or a user's file is in the way."""


class OutputLocked(OutputExists):
    """Another command is writing the folder now."""


class IncompleteOutput(ValueError):
    """An output whose writing was interrupted (the message says what to rerun)."""


class IntegrityError(ValueError):
    """A weight file differs from what its manifest recorded (the message names it)."""


#: This process's claims that are still being written, by resolved folder.
_ACTIVE: dict[Path, "Output"] = {}


class Output:
    """A claimed output folder: see the module docstring. Made by :func:`claim_folder`."""

    def __init__(self, folder: Path, command: str, lock_handle):
        self.folder = folder
        self._lock = lock_handle
        self.manifest = {"command": command, "argv": _command_line(), "pid": os.getpid(),
                         "complete": False, "written": [], "sha256": {}}

    # -- records ---------------------------------------------------------------------------
    def record(self, *names: str) -> None:
        """Record ``names`` (paths or patterns relative to the folder; ``dir/`` for a folder)
        as this command's, before writing them."""
        new = [name for name in names if name not in self.manifest["written"]]
        if new:
            self.manifest["written"] += new
            self._save()

    def forget(self, relative: str) -> None:
        """Drop the records of ``relative`` and everything under it (after removing it)."""
        prefix = relative.rstrip("/") + "/"
        keep = lambda name: name != relative and not name.startswith(prefix)  # noqa: E731
        self.manifest["written"] = [n for n in self.manifest["written"] if keep(n)]
        self.manifest["sha256"] = {n: v for n, v in self.manifest["sha256"].items() if keep(n)}
        self._save()

    def remove(self, relative: str) -> None:
        """Remove what this command recorded under ``relative`` (a pruned checkpoint), and
        nothing else."""
        path = self.folder / relative
        if path.is_dir() and not path.is_symlink():
            _remove_recorded(path, _parts(relative), self.manifest["written"], [])
            with contextlib.suppress(OSError):  # kept when something of the user's is inside
                path.rmdir()
        elif path.is_file() and not path.is_symlink() and \
                _is_recorded(_parts(relative), self.manifest["written"], folder=False):
            path.unlink()
        self.forget(relative)

    @contextlib.contextmanager
    def staged(self, target: str) -> Iterator[Path]:
        """Yield a fresh hidden folder beside ``target`` (relative; ``"."`` for the claimed
        folder itself) to write into; on success record every file in it (weight files with
        size and sha256) and move it into place. An exception leaves nothing at ``target``."""
        relative = "/".join(_parts(os.path.normpath(target)))
        if relative.startswith(".."):
            raise ValueError(f"{target!r} is outside {self.folder}")
        parent, _, name = relative.rpartition("/")
        staging_rel = f"{parent + '/' if parent else ''}.{name or 'output'}.partial"
        self.record(f"{staging_rel}/", f"{staging_rel}/**")
        staging = self.folder / staging_rel
        if staging.exists():
            self.remove(staging_rel)
        staging.mkdir(parents=True)
        try:
            yield staging
            files = _files(staging)
            names = [(relative + "/" if relative else "") + p.relative_to(staging).as_posix()
                     for p in files]
            self._clear_the_way(relative, names)
            # Recorded before they move: a kill during the moves leaves only recorded names.
            self.manifest["sha256"].update({name: file_digest(path) for name, path
                                            in zip(names, files)
                                            if path.suffix in WEIGHT_SUFFIXES})
            self.record(*([f"{relative}/"] if relative else []), *names)
            if relative:
                os.replace(staging, self.folder / relative)
            else:  # into the claimed folder itself, file by file
                _move_files(files, staging, self.folder)
                shutil.rmtree(staging)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        self.forget(staging_rel)

    def _clear_the_way(self, relative: str, names: Sequence[str]) -> None:
        """Before a save moves into place: an earlier save of ``relative`` by this command goes
        (by its records); a file of someone else's where the save goes is an
        :class:`OutputExists` naming it."""
        target = self.folder / relative
        if relative and (target.exists() or target.is_symlink()):
            self.remove(relative)
            blocking = [relative] if target.exists() or target.is_symlink() else []
        else:
            blocking = [name for name in names if (self.folder / name).is_symlink() or (
                (self.folder / name).exists() and not _is_recorded(
                    _parts(name), self.manifest["written"], folder=False))]
        if blocking:
            raise OutputExists(f"{str(self.folder / blocking[0])!r} is in the way of the save "
                               "and paw-gym did not write it; move it away and rerun")

    # -- end -------------------------------------------------------------------------------
    def finish(self) -> None:
        """Mark the output complete (written last) and release the folder."""
        self.manifest["complete"] = True
        self._save()
        self.release()

    def release(self) -> None:
        """Release the folder without marking it complete (the command failed)."""
        _ACTIVE.pop(self.folder, None)
        if self._lock is not None:
            self._lock.close()  # closing the file drops the flock
            self._lock = None

    def __enter__(self) -> "Output":
        return self

    def __exit__(self, kind, *_) -> None:
        if kind is None:
            self.finish()
        else:
            self.release()

    def _save(self) -> None:
        write_text_atomically(self.folder / MARKER, json.dumps(self.manifest, indent=1))


# -- claiming ------------------------------------------------------------------------------
def claim_folder(folder: str | Path, command: str, overwrite: bool, flag: str = "--output_dir",
                 writes: Sequence[str] = (), records: Sequence[str] = (),
                 resume: bool = False) -> Output:
    """Take ``folder`` as ``command``'s output. ``writes``: the paths and patterns (see the
    module docstring) the command may write, where a user's entry is in the way; ``records``:
    those it writes in place rather than through :meth:`Output.staged` (a log, a config),
    recorded as its own now.

    Refused (:class:`OutputExists`) when the folder holds anything and neither ``overwrite``
    nor ``resume`` is given, when a user's entry is in the way, or when another command holds
    it (:class:`OutputLocked`). With ``overwrite``, the earlier command's recorded files are
    removed first; with ``resume``, its records are kept. A folder this process already
    claimed is returned as it is, with ``records`` added."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise OutputExists(f"{flag} {str(folder)!r} is a file; give a folder")
    active = _ACTIVE.get(folder.resolve())
    if active is not None:
        active.manifest["command"] = command
        active.record(*records)
        return active
    earlier = check_folder(folder, command, overwrite, flag, writes, resume)
    folder.mkdir(parents=True, exist_ok=True)
    output = Output(folder.resolve(), command, _lock(folder, flag))
    # The earlier records stay in the manifest until their files are gone: a kill while they
    # go leaves an incomplete output whose rest a rerun still removes.
    output.manifest["written"] = list(earlier.get("written", []))
    output.manifest["sha256"] = dict(earlier.get("sha256", {}))
    output.manifest["written"] += [name for name in (*INTERNAL, *records)
                                   if name not in output.manifest["written"]]
    output._save()
    if overwrite and not resume:
        kept: list[str] = []
        removed = _remove_recorded(folder, (), earlier.get("written", []), kept)
        if kept:
            print(f"{flag} {str(folder)!r}: removed {removed} files an earlier paw-gym command "
                  f"wrote; kept {len(kept)} entries it did not write: {', '.join(kept[:8])}"
                  f"{' …' if len(kept) > 8 else ''}", file=sys.stderr, flush=True)
        output.manifest["written"] = [*INTERNAL, *records]
        output.manifest["sha256"] = {}
        output._save()
    _ACTIVE[output.folder] = output
    return output


def check_folder(folder: str | Path, command: str, overwrite: bool, flag: str = "--output_dir",
                 writes: Sequence[str] = (), resume: bool = False) -> dict:
    """:func:`claim_folder`'s refusals without changing anything (every rank of a launch runs
    it); returns the earlier manifest (``{}`` when there is none)."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise OutputExists(f"{flag} {str(folder)!r} is a file; give a folder")
    if not folder.is_dir():
        return {}
    holder = lock_holder(folder)
    if holder:
        raise _locked(folder, flag, holder)
    earlier = read_manifest(folder)
    entries = sorted(p.name for p in folder.iterdir() if p.name not in (MARKER, LOCK))
    if entries and not overwrite and not resume:
        what = f"the output of an earlier `paw-gym {earlier['command']}`" \
            if earlier.get("command") else f"{len(entries)} entries paw-gym did not write"
        hint = "pass --resume to continue it, " if command == "train" and \
            earlier.get("command") == "train" else ""
        raise OutputExists(f"{flag} {str(folder)!r} already holds {what}; {hint}pass "
                           "--overwrite true to replace it (only what paw-gym wrote there is "
                           f"removed), or choose another {flag}")
    if resume:  # the run's own folder, as it is
        return earlier
    for path in _walk_foreign(folder, earlier.get("written", [])):
        if _in_the_way(path, writes):
            raise OutputExists(f"{flag} {str(folder)!r} holds {path!r}, which paw-gym did not "
                               f"write and `paw-gym {command}` would write over; move it away, "
                               f"or choose another {flag}")
    return earlier


def read_manifest(folder: str | Path) -> dict:
    """The manifest of ``folder`` (``{}`` when absent or unreadable)."""
    try:
        manifest = json.loads((Path(folder) / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(manifest, dict) or not isinstance(manifest.get("written", []), list) \
            or not isinstance(manifest.get("sha256", {}), dict):
        return {}
    return manifest


def lock_holder(folder: Path) -> str | None:
    """Who holds ``folder``'s lock in another process ("pid N (`command line`)"), or None."""
    import fcntl

    path = Path(folder) / LOCK
    if not path.is_file() or Path(folder).resolve() in _ACTIVE:
        return None
    try:
        handle = open(path, encoding="utf-8")
    except OSError:  # unreadable: the claim itself will say why
        return None
    with handle:
        try:  # shared: the ranks of a launch probe at once
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return handle.read().strip() or "another process"
        return None


def _locked(folder: Path, flag: str, holder: str) -> OutputLocked:
    return OutputLocked(f"{flag} {str(folder)!r} is being written by {holder}; wait for it to "
                        f"finish, or choose another {flag}")


def _lock(folder: Path, flag: str):
    import fcntl

    handle = open(folder / LOCK, "a+", encoding="utf-8")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise _locked(folder, flag, holder) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()} (`{' '.join(_command_line())}`)")
    handle.flush()
    return handle


def close_claims(complete: bool) -> None:
    """End every claim of this process still open (a command's exit): finished when the
    command succeeded, otherwise released as incomplete."""
    for output in list(_ACTIVE.values()):
        output.finish() if complete else output.release()


@contextlib.contextmanager
def staged(path: str | Path) -> Iterator[Path]:
    """Write the folder ``path`` atomically: :meth:`Output.staged` of this process's claim that
    holds it (the innermost), or, outside any claim (a library call), a hidden folder beside
    it whose files move into place when written."""
    path = Path(path)
    claims = sorted((root for root in _ACTIVE if path.resolve().is_relative_to(root)),
                    key=lambda root: len(root.parts), reverse=True)
    if claims:
        relative = path.resolve().relative_to(claims[0]).as_posix()
        with _ACTIVE[claims[0]].staged(relative) as folder:
            yield folder
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent))
    try:
        yield staging
        _move_files(_files(staging), staging, path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


# -- loading -------------------------------------------------------------------------------
def verify_output(path: str | Path, hashes: bool = True) -> None:
    """Refuse ``path`` (a model, adapter or checkpoint folder) when its writing was
    interrupted (:class:`IncompleteOutput`) or a weight file under it is missing or differs
    from the size and sha256 its manifest recorded (:class:`IntegrityError`; ``hashes=False``:
    only whether each is there, for a check before the load, which hashes). Paths no manifest
    covers pass: nothing was recorded of them."""
    path = Path(path).resolve()
    if any(part.endswith(".partial") for part in path.parts):
        raise IncompleteOutput(f"{str(path)!r} is an incomplete save (the command writing it "
                               "was stopped); use the output it was to become, or rerun")
    root = next((p for p in (path, *path.parents) if (p / MARKER).is_file()), None)
    if root is None:
        return
    manifest = read_manifest(root)
    if path == root and not manifest.get("complete", True) and root not in _ACTIVE:
        holder = lock_holder(root)
        if holder:
            raise IncompleteOutput(f"{str(path)!r} is still being written by {holder}; wait "
                                   "for it to finish")
        rerun = " ".join(manifest.get("argv") or [f"paw-gym {manifest.get('command')} …"])
        raise IncompleteOutput(f"{str(path)!r} is incomplete: `paw-gym "
                               f"{manifest.get('command')}` stopped before it finished "
                               f"writing it; rerun it with --overwrite true ({rerun})")
    below = path.relative_to(root).as_posix()
    below = "" if below == "." else below + "/"
    for name, recorded in sorted(manifest.get("sha256", {}).items()):
        if not name.startswith(below):
            continue
        file = root / name
        if not file.is_file():
            raise IntegrityError(f"{file} is missing (recorded in {root / MARKER})")
        if hashes and file_digest(file) != recorded:
            raise IntegrityError(f"{file} is damaged: its size or sha256 differs from "
                                 f"what was recorded when it was written ({root / MARKER})")


def file_digest(path: Path) -> dict:
    """``{"size": bytes, "sha256": hex}`` of a file."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return {"size": path.stat().st_size, "sha256": digest.hexdigest()}


# -- single files --------------------------------------------------------------------------
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
    path = Path(path)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


# -- matching and removing -----------------------------------------------------------------
def _parts(name: str) -> tuple[str, ...]:
    return tuple(part for part in name.strip("/").split("/") if part not in ("", "."))


def _matches(parts: tuple[str, ...], pattern: tuple[str, ...], prefix: bool = False) -> bool:
    """Whether ``parts`` matches ``pattern`` component by component (``**``: any number of
    components); with ``prefix``, also whether it is a folder on the way to a match."""
    if not pattern:
        return not parts
    if pattern[0] == "**":
        return any(_matches(parts[i:], pattern[1:], prefix) for i in range(len(parts) + 1))
    if not parts:
        return prefix
    return fnmatch.fnmatchcase(parts[0], pattern[0]) and _matches(parts[1:], pattern[1:],
                                                                   prefix)


def _is_recorded(parts: tuple[str, ...], written: Sequence[str], folder: bool) -> bool:
    """Whether ``parts`` is a recorded file, or (``folder``) a recorded folder or one on the way
    to a record; a record starting with ``**`` (any depth) makes no folder paw-gym's."""
    return any(_matches(parts, _parts(name), prefix=folder) for name in written
               if not (folder and name.startswith("**")))


def _in_the_way(entry: str, writes: Sequence[str]) -> bool:
    """Whether a user's ``entry`` (a folder ends in ``/``) is where ``writes`` go: a folder at
    or on the way to a written path, a file at a written path or where a folder the command
    names literally will be."""
    parts = _parts(entry)
    for name in writes:
        pattern = _parts(name)
        if entry.endswith("/") or name.endswith("/"):
            if _matches(parts, pattern, prefix=True):
                return True
        elif _matches(parts, pattern):
            return True
        literal = tuple(itertools.takewhile(lambda part: not any(c in part for c in "*?["),
                                            pattern[:-1]))
        if not entry.endswith("/") and _matches(parts, literal, prefix=True):
            return True
    return False


def _entries(directory: Path, written: Sequence[str],
             parts: tuple[str, ...] = ()) -> Iterator[tuple[str, Path, bool]]:
    """Every entry under ``directory`` as ``(name relative to the claimed folder, path, whether
    paw-gym's)``, a folder after its contents. A folder that is not paw-gym's is one entry
    (``name/``), not entered; a symlink is never paw-gym's and never followed. A recorded
    folder with a manifest of its own (a command's output nested in another's) goes by its own
    records; its manifest and lock count as paw-gym's when nothing in it is someone else's."""
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        here = parts + (entry.name,)
        name, path = "/".join(here), Path(entry.path)
        if not parts and entry.name in (MARKER, LOCK):
            continue
        if not entry.is_dir(follow_symlinks=False):
            yield name, path, not entry.is_symlink() and _is_recorded(here, written, folder=False)
        elif not _is_recorded(here, written, folder=True):
            yield name + "/", path, False
        else:
            if (path / MARKER).is_file():
                inner = [(f"{name}/{relative}", item, ours) for relative, item, ours
                         in _entries(path, read_manifest(path).get("written", []))]
                yield from inner
                if all(ours for *_, ours in inner):
                    yield from ((f"{name}/{own}", path / own, True) for own in (MARKER, LOCK)
                                if (path / own).is_file())
            else:
                yield from _entries(path, written, here)
            yield name + "/", path, True


def _walk_foreign(folder: Path, written: Sequence[str]) -> Iterator[str]:
    """The entries of ``folder`` that are not paw-gym's (:func:`_entries`)."""
    return (name for name, _, ours in _entries(folder, written) if not ours)


def _remove_recorded(directory: Path, parts: tuple[str, ...], written: Sequence[str],
                     kept: list[str]) -> int:
    """Remove the recorded files under ``directory`` (then its recorded folders left empty),
    append what is not paw-gym's to ``kept``, return the number of files removed
    (:func:`_entries` decides which are paw-gym's)."""
    removed = 0
    for name, path, ours in _entries(directory, written, parts):
        if not ours:
            kept.append(name)
        elif name.endswith("/"):
            with contextlib.suppress(OSError):  # kept when something of the user's is inside
                path.rmdir()
        else:
            path.unlink()
            removed += path.name not in (MARKER, LOCK)  # a nested output's own, not a file
    return removed


def _files(folder: Path) -> list[Path]:
    """The files under ``folder`` (no symlinks), sorted."""
    return sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def _move_files(files: Sequence[Path], staging: Path, target: Path) -> None:
    """Move each of ``files`` (under ``staging``) to the same place under ``target``."""
    for file in files:
        destination = target / file.relative_to(staging)
        destination.parent.mkdir(parents=True, exist_ok=True)
        os.replace(file, destination)


def _command_line() -> list[str]:
    argv = list(sys.argv)
    if argv and (Path(argv[0]).name == "paw-gym" or argv[0].endswith("training/cli.py")):
        argv[0] = "paw-gym"
    return argv
