"""One output guard for every command: nothing a user has is overwritten or deleted unless
they pass ``--overwrite true``, and then only files paw-gym can prove it wrote; one writer per
folder; no half-written output that looks whole; weight files checked when loaded.

A command claims the folder it writes into before any expensive work (:func:`claim_folder`),
which returns an :class:`Output`:

* **The manifest** (:data:`MARKER`, JSON in the folder) names the command and its arguments
  and records every file it writes by its literal path (never a pattern): when the file is
  created, with its inode (:func:`track`), and once written, with its size and sha256
  (:func:`seal`; :func:`write_text_atomically` and :meth:`Output.staged` do both). Folders
  paw-gym made, outputs nested in this one (a claim inside the claimed folder) and the staging
  folders of saves in progress are recorded by path too.
* **Proof.** ``--overwrite true`` removes a file only if the manifest records it, it lies
  where the command itself writes (its ``writes``, or inside a folder it writes into: a record
  of any other name proves nothing) and its size and sha256 still match the record (sizes are
  compared first); an interrupted save's hidden
  staging folder goes whole only when its inode is the one recorded when paw-gym made it.
  Everything else is the user's: kept, and named in one line (a recorded file that changed
  since is named as such). ``--resume`` (a run continuing, pruning or saving again its own
  output) also takes a recorded file that is still the same file (same inode) as its own, a
  damaged checkpoint or the shard it was writing when it was killed. A symlink is never
  followed and never paw-gym's.
* **The manifest is data from disk**: an absolute path, ``..``, an empty or control-character
  path, a malformed size or digest, an unknown key is ignored; a manifest that cannot be read
  or a file record not believed is said in one line (:func:`read_manifest`, once per process),
  and the files it covered are then the user's (kept, their weights not checked on load);
  names from it are printed with control characters escaped. The lock and the manifest are opened with ``O_NOFOLLOW``: a
  symlink (or anything but a plain file) there is refused in one line.
* **In the way.** Before any work, a claim refuses a user's entry where the command will write
  (its ``writes``: literal names and patterns, used only to refuse, never to delete): a file
  at a written name, a folder or symlink where a file goes, a symlink or file where a folder
  goes, a user's folder on the way to a written path.
* **One writer**: the claim holds an exclusive ``flock`` on :data:`LOCK` until the command
  ends (the kernel drops it when the process dies); a second claim is refused with the
  holder's pid and command line. Before every manifest write the writer checks that the lock
  file is still the one it holds: a lock deleted or replaced by hand stops it, in one line,
  before it writes over another command's manifest.
* **Atomic outputs**: :meth:`Output.staged` writes a model, checkpoint or result set into a
  hidden folder beside its target, records every file with its size and sha256 (in the
  claimed folder's manifest and, for a subfolder, in a manifest of the saved folder's own, so a
  copy taken out of its run is still checked), then renames it into place. The manifest's
  ``complete`` is set last, by :meth:`Output.finish`.
* **Integrity**: :func:`verify_output` refuses an incomplete output (one line: what to rerun)
  and a weight file whose size or sha256 differs from the nearest manifest (naming the file).

    >>> out = claim_folder("runs/sft", "sft", False, writes=MODEL_FILES)  # doctest: +SKIP
    >>> with out.staged(".") as folder:                                    # doctest: +SKIP
    ...     model.save_pretrained(folder)
    >>> out.finish()                                                       # doctest: +SKIP

A single output file (a figure, an exported corpus) is claimed with :func:`claim_file`: an
existing file is refused unless ``overwrite``; :func:`write_text_atomically` writes it.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import hashlib
import itertools
import json
import os
import re
import shutil
import stat
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

#: The manifest of a claimed folder (and of each folder a save wrote, for its own check).
MARKER = ".paw-gym-output.json"
#: The records since the manifest was last written whole (JSON Lines, appended).
JOURNAL = ".paw-gym-output.journal"
#: The lock file of a claimed folder (held with ``flock`` while a command writes it).
LOCK = ".paw-gym-lock"
#: The guard's own files in a claimed folder (its manifest is written through ``MARKER.tmp``).
OWN_FILES = (MARKER, JOURNAL, LOCK, MARKER + ".tmp")
#: Journal records between two whole writes of the manifest.
COMPACT_EVERY = 1000
#: The files of a saved Hugging Face model or peft adapter (where a model folder's save goes:
#: a user's entry there is in the way).
MODEL_FILES = ("config.json", "generation_config.json", "*.safetensors", "*.safetensors.index.json",
               "tokenizer*", "special_tokens_map.json", "added_tokens.json", "vocab.json",
               "merges.txt", "chat_template.jinja", "adapter_config.json", "README.md")
#: Weight files: a load checks their size and sha256 against the manifest (``.distcp``: an
#: FSDP checkpoint's shards, whose reader does not notice a flipped byte in their data).
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".distcp")
#: The manifest's format: 2 records literal paths with digests (1 recorded patterns: only its
#: literal ``sha256`` entries are believed).
FORMAT = 2
#: A manifest larger than this is not read (a run recording a million files stays far below).
MAX_MANIFEST_BYTES = 64 << 20
_CHUNK = 1 << 22
_SHA256 = re.compile(r"[0-9a-f]{64}")
_UMASK = os.umask(0)
os.umask(_UMASK)


class OutputExists(FileExistsError):
    """The output is there already (``--overwrite`` not given), or a user's entry is in the
    way, or the lock or manifest is not a plain file."""


class OutputLocked(OutputExists):
    """Another command is writing the folder now (or took it over while this one wrote)."""


class IncompleteOutput(ValueError):
    """An output whose writing was interrupted (the message says what to rerun)."""


class IntegrityError(ValueError):
    """A weight file differs from what its manifest recorded (the message names it)."""


#: The guard's refusals: each is one line for the user (``training.cli`` prints them so).
GUARD_ERRORS = (OutputExists, IncompleteOutput, IntegrityError)

#: This process's claims that are still being written, by resolved folder.
_ACTIVE: dict[Path, "Output"] = {}
#: sha256 of files already hashed by this process, by (device, inode, size, mtime): a claim's
#: check before the work and the same check under the lock hash a file once.
_HASHED: dict[tuple[int, int, int, int], str] = {}


def new_manifest(command: str) -> dict[str, Any]:
    """An empty manifest of ``command`` run by this process."""
    return {"format": FORMAT, "command": command, "argv": _command_line(), "pid": os.getpid(),
            "complete": False, "files": {}, "folders": [], "nested": [], "staging": {}}


class Output:
    """A claimed output folder: see the module docstring. Made by :func:`claim_folder`.

    Its manifest is kept in memory and on disk as a snapshot (:data:`MARKER`, written whole
    at the claim, every :data:`COMPACT_EVERY` records and at the end) plus a journal of the
    records since (:data:`JOURNAL`, one JSON line appended per record), so recording a file
    costs one small append however many files the output holds."""

    def __init__(self, folder: Path, command: str, flag: str, lock: int):
        self.folder = folder
        self.flag = flag
        self._lock = lock
        self._lock_identity = _identity(os.fstat(lock))
        self._journal: int | None = None
        self._logged = 0
        self.manifest = new_manifest(command)
        #: Files still being written: sealed again at every snapshot.
        self._open: set[str] = set()

    # -- records ---------------------------------------------------------------------------
    def track(self, relative: str) -> None:
        """Record the file ``relative`` (just created by this command) as being written."""
        info = _lstat(self.folder / relative)
        if info is not None and stat.S_ISREG(info.st_mode):
            self._open.add(relative)
            self._log("file", relative, {"inode": list(_identity(info))})

    def seal(self, relative: str) -> None:
        """Record the file ``relative`` as written: its size and sha256 as they are now (no
        longer tracked: a file written again is sealed again)."""
        self._open.discard(relative)
        record = self._sealed(relative)
        self._log(*(("file", relative, record) if record else ("forget", relative)))

    def nest(self, relative: str) -> None:
        """Record ``relative`` as a folder holding an output of its own (a claim in this one)."""
        if relative not in self.manifest["nested"]:
            self._log("nested", relative)

    def forget(self, relative: str) -> None:
        """Drop the records of ``relative`` and everything under it (after removing it)."""
        self._open = {name for name in self._open if not _under(name, relative)}
        self._log("forget", relative)

    def remove(self, relative: str) -> list[str]:
        """Remove what this command can prove it wrote under ``relative`` (a pruned
        checkpoint, a rejected game, replay shards a resumed run redoes): recorded files that
        match their record or are the very files it was writing (same inode), interrupted
        saves it staged, then its folders left empty. Returns what it kept."""
        survey = _survey(self.folder, self.manifest, by_inode=True, below=relative)
        _remove(survey)
        self.forget(relative)
        return survey.kept

    def set_aside(self, relative: str, label: str = "damaged") -> Path:
        """Rename the folder or file ``relative`` (a damaged save, or a file changed since,
        that this command is about to write again) whole to ``<name>.<label>-<time>`` beside
        it, dropping its records: nothing in it is deleted, and from then on it is the user's
        (``--overwrite`` keeps it, naming it). Returns the new path."""
        source = self.folder / relative
        stamp = time.strftime("%Y%m%d-%H%M%S")
        aside = source.with_name(f"{source.name}.{label}-{stamp}")
        for count in itertools.count(2):
            if not os.path.lexists(aside):
                break
            aside = source.with_name(f"{source.name}.{label}-{stamp}-{count}")
        os.rename(source, aside)
        self.forget(relative)
        return aside

    def not_ours(self, relative: str) -> list[str]:
        """The entries under ``relative`` this command cannot prove it wrote (what
        :meth:`remove` would keep)."""
        return _survey(self.folder, self.manifest, by_inode=True, below=relative).kept

    @contextlib.contextmanager
    def staged(self, target: str) -> Iterator[Path]:
        """Yield a fresh hidden folder beside ``target`` (relative; ``"."`` for the claimed
        folder itself) to write into; on success record every file in it with its size and
        sha256 (a subfolder also gets a manifest of its own) and move it into place. An
        exception leaves nothing at ``target``."""
        relative = _relative_name(target)
        parent, _, name = relative.rpartition("/")
        staging_rel = f"{parent + '/' if parent else ''}.{name or 'output'}.partial"
        staging = self.folder / staging_rel
        _no_symlink_on_the_way(self.folder, staging_rel, self.flag)
        if os.path.lexists(staging):  # an interrupted save of this name
            self.remove(staging_rel)
            if os.path.lexists(staging):
                raise OutputExists(f"{str(staging)!r} is in the way of the save and paw-gym "
                                   "did not make it; move it away and rerun")
        self._make_folders(parent)
        staging.mkdir()
        self._log("staging", staging_rel, list(_identity(os.lstat(staging))))
        try:
            yield staging
            digests = {path.relative_to(staging).as_posix(): file_digest(path)
                       for path in _files(staging)}
            if relative:  # the saved folder's own record: it is checked wherever it goes
                own = {**new_manifest(self.manifest["command"]), "complete": True,
                       "files": digests}
                _write_atomically(staging / MARKER, json.dumps(own, indent=1))
                digests[MARKER] = file_digest(staging / MARKER)
            # The inode too: a later --resume may replace what it saved, even damaged.
            names = {(relative + "/" if relative else "") + name:
                     {**digest, "inode": list(_identity(os.lstat(staging / name)))}
                     for name, digest in digests.items()}
            self._clear_the_way(relative, list(names))
            # Recorded before they move: a kill during the moves leaves only recorded files.
            for name, digest in names.items():
                self._log("file", name, digest)
            if relative:
                self._log("folder", relative)
                os.replace(staging, self.folder / relative)
            else:  # into the claimed folder itself, file by file
                _move_files(_files(staging), staging, self.folder)
                shutil.rmtree(staging)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            self._log("unstage", staging_rel, quiet=True)
            raise
        self._log("unstage", staging_rel)

    def _clear_the_way(self, relative: str, names: Sequence[str]) -> None:
        """Before a save moves into place: an earlier save of ``relative`` by this command goes
        (by its records); an entry of someone else's where the save goes is an
        :class:`OutputExists` naming it."""
        if relative:
            target = self.folder / relative
            if os.path.lexists(target):
                self.remove(relative)
            blocking = [relative] if os.path.lexists(target) else []
        else:
            for name in names:
                _no_symlink_on_the_way(self.folder, name, self.flag)
            ours = _survey(self.folder, self.manifest, by_inode=True)
            mine = {str(path) for path in ours.files}
            blocking = [name for name in names if os.path.lexists(self.folder / name)
                        and str(self.folder / name) not in mine]
        if blocking:
            raise OutputExists(f"{str(self.folder / blocking[0])!r} is in the way of the save "
                               "and paw-gym did not write it; move it away and rerun")

    def _make_folders(self, relative: str) -> None:
        """Make the folders of ``relative`` that are missing, recording each."""
        for depth in range(1, len(_parts(relative)) + 1):
            name = "/".join(_parts(relative)[:depth])
            if not os.path.lexists(self.folder / name):
                (self.folder / name).mkdir()
                self._log("folder", name)

    def _sealed(self, relative: str) -> dict | None:
        """The record of the file ``relative`` as it is now (None when it is not a file)."""
        path = self.folder / relative
        digest = _digest_if_file(path)
        return None if digest is None else \
            {**digest, "inode": list(_identity(os.lstat(path)))}

    # -- end -------------------------------------------------------------------------------
    def finish(self) -> None:
        """Mark the output complete (written last) and release the folder."""
        self.manifest["complete"] = True
        try:
            self._save()
        finally:
            self.release(save=False)

    def release(self, save: bool = True) -> None:
        """Release the folder without marking it complete (the command failed); the files it
        was writing are recorded as they are."""
        if self._lock is None:
            return
        whole = self._save(quiet=True) if save else self._still_ours(quiet=True)
        _ACTIVE.pop(self.folder, None)
        if self._journal is not None:
            os.close(self._journal)
            self._journal = None
        info = _lstat(self.folder / JOURNAL)
        if whole and info is not None and stat.S_ISREG(info.st_mode) and info.st_size == 0:
            (self.folder / JOURNAL).unlink()  # all in the manifest now
        os.close(self._lock)  # closing the file drops the flock
        self._lock = None

    def __enter__(self) -> "Output":
        return self

    def __exit__(self, kind, *_) -> None:
        if kind is None:
            self.finish()
        else:
            self.release()

    # -- the manifest on disk --------------------------------------------------------------
    def _log(self, *operation: Any, quiet: bool = False) -> None:
        """Apply one record to the manifest and append it to the journal (a snapshot every
        :data:`COMPACT_EVERY`), if the lock file is still this writer's."""
        _apply(self.manifest, list(operation))
        if not self._still_ours(quiet):
            return
        if self._journal is None:
            self._journal = os.open(self.folder / JOURNAL, os.O_WRONLY | os.O_APPEND
                                    | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        os.write(self._journal, (json.dumps(list(operation)) + "\n").encode())
        self._logged += 1
        if self._logged >= COMPACT_EVERY:
            self._save()

    def _save(self, quiet: bool = False) -> bool:
        """Write the manifest whole (the open files sealed as they are now) and empty the
        journal, if the lock file is still this writer's (returns whether it was)."""
        if not self._still_ours(quiet):
            return False
        for relative in sorted(self._open):
            record = self._sealed(relative)
            _apply(self.manifest, ["file", relative, record] if record else
                   ["forget", relative])
        _write_atomically(self.folder / MARKER, json.dumps(self.manifest, indent=1))
        if self._journal is None and os.path.lexists(self.folder / JOURNAL):
            self._journal = os.open(self.folder / JOURNAL, os.O_WRONLY | os.O_APPEND
                                    | os.O_NOFOLLOW | os.O_CLOEXEC)
        if self._journal is not None:
            os.ftruncate(self._journal, 0)
        self._logged = 0
        return True

    def _still_ours(self, quiet: bool) -> bool:
        """Whether the lock file is still the one this writer locked; otherwise another
        command may be writing the folder, and this one stops (``quiet``: False, on the way
        out of an error; else :class:`OutputLocked`)."""
        if self._lock is None:
            return False
        if _identity(_lstat(self.folder / LOCK)) == self._lock_identity:
            return True
        if quiet:
            return False
        raise OutputLocked(
            f"{self.flag} {str(self.folder)!r}: its lock file {LOCK} was removed or replaced "
            f"while `paw-gym {self.manifest['command']}` wrote it, so another command may be "
            "writing it too; this one stopped without touching its manifest. Check the "
            "folder, then rerun one command at a time")


def _apply(manifest: dict, operation: list) -> None:
    """One journal record on a manifest (the writer's in memory, or one read from disk)."""
    kind, name = operation[0], operation[1]
    if kind == "file":
        manifest["files"][name] = operation[2]
    elif kind == "forget":
        for key in ("files", "staging"):
            manifest[key] = {n: v for n, v in manifest[key].items() if not _under(n, name)}
        for key in ("folders", "nested"):
            manifest[key] = [n for n in manifest[key] if not _under(n, name)]
    elif kind in ("folder", "nested"):
        key = kind if kind == "nested" else "folders"
        manifest[key] += [] if name in manifest[key] else [name]
    elif kind == "staging":
        manifest["staging"][name] = operation[2]
    elif kind == "unstage":
        manifest["staging"].pop(name, None)


# -- recording writes from anywhere -----------------------------------------------------------
def track(path: str | Path) -> None:
    """Record ``path``, a file just created inside a folder this process has claimed, as being
    written by that claim (nothing outside a claim)."""
    found = _claim_of(path)
    if found:
        found[0].track(found[1])


def seal(path: str | Path) -> None:
    """Record ``path`` (a file inside a folder this process has claimed) as written, with its
    size and sha256 now (nothing outside a claim)."""
    found = _claim_of(path)
    if found:
        found[0].seal(found[1])


def _claim_of(path: str | Path, itself: bool = False) -> tuple[Output, str] | None:
    """The innermost claim of this process holding ``path`` (``itself``: or claiming it) and
    the path relative to it (``"."`` for the claimed folder)."""
    if not _ACTIVE:
        return None
    path = Path(path)
    absolute = path.parent.resolve() / path.name
    for root in sorted(_ACTIVE, key=lambda r: len(r.parts), reverse=True):
        if (itself or absolute != root) and absolute.is_relative_to(root):
            relative = absolute.relative_to(root).as_posix()
            output = _ACTIVE[root]
            if relative in OWN_FILES or any(_under(relative, staging) for staging
                                            in output.manifest["staging"]):
                return None  # a save in progress is recorded whole when it ends
            return output, relative
    return None


# -- claiming ------------------------------------------------------------------------------
def claim_folder(folder: str | Path, command: str, overwrite: bool, flag: str = "--output_dir",
                 writes: Sequence[str] = (), resume: bool = False) -> Output:
    """Take ``folder`` as ``command``'s output. ``writes``: the paths and patterns (see
    :func:`_in_the_way`) where the command will write, where a user's entry is in the way.

    Refused (:class:`OutputExists`) when the folder holds anything and neither ``overwrite``
    nor ``resume`` is given, when a user's entry is in the way, when the lock or manifest is a
    symlink, or when another command holds it (:class:`OutputLocked`). With ``overwrite``, the
    files the earlier command provably wrote are removed first; with ``resume``, its records
    are kept. A folder this process already claimed is returned as it is."""
    folder = Path(folder)
    active = _ACTIVE.get(folder.resolve()) if folder.is_dir() else None
    if active is not None:
        active.manifest["command"] = command
        return active
    check_folder(folder, command, overwrite, flag, writes, resume)  # refusals before changes
    made = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    had_lock = os.path.lexists(folder / LOCK)
    lock = _lock(folder, flag)
    try:  # again under the lock: another command may have written it in between
        earlier, survey = _check(folder, command, overwrite, flag, writes, resume, locked=True)
        output = Output(folder.resolve(), command, flag, lock)
    except BaseException:  # refused: the folder is left as it was found
        with contextlib.suppress(OSError):
            if not had_lock:
                (folder / LOCK).unlink()
            if made:
                folder.rmdir()
        os.close(lock)
        raise
    # The earlier records stay in the manifest until their files are gone: a kill while they
    # go leaves an incomplete output whose rest a rerun still removes.
    for key in ("files", "staging"):
        output.manifest[key] = dict(earlier.get(key, {}))
    for key in ("folders", "nested"):
        output.manifest[key] = list(earlier.get(key, []))
    output._save()
    if overwrite and not resume:
        # A record is proof only where this command writes: a manifest's record of any other
        # name (a user's notes.txt with its exact digest) removes nothing.
        elsewhere = {path.relative_to(folder).as_posix(): path for path in survey.files
                     if not _written(path.relative_to(folder).as_posix(), writes)}
        survey.files = [path for path in survey.files if path not in elsewhere.values()]
        survey.kept += [name for name, path in elsewhere.items() if path.name not in OWN_FILES]
        removed = _remove(survey)
        if survey.kept:
            shown = [_printable(name) + (" (changed since paw-gym wrote it)"
                                         if name in survey.changed else
                                         f" (not where `paw-gym {command}` writes)"
                                         if name in elsewhere else "")
                     for name in survey.kept[:8]]
            print(f"{flag} {str(folder)!r}: removed {removed} files an earlier paw-gym command "
                  f"wrote; kept {len(survey.kept)} entries it did not write: {', '.join(shown)}"
                  f"{' …' if len(survey.kept) > 8 else ''}", file=sys.stderr, flush=True)
        output.manifest.update(files={}, folders=[], nested=[], staging={})
        output._save()
    _ACTIVE[output.folder] = output
    parent = _claim_of(output.folder)
    if parent:
        parent[0].nest(parent[1])
    return output


def check_folder(folder: str | Path, command: str, overwrite: bool, flag: str = "--output_dir",
                 writes: Sequence[str] = (), resume: bool = False) -> dict:
    """:func:`claim_folder`'s refusals without changing anything (every rank of a launch runs
    it); returns the earlier manifest (``{}`` when there is none)."""
    return _check(Path(folder), command, overwrite, flag, writes, resume)[0]


def _check(folder: Path, command: str, overwrite: bool, flag: str, writes: Sequence[str],
           resume: bool, locked: bool = False) -> tuple[dict, "_Survey"]:
    """:func:`check_folder`, returning the :class:`_Survey` too (``locked``: this process
    holds the folder's lock)."""
    if os.path.lexists(folder) and not folder.is_dir():
        raise OutputExists(f"{flag} {str(folder)!r} is a file; give a folder")
    if not folder.is_dir():
        return {}, _Survey()
    for own in OWN_FILES:
        info = _lstat(folder / own)
        if info is not None and not stat.S_ISREG(info.st_mode):
            raise OutputExists(f"{flag} {str(folder)!r}: {own} is "
                               f"{'a symlink' if stat.S_ISLNK(info.st_mode) else 'not a file'}; "
                               "paw-gym never writes through one: remove it, or choose another "
                               f"{flag}")
    holder = None if locked else lock_holder(folder)
    if holder:
        raise _locked(folder, flag, holder)
    earlier = read_manifest(folder)
    entries = sorted(p.name for p in folder.iterdir() if p.name not in OWN_FILES)
    if entries and not overwrite and not resume:
        what = f"the output of an earlier `paw-gym {_printable(earlier['command'])}`" \
            if earlier.get("command") else f"{len(entries)} entries paw-gym did not write"
        hint = "pass --resume to continue it, " if command == "train" and \
            earlier.get("command") == "train" else ""
        raise OutputExists(f"{flag} {str(folder)!r} already holds {what}; {hint}pass "
                           "--overwrite true to replace it (only what paw-gym provably wrote "
                           f"there is removed), or choose another {flag}")
    survey = _survey(folder, earlier, by_inode=resume)
    for name in survey.kept:
        path = folder / name.rstrip("/")
        # --resume continues the run's own files where they are; only an entry of another
        # kind than the one written there (a folder or symlink for a file) is in the way.
        if resume and stat.S_ISREG(os.lstat(path).st_mode):
            continue
        recorded = list(earlier.get("files", ()))
        if _in_the_way(name, writes) or resume and _in_the_way(name, recorded):
            why = "which changed since paw-gym wrote it" if name in survey.changed else \
                "which paw-gym did not write" + (
                    " (or an earlier paw-gym whose manifest recorded patterns, not files)"
                    if earlier.get("format") == 1 else "")
            raise OutputExists(f"{flag} {str(folder)!r} holds {_printable(name)!r}, {why}, "
                               f"and `paw-gym {command}` would write over it; move it away, "
                               f"or choose another {flag}")
    return earlier, survey


def read_manifest(folder: str | Path) -> dict:
    """The manifest of ``folder``, whole and its journal's records since, checked as data from
    disk (:func:`sanitize_manifest`); ``{}`` when absent, unreadable, a symlink or not a plain
    file."""
    text = _read_own_file(Path(folder) / MARKER)
    try:
        manifest = sanitize_manifest(json.loads(text)) if text is not None else {}
    except ValueError:
        manifest = {}
    if not manifest and _lstat(Path(folder) / MARKER) is not None:
        _say(Path(folder) / MARKER, "cannot be read (not a plain file of JSON within "
             f"{MAX_MANIFEST_BYTES >> 20} MiB)")
        return {}
    if manifest:
        for line in (_read_own_file(Path(folder) / JOURNAL) or "").splitlines():
            try:  # a torn last line (a killed append) is skipped
                raw = json.loads(line)
            except ValueError:
                continue
            operation = _sanitize_operation(raw)
            if operation:
                _apply(manifest, operation)
            elif isinstance(raw, list) and raw[:1] == ["file"] and len(raw) > 1:
                manifest["ignored"].append(raw[1])
        if manifest["ignored"]:
            names = ", ".join(repr(_printable(name))[:80] for name in manifest["ignored"][:4])
            _say(Path(folder) / MARKER, f"has {len(manifest['ignored'])} file record(s) "
                 f"paw-gym cannot believe (a malformed path, size or sha256: {names}"
                 f"{' …' if len(manifest['ignored']) > 4 else ''})")
    return manifest


#: The manifests already said to be unreadable or malformed by this process (said once).
_SAID: set[tuple[str, str]] = set()


def _say(manifest: Path, problem: str) -> None:
    """One line: the manifest ``manifest`` has ``problem``, so the files it does not prove
    are the user's (never removed, their weights not checked)."""
    if (str(manifest), problem) not in _SAID:
        _SAID.add((str(manifest), problem))
        print(f"paw-gym: {_printable(manifest)} {problem}; the files it does not prove are "
              "treated as the user's: --overwrite keeps them and a load does not check their "
              "sha256", file=sys.stderr, flush=True)


def _read_own_file(path: Path) -> str | None:
    """The text of the guard's file ``path``: read without following a symlink, None when it
    is absent, not a plain file, larger than :data:`MAX_MANIFEST_BYTES` or not UTF-8."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_MANIFEST_BYTES:
            return None
        with os.fdopen(handle, "rb", closefd=False) as stream:
            return stream.read(MAX_MANIFEST_BYTES).decode("utf-8")
    except (OSError, ValueError):
        return None
    finally:
        os.close(handle)


def sanitize_manifest(raw: Any) -> dict:
    """What of ``raw`` (a manifest as read) is believed: the known keys with the right types;
    file records under a path inside the folder (relative, no ``..``, no empty part, no control
    character) with an integer size and a 64-digit sha256, or an inode; the rest is dropped.
    Format 1's pattern records (``written``) are ignored, its literal ``sha256`` records
    kept."""
    if not isinstance(raw, dict):
        return {}
    manifest: dict[str, Any] = {
        "format": raw.get("format") if raw.get("format") in (1, FORMAT) else 1,
        "command": raw["command"] if isinstance(raw.get("command"), str) else None,
        "argv": raw["argv"] if isinstance(raw.get("argv"), list) and all(
            isinstance(a, str) for a in raw["argv"]) else [],
        "pid": raw["pid"] if isinstance(raw.get("pid"), int) else None,
        "complete": raw.get("complete", True) is True,
        "files": {}, "folders": [], "nested": [], "staging": {}, "ignored": []}
    files = raw.get("files") if manifest["format"] == FORMAT else raw.get("sha256")
    for name, raw_record in (files.items() if isinstance(files, dict) else ()):
        record = _file_record(raw_record)
        if _safe_name(name) and record:
            manifest["files"][name] = record
        # Not believed: said (read_manifest), its file the user's. A record whose digest is
        # malformed but whose inode is not would pass without its hash check.
        if not (_safe_name(name) and record) or isinstance(raw_record, dict) and (
                "size" in raw_record or "sha256" in raw_record) and "sha256" not in record:
            manifest["files"].pop(name, None)
            manifest["ignored"].append(name)
    for key in ("folders", "nested"):
        values = raw.get(key)
        manifest[key] = [n for n in values if _safe_name(n)] if isinstance(values, list) else []
    staging = raw.get("staging")
    if isinstance(staging, dict):
        manifest["staging"] = {n: list(v) for n, v in staging.items()
                               if _safe_name(n) and _is_identity(v)}
    return manifest


def _file_record(raw: Any) -> dict | None:
    """A file record's believable part: size and sha256, inode; None when neither."""
    if not isinstance(raw, dict):
        return None
    kept = {}
    if _is_size(raw.get("size")) and isinstance(raw.get("sha256"), str) and \
            _SHA256.fullmatch(raw["sha256"]):
        kept.update(size=raw["size"], sha256=raw["sha256"])
    if _is_identity(raw.get("inode")):
        kept["inode"] = list(raw["inode"])
    return kept or None


def _sanitize_operation(raw: Any) -> list | None:
    """A journal record read from disk, or None when it is not one (see :func:`_apply`)."""
    if not isinstance(raw, list) or len(raw) < 2 or not _safe_name(raw[1]):
        return None
    kind = raw[0]
    if kind == "file" and len(raw) == 3 and _file_record(raw[2]):
        return ["file", raw[1], _file_record(raw[2])]
    if kind == "staging" and len(raw) == 3 and _is_identity(raw[2]):
        return raw
    if kind in ("forget", "folder", "nested", "unstage") and len(raw) == 2:
        return raw
    return None


def lock_holder(folder: Path) -> str | None:
    """Who holds ``folder``'s lock in another process ("pid N (`command line`)", control
    characters escaped), or None."""
    import fcntl

    path = Path(folder) / LOCK
    if Path(folder).resolve() in _ACTIVE:
        return None
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:  # absent, a symlink: the claim says why
        return None
    try:
        if not stat.S_ISREG(os.fstat(handle).st_mode):
            return None
        try:  # shared: the ranks of a launch probe at once
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _holder_line(handle)
        return None
    finally:
        os.close(handle)


def _holder_line(handle: int) -> str:
    """The holder's line in a lock file held by another process. The holder writes it just
    after taking the lock, so a process that meets the lock in between reads it again for up
    to a second rather than naming no one."""
    for _ in range(100):
        text = os.pread(handle, 4096, 0).decode("utf-8", "replace").strip()
        if text:
            return _printable(text[:400])
        time.sleep(0.01)
    return "another process"


def _locked(folder: Path, flag: str, holder: str) -> OutputLocked:
    other = f", or choose another {flag}" if flag.startswith("--") else ""
    return OutputLocked(f"{flag} {str(folder)!r} is being written by {holder}; wait for it to "
                        f"finish{other}")


def _lock(folder: Path, flag: str) -> int:
    """The lock file of ``folder``, opened without following a symlink, held exclusively,
    with this process's pid and command line in it."""
    import fcntl

    try:
        handle = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                         | os.O_CLOEXEC, 0o644)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise OutputExists(f"{flag} {str(folder)!r}: {LOCK} is a symlink; paw-gym never "
                               "writes through one: remove it, or choose another "
                               f"{flag}") from None
        raise OutputExists(f"{flag} {str(folder)!r}: cannot open {LOCK} "
                           f"({error.strerror or error})") from None
    if not stat.S_ISREG(os.fstat(handle).st_mode):
        os.close(handle)
        raise OutputExists(f"{flag} {str(folder)!r}: {LOCK} is not a file; remove it, or "
                           f"choose another {flag}")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder_line(handle)
        os.close(handle)
        raise _locked(folder, flag, holder) from None
    os.ftruncate(handle, 0)
    os.pwrite(handle, f"pid {os.getpid()} (`{' '.join(_command_line())}`)".encode(), 0)
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
    found = _claim_of(path, itself=True)
    if found:
        with found[0].staged(found[1]) as folder:
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
    interrupted (:class:`IncompleteOutput`) or a weight file under it is missing, not a plain
    file, or differs from the size and sha256 the nearest manifest recorded
    (:class:`IntegrityError`; sizes are compared first; ``hashes=False``: only sizes, for a
    check before the load, which hashes). Paths no manifest covers pass: nothing was recorded
    of them."""
    path = Path(path).resolve()
    if any(part.endswith(".partial") for part in path.parts):
        raise IncompleteOutput(f"{str(path)!r} is an incomplete save (the command writing it "
                               "was stopped); use the output it was to become, or rerun")
    root = next((p for p in (path, *path.parents) if os.path.lexists(p / MARKER)), None)
    if root is None:
        return
    if not stat.S_ISREG(os.lstat(root / MARKER).st_mode):
        raise IntegrityError(f"{root / MARKER} is not a plain file (a symlink?); paw-gym does "
                             "not read a manifest through one")
    manifest = read_manifest(root)
    if path == root and not manifest.get("complete", True) and root not in _ACTIVE:
        holder = lock_holder(root)
        if holder:
            raise IncompleteOutput(f"{str(path)!r} is still being written by {holder}; wait "
                                   "for it to finish")
        command = _printable(manifest.get("command") or "…")
        rerun = _printable(" ".join(manifest.get("argv") or [f"paw-gym {command} …"]))
        raise IncompleteOutput(f"{str(path)!r} is incomplete: `paw-gym {command}` stopped "
                               f"before it finished writing it; rerun it with --overwrite true "
                               f"({rerun})")
    below = path.relative_to(root).as_posix()
    for name, record in sorted(manifest.get("files", {}).items()):
        if "sha256" not in record or not _under(name, "" if below == "." else below) or \
                not name.endswith(WEIGHT_SUFFIXES):
            continue
        file = root / name
        info = _lstat(file)
        if info is None:
            raise IntegrityError(f"{file} is missing (recorded in {root / MARKER})")
        if not stat.S_ISREG(info.st_mode):
            raise IntegrityError(f"{file} is not the file recorded in {root / MARKER} (a "
                                 "symlink or a folder now)")
        if info.st_size != record["size"] or hashes and \
                _sha256(file, info) != record["sha256"]:
            raise IntegrityError(f"{file} is damaged: its size or sha256 differs from "
                                 f"what was recorded when it was written ({root / MARKER})")


def file_digest(path: Path) -> dict:
    """``{"size": bytes, "sha256": hex}`` of a plain file (never through a symlink)."""
    digest = _digest_if_file(Path(path))
    if digest is None:
        raise IntegrityError(f"{path} is not a plain file")
    return digest


def _digest_if_file(path: Path) -> dict | None:
    info = _lstat(path)
    if info is None or not stat.S_ISREG(info.st_mode):
        return None
    return {"size": info.st_size, "sha256": _sha256(path, info)}


def _sha256(path: Path, info: os.stat_result) -> str:
    """The sha256 of the plain file ``path`` whose ``lstat`` is ``info`` (read without
    following a symlink; remembered while the file is unchanged)."""
    key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
    if key not in _HASHED:
        digest = hashlib.sha256()
        handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(handle, "rb") as stream:
            while chunk := stream.read(_CHUNK):
                digest.update(chunk)
        _HASHED[key] = digest.hexdigest()
    return _HASHED[key]


# -- single files --------------------------------------------------------------------------
def claim_file(path: str | Path, overwrite: bool, flag: str) -> Path:
    """Refuse an existing ``path`` unless ``overwrite``, and a folder or symlink there always
    (whether its folder can be written is ``training.preflight.check_writable``'s question)."""
    path = Path(path)
    if path.is_symlink():
        raise OutputExists(f"{flag} {str(path)!r} is a symlink; give the file itself (paw-gym "
                           "never writes through one)")
    if path.is_dir():
        raise OutputExists(f"{flag} {str(path)!r} is a folder; give a file name")
    if path.exists() and not overwrite:
        raise OutputExists(f"{flag} {str(path)!r} already exists; pass --overwrite true to "
                           f"replace it, or choose another {flag}")
    return path


def write_text_atomically(path: Path, text: str) -> None:
    """Write ``text`` to a new temporary file beside ``path`` and rename it into place: a kill
    leaves the old file or the new one, never half of one. Inside a claimed folder, the file
    is recorded with its digest (:func:`seal`)."""
    with atomic_file(path) as temporary:
        temporary.write_text(text, encoding="utf-8")


@contextlib.contextmanager
def atomic_file(path: str | Path) -> Iterator[Path]:
    """A new, empty temporary file beside ``path`` (same suffix) to write; renamed into place
    when the block ends without an error (removed otherwise), then, inside a claimed folder,
    recorded with its digest (:func:`seal`)."""
    path = Path(path)
    with _temporary_beside(path) as temporary:
        yield temporary
    seal(path)


def _write_atomically(path: Path, text: str) -> None:
    """A manifest, through its reserved temporary name (a kill leaves no stray file)."""
    temporary = path.with_name(path.name + ".tmp")
    with contextlib.suppress(FileNotFoundError):
        temporary.unlink()  # a killed write's (never followed: unlink removes a symlink)
    handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                     | os.O_CLOEXEC, 0o666)
    with os.fdopen(handle, "w", encoding="utf-8") as stream:
        stream.write(text)
    os.replace(temporary, path)


