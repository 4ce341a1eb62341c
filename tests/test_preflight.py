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


@pytest.mark.parametrize("overrides, message, missing_file", [
    ({"env_id": "PaW/Shelv-v0"},
     "unknown env id 'PaW/Shelv-v0'; did you mean PaW/Shelf-v0? registered text envs: ", False),
    ({"env_kwargs": {"colour": "red"}},
     "env_kwargs ['colour'] are not arguments of PaW/Shelf-v0; it accepts ['split', "
     "'shelf_sizes']", False),
    ({"model": "runs/nowhere/model"}, "model folder 'runs/nowhere/model' does not exist", True),
    ({"model": "not a model"}, "model 'not a model' is neither a folder nor a hub id", False),
    ({"init_checkpoint": "runs/nowhere/step-000001"},
     "init_checkpoint 'runs/nowhere/step-000001' is not a folder", True),
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
    with pytest.raises(PreflightError, match="already holds a training run"):
        preflight(_config(tiny_model_dir, tmp_path))
    preflight(_config(tiny_model_dir, tmp_path), resume=True)
    preflight(_config(tiny_model_dir, tmp_path, overwrite=True))


def test_a_file_in_the_way_of_the_output_folder_is_refused(tiny_model_dir, tmp_path):
    (tmp_path / "run").write_text("mine")
    with pytest.raises(PreflightError, match="output_dir .* is not writable"):
        preflight(_config(tiny_model_dir, tmp_path))
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
    assert err.startswith("paw-gym demo: error: unknown env id 'PaW/Shelv-v0'; did you mean "
                          "PaW/Shelf-v0?") and err.count("\n") == 1
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
    with pytest.raises(PreflightError, match="did you mean PaW/Shelf-v0"):
        EnvRollout("PaW/Shelv-v0", max_steps=2)


def test_check_model_accepts_a_saved_model(tiny_model_dir):
    check_model(tiny_model_dir)
