"""Configs that check themselves: :class:`CheckedConfig` (made means checked), the accepted range
of a numeric field (:func:`bounded`, :class:`Bounds`) and :func:`check_config`, the one
validation of a config dataclass: field types and choices, ranges, then the relations between
fields. Every config and command-arguments dataclass of the trainer builds on it."""

from __future__ import annotations

import dataclasses
import functools
import math
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


def check_config(config: Any) -> None:
    """The one validation of a config dataclass, before any model, data or env is touched:
    every field's type and choices (:func:`checkfield_types`), every :func:`bounded` field's
    range, then the relations between fields (the class's ``_check_relations``, if any). A
    bad value is one ``ValueError`` naming it and what is accepted."""
    checkfield_types(config)
    check_bounds(config, {item.name: item.metadata["bounds"]
                          for item in dataclasses.fields(config) if "bounds" in item.metadata})
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


def checkfield_types(config: Any) -> None:
    """Every bool / int / float / str field (optionally None) holds that type and every
    ``Literal`` field one of its choices: ``paw: 3``, ``n_groups: 1.5`` or ``algo: dpo`` is an
    error naming the field, not silently truthy, truncated or failing later."""
    for name, kind in field_types(type(config)).items():
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
