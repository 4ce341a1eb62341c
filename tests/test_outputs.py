"""The one output guard (run_files.outputs): refuse by default; with --overwrite remove exactly
the files paw-gym can prove it wrote (literal records with size and sha256); the manifest
and lock never written through a symlink; the manifest read as untrusted data; one writer per
folder, even when its lock file is deleted by hand; atomic saves; weight files checked, in a
copy taken out of its run too."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from run_files.outputs import (LOCK, MARKER, MODEL_FILES, IncompleteOutput, IntegrityError,
                               OutputExists, OutputLocked, claim_file, claim_folder,
                               read_manifest, sanitize_manifest, verify_output,
                               write_text_atomically)
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


def _snapshot(folder: Path) -> dict[str, bytes | str]:
    """Every entry under ``folder``: a file's bytes, a symlink's target, a folder's name."""
    found: dict[str, bytes | str] = {}
    for path in sorted(folder.rglob("*")):
        name = path.relative_to(folder).as_posix()
        found[name] = f"-> {os.readlink(path)}" if path.is_symlink() else \
            "folder" if path.is_dir() else path.read_bytes()
    return found


def _digest(data: bytes) -> dict:
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


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


def test_the_manifest_records_literal_paths_with_size_and_sha256(tmp_path):
    out = tmp_path / "run"
    _model_output(out, weights=b"weights")
    files = read_manifest(out)["files"]
    assert sorted(files) == ["config.json", "model.safetensors"]
    assert {k: v for k, v in files["model.safetensors"].items() if k != "inode"} == \
        _digest(b"weights")
    raw = json.loads((out / MARKER).read_text())
    assert not any("*" in name for name in raw["files"])  # never a pattern


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


def test_a_recorded_file_changed_since_is_kept_and_named(tmp_path, capsys):
    out = tmp_path / "run"
    with claim_folder(out, "train", False) as output:
        write_text_atomically(out / "metrics.jsonl", '{"step": 1}\n')
        write_text_atomically(out / "results.md", "paw-gym's table\n")
    (out / "metrics.jsonl").write_text('{"step": 1}\nthe user appended a note\n')
    claim_folder(out, "train", overwrite=True, writes=("results.md",)).release()
    assert (out / "metrics.jsonl").read_text().endswith("the user appended a note\n")
    assert not (out / "results.md").exists()
    assert "kept 1 entries it did not write: metrics.jsonl (changed since paw-gym wrote it)" \
        in capsys.readouterr().err
    assert output.manifest["command"] == "train"


def test_a_users_file_where_the_command_writes_is_refused_before_anything_goes(tmp_path):
    out = tmp_path / "run"
    _model_output(out)
    (out / "tokenizer.json").write_text("the user's own, at a name a model folder uses")
    with pytest.raises(OutputExists, match=r"holds 'tokenizer.json', which paw-gym did not "
                                           r"write, and `paw-gym sft` would write over it"):
        claim_folder(out, "sft", overwrite=True, writes=MODEL_FILES)
    (out / "tokenizer.json").unlink()
    (out / "model.safetensors").unlink()
    (out / "model.safetensors").symlink_to(tmp_path / "elsewhere.safetensors")
    with pytest.raises(OutputExists, match=r"holds 'model.safetensors', which changed since "
                                           r"paw-gym wrote it, and `paw-gym sft` would write"):
        claim_folder(out, "sft", overwrite=True, writes=MODEL_FILES)
    assert (out / "config.json").is_file()  # nothing removed


def test_a_users_folder_or_symlink_at_a_recorded_path_is_seen_by_the_claim(tmp_path):
    """A folder named like a recorded file, a symlink inside a recorded folder: refused
    before any work, never found only when the save moves into place."""
    out = tmp_path / "run"
    with claim_folder(out, "train", False) as output:
        with output.staged("checkpoints/step-000001") as staging:
            (staging / "model").mkdir()
            (staging / "model" / "model.safetensors").write_bytes(b"w")
        write_text_atomically(out / "config.yaml", "seed: 0\n")
    writes = ("config.yaml", "checkpoints/step-[0-9]*/**")
    (out / "config.yaml").unlink()
    (out / "config.yaml").mkdir()
    (out / "config.yaml" / "mine.txt").write_text("the user's")
    with pytest.raises(OutputExists, match=r"holds 'config.yaml/', which paw-gym did not write"):
        claim_folder(out, "train", overwrite=True, writes=writes)
    with pytest.raises(OutputExists, match=r"holds 'config.yaml/'"):
        claim_folder(out, "train", overwrite=False, writes=writes, resume=True)
    shutil.rmtree(out / "config.yaml")
    model = out / "checkpoints" / "step-000001" / "model"
    shutil.rmtree(model)
    model.symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(OutputExists, match=r"holds 'checkpoints/step-000001/model', which"):
        claim_folder(out, "train", overwrite=True, writes=writes)
    with pytest.raises(OutputExists, match=r"holds 'checkpoints/step-000001/model', which"):
        claim_folder(out, "train", overwrite=False, writes=writes, resume=True)
    assert model.is_symlink()


