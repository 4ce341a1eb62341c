"""The ``paw-gym`` command line.

Each subcommand lives in its own module exposing ``add_parser(subparsers)``, which registers
the subcommand and sets ``func`` on its parser. Modules are imported when the CLI starts, so a
subcommand module must keep heavy imports (torch, alfworld, ...) inside its handler.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

#: Modules that define subcommands, in the order ``paw-gym --help`` lists them.
COMMAND_MODULES = [
    "training.commands.envs",
    "training.commands.play",
    "training.commands.serve_retriever",
    "training.commands.build_tiny_model",
    "training.commands.gen_alfworld",
    "training.commands.train",
    "training.commands.eval",
    "training.commands.sft",
    "training.commands.demo",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="paw-gym",
        description="Text environments and PaW (policy + world-model co-training) for LLM agents.",
    )
    parser.add_argument("--version", action="version", version=_version())
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).add_parser(subparsers)
    return parser


def _version() -> str:
    from paw_gym import __version__

    return f"paw-gym {__version__}"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
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


def config_from_args(args, cls):
    """The ``cls`` config from ``--config`` (YAML) and the field flags (which win); a bad file
    or value is a :class:`UserError`."""
    from training.config import load_config, overrides_from_args

    try:
        return load_config(args.config, overrides_from_args(args, cls), cls=cls)
    except (ValueError, FileNotFoundError) as error:
        raise UserError(str(error)) from error


if __name__ == "__main__":
    sys.exit(main())
