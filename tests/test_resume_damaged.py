"""Issue 60: a damaged checkpoint a run writes again is set aside whole, never half deleted.

A 2-update run saves step-000001 and step-000002; step-000002 is damaged (each way a user or a
bad disk damages one: a new file in its place, a truncated JSON, a state.json missing a field
or with a bad value, a damaged file of rollouts sampled ahead); ``--resume`` falls back to
step-000001 and saves step-000002 again. Before the fix the resume deleted the damaged
checkpoint's intact files, then the guard refused the save (exit 2) and every later
``--resume`` was refused until the user deleted the folder by hand.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from training.config import TrainConfig  # noqa: E402
from training.infra.checkpoint import (STEP_PATTERNS, checkpoint_dir,  # noqa: E402
                                       checkpoint_step, checkpoints_newest_first,
                                       latest_checkpoint, latest_intact_checkpoint,
                                       train_writes, verify_checkpoint)
from training.trainer import PaWTrainer  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _config(model_dir, tmp_path, **overrides):
    values = dict(model=str(model_dir), env_id="Test/GuessNumber-v0", n_groups=1, group_size=2,
                  max_new_tokens=6, max_episode_steps=2, total_steps=2, lr=1e-3,
                  mini_batch_size=4, token_budget=1024, output_dir=str(tmp_path / "run"),
                  progress=False, device="cpu", save_every=1, keep_checkpoints=5)
    values.update(overrides)
    return TrainConfig(**values)


def _replace(path: Path, data: bytes) -> None:
    """Write ``data`` as a new file at ``path`` (another inode: as an editor or a copy does)."""
    other = path.with_name(path.name + ".new")
    other.write_bytes(data)
    os.replace(other, path)


def _flip(folder: Path) -> str:
    path = folder / "optimizer.safetensors"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 1
    _replace(path, bytes(data))
    return "optimizer.safetensors is damaged: its size or sha256"


def _truncated_optimizer_json(folder: Path) -> str:
    _replace(folder / "optimizer.json", (folder / "optimizer.json").read_bytes()[:20])
    return "optimizer.json is damaged"


def _state_without(key: str, value=None):
    def damage(folder: Path) -> str:
        state = json.loads((folder / "state.json").read_text())
        if value is None:
            del state[key]
        else:
            state[key] = value
        _replace(folder / "state.json", json.dumps(state).encode())
        return "state.json is damaged"
    return damage


def _damaged_ahead(folder: Path) -> str:
    _replace(folder / "rollouts-ahead.json", b'{"format": 1, "roll')
    return "rollouts-ahead.json is missing or damaged"


DAMAGES = {"flipped optimizer byte": _flip,
           "truncated optimizer.json": _truncated_optimizer_json,
           "state.json missing scheduler": _state_without("scheduler"),
           "bad collapse value": _state_without("collapse", {"best_rate": "high"}),
           "damaged rollouts-ahead.json": _damaged_ahead}


@pytest.fixture(scope="module")
def two_updates(tiny_model_dir, tmp_path_factory):
    """A finished 2-update run (checkpoints 1 and 2), copied by each test that damages it."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    folder = tmp_path_factory.mktemp("two-updates")
    PaWTrainer(_config(tiny_model_dir, folder)).train()
    torch.set_num_threads(threads)
    return folder / "run"


def _run(tiny_model_dir, tmp_path, two_updates, **extra) -> Path:
    """A 2-update run in ``tmp_path / "run"``: a copy of ``two_updates`` (an async run anew)."""
    if extra:
        PaWTrainer(_config(tiny_model_dir, tmp_path, **extra)).train()
    else:
        shutil.copytree(two_updates, tmp_path / "run", symlinks=True)
    return tmp_path / "run"


@pytest.mark.parametrize("damage", [  # each ~4 s (the run is the fixture's); async ~40 s
    pytest.param(name, marks=[pytest.mark.heavy] if "ahead" in name else []) for name in DAMAGES])
def test_a_damaged_newest_checkpoint_is_set_aside_whole_and_the_run_saves_it_again(
        tiny_model_dir, tmp_path, two_updates, damage, capsys):
    extra = dict(async_rollouts=True, max_staleness=1) if "ahead" in damage else {}
    out = _run(tiny_model_dir, tmp_path, two_updates, **extra)
    newest = out / "checkpoints" / "step-000002"
    before = sorted(p.relative_to(newest).as_posix() for p in newest.rglob("*"))
    message = DAMAGES[damage](newest)
    with pytest.warns(RuntimeWarning, match=message + r".*moved step-000002 aside whole to .*"
                                            r"step-000002\.damaged-.*resuming from step-000001"):
        history = PaWTrainer(_config(tiny_model_dir, tmp_path, **extra)).train(resume=True)
    assert [h["step"] for h in history] == [2]
    aside = [p for p in (out / "checkpoints").iterdir() if ".damaged-" in p.name]
    assert len(aside) == 1  # whole: every file it had, the damaged one and the intact ones
    assert sorted(p.relative_to(aside[0]).as_posix() for p in aside[0].rglob("*")) == before
    assert verify_checkpoint(newest)["step"] == 2  # saved again, intact
    assert checkpoints_newest_first(out) == [newest, out / "checkpoints" / "step-000001"]
    # The next --resume takes the new step-000002, without a word about the damaged one.
    capsys.readouterr()
    resumed = PaWTrainer(_config(tiny_model_dir, tmp_path, total_steps=3, **extra))
    assert [h["step"] for h in resumed.train(resume=True)] == [3]
    assert "resuming" in capsys.readouterr().err and resumed.run_state.resumed_from == newest


