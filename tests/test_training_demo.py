"""``paw-gym demo`` pieces that run in seconds (the full demo is measured in docs/training.md)."""

from __future__ import annotations

import pytest

from training.demo import DemoConfig, results_markdown, run_demo
from training.evaluate import EvalResult, TaskRow
from training.infra.metrics_log import read_metrics


def _result(success: float) -> EvalResult:
    rows = [TaskRow("beauty", 4, success, success, 0.5, 5.0, 60.0),
            TaskRow("overall", 4, success, success, 0.5, 5.0, 60.0)]
    return EvalResult(rows=rows)


def test_results_markdown_has_before_after_per_task_and_rl_pool():
    from training.infra.numerics import machine, machine_line

    config = DemoConfig(train_pool=8, group_size=8, n_groups=4, rl_steps=12)
    text = results_markdown([("held-out", _result(0.0), _result(2.0)),
                             ("training-pool", _result(15.6), _result(40.6))],
                            config, {"SFT warm start": 200.0, "RL training": 300.5}, machine())
    assert "## held-out tasks (split `test`" in text
    assert "## training-pool tasks (split `train`" in text
    assert "| beauty | 4 | 15.6 | 40.6 |" in text
    assert "| overall | 4 | 0.0 | 2.0 |" in text
    assert "12 updates of 4 goals × 8 rollouts drawn from a pool of the first 8 `train` goals, " \
           "one optimizer step on the whole rollout per update" in text
    assert "The training-pool table plays the first 8 goals, 1 episode each. The held-out " \
           "table plays every held-out task 4 times" in text
    assert "Total: 500 s" in text
    assert f"\n{machine_line(machine())}\n" in text  # the CPU and the numerics mode
    assert "## What the numbers mean" in text and "- **leak**: wm_leak: " in text
    assert "Validation" not in text  # no validation, no line about it


def test_the_summary_names_the_best_and_the_last_validation(tmp_path):
    import json

    from training.demo import validation_line, validation_summary
    from training.infra.numerics import machine

    metrics = tmp_path / "metrics.jsonl"
    records = [{"step": 0, "val_success": 0.5}, {"step": 1, "success": 0.5},
               {"step": 5, "val_success": 1.0}, {"step": 10, "val_success": 1.0},
               {"step": 12, "val_success": 0.958}]
    metrics.write_text("".join(json.dumps(r) + "\n" for r in records))
    validation = validation_summary(metrics)
    assert validation == {"first": {"step": 0, "success": 50.0},
                          "best": {"step": 5, "success": 100.0},
                          "last": {"step": 12, "success": 95.8}, "count": 4}
    line = validation_line(validation)
    assert line == ("Validation (held-out, each task once, 4 points): 50.0 % at update 0, best "
                    "100.0 % at update 5, last 95.8 % at update 12. The tables show the policy "
                    "after the last update (12), not the best one; the difference is 4.2 points.")
    config = DemoConfig()
    text = results_markdown([("held-out", _result(0.0), _result(2.0))], config, {},
                            machine(), validation)
    assert line in text
    assert validation_summary(tmp_path / "missing.jsonl") is None


@pytest.mark.parametrize("field, value", [("train_pool", 0), ("pool_eval_repeats", 0),
                                          ("expert_epsilon", 1.5), ("pretrain_steps", -1),
                                          ("rl_steps", 0), ("rl_lr", float("inf")),
                                          ("group_size", 1)])
def test_run_demo_rejects_bad_settings_before_any_work(tmp_path, field, value):
    out = tmp_path / "demo"
    with pytest.raises(ValueError, match=field):
        run_demo(DemoConfig(output_dir=str(out), **{field: value}), log=lambda _: None)
    assert not out.exists()


def test_the_demo_command_says_a_bad_rl_setting_in_one_line_before_any_work(tmp_path, capsys):
    from training.cli import main

    out = tmp_path / "demo"
    assert main(["demo", "--rl_steps", "0", "--output_dir", str(out)]) == 2
    assert capsys.readouterr().err == ("paw-gym demo: error: rl_steps=0 is invalid; expected an "
                                       "integer in [1, 10,000,000] (the number of RL "
                                       "updates)\n")
    assert not out.exists()