@contextlib.contextmanager
def _temporary_beside(path: Path) -> Iterator[Path]:
    handle, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=f".tmp{path.suffix}",
                                    dir=path.parent)  # O_EXCL: never through a symlink
    temporary = Path(name)
    try:
        os.fchmod(handle, 0o666 & ~_UMASK)  # as open() would make it, not mkstemp's 0o600
        os.close(handle)
        yield temporary
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise


# -- what is paw-gym's ------------------------------------------------------------------------
@dataclass
class _Survey:
    """A folder's entries sorted by :func:`_survey`."""

    files: list[Path] = field(default_factory=list)
    """Files paw-gym provably wrote."""
    trees: list[Path] = field(default_factory=list)
    """Staging folders of interrupted saves (paw-gym made them: same inode)."""
    folders: list[Path] = field(default_factory=list)
    """paw-gym's folders, deepest first (removed when left empty)."""
    kept: list[str] = field(default_factory=list)
    """Entries not provably paw-gym's, relative to the claimed folder (a folder ends in /)."""
    changed: set[str] = field(default_factory=set)
    """Those of ``kept`` that paw-gym recorded but that changed since."""


def _survey(folder: Path, manifest: dict, by_inode: bool, below: str = "",
            prefix: str = "") -> _Survey:
    """Sort the entries of ``folder`` (all, or ``below`` and what is under it) by what
    ``manifest`` proves: a recorded file whose size and sha256 match (``by_inode``: or the
    file it was writing, by inode), a recorded staging folder with its inode, a folder paw-gym
    made or on the way to a record, a recorded nested output (by its own manifest). Symlinks
    are never followed and never paw-gym's; a folder on the way to no record is one kept
    entry, not entered. ``prefix`` goes before every kept name (a nested output's)."""
    survey = _Survey()
    folders = [*manifest.get("staging", {}), *manifest.get("nested", []),
               *manifest.get("folders", [])]
    ways = {"/".join(_parts(name)[:depth]) for name in folders
            for depth in range(1, len(_parts(name)) + 1)} | \
        {"/".join(_parts(name)[:depth]) for name in manifest.get("files", {})
         for depth in range(1, len(_parts(name)))}
    walk = _Walk(folder, manifest, ways, by_inode, prefix, survey)
    if below:
        info = _lstat(folder / below)
        if info is not None:
            walk.entry(below.strip("/"), info)
    else:
        walk.folder("")
    return survey


