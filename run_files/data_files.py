"""The schema every paw-gym data file is read through, and the replay record.

Each kind's fields are declared once (:class:`Record` of :class:`Field`: name, type, finite
numbers, bounds, required or optional) and every reader of that kind validates through
:func:`check` and :func:`read_jsonl` / :func:`read_json`. A bad record is never used silently
and never a traceback; what happens to it depends on how the kind is written:

* **JSON Lines logs, appended record by record** — skipped, with one warning
  (:class:`DataFileWarning`) giving the count and the first bad ``file:line`` and why. A killed
  writer can leave a torn last line, and the other records are still good.
* **Files written whole** — refused with :class:`DataFileError` (a ``ValueError``) whose
  message starts ``file:line:`` and names the bad key and what is accepted; a half-read
  setting would silently change what the command does. Unknown keys are refused.

The kind declared here is the one the layers below the trainer read: replay records
(``WMReplay`` shards, ``*.jsonl`` and Parquet parts; every command that reads a replay:
``sft``, ``train-wm``, ``eval-wm``, ``pretrain``, ``demo``) — :data:`REPLAY_RECORD`, a log
(``WMReplay.load(strict=True)`` refuses instead). The record schema is open by contract
(``wrappers.record.transition_record`` adds the action's metadata and any caller's fields, e.g.
the trainer's ``update``, ``group``): an unknown field is kept, but every field a reader uses is
declared and checked. The trainer's own kinds (``metrics.jsonl``, a checkpoint's
``state.json`` and ``rollouts-ahead.json``, ``wm_config.json``, ``eval-wm`` predictions) are
declared in :mod:`training.infra.data_files` with this schema. :class:`DataFileError` is also
what an env raises for a data file it refuses (an ALFWorld game file), so every command prints
it as one line.

A JSON line that parses but lacks its newline (the last line) is a complete record; one that
does not parse is "truncated". This module is plain Python (no torch) and imports nothing of
paw-gym, so every layer can read through it.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal


class DataFileError(ValueError):
    """A data file (or one record of it) that does not match its kind's schema.

    ``str(error)`` is one line, ``file:line: reason``; ``file``, ``line`` and ``reason`` are
    also attributes (``line`` 0 when the file as a whole is unreadable)."""

    def __init__(self, file: str | os.PathLike, line: int, reason: str,
                 message: str | None = None):
        self.file, self.line, self.reason = str(file), line, reason
        super().__init__(message or f"{self.file}:{line}: {reason}")


class DataFileWarning(UserWarning):
    """Bad records of a JSON Lines log were skipped (the count and the first one named)."""


@dataclass(frozen=True)
class BadRecord:
    """A record that did not pass its schema (``line``: 1-based line, or row of a Parquet
    part; 0 for the whole file)."""

    file: str
    line: int
    reason: str


# -- schema declarations ---------------------------------------------------------------------

#: Field types: name -> (accepts(value), what the message says is expected).
TYPES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "str": (lambda v: isinstance(v, str), "a string"),
    "int": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    "number": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "a number"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "object": (lambda v: isinstance(v, dict), "a JSON object"),
    "list": (lambda v: isinstance(v, list), "a list"),
    "scalar": (lambda v: v is None or isinstance(v, (str, int, float, bool)),
               "a number, string, true/false or null"),
    "any": (lambda v: True, "any JSON value"),
}


@dataclass(frozen=True)
class Field:
    """One key of a record: its type (a :data:`TYPES` name, or a nested :class:`Record`),
    for ``"list"`` the type of its items, and what else a value must be."""

    name: str
    type: str | Record
    required: bool = True
    items: str | Record | None = None
    """``type="list"``: each item's type (a :data:`TYPES` name or a :class:`Record`)."""
    finite: bool = True
    """Numbers: NaN is always refused; ±inf too unless ``finite=False``."""
    minimum: float | None = None
    maximum: float | None = None
    below: float | None = None
    """Exclusive upper bound."""
    choices: tuple[Any, ...] = ()
    nullable: bool = False
    """``null`` is accepted (and an optional field that is ``null`` counts as absent: Parquet
    parts give every row every column)."""


