"""A command's flags are the fields of small dataclasses, built on transformers'
``HfArgumentParser`` (as TRL's ``TrlParser``); see :mod:`training.cli` for the convention.

A subcommand module registers itself with :func:`add_command`, which returns its
:class:`CommandParser` (set ``func`` on it), and reads its values with :func:`arguments_from`.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import difflib
import sys
import typing
from typing import Any, TypeVar

from training.commands.common import UserError

T = TypeVar("T")


def add_command(subparsers: argparse._SubParsersAction, name: str, *dataclass_types: type,
                help: str, description: str | None = None,
                config: type | None = None) -> CommandParser:
    """Register subcommand ``name`` whose flags are the fields of ``dataclass_types`` (and of
    ``config``), and return its parser (set ``func`` on it).

    ``config``: a dataclass also read from ``--config FILE.yaml`` (via
    :func:`training.config.load_config`); its flags have no parser default, so only the flags
    a user gives override the file. Get the values with :func:`arguments_from`.
    """
    description = description or help
    # A multi-line description (a module docstring with examples) is shown as written.
    formatter = argparse.RawDescriptionHelpFormatter if "\n" in description else \
        argparse.HelpFormatter
    parser = subparsers.add_parser(name, help=help, description=description,
                                   formatter_class=formatter, allow_abbrev=False)
    if not isinstance(parser, CommandParser):
        raise TypeError("add_command needs the subparsers of training.cli.build_parser()")
    if config is not None:
        parser.add_argument("--config", default=None, metavar="FILE.yaml",
                            help=f"YAML file of {config.__name__} fields (the flags below win)")
        parser.set_defaults(_config_class=config)
    parser.dataclass_types = [*dataclass_types, *([config] if config else [])]
    parser.config_class = config
    return parser


def arguments_from(args: argparse.Namespace, cls: type[T]) -> T:
    """An instance of ``cls`` from the parsed ``args``. For the command's ``config`` class: its
    ``--config`` file with the flags that were given on top; a bad file or value is a
    :class:`UserError`. Then what the values say about this machine (a ``device`` it has, a
    ``dtype`` that runs there, an installed ``rollout_backend``:
    :func:`training.preflight.check_arguments`), for every command alike."""
    from training.config import load_config
    from training.preflight import check_arguments

    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls)
             if f.init and hasattr(args, f.name)}
    try:
        if cls is getattr(args, "_config_class", None):
            arguments = load_config(args.config, given, cls=cls)
        else:
            arguments = cls(**given)  # a CheckedConfig: types, choices, bounds, relations
        check_arguments(arguments)
        return arguments
    except (ValueError, FileNotFoundError) as error:
        raise UserError(str(error)) from error


class CommandParser(argparse.ArgumentParser):
    """A subcommand's parser: flags from dataclass fields, made when the command is parsed or
    its help is shown (so ``paw-gym envs`` does not import transformers), and "did you mean"
    for an unknown flag."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.add_argument("--verbose", action="store_true",
                          help="also show the libraries' own warnings and progress bars")
        self.dataclass_types: list[type] = []
        self.config_class: type | None = None
        self._fields_added = False
        self._required_by_any_name: list[argparse.Action] = []

    def parse_known_args(self, args=None, namespace=None):
        self.add_field_arguments()
        unknown = self._unknown_flags(sys.argv[1:] if args is None else list(args))
        if unknown:  # before argparse's own checks: a mistyped flag hides a "required" one
            self.error(self._unrecognized(unknown))
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:  # a subcommand ends the line: anything it does not know is a mistake
            self.error(self._unrecognized(extras))
        missing = [action.option_strings[0] for action in self._required_by_any_name
                   if getattr(namespace, action.dest, None) is None]
        if missing:
            self.error(f"the following arguments are required: {', '.join(missing)}")
        return namespace, extras

    def format_usage(self) -> str:
        self.add_field_arguments()
        return super().format_usage()

    def format_help(self) -> str:
        self.add_field_arguments()
        return super().format_help()

    def add_field_arguments(self) -> None:
        """Add one flag per dataclass field (idempotent)."""
        if self._fields_added or not self.dataclass_types:
            return
        self._fields_added = True
        from transformers import HfArgumentParser  # ~0.5 s: only for the command that runs

        from training.config import field_docs

        for cls in self.dataclass_types:
            is_config = cls is self.config_class
            title = f"{cls.__name__} (also in --config; given flags win)" if is_config else \
                cls.__name__
            group = self.add_argument_group(title, (cls.__doc__ or "").strip().split("\n\n")[0]
                                            .replace("%", "%%") or None)
            docs = field_docs(cls)
            for field, kind in _init_fields(cls):
                first = len(self._actions)
                if field.metadata.get("positional"):  # given without a flag: plot's RUNs
                    many = typing.get_origin(kind) is list
                    group.add_argument(field.name, nargs="*" if many else "?",
                                       type=_value_reader(typing.get_args(kind)[0] if many
                                                          else kind),
                                       default=field.default_factory() if many
                                       else field.default,
                                       metavar=field.metadata["positional"])
                    _describe(self._actions[first], field, kind, docs.get(field.name, ""))
                    self._actions[first].metavar = field.metadata["positional"]
                    continue
                HfArgumentParser._parse_dataclass_field(group, _as_hf_field(field, kind))
                main_action, *negations = self._actions[first:]
                if kind is bool:  # HF's own reader's error lists t/f, y/n ...: say it as ours
                    main_action.type = _value_reader(bool)
                _describe(main_action, field, kind, docs.get(field.name, ""))
                for action in negations:  # HF's --no_NAME for a bool field defaulting to true
                    action.help = argparse.SUPPRESS
                if field.metadata.get("former_names") and main_action.required:
                    main_action.required = False  # either name gives it: checked after parsing
                    self._required_by_any_name.append(main_action)
                for former in field.metadata.get("former_names", ()):
                    group.add_argument(*_spellings(former), dest=main_action.dest,
                                       type=main_action.type, default=argparse.SUPPRESS,
                                       help=argparse.SUPPRESS, action=_FormerName,
                                       current=main_action.option_strings[0])
                if is_config:
                    for action in (main_action, *negations):
                        action.default = argparse.SUPPRESS

    def error(self, message: str) -> typing.NoReturn:
        """Exit 2 with the mistake on one line, as a :class:`UserError` (argparse's usage of a
        command with many flags would push the message off the screen)."""
        self.exit(2, f"{self.prog}: error: {message}\n")

    def _unknown_flags(self, args: list[str]) -> list[str]:
        """The ``--flags`` in ``args`` that this command lacks, each with the values after it."""
        known = {flag for action in self._actions for flag in action.option_strings}
        found: list[str] = []
        taking = False
        for arg in args:
            if arg == "--":
                break
            if arg.startswith("-") and not _is_number(arg):
                taking = arg.startswith("--") and arg.split("=", 1)[0] not in known
                if taking:
                    found.append(arg)
            elif taking:
                found.append(arg)
        return found

    def _unrecognized(self, extras: list[str]) -> str:
        flags = [flag for action in self._actions for flag in action.option_strings]
        hints = []
        for extra in extras:
            if extra.startswith("--"):
                nearest = difflib.get_close_matches(extra.split("=")[0], flags, n=1)
                if nearest:
                    hints.append(f"{extra.split('=')[0]}: did you mean {nearest[0]}?")
        return (f"unrecognized arguments: {' '.join(extras)}"
                + (f" ({'; '.join(hints)})" if hints else f" (`{self.prog} --help` lists the "
                                                          "flags)"))


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def former_names(*names: str) -> dict[str, tuple[str, ...]]:
    """Field metadata: earlier names of the field's flag, still accepted with a deprecation line
    (``output_dir: str = field(default=..., metadata=former_names("out"))``)."""
    return {"former_names": names}


