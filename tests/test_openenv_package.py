"""``paw-gym openenv-package``: the folder it writes passes OpenEnv's own static check (the
validator ``openenv validate DIR --level static --skip-build`` runs, and the structure
``openenv push`` requires), and its ``server/app.py`` serves the env from the folder alone (its
own ``paw_gym`` copy, in a fresh interpreter), which OpenEnv's runtime URL check passes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest
import yaml

from tests.common import GUESS_ID
from training.cli import main

pytest.importorskip("openenv", reason="OpenEnv's validator (the dev extra: openenv==0.10.0)")

#: Every built-in env, with its env_kwargs, the step-reward range its package declares, and the
#: marks of its test (one probe: 3-5 s each here, ALFWorld ~15 s and the alfworld extra).
PACKAGED = {
    "PaW/Shelf-v0": ({}, [0, 10], []),
    "PaW/SearchQA-v0": ({}, [0, 1], []),
    "PaW/WebShop-v0": ({}, [0, 10], [pytest.mark.heavy]),
    "PaW/ALFWorld-v0": ({}, [0, 10], [pytest.mark.heavy]),
    "PaW/Blackjack-v0": ({}, [0, 10], [pytest.mark.heavy]),
    "PaW/CliffWalking-v0": ({}, [0, 10], [pytest.mark.heavy]),
    "PaW/FrozenLake-v0": ({}, [0, 10], [pytest.mark.heavy]),
    "PaW/Sokoban-v0": ({}, [0, 10], [pytest.mark.heavy]),
    "PaW/Taxi-v0": ({}, [0, 10], [pytest.mark.heavy]),
    "PaW/Text-v0": ({"env_id": "FrozenLake-v1"}, [0, 1], [pytest.mark.heavy]),
}


def package(folder: Path, env_id: str, *flags: str) -> Path:
    assert main(["openenv-package", "--env", env_id, "--output_dir", str(folder), *flags]) == 0
    return folder


def test_every_built_in_env_is_packaged():
    import paw_gym

    assert set(PACKAGED) == {env_id for env_id in paw_gym.list_text_envs()
                             if env_id.startswith("PaW/")}


@pytest.mark.parametrize("env_id", [pytest.param(env_id, marks=marks)
                                    for env_id, (_, _, marks) in PACKAGED.items()])
@pytest.mark.heavy
def test_openenvs_static_check_passes_the_package(env_id, tmp_path, capsys):
    from openenv.cli._cli_utils import validate_env_structure
    from openenv.validation import CheckStatus, Level, Verdict, run_validation

    if env_id == "PaW/ALFWorld-v0":
        pytest.importorskip("alfworld", reason="PaW/ALFWorld-v0 needs the alfworld extra")
    env_kwargs, reward_range, _ = PACKAGED[env_id]
    flags = ["--env_kwargs", ",".join(f"{k}={v}" for k, v in env_kwargs.items())] \
        if env_kwargs else []
    folder = package(tmp_path / "package", env_id, *flags)
    said = capsys.readouterr().out
    assert f"wrote {env_id} as the OpenEnv package" in said and "played by its scripted expert" \
        in said
    # What `openenv validate DIR --level static --skip-build` runs (openenv.cli.commands.
    # validate); the CLI itself runs in docs/remote_envs.md's block (heavy).
    report = run_validation(folder, max_level=Level.STATIC, skip_build=True)
    failed = [(r.check_id, r.status.value, r.evidence) for r in report.results
              if r.status is not CheckStatus.PASS]
    assert report.verdict is Verdict.PASS and not failed, failed
    assert [r.check_id for r in report.results] == ["static.manifest"]
    validate_env_structure(folder)  # openenv push's check: raises where a required file lacks
    manifest = yaml.safe_load((folder / "openenv.yaml").read_text())
    assert manifest["name"] == re.sub(r"[^a-z0-9]+", "_", env_id.lower()).strip("_")
    assert manifest["validation"]["reward"]["range"] == reward_range
    requirements = (folder / "server" / "requirements.txt").read_text().splitlines()
    assert all(re.fullmatch(r"[A-Za-z0-9_.-]+==\S+", line) for line in requirements)
    assert {"gymnasium", "uvicorn", "websockets"} <= {line.split("==")[0] for line in
                                                      requirements}
    assert not any(line.lower().startswith(("torch", "transformers", "paw-gym", "paw_gym"))
                   for line in requirements)
    assert not list(folder.rglob("__pycache__")) and not (folder / ".output.partial").exists()


def test_the_package_serves_its_env_from_its_own_folder(tmp_path):
    """``python -m server.app`` in the folder (a fresh interpreter whose ``paw_gym`` is the
    folder's copy): OpenEnv's runtime check passes, and an episode played through it is the
    in-process one."""
    from openenv.cli._validation import validate_running_environment

    from paw_gym.remote import RemoteEnv

    folder = package(tmp_path / "package", "PaW/Shelf-v0")
    environment = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    which = subprocess.run([sys.executable, "-c", "import paw_gym, server.app; "
                            "import run_files.outputs, run_files.data_files; "
                            "print(paw_gym.__file__); print(run_files.__file__)"], cwd=folder,
                           env=environment, capture_output=True, text=True, timeout=60)
    # run_files (the output guard, the data-file schema: ALFWorld's generator writes through
    # it) is copied beside paw_gym, and the copy is what the folder imports
    assert which.stdout.split() == [str(folder / "paw_gym" / "__init__.py"),
                                    str(folder / "run_files" / "__init__.py")], which.stderr
    server = subprocess.Popen([sys.executable, "-m", "server.app", "--port", "0"], cwd=folder,
                              env=environment, stdout=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()
        found = re.match(r"serving PaW/Shelf-v0 at (http://127\.0\.0\.1:\d+) ", line)
        assert found, line
        url = found.group(1)
        report = validate_running_environment(url, timeout_s=30)
        assert report["passed"], [c for c in report["criteria"] if not c["passed"]]
        remote, local = RemoteEnv(url), gym.make("PaW/Shelf-v0")
        try:
            assert remote.reset(seed=3)[0] == local.reset(seed=3)[0]
            done = False
            while not done:
                action = local.unwrapped.expert_action()
                expected = local.step(action)
                answered = remote.step(action)
                assert answered[:4] == expected[:4]
                done = expected[2] or expected[3]
            assert expected[1] == 10.0
        finally:
            remote.close()
            local.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert not list(folder.rglob("__pycache__"))


def test_what_cannot_be_packaged_is_one_line(tmp_path, capsys):
    def refused(*flags: str) -> str:
        assert main(["openenv-package", *flags]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("paw-gym openenv-package: error: "), err
        return err

    out = tmp_path / "out"
    # The test env's code is tests/envs.py: the package copies paw_gym only. Nothing written.
    assert "outside paw-gym's env package" in refused("--env", GUESS_ID, "--output_dir",
                                                      str(out))
    assert "reward_max=0 is invalid; expected more than reward_min=0" in refused(
        "--env", "PaW/Shelf-v0", "--output_dir", str(out), "--reward_max", "0")
    assert not out.exists()
    # Shelf pays 10 for the right item: a range up to 5 does not hold its rewards.
    assert "PaW/Shelf-v0 gave the step reward 10 in " in refused(
        "--env", "PaW/Shelf-v0", "--output_dir", str(out), "--reward_max", "5")
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".paw-gym")) == []
    package(out, "PaW/Shelf-v0", "--name", "my-shelf")  # the same folder, without --overwrite
    assert yaml.safe_load((out / "openenv.yaml").read_text())["name"] == "my-shelf"
    assert "already holds the output of an earlier `paw-gym openenv-package`" in refused(
        "--env", "PaW/Shelf-v0", "--output_dir", str(out))
