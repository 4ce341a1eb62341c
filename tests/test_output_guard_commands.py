"""The output guard through every command that writes an output folder, as a user runs them:
``--overwrite true`` keeps and reports the user's files (planted where the guard once recorded
patterns, and claimed by a hand-edited manifest), the lock, manifest and journal are never
written through a symlink, a second writer is one line, an interrupted checkpoint is never
loaded, a damaged weight file is caught by eval and --resume."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from run_files.outputs import JOURNAL, LOCK, MARKER, OWN_FILES
from tests.common import GUESS_ID, held_by_another_process
from tests.test_outputs import ROOT, _users_files
from training.cli import main

pytestmark = pytest.mark.usefixtures("one_torch_thread")

_TRAIN = ["--env_id", "PaW/Shelf-v0", "--total_steps", "2", "--save_every", "1",
          "--n_groups", "1", "--group_size", "2", "--max_new_tokens", "4",
          "--max_episode_steps", "2", "--progress", "false", "--device", "cpu"]


def _command(name: str, model: Path, work: Path) -> list[str]:
    out = str(work / "out")
    return {
        "build-tiny-model": ["build-tiny-model", "--env", GUESS_ID, "--size", "nano",
                             "--episodes", "2", "--output_dir", out],
        "sft": ["sft", "--record-env", GUESS_ID, "--episodes", "2", "--model", str(model),
                "--replay", str(work / "demos"), "--output_dir", out, "--epochs", "1",
                "--progress", "false"],
        "train-wm": ["train-wm", "--record_env", GUESS_ID, "--record_episodes", "2",
                     "--model", str(model), "--method", "sft", "--steps", "1",
                     "--batch_size", "2", "--output_dir", out, "--progress", "false"],
        "train": ["train", "--model", str(model), *_TRAIN, "--output_dir", out],
    }[name]


#: Per command, user files where the guard once recorded a pattern, before anything was written
#: (``--overwrite true`` deleted every file matching one): none of them is paw-gym's.
PLANTED = {
    "build-tiny-model": [".notes.tmp", "sub/.draft.tmp"],
    "sft": [".notes.tmp"],
    "train-wm": [".notes.tmp"],
    "train": ["wandb/notes.txt", "replay/update-notes.txt", "tensorboard/events.out.tfevents.x",
              "rollout-adapter-notes/a.txt", "config.before-step-notes.yaml", ".notes.tmp"],
}
COMMANDS = list(PLANTED)
#: A user's file where the command writes, then reads back (train-wm trains on every record
#: in the replay it records): refused, in one line, before anything is removed.
REFUSED = {"train-wm": "replay/mydata.jsonl", "train": "config.before-step-000001.yaml"}


@pytest.mark.heavy
@pytest.mark.parametrize("name", COMMANDS)
def test_overwrite_keeps_every_users_entry_and_believes_no_hand_edited_record(
        name, tiny_model_dir, tmp_path, capsys):
    """A file, folder and symlink of the user's, files where a pattern once matched, and a
    manifest edited by hand to claim them (a pattern, a digest of other content, a path
    outside the folder): ``--overwrite true`` removes the earlier output and nothing else."""
    command = _command(name, tiny_model_dir, tmp_path)
    out = tmp_path / "out"
    assert main(command) == 0
    ours = _listing(out)
    _users_files(out, tmp_path / "outside")
    for planted in PLANTED[name]:
        (out / planted).parent.mkdir(parents=True, exist_ok=True)
        (out / planted).write_text(f"the user's {planted}")
    (tmp_path / "precious.txt").write_text("the user's, beside the folder")
    _hand_edit(out, tmp_path / "precious.txt")
    before = _snapshot(tmp_path, skip=ours)
    capsys.readouterr()
    assert main(command) == 2
    assert f"already holds the output of an earlier `paw-gym {name}`" in capsys.readouterr().err
    if name in REFUSED:
        refused = out / REFUSED[name]
        refused.parent.mkdir(parents=True, exist_ok=True)
        refused.write_text("the user's")
        assert main([*command, "--overwrite", "true"]) == 2
        error = capsys.readouterr().err.strip().splitlines()
        assert len(error) == 1 and f"holds '{REFUSED[name]}', which paw-gym did not write" \
            in error[0], error
        assert _snapshot(tmp_path, skip=ours) == {**before, f"out/{REFUSED[name]}": b"the user's"}
        refused.unlink()  # the user moves it away
    assert main([*command, "--overwrite", "true"]) == 0, capsys.readouterr().err
    assert "kept" in capsys.readouterr().err
    assert _snapshot(tmp_path, skip=ours) == before  # every entry of the user's, as it was
    assert (out / "data").is_symlink()
    now = [entry for entry in _listing(out) if f"out/{entry}" not in before]
    assert now == ours  # the same output again, nothing of the first left over


def _hand_edit(out: Path, outside: Path) -> None:
    """Records a user could write into the manifest (or a damaged one could hold)."""
    manifest = json.loads((out / MARKER).read_text())
    wrong = {"size": 3, "sha256": "0" * 64}
    exact = {"size": outside.stat().st_size,
             "sha256": hashlib.sha256(outside.read_bytes()).hexdigest()}
    manifest["files"].update({"**": wrong, "notes.txt": wrong, f"../{outside.name}": exact,
                              str(outside): exact, "mine/../notes.txt": exact})
    manifest.update(written=["**"], folders=["mine", ".."], argv=["\x1b[2J"], extra=1)
    (out / MARKER).write_text(json.dumps(manifest))


def _snapshot(folder: Path, skip: list[str]) -> dict[str, bytes | str]:
    """Every entry under ``folder`` but those of ``skip`` (relative to its ``out/``) and the
    guard's own: a file's bytes, a symlink's target, a folder's name."""
    found: dict[str, bytes | str] = {}
    for path in sorted(folder.rglob("*")):
        name = path.relative_to(folder).as_posix()
        inside = name.removeprefix("out/")
        if name.startswith(("out/", "outside", "precious")) and not (
                inside in skip or path.name in OWN_FILES or inside == "out"
                or re.sub(r"transitions-[^/]*\.jsonl$", "transitions-*.jsonl", inside) in skip):
            found[name] = f"-> {os.readlink(path)}" if path.is_symlink() else \
                "folder" if path.is_dir() else path.read_bytes()
    return found


def _listing(folder: Path) -> list[str]:
    """Every path under ``folder``, a replay shard's per-writer name made generic."""
    return sorted(re.sub(r"transitions-[^/]*\.jsonl$", "transitions-*.jsonl",
                         p.relative_to(folder).as_posix()) for p in folder.rglob("*"))


