"""``training.preflight``: one check of a training config before any weight loads, the same
one behind ``paw-gym train``, ``paw-gym demo``, ``PaWTrainer`` and the TRL integration."""

import pytest

pytest.importorskip("torch")

from training.config import TrainConfig  # noqa: E402
from training.preflight import PreflightError, check_model, preflight  # noqa: E402


def _config(tiny_model_dir, tmp_path, **overrides) -> TrainConfig:
    return TrainConfig(**{"model": str(tiny_model_dir), "env_id": "PaW/Shelf-v0",
                          "n_groups": 2, "output_dir": str(tmp_path / "run"), **overrides})


def test_a_sound_config_passes_and_creates_only_its_output_folder(tiny_model_dir, tmp_path):
    preflight(_config(tiny_model_dir, tmp_path))
    assert [p.name for p in tmp_path.iterdir()] == ["run"]
    assert list((tmp_path / "run").iterdir()) == []


@pytest.mark.parametrize("overrides, message", [
    ({"env_id": "PaW/Shelv-v0"},
     "env_id: unknown env id 'PaW/Shelv-v0'; did you mean PaW/Shelf-v0? registered text envs: "),
    ({"init_checkpoint": "runs/nowhere/step-000001"},
     "init_checkpoint='runs/nowhere/step-000001' does not exist"),
])
def test_what_the_config_declares_is_refused_when_it_is_made(tiny_model_dir, tmp_path,
                                                             overrides, message):
    with pytest.raises(ValueError) as caught:
        _config(tiny_model_dir, tmp_path, **overrides)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


@pytest.mark.parametrize("overrides, message, missing_file", [
    ({"env_kwargs": {"colour": "red"}},
     "env_kwargs ['colour'] are not arguments of PaW/Shelf-v0; it accepts ['split', "
     "'shelf_sizes']", False),
    ({"model": "runs/nowhere/model"}, "model folder 'runs/nowhere/model' does not exist", True),
    ({"model": "not a model"}, "model 'not a model' is neither a folder, a .gguf file, a hub "
                               "id", False),
])
def test_each_mistake_is_one_line_naming_the_value(tiny_model_dir, tmp_path, overrides, message,
                                                   missing_file):
    with pytest.raises(PreflightError) as caught:
        preflight(_config(tiny_model_dir, tmp_path, **overrides))
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)
    assert caught.value.missing_file is missing_file
    assert not (tmp_path / "run").exists()  # nothing written before the mistake is reported


def test_the_launch_needs_a_rollout_group_per_process(tiny_model_dir, tmp_path):
    config = _config(tiny_model_dir, tmp_path)
    preflight(config, world_size=2)
    with pytest.raises(PreflightError, match="n_groups=2 rollout groups per update are fewer "
                                             "than the 3 processes"):
        preflight(config, world_size=3)


