"""Configs that check themselves: :class:`CheckedConfig` (made means checked), what each field
accepts, declared with it, and :func:`check_config`, the one validation of a config dataclass:
field types and choices, then each field's declaration, then the relations between fields.
Every config and command-arguments dataclass of the trainer and every ``paw-gym`` command
builds on it, so each flag of each command is one declaration:

* a number's range: :func:`bounded` (:class:`Bounds`; every integer field declares both ends,
  counts and sizes an upper one this machine can hold; floats are finite by type);
* what a string names (:class:`Text`): a folder or file written (:func:`output_folder`,
  :func:`output_file`: refused when the other kind is there), a file or folder read
  (:func:`input_file`, :func:`input_folder`, :func:`input_path`: refused when missing), a
  registered env id (:func:`env_id`), a model (:func:`model_name`; checked against the hub or
  disk by ``training.preflight``), a module to import (:func:`module_name`), a plain file name
  (:func:`file_name`) or free text (:func:`text`, optionally a pattern). No string holds a NUL,
  and no path is longer than the system takes.

``tests/test_every_flag.py`` reads these declarations from every command's parser and tries bad
values of each."""

from __future__ import annotations

import collections.abc
import dataclasses
import functools
import math
import os
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Literal


class CheckedConfig:
    """Base of every config and command-arguments dataclass: made means checked
    (:func:`check_config` runs in ``__post_init__``), so a bad value fails where it is given,
    whether from a YAML file, the command line or Python."""

    def __post_init__(self) -> None:
        check_config(self)


@dataclass(frozen=True)
class Bounds:
    """The values a numeric field accepts, declared with the field (:func:`bounded`) and
    checked by :func:`check_config`; None admits itself in an optional field."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    """``low < value`` (not ``low <= value``)."""
    high_open: bool = False
    """``value < high`` (not ``value <= high``)."""
    what: str | None = None
    """The accepted value's name in the message (default: an integer / a number)."""
    note: str = ""
    """What a special value means (``0: never``), added to the message."""

    def admits(self, value: float) -> bool:
        above = self.low is None or (value > self.low if self.low_open else value >= self.low)
        below = self.high is None or (value < self.high if self.high_open else value <= self.high)
        return above and below

    def describe(self, kind: str, optional: bool) -> str:
        """``an integer >= 1``, ``a number in (0, 1]`` ... (``kind``: the type's name)."""
        what = self.what or kind
        low, high = (None if b is None else (f"{b:,}" if abs(b) >= 10**4 else f"{b:g}")
                     for b in (self.low, self.high))
        if low is not None and high is not None:
            text = (f"{what} in {'(' if self.low_open else '['}{low}, {high}"
                    f"{')' if self.high_open else ']'}")
        elif low is not None:
            text = f"{what} {'>' if self.low_open else '>='} {low}"
        else:
            text = f"{what} {'<' if self.high_open else '<='} {high}"
        return text + (" or none" if optional else "") + (f" ({self.note})" if self.note else "")


def bounded(default: Any, low: float | None = None, high: float | None = None, *,
            low_open: bool = False, high_open: bool = False, what: str | None = None,
            note: str = "", **metadata: Any) -> Any:
    """A dataclass field with its accepted range (:class:`Bounds`) in its metadata
    (``metadata``: more of it, e.g. :func:`only_with`)."""
    return field(default=default, metadata={"bounds": Bounds(low, high, low_open, high_open,
                                                             what, note), **metadata})


class MissingInput(ValueError):
    """A file or folder a field names to be read does not exist (a config's ``# first:`` line
    may say what makes it: ``training.config.first_steps``)."""


class IneffectiveSetting(UserWarning):
    """A setting given a value that does nothing in its combination (``paw-gym`` prints it as
    one ``warning:`` line before any work)."""


