"""The ``paw-gym`` command line.

Each subcommand lives in its own module exposing ``add_parser(subparsers)``, which registers
the subcommand (usually with :func:`add_command`) and sets ``func`` on its parser. Modules are
imported when the CLI starts, so a subcommand module must keep heavy imports (torch,
alfworld, ...) inside its handler.

One convention for every command, built on transformers' ``HfArgumentParser`` (as TRL's
``TrlParser``): the flags of a command are the fields of small dataclasses, each documented by
its attribute docstring, so

* every flag is typed and ``--help`` shows its type and default (``--total_steps INT``,
  ``--algo {grpo,gigpo,rloo,ppo}``, ``--paw [true|false]``, ``(default: 150)``);
* every flag is spelled both ways, ``--max_new_tokens`` and ``--max-new-tokens``;
* a bad value is one error naming the flag, the value and the expected type, and an unknown
  flag suggests the nearest one;
* lists take ``a,b``, ``[a, b]`` or ``a b``; mappings (``--env_kwargs``) take
  ``key=value[,key=value]`` or a YAML mapping ``'{split: test}'`` (:func:`parse_env_kwargs`);
  optional values take ``none``;
* a command with a config dataclass takes ``--config FILE.yaml``, and only the flags actually
  given override the file.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import difflib
import importlib
import sys
import typing
from pathlib import Path
from typing import Any, TypeVar

#: Modules that define subcommands, in the order ``paw-gym --help`` lists them.
COMMAND_MODULES = [
    "training.commands.envs",
    "training.commands.play",
    "training.commands.serve_retriever",
    "training.commands.serve_env",
    "training.commands.build_tiny_model",
    "training.commands.gen_alfworld",
    "training.commands.train",
    "training.commands.eval",
    "training.commands.sft",
    "training.commands.train_wm",
    "training.commands.eval_wm",
    "training.commands.demo",
    "training.commands.plot",
]

T = TypeVar("T")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="paw-gym",
        description="Text environments and PaW (policy + world-model co-training) for LLM agents.",
        epilog="Flags are spelled --like_this or --like-this; `paw-gym COMMAND --help` lists a "
               "command's flags with their types and defaults.")
    parser.add_argument("--version", action="version", version=_version())
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND",
                                       parser_class=CommandParser)
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).add_parser(subparsers)
    return parser


def _version() -> str:
    from paw_gym import __version__

    return f"paw-gym {__version__}"


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns its exit status (2 for a mistake in the command line, printed
    as one line ``paw-gym COMMAND: error: ...``)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit:  # argparse: --help, --version (0) or a usage error (2)
        return int(exit.code or 0)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except UserError as error:
        print(f"paw-gym {args.command}: error: {error}", file=sys.stderr)
        return 2


class UserError(Exception):
    """A mistake in what the user asked for: printed as one line, no traceback."""


def check_file_name(name: str | None, flag: str) -> None:
    """A ``--name`` that names files inside ``--out``: a plain file name, so that nothing is
    written outside ``--out`` (``--name ../../x`` did)."""
    if name is not None and (not name.strip() or Path(name).name != name
                             or name in (".", "..")):
        raise UserError(f"{flag} {name!r}: give a plain file name (no folders); the files go "
                        "into --out")


def require_writable(folder: str | Path, flag: str) -> None:
    """Fail before any work when ``folder`` cannot be created or written (a read-only disk, a
    file in the way), instead of after an evaluation or a training run."""
    import tempfile

    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise UserError(f"{flag} {str(folder)!r} is not writable ({error.strerror or error}); "
                        "choose a folder you can write") from error


def claim_output_folder(folder: str | Path, command: str, overwrite: bool,
                        flag: str = "--output_dir") -> None:
    """A command's output folder, before any work: writable, and claimed through the output
    guard (:func:`training.outputs.claim_folder`); either mistake is one :class:`UserError`."""
    from training.outputs import OutputExists, claim_folder

    require_writable(folder, flag)
    try:
        claim_folder(folder, command, overwrite, flag=flag)
    except OutputExists as error:
        raise UserError(str(error)) from None


def claim_output_files(paths: list[Path], overwrite: bool, flag: str, folder_flag: str) -> None:
    """A command's output files (all in one folder), before any work: none there already unless
    ``overwrite`` (:func:`training.outputs.claim_file`), and their folder writable."""
    from training.outputs import OutputExists, claim_file

    try:
        for path in paths:
            claim_file(path, overwrite, flag)
    except OutputExists as error:
        raise UserError(str(error)) from None
    require_writable(Path(paths[0]).parent, folder_flag)


def check_env(env_id: str, env_kwargs: dict[str, Any] | None = None) -> None:
    """A :class:`UserError` (one line) when ``env_id`` is not a registered env, listing this
    project's and the user's text envs and the nearest id, or when ``env_kwargs`` holds a key
    its constructor does not take. Builds nothing (an env can be expensive to build)."""
    import gymnasium as gym

    import paw_gym
    from agents.envs import check_env_settings

    if env_id not in gym.registry:
        text_envs = list(paw_gym.list_text_envs())
        nearest = difflib.get_close_matches(env_id, text_envs, n=1)
        hint = f"did you mean {nearest[0]}? " if nearest else ""
        raise UserError(f"unknown env id {env_id!r}; {hint}registered text envs: "
                        f"{', '.join(text_envs)} (`paw-gym envs` describes them)")
    try:
        check_env_settings(env_id, env_kwargs)
    except ValueError as error:
        raise UserError(str(error)) from None


def parse_env_kwargs(text: str) -> dict[str, Any]:
    """The one env-kwargs syntax of every command: ``'{split: test, n_items: 8}'`` (YAML or
    JSON) or ``split=test,n_items=8`` (values read as YAML); a :class:`UserError` names the
    bad item."""
    from training.config import parse_mapping

    try:
        return parse_mapping(text)
    except ValueError as error:
        raise UserError(f"env_kwargs {error}") from None


# -- commands whose flags are dataclass fields ------------------------------------------------

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
    :class:`UserError`."""
    from training.config import load_config

    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls)
             if f.init and hasattr(args, f.name)}
    try:
        if cls is getattr(args, "_config_class", None):
            return load_config(args.config, given, cls=cls)
        return cls(**given)  # a CheckedConfig: types, choices, bounds, relations
    except (ValueError, FileNotFoundError) as error:
        raise UserError(str(error)) from error


