"""The one output guard (paw_gym.outputs): refuse by default; with --overwrite remove exactly
what paw-gym recorded writing; one writer per folder; atomic saves; weight files checked."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from paw_gym.outputs import (LOCK, MARKER, MODEL_FILES, IncompleteOutput, IntegrityError,
                             OutputExists, OutputLocked, claim_file, claim_folder, read_manifest,
                             verify_output)
from tests.common import held_by_another_process

ROOT = Path(__file__).resolve().parents[1]


def _model_output(folder: Path, command: str = "sft", overwrite: bool = False,
                  weights: bytes = b"w" * 64):
    """A command's whole output: claimed, a model saved through ``staged``, finished."""
    with claim_folder(folder, command, overwrite, writes=MODEL_FILES) as output:
        with output.staged(".") as staging:
            (staging / "model.safetensors").write_bytes(weights)
            (staging / "config.json").write_text("{}")
    return output


def _users_files(folder: Path, outside: Path) -> list[str]:
    """A file, a folder (with a file) and a symlink to data outside, as a user adds them."""
    outside.mkdir(exist_ok=True)
    (outside / "data.txt").write_text("the user's data")
    (folder / "notes.txt").write_text("mine")
    (folder / "mine").mkdir()
    (folder / "mine" / "a.txt").write_text("mine too")
    (folder / "data").symlink_to(outside, target_is_directory=True)
    return ["data", "mine/", "notes.txt"]


def test_a_new_or_empty_folder_is_claimed_and_complete_only_when_finished(tmp_path):
    output = claim_folder(tmp_path / "new", "sft", overwrite=False)
    (tmp_path / "empty").mkdir()
    claim_folder(tmp_path / "empty", "sft", overwrite=False).release()
    manifest = read_manifest(tmp_path / "new")
    assert (manifest["command"], manifest["complete"], manifest["pid"]) == \
        ("sft", False, os.getpid())
    output.finish()
    assert read_manifest(tmp_path / "new")["complete"] is True
    assert read_manifest(tmp_path / "empty")["complete"] is False


