"""Every flag of every ``paw-gym`` command, read from the parser, against bad values built from
the flag's declaration (``training.infra.checked_config``), not from a list of cases.

For each command registered in ``training.cli`` and each flag its parser has: an integer
below its lower and above its upper bound (every integer declares both), a float outside its
range, ``nan``, ``inf``, a wrong type, a choice not offered, a NUL in a string, a folder where
a file is read or written and the reverse, a missing input, a path longer than the system
takes, an unknown env id or module. Each must end in exit status 2 with one ``paw-gym CMD:
error:`` line naming the flag, no traceback, nothing created, within seconds. A flag without
a declaration fails here, so a new flag cannot skip its checks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import socket
import time
import typing
from pathlib import Path

import pytest

from training.cli import build_parser, main
from training.infra.checked_config import Bounds, default_bounds, optional_base

#: Seconds one refusal may take (it comes before any work; the first one of a command imports
#: its modules).
QUICK = 20


def _commands() -> dict[str, typing.Any]:
    parser = build_parser()
    return dict(parser._subparsers._group_actions[0].choices)  # noqa: SLF001 (argparse has no API)


def _fields() -> list[tuple[str, dataclasses.Field, typing.Any]]:
    found = []
    for command, parser in sorted(_commands().items()):
        for cls in parser.dataclass_types:
            hints = typing.get_type_hints(cls)
            found += [(command, field, hints[field.name]) for field in dataclasses.fields(cls)
                      if field.init]
    return found


FIELDS = _fields()


@pytest.fixture(scope="module")
def taken_port():
    """A port something listens on: a serve command that got past its checks stops there."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


@pytest.fixture
def places(tmp_path):
    """Existing things for values to name: a file, a folder, and a folder that holds a file."""
    (tmp_path / "a-file.txt").write_text("the user's")
    (tmp_path / "a-folder").mkdir()
    return tmp_path


def bad_values(field: dataclasses.Field, kind: typing.Any, places: Path) -> list[str]:
    """The bad values of a flag, from its declaration; a flag without one fails the test."""
    optional, base = optional_base(kind)
    origin = typing.get_origin(base) or base
    if origin is list:
        (base,) = typing.get_args(base)
        origin = typing.get_origin(base) or base
    if base is bool:
        return ["maybe"]
    if origin is typing.Literal:
        return ["not-a-choice"]
    if origin is dict:
        return ["not-key-value"]
    if base in (int, float):
        bounds = field.metadata.get("bounds") or default_bounds(field.name, kind)
        assert isinstance(bounds, Bounds), f"--{field.name} declares no range"
        if base is int:
            assert bounds.low is not None and bounds.high is not None, \
                f"--{field.name} is an integer without both ends of its range"
        assert bounds.low is not None or bounds.high is not None, \
            f"--{field.name} declares no range"
        return [*_outside(bounds, base), "abc"] + (["1.5"] if base is int else ["nan", "inf"])
    declared = field.metadata.get("text")
    assert base is str and declared is not None, \
        f"--{field.name} ({kind}) declares neither a range nor what its text is"
    nul = "a\0b"
    missing = str(places / "missing" / "nowhere")
    too_long = str(places / ("x" * 300) / "y")
    return {
        "text": [nul] + ([next(c for c in ("@@", "x=", "-1", "") if not _matches(declared, c))]
                         if declared.pattern else []),
        "file_name": [nul, "../x"],
        "env_id": ["Nope/Missing-v0"],
        "model": [str(places / "a-folder")],  # a folder without a model in it
        "module": ["no_such_module_paw_gym"],
        "output_folder": [nul, str(places / "a-file.txt"), too_long],
        "output_file": [nul, str(places / "a-folder"), too_long],
        "input_file": [missing, str(places / "a-folder")],
        "input_folder": [missing, str(places / "a-file.txt")],
        "input_path": [missing],
    }[declared.kind]


def _matches(declared, value: str) -> bool:
    import re

    return re.fullmatch(declared.pattern, value) is not None


def _outside(bounds: Bounds, base: type) -> list[str]:
    step = 1 if base is int else 0.5
    values = []
    if bounds.low is not None:
        values.append(bounds.low if bounds.low_open else bounds.low - step)
    if bounds.high is not None:
        values.append(bounds.high if bounds.high_open else bounds.high + step)
    return [str(int(v)) if base is int else repr(float(v)) for v in values]


