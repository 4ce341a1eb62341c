"""Every shipped config either names a hub model or says in its ``# first:`` line how to build
the local model it starts from, with commands that ``paw-gym`` accepts."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from training.cli import build_parser
from training.config import DATA_VARIABLES, TrainConfig, first_steps, load_config

REPO = Path(__file__).resolve().parents[1]
TRAIN_CONFIGS = sorted((REPO / "configs" / "tiny").glob("*.yaml")) + \
    sorted((REPO / "configs" / "paper").glob("*.yaml"))


@pytest.mark.parametrize("path", TRAIN_CONFIGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_each_config_names_how_to_get_its_model(path, monkeypatch):
    for name in DATA_VARIABLES:  # paper configs read data folders from the environment
        monkeypatch.setenv(name, f"/data/{name.lower()}")
    config = load_config(path, cls=TrainConfig)
    first = first_steps(path)
    if path.parent.name == "paper":
        assert first is None and not config.model.startswith(("runs/", "./", "/")), config.model
        return
    assert first, f"{path} starts from the local {config.model!r} and has no '# first:' line"
    commands = [shlex.split(part) for part in first.split("&&")]
    parser = build_parser()
    for command in commands:
        assert command[0] == "paw-gym", command
        parser.parse_args(command[1:])  # exits (a test failure) on a flag paw-gym lacks
    built = {command[i + 1] for command in commands for i, word in enumerate(command[:-1])
             if word in ("--out", "--output_dir")}
    assert config.model in built, f"{path}: '# first:' does not build {config.model!r}"


def test_train_names_the_first_steps_when_the_model_is_missing(tmp_path, monkeypatch, capsys):
    from huggingface_hub import constants

    from training.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    path = REPO / "configs" / "tiny" / "alfworld_nano_gigpo_paw_lora.yaml"
    assert main(["train", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'runs/tiny-alfworld'" in err
    assert err.strip().endswith(f"{path} says to run first: paw-gym build-tiny-model --env "
                                "PaW/ALFWorld-v0 --output_dir runs/tiny-alfworld")
    assert not (tmp_path / "runs").exists()  # nothing created on the way


REAL = REPO / "configs" / "real"


@pytest.mark.parametrize("path", sorted(REAL.glob("*.yaml")), ids=lambda p: f"real/{p.name}")
def test_each_real_model_config_loads_and_its_first_line_builds_its_start(path, tmp_path,
                                                                          monkeypatch, capsys):
    """configs/real: SFT configs of the offline instruct model, and RL configs whose ``# first:``
    line is the SFT that writes their ``init_checkpoint``: without it, train names that line."""
    import yaml

    from training.cli import main
    from training.warmstart.sft import SFTConfig

    if path.name.endswith("_sft.yaml"):
        config = load_config(path, cls=SFTConfig)
        assert config.model == "smollm2-135m-instruct" and config.lora
        return
    for name in DATA_VARIABLES:  # WebShop's recipe reads its products' folder from the environment
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    monkeypatch.chdir(tmp_path)  # a fresh clone: the SFT has not run
    assert main(["train", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.strip().endswith(
        f"{path} says to run first: {first_steps(path)}"), err
    assert not (tmp_path / "runs").exists()  # nothing created on the way
    (tmp_path / yaml.safe_load(path.read_text())["init_checkpoint"]).mkdir(parents=True)
    config = load_config(path, cls=TrainConfig)
    assert config.model == "smollm2-135m-instruct" and config.lora
    first = first_steps(path)
    assert first, f"{path} starts from {config.init_checkpoint!r} and has no '# first:' line"
    command = shlex.split(first)
    assert command[:2] == ["paw-gym", "sft"]
    build_parser().parse_args(command[1:])
    sft = load_config(REPO / command[command.index("--config") + 1], cls=SFTConfig)
    assert sft.output_dir == config.init_checkpoint and sft.model == config.model