@dataclass
class _Walk:
    """One :func:`_survey`: what it knows while it walks."""

    root: Path
    manifest: dict
    ways: set
    by_inode: bool
    prefix: str
    survey: _Survey

    def folder(self, relative: str) -> None:
        for entry in sorted(os.scandir(self.root / relative), key=lambda e: e.name):
            if relative or entry.name not in OWN_FILES:
                name = f"{relative}/{entry.name}" if relative else entry.name
                self.entry(name, entry.stat(follow_symlinks=False))

    def entry(self, name: str, info: os.stat_result) -> None:
        path, survey = self.root / name, self.survey
        if not stat.S_ISDIR(info.st_mode):
            self.file(name, path, info)
        elif self.manifest.get("staging", {}).get(name) == list(_identity(info)):
            survey.trees.append(path)
        elif name in self.manifest.get("nested", []) and os.path.lexists(path / MARKER):
            _nested(survey, path, self.prefix + name + "/")
        elif name in self.ways:
            self.folder(name)
            survey.folders.append(path)
        else:
            survey.kept.append(self.prefix + name + "/")

    def file(self, name: str, path: Path, info: os.stat_result) -> None:
        record = self.manifest.get("files", {}).get(name)
        if stat.S_ISREG(info.st_mode) and record is not None and (
                self.by_inode and record.get("inode") == list(_identity(info))
                or "sha256" in record and info.st_size == record["size"]
                and _sha256(path, info) == record["sha256"]):
            self.survey.files.append(path)
            return
        self.survey.kept.append(self.prefix + name)
        if record is not None:
            self.survey.changed.add(self.prefix + name)


