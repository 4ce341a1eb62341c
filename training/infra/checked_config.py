"""Configs that check themselves: :class:`CheckedConfig` (made means checked), the accepted range
of a numeric field (:func:`bounded`, :class:`Bounds`) and :func:`check_config`, the one
validation of a config dataclass: field types and choices, ranges, then the relations between
fields. Every config and command-arguments dataclass of the trainer builds on it."""

from __future__ import annotations

import collections.abc
import dataclasses
import functools
import math
import os
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal


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
            note: str = "") -> Any:
    """A dataclass field with its accepted range (:class:`Bounds`) in its metadata."""
    return field(default=default, metadata={"bounds": Bounds(low, high, low_open, high_open,
                                                             what, note)})


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
    range, then the relations between fields (the class's ``_check_relations``, if any). A
    bad value is one ``ValueError`` naming it and what is accepted."""
    checkfield_types(config)
    kinds = field_types(type(config))
    bounds = {item.name: item.metadata.get("bounds") or default_bounds(item.name, kinds[item.name])
              for item in dataclasses.fields(config)}
    check_bounds(config, {name: accepted for name, accepted in bounds.items() if accepted})
    relations = getattr(config, "_check_relations", None)
    if relations is not None:
        relations()


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
