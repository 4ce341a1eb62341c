"""Issue 60: mistakes that ended in a traceback (or said nothing) are one line now."""

from __future__ import annotations

import json

import pytest

from training.cli import main


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if ": error: " in line]
    assert len(lines) == 1 and "Traceback" not in err, err[-2000:]
    return lines[0]


def test_text_v0_over_an_env_that_renders_through_pygame_is_one_line(capsys):
    import gymnasium as gym

    import paw_gym  # noqa: F401

    with pytest.raises(ValueError, match=r"CartPole-v1 cannot show its state as text \(its "
                                         r"render modes: human, rgb_array"):
        gym.make("PaW/Text-v0", env_id="CartPole-v1")
    assert main(["play", "--env", "PaW/Text-v0", "--env_kwargs", "env_id=CartPole-v1"]) == 2
    assert "CartPole-v1 cannot show its state as text" in _one_error_line(
        capsys.readouterr().err)
    env = gym.make("PaW/Text-v0", env_id="FrozenLake-v1")  # an ANSI env still works
    assert "FrozenLake" in env.reset(seed=0)[1]["task_id"]


def test_a_folder_named_like_a_shard_in_a_replay_is_one_line(tmp_path, capsys):
    from wrappers import WMReplay

    replay = tmp_path / "replay"
    assert main(["play", "--env", "Test/GuessNumber-v0", "--episodes", "1", "--replay",
                 str(replay)]) == 0
    (replay / "x.jsonl").mkdir()
    with pytest.raises(ValueError, match=r"x.jsonl' in the replay .* is not a file"):
        WMReplay.load(replay)


def test_play_replay_on_a_symlink_loop_is_one_line(tmp_path, capsys):
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    assert main(["play", "--env", "Test/GuessNumber-v0", "--episodes", "1", "--replay",
                 str(loop)]) == 2
    assert "--replay" in (line := _one_error_line(capsys.readouterr().err))
    assert "is a symlink that leads to no folder (a loop, or a missing target)" in line


def test_an_imported_module_that_raises_is_one_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "raising_module_60.py").write_text("raise RuntimeError('boom at import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["build-tiny-model", "--imports", "raising_module_60", "--env", "PaW/Shelf-v0",
                 "--output_dir", str(tmp_path / "out")]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "raised RuntimeError when imported (boom at import; at " in line
    assert "raising_module_60.py:1" in line and not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["eval", "train"])
def test_max_new_tokens_beyond_the_models_context_is_refused_before_the_weights_load(
        tiny_model_dir, tmp_path, capsys, command):
    context = json.loads((tiny_model_dir / "config.json").read_text())["max_position_embeddings"]
    argv = ["eval", "--checkpoint", str(tiny_model_dir), "--env", "Test/GuessNumber-v0",
            "--limit", "1"] if command == "eval" else \
        ["train", "--model", str(tiny_model_dir), "--env_id", "Test/GuessNumber-v0",
         "--total_steps", "1", "--device", "cpu"]
    assert main([*argv, "--max_new_tokens", str(context), "--output_dir",
                 str(tmp_path / "out")]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert f"--max_new_tokens {context} leaves no room for the prompt in the {context}-token " \
           f"context of" in line and f"give at most {context - 1}" in line
    assert not (tmp_path / "out").exists()


def test_a_resume_in_another_numerics_mode_says_so(tiny_model_dir, tmp_path, monkeypatch,
                                                   capsys):
    from training.config import TrainConfig
    from training.infra.numerics import MODES
    from training.trainer import PaWTrainer

    trainer = PaWTrainer(TrainConfig(model=str(tiny_model_dir), env_id="Test/GuessNumber-v0",
                                     output_dir=str(tmp_path / "run"), device="cpu",
                                     progress=False))
    trainer.run_state.resumed_from = tmp_path / "run" / "checkpoints" / "step-000002"
    trainer.run_state.resumed_machine = {"numerics": "native"}
    for name, value in MODES["portable"].items():
        monkeypatch.setenv(name, value)
    trainer.run_state.announce_resume(tmp_path / "run")
    err = capsys.readouterr().err
    assert "warning: step-000002 was computed in 'native' numerics mode and this run computes " \
           "in 'portable' (PAW_GYM_NUMERICS)" in err
    for name in MODES["portable"]:
        monkeypatch.delenv(name, raising=False)
    trainer.run_state.announce_resume(tmp_path / "run")  # the same mode: no word
    assert "numerics" not in capsys.readouterr().err


def test_a_resume_on_another_cpu_kind_says_so(tiny_model_dir, tmp_path, capsys):
    """In native numerics a checkpoint computed on another CPU kind, or with other kernels,
    continues with a warning naming both; the same machine's record gives no word."""
    from training.config import TrainConfig
    from training.infra.numerics import machine, mode_in_effect
    from training.trainer import PaWTrainer

    if mode_in_effect() != "native":
        pytest.skip("the warning is native numerics' (PAW_GYM_NUMERICS is set)")
    trainer = PaWTrainer(TrainConfig(model=str(tiny_model_dir), env_id="Test/GuessNumber-v0",
                                     output_dir=str(tmp_path / "run"), device="cpu",
                                     progress=False))
    trainer.run_state.resumed_from = tmp_path / "run" / "checkpoints" / "step-000002"
    here = machine()
    trainer.run_state.resumed_machine = here
    trainer.run_state.announce_resume(tmp_path / "run")
    assert "warning" not in capsys.readouterr().err
    other = {**here, "cpu_kind": {**here["cpu_kind"], "model": -1}, "cpu_capability": "AVX2",
             "numerics_settings": {"ONEDNN_MAX_CPU_ISA": "AVX2"}}
    trainer.run_state.resumed_machine = other
    trainer.run_state.announce_resume(tmp_path / "run")
    err = capsys.readouterr().err
    assert "warning: step-000002 was computed on " in err
    assert "model -1" in err and "torch's AVX2 kernels, ONEDNN_MAX_CPU_ISA=AVX2 and this run " \
           f"computes on {here['cpu']}" in err
    assert "may not be those it would have made there" in err
    # A record without the CPU's kind (a checkpoint from before it was kept): no word.
    trainer.run_state.resumed_machine = {"numerics": "native"}
    trainer.run_state.announce_resume(tmp_path / "run")
    assert "warning" not in capsys.readouterr().err