@dataclass(frozen=True)
class OnlyWith:
    """A field that acts only when ``applies(config)`` (:func:`only_with`)."""

    when: str
    """The condition, as the message says it (``async_rollouts is true``)."""
    applies: Callable[[Any], bool]


def only_with(when: str, applies: Callable[[Any], bool]) -> dict[str, OnlyWith]:
    """Field metadata: the field does something only when ``applies(config)`` (``when``: that
    condition in words); a value other than its default is warned about
    (:class:`IneffectiveSetting`) where it does not."""
    return {"only_with": OnlyWith(when, applies)}


#: The largest port number.
MAX_PORT = 65535
#: The most tokens one sequence, answer or optimizer step may hold (10 M: past any model's
#: context; a step of more would not fit this machine's memory).
MAX_TOKENS = 10**7
#: The largest LoRA rank (a rank above the layer width is no adapter).
MAX_LORA_RANK = 65536
#: The longest path and path component Linux takes (PATH_MAX, NAME_MAX), in bytes.
MAX_PATH_BYTES, MAX_NAME_BYTES = 4096, 255


def port(default: int) -> Any:
    """A TCP port field (0: a free one)."""
    return bounded(default, 0, MAX_PORT, what="a TCP port", note="0 picks a free one")


@dataclass(frozen=True)
class Text:
    """What a string field (or each string of a list field) holds, declared with the field and
    checked by :func:`check_config` (``special``: values that are words, not paths or ids)."""

    kind: Literal["text", "file_name", "env_id", "model", "module", "output_folder",
                  "output_file", "input_file", "input_folder", "input_path"]
    special: tuple[str, ...] = ()
    pattern: str | None = None
    """``text``: a regular expression the whole value matches."""
    what: str = ""
    """``text`` with a pattern: what the pattern accepts, for the message."""

    @property
    def is_path(self) -> bool:
        return self.kind.startswith(("output_", "input_"))


def _declared(kind: str, default: Any = dataclasses.MISSING, factory: Any = dataclasses.MISSING,
              special: tuple[str, ...] = (), pattern: str | None = None, what: str = "",
              **metadata: Any) -> Any:
    return field(default=default, default_factory=factory,
                 metadata={"text": Text(kind, special, pattern, what), **metadata})


def text(default: Any = dataclasses.MISSING, *, pattern: str | None = None, what: str = "",
         factory: Any = dataclasses.MISSING, **metadata: Any) -> Any:
    """Free text (a name, a split, a host, a prompt), or text matching ``pattern``."""
    return _declared("text", default, factory, pattern=pattern, what=what, **metadata)


def file_name(default: Any = dataclasses.MISSING, **metadata: Any) -> Any:
    """A plain file name (no folder: the file goes into the command's output folder)."""
    return _declared("file_name", default, **metadata)


def env_id(default: Any = dataclasses.MISSING, factory: Any = dataclasses.MISSING,
           **metadata: Any) -> Any:
    """A registered env id (``paw-gym envs`` lists them)."""
    return _declared("env_id", default, factory, **metadata)


def model_name(default: Any = dataclasses.MISSING, **metadata: Any) -> Any:
    """A model: a folder, a hub id, a .gguf file or an offline model's name
    (``training.preflight.check_model`` checks it before any weight loads)."""
    return _declared("model", default, **metadata)


def module_name(factory: Any = list, **metadata: Any) -> Any:
    """Modules to import (imported by the check: an import error is the mistake)."""
    return _declared("module", factory=factory, **metadata)


def output_folder(default: Any = dataclasses.MISSING, **metadata: Any) -> Any:
    """A folder the command writes into (created when missing; a file there is refused)."""
    return _declared("output_folder", default, **metadata)


def output_file(default: Any = dataclasses.MISSING, **metadata: Any) -> Any:
    """A file the command writes (a folder there is refused)."""
    return _declared("output_file", default, **metadata)


def input_file(default: Any = dataclasses.MISSING, special: tuple[str, ...] = (),
               **metadata: Any) -> Any:
    """A file the command reads: it must exist (``special`` values are words, not files)."""
    return _declared("input_file", default, special=special, **metadata)


