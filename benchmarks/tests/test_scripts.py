"""scripts/: every paper table/figure script takes tiny|paper, names only real variants,
configs and flags, and is listed in the README."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: The paper's table and figure scripts (scripts/gpu_check.sh is the GPU check, not one of them).
SCRIPTS = sorted(p for p in (REPO / "scripts").glob("*.sh") if p.name.startswith(("table", "figure")))


def test_there_is_a_script_per_paper_table_and_figure():
    names = {p.stem.split("_")[0] for p in SCRIPTS}
    assert {"table1", "table2", "table3", "table4", "figure2c", "figure4", "figure5",
            "figure6"} <= names


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_scripts_name_the_accepted_scales(script):
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True)
    assert done.returncode == 2 and "usage:" in done.stderr and "tiny|paper" in done.stderr
    done = subprocess.run(["bash", str(script), "huge"], capture_output=True, text=True)
    assert done.returncode == 2


def test_scripts_use_existing_study_variants_configs_and_flags():
    from benchmarks.study_small import VARIANTS
    from training.config import TrainConfig

    fields = set(TrainConfig.__dataclass_fields__)
    for script in SCRIPTS:
        text = script.read_text(encoding="utf-8")
        for listed in re.findall(r"--variants ((?:[\w.]+ ?)+)", text):
            assert set(listed.split()) <= set(VARIANTS), script.name
        for pattern in re.findall(r"configs/paper/[\w.{},-]+\.yaml", text):
            expanded = subprocess.run(["bash", "-c", f"cd {REPO} && echo {pattern}"],
                                      capture_output=True, text=True).stdout.split()
            assert expanded and all((REPO / p).is_file() for p in expanded), (script.name, pattern)
        for flag in re.findall(r"paw-gym train [^\n]*", text):
            for name in re.findall(r"--(\w+)", flag):
                assert name in fields | {"config"}, (script.name, name)


def test_table2_says_there_is_no_tiny_version():
    done = subprocess.run(["bash", str(REPO / "scripts" / "table2_searchqa.sh"), "tiny"],
                          capture_output=True, text=True)
    assert done.returncode == 1 and "no tiny-scale version" in done.stderr


def test_readme_lists_every_script():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for script in SCRIPTS:
        assert f"scripts/{script.name}" in readme, script.name