@pytest.mark.parametrize("name", COMMANDS)
def test_the_lock_manifest_and_journal_are_never_written_through_a_symlink(
        name, tiny_model_dir, tmp_path, capsys):
    command = _command(name, tiny_model_dir, tmp_path)
    out = tmp_path / "out"
    precious = tmp_path / "precious.txt"
    for own in (LOCK, MARKER, JOURNAL):
        precious.write_text("the user's")
        out.mkdir(exist_ok=True)
        (out / own).symlink_to(precious)
        for flags in ([], ["--overwrite", "true"]):
            assert main([*command, *flags]) == 2
            error = capsys.readouterr().err.strip().splitlines()
            assert len(error) == 1 and f"{own} is a symlink; paw-gym never writes through " \
                "one" in error[0], error
        assert precious.read_text() == "the user's"
        assert [p.name for p in out.iterdir()] == [own]
        (out / own).unlink()


def test_train_refuses_a_users_config_and_data_where_it_writes(tiny_model_dir, tmp_path,
                                                               capsys):
    out = tmp_path / "out"
    (out / "replay").mkdir(parents=True)
    (out / "replay" / "mine.jsonl").write_text("{}\n")
    (out / "config.yaml").write_text("the user's own config\n")
    command = _command("train", tiny_model_dir, tmp_path)
    assert main(command) == 2
    assert "holds 2 entries paw-gym did not write; pass --overwrite true" in \
        capsys.readouterr().err
    assert main([*command, "--overwrite", "true"]) == 2
    assert "holds 'config.yaml', which paw-gym did not write, and `paw-gym train` would " \
           "write over it" in capsys.readouterr().err
    assert (out / "config.yaml").read_text() == "the user's own config\n"
    assert (out / "replay" / "mine.jsonl").is_file()


def test_a_second_writer_of_an_output_folder_is_refused_in_one_line(tiny_model_dir, tmp_path,
                                                                   capsys):
    out = tmp_path / "out"
    with held_by_another_process(out) as holder:
        for name in COMMANDS:
            assert main([*_command(name, tiny_model_dir, tmp_path), "--overwrite", "true"]) == 2
            error = capsys.readouterr().err.strip().splitlines()
            assert len(error) == 1 and f"is being written by pid {holder.pid}" in error[0], error