@pytest.mark.heavy
@pytest.mark.usefixtures("one_torch_thread")
def test_small_demo_runs_end_to_end_and_reuses_the_cached_base(tmp_path, monkeypatch, capsys,
                                                               recwarn):
    pytest.importorskip("torch")
    monkeypatch.setenv("PAW_GYM_CACHE", str(tmp_path / "cache"))
    small = dict(expert_episodes=40, pretrain_steps=10, rl_steps=1, n_groups=2, group_size=2,
                 eval_episodes=4, eval_limit=4, eval_repeats=1, val_every=1,
                 max_new_tokens=24)
    logs: list[str] = []
    summary = run_demo(DemoConfig(output_dir=str(tmp_path / "a"), **small), log=logs.append)
    assert any("base model (built)" in line for line in logs)
    assert any(line.startswith("[demo] building the base model (once: it is cached in ")
               for line in logs)
    # The demo's output is its report: no library bars or transformers deprecation warnings.
    assert "Writing model shards" not in capsys.readouterr().err
    assert not [w for w in recwarn if issubclass(w.category, FutureWarning)
                and "transformers" in w.filename]
    assert set(summary["reading_probe"]) >= {"before_pretraining", "after_pretraining"}
    assert summary["before"]["episodes"] == summary["after"]["episodes"] == 4
    records = read_metrics(tmp_path / "a" / "rl" / "metrics.jsonl")
    validation = [r for r in records if "val_success" in r]
    assert [r["step"] for r in validation] == [0, 1] and validation[0]["val_episodes"] == 4
    # Issue 25's step-size fix: one optimizer step on the whole rollout per update.
    assert [r["optimizer_steps"] for r in records if "success" in r] == [1]
    out = tmp_path / "a"
    for name in ("results.md", "summary.json", "eval_before.md", "eval_after.md",
                 "base-model/config.json", "rl/metrics.jsonl"):
        assert (out / name).is_file(), name
    assert "## held-out tasks (split `test`" in (out / "results.md").read_text()
    assert [summary["validation"][k]["step"] for k in ("first", "last")] == [0, 1]
    assert "Validation (held-out, each task once, 2 points)" in (out / "results.md").read_text()
    [recipe_dir] = (tmp_path / "cache" / "tiny-base").iterdir()
    assert (recipe_dir / "recipe.json").is_file()

    logs.clear()
    run_demo(DemoConfig(output_dir=str(tmp_path / "b"), **small), log=logs.append)
    assert any("base model (cached)" in line for line in logs)
    assert any(line.startswith("[demo] reusing the base model cached in ") for line in logs)
    assert len(list((tmp_path / "cache" / "tiny-base").iterdir())) == 1
    # A second demo into a folder is refused before any work, unless overwrite.
    from run_files.outputs import OutputExists

    results = (out / "results.md").read_text()
    with pytest.raises(OutputExists, match=r"earlier `paw-gym demo`; pass --overwrite true"):
        run_demo(DemoConfig(output_dir=str(out), **small), log=logs.append)
    assert (out / "results.md").read_text() == results


#: Builds the small base of the test below in a fresh process and prints its weights' digest.
_BUILD_BASE = """
import hashlib, sys
from pathlib import Path
import torch
torch.set_num_threads(1)
from safetensors.torch import load_file
from training.demo import DemoConfig, cached_base
from training.warmstart.sft import record_expert_demos
config = DemoConfig(expert_episodes=40, pretrain_steps=10, eval_episodes=4, seed=3)
demos = record_expert_demos(config.env_id, config.expert_episodes, Path(sys.argv[1]),
                            seed=config.seed, max_steps=config.max_steps, split="train",
                            epsilon=config.expert_epsilon, history_length=config.history_length)
folder, _ = cached_base(config, demos)
weights = load_file(str(folder / "model" / "model.safetensors"))
print(hashlib.sha256(b"".join(weights[k].numpy().tobytes() for k in sorted(weights))).hexdigest())
"""


@pytest.mark.heavy  # kill-and-resume / base build: 15-25 s of the 8-minute fast suite
def test_the_same_seed_builds_a_bit_identical_base(tmp_path):
    """Two fresh processes (other hash seeds, empty caches) build the same weights: tokenizer,
    initialisation, demo order and pretraining are all deterministic for a thread count."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    digests = []
    for run in ("a", "b"):
        env = {**os.environ, "PAW_GYM_CACHE": str(tmp_path / f"cache-{run}"),
               "PYTHONHASHSEED": {"a": "1", "b": "2"}[run]}
        done = subprocess.run([sys.executable, "-c", _BUILD_BASE, str(tmp_path / f"demos-{run}")],
                              env=env, cwd=Path(__file__).resolve().parents[1],
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        digests.append(done.stdout.split()[-1])
    assert digests[0] == digests[1]


def test_the_base_cache_key_covers_the_demo_text_and_the_thread_count(tmp_path):
    torch = pytest.importorskip("torch")
    from training.demo import base_recipe
    from training.warmstart.sft import record_expert_demos

    config = DemoConfig(expert_episodes=5)
    demos = record_expert_demos(config.env_id, 5, tmp_path / "d", max_steps=config.max_steps)
    other = record_expert_demos(config.env_id, 5, tmp_path / "o", seed=99,
                                max_steps=config.max_steps)
    recipe = base_recipe(config, demos)
    assert recipe == base_recipe(config, demos)
    assert recipe["demos_sha256"] != base_recipe(config, other)["demos_sha256"]
    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(previous + 1)
        assert base_recipe(config, demos)["torch_threads"] == previous + 1
    finally:
        torch.set_num_threads(previous)


@pytest.mark.parametrize("before, after, opening", [
    (40.0, 75.5, "This run learned: held-out success +35.5 points (40.0 % -> 75.5 %)"),
    (88.0, 100.0, "This run reached the ceiling: held-out success 88.0 % -> 100.0 %"),
    (60.0, 70.0, "This run did not show learning: held-out success +10.0 points"),
    (60.0, 50.0, "This run did not show learning: held-out success -10.0 points"),
])
def test_the_closing_line_judges_the_run_by_what_it_shows(before, after, opening):
    """The demo's last line: a gain of the bar, the ceiling reached from a start too high to
    gain it, or neither, said as such (not one sentence for every run)."""
    from training.demo import verdict

    assert verdict(before, after).startswith(opening)
