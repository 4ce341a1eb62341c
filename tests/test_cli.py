"""The paw-gym command line: envs and play, through the installed console script."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from training.cli import main


def test_console_script_lists_envs():
    beside_python = Path(sys.executable).with_name("paw-gym")
    exe = str(beside_python) if beside_python.exists() else shutil.which("paw-gym")
    if exe is None:
        pytest.skip("paw-gym console script not installed (pip install -e .)")
    result = subprocess.run([exe, "envs"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    import paw_gym
    for env_id in paw_gym.list_text_envs():
        if env_id.startswith("PaW/"):
            assert env_id in result.stdout


def test_play_runs_expert_episodes_and_records(tmp_path, capsys):
    replay_dir = tmp_path / "replay"
    assert main(["play", "--env", "Test/GuessNumber-v0", "--episodes", "3", "--replay", str(replay_dir)]) == 0
    out = capsys.readouterr().out
    assert "| guess | 3 | 100.0 % |" in out
    assert "recorded 3 transitions" in out
    from wrappers import WMReplay
    assert len(WMReplay.load(replay_dir).filter(success=True).episodes()) == 3


def test_play_user_errors_are_one_line(capsys):
    assert main(["play", "--env", "Nope/Missing-v0"]) == 2
    assert "unknown env id 'Nope/Missing-v0'" in capsys.readouterr().err
    assert main(["play", "--env", "Test/GuessNumber-v0", "--env_kwargs", "colour=red"]) == 2
    assert "['colour'] are not arguments of Test/GuessNumber-v0" in capsys.readouterr().err
    assert main(["play", "--env", "Test/GuessNumber-v0", "--env-kwargs", "high"]) == 2
    assert "item 'high' is not key=value" in capsys.readouterr().err


def test_help_without_subcommand():
    result = subprocess.run([sys.executable, "-m", "training.cli"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "usage: paw-gym" in result.stdout


@pytest.mark.parametrize("command", [
    ["eval", "--env", "Test/GuessNumber-v0", "--agent", "expert", "--output_dir"],
    ["sft", "--model", "{model}", "--record-env", "Test/GuessNumber-v0", "--output_dir"],
    ["build-tiny-model", "--output_dir"],
    ["demo", "--output_dir"],
])
def test_an_unwritable_output_folder_fails_before_any_work(tmp_path, capsys, command,
                                                          tiny_model_dir):
    blocker = tmp_path / "a-file"
    blocker.write_text("in the way")
    command = [word.replace("{model}", str(tiny_model_dir)) for word in command]
    assert main([*command, str(blocker / "out")]) == 2
    err = capsys.readouterr().err
    assert f"{str(blocker / 'out')!r} is not writable" in err
    assert not (tmp_path / "runs").exists()


@pytest.mark.heavy
def test_library_warnings_show_only_with_verbose(tiny_model_dir, tmp_path):
    """transformers warns about its own deprecations when LoRA wraps the model: paw-gym's
    output leaves it out, and ``--verbose`` shows it."""
    stderr = {}
    for flag in ([], ["--verbose"]):
        done = subprocess.run(
            [sys.executable, "-m", "training.cli", "train", *flag, "--model", str(tiny_model_dir),
             "--env_id", "PaW/Shelf-v0", "--total_steps", "1", "--n_groups", "1",
             "--group_size", "2", "--max_new_tokens", "8", "--device", "cpu",
             "--output_dir", str(tmp_path / f"run{len(flag)}")],
            capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        stderr[bool(flag)] = done.stderr
    assert "FutureWarning" in stderr[True]
    assert "Warning" not in stderr[False] and "\r" not in stderr[False]


@pytest.mark.parametrize("environment, threads", [({}, 1), ({"OMP_NUM_THREADS": "2"}, 2)])
def test_every_command_runs_torch_on_one_thread_unless_told(environment, threads):
    code = ("import sys; from training.cli import main; main(['envs']); import torch; "
            "print(torch.get_num_threads(), file=sys.stderr)")
    env = {key: value for key, value in os.environ.items() if key != "OMP_NUM_THREADS"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**env, **environment}, timeout=120)
    assert done.stderr.strip().splitlines()[-1] == str(threads)


@pytest.mark.parametrize("command", [
    ["eval", "--env", "PaW/Shelf-v0", "--agent", "random"],
    ["play", "--env", "PaW/Shelf-v0"],
    ["gen-alfworld", "--output_dir", "{tmp}/alf"],
])
def test_a_negative_seed_is_one_line_in_every_command(tmp_path, capsys, command):
    command = [word.replace("{tmp}", str(tmp_path)) for word in command]
    assert main([*command, "--seed", "-1"]) == 2
    err = capsys.readouterr().err
    assert err == (f"paw-gym {command[0]}: error: seed=-1 is invalid; expected an integer in "
                   f"[0, 4,294,967,296)\n")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", [
    ["play", "--env", "PaW/Shelf-v0"],
    ["eval", "--env", "PaW/Shelf-v0", "--agent", "random", "--output_dir", "{tmp}/eval"],
    ["serve-env", "--env", "PaW/Shelf-v0", "--port", "0"],
    ["train", "--env_id", "PaW/Shelf-v0", "--model", "{tmp}/none", "--output_dir", "{tmp}/run"],
])
def test_env_kwargs_of_the_wrong_type_are_one_line_before_any_work(tmp_path, capsys, command):
    command = [word.replace("{tmp}", str(tmp_path)) for word in command]
    assert main([*command, "--env_kwargs", "shelf_sizes=abc"]) == 2
    assert capsys.readouterr().err == (
        f"paw-gym {command[0]}: error: env_kwargs shelf_sizes='abc' is invalid for "
        f"PaW/Shelf-v0; expected a list of integers\n")
    assert list(tmp_path.iterdir()) == []


def test_a_device_or_dtype_this_machine_cannot_run_is_one_line(tmp_path, capsys):
    import torch

    if not torch.cuda.is_available():
        assert main(["eval", "--env", "PaW/Shelf-v0", "--model", "x", "--device", "cuda",
                     "--output_dir", str(tmp_path / "eval")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("paw-gym eval: error: device='cuda' is not available: this "
                              "machine has no CUDA GPU") and err.endswith("its devices: cpu\n")
    assert main(["train", "--dtype", "float8", "--output_dir", str(tmp_path / "run")]) == 2
    assert "argument --dtype: invalid choice: 'float8'" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_dead_remote_env_is_one_line(tmp_path, capsys):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    assert main(["play", "--env", "PaW/Remote-v0", "--agent", "random", "--env_kwargs",
                 f"url={url}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"paw-gym play: error: PaW/Remote-v0 url='{url}': no env server "
                          f"answers at {url}") and err.count("\n") == 1


def test_the_train_commands_last_line_leads_with_held_out_success():
    """`paw-gym train`'s last line: held-out success first (the last validation's), then the
    last update's training success, both as percentages; without validation it says so."""
    from training.commands.train import final_line

    history = [{"step": 1, "success": 0.25, "reward": 1.0},
               {"step": 2, "success": 0.5, "reward": 2.0, "val_success": 0.625},
               {"step": 3, "success": 0.75, "reward": 3.5}]
    assert final_line(history, "runs/x") == (
        "step 3: held-out success 62.5 % (validated at step 2); training success 75.0 % "
        "(last update), reward 3.500; metrics and curves in runs/x")
    assert final_line(history[:1], "runs/x").startswith(
        "step 1: held-out success not measured (val_every 0: `paw-gym eval` measures it); "
        "training success 25.0 %")