def test_a_damaged_checkpoint_met_by_an_explicit_resume_is_set_aside_before_the_save(
        tiny_model_dir, tmp_path, two_updates, capsys):
    """``--resume step-000001`` with a damaged step-000002 there: the run saves step 2 again,
    so the damaged one is moved aside whole (one line) rather than half deleted and refused."""
    out = _run(tiny_model_dir, tmp_path, two_updates)
    _flip(out / "checkpoints" / "step-000002")
    assert latest_intact_checkpoint(out) == out / "checkpoints" / "step-000001"
    capsys.readouterr()
    PaWTrainer(_config(tiny_model_dir, tmp_path)).train(
        resume=out / "checkpoints" / "step-000001")
    err = capsys.readouterr().err
    assert "optimizer.safetensors" in err and "moved it aside whole to" in err
    aside = next(p for p in (out / "checkpoints").iterdir() if ".damaged-" in p.name)
    assert (aside / "optimizer.safetensors").is_file() and (aside / "model").is_dir()
    assert verify_checkpoint(latest_checkpoint(out))["step"] == 2


def test_a_users_folder_named_like_a_checkpoint_is_not_in_the_way(tmp_path):
    """``checkpoints/step-000002-backup/`` and ``step-000003.damaged-…`` are not names a run
    writes: not in the way of a resume, never taken for a checkpoint."""
    from run_files.outputs import _in_the_way

    config = TrainConfig(model="x", env_id="PaW/Shelf-v0", output_dir=str(tmp_path / "run"))
    writes = train_writes(config)
    for name in ("checkpoints/step-000002-backup/", "checkpoints/step-000002-backup/state.json",
                 "checkpoints/step-000003.damaged-20261129-101121/", "config.before-step-1x.yaml"):
        assert not _in_the_way(name, writes), name
    for name in ("checkpoints/step-000002/", "checkpoints/step-000002/state.json",
                 "checkpoints/step-1234567/model/config.json",
                 "checkpoints/.step-000002.partial/", "config.before-step-000002.yaml"):
        assert _in_the_way(name, writes), name
    assert len(STEP_PATTERNS) >= 6
    for name in ("step-000002-backup", "step-000003.damaged-1", "step-000001"):
        (tmp_path / "run" / "checkpoints" / name).mkdir(parents=True)
        (tmp_path / "run" / "checkpoints" / name / "state.json").write_text("{}")
    assert [p.name for p in checkpoints_newest_first(tmp_path / "run")] == ["step-000001"]


def test_a_checkpoints_step_is_read_from_the_name_a_run_gives_it(tmp_path):
    assert checkpoint_step(checkpoint_dir(tmp_path, 2)) == 2
    assert checkpoint_step(tmp_path / "checkpoints" / "step-1234567") == 1234567
    for name in ("step-000002-backup", "step-000003.damaged-1", "step-2"):
        with pytest.raises(ValueError, match=f"{name} is not a checkpoint folder: expected a "
                                             f"name like step-000002"):
            checkpoint_step(tmp_path / "checkpoints" / name)


def test_a_users_backup_folder_does_not_block_resume(tmp_path):
    """Through the guard's own check, as ``train --resume`` runs it before any work."""
    from run_files.outputs import check_folder, claim_folder

    out = tmp_path / "run"
    config = TrainConfig(model="x", env_id="PaW/Shelf-v0", output_dir=str(out))
    with claim_folder(out, "train", False, writes=train_writes(config)) as claim:
        with claim.staged("checkpoints/step-000002") as folder:
            (folder / "state.json").write_text("{}")
    backup = out / "checkpoints" / "step-000002-backup"
    backup.mkdir()
    (backup / "state.json").write_text("{}")
    check_folder(out, "train", False, writes=train_writes(config), resume=True)