@pytest.mark.heavy
def test_two_trains_started_together_give_the_loser_one_line(tiny_model_dir, tmp_path):
    """Whichever check the loser meets (the folder being written, or already written), it is
    one line, exit 2."""
    command = [sys.executable, "-m", "training.cli", *_command("train", tiny_model_dir,
                                                                tmp_path)]
    runs = [subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True) for _ in range(2)]
    results = sorted((run.wait(), run.stderr.read()) for run in runs)
    (won, _), (lost, error) = results
    assert (won, lost) == (0, 2), results
    lines = [line for line in error.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("paw-gym train: error: --output_dir") and (
        "is being written by pid" in lines[0] or "already holds the output" in lines[0]), lines


_KILL_IN_CHECKPOINT = """
import os, sys
from safetensors import torch as st
real, calls = st.save_file, [0]
def save_file(*args, **kwargs):
    calls[0] += 1
    if calls[0] == int(sys.argv[1]):
        os._exit(9)  # killed inside the second checkpoint's save
    return real(*args, **kwargs)
st.save_file = save_file
from training.cli import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.heavy
def test_a_checkpoint_killed_while_saved_is_never_loaded_and_resume_goes_on(tiny_model_dir,
                                                                             tmp_path,
                                                                             capsys):
    out = tmp_path / "out"
    command = ["train", "--model", str(tiny_model_dir), *_TRAIN, "--output_dir", str(out)]
    # The first checkpoint writes two safetensors files and more; the 5th call is the second's.
    killed = subprocess.run([sys.executable, "-c", _KILL_IN_CHECKPOINT, "5", *command],
                            cwd=ROOT, capture_output=True, text=True)
    assert killed.returncode == 9, killed.stderr[-500:]
    checkpoints = out / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == [".step-000002.partial",
                                                             "step-000001"]
    assert main(["eval", "--env", "PaW/Shelf-v0", "--checkpoint",
                 str(checkpoints / ".step-000002.partial"), "--limit", "1",
                 "--output_dir", str(tmp_path / "eval")]) == 2
    assert "is an incomplete save" in capsys.readouterr().err
    assert main(["train", "--config", str(out / "config.yaml"), "--resume"]) == 0
    assert "resuming" in capsys.readouterr().err
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step-000001", "step-000002"]


def test_a_flipped_byte_in_a_weight_file_is_caught_by_eval_and_resume(tiny_model_dir, tmp_path,
                                                                       capsys):
    out = tmp_path / "out"
    assert main(["train", "--model", str(tiny_model_dir), *_TRAIN, "--output_dir",
                 str(out)]) == 0
    [weights] = (out / "checkpoints" / "step-000002" / "model").glob("*.safetensors")
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0x01  # a bit flip in the tensor data: the header stays valid
    weights.write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["eval", "--env", "PaW/Shelf-v0", "--checkpoint", str(out), "--limit", "1",
                 "--output_dir", str(tmp_path / "eval")]) == 2
    assert f"step-000002/model/{weights.name} is damaged: its size or sha256 differs" in \
        capsys.readouterr().err
    # --resume passes over the damaged checkpoint to the one before, saying why.
    with pytest.warns(RuntimeWarning, match=rf"{weights.name} is damaged: .*resuming from "
                                            r"step-000001"):
        assert main(["train", "--config", str(out / "config.yaml"), "--total_steps", "3",
                     "--resume"]) == 0


@pytest.mark.heavy
def test_the_demo_overwrite_keeps_a_users_files_beside_and_inside_its_outputs(tmp_path,
                                                                            monkeypatch,
                                                                            capsys):
    from training.demo import DemoConfig, run_demo

    monkeypatch.setenv("PAW_GYM_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out"
    small = dict(expert_episodes=40, pretrain_steps=10, rl_steps=1, n_groups=2, group_size=2,
                 eval_episodes=4, eval_limit=4, eval_repeats=1, val_every=1, max_new_tokens=24,
                 sft_epochs=1, output_dir=str(out))
    run_demo(DemoConfig(**small), log=lambda _: None)
    ours = _listing(out)
    _users_files(out, tmp_path / "outside")
    (out / "rl" / "my-analysis.txt").write_text("the user's, inside the RL run")
    capsys.readouterr()
    run_demo(DemoConfig(**small, overwrite=True), log=lambda _: None)
    err = capsys.readouterr().err
    assert "kept 4 entries it did not write: data, mine/, notes.txt, rl/my-analysis.txt" in err
    assert (out / "rl" / "my-analysis.txt").read_text() == "the user's, inside the RL run"
    assert (tmp_path / "outside" / "data.txt").read_text() == "the user's data"
    now = [name for name in _listing(out)
           if not name.startswith(("notes", "mine", "data", "rl/my-analysis"))]
    assert now == ours
