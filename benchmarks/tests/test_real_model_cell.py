"""The sparse-regime cell's bookkeeping (``benchmarks/real_model.py``, issue 55): what it reads
from a run's replay and metrics, and the paired report, against hand-computed numbers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks import real_model
from wrappers import WMReplay
from wrappers.record import transition_record

REPO = Path(__file__).resolve().parents[2]


def _replay(folder, wins):
    """Two updates of 2 groups × 2 two-step episodes, in the trainer's record schema; ``wins``
    holds the (update, group, episode) that win on their last step."""
    records = []
    for update in (1, 2):
        for group in range(2):
            for episode in range(2):
                won = (update, group, episode) in wins
                for step in range(2):
                    last = step == 1
                    records.append(transition_record(
                        "prompt " * 80, f"action {update}{group}{episode}{step}", "next",
                        10.0 if won and last else -0.1, won and last, False,
                        {"won": won and last, "task_id": f"t{group}"},
                        f"update-{update:06d}-episode-{2 * group + episode:04d}", step,
                        update=update, group=group, lambda_g=1.0))
    replay = WMReplay(folder, shard="update-000001")
    replay.extend(records)
    replay.close()
    return folder


def test_win_groups_and_the_outputs_around_the_first_win(tmp_path):
    replay = _replay(tmp_path / "replay", wins={(2, 1, 0)})
    assert real_model.win_groups(replay) == {1: 0.0, 2: 0.5}
    outputs = real_model.first_win_outputs(replay)
    assert outputs["update"] == 2
    assert [step["a"] for step in outputs["before"]] == ["action 1000", "action 1001"]
    assert [step["a"] for step in outputs["win"]] == ["action 2100", "action 2101"]
    assert real_model.first_win_outputs(_replay(tmp_path / "none", wins=set())) is None


def _run(seed, paw, success, final_val, greedy_final):
    curves = [{"step": i + 1, "success": s, "invalid_frac": 0.9, "zero_advantage_groups": 0.25,
               "lambda_mean": 1.0, "wm_selected": 8, "transitions": 64, "wm_leak": 0.01}
              for i, s in enumerate(success)]
    return {"seed": seed, "paw": paw, "cpu_s": 600.0, "curves": curves,
            "win_groups": {str(i + 1): float(s > 0) for i, s in enumerate(success)},
            "validations": [{"step": step, "val_success": v, "val_invalid_frac": 0.5,
                             "val_wm_token": 0.4, "val_wm_exact": 0.1}
                            for step, v in ((0, 0.05), (10, 0.1), (20, final_val))],
            "checkpoint_evals": {"10": {"success": 0.2, "invalid": 0.3},
                                 "20": {"success": greedy_final, "invalid": 0.125}},
            "val": {}, "val_invalid": {}, "train_success": success,
            "machine": {"cpu": "test CPU"}, "code": {"commit": "abcdef0123"}}


def test_the_cell_report_pairs_seeds_and_computes_the_differences(tmp_path, monkeypatch):
    from benchmarks.study_small import mean_ci

    monkeypatch.setattr(real_model, "RESULTS", tmp_path)
    folder = tmp_path / "real_model" / "shelf-sparse"
    folder.mkdir(parents=True)
    (folder / "sft.json").write_text(json.dumps({"success": 0.25, "invalid": 0.5,
                                                 "episodes": 48}))
    runs = {"grpo-s0": _run(0, False, [0, 0, 0, 0.25], 0.10, 0.30),
            "grpo_paw-s0": _run(0, True, [0, 0.0625, 0, 0.5], 0.20, 0.40),
            # seed 1: GRPO wins 12.5 % over its first 3 updates: outside the regime
            "grpo-s1": _run(1, False, [0.125, 0.125, 0.125, 0.125], 0.30, 0.50),
            "grpo_paw-s1": _run(1, True, [0, 0, 0, 0], 0.50, 0.50)}
    # Both seed-1 runs resumed once: GRPO's stopped piece was not logged (its CPU time is the
    # last piece's, marked), GRPO + PaW's was (300 CPU s, added).
    runs["grpo-s1"]["pieces"] = runs["grpo_paw-s1"]["pieces"] = 2
    (folder / real_model.STOPPED_PIECES).write_text(json.dumps(
        {"run": "grpo_paw-s1", "after_update": 2, "cpu_s": 300.0, "stopped_utc": "",
         "reason": "session end"}) + "\n")
    for key, run in runs.items():
        (folder / f"rl-{key}.json").write_text(json.dumps(run))
    numbers = real_model.cell_numbers(runs["grpo_paw-s0"], start_greedy=0.25)
    assert numbers["first_win"] == 2 and numbers["early_success"] == pytest.approx(0.0625 / 3)
    assert numbers["train_success"] == pytest.approx(0.5625 / 4)
    assert numbers["signal_groups"] == 0.75 and numbers["coverage"] == 0.125
    assert numbers["greedy"] == [0.25, 0.2, 0.4] and numbers["val"] == [0.05, 0.1, 0.2]
    assert numbers["greedy_invalid"] == 0.125                   # the last checkpoint's
    assert real_model.cell_numbers(runs["grpo_paw-s1"])["first_win"] is None

    text = real_model.report_cell("shelf-sparse")
    assert "holds on 1 of 2 paired seeds" in text
    mean, half = mean_ci([10.0, 20.0])  # final held-out at T = 1.0: 20 − 10 and 50 − 30 pp
    assert (f"GRPO + PaW − GRPO, final held-out success at T = 1.0: {mean:+.1f} ± {half:.1f} pp"
            in text)
    mean, half = mean_ci([10.0, 0.0])  # greedy: 40 − 30 and 50 − 50
    assert f"final held-out success, greedy: {mean:+.1f} ± {half:.1f} pp" in text
    assert "GRPO + PaW: a training win in 1 of 2 runs, first at update(s) 2, none" in text
    assert "GRPO: a training win in 2 of 2 runs, first at update(s) 4, 1" in text
    assert ("CPU time of the 4 RL runs with their evaluations: 0.8 h (test CPU; code abcdef0), "
            "0.1 h of it in pieces that `--stop` ended; 1 of them resumed, counted from their "
            "last piece only") in text     # 4 × 600 + 300 CPU s (the evaluations have none)
    assert text.count(f"| 10{real_model.RESUMED_MARK} |") == 1   # GRPO s1: 600 CPU s, marked
    assert text.count("| 15 |") == 1                               # GRPO + PaW s1: 600 + 300
    assert text.count("| GRPO + PaW |") == 2 and text.count("| GRPO |") == 2
    assert text.count("| 50.0 → 12.5 |") == 4   # greedy invalid: the start's, the last one's
    assert "update of the first training win" not in text  # both won in one pair only


def test_the_first_win_update_is_compared_over_the_pairs_where_both_won(tmp_path, monkeypatch):
    from benchmarks.study_small import mean_ci

    monkeypatch.setattr(real_model, "RESULTS", tmp_path)
    folder = tmp_path / "real_model" / "shelf-sparse"
    folder.mkdir(parents=True)
    firsts = {0: (2, 4), 1: (3, 3), 2: (1, None), 3: (5, 2)}  # GRPO's, PaW's first win
    for seed, pair in firsts.items():
        for paw, first in zip((False, True), pair):
            success = [0.0] * 6
            if first is not None:
                success[first - 1] = 0.25
            (folder / f"rl-{'grpo_paw' if paw else 'grpo'}-s{seed}.json").write_text(
                json.dumps(_run(seed, paw, success, 0.1, 0.1)))
    text = real_model.report_cell("shelf-sparse")
    mean, half = mean_ci([2.0, 0.0, -3.0])  # seeds 0, 1 and 3; seed 2's PaW run never won
    assert (f"GRPO + PaW − GRPO, update of the first training win: {mean:+.1f} ± {half:.1f} "
            "updates (paired, 3 seeds where both won, 95 % CI); PaW's came earlier in 1, at "
            "the same update in 1") in text


def test_the_cell_figure_draws_every_seed(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    monkeypatch.setattr(real_model, "RESULTS", tmp_path)
    folder = tmp_path / "real_model" / "shelf-sparse"
    folder.mkdir(parents=True)
    for seed in range(2):
        for paw in (False, True):
            run = _run(seed, paw, [0, 0.1, 0.2], 0.1, 0.1)
            name = f"rl-{'grpo_paw' if paw else 'grpo'}-s{seed}.json"
            (folder / name).write_text(json.dumps(run))
    figure = real_model.plot_cell("shelf-sparse", tmp_path / "cell.png")
    assert figure.stat().st_size > 10_000


def test_a_stopped_run_goes_on_from_its_checkpoint_and_a_finished_one_is_not_rerun(
        tmp_path, monkeypatch):
    """``trained``'s choice of command (the command itself is ``paw-gym train``, whose
    ``--resume`` the trainer's kill-and-resume tests check)."""
    calls = []
    monkeypatch.setattr(real_model, "run_command",
                        lambda args, log: calls.append(args) or {"cpu_s": 1.0, "wall_s": 2.0})
    args = ["train", "--config", "c.yaml", "--output_dir", str(tmp_path / "run"),
            "--overwrite", "true", "--paw", "true"]
    assert real_model.trained(args, tmp_path / "run") == {"cpu_s": 1.0, "wall_s": 2.0,
                                                         "pieces": 1}
    assert calls == [args]
    assert real_model.trained(args, tmp_path / "run")["pieces"] == 1 and len(calls) == 1

    (tmp_path / "stopped" / "checkpoints" / "step-000004").mkdir(parents=True)
    assert real_model.trained(args, tmp_path / "stopped")["pieces"] == 2
    assert calls[-1] == ["train", "--config", "c.yaml", "--output_dir", str(tmp_path / "run"),
                         "--paw", "true", "--resume"]


