"""The one output guard: refuse by default, and with --overwrite remove only paw-gym's own."""

from __future__ import annotations

import json

import pytest

from training.infra.outputs import MARKER, OutputExists, claim_file, claim_folder


def test_a_new_or_empty_folder_is_claimed(tmp_path):
    claim_folder(tmp_path / "new", "sft", overwrite=False)
    (tmp_path / "empty").mkdir()
    claim_folder(tmp_path / "empty", "sft", overwrite=False)
    for name in ("new", "empty"):
        marker = json.loads((tmp_path / name / MARKER).read_text())
        assert marker == {"command": "sft", "foreign": []}


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


def test_overwrite_removes_what_paw_gym_wrote_and_keeps_the_users_files(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("the user's, there before the first run")
    claim_folder(out, "sft", overwrite=True)  # the user's folder: nothing is removed
    (out / "model").mkdir()
    (out / "model" / "weights.bin").write_text("paw-gym's")
    (out / "log.txt").write_text("paw-gym's")
    with pytest.raises(OutputExists, match=r"already holds the output of an earlier `paw-gym "
                                           r"sft`"):
        claim_folder(out, "sft", overwrite=False)
    claim_folder(out, "sft", overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == [MARKER, "notes.txt"]
    assert (out / "notes.txt").read_text().startswith("the user's")


def test_a_damaged_marker_removes_nothing(tmp_path):
    out = tmp_path / "run"
    claim_folder(out, "demo", overwrite=False)
    (out / "results.md").write_text("x")
    (out / MARKER).write_text("{not json")
    claim_folder(out, "demo", overwrite=True)
    assert (out / "results.md").is_file()


def test_a_file_is_refused_unless_overwrite(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text("mine")
    with pytest.raises(OutputExists, match=r"--export_corpus '.*corpus.jsonl' already exists; "
                                           r"pass --overwrite true"):
        claim_file(path, overwrite=False, flag="--export_corpus")
    assert claim_file(path, overwrite=True, flag="--export_corpus") == path
    with pytest.raises(OutputExists, match="is a folder"):
        claim_file(tmp_path, overwrite=True, flag="--out")
