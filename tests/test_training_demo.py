"""``paw-gym demo`` pieces that run in seconds (the full demo is measured in docs/training.md)."""

from __future__ import annotations

import pytest

from training.demo import DemoConfig, results_markdown, run_demo
from training.evaluate import EvalResult, TaskRow


def _result(success: float) -> EvalResult:
    rows = [TaskRow("beauty", 4, success, success, 0.5, 5.0, 60.0),
            TaskRow("overall", 4, success, success, 0.5, 5.0, 60.0)]
    return EvalResult(rows=rows)


def test_results_markdown_has_before_after_per_task_and_rl_pool():
    config = DemoConfig(train_pool=8, group_size=8, n_groups=4, rl_steps=12)
    text = results_markdown([("held-out", _result(0.0), _result(2.0)),
                             ("training-pool", _result(15.6), _result(40.6))],
                            config, {"SFT warm start": 200.0, "RL training": 300.5})
    assert "## held-out tasks (split `test`" in text
    assert "## training-pool tasks (split `dev`" in text
    assert "| beauty | 4 | 15.6 | 40.6 |" in text
    assert "| overall | 4 | 0.0 | 2.0 |" in text
    assert "12 updates of 4 goals × 8 rollouts from a pool of 8 `dev` goals" in text
    assert "Total: 500 s" in text


@pytest.mark.parametrize("field", ["train_pool", "pool_eval_repeats"])
def test_run_demo_rejects_empty_pool_before_any_work(tmp_path, field):
    out = tmp_path / "demo"
    with pytest.raises(ValueError, match=field):
        run_demo(DemoConfig(output_dir=str(out), **{field: 0}), log=lambda _: None)
    assert not out.exists()
