"""``benchmarks/gpu_check.py``'s command line on this CPU: the parts a run picks, and the
environment its torchrun workers get (the GPU measurements themselves run in
``scripts/gpu_check.sh``; ``test_distributed_checks.py`` runs its FSDP part on 2 gloo processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from benchmarks import gpu_check


def test_the_fsdp_workers_keep_the_callers_python_path(tmp_path):
    """``WHEELS=... scripts/gpu_check.sh`` installs gymnasium into a folder on PYTHONPATH; the
    torchrun workers must import from it as well as from this checkout (on an H200 whose image
    lacks gymnasium the FSDP part failed when they saw only the checkout)."""
    (tmp_path / "only_on_the_callers_path.py").write_text("WHERE = 'caller'\n")
    env = gpu_check.worker_env({**os.environ, "PYTHONPATH": str(tmp_path)})
    assert env["OMP_NUM_THREADS"] == "1"
    done = subprocess.run(
        [sys.executable, "-c", "import only_on_the_callers_path as m, benchmarks.gpu_check; "
         "print(m.WHERE)"], cwd=tmp_path.parent, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "caller"


@pytest.mark.heavy
def test_parts_runs_only_the_parts_named(tmp_path, one_torch_thread):
    """``--parts tiny_update`` (CPU-sized with ``--quick``) measures that part alone: a rerun of
    one failed part costs seconds of a lent GPU, not the whole script."""
    out = tmp_path / "check.json"
    assert gpu_check.main(["--quick", "--parts", "tiny_update", "--out", str(out)]) == 0
    results = json.loads(out.read_text(encoding="utf-8"))
    assert [name for name in gpu_check.PARTS if name in results] == ["tiny_update"]
    update = results["tiny_update"]
    assert "error" not in update and update["updates"] == 2
    assert update["max_weight_change"] > 0