def _nested(survey: _Survey, folder: Path, prefix: str) -> None:
    """The output nested at ``folder`` (recorded by the outer one) goes by its own manifest;
    its manifest and lock go with it when nothing in it is someone else's."""
    if not stat.S_ISREG(os.lstat(folder / MARKER).st_mode):
        survey.kept.append(prefix)
        return
    holder = lock_holder(folder)
    if holder:
        raise _locked(folder, "the nested output", holder)
    inner = _survey(folder, read_manifest(folder), by_inode=False, prefix=prefix)
    survey.files += inner.files
    survey.trees += inner.trees
    survey.folders += inner.folders
    survey.kept += inner.kept
    survey.changed |= inner.changed
    if not inner.kept:
        survey.files += [folder / own for own in OWN_FILES
                         if stat.S_ISREG(getattr(_lstat(folder / own), "st_mode", 0))]
    survey.folders.append(folder)


def _remove(survey: _Survey) -> int:
    """Remove what ``survey`` found paw-gym's; returns the number of files removed."""
    removed = 0
    for path in survey.files:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            removed += path.name not in OWN_FILES  # a nested output's own, not a file
    for tree in survey.trees:
        shutil.rmtree(tree, ignore_errors=True)  # rmtree never follows a symlink
    for folder in survey.folders:
        with contextlib.suppress(OSError):  # kept when something of the user's is inside
            folder.rmdir()
    return removed


