"""The ``paw-gym`` command line.

Each subcommand lives in its own module exposing ``add_parser(subparsers)``, which registers
the subcommand (usually with :func:`training.commands.flags.add_command`) and sets ``func`` on its parser. Modules are
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
  ``key=value[,key=value]`` or a YAML mapping ``'{split: test}'`` (:func:`training.commands.common.parse_env_kwargs`);
  optional values take ``none``;
* a command with a config dataclass takes ``--config FILE.yaml``, and only the flags actually
  given override the file.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
import warnings

from training.commands.common import UserError
from training.commands.flags import CommandParser
from training.infra import numerics
from training.preflight import PreflightError

#: Modules that define subcommands, in the order ``paw-gym --help`` lists them.
COMMAND_MODULES = [
    "training.commands.envs",
    "training.commands.play",
    "training.commands.serve_retriever",
    "training.commands.serve_env",
    "training.commands.openenv_package",
    "training.commands.get_model",
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
    # One torch CPU thread unless the environment says otherwise (docs/training.md, "What
    # every command does the same way"): the tiny models run fastest so, and on a loaded machine more threads than
    # free cores made one 48-episode eval 66 s instead of 1 s. Set before anything imports
    # torch (parsing a command's flags imports transformers, which imports it).
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    # The numerics mode, for the same reason before torch loads: its kernels are chosen then.
    try:
        numerics.apply()
    except numerics.NumericsError as error:
        print(f"paw-gym: error: {error}", file=sys.stderr)
        return 2
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit:  # argparse: --help, --version (0) or a usage error (2)
        return int(exit.code or 0)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    if not getattr(args, "verbose", False):
        from paw_gym.progress import quiet_libraries

        quiet_libraries()
    from run_files.data_files import DataFileError
    from run_files.outputs import GUARD_ERRORS, close_claims

    # A mistake of the user's, wherever it is found: in the arguments, in a data file (one
    # reader per kind), or by the output guard (a folder in use, a user's file in the way, a
    # damaged or incomplete model).
    mistakes = (UserError, PreflightError, DataFileError, *GUARD_ERRORS)
    status = 1
    try:
        try:
            with _settings_that_do_nothing_said_in_one_line(args.command):
                status = int(args.func(args) or 0)
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            status = 130
        except mistakes as error:
            print(f"paw-gym {args.command}: error: {_one_line(error)}", file=sys.stderr)
            status = 2
    finally:
        try:  # an output folder is complete only when its command succeeded
            close_claims(complete=status == 0)
        except GUARD_ERRORS as error:  # its lock was taken over while it wrote
            print(f"paw-gym {args.command}: error: {_one_line(error)}", file=sys.stderr)
            status = 2
    return status


@contextlib.contextmanager
def _settings_that_do_nothing_said_in_one_line(command: str):
    """Print each :class:`~training.infra.checked_config.IneffectiveSetting` warning as one
    line, ``paw-gym COMMAND: warning: ...`` (other warnings as Python prints them)."""
    from training.infra.checked_config import IneffectiveSetting

    with warnings.catch_warnings():  # restores both below
        shown = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None):
            if issubclass(category, IneffectiveSetting):
                print(f"paw-gym {command}: warning: {message}", file=sys.stderr, flush=True)
            else:
                shown(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        warnings.simplefilter("default", IneffectiveSetting)  # once per setting and run
        yield


def _one_line(error: BaseException) -> str:
    """``error``'s message on one line (a path or value with a newline in it included)."""
    return " ".join(str(error).split("\n"))


if __name__ == "__main__":  # python -m training.cli (torchrun, accelerate launch)
    sys.exit(main())
