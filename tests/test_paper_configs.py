"""Every documented deviation from the paper has its paper-side value in every paper config.

The table "Deviations from the paper" in docs/training.md names each switch; this test reads
the table, so a row added there without a check here, or a paper config that misses a value,
fails.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from training.config import DATA_VARIABLES, TrainConfig, load_config

REPO = Path(__file__).resolve().parents[1]
PAPER_CONFIGS = sorted((REPO / "configs" / "paper").glob("*.yaml"))


def _paper_prompt_cap(config: TrainConfig) -> int:
    return 2048 if config.env_id == "PaW/ALFWorld-v0" else 4096


#: switch -> (the configs it applies to, the paper-side value as a function of the config)
PAPER_SIDE = {
    "entropy_score": (lambda c: True, lambda c: "sampled"),
    "wm_context": (lambda c: True, lambda c: "next_turn"),
    "lambda_return": (lambda c: True, lambda c: "task"),
    "max_obs_tokens": (lambda c: True, lambda c: None),
    "kl_coef": (lambda c: True, lambda c: 0.01),
    "gigpo_penalty": (lambda c: c.algo == "gigpo", lambda c: "step"),
    "gigpo_episode_norm": (lambda c: c.algo == "gigpo", lambda c: "step"),
    "gigpo_similarity": (lambda c: c.algo == "gigpo",
                         lambda c: 0.9 if c.env_id == "PaW/SearchQA-v0" else 1.0),
    "norm_adv_by_std": (lambda c: True, lambda c: True),
    "max_prompt_len": (lambda c: True, _paper_prompt_cap),
}


def documented_switches() -> list[str]:
    """The switch column (4th) of the deviations table in docs/training.md."""
    text = (REPO / "docs" / "training.md").read_text(encoding="utf-8")
    section = text.split("## Deviations from the paper", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")][1:]  # no header
    switches = []
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        found = re.match(r"`(\w+)`", cells[3]) if len(cells) > 3 else None
        assert found, f"the deviations row {row!r} names no `switch` in its 4th column"
        switches.append(found.group(1))
    return switches


def test_every_documented_deviation_has_a_paper_side_check():
    switches = documented_switches()
    assert len(switches) >= 8
    assert set(switches) == set(PAPER_SIDE)
    fields = {f for f in TrainConfig.__dataclass_fields__}
    assert set(switches) <= fields


@pytest.mark.parametrize("path", PAPER_CONFIGS, ids=lambda p: p.stem)
def test_paper_config_sets_the_paper_side_of_every_deviation(path, monkeypatch, tmp_path):
    for name in DATA_VARIABLES:
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    config = load_config(path)
    for switch, (applies, paper_value) in PAPER_SIDE.items():
        if applies(config):
            assert getattr(config, switch) == paper_value(config), f"{path.name}: {switch}"