def _in_the_way(entry: str, writes: Sequence[str]) -> bool:
    """Whether a user's ``entry`` (a folder ends in ``/``) is where ``writes`` go. A write is a
    literal path or a pattern matched one component at a time (``*`` within a component,
    ``**`` any number of them; a trailing ``/`` names a folder written into, whose entries are
    not this command's to judge). In the way: a folder at or on the way to a written path, a
    file or symlink at a written path or where a folder the command names literally will be."""
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


def _written(name: str, writes: Sequence[str]) -> bool:
    """Whether the file ``name`` lies where ``writes`` go: at a written path or pattern, or
    inside a folder written into (a pattern ending in ``/``: the output nested there)."""
    parts = _parts(name)
    return any(_matches(parts, _parts(write) + (("**",) if write.endswith("/") else ()))
               for write in writes)


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


# -- paths -----------------------------------------------------------------------------------
def _parts(name: str) -> tuple[str, ...]:
    return tuple(part for part in name.strip("/").split("/") if part not in ("", "."))


def _under(name: str, relative: str) -> bool:
    """Whether the recorded ``name`` is ``relative`` or lies under it (``""``: everything)."""
    relative = relative.strip("/")
    return not relative or name == relative or name.startswith(relative + "/")


def _relative_name(target: str) -> str:
    relative = "/".join(_parts(os.path.normpath(target)))
    if relative.startswith("..") or os.path.isabs(target):
        raise ValueError(f"{target!r} is outside the claimed folder")
    return relative


