"""The one CLI convention (training.cli on HfArgumentParser): typed flags, both spellings, YAML
+ flags, one env-kwargs syntax, "did you mean", one-line errors."""

from __future__ import annotations

import argparse

import dataclasses
import typing
from pathlib import Path

import pytest

from training.cli import build_parser, main
from training.commands.common import UserError, parse_env_kwargs
from training.commands.flags import arguments_from
from training.config import TrainConfig
from training.infra.checked_config import optional_base
from training.infra.config_values import format_value

GUESS_ID = "Test/GuessNumber-v0"


def parse(*argv: str):
    return build_parser().parse_args(list(argv))


def usage_error(capsys, *argv: str) -> str:
    """The one-line stderr of a command line that argparse rejects (exit status 2)."""
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    return err


def _changed(field: dataclasses.Field, kind, default):
    """A valid value of ``field`` that differs from its default (inside its declaration)."""
    name = field.name
    special = {"device": "cuda:1", "rollout_backend": "vllm", "lora": True,
               "rollout_correction": "token_mask"}  # which rollout_correction_two_sided takes
    if name in special:
        return special[name]
    declared = field.metadata.get("text")
    if declared is not None and declared.kind == "env_id":
        return "PaW/Shelf-v0"
    optional, base = optional_base(kind)
    origin = typing.get_origin(base) or base
    if optional and default is not None:
        return None
    if origin is typing.Literal:
        return next(choice for choice in typing.get_args(base) if choice != default)
    if base is bool:
        return not default
    if base is int:
        return 3 if default is None else default + 1
    if base is float:
        value = 0.25 if default is None else (default / 2 if default else 0.5)
        bounds = field.metadata.get("bounds")
        return value if bounds is None or bounds.admits(value) else -value
    if base is str:
        return "a path/with spaces" if default is None else f"x-{default}"
    if origin is list:
        return ["q_proj", "v_proj"]
    if origin is dict:
        return {"split": "test", "n_items": 8, "tasks": ["a", "b"], "missing": None}
    raise AssertionError(f"no test value for {name}: {kind}; extend _changed")


#: Fields whose changed values cannot go together with the others' (FSDP takes neither LoRA nor
#: vLLM, the rollout worker no vLLM, LoRA in RL no dropout); the tests after the next one cover
#: them (lora_dropout's refusal: tests/test_training_config.py).
SHARDING_FIELDS = ("sharding", "mixed_precision")
APART = ("lora_dropout", *SHARDING_FIELDS, "async_rollouts")


def changed_train_config() -> TrainConfig:
    kinds = typing.get_type_hints(TrainConfig)
    defaults = TrainConfig()
    return TrainConfig(**{f.name: _changed(f, kinds[f.name], getattr(defaults, f.name))
                          for f in dataclasses.fields(TrainConfig)
                          if f.name not in APART})