def test_an_earlier_run_is_refused_unless_resumed_or_overwritten(tiny_model_dir, tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.jsonl").write_text("{}\n")
    with pytest.raises(PreflightError, match="already holds 1 entries paw-gym did not write"):
        preflight(_config(tiny_model_dir, tmp_path))
    preflight(_config(tiny_model_dir, tmp_path), resume=True)
    with pytest.raises(PreflightError, match="holds 'metrics.jsonl', which paw-gym did not "
                                             "write, and `paw-gym train` would write over it"):
        preflight(_config(tiny_model_dir, tmp_path, overwrite=True))


def test_a_file_in_the_way_of_the_output_folder_is_refused(tiny_model_dir, tmp_path):
    config = _config(tiny_model_dir, tmp_path)
    (tmp_path / "run").write_text("mine")
    with pytest.raises(ValueError, match="output_dir=.* is a file; give a folder"):
        _config(tiny_model_dir, tmp_path)  # when made
    with pytest.raises(PreflightError, match="output_dir .* is a file; give a folder"):
        preflight(config)  # and when it became one after
    assert (tmp_path / "run").read_text() == "mine"


def test_the_callers_skip_only_what_they_own(tmp_path):
    """The demo builds its model and owns its folder: those two checks are off, the rest on."""
    config = _config(tmp_path / "built-later", tmp_path, env_kwargs={"colour": "red"})
    preflight(_config(tmp_path / "built-later", tmp_path), model=False, outputs=False)
    with pytest.raises(PreflightError, match="colour"):
        preflight(config, model=False, outputs=False)
    assert not (tmp_path / "run").exists()


def test_the_trainer_runs_it_before_loading_the_model(tmp_path):
    from training.trainer import PaWTrainer

    with pytest.raises(PreflightError, match="model folder .*never-loaded' does not exist"):
        PaWTrainer(_config(tmp_path / "never-loaded", tmp_path))


def test_the_demo_runs_it_before_any_work(tmp_path, capsys):
    from training.cli import main

    assert main(["demo", "--env_id", "PaW/Shelv-v0", "--output_dir", str(tmp_path / "demo")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("paw-gym demo: error: env_id: unknown env id 'PaW/Shelv-v0'; did you "
                          "mean PaW/Shelf-v0?") and err.count("\n") == 1
    assert not (tmp_path / "demo").exists()


def test_train_reports_what_the_config_says_to_build_first(tmp_path, capsys):
    from training.cli import main

    config = tmp_path / "x.yaml"
    config.write_text("# first: paw-gym build-tiny-model --output_dir runs/base\n"
                      "model: runs/base/model\nenv_id: PaW/Shelf-v0\n"
                      f"output_dir: {tmp_path / 'run'}\n")
    assert main(["train", "--config", str(config)]) == 2
    assert capsys.readouterr().err == (
        "paw-gym train: error: model folder 'runs/base/model' does not exist; "
        f"{config} says to run first: paw-gym build-tiny-model --output_dir runs/base\n")


def test_the_trl_trainer_checks_its_model_before_trl_loads_it(tmp_path):
    pytest.importorskip("trl")
    from training.integrations.trl import EnvRollout, PaWGRPOConfig, PaWGRPOTrainer

    env = EnvRollout("PaW/Shelf-v0", max_steps=2, env_kwargs={"split": "train"})
    args = PaWGRPOConfig(output_dir=str(tmp_path / "trl"), report_to=[], use_cpu=True)
    with pytest.raises(PreflightError, match="model folder .*missing' does not exist"):
        PaWGRPOTrainer(model=str(tmp_path / "missing"), env=env, args=args)
    with pytest.raises(ValueError, match="did you mean PaW/Shelf-v0"):
        EnvRollout("PaW/Shelv-v0", max_steps=2)


def test_check_model_accepts_a_saved_model(tiny_model_dir):
    check_model(tiny_model_dir)


# -- issue 41: every setting checked before any work -----------------------------------------

@pytest.mark.parametrize("env_id, env_kwargs, message", [
    ("PaW/Shelf-v0", {"shelf_sizes": "abc"},
     "env_kwargs shelf_sizes='abc' is invalid for PaW/Shelf-v0; expected a list of integers"),
    ("PaW/Shelf-v0", {"split": "dev"},
     "env_kwargs split='dev' is invalid for PaW/Shelf-v0; expected one of train | test | all"),
    ("PaW/WebShop-v0", {"num_products": "abc"},
     "env_kwargs num_products='abc' is invalid for PaW/WebShop-v0; expected an integer or none"),
    ("PaW/Sokoban-v0", {"size": True}, "env_kwargs size=True is invalid for PaW/Sokoban-v0"),
    ("PaW/Remote-v0", {}, "PaW/Remote-v0 needs env_kwargs url"),
    ("PaW/Remote-v0", {"url": "ftp://x"}, "url 'ftp://x': give the server's base URL"),
])
def test_env_kwargs_are_checked_against_the_constructors_signature(env_id, env_kwargs,
                                                                    message):
    from training.preflight import check_env

    with pytest.raises(PreflightError) as caught:
        check_env(env_id, env_kwargs)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_env_kwargs_of_the_right_types_pass():
    from training.preflight import check_env

    check_env("PaW/Shelf-v0", {"split": "test", "shelf_sizes": [3, 4]})  # a YAML list: a tuple
    check_env("PaW/WebShop-v0", {"num_products": None, "data_dir": "somewhere"})


def test_a_dead_remote_env_url_is_one_line():
    import socket

    from training.preflight import check_env

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(PreflightError) as caught:
        check_env("PaW/Remote-v0", {"url": f"http://127.0.0.1:{port}", "timeout": 2})
    assert str(caught.value) == (
        f"PaW/Remote-v0 url='http://127.0.0.1:{port}': no env server answers at "
        f"http://127.0.0.1:{port} (Connection refused); start one with `paw-gym serve-env "
        f"--env ENV_ID`")


def test_val_split_must_be_a_split_of_the_env_when_validation_runs(tiny_model_dir, tmp_path):
    preflight(_config(tiny_model_dir, tmp_path / "a", val_split="validation"))  # no validation
    with pytest.raises(PreflightError, match=r"^val_split='validation' is not a split of "
                                             r"PaW/Shelf-v0; expected one of train \| test \| "
                                             r"all$"):
        preflight(_config(tiny_model_dir, tmp_path / "b", val_split="validation", val_every=1))
    assert not (tmp_path / "b").exists()
    preflight(_config(tiny_model_dir, tmp_path / "c", val_split="test", val_before_train=True))


def test_a_device_this_machine_lacks_is_one_line_naming_what_it_has():
    import torch

    from training.preflight import check_device

    check_device(None)
    check_device("cpu")
    if not torch.cuda.is_available():
        with pytest.raises(PreflightError, match=r"^device='cuda' is not available: this "
                                                 r"machine has no CUDA GPU.*; its devices: cpu"):
            check_device("cuda")
    if not torch.backends.mps.is_available():
        with pytest.raises(PreflightError, match=r"^device='mps' is not available: .*no Apple "
                                                 r"MPS device; its devices: cpu"):
            check_device("mps")
    with pytest.raises(PreflightError, match=r"^device='gpu' is invalid; expected cpu, cuda"):
        check_device("gpu")


def test_dtype_is_a_declared_choice_and_one_the_device_runs(tiny_model_dir, tmp_path):
    from training.preflight import check_dtype

    with pytest.raises(ValueError, match=r"dtype='float8' is invalid; expected auto \| float32 "
                                         r"\| bfloat16 \| float16 \| float64"):
        _config(tiny_model_dir, tmp_path, dtype="float8")
    check_dtype("bfloat16", "cpu")  # bfloat16 runs on a CPU
    with pytest.raises(PreflightError, match="float64' does not run on mps"):
        check_dtype("float64", "mps")


def test_vllm_rollouts_need_an_importable_vllm(tiny_model_dir, tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "vllm" else real(name, *a))
    with pytest.raises(PreflightError, match=r"^rollout_backend='vllm' needs vLLM, which this "
                                             r"Python \(.*\) cannot import: pip install"):
        preflight(_config(tiny_model_dir, tmp_path, rollout_backend="vllm"))
    assert not (tmp_path / "run").exists()


def test_a_mistyped_lora_target_is_refused_before_the_model_loads(tiny_model_dir, tmp_path,
                                                                   monkeypatch):
    with pytest.raises(PreflightError, match=r"^lora_target_modules 'q_prj' \(did you mean "
                                             r"q_proj\?\) name no layer of the model; its layers"
                                             r" LoRA can wrap: .*q_proj"):
        preflight(_config(tiny_model_dir, tmp_path, lora_target_modules=["q_prj", "v_proj"]))
    preflight(_config(tiny_model_dir, tmp_path / "ok",
                      lora_target_modules=["self_attn.q_proj", "down_proj"]))
    preflight(_config(tiny_model_dir, tmp_path / "full", lora=False,
                      lora_target_modules=["q_prj"]))  # no LoRA: nothing to target
    # A model whose config cannot be read beforehand is checked when it loads, the same way.
    import training.models as models

    monkeypatch.setattr(models, "lora_layer_names", lambda source: None)
    from training.trainer import PaWTrainer

    with pytest.raises(ValueError, match="lora_target_modules 'q_prj'"):
        PaWTrainer(_config(tiny_model_dir, tmp_path / "late", lora_target_modules=["q_prj"],
                           device="cpu"))


def test_the_machine_fields_of_every_commands_arguments_are_checked():
    """``check_arguments`` reads fields by name, so a command's own dataclass is checked as
    TrainConfig is."""
    from dataclasses import dataclass

    from training.preflight import check_arguments

    @dataclass
    class Arguments:
        device: str | None = None
        dtype: str = "auto"

    check_arguments(Arguments())
    with pytest.raises(PreflightError, match="device='gpu' is invalid"):
        check_arguments(Arguments(device="gpu"))
    with pytest.raises(PreflightError, match="dtype='float8' is invalid"):
        check_arguments(Arguments(dtype="float8"))


def test_fits_type_reads_annotations_as_yaml_gives_values():
    import os
    from typing import Literal, Sequence

    from training.infra.checked_config import describe_kind, fits_type

    assert fits_type(3, int) and not fits_type("3", int) and not fits_type(True, int)
    assert fits_type(3, float) and not fits_type("x", float)
    assert fits_type([1, 2], tuple[int, ...]) and not fits_type([1, "a"], tuple[int, ...])
    assert fits_type("p", str | os.PathLike | None) and fits_type(None, int | None)
    assert fits_type(["a"], Sequence[str]) and not fits_type("a", Sequence[str])
    assert fits_type("test", Literal["train", "test"]) and not fits_type(1, Literal["1"])
    assert describe_kind(tuple[int, ...] | None) == "a list of integers or none"


def test_sft_and_train_wm_wrap_lora_as_train_does(tiny_model_dir, tmp_path):
    """One LoRA wrapping (training.models.add_lora) for train, sft and train-wm: a mistyped
    target is the same one line everywhere, and the dropout train sets reaches the adapter."""
    from agents.hf_policy import HFPolicy
    from training.infra.model_config import ModelConfig
    from training.models import add_lora
    from training.warmstart.sft import SFTConfig, run_sft
    from training.world_model.config import WorldModelConfig
    from training.world_model.methods import load_trainable_policy

    message = r"^lora_target_modules 'q_prj' \(did you mean q_proj\?\) name no layer"
    replay = tmp_path / "replay"  # read after the wrapping, which fails first
    replay.mkdir()
    with pytest.raises(ValueError, match=message):
        run_sft(SFTConfig(model=str(tiny_model_dir), replay=str(replay), lora=True,
                          lora_target_modules=["q_prj"], device="cpu"))
    with pytest.raises(ValueError, match=message):
        load_trainable_policy(WorldModelConfig(model=str(tiny_model_dir), replay=str(replay),
                                               lora=True, lora_target_modules=["q_prj"],
                                               device="cpu"))
    model = add_lora(HFPolicy(str(tiny_model_dir), device="cpu").model, ModelConfig(
        lora_r=4, lora_alpha=8, lora_target_modules=["q_proj"], lora_dropout=0.1))
    assert model.peft_config["default"].lora_dropout == 0.1
    assert model.peft_config["default"].target_modules == {"q_proj"}


def test_train_wm_loads_the_dtype_its_model_config_names(tiny_model_dir):
    """``dtype`` is ModelConfig's, so train-wm (and sft, through the same field) load the
    weights in it as train does."""
    import torch

    from training.world_model.config import WorldModelConfig
    from training.world_model.methods import load_trainable_policy

    policy = load_trainable_policy(WorldModelConfig(model=str(tiny_model_dir), dtype="float64",
                                                    lora=True, lora_r=2, device="cpu"))
    assert {p.dtype for p in policy.model.parameters()} == {torch.float64}
    assert policy.model.peft_config["default"].r == 2
