"""``benchmarks/real_model_report.py``: issue 56's figures read from the result files."""

from __future__ import annotations

import json
import shutil

from benchmarks.common import RESULTS
from benchmarks.real_model_report import SECTIONS, report


def test_a_missing_result_prints_as_not_measured_with_its_command(tmp_path):
    text = report(tmp_path)
    for title, file, command, _ in SECTIONS:
        assert f"| {title} | not measured (`{file}`) | |" in text
        assert f"- {title}: `{command}`" in text


def test_each_row_is_read_from_its_file(tmp_path):
    """The committed TRL comparison gives its ratio; a changed file changes the row."""
    shutil.copy(RESULTS / "trl_update_speed.json", tmp_path / "trl_update_speed.json")
    result = json.loads((tmp_path / "trl_update_speed.json").read_text())
    ratio = result["ratios"]["paw-gym / trl update_s"]
    title = "The same update in TRL, from the bare model (every advantage 0)"
    assert f"| {title} | update s, paw-gym / TRL | " in report(tmp_path)
    assert f"= {ratio:.2f} |" in report(tmp_path)
    result["ratios"]["paw-gym / trl update_s"] = 0.123
    (tmp_path / "trl_update_speed.json").write_text(json.dumps(result))
    assert "= 0.12 |" in report(tmp_path)


def test_every_committed_result_file_reads():
    """Every section whose file is committed makes rows (a renamed field fails here)."""
    text = report(RESULTS)
    for title, file, _, rows in SECTIONS:
        if (RESULTS / file).is_file():
            assert rows(json.loads((RESULTS / file).read_text()))
            assert f"| {title} | not measured" not in text