def input_folder(default: Any = dataclasses.MISSING, special: tuple[str, ...] = (),
                 **metadata: Any) -> Any:
    """A folder the command reads: it must exist."""
    return _declared("input_folder", default, special=special, **metadata)


def input_path(default: Any = dataclasses.MISSING, factory: Any = dataclasses.MISSING,
               **metadata: Any) -> Any:
    """A file or folder the command reads: it must exist."""
    return _declared("input_path", default, factory, **metadata)


SCALAR_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}

#: The range of a field that declares none, by the field's name: every ``seed`` (and
#: ``..._seed``) of every config and command is a 32-bit unsigned seed, as NumPy takes it.
SEED_BOUNDS = Bounds(0, 2**32, high_open=True)


def default_bounds(name: str, kind: Any) -> Bounds | None:
    """The :class:`Bounds` a field gets without declaring its own (:data:`SEED_BOUNDS` for an
    integer ``seed`` / ``..._seed``), or None."""
    if optional_base(kind)[1] is int and (name == "seed" or name.endswith("_seed")):
        return SEED_BOUNDS
    return None


def check_config(config: Any) -> None:
    """The one validation of a config dataclass, before any model, data or env is touched:
    every field's type and choices (:func:`checkfield_types`), every :func:`bounded` field's
    range, every :class:`Text` field's declaration (:func:`check_texts`), then the relations
    between fields (the class's ``_check_relations``, if any). A bad value is one
    ``ValueError`` naming it and what is accepted."""
    checkfield_types(config)
    kinds = field_types(type(config))
    bounds = {item.name: item.metadata.get("bounds") or default_bounds(item.name, kinds[item.name])
              for item in dataclasses.fields(config)}
    check_bounds(config, {name: accepted for name, accepted in bounds.items() if accepted})
    check_texts(config)
    relations = getattr(config, "_check_relations", None)
    if relations is not None:
        relations()
    warn_ineffective(config)


def warn_ineffective(config: Any) -> None:
    """An :class:`IneffectiveSetting` warning for each :func:`only_with` field of ``config``
    set away from its default where its condition does not hold."""
    import warnings

    for item in dataclasses.fields(config):
        rule = item.metadata.get("only_with")
        if rule is None or rule.applies(config):
            continue
        default = item.default if item.default_factory is dataclasses.MISSING else \
            item.default_factory()
        value = getattr(config, item.name)
        if value != default:
            warnings.warn(f"{item.name}={value!r} does nothing unless {rule.when}; it is "
                          "ignored", IneffectiveSetting, stacklevel=2)


def check_texts(config: Any) -> None:
    """``ValueError`` for the first string of a :class:`Text` field of ``config`` that is not
    what it declares (modules first: importing one may register the env another names)."""
    declared = [(item.name, item.metadata["text"]) for item in dataclasses.fields(config)
                if "text" in item.metadata]
    for name, accepted in sorted(declared, key=lambda pair: pair[1].kind != "module"):
        value = getattr(config, name)
        for item in (value if isinstance(value, (list, tuple)) else [value]):
            if isinstance(item, str) and item not in accepted.special:
                _check_text(name, item, accepted)