@dataclass(frozen=True)
class Record:
    """The fields of one kind of JSON object. ``extra``: what a key not declared here is —
    ``"refuse"`` (an error naming it), ``"keep"`` (any value, not read) or ``"scalar"`` (kept
    when its value is a number, string, true/false or null)."""

    kind: str
    fields: tuple[Field, ...]
    extra: Literal["refuse", "keep", "scalar"] = "refuse"
    known: tuple[str, ...] = ()
    """Further accepted keys of any value (``extra="refuse"``): recorded, not read."""

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields) + self.known


def number_field(name: str, required: bool = True, **bounds: Any) -> Field:
    """A ``"number"`` field (finite unless ``finite=False``; ``bounds``: :class:`Field`'s)."""
    return Field(name, "number", required, **bounds)


#: A transition of a WM replay (``wrappers.record.transition_record``; docs/design.md,
#: "Contracts between the layers"). Open: a caller's extra fields are kept.
REPLAY_RECORD = Record("replay record", (
    Field("schema_version", "int", choices=(1,)),
    Field("h", "str"),
    Field("a", "str"),
    Field("o_next", "str"),
    number_field("reward"),
    Field("terminated", "bool"),
    Field("truncated", "bool"),
    Field("task_id", "str"),
    Field("task_type", "str"),
    Field("episode_id", "str"),
    Field("step", "int", minimum=0),
    Field("won", "bool", required=False, nullable=True),
    Field("invalid_action", "bool", required=False, nullable=True),
    Field("parsed_action", "str", required=False, nullable=True),
    # PolicyAction metadata (agents.rollout, agents.types.Trajectory.to_records)
    number_field("action_entropy", required=False, nullable=True),
    Field("prompt_ids", "list", required=False, items="int", nullable=True),
    Field("response_ids", "list", required=False, items="int", nullable=True),
    # the trainer's and eval's fields (training.rl.rollout_replay.record_update, evaluate.write_replay)
    Field("source", "str", required=False, nullable=True),
    Field("update", "int", required=False, minimum=0, nullable=True),
    Field("group", "int", required=False, minimum=0, nullable=True),
    number_field("lambda_g", required=False, nullable=True),
    Field("wm_selected", "bool", required=False, nullable=True),
    number_field("advantage", required=False, nullable=True),
), extra="keep")


# -- validation ------------------------------------------------------------------------------

KeyPath = tuple  # a key path into a JSON value: keys (str) and list indices (int)


def check(value: Any, schema: Record | Field, path: KeyPath = ()) -> tuple[KeyPath, str] | None:
    """The first thing wrong with ``value`` under ``schema``: ``(key path, reason)``, or None.
    The reason names the field, the value and what is accepted."""
    if isinstance(schema, Field):
        return _check_value(value, schema, path)
    if not isinstance(value, dict):
        if path:
            return path, f"field {_dotted(path)!r} is {_show(value)}, expected a JSON object"
        return path, ("record" if schema.kind.endswith("record") else schema.kind) + \
            f" is {_show(value)}, not a JSON object"
    missing = [f.name for f in schema.fields
               if f.required and f.name not in value]
    if missing:
        return path, (f"missing field(s) {[_dotted(path + (m,)) for m in missing]}"
                      if path else f"missing field(s) {missing}")
    declared = {f.name: f for f in schema.fields}
    for key, item in value.items():
        spec = declared.get(key)
        if spec is None:
            if schema.extra == "refuse" and key not in schema.known:
                return path + (key,), (f"unknown field {_dotted(path + (key,))!r} (a "
                                       f"{schema.kind} accepts: {', '.join(schema.names)})")
            if schema.extra == "scalar" and not TYPES["scalar"][0](item):
                return path + (key,), (f"field {_dotted(path + (key,))!r} is {_show(item)}, "
                                       f"expected {TYPES['scalar'][1]}")
            continue
        if item is None and spec.nullable and not spec.required:
            continue
        problem = _check_value(item, spec, path + (key,))
        if problem:
            return problem
    return None