@pytest.mark.filterwarnings("ignore::training.infra.checked_config.IneffectiveSetting")
def test_every_train_config_field_round_trips_through_its_flag(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # The flags' round trip, not this machine's: its device (cuda:1) is checked elsewhere.
    monkeypatch.setattr("training.preflight.check_arguments", lambda arguments: None)
    Path("a path/with spaces").mkdir(parents=True)  # val_wm_replay must name a folder
    config = changed_train_config()
    defaults = TrainConfig()
    same = [f.name for f in dataclasses.fields(config)
            if getattr(config, f.name) == getattr(defaults, f.name)]
    assert same == ["lora", *APART], same  # other bools cover the type
    flags = []
    for index, f in enumerate(dataclasses.fields(config)):
        name = f.name.replace("_", "-") if index % 2 else f.name  # both spellings
        flags += [f"--{name}", format_value(getattr(config, f.name))]
    assert arguments_from(parse("train", *flags), TrainConfig) == config


def test_the_sharding_fields_round_trip_through_their_flags():
    config = TrainConfig(sharding="fsdp", mixed_precision="bf16", lora=False, dtype="float32")
    flags = ["--sharding", "fsdp", "--mixed-precision", "bf16", "--lora", "false", "--dtype",
             "float32"]
    assert arguments_from(parse("train", *flags), TrainConfig) == config


def test_the_async_rollout_fields_round_trip_through_their_flags():
    config = TrainConfig(async_rollouts=True, max_staleness=3)
    flags = ["--async-rollouts", "true", "--max_staleness", "3"]
    assert arguments_from(parse("train", *flags), TrainConfig) == config


def test_a_float_for_an_integer_flag_is_one_error_naming_flag_value_and_type(capsys):
    err = usage_error(capsys, "train", "--total_steps", "2.5")
    assert "paw-gym train: error: argument --total_steps/--total-steps: expected an integer, " \
           "got '2.5'" in err
    assert "invalid choice: 'dpo' (choose from 'grpo', 'gigpo', 'rloo', 'ppo')" in \
        usage_error(capsys, "train", "--algo", "dpo")
    assert "expected true or false, got 'maybe'" in usage_error(capsys, "train", "--paw", "maybe")


@pytest.mark.parametrize("values, expected", [
    (["q_proj"], ["q_proj"]),
    (["q_proj,v_proj"], ["q_proj", "v_proj"]),
    (["[q_proj, v_proj]"], ["q_proj", "v_proj"]),
    (["q_proj", "v_proj"], ["q_proj", "v_proj"]),
])
def test_list_flags_give_lists(values, expected):
    config = arguments_from(parse("train", "--lora_target_modules", *values), TrainConfig)
    assert config.lora_target_modules == expected


def test_optional_and_bool_flags():
    config = arguments_from(parse("train", "--history_length", "none", "--max-prompt-len", "None",
                                  "--paw", "false", "--no_lora", "--tensorboard"), TrainConfig)
    assert config.history_length is None and config.max_prompt_len is None
    assert (config.paw, config.lora, config.tensorboard) == (False, False, True)


@pytest.mark.parametrize("text", ["split=test,n_items=8", "{split: test, n_items: 8}",
                                  '{"split": "test", "n_items": 8}'])
def test_env_kwargs_have_one_syntax_in_train_and_play(text):
    expected = {"split": "test", "n_items": 8}
    assert parse_env_kwargs(text) == expected
    assert arguments_from(parse("train", "--env_kwargs", text), TrainConfig).env_kwargs == expected
    from training.commands.play import PlayArguments

    for flag in ("--env_kwargs", "--env-kwargs"):
        assert arguments_from(parse("play", "--env", GUESS_ID, flag, text),
                              PlayArguments).env_kwargs == expected


def test_env_kwargs_errors_name_the_item_and_repeats_add_up():
    with pytest.raises(UserError, match="env_kwargs item 'high' is not key=value"):
        parse_env_kwargs("split=test,high")
    assert parse_env_kwargs("tasks=[a, b],name='x,y'") == {"tasks": ["a", "b"], "name": "x,y"}
    from training.commands.build_tiny_model import TinyModelArguments

    arguments = arguments_from(parse("build-tiny-model", "--output_dir", "o", "--env",
                                     "PaW/Shelf-v0", "--env", "PaW/Taxi-v0,PaW/Sokoban-v0",
                                     "--env_kwargs", "a=1", "--env_kwargs", "b=2"),
                               TinyModelArguments)
    assert arguments.envs == ["PaW/Shelf-v0", "PaW/Taxi-v0", "PaW/Sokoban-v0"]
    assert arguments.env_kwargs == {"a": 1, "b": 2}


def test_every_flag_of_every_command_has_both_spellings():
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # noqa: SLF001 (argparse has no API)
    assert {"train", "eval", "play", "sft", "demo", "build-tiny-model", "gen-alfworld",
            "serve-retriever", "envs"} <= set(commands)
    for name, command in commands.items():
        command.add_field_arguments()
        for action in command._actions:  # noqa: SLF001
            long = [flag for flag in action.option_strings if flag.startswith("--")]
            for flag in long:
                if "_" in flag:
                    assert flag.replace("_", "-") in action.option_strings, (name, flag)
    underscore = arguments_from(parse("train", "--max_new_tokens", "7"), TrainConfig)
    dash = arguments_from(parse("train", "--max-new-tokens", "7"), TrainConfig)
    assert underscore.max_new_tokens == dash.max_new_tokens == 7


def test_an_unknown_flag_suggests_the_nearest(capsys):
    err = usage_error(capsys, "train", "--totl_steps", "5")
    assert "unrecognized arguments: --totl_steps 5 (--totl_steps: did you mean --total_steps?)" \
        in err
    assert "did you mean --episodes?" in usage_error(capsys, "play", "--env", GUESS_ID,
                                                     "--episode", "2")


def _commands():
    return build_parser()._subparsers._group_actions[0].choices  # noqa: SLF001


@pytest.mark.parametrize("command", sorted(_commands()))
def test_every_commands_unknown_flag_gets_the_nearest_one(capsys, command):
    parser = _commands()[command]
    parser.add_field_arguments()
    flags = [flag for action in parser._actions for flag in action.option_strings  # noqa: SLF001
             if flag.startswith("--") and len(flag) > 6 and flag != "--help"
             and action.help != argparse.SUPPRESS]
    if not flags:
        pytest.skip(f"{command} has no flags")
    typo = flags[0][:-1]  # the last letter missing
    err = usage_error(capsys, command, typo, "1")
    assert f"({typo}: did you mean {flags[0]}?)" in err, err


@pytest.mark.parametrize("command", ["eval", "eval-wm", "build-tiny-model", "gen-alfworld"])
def test_output_folders_are_output_dir_and_the_former_out_still_works(capsys, command):
    from training.commands.flags import arguments_from

    parser = _commands()[command]
    parser.add_field_arguments()
    dataclass = parser.dataclass_types[0]
    for flag in ("--output_dir", "--output-dir"):
        assert arguments_from(parse(command, flag, "somewhere"), dataclass).output_dir == \
            "somewhere"
    capsys.readouterr()
    assert arguments_from(parse(command, "--out", "there"), dataclass).output_dir == "there"
    assert capsys.readouterr().err == (f"paw-gym {command}: --out is deprecated and will be "
                                       f"removed; use --output_dir\n")
    assert "--out " not in " ".join(parser.format_help().split())


@pytest.mark.parametrize("command", ["build-tiny-model", "gen-alfworld"])
def test_a_required_output_folder_is_required_under_either_name(capsys, command):
    assert usage_error(capsys, command).endswith(
        "error: the following arguments are required: --output_dir\n")


def test_help_shows_types_and_defaults(capsys):
    assert main(["train", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for shown in ("--total_steps INT, --total-steps INT", "(default: 150)",
                  "--algo {grpo,gigpo,rloo,ppo}", "--paw [true|false]", "--lr FLOAT",
                  "--history_length INT|none", "--env_kwargs KEY=VALUE[,...]",
                  "--lora_target_modules STR [STR ...]", "--config FILE.yaml",
                  "--rollout_correction {none,sampler_clip,token_truncate,token_mask,"
                  "sequence_truncate,sequence_mask}", "--rollout_correction_cap FLOAT",
                  "--async_rollouts [true|false]", "--max_staleness INT"):
        assert shown in text, shown
    for command in ("play", "sft", "demo", "build-tiny-model", "gen-alfworld",
                    "serve-retriever", "envs"):
        assert main([command, "--help"]) == 0
    assert "--agent {expert,random}" in capsys.readouterr().out


def test_yaml_values_survive_unless_a_flag_is_given(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("n_groups: 4\npaw: false\nlr: 5e-5\nlora_target_modules: [q_proj]\n"
                    "env_kwargs: {split: train, n_items: 8}\n")
    config = arguments_from(parse("train", "--config", str(path), "--rho", "0.5",
                                  "--env_kwargs", "split=test"), TrainConfig)
    assert (config.n_groups, config.paw, config.lr, config.rho) == (4, False, 5e-5, 0.5)
    assert config.lora_target_modules == ["q_proj"]
    assert config.env_kwargs == {"split": "test", "n_items": 8}  # merged over the file's
    assert arguments_from(parse("train", "--config", str(path), "--paw", "true"),
                          TrainConfig).paw is True


def test_a_bad_config_file_is_one_user_error(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("n_groups: 1.5\n")
    with pytest.raises(UserError, match="n_groups=1.5 is invalid; expected an integer"):
        arguments_from(parse("train", "--config", str(path)), TrainConfig)
    with pytest.raises(UserError, match="nope.yaml"):
        arguments_from(parse("train", "--config", str(tmp_path / "nope.yaml")), TrainConfig)


@pytest.mark.parametrize("command, field", [
    (["train", "--env_id", "PaW/WebShp-v0", "--output_dir"], "env_id"),
    (["sft", "--record_env", "PaW/WebShp-v0", "--output_dir"], "record_env"),
    (["build-tiny-model", "--env", "PaW/WebShp-v0", "--output_dir"], "envs"),
    (["play", "--env", "PaW/WebShp-v0", "--replay"], "env"),
])
def test_unknown_env_ids_are_one_line_listing_text_envs(tmp_path, capsys, command, field):
    assert main([*command, str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert f"paw-gym {command[0]}: error: {field}: unknown env id 'PaW/WebShp-v0'; did you " \
           "mean PaW/WebShop-v0?" in err
    assert GUESS_ID in err and "PaW/Shelf-v0" in err
    assert "phys2d/" not in err and "tabular/" not in err  # Gymnasium's own, not text envs


def test_recording_the_same_expert_episodes_twice_adds_them_once(tmp_path):
    from training.warmstart.sft import record_expert_episodes
    from wrappers import WMReplay

    assert record_expert_episodes("PaW/Shelf-v0", 3, tmp_path) == (3, 0)
    assert record_expert_episodes("PaW/Shelf-v0", 4, tmp_path) == (1, 3)  # only seed 3 is new
    assert len(WMReplay.load(tmp_path).episodes()) == 4


def test_sft_record_env_twice_does_not_duplicate(tmp_path, capsys, tiny_model_dir,
                                                 one_torch_thread):
    from wrappers import WMReplay

    command = ["sft", "--record-env", GUESS_ID, "--episodes", "3", "--model",
               str(tiny_model_dir), "--replay", str(tmp_path / "demos"), "--output_dir",
               str(tmp_path / "sft"), "--epochs", "1", "--progress", "false"]
    assert main(command) == 0
    assert "recorded 3 expert episodes" in capsys.readouterr().out
    assert main(command) == 2  # its model is there: refused before recording anything
    assert "already holds the output of an earlier `paw-gym sft`; pass --overwrite true" in \
        capsys.readouterr().err
    assert main([*command, "--overwrite", "true"]) == 0
    assert "recorded 0 expert episodes" in capsys.readouterr().out
    assert len(WMReplay.load(tmp_path / "demos").episodes()) == 3


def test_sft_checks_the_model_before_recording_any_demo(tmp_path, capsys):
    command = ["sft", "--record-env", "PaW/Shelf-v0", "--episodes", "300", "--model",
               str(tmp_path / "no-model"), "--replay", str(tmp_path / "demos"),
               "--output_dir", str(tmp_path / "sft")]
    assert main(command) == 2
    err = capsys.readouterr().err
    assert f"--model: model folder '{tmp_path / 'no-model'}' does not exist" in err
    assert not (tmp_path / "demos").exists() and not (tmp_path / "sft").exists()