def _check_text(name: str, value: str, accepted: Text) -> None:
    import re

    bad = f"{name}={value!r}"
    if "\0" in value:
        raise ValueError(f"{bad} is invalid; it holds a NUL character")
    if accepted.is_path or accepted.kind == "file_name":
        if not value.strip():
            raise ValueError(f"{name}={value!r} is invalid; expected a path")
        encoded = os.fsencode(value)
        longest = max(map(len, encoded.split(b"/")))
        if len(encoded) > MAX_PATH_BYTES or longest > MAX_NAME_BYTES:
            raise ValueError(f"{name}={value[:40]!r}… is too long for a path ({len(encoded)} "
                             f"bytes, a name of {longest}); this system takes "
                             f"{MAX_PATH_BYTES} bytes, {MAX_NAME_BYTES} per name")
    kind = accepted.kind
    if kind == "text" and accepted.pattern and not re.fullmatch(accepted.pattern, value):
        raise ValueError(f"{bad} is invalid; expected {accepted.what or accepted.pattern}")
    elif kind == "file_name" and (os.path.basename(value) != value or value in (".", "..")):
        raise ValueError(f"{bad}: give a plain file name (no folders); the files go into the "
                         "command's output folder")
    elif kind == "env_id":
        from paw_gym.registration import check_env_id

        try:
            check_env_id(value)
        except ValueError as error:
            raise ValueError(f"{name}: {error}") from None
    elif kind == "module":
        import importlib

        try:
            importlib.import_module(value)
        except ImportError as error:
            raise ValueError(f"{bad} cannot be imported ({error})") from None
        except (Exception, SystemExit) as error:  # noqa: BLE001 - the module's own code ran
            import traceback

            where = traceback.extract_tb(error.__traceback__)[-1]
            raise ValueError(f"{bad} raised {type(error).__name__} when imported ({error}; at "
                             f"{where.filename}:{where.lineno})") from None
    elif kind == "output_folder" and os.path.exists(value) and not os.path.isdir(value):
        raise ValueError(f"{bad} is a file; give a folder to write into")
    elif kind == "output_file" and os.path.isdir(value):
        raise ValueError(f"{bad} is a folder; give a file name")
    elif kind.startswith("input_") and not os.path.exists(value):
        raise MissingInput(f"{bad} does not exist")
    elif kind == "input_file" and not os.path.isfile(value):
        raise ValueError(f"{bad} is a folder; give a file")
    elif kind == "input_folder" and not os.path.isdir(value):
        raise ValueError(f"{bad} is a file; give a folder")


def check_bounds(config: Any, bounds: dict[str, Bounds]) -> None:
    """``ValueError`` for the first field of ``config`` outside its :class:`Bounds` (for a
    class whose field metadata belongs to another parser, e.g. a TRL config)."""
    kinds = field_types(type(config))
    for name, accepted in bounds.items():
        value = getattr(config, name)
        if value is None or accepted.admits(value):
            continue
        optional, base = optional_base(kinds[name])
        raise ValueError(f"{name}={value!r} is invalid; expected "
                         + accepted.describe("an integer" if base is int else "a number",
                                             optional))


def checkfield_types(config: Any, names: typing.Iterable[str] | None = None) -> None:
    """Every bool / int / float / str field (optionally None) holds that type and every
    ``Literal`` field one of its choices: ``paw: 3``, ``n_groups: 1.5`` or ``algo: dpo`` is an
    error naming the field, not silently truthy, truncated or failing later. ``names``: only
    these fields (a class that adds fields to another library's config, e.g. TRL's)."""
    kinds = field_types(type(config))
    for name, kind in (kinds.items() if names is None else ((n, kinds[n]) for n in names)):
        optional, base = optional_base(kind)
        value = getattr(config, name)
        if value is None and optional:
            continue
        if typing.get_origin(base) is Literal:
            if value not in typing.get_args(base):
                raise ValueError(f"{name}={value!r} is invalid; expected "
                                 + " | ".join(map(str, typing.get_args(base))))
            continue
        if base not in SCALAR_NAMES:
            continue
        if base is float:  # a non-finite number is no setting: lr inf trains NaN weights
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and \
                math.isfinite(value)
        elif base is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        else:
            ok = isinstance(value, base)
        if base is str and ok and "\0" in value:  # no file name, id or prompt holds one
            raise ValueError(f"{name}={value!r} is invalid; it holds a NUL character")
        if not ok:
            raise ValueError(f"{name}={value!r} is invalid; expected {SCALAR_NAMES[base]}"
                             + (" (finite)" if base is float else "")
                             + (" or none" if optional else ""))