def _safe_name(name: Any) -> bool:
    """A path a manifest may name: relative, inside its folder, printable, not the folder's
    own lock or manifest."""
    if not isinstance(name, str) or not name or len(name) > 4096 or name.startswith("/"):
        return False
    parts = name.split("/")
    return all(part not in ("", ".", "..") for part in parts) and \
        not any(ord(c) < 32 or ord(c) == 127 for c in name) and name not in (MARKER, LOCK)


def _is_size(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_identity(value: Any) -> bool:
    return isinstance(value, list) and len(value) == 2 and all(map(_is_size, value))


def _identity(info: os.stat_result | None) -> tuple[int, int] | None:
    return None if info is None else (info.st_dev, info.st_ino)


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def _printable(text: Any) -> str:
    """``text`` with control characters (terminal escapes) written as ``\\xNN``."""
    return "".join(c if c.isprintable() or c == " " else f"\\x{ord(c):02x}" for c in str(text))


def _no_symlink_on_the_way(folder: Path, relative: str, flag: str) -> None:
    """Refuse a symlink (or a file) at any folder of ``relative`` inside ``folder``: a save
    would write through it, outside the claimed folder."""
    parts = _parts(relative)
    for depth in range(1, len(parts)):
        path = folder.joinpath(*parts[:depth])
        info = _lstat(path)
        if info is not None and not stat.S_ISDIR(info.st_mode):
            raise OutputExists(f"{str(path)!r} is in the way of the save and paw-gym did not "
                               "write it (a symlink or a file where a folder goes); move it "
                               "away and rerun")


def _files(folder: Path) -> list[Path]:
    """The plain files under ``folder`` (symlinks neither followed nor listed), sorted."""
    found = []
    for directory, _, names in os.walk(folder):
        found += [Path(directory) / name for name in names
                  if stat.S_ISREG(os.lstat(Path(directory) / name).st_mode)]
    return sorted(found)


def _move_files(files: Sequence[Path], staging: Path, target: Path) -> None:
    """Move each of ``files`` (under ``staging``) to the same place under ``target``, never
    through a symlink."""
    for file in files:
        relative = file.relative_to(staging).as_posix()
        _no_symlink_on_the_way(target, relative, "")
        destination = target / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        os.replace(file, destination)


def _command_line() -> list[str]:
    argv = list(sys.argv)
    if argv and (Path(argv[0]).name == "paw-gym" or argv[0].endswith("training/cli.py")):
        argv[0] = "paw-gym"
    return argv