def _check_value(value: Any, spec: Field, path: KeyPath) -> tuple[KeyPath, str] | None:
    name = f"field {_dotted(path)!r}" if path else spec.name
    if value is None and spec.nullable:
        return None
    if isinstance(spec.type, Record):
        return check(value, spec.type, path)
    accepts, expected = TYPES[spec.type]
    if spec.type == "number" or (spec.type == "int" and spec.minimum is not None):
        expected = _number_words(spec)
    if spec.choices:
        expected = " or ".join(map(_show, spec.choices))
    if not accepts(value):
        return path, f"{name} is {_show(value)}, expected {expected}"
    if spec.choices and value not in spec.choices:
        return path, f"{name} is {_show(value)}, expected {expected}"
    if spec.type in ("number", "int"):
        bad = (isinstance(value, float) and (math.isnan(value) or (
            spec.finite and math.isinf(value))))
        bad = bad or (spec.minimum is not None and value < spec.minimum) \
            or (spec.maximum is not None and value > spec.maximum) \
            or (spec.below is not None and value >= spec.below)
        if bad:
            return path, f"{name} is {_show(value)}, expected {expected}"
    if spec.type == "list" and spec.items is not None:
        item_spec = spec.items if isinstance(spec.items, Record) else \
            Field(spec.name, spec.items, finite=spec.finite)
        for index, item in enumerate(value):
            problem = check(item, item_spec, path + (index,))
            if problem:
                return problem
    return None


def _number_words(spec: Field) -> str:
    kind = "an integer" if spec.type == "int" else ("a finite number" if spec.finite
                                                    else "a number (not NaN)")
    if spec.minimum is not None and spec.maximum is not None:
        return f"{kind} in [{_num(spec.minimum)}, {_num(spec.maximum)}]"
    if spec.minimum is not None and spec.below is not None:
        return f"{kind} in [{_num(spec.minimum)}, {_num(spec.below)})"
    if spec.minimum is not None:
        return f"{kind} >= {_num(spec.minimum)}"
    return kind