@functools.lru_cache(maxsize=None)
def field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def optional_base(kind: Any) -> tuple[bool, Any]:
    """``(whether the field type admits None, the type without None)``: ``int | None`` →
    ``(True, int)``, ``float`` → ``(False, float)``."""
    args = typing.get_args(kind)
    optional = typing.get_origin(kind) in (typing.Union, types.UnionType) and type(None) in args
    return optional, (next((a for a in args if a is not type(None)), kind) if optional else kind)


def fits_type(value: Any, kind: Any) -> bool:
    """Whether ``value`` (as YAML or a ``key=value`` flag gives it: None, a bool, a number, a
    string, a list or a mapping) is a value of the annotation ``kind``: a constructor
    argument's, checked before the constructor runs. An int is a float; a list is a tuple or
    sequence (YAML has no tuples); a string is a path. What cannot be told from the annotation
    (``Any``, a type variable, a callable) fits."""
    if kind in (Any, object) or kind is None and value is None:
        return True
    if kind is type(None) or kind is None:
        return value is None
    origin = typing.get_origin(kind)
    args = typing.get_args(kind)
    if origin is typing.Annotated:
        return fits_type(value, args[0])
    if origin in (typing.Union, types.UnionType):
        return any(fits_type(value, arg) for arg in args)
    if origin is Literal:
        return any(value == choice and type(value) is type(choice) for choice in args)
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is str:
        return isinstance(value, str)
    if origin in (list, tuple, set, frozenset, collections.abc.Sequence,
                  collections.abc.Collection, collections.abc.Iterable):
        if not isinstance(value, (list, tuple)):
            return False
        if origin is tuple and args and args[-1] is not Ellipsis:
            return len(value) == len(args) and all(map(fits_type, value, args))
        return all(fits_type(item, args[0] if args else Any) for item in value)
    if origin in (dict, collections.abc.Mapping):
        key, item = args or (Any, Any)
        return isinstance(value, dict) and all(fits_type(k, key) and fits_type(v, item)
                                               for k, v in value.items())
    if isinstance(kind, type):
        if issubclass(kind, os.PathLike) or kind is os.PathLike:
            return isinstance(value, (str, os.PathLike))
        return isinstance(value, kind)
    return True


def describe_kind(kind: Any) -> str:
    """What a value of the annotation ``kind`` looks like, for an error message: ``int |
    None`` → "an integer or none", ``Literal['train', 'test']`` → "one of train | test"."""
    origin = typing.get_origin(kind)
    args = typing.get_args(kind)
    if kind is type(None) or kind is None:
        return "none"
    if origin is typing.Annotated:
        return describe_kind(args[0])
    if origin in (typing.Union, types.UnionType):
        parts = [describe_kind(arg) for arg in args if arg is not type(None)]
        return " or ".join(dict.fromkeys(parts + (["none"] if type(None) in args else [])))
    if origin is Literal:
        return "one of " + " | ".join(map(str, args))
    if kind in SCALAR_NAMES:
        return SCALAR_NAMES[kind]
    if origin in (list, tuple, set, frozenset, collections.abc.Sequence,
                  collections.abc.Collection, collections.abc.Iterable):
        item = args[0] if args and (origin is not tuple or args[-1] is Ellipsis or
                                    len(set(args)) == 1) else None
        return "a list" + (f" of {_plural(describe_kind(item))}" if item not in (None, Any)
                           else "")
    if origin in (dict, collections.abc.Mapping):
        return "a mapping"
    if isinstance(kind, type) and (issubclass(kind, os.PathLike) or kind is os.PathLike):
        return "a path"
    return f"a {getattr(kind, '__name__', kind)}"


def _plural(text: str) -> str:
    for article in ("an ", "a "):
        if text.startswith(article):
            return text[len(article):] + "s"
    return text