def _spellings(name: str) -> list[str]:
    return [f"--{name}"] + ([f"--{name.replace('_', '-')}"] if "_" in name else [])


class _FormerName(argparse.Action):
    """An earlier name of a flag: stores the value under the current name and says so."""

    def __init__(self, *args: Any, current: str, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.current = current

    def __call__(self, parser, namespace, values, option_string=None):
        import sys

        print(f"{parser.prog}: {option_string} is deprecated and will be removed; use "
              f"{self.current}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def _init_fields(cls: type) -> list[tuple[dataclasses.Field, Any]]:
    """The init fields of ``cls`` with their resolved types."""
    hints = typing.get_type_hints(cls)
    return [(f, hints[f.name]) for f in dataclasses.fields(cls) if f.init]


def _as_hf_field(field: dataclasses.Field, kind: Any) -> dataclasses.Field:
    """A copy of ``field`` for ``HfArgumentParser._parse_dataclass_field`` (which edits the field
    it gets). HF handles bools (``--paw [true|false]``, ``--no_paw``) and ``Literal`` choices
    itself; every other type gets :func:`training.config.parse_value` as its argparse type, since
    HF cannot read ``none`` for an optional field, ``a,b`` lists, mappings or ``Any``."""
    from training.infra.checked_config import optional_base

    hf_field = copy.copy(field)
    # What the field accepts is checked by training.infra.checked_config.check_config, not
    # argparse; former names are flags of their own (add_field_arguments).
    hf_field.metadata = {k: v for k, v in field.metadata.items()
                         if k not in ("bounds", "text", "only_with", "former_names")}
    optional, base = optional_base(kind)
    origin = typing.get_origin(base) or base
    if base is bool and not optional or origin is typing.Literal and not optional:
        hf_field.type = kind
        return hf_field
    hf_field.type = _value_reader(kind)
    if origin in (list, dict):
        hf_field.metadata = {**hf_field.metadata, "action": _AddToEarlier,
                             **({"nargs": "+"} if origin is list else {})}
    return hf_field


def _value_reader(kind: Any):
    """An argparse ``type`` reading a flag's text as ``kind``; argparse prefixes its error with
    the flag (``argument --total_steps/--total-steps: expected an integer, got '2.5'``)."""
    from training.infra.config_values import parse_value

    def read(text: str) -> Any:
        try:
            return parse_value(text, kind)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return read


def _describe(action: argparse.Action, field: dataclasses.Field, kind: Any, doc: str) -> None:
    """Help text (the field's docstring and default) and a metavar naming the type."""
    from training.infra.checked_config import optional_base
    from training.infra.config_values import format_value, type_metavar

    if field.default is not dataclasses.MISSING:
        default = f"(default: {format_value(field.default)})"
    elif field.default_factory is not dataclasses.MISSING:
        default = f"(default: {format_value(field.default_factory())})"
    else:
        default = "(required)"
    text = field.metadata.get("help") or doc
    origin = typing.get_origin(optional_base(kind)[1])
    if origin is list:
        text += " Several values: a b, a,b or [a, b]."
    elif origin is dict:
        text += " key=value[,key=value] or a YAML mapping '{key: value}'."
    action.help = f"{text} {default}".strip().replace("%", "%%")
    action.metavar = type_metavar(kind)


class _AddToEarlier(argparse.Action):
    """Stores a list or mapping flag; given again, it adds to the earlier value (``--env A
    --env B``, ``--env_kwargs a=1 --env_kwargs b=2``). A list flag also takes several values
    (``--splits train eval_in_distribution``)."""

    def __call__(self, parser, namespace, values, option_string=None):
        if self.nargs == "+":  # each value was read as a list: one flat list
            values = [item for value in values for item in value]
        earlier = getattr(namespace, self.dest, None)
        if earlier is None or earlier is self.default:  # the first time: replace the default
            setattr(namespace, self.dest, values)
        elif isinstance(earlier, dict):
            setattr(namespace, self.dest, {**earlier, **values})
        else:
            setattr(namespace, self.dest, [*earlier, *values])