def test_a_stored_sft_result_without_its_adapter_is_run_again(tmp_path, monkeypatch):
    """A fresh clone has the committed ``sft.json`` but not the adapter the RL runs start from
    (run folders are not committed): the SFT stage runs again instead of being skipped, and
    is skipped once the adapter is there."""
    monkeypatch.setattr(real_model, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(real_model, "RUNS", tmp_path / "runs")
    stored = real_model.result_path("shelf-sparse", "sft")
    stored.parent.mkdir(parents=True)
    stored.write_text(json.dumps({"success": 0.25}))
    runs = []

    def sft(name, recipe):
        runs.append(name)
        (tmp_path / "runs" / name / "sft").mkdir(parents=True)
        return {"success": 0.25, "sft_cpu_s": 1.0}

    monkeypatch.setattr(real_model, "sft", sft)
    real_model.run_study("shelf-sparse", ["sft"], [], [])
    assert runs == ["shelf-sparse"]
    assert json.loads(stored.read_text())["success"] == 0.25
    real_model.run_study("shelf-sparse", ["sft"], [], [])
    assert runs == ["shelf-sparse"]


def test_stop_ends_a_running_trainer_at_its_next_checkpoint_and_logs_its_cpu(
        tiny_model_dir, tmp_path, monkeypatch):
    """``--stop`` on a real ``paw-gym train`` of the recipe's RL stage (the tiny model on
    Shelf, a checkpoint every update, its run folder given relative to its working folder): it
    waits for a checkpoint newer than the one the run had, ends the trainer there, and appends
    the piece's CPU seconds, which the report's figures then include."""
    from training.infra.checkpoint import checkpoint_step, latest_checkpoint

    monkeypatch.setattr(real_model, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(real_model, "RUNS", tmp_path / "runs" / "real-model")
    relative = "runs/real-model/shelf-sparse/rl/grpo-s0"
    folder = tmp_path / relative
    trainer = subprocess.Popen(
        [sys.executable, "-m", "training.cli", "train", "--model", str(tiny_model_dir),
         "--env_id", "PaW/Shelf-v0", "--n_groups", "1", "--group_size", "2",
         "--max_new_tokens", "4", "--max_episode_steps", "2", "--total_steps", "500",
         "--save_every", "1", "--keep_checkpoints", "2", "--device", "cpu",
         "--progress", "false", "--output_dir", relative],
        cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while latest_checkpoint(folder) is None and trainer.poll() is None:
            assert time.monotonic() < deadline, "no checkpoint in 300 s"
            time.sleep(0.2)
        assert trainer.poll() is None, trainer.stderr.read()[-3000:]
        [(process, found)] = real_model.recipe_trainers("shelf-sparse").items()
        assert (process.pid, found) == (trainer.pid, folder)
        had = checkpoint_step(latest_checkpoint(folder))

        records = real_model.stop_runs("shelf-sparse", "a test", poll_s=0.05)
        assert trainer.wait(timeout=60) == -signal.SIGKILL
    finally:
        trainer.kill()
    [record] = records
    assert record["run"] == "grpo-s0" and record["reason"] == "a test"
    assert record["after_update"] > had  # the next checkpoint, not the one it had
    assert latest_checkpoint(folder).name == f"step-{record['after_update']:06d}"
    assert record["cpu_s"] > 0
    logged = tmp_path / "results" / "real_model" / "shelf-sparse" / real_model.STOPPED_PIECES
    assert [json.loads(line) for line in logged.read_text().splitlines()] == [record]
    assert real_model.stopped_cpu("shelf-sparse") == {"grpo-s0": record["cpu_s"]}
    with pytest.raises(SystemExit, match="no RL run of shelf-sparse is running"):
        real_model.stop_runs("shelf-sparse", "again")


def test_term_gradients_remake_a_finished_runs_update_from_its_checkpoint(
        tiny_model_dir, tmp_path, monkeypatch, capsys):
    """``--term-gradients SEED:UPDATE`` on a real tiny-model GRPO + PaW run of the recipe's
    layout: the update is made again from the checkpoint before it (the same gradient norm as
    the run logged), its gradient split into the two terms, and the report's table shows it."""
    monkeypatch.setattr(real_model, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(real_model, "RUNS", real_model.RUNS)  # --runs sets it: restored after
    runs = tmp_path / "runs" / "real-model"
    folder = runs / "shelf-sparse" / "rl" / "grpo_paw-s0"
    trained = subprocess.run(
        [sys.executable, "-m", "training.cli", "train", "--model", str(tiny_model_dir),
         "--env_id", "PaW/Shelf-v0", "--n_groups", "2", "--group_size", "2",
         "--max_new_tokens", "6", "--max_episode_steps", "2", "--total_steps", "3",
         "--save_every", "1", "--keep_checkpoints", "5", "--device", "cpu", "--paw", "true",
         "--seed", "0",
         "--progress", "false", "--output_dir", str(folder)],
        cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True)
    assert trained.returncode == 0, trained.stderr[-3000:]
    logged = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    result = tmp_path / "results" / "real_model" / "shelf-sparse" / "rl-grpo_paw-s0.json"
    result.parent.mkdir(parents=True)
    result.write_text(json.dumps({**_run(0, True, [0, 0, 0], 0.1, 0.1),
                                  "curves": [{k: m.get(k) for k in real_model.CURVE_KEYS}
                                             for m in logged if "grad_norm" in m]}))
    with pytest.raises(SystemExit, match=r"checkpoint step-000005; the updates its checkpoints "
                                         r"allow: \[2, 3\]"):
        real_model.main(["shelf-sparse", "--runs", str(runs), "--term-gradients", "0:2", "0:6"])
    assert not (runs / "shelf-sparse" / "term-gradients").exists()  # refused before any run
    with pytest.raises(SystemExit):
        real_model.main(["shelf-sparse", "--term-gradients", "0:1"])
    assert "expected SEED:UPDATE" in capsys.readouterr().err

    assert real_model.main(["shelf-sparse", "--runs", str(runs), "--term-gradients", "0:2"]) == 0
    measured = json.loads((result.parent / "term-gradients-s0-u2.json").read_text())
    [record] = [m for m in logged if m.get("step") == 2 and "grad_norm" in m]
    assert measured["run_record"]["grad_norm"] == record["grad_norm"]
    m = measured["measured"]
    assert m["grad_norm"] == pytest.approx(record["grad_norm"], rel=1e-6)
    assert m["wm_loss"] == record["wm_loss"] and m["grad_norm_wm"] > 0
    rl, wm, cos = m["grad_norm_rl"], m["grad_norm_wm"], m["grad_cos_rl_wm"]
    assert (rl ** 2 + wm ** 2 + 2 * cos * rl * wm) ** 0.5 == pytest.approx(m["grad_norm"],
                                                                          rel=1e-4)
    assert measured["wm_loss"] == "cmae"  # the run's own

    # The same update with the paper's ablation loss: the policy term's part is the same.
    assert real_model.main(["shelf-sparse", "--runs", str(runs), "--term-gradients", "0:2",
                            "--wm-loss", "ce"]) == 0
    ce = json.loads((result.parent / "term-gradients-s0-u2-ce.json").read_text())
    assert ce["wm_loss"] == "ce"
    assert ce["measured"]["grad_norm_rl"] == pytest.approx(rl, rel=1e-6)
    assert ce["measured"]["grad_norm_wm"] != pytest.approx(wm, rel=1e-3)
    table = "\n".join(real_model.report_term_gradients(real_model.load_results("shelf-sparse")))
    assert f"| 0 | 2 | cmae | {100 * m['success']:.1f} |" in table
    assert f"| 0 | 2 | ce | {100 * m['success']:.1f} |" in table
    assert f"{record['grad_norm']:.4f} → {m['grad_norm']:.4f}" in table
    with pytest.raises(SystemExit):
        real_model.main(["shelf-sparse", "--wm-loss", "ce"])  # without --term-gradients