def test_pruning_a_checkpoint_with_a_damaged_file_says_what_it_kept(tiny_model_dir, tmp_path,
                                                                    two_updates, capsys):
    """``--keep_checkpoints 1`` prunes step-000001, whose rng file was replaced: the intact
    files go, the damaged one stays (not provably paw-gym's) and one line names it."""
    out = _run(tiny_model_dir, tmp_path, two_updates)
    first = out / "checkpoints" / "step-000001"
    _replace(first / "rng.safetensors", b"not the saved state")
    capsys.readouterr()
    PaWTrainer(_config(tiny_model_dir, tmp_path, total_steps=3, keep_checkpoints=1)).train(
        resume=True)
    err = capsys.readouterr().err
    assert "--keep_checkpoints 1: pruned step-000001 but kept 1 entries" in err
    assert "'checkpoints/step-000001/rng.safetensors'" in err
    assert (first / "rng.safetensors").read_bytes() == b"not the saved state"
    assert not (first / "state.json").exists()
    assert [p.name for p in checkpoints_newest_first(out)] == ["step-000003"]


def test_a_rollback_to_a_damaged_best_checkpoint_stops_the_run_in_one_line(
        tiny_model_dir, tmp_path, two_updates, capsys):
    """on_collapse rollback, its best checkpoint damaged since: the run stops (as
    on_collapse stop does), saying why, rather than ending in an error mid-run."""
    out = _run(tiny_model_dir, tmp_path, two_updates)
    best = out / "checkpoints" / "step-000001"
    _flip(best)
    trainer = PaWTrainer(_config(tiny_model_dir, tmp_path, on_collapse="rollback"))
    collapse = trainer.run_state.collapse
    collapse.observe = lambda *args, **kwargs: True
    collapse.best_checkpoint, collapse.failing = str(best), [1, 2]
    capsys.readouterr()
    assert trainer.run_state.watch_collapse({"success": 0.0}, episodes=0, version=0) is True
    err = capsys.readouterr().err
    assert "cannot roll back: " in err and "optimizer.safetensors is damaged" in err
    assert (best / "optimizer.safetensors").is_file()  # left as it is


@pytest.mark.heavy
def test_a_damaged_fsdp_shard_is_caught_and_its_checkpoint_set_aside(tiny_model_dir, tmp_path):
    """``sharding: fsdp`` (one process: a world of one, the sharded path): a flipped byte in
    step-000002's shard file, written as a new file. Before, the reader loaded it silently (a
    shard's data is not checked by DCP) and nothing was set aside; now its sha256 is checked,
    the checkpoint moved aside whole and step 2 saved again."""
    import yaml

    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(dict(
        model=str(tiny_model_dir), env_id="PaW/Shelf-v0", n_groups=1, group_size=2,
        max_new_tokens=4, max_episode_steps=2, total_steps=2, lora=False, lr=1e-4,
        dtype="float32", sharding="fsdp", device="cpu", progress=False, save_every=1,
        keep_checkpoints=5)))
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(repo)}
    train = [sys.executable, "-m", "training.cli", "train", "--config", str(config),
             "--output_dir", str(tmp_path / "run")]
    done = subprocess.run(train, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    shard = next((tmp_path / "run" / "checkpoints" / "step-000002" / "sharded").glob("*.distcp"))
    data = bytearray(shard.read_bytes())
    data[-100] ^= 1  # in a tensor's data
    _replace(shard, bytes(data))
    done = subprocess.run([*train, "--resume"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{shard.name} is damaged: its size or sha256" in done.stderr
    assert "moved step-000002 aside whole" in done.stderr and "resuming from step-000001" in \
        done.stderr
    aside = next(p for p in (tmp_path / "run" / "checkpoints").iterdir() if ".damaged-" in p.name)
    assert (aside / "sharded" / shard.name).read_bytes() == bytes(data)
    assert verify_checkpoint(tmp_path / "run" / "checkpoints" / "step-000002")["step"] == 2


def test_a_replay_shard_changed_since_is_set_aside_before_the_resumed_run_writes_it_again(
        tiny_model_dir, tmp_path, two_updates, capsys):
    """``replay/update-000002.jsonl`` edited by hand (a new file), then a resume from step 1:
    before, the run appended its records to the user's file and recorded it as its own (a
    later --overwrite could delete it); now the user's file is moved aside whole first."""
    out = _run(tiny_model_dir, tmp_path, two_updates)
    shard = out / "replay" / "update-000002.jsonl"
    mine = b"the user's notes on update 2\n"
    _replace(shard, mine)
    capsys.readouterr()
    PaWTrainer(_config(tiny_model_dir, tmp_path)).train(
        resume=out / "checkpoints" / "step-000001")
    err = capsys.readouterr().err
    assert "replay/update-000002.jsonl changed since the run wrote it" in err
    [aside] = (out / "replay").glob("update-000002.jsonl.changed-*")
    assert aside.read_bytes() == mine
    assert mine not in shard.read_bytes() and shard.read_bytes().count(b"\n") > 0
