"""Moved modules fail loudly: each old import path raises one line naming the new one (as
Gymnasium's renamed wrappers do), and the new path is a real module with the same names."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

MOVED = {"training.losses": ("training.rl.losses", "wm_token_loss"),
         "training.advantages": ("training.rl.advantages", "grpo"),
         "training.metrics_log": ("training.infra.metrics_log", "read_metrics"),
         "training.outputs": ("run_files.outputs", "OutputExists"),
         "training.serialization": ("agents.serialization", "TransitionSerializer"),
         "training.pretrain": ("training.warmstart.pretrain", "PretrainConfig"),
         "paw_gym.integrations": ("training.integrations", None),
         "paw_gym.outputs": ("run_files.outputs", "claim_folder"),
         "paw_gym.data_files": ("run_files.data_files", "DataFileError")}


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_names_the_new_one(old):
    new, name = MOVED[old]
    with pytest.raises(ModuleNotFoundError) as raised:
        importlib.import_module(old)
    assert str(raised.value) == f"{old} moved to {new}; import that instead"
    if name:  # the new home has what the old path gave, and `from OLD import x` fails alike
        assert hasattr(importlib.import_module(new), name)
        with pytest.raises(ModuleNotFoundError, match=f"moved to {new}"):
            exec(f"from {old} import {name}", {})
    package, _, module = old.rpartition(".")
    if package in ("training", "paw_gym"):  # `from training import losses`: an attribute lookup
        with pytest.raises(ModuleNotFoundError, match=f"^{old} moved to {new}"):
            exec(f"from {package} import {module}", {})


def test_a_module_of_a_moved_package_fails_on_the_package_line():
    with pytest.raises(ModuleNotFoundError, match="^paw_gym.integrations moved to "
                                                  "training.integrations; import that instead$"):
        importlib.import_module("paw_gym.integrations.trl")
    assert hasattr(importlib.import_module("training.integrations.trl"), "PaWGRPOTrainer")


def test_a_fresh_interpreter_gets_the_line_too():
    done = subprocess.run([sys.executable, "-c", "import training.losses"], capture_output=True,
                          text=True)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "ModuleNotFoundError: training.losses moved to training.rl.losses; import that instead")


def test_the_trainer_s_data_file_kinds_left_the_env_package_too():
    """Of the old ``paw_gym.data_files``, the kinds only the trainer reads are in
    ``training.infra.data_files`` (the line names ``run_files.data_files``, whose docstring
    says so); the env package's root holds env code only."""
    import paw_gym
    from training.infra import data_files

    assert hasattr(data_files, "read_checkpoint_state") and hasattr(data_files, "METRICS_RECORD")
    assert "training.infra.data_files" in importlib.import_module("run_files.data_files").__doc__
    with pytest.raises(AttributeError):
        paw_gym.no_such_name  # noqa: B018 (a name that never moved is an ordinary miss)


def test_other_imports_are_untouched():
    import training.rl.losses
    import training.trainer  # noqa: F401

    with pytest.raises(ModuleNotFoundError, match="No module named 'training.no_such_module'"):
        importlib.import_module("training.no_such_module")