def _num(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else str(bound)


def _dotted(path: KeyPath) -> str:
    text = ""
    for key in path:
        text += f"[{key}]" if isinstance(key, int) else (f".{key}" if text else str(key))
    return text


def _show(value: Any) -> str:
    text = repr(value)
    if len(text) <= 40:
        return text
    return f"a {type(value).__name__} of length {len(value)}" \
        if isinstance(value, (str, list, dict)) else f"a {type(value).__name__}"


# -- JSON Lines ------------------------------------------------------------------------------

def read_jsonl(path: str | os.PathLike, schema: Record, *, strict: bool = False,
               first: int = 0) -> tuple[list[dict[str, Any]], list[BadRecord]]:
    """The records of the JSON Lines file ``path`` that pass ``schema``, and the bad ones.
    ``strict``: raise :class:`DataFileError` at the first bad line instead. ``first``: a
    number of leading lines to leave out (already read)."""
    path = Path(path)
    with open(path, "rb") as handle:
        data = handle.read()
    lines = data.split(b"\n")
    records, bad = [], []
    for number, raw in enumerate(lines, start=1):
        if number <= first or not raw.strip():
            continue
        reason = None
        try:
            record = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            reason = "not UTF-8 text"
        except json.JSONDecodeError as error:
            # No newline after it: the writer died mid-record.
            reason = "truncated record (incomplete last line)" if number == len(lines) else \
                f"not valid JSON ({error})"
        if reason is None:
            problem = check(record, schema)
            reason = problem[1] if problem else None
        if reason is None:
            records.append(record)
            continue
        if strict:
            raise DataFileError(path, number, reason)
        bad.append(BadRecord(str(path), number, reason))
    return records, bad


def check_rows(rows: Iterable[Any], schema: Record, file: str | os.PathLike
               ) -> tuple[list[dict[str, Any]], list[BadRecord]]:
    """Rows already parsed (a Parquet part's), numbered from 1, through ``schema``."""
    records, bad = [], []
    for number, row in enumerate(rows, start=1):
        problem = check(row, schema)
        if problem:
            bad.append(BadRecord(str(file), number, problem[1]))
        else:
            records.append(row)
    return records, bad


def report_bad(bad: Sequence[BadRecord], schema: Record, where: str | os.PathLike, *,
               strict: bool = False, shown: int = 3, stacklevel: int = 2) -> None:
    """Say what was skipped: nothing when ``bad`` is empty, else one
    :class:`DataFileWarning` with the count and the first bad ``file:line`` (and up to
    ``shown`` in all); ``strict``: that message as a :class:`DataFileError` instead."""
    if not bad:
        return
    first = bad[0]
    lines = "; ".join(f"{b.file}:{b.line}: {b.reason}" for b in bad[:shown])
    if strict:
        raise DataFileError(first.file, first.line, first.reason,
                            f"{len(bad)} malformed record(s) in {where} ({schema.kind}s), "
                            f"first at {lines}")
    message = (f"{len(bad)} malformed record(s) in {where} skipped (not used), first at "
               f"{lines}")
    warnings.warn(message, DataFileWarning, stacklevel=stacklevel + 1)


# -- JSON files written whole ----------------------------------------------------------------

def read_json(path: str | os.PathLike, schema: Record | Field) -> Any:
    """The JSON file ``path`` once it matches ``schema``; else :class:`DataFileError`
    ``file:line: reason`` (the line of the bad key, or of the object that misses one).
    Duplicate keys are refused too."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise DataFileError(path, 1, "not UTF-8 text") from None
    except OSError as error:
        raise DataFileError(path, 0, f"cannot be read ({error.strerror or error})",
                            f"{path}: cannot be read ({error.strerror or error})") from None
    return parse_json(text, schema, path)


def parse_json(text: str, schema: Record | Field, source: str | os.PathLike) -> Any:
    """:func:`read_json` of a text already read; ``source`` names it in errors."""
    path = source
    try:
        value = json.loads(text, object_pairs_hook=_refuse_duplicates)
    except _DuplicateKey as error:
        value, lines = _parse_with_lines(text)
        raise DataFileError(path, lines.line_of_duplicate(error.key),
                            f"key {error.key!r} is given twice") from None
    except json.JSONDecodeError as error:
        reason = "the file is empty" if not text.strip() else \
            f"not valid JSON ({error.msg}, column {error.colno})"
        raise DataFileError(path, error.lineno, reason) from None
    problem = check(value, schema)
    if problem:
        key_path, reason = problem
        tree, lines = _parse_with_lines(text)
        raise DataFileError(path, lines.line(tree, key_path), reason)
    return value


class _DuplicateKey(ValueError):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result


@dataclass
class _Lines:
    """Where each value of a parsed JSON text starts (by its container's ``id``)."""

    text: str
    offsets: dict[int, dict[Any, int]] = field(default_factory=dict)
    duplicates: dict[str, int] = field(default_factory=dict)
    keep: list[Any] = field(default_factory=list)  # the ids stay valid while this lives

    def line_at(self, offset: int) -> int:
        return self.text.count("\n", 0, offset) + 1

    def line(self, tree: Any, key_path: KeyPath) -> int:
        """The line of the value at ``key_path`` (of its deepest container found)."""
        offset, node = 0, tree
        for key in key_path:
            where = self.offsets.get(id(node), {})
            if key not in where:
                break
            offset, node = where[key], node[key]
        return self.line_at(offset)

    def line_of_duplicate(self, key: str) -> int:
        return self.line_at(self.duplicates.get(key, 0))


def _parse_with_lines(text: str) -> tuple[Any, _Lines]:
    """Parse ``text`` again with Python's pure-Python scanner, recording where every object
    member and list item starts (only on the error path: it is slower)."""
    from json.decoder import JSONArray, JSONObject
    from json.scanner import py_make_scanner

    lines = _Lines(text)

    def parse_object(s_and_end, strict, scan_once, object_hook, object_pairs_hook, memo):
        starts: list[int] = []

        def recording(string, idx):
            starts.append(idx)
            return scan_once(string, idx)

        pairs, end = JSONObject(s_and_end, strict, recording, None, lambda p: p, memo)
        result: dict[str, Any] = {}
        where: dict[Any, int] = {}
        for (key, value), start in zip(pairs, starts):
            if key in result:
                lines.duplicates.setdefault(key, start)
            result[key], where[key] = value, start
        lines.offsets[id(result)] = where
        lines.keep.append(result)
        return result, end

    def parse_array(s_and_end, scan_once):
        starts: list[int] = []

        def recording(string, idx):
            starts.append(idx)
            return scan_once(string, idx)

        values, end = JSONArray(s_and_end, recording)
        lines.offsets[id(values)] = dict(enumerate(starts))
        lines.keep.append(values)
        return values, end

    decoder = json.JSONDecoder()
    decoder.parse_object, decoder.parse_array = parse_object, parse_array
    scan = py_make_scanner(decoder)
    start = len(text) - len(text.lstrip())
    value, _ = scan(text, start)
    return value, lines