class CommandParser(argparse.ArgumentParser):
    """A subcommand's parser: flags from dataclass fields, made when the command is parsed or
    its help is shown (so ``paw-gym envs`` does not import transformers), and "did you mean"
    for an unknown flag."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.dataclass_types: list[type] = []
        self.config_class: type | None = None
        self._fields_added = False

    def parse_known_args(self, args=None, namespace=None):
        self.add_field_arguments()
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:  # a subcommand ends the line: anything it does not know is a mistake
            self.error(self._unrecognized(extras))
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
                HfArgumentParser._parse_dataclass_field(group, _as_hf_field(field, kind))
                main_action, *negations = self._actions[first:]
                if kind is bool:  # HF's own reader's error lists t/f, y/n ...: say it as ours
                    main_action.type = _value_reader(bool)
                _describe(main_action, field, kind, docs.get(field.name, ""))
                for action in negations:  # HF's --no_NAME for a bool field defaulting to true
                    action.help = argparse.SUPPRESS
                if is_config:
                    for action in (main_action, *negations):
                        action.default = argparse.SUPPRESS

    def error(self, message: str) -> typing.NoReturn:
        """Exit 2 with the mistake on one line, as a :class:`UserError` (argparse's usage of a
        command with many flags would push the message off the screen)."""
        self.exit(2, f"{self.prog}: error: {message}\n")

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


def _init_fields(cls: type) -> list[tuple[dataclasses.Field, Any]]:
    """The init fields of ``cls`` with their resolved types."""
    hints = typing.get_type_hints(cls)
    return [(f, hints[f.name]) for f in dataclasses.fields(cls) if f.init]


def _as_hf_field(field: dataclasses.Field, kind: Any) -> dataclasses.Field:
    """A copy of ``field`` for ``HfArgumentParser._parse_dataclass_field`` (which edits the field
    it gets). HF handles bools (``--paw [true|false]``, ``--no_paw``) and ``Literal`` choices
    itself; every other type gets :func:`training.config.parse_value` as its argparse type, since
    HF cannot read ``none`` for an optional field, ``a,b`` lists, mappings or ``Any``."""
    from training.config import _optional_base

    hf_field = copy.copy(field)
    # The field's accepted range is checked by training.config.check_config, not argparse.
    hf_field.metadata = {k: v for k, v in field.metadata.items() if k != "bounds"}
    optional, base = _optional_base(kind)
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
    from training.config import parse_value

    def read(text: str) -> Any:
        try:
            return parse_value(text, kind)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return read


def _describe(action: argparse.Action, field: dataclasses.Field, kind: Any, doc: str) -> None:
    """Help text (the field's docstring and default) and a metavar naming the type."""
    from training.config import _optional_base, format_value, type_metavar

    if field.default is not dataclasses.MISSING:
        default = f"(default: {format_value(field.default)})"
    elif field.default_factory is not dataclasses.MISSING:
        default = f"(default: {format_value(field.default_factory())})"
    else:
        default = "(required)"
    text = field.metadata.get("help") or doc
    origin = typing.get_origin(_optional_base(kind)[1])
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


if __name__ == "__main__":
    # The commands import training.cli: run its main, so that UserError and CommandParser are
    # the classes they use, not copies in __main__.
    from training.cli import main as cli_main

    sys.exit(cli_main())