def test_a_folder_with_anything_in_it_is_refused_and_left_alone(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(OutputExists, match=r"--output_dir '.*mine' already holds 1 entries "
                                           r"paw-gym did not write; pass --overwrite true"):
        claim_folder(out, "sft", overwrite=False)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    with pytest.raises(OutputExists, match="is a file"):
        claim_folder(out / "notes.txt", "sft", overwrite=True)


def test_overwrite_removes_exactly_the_recorded_files_and_reports_the_users(tmp_path, capsys):
    out = tmp_path / "run"
    _model_output(out)
    kept = _users_files(out, tmp_path / "outside")
    (out / "mine" / "empty").mkdir()
    with pytest.raises(OutputExists, match=r"already holds the output of an earlier `paw-gym "
                                           r"sft`"):
        claim_folder(out, "sft", overwrite=False)
    output = claim_folder(out, "sft", overwrite=True, writes=MODEL_FILES)
    assert sorted(p.name for p in out.iterdir()) == sorted([LOCK, MARKER, "data", "mine",
                                                            "notes.txt"])
    assert (out / "mine" / "a.txt").read_text() == "mine too" and (out / "mine" / "empty").is_dir()
    assert (tmp_path / "outside" / "data.txt").read_text() == "the user's data"
    assert f"removed 2 files an earlier paw-gym command wrote; kept 3 entries it did not " \
           f"write: {', '.join(kept)}" in capsys.readouterr().err
    output.release()


def test_a_users_file_where_the_command_writes_is_refused_before_anything_goes(tmp_path):
    out = tmp_path / "run"
    _model_output(out)
    (out / "tokenizer.json").write_text("the user's own, at a name a model folder uses")
    (out / "model.safetensors").unlink()
    (out / "model.safetensors").symlink_to(tmp_path / "elsewhere.safetensors")
    with pytest.raises(OutputExists, match=r"holds 'model.safetensors', which paw-gym did not "
                                           r"write and `paw-gym sft` would write over"):
        claim_folder(out, "sft", overwrite=True, writes=MODEL_FILES)
    assert (out / "config.json").is_file()  # nothing removed


def test_records_by_pattern_and_nested_outputs(tmp_path):
    out = tmp_path / "demo"
    with claim_folder(out, "demo", False, writes=("logs/*.txt", "sft/"),
                      records=("logs/*.txt", "sft/")):
        (out / "logs").mkdir()
        (out / "logs" / "a.txt").write_text("paw-gym's")
        _model_output(out / "sft")
    (out / "logs" / "mine.md").write_text("the user's")
    (out / "sft" / "notes.txt").write_text("the user's, inside the nested output")
    claim_folder(out, "demo", True, writes=("logs/*.txt", "sft/")).release()
    left = sorted(p.relative_to(out).as_posix() for p in out.rglob("*"))
    assert left == [LOCK, MARKER, "logs", "logs/mine.md", "sft", f"sft/{LOCK}", f"sft/{MARKER}",
                    "sft/notes.txt"]


def test_a_damaged_manifest_makes_nothing_paw_gyms(tmp_path):
    out = tmp_path / "run"
    _model_output(out)
    (out / MARKER).write_text("{not json")
    claim_folder(out, "demo", overwrite=True, writes=("results.md",)).release()
    assert (out / "model.safetensors").is_file()


def test_a_second_writer_is_refused_with_the_holders_pid_and_command(tmp_path):
    out = tmp_path / "run"
    with held_by_another_process(out) as holder:
        with pytest.raises(OutputLocked, match=rf"is being written by pid {holder.pid} "
                                               rf"\(`-c {out}`\)"):
            claim_folder(out, "sft", overwrite=True)
        # Killed, it holds nothing: the kernel dropped its lock.
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        claim_folder(out, "sft", overwrite=True).release()


def test_a_failed_save_leaves_nothing_at_its_target(tmp_path):
    output = claim_folder(tmp_path / "run", "train", False)
    with pytest.raises(RuntimeError):
        with output.staged("checkpoints/step-000001") as staging:
            (staging / "model.safetensors").write_bytes(b"half")
            raise RuntimeError("disk full")
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == []
    output.release()


def test_a_save_never_replaces_a_file_it_did_not_record(tmp_path):
    out = tmp_path / "run"
    output = claim_folder(out, "sft", False)  # declares nothing: no refusal up front
    (out / "extra.bin").write_text("the user's, put there while the command ran")
    with pytest.raises(OutputExists, match=r"extra.bin' is in the way of the save and paw-gym "
                                           r"did not write it"):
        with output.staged(".") as staging:
            (staging / "extra.bin").write_text("paw-gym's")
    assert (out / "extra.bin").read_text().startswith("the user's")
    assert not list(out.glob(".*.partial"))
    output.release()


_KILL_IN_SAVE = textwrap.dedent("""
    import os, sys
    from paw_gym.outputs import MODEL_FILES, claim_folder
    calls, real = [0], os.replace
    def replace(*args):
        calls[0] += 1
        if calls[0] == int(sys.argv[2]):
            os._exit(9)  # killed, as by SIGKILL: no cleanup runs
        real(*args)
    os.replace = replace
    with claim_folder(sys.argv[1], "sft", True, writes=MODEL_FILES) as output:
        with output.staged(".") as staging:
            (staging / "model.safetensors").write_bytes(b"w" * 64)
            (staging / "config.json").write_text("{}")
    print(calls[0])
""")


def test_a_kill_at_each_stage_of_a_save_is_refused_as_incomplete_and_a_rerun_succeeds(
        tmp_path):
    out = tmp_path / "run"
    run = lambda kill_at: subprocess.run(  # noqa: E731
        [sys.executable, "-c", _KILL_IN_SAVE, str(out), str(kill_at)], cwd=ROOT,
        capture_output=True, text=True)
    stages = int(run(0).stdout)  # the renames of a whole save: manifest writes and moves
    assert stages >= 4
    for kill_at in range(1, stages + 1):
        killed = run(kill_at)
        assert killed.returncode == 9, (kill_at, killed.stderr[-400:])
        if kill_at == 1:  # before its first change: the earlier output is there, whole
            verify_output(out)
        else:
            with pytest.raises(IncompleteOutput, match=r"is incomplete: `paw-gym sft` stopped "
                                                       r"before it finished writing it; rerun "
                                                       r"it with --overwrite true"):
                verify_output(out)
        assert run(0).returncode == 0, kill_at
        verify_output(out)
        assert sorted(p.name for p in out.iterdir()) == sorted(
            [LOCK, MARKER, "config.json", "model.safetensors"]), kill_at


def test_a_flipped_byte_or_a_missing_weight_file_is_caught(tmp_path):
    out = tmp_path / "model"
    _model_output(out)
    verify_output(out)
    data = bytearray((out / "model.safetensors").read_bytes())
    data[10] ^= 1
    (out / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match=r"model.safetensors is damaged: its size or "
                                             r"sha256 differs"):
        verify_output(out)
    (out / "model.safetensors").unlink()
    with pytest.raises(IntegrityError, match=r"model.safetensors is missing"):
        verify_output(out)
    with pytest.raises(IncompleteOutput, match="incomplete save"):
        verify_output(tmp_path / "x" / ".step-000002.partial")


def test_a_folder_being_written_is_refused_on_load_naming_the_writer(tmp_path):
    out = tmp_path / "run"
    with held_by_another_process(out) as holder:
        with pytest.raises(IncompleteOutput, match=rf"still being written by pid {holder.pid}"):
            verify_output(out)


def test_a_file_is_refused_unless_overwrite(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text("mine")
    with pytest.raises(OutputExists, match=r"--export_corpus '.*corpus.jsonl' already exists; "
                                           r"pass --overwrite true"):
        claim_file(path, overwrite=False, flag="--export_corpus")
    assert claim_file(path, overwrite=True, flag="--export_corpus") == path
    with pytest.raises(OutputExists, match="is a folder"):
        claim_file(tmp_path, overwrite=True, flag="--out")