def test_nested_outputs_go_by_their_own_manifests(tmp_path):
    out = tmp_path / "demo"
    with claim_folder(out, "demo", False, writes=("logs/**", "sft/")):
        (out / "logs").mkdir()
        write_text_atomically(out / "logs" / "a.txt", "paw-gym's")
        _model_output(out / "sft")
    assert read_manifest(out)["nested"] == ["sft"]
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


def test_a_hand_edited_manifest_is_data_not_orders(tmp_path, capsys):
    """Patterns, paths outside the folder, absolute paths, ``..``, control characters,
    digests of other content and unknown keys: none of it removes or reads a user's file."""
    out = tmp_path / "run"
    _model_output(out)
    users = {"notes.txt": b"the user's notes", "sub/data.bin": b"the user's data"}
    for name, data in users.items():
        (out / name).parent.mkdir(exist_ok=True)
        (out / name).write_bytes(data)
    (tmp_path / "outside.txt").write_text("the user's, beside the folder")
    manifest = json.loads((out / MARKER).read_text())
    wrong = _digest(b"something else")
    manifest["files"].update({
        "**": wrong, "*": wrong, "notes.txt": wrong, "sub/data.bin": {"size": -1},
        "../outside.txt": _digest(b"the user's, beside the folder"),
        str(tmp_path / "outside.txt"): _digest(b"the user's, beside the folder"),
        "sub/../notes.txt": _digest(b"the user's notes"), "bad\x1b[2Jname": wrong})
    manifest.update(written=["**"], sha256={"notes.txt": _digest(b"the user's notes")},
                    folders=["..", "/etc"], nested=["../.."], staging={"sub": [0, 0]},
                    argv=["paw-gym", "sft", "\x1b[31mred\x1b[0m"], extra="ignored")
    (out / MARKER).write_text(json.dumps(manifest))
    believed = sanitize_manifest(manifest)
    assert sorted(believed["files"]) == ["*", "**", "config.json", "model.safetensors",
                                         "notes.txt"]
    assert believed["folders"] == [] and believed["nested"] == [] and "extra" not in believed
    manifest["complete"] = False
    (out / MARKER).write_text(json.dumps(manifest))
    with pytest.raises(IncompleteOutput) as refused:
        verify_output(out)
    assert "\x1b" not in str(refused.value) and "\\x1b[31mred" in str(refused.value)
    claim_folder(out, "sft", overwrite=True, writes=MODEL_FILES).release()
    for name, data in users.items():
        assert (out / name).read_bytes() == data
    assert (tmp_path / "outside.txt").read_text() == "the user's, beside the folder"
    assert not (out / "model.safetensors").exists()  # its own record still proved it


def test_sizes_are_compared_before_hashing(tmp_path):
    """A record naming a huge file with another size is refused at once, not after reading
    it (a sparse 1 TB file would take hours)."""
    out = tmp_path / "model"
    _model_output(out)
    with open(out / "model.safetensors", "r+b") as handle:
        handle.truncate(1 << 40)
    start = time.perf_counter()
    with pytest.raises(IntegrityError, match="model.safetensors is damaged"):
        verify_output(out)
    claim_folder(out, "sft", overwrite=True, writes=("other/**",)).release()
    assert time.perf_counter() - start < 5
    assert (out / "model.safetensors").stat().st_size == 1 << 40  # changed: the user's now


@pytest.mark.parametrize("own", [LOCK, MARKER])
def test_the_lock_and_the_manifest_are_never_written_through_a_symlink(tmp_path, own):
    precious = tmp_path / "precious.txt"
    precious.write_text("the user's")
    out = tmp_path / "out"
    out.mkdir()
    (out / own).symlink_to(precious)
    for overwrite in (False, True):
        with pytest.raises(OutputExists, match=rf"{own} is a symlink; paw-gym never writes "
                                               rf"through one"):
            claim_folder(out, "sft", overwrite=overwrite, writes=MODEL_FILES)
    assert precious.read_text() == "the user's"
    assert sorted(p.name for p in out.iterdir()) == [own]
    if own == MARKER:
        with pytest.raises(IntegrityError, match="not a plain file"):
            verify_output(out)


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


