"""``python -m benchmarks.numerics --physical``: a finished portable demo against the records
of physical CPUs (``benchmarks/results/numerics/physical/``), kept as its CPU kind's record."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import numerics
from tests.emulated_cpus import SHORT_DEMO

REPO = Path(__file__).resolve().parents[2]


def test_a_folder_without_a_finished_demo_is_one_line(tmp_path):
    with pytest.raises(SystemExit, match="no summary.json there"):
        numerics.physical(tmp_path)


@pytest.mark.heavy
def test_a_portable_demo_is_kept_then_matched_and_a_changed_number_is_named(tmp_path,
                                                                              monkeypatch):
    """The shortened demo in portable numerics (about 1.5 CPU min): kept as its CPU kind's
    record, then found identical to it; a record of the same demo from another CPU kind whose
    base model differs is reported at ``base_model``; a native demo is refused."""
    monkeypatch.setattr(numerics, "PHYSICAL", tmp_path / "physical")
    out = tmp_path / "demo"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ATEN_", "MKL_", "ONEDNN_"))}
    done = subprocess.run([sys.executable, "-m", "training.cli", "demo", *SHORT_DEMO,
                           "--output_dir", str(out)], cwd=REPO, capture_output=True, text=True,
                          env={**env, "PAW_GYM_NUMERICS": "portable", "OMP_NUM_THREADS": "1",
                               "PAW_GYM_CACHE": str(tmp_path / "cache")}, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]

    assert numerics.physical(out) == {}
    [kept] = (tmp_path / "physical").glob("*.json")
    record = json.loads(kept.read_text())
    kind = record["machine"]["cpu_kind"]
    assert kept.name.startswith(f"{kind['vendor']}-family{kind['family']}-model{kind['model']}")
    assert "output_dir" not in record["config"] and record["numbers"]["base_model"]
    assert numerics.physical(out) == {kept.name: None}   # a rerun matches; the record stays
    assert json.loads(kept.read_text()) == record

    other = {**record, "machine": {**record["machine"], "cpu_kind": {**kind, "model": -1}},
             "numbers": {**record["numbers"], "base_model": "0" * 64}}
    (tmp_path / "physical" / "other-cpu.json").write_text(json.dumps(other))
    assert numerics.physical(out) == {kept.name: None, "other-cpu.json": "base_model"}
    assert json.loads(kept.read_text()) == record
    kept.unlink()  # another kind's record only: this run is still kept as its own kind's
    assert numerics.physical(out) == {"other-cpu.json": "base_model"}
    assert json.loads(kept.read_text()) == record

    native = tmp_path / "native"
    shutil.copytree(out, native, ignore=shutil.ignore_patterns("*.safetensors", "base-model"))
    summary = json.loads((native / "summary.json").read_text())
    summary["machine"]["numerics"] = "native"
    (native / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(SystemExit, match="ran in native numerics; only portable"):
        numerics.physical(native)
