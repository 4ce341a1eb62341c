"""Issue 60: a manifest's record is proof only where the command writes, and a manifest or
record paw-gym cannot believe is said in one line (its files are then the user's)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from run_files.outputs import (MARKER, MODEL_FILES, IntegrityError, claim_folder,
                               read_manifest, verify_output)


def _model_output(folder: Path, weights: bytes = b"w" * 64) -> None:
    with claim_folder(folder, "sft", False, writes=MODEL_FILES) as output:
        with output.staged(".") as staging:
            (staging / "model.safetensors").write_bytes(weights)
            (staging / "config.json").write_text("{}")


def _edit_manifest(folder: Path, edit) -> None:
    manifest = json.loads((folder / MARKER).read_text())
    edit(manifest)
    (folder / MARKER).write_text(json.dumps(manifest))


def test_overwrite_never_removes_a_recorded_file_where_the_command_does_not_write(tmp_path,
                                                                                 capsys):
    """A record of the user's notes with their exact size and sha256 (a hand-edited or
    copied manifest) does not make ``sft --overwrite true`` delete them."""
    out = tmp_path / "out"
    _model_output(out)
    notes = b"the user's notes"
    (out / "mynotes.txt").write_bytes(notes)
    _edit_manifest(out, lambda m: m["files"].update({"mynotes.txt": {
        "size": len(notes), "sha256": hashlib.sha256(notes).hexdigest()}}))
    capsys.readouterr()
    claim_folder(out, "sft", True, writes=MODEL_FILES).release()
    assert (out / "mynotes.txt").read_bytes() == notes
    assert not (out / "model.safetensors").exists()  # where sft writes: its record proves it
    assert "kept 1 entries it did not write: mynotes.txt (not where `paw-gym sft` writes)" \
        in capsys.readouterr().err


def test_a_folder_written_into_covers_the_output_nested_there(tmp_path):
    out = tmp_path / "demo"
    with claim_folder(out, "demo", False, writes=("sft/",)):
        _model_output(out / "sft")
    claim_folder(out, "demo", True, writes=("sft/",)).release()
    assert not (out / "sft" / "model.safetensors").exists()


@pytest.mark.parametrize("damage", ["unreadable", "size abc", "sha256 short"])
def test_a_manifest_or_record_paw_gym_cannot_believe_is_said_in_one_line(tmp_path, capsys,
                                                                          damage):
    """Before, the hash check went off without a word and a flipped weight byte loaded
    silently; now one line names the manifest, and the file is the user's (kept)."""
    out = tmp_path / "model"
    _model_output(out)
    if damage == "unreadable":
        (out / MARKER).write_bytes(b"\xff{not json")
    else:
        key, value = ("size", "abc") if damage == "size abc" else ("sha256", "12ab")
        _edit_manifest(out, lambda m: m["files"]["model.safetensors"].update({key: value}))
    weights = out / "model.safetensors"
    weights.write_bytes(b"x" + weights.read_bytes()[1:])  # a flipped byte, same size
    capsys.readouterr()
    verify_output(out)  # nothing recorded to check it against ...
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(out / MARKER) in err  # ... and one line says so
    assert ("cannot be read" if damage == "unreadable" else
            "1 file record(s) paw-gym cannot believe (a malformed path, size or sha256: "
            "'model.safetensors')") in err
    assert "treated as the user's" in err
    assert "model.safetensors" not in read_manifest(out).get("files", {})
    claim_folder(out, "sft", True, writes=("other/**",)).release()
    assert weights.is_file()  # the user's now: kept


def test_an_intact_manifest_says_nothing(tmp_path, capsys):
    out = tmp_path / "model"
    _model_output(out)
    (out / "model.safetensors").write_bytes(b"x" * 64)
    capsys.readouterr()
    with pytest.raises(IntegrityError, match="model.safetensors is damaged"):
        verify_output(out)
    assert capsys.readouterr().err == ""
