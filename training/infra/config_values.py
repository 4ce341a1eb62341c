"""Text to field values and back: :func:`parse_value` reads a CLI flag's text (or a string in a
YAML config) as the field's type, so the command line and the YAML accept the same values;
:func:`parse_mapping` reads ``key=value`` lists; :func:`format_value`, :func:`describe_type` and
:func:`type_metavar` write values and types for ``--help`` and error messages."""

from __future__ import annotations

import typing
from typing import Any, Literal

from training.infra.checked_config import SCALAR_NAMES, optional_base


_BOOLS = {"true": True, "yes": True, "on": True, "1": True,
          "false": False, "no": False, "off": False, "0": False}



def parse_value(raw: str, kind: Any) -> Any:
    """``raw`` as a value of the field type ``kind``, or a ValueError saying what was expected.

    ``none`` is None for an optional type; ``true|false`` (also yes/no, on/off, 1/0) a bool; a
    list takes ``a,b`` or ``[a, b]``; a mapping ``{key: value}`` or ``key=value,key=value``
    (:func:`parse_mapping`); ``Any`` is read as YAML.
    """
    optional, base = optional_base(kind)
    text = raw.strip()
    if optional and text.lower() in ("none", "null"):
        return None
    origin = typing.get_origin(base) or base
    if origin is dict:
        return parse_mapping(raw)  # its errors name the bad item
    try:
        if origin is Literal:
            if text not in map(str, typing.get_args(base)):
                raise ValueError(text)
            return next(choice for choice in typing.get_args(base) if str(choice) == text)
        if base is bool:
            return _BOOLS[text.lower()]
        if base in (int, float):
            return base(text)
        if base is str:
            return raw
        if origin is list:
            (item_kind,) = typing.get_args(base) or (Any,)
            return [parse_value(str(item), item_kind) for item in _list_items(text)]
    except (ValueError, KeyError):
        raise ValueError(f"expected {describe_type(kind)}, got {raw!r}") from None
    import yaml

    return yaml.safe_load(raw)


def _list_items(text: str) -> list[Any]:
    if text.startswith("["):
        import yaml

        try:
            items = yaml.safe_load(text)
        except yaml.YAMLError:
            raise ValueError(text) from None
        if not isinstance(items, list):
            raise ValueError(text)
        return items
    return _split_top_level(text)


def parse_mapping(text: str) -> dict[str, Any]:
    """The one env-kwargs syntax: a YAML / JSON mapping (``{split: test, n_items: 8}``) or
    ``key=value[,key=value]`` pairs whose values are read as YAML (``n=8`` is an int,
    ``x=none`` None, ``tasks=[a, b]`` a list). A ValueError names the bad item."""
    import yaml

    text = text.strip()
    if text.startswith("{"):
        try:
            mapping = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise ValueError(f"{text!r} is not a valid YAML mapping "
                             f"({getattr(error, 'problem', None) or error})") from None
        if not isinstance(mapping, dict):
            raise ValueError(f"{text!r} is not a mapping like {{split: test}}")
        return mapping
    mapping = {}
    for item in _split_top_level(text):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"item {item!r} is not key=value (give key=value[,key=value] or a "
                             "YAML mapping like '{split: test}')")
        try:
            mapping[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError:  # text YAML cannot read (e.g. "@x") stays a string
            mapping[key.strip()] = value.strip()
    return mapping


def _split_top_level(text: str) -> list[str]:
    """``text`` cut at the commas outside brackets, braces and quotes (``a=[1, 2],b=3`` is two
    items), without blank items."""
    items, depth, quote, start = [], 0, "", 0
    for index, char in enumerate(text):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "[{(":
            depth += 1
        elif char in "]})":
            depth -= 1
        elif char == "," and depth == 0:
            items.append(text[start:index])
            start = index + 1
    items.append(text[start:])
    return [item.strip() for item in items if item.strip()]


def describe_type(kind: Any) -> str:
    """What a value of ``kind`` looks like, for error messages: ``int | None`` → "an integer or
    none"."""
    optional, base = optional_base(kind)
    origin = typing.get_origin(base) or base
    if origin is Literal:
        text = "one of " + " | ".join(map(str, typing.get_args(base)))
    elif origin is list:
        text = "a list like a,b or [a, b]"
    elif origin is dict:
        text = "a mapping like key=value,key=value or '{key: value}'"
    else:
        text = SCALAR_NAMES.get(base, "a YAML value")
    return text + (" or none" if optional else "")


def type_metavar(kind: Any) -> str:
    """The placeholder ``--help`` shows for a value of ``kind``: INT, FLOAT, STR, true|false,
    {a,b}, KEY=VALUE[,...]; a list shows its item's (``|none`` appended when it is
    optional)."""
    optional, base = optional_base(kind)
    origin = typing.get_origin(base) or base
    if origin is Literal:
        text = "{" + ",".join(map(str, typing.get_args(base))) + "}"
    elif origin is list:  # argparse shows several: STR [STR ...]
        (item_kind,) = typing.get_args(base) or (Any,)
        text = type_metavar(item_kind)
    elif origin is dict:
        text = "KEY=VALUE[,...]"
    else:
        text = {bool: "true|false", int: "INT", float: "FLOAT", str: "STR"}.get(base, "VALUE")
    return text + ("|none" if optional else "")


def format_value(value: Any) -> str:
    """``value`` written the way :func:`parse_value` reads it back (for ``--help`` defaults and
    for turning a config into flags): true/false, none, ``a,b`` lists, ``{k: v}`` mappings."""
    import yaml

    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        items = [format_value(item) for item in value]
        if all(item and "," not in item and not item.startswith("[") for item in items):
            return ",".join(items)
        return yaml.safe_dump(value, default_flow_style=True, width=10**9).strip()
    if isinstance(value, dict):
        return yaml.safe_dump(value, default_flow_style=True, width=10**9).strip()
    return str(value)
