"""``WMReplay``: the world-model replay of transitions (h, a, o_next, reward, ...).

Records live in memory and, when a ``path`` is given, are appended to disk as they arrive:

* JSON Lines (default): one record per line, each line written with a single ``write`` on an
  ``O_APPEND`` descriptor, so a killed process leaves every completed record readable.
* Parquet (``format="parquet"``, needs pyarrow): records go to a pending JSONL segment first
  (same crash safety) and are rolled into an immutable ``.parquet`` part every ``parquet_rows``
  records and on ``close()``; parts are written to a temporary name and renamed into place.

``path`` is a directory: each writing process gets its own shard file, so the recorders of an
``AsyncVectorEnv``'s workers never interleave. :meth:`WMReplay.load` reads every shard and part
and reports (never silently drops) malformed records in ``replay.errors``
(:mod:`run_files.data_files` holds the record schema).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import socket
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from run_files import outputs
from run_files.data_files import (REPLAY_RECORD, BadRecord, check_rows, read_jsonl,
                                  report_bad)

SCHEMA_VERSION = 1

#: Fields every transition record must have (docs/design.md, "Contracts between the layers").
REQUIRED_FIELDS = ("h", "a", "o_next", "reward", "terminated", "truncated", "task_id",
                   "task_type", "episode_id", "step")


#: A record that could not be read back (file, line, reason).
LoadError = BadRecord


class WMReplay:
    """An append-only store of transition records.

    Args:
        path: directory to append to (created if needed); ``None`` keeps records in memory only.
        format: ``"jsonl"`` or ``"parquet"``.
        fsync: also ``fsync`` after each record (survives power loss, not just a killed process).
        parquet_rows: records per Parquet part.
        keep_in_memory: keep a copy of written records in this object (turn off for long runs).
        shard: the file name (without suffix) this writer appends to; by default a new unique
            name per writing process. The trainer names one shard per update
            (``update-000012``), so a resumed run can drop the updates it redoes.

    Example:
        >>> replay = WMReplay("runs/replay")                                # doctest: +SKIP
        >>> env = RecordTransitions(ParseAction(HistoryPrompt(env)), replay)  # doctest: +SKIP
        >>> ...  # run episodes
        >>> WMReplay.load("runs/replay").filter(success=True).to_list()     # doctest: +SKIP
    """

    def __init__(self, path: str | os.PathLike | None = None, format: str = "jsonl",
                 fsync: bool = False, parquet_rows: int = 1000, keep_in_memory: bool = True,
                 shard: str | None = None):
        if format not in ("jsonl", "parquet"):
            raise ValueError(f"format must be 'jsonl' or 'parquet', got {format!r}")
        if format == "parquet":
            _require_pyarrow()
        if parquet_rows < 1:
            raise ValueError(f"parquet_rows must be >= 1, got {parquet_rows}")
        if shard is not None and (not shard or "/" in shard or shard.startswith(".")):
            raise ValueError(f"shard must be a plain file name stem, got {shard!r}")
        self.path = Path(path) if path is not None else None
        self.format = format
        self.fsync = fsync
        self.parquet_rows = parquet_rows
        self.keep_in_memory = keep_in_memory
        self.records: list[dict[str, Any]] = []
        self.errors: list[LoadError] = []
        self._fd: int | None = None
        self._owner_pid: int | None = None
        self._fixed_shard = shard
        self._shard = ""
        self._part = 0
        self._pending_rows = 0
        self._torn = False

    # -- writing ----------------------------------------------------------------------------
    def append(self, record: dict[str, Any]) -> None:
        """Validate and store one transition record (written to disk before returning)."""
        missing = [name for name in REQUIRED_FIELDS if name not in record]
        if missing:
            raise ValueError(f"transition record is missing required field(s) {missing}")
        record = {"schema_version": SCHEMA_VERSION, **record}
        if self.path is not None:
            self._write_line(_encode(record))
        # Only a record that reached the disk is kept in memory: the two never disagree.
        if self.keep_in_memory:
            self.records.append(record)
        if self.path is None:
            return
        if self.format == "parquet":
            self._pending_rows += 1
            if self._pending_rows >= self.parquet_rows:
                self._roll_parquet_part()

    def extend(self, records: Iterable[dict[str, Any]]) -> None:
        for record in records:
            self.append(record)

    def close(self) -> None:
        """Flush the pending Parquet segment (if any) and close the shard file."""
        if self._fd is not None and self._owner_pid == os.getpid():
            if self.format == "parquet" and self._pending_rows:
                self._roll_parquet_part()
            else:
                os.close(self._fd)
                outputs.seal(self._segment_path())  # in a claimed folder: recorded as written
        self._fd = None

    def __enter__(self) -> WMReplay:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        # A copy sent to another process (AsyncVectorEnv) opens its own shard there.
        return {**self.__dict__, "_fd": None, "_owner_pid": None}

    def _segment_path(self) -> Path:
        assert self.path is not None
        if self.format == "parquet":
            return self.path / f"{self._shard}-part{self._part:05d}.pending.jsonl"
        return self.path / f"{self._shard}.jsonl"

    def _write_line(self, line: bytes) -> None:
        if self._owner_pid != os.getpid():  # first write here, or a forked copy: a new shard
            assert self.path is not None
            self.path.mkdir(parents=True, exist_ok=True)
            self._owner_pid = os.getpid()
            self._shard = self._fixed_shard or \
                f"transitions-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            self._part, self._pending_rows, self._fd = 0, 0, None
        if self._fd is None:
            self._fd = os.open(self._segment_path(), os.O_WRONLY | os.O_APPEND | os.O_CREAT
                               | os.O_NOFOLLOW, 0o644)
            outputs.track(self._segment_path())  # in a claimed folder: recorded as paw-gym's
        if self._torn:  # an earlier record was cut short: start this one on a fresh line
            line = b"\n" + line
        written = 0
        try:
            while written < len(line):
                count = os.write(self._fd, line[written:])
                if count == 0:
                    raise OSError(errno.ENOSPC, "the disk accepted no more bytes")
                written += count
        except OSError as error:
            self._torn = self._torn or written > 0
            raise OSError(error.errno, f"replay {str(self._segment_path())!r}: wrote {written} of "
                          f"{len(line)} bytes of a record ({error.strerror or error}); the record "
                          "is not stored") from error
        self._torn = False
        if self.fsync:
            os.fsync(self._fd)

    def _roll_parquet_part(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pending = self._segment_path()
        records, errors = _read_jsonl(pending)
        if errors:  # cannot happen for our own complete writes; keep the segment for load()
            return
        final = pending.with_name(pending.name.replace(".pending.jsonl", ".parquet"))
        # from_pylist infers the schema from the first row only: give every row every column.
        columns = list(dict.fromkeys(name for record in records for name in record))
        table = pa.Table.from_pylist([{name: r.get(name) for name in columns} for r in records])
        tmp = final.with_suffix(".parquet.tmp")
        pq.write_table(table, tmp)
        os.replace(tmp, final)
        outputs.seal(final)
        os.close(self._fd)
        pending.unlink()
        self._part, self._pending_rows, self._fd = self._part + 1, 0, None

    # -- reading ----------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | os.PathLike, strict: bool = False) -> WMReplay:
        """Read every shard (``*.jsonl``) and Parquet part under ``path`` (or one file).

        Every record goes through the one replay schema
        (:data:`run_files.data_files.REPLAY_RECORD`: types, finite numbers). Malformed or
        truncated records are skipped, collected in ``replay.errors`` and announced with one
        ``DataFileWarning`` giving their count and the first ``file:line``; ``strict=True``
        raises ``DataFileError`` (a ``ValueError``) instead.
        """
        root = Path(path)
        if not root.exists():
            raise FileNotFoundError(f"no replay at {root}")
        if root.is_dir():
            _remove_orphan_parquet_files(root)
        files = [root] if root.is_file() else sorted(root.glob("*.jsonl")) + sorted(root.glob("*.parquet"))
        for file in files:  # open() of a folder or a dangling link would be a bare OSError
            if not file.is_file():
                raise ValueError(f"{str(file)!r} in the replay {str(root)!r} is not a file (a "
                                 "folder, or a symlink to nothing); a replay's shards are "
                                 "files: move it out of the replay")
        replay = cls()
        for file in files:
            if file.name.endswith(".pending.jsonl") and file.with_name(
                    file.name.replace(".pending.jsonl", ".parquet")).exists():
                continue  # rolled into its part; only the unlink was interrupted
            records, errors = _read_parquet(file) if file.suffix == ".parquet" else _read_jsonl(file)
            replay.records.extend(records)
            replay.errors.extend(errors)
        report_bad(replay.errors, REPLAY_RECORD, root, strict=strict)
        return replay

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)

    def episodes(self) -> dict[str, list[dict[str, Any]]]:
        """Records grouped by ``episode_id``, each episode sorted by ``step``."""
        grouped: dict[str, list[dict[str, Any]]] = {}
        for record in self.records:
            grouped.setdefault(record["episode_id"], []).append(record)
        return {eid: sorted(steps, key=lambda r: r["step"]) for eid, steps in grouped.items()}

    def filter(self, task_id: str | None = None, task_type: str | None = None,
               success: bool | None = None) -> WMReplay:
        """An in-memory replay with the records matching every given criterion.

        ``success`` selects whole episodes: those with a record where ``won`` is true.
        """
        keep_episodes = None
        if success is not None:
            keep_episodes = {eid for eid, steps in self.episodes().items()
                             if any(r.get("won") for r in steps) == success}
        return self._view(r for r in self.records
                          if (task_id is None or r["task_id"] == task_id)
                          and (task_type is None or r["task_type"] == task_type)
                          and (keep_episodes is None or r["episode_id"] in keep_episodes))

    def deduplicate(self) -> WMReplay:
        """Keep one episode of each distinct trajectory (same task, same h/a/o_next sequence)."""
        seen: set[str] = set()
        keep: set[str] = set()
        for eid, steps in self.episodes().items():
            key = trajectory_key(steps)
            if key not in seen:
                seen.add(key)
                keep.add(eid)
        return self._view(r for r in self.records if r["episode_id"] in keep)

    def to_list(self) -> list[dict[str, Any]]:
        """Records as a list of plain dicts (``datasets.Dataset.from_list`` accepts it)."""
        return [dict(r) for r in self.records]

    def to_dataset(self):
        """A ``datasets.Dataset`` of the records (needs the ``datasets`` package)."""
        try:
            from datasets import Dataset
        except ImportError as error:
            raise ImportError("to_dataset() needs the 'datasets' package: pip install datasets") from error
        return Dataset.from_list(self.to_list())

    def _view(self, records: Iterable[dict[str, Any]]) -> WMReplay:
        view = WMReplay()
        view.records = list(records)
        return view


def _remove_orphan_parquet_files(folder: Path) -> None:
    """Delete ``*.parquet.tmp`` files a killed writer left behind. Their rows are still in the
    part's ``.pending.jsonl`` (removed only after the rename), so nothing is lost; a file of a
    writer still running on this host, or written on another host, is left alone."""
    host = socket.gethostname()
    for tmp in folder.glob("transitions-*.parquet.tmp"):
        shard = tmp.name[len("transitions-"):-len(".parquet.tmp")]
        writer_host, pid, _, _ = (shard.rsplit("-", 3) + ["", "", "", ""])[:4]
        if writer_host != host or not pid.isdigit() or _alive(int(pid)):
            continue
        tmp.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def _encode(record: dict[str, Any]) -> bytes:
    """One JSON line. Text that UTF-8 cannot encode (a lone surrogate from raw model output)
    makes the line plain ASCII with ``\\uXXXX`` escapes, which JSON reads back unchanged."""
    line = json.dumps(record, ensure_ascii=False) + "\n"
    try:
        return line.encode("utf-8")
    except UnicodeEncodeError:
        return (json.dumps(record, ensure_ascii=True) + "\n").encode("ascii")


def trajectory_key(steps: list[dict[str, Any]]) -> str:
    """A digest identifying a trajectory by its task and its (h, a, o_next) sequence."""
    digest = hashlib.sha256(steps[0]["task_id"].encode("utf-8") if steps else b"")
    for record in steps:
        for field in ("h", "a", "o_next"):
            value = str(record[field]).encode("utf-8", errors="surrogatepass")
            digest.update(len(value).to_bytes(8, "little"))
            digest.update(value)
    return digest.hexdigest()


def _read_jsonl(file: Path) -> tuple[list[dict[str, Any]], list[LoadError]]:
    return read_jsonl(file, REPLAY_RECORD)


def _read_parquet(file: Path) -> tuple[list[dict[str, Any]], list[LoadError]]:
    _require_pyarrow()
    import pyarrow.parquet as pq

    try:
        rows = pq.read_table(file).to_pylist()
    except Exception as error:  # a damaged part: report it, keep loading the others
        return [], [LoadError(str(file), 0, f"unreadable Parquet part ({error})")]
    # (Parquet gives every row every column: an optional field a record lacked is null.)
    return check_rows(rows, REPLAY_RECORD, file)


def _require_pyarrow() -> None:
    try:
        import pyarrow  # noqa: F401
    except ImportError as error:
        raise ImportError("Parquet replays need pyarrow: pip install 'paw-gym[parquet]'") from error