def base_arguments(command: str, places: Path, port: int) -> list[str]:
    """The command's required flags with valid values, and a taken ``--port`` for a server."""
    arguments = []
    parser = _commands()[command]
    for cls in parser.dataclass_types:
        for field in dataclasses.fields(cls):
            declared = field.metadata.get("text")
            required = field.default is dataclasses.MISSING and \
                field.default_factory is dataclasses.MISSING
            if required and declared is not None and declared.kind == "env_id":
                arguments += [f"--{field.name}", "PaW/Shelf-v0"]
            elif required and declared is not None and declared.kind == "output_folder":
                arguments += [f"--{field.name}", str(places / "new-output")]
            elif required:
                raise AssertionError(f"{command} --{field.name}: no valid value to give; "
                                     "extend base_arguments")
            bounds = field.metadata.get("bounds")
            if bounds is not None and bounds.what == "a TCP port":
                arguments += [f"--{field.name}", str(port)]
    return arguments


def spellings(field: dataclasses.Field) -> list[str]:
    names = [field.name, *field.metadata.get("former_names", ())]
    names += [field.metadata["positional"]] if field.metadata.get("positional") else []
    names += [alias.lstrip("-") for alias in field.metadata.get("aliases", ())]
    return [spelled for name in names for spelled in (name, name.replace("_", "-"))]


@pytest.mark.parametrize("command, field, kind", FIELDS,
                         ids=[f"{command}--{field.name}" for command, field, _ in FIELDS])
def test_every_bad_value_of_every_flag_is_one_line_before_any_work(
        command, field, kind, places, taken_port, monkeypatch):
    monkeypatch.chdir(places)
    values = bad_values(field, kind, places)
    base = base_arguments(command, places, taken_port)
    positional = field.metadata.get("positional")
    if f"--{field.name}" in base:  # the bad value replaces the valid one
        base = _without(base, f"--{field.name}")
    for value in values:
        before = sorted(places.rglob("*"))
        flag = [value] if positional else [f"--{field.name}", value]
        err = io.StringIO()
        start = time.perf_counter()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            status = main([command, *base, *flag])
        seconds = time.perf_counter() - start
        said = err.getvalue()
        errors = [line for line in said.splitlines() if ": error: " in line]
        case = f"{command} --{field.name} {value!r}: exit {status}, {said[-600:]!r}"
        assert status == 2, case
        assert "Traceback" not in said, case
        assert len(errors) == 1 and errors[0].startswith(f"paw-gym {command}: error: "), case
        assert any(name in errors[0] for name in spellings(field)), case
        assert sorted(places.rglob("*")) == before, f"{case}: it created files"
        assert seconds < QUICK, f"{case}: {seconds:.1f} s"


def _without(arguments: list[str], flag: str) -> list[str]:
    """``arguments`` without ``flag`` and its value."""
    index = arguments.index(flag)
    return arguments[:index] + arguments[index + 2:]


def test_every_option_of_every_command_is_a_declared_field():
    """Flags that are not fields (``--config``, ``--verbose``, help) are the parser's own; any
    other would escape the declarations above."""
    own = {"help", "verbose", "config", "version"}
    for command, parser in _commands().items():
        parser.add_field_arguments()
        fields = {spelled for cls in parser.dataclass_types for field in dataclasses.fields(cls)
                  for spelled in spellings(field)}
        for action in parser._actions:  # noqa: SLF001
            names = {option.lstrip("-") for option in action.option_strings} or {action.dest}
            names = {name.removeprefix("no_").removeprefix("no-") for name in names}
            assert names & (fields | own), f"{command}: {sorted(names)} is no declared field"


def test_a_config_file_that_is_missing_or_a_folder_is_one_line(places, monkeypatch, capsys):
    monkeypatch.chdir(places)
    for command, parser in _commands().items():
        if parser.config_class is None:
            continue
        for value in (str(places / "missing.yaml"), str(places / "a-folder")):
            assert main([command, "--config", value]) == 2
            said = capsys.readouterr().err.strip().splitlines()
            assert len(said) == 1 and "config file" in said[0] and value in said[0], said


def test_a_setting_that_does_nothing_is_said_in_one_line_before_the_work(places, monkeypatch,
                                                                         capsys):
    monkeypatch.chdir(places)
    assert main(["eval", "--env", "PaW/Shelf-v0", "--agent", "random", "--trials", "3",
                 "--temperature", "0.5", "--limit", "1", "--output_dir", "eval"]) == 0
    said = capsys.readouterr().err.splitlines()
    assert said[:2] == [
        "paw-gym eval: warning: temperature=0.5 does nothing unless --agent is policy, react "
        "or reflexion; it is ignored",
        "paw-gym eval: warning: trials=3 does nothing unless --agent is reflexion; it is "
        "ignored"], said