_LOCK_THEN_WRITE = """
import fcntl, os, sys, time
handle = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(handle, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(0.3)  # the window between taking the lock and writing one's line in it
os.pwrite(handle, f"pid {os.getpid()} (`late`)".encode(), 0)
time.sleep(30)
"""


def test_a_writer_met_before_it_wrote_its_line_is_still_named(tmp_path):
    """Two commands started together: the loser can meet the lock in the instant after the
    winner took it and before it wrote its pid (a CI run did); the message names it anyway."""
    out = tmp_path / "run"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", _LOCK_THEN_WRITE, str(out / LOCK)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(OutputLocked, match=rf"is being written by pid {holder.pid} "
                                               rf"\(`late`\)"):
            claim_folder(out, "sft", overwrite=True)
    finally:
        holder.kill()
        holder.wait()


def test_a_lock_deleted_by_hand_stops_the_first_writer_before_it_writes_the_manifest(
        tmp_path):
    out = tmp_path / "run"
    first = claim_folder(out, "sft", overwrite=False)
    (out / LOCK).unlink()  # by hand, while the first command writes
    with held_by_another_process(out, overwrite=True) as second:
        written = (out / MARKER).read_text()
        with pytest.raises(OutputLocked, match=r"its lock file .paw-gym-lock was removed or "
                                               r"replaced while `paw-gym sft` wrote it"):
            with first.staged(".") as staging:
                (staging / "model.safetensors").write_bytes(b"w")
        with pytest.raises(OutputLocked):
            first.finish()
        assert (out / MARKER).read_text() == written  # the second's manifest, untouched
        assert f"pid {second.pid}" in (out / LOCK).read_text()


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


def test_a_save_never_writes_through_a_symlink_on_its_way(tmp_path):
    out = tmp_path / "run"
    outside = tmp_path / "outside"
    outside.mkdir()
    output = claim_folder(out, "sft", False)
    (out / "model").symlink_to(outside, target_is_directory=True)
    for target in (".", "model/sub"):
        with pytest.raises(OutputExists, match=r"run/model' is in the way of the save"):
            with output.staged(target) as staging:
                (staging / "model").mkdir()
                (staging / "model" / "weights.safetensors").write_bytes(b"w")
    assert list(outside.iterdir()) == []
    output.release()


def test_a_staging_folder_is_removed_only_when_paw_gym_made_it(tmp_path):
    out = tmp_path / "run"
    output = claim_folder(out, "train", False)
    (out / "checkpoints").mkdir()
    (out / "checkpoints" / ".step-000001.partial").mkdir()
    (out / "checkpoints" / ".step-000001.partial" / "mine.txt").write_text("the user's")
    with pytest.raises(OutputExists, match=r"\.step-000001\.partial' is in the way of the "
                                           r"save and paw-gym did not make it"):
        with output.staged("checkpoints/step-000001"):
            pass
    assert (out / "checkpoints" / ".step-000001.partial" / "mine.txt").is_file()
    output.release()


def test_every_saved_folder_carries_its_own_record(tmp_path):
    """A checkpoint copied out of its run is still checked: its weights' digests travel with
    it."""
    out = tmp_path / "run"
    with claim_folder(out, "train", False) as output:
        with output.staged("checkpoints/step-000001") as staging:
            (staging / "model").mkdir()
            (staging / "model" / "model.safetensors").write_bytes(b"w" * 64)
    copy = tmp_path / "elsewhere" / "step-000001"
    shutil.copytree(out / "checkpoints" / "step-000001", copy)
    verify_output(copy)
    verify_output(copy / "model")
    data = bytearray((copy / "model" / "model.safetensors").read_bytes())
    data[3] ^= 1
    (copy / "model" / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match=r"model/model.safetensors is damaged"):
        verify_output(copy / "model")


_KILL_IN_SAVE = textwrap.dedent("""
    import os, sys
    from run_files.outputs import MODEL_FILES, claim_folder
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
        rerun = run(0)
        assert rerun.returncode == 0, (kill_at, rerun.stderr[-400:])
        assert "kept" not in rerun.stderr, (kill_at, rerun.stderr)  # all of it was provably ours
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
    (tmp_path / "link.png").symlink_to(path)
    with pytest.raises(OutputExists, match="is a symlink"):
        claim_file(tmp_path / "link.png", overwrite=True, flag="--out")
