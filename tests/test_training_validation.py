"""Validation during training, readable run logs, resume and interrupt messages, and
``paw-gym eval`` of a checkpoint with the settings it was trained with."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from training.commands.eval import EvalArguments, evaluate_command  # noqa: E402
from training.config import TrainConfig  # noqa: E402
from training.infra.checkpoint import latest_checkpoint  # noqa: E402
from training.infra.metrics_log import read_metrics  # noqa: E402
from training.trainer import PaWTrainer  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _config(model_dir, out, **overrides):
    values = dict(model=str(model_dir), env_id="PaW/Shelf-v0", n_groups=2, group_size=2,
                  max_new_tokens=12, max_episode_steps=3, history_length=0, total_steps=2,
                  lr=1e-3, mini_batch_size=4, token_budget=2048, output_dir=str(out),
                  progress=False, device="cpu", save_every=1)
    values.update(overrides)
    return TrainConfig(**values)


def test_validation_metrics_are_logged_before_and_during_training(tiny_model_dir, tmp_path):
    config = _config(tiny_model_dir, tmp_path / "run", val_every=2, val_before_train=True,
                     val_limit=6)
    PaWTrainer(config).train()
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in records] == [0, 1, 2]
    assert "reward" not in records[0] and "val_success" not in records[1]
    for record in (records[0], records[2]):
        assert record["val_episodes"] == 6
        assert 0.0 <= record["val_success"] <= 1.0
        assert 0.0 <= record["val_invalid_frac"] <= 1.0
        assert {k for k in record if k.startswith("val_success/")} == {
            "val_success/3 items", "val_success/4 items", "val_success/5 items"}


def test_validation_reads_the_policy_as_a_world_model_on_held_out_transitions(
        tiny_model_dir, tmp_path):
    from training.warmstart.pretrain import next_observation_accuracy
    from training.warmstart.sft import record_expert_demos

    held_out = record_expert_demos("PaW/Shelf-v0", 3, tmp_path / "held-out", seed=10_000,
                                   epsilon=0.5, max_steps=3, split="test", history_length=0)
    config = _config(tiny_model_dir, tmp_path / "run", val_every=2, val_limit=2,
                     val_wm_replay=str(held_out), wm_context="end_of_turn", total_steps=2)
    trainer = PaWTrainer(config)
    trainer.train()
    last = read_metrics(tmp_path / "run" / "metrics.jsonl")[-1]
    expected = next_observation_accuracy(trainer.policy, held_out, config.max_seq_len,
                                         "end_of_turn")
    assert last["val_wm_exact"] == pytest.approx(expected["exact"] / 100)
    assert last["val_wm_token"] == pytest.approx(expected["token"] / 100)
    with pytest.raises(ValueError, match="val_wm_replay"):
        _config(tiny_model_dir, tmp_path / "other", val_wm_replay=str(tmp_path / "missing"))


def test_eval_of_a_checkpoint_uses_its_training_settings(tiny_model_dir, tmp_path, capsys):
    PaWTrainer(_config(tiny_model_dir, tmp_path / "run", total_steps=1)).train()
    checkpoint = latest_checkpoint(tmp_path / "run")
    arguments = EvalArguments(checkpoint=str(checkpoint), limit=3, output_dir=str(tmp_path / "eval"),
                              device="cpu", save_trajectories=True, show=1)
    assert evaluate_command(arguments) == 0
    out = capsys.readouterr().out
    assert "── episode 0" in out and "model wrote:" in out
    table = json.loads((tmp_path / "eval" / "policy_Shelf-v0_test.json").read_text())
    meta = table["meta"]
    assert meta["env_id"] == "PaW/Shelf-v0" and meta["split"] == "test"
    assert meta["checkpoint_step"] == 1 and meta["episodes"] == 3
    assert meta["settings"]["max_steps"] == 3 and meta["max_new_tokens"] == 12
    assert meta["settings"]["history_length"] == 0
    episodes = [json.loads(line) for line in
                (tmp_path / "eval" / "policy_Shelf-v0_test.trajectories.jsonl").open()]
    assert len(episodes) == 3 and all(len(e["steps"]) <= 3 for e in episodes)
    # history_length 0: the prompt of a later step shows no earlier step
    later = [s["prompt"] for e in episodes for s in e["steps"][1:]]
    assert later and all("most recent 0 observations" in p and "Action 1:" not in p
                         for p in later)
    # flags win over the checkpoint's settings; the same tables again are refused
    from training.commands.common import UserError

    with pytest.raises(UserError, match="already exists"):
        evaluate_command(arguments)
    arguments.overwrite, arguments.max_steps, arguments.show = True, 1, 0
    assert evaluate_command(arguments) == 0
    meta = json.loads((tmp_path / "eval" / "policy_Shelf-v0_test.json").read_text())["meta"]
    assert meta["settings"]["max_steps"] == 1


def test_resume_says_where_it_continues_and_warns_about_changed_settings(tiny_model_dir,
                                                                         tmp_path, capsys):
    PaWTrainer(_config(tiny_model_dir, tmp_path / "run", total_steps=1)).train()
    capsys.readouterr()
    with pytest.warns(RuntimeWarning, match=r"lr: 0.001 -> 0.0005.*total_steps: 1 -> 2"):
        PaWTrainer(_config(tiny_model_dir, tmp_path / "run", lr=5e-4)).train(resume=True)
    assert "from step-000001: step 1 of 2" in capsys.readouterr().err
    kept = tmp_path / "run" / "config.before-step-000001.yaml"
    assert "lr: 0.001" in kept.read_text()
    assert "lr: 0.0005" in (tmp_path / "run" / "config.yaml").read_text()


INTERRUPTED = textwrap.dedent("""
    import os, signal, sys
    signal.signal(signal.SIGINT, signal.default_int_handler)  # a background job ignores it
    sys.path[:0] = [{repo!r}, {tests!r}]
    import torch; torch.set_num_threads(1)
    import envs  # noqa: F401  (registers Test/*)
    from training.config import TrainConfig
    from training.trainer import PaWTrainer

    trainer = PaWTrainer(TrainConfig(**{config!r}))
    step = trainer.train_step
    def interrupting_step():
        if trainer.step == 2:
            os.kill(os.getpid(), signal.SIGINT)
        return step()
    trainer.train_step = interrupting_step
    trainer.train()
""")


@pytest.mark.heavy
def test_an_interrupted_run_names_its_checkpoint_and_the_resume_command(tiny_model_dir,
                                                                        tmp_path):
    config = dict(model=str(tiny_model_dir), env_id="PaW/Shelf-v0", n_groups=2, group_size=2,
                  max_new_tokens=12, max_episode_steps=3, total_steps=5, lr=1e-3,
                  mini_batch_size=4, token_budget=2048, output_dir=str(tmp_path / "run"),
                  device="cpu", save_every=1)
    script = tmp_path / "run.py"
    script.write_text(INTERRUPTED.format(repo=str(REPO), tests=str(REPO / "tests"),
                                         config=config))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, cwd=REPO)
    assert done.returncode != 0 and "KeyboardInterrupt" in done.stderr
    assert "interrupted at step 2; the last checkpoint is" in done.stderr
    assert f"paw-gym train --config {tmp_path / 'run' / 'config.yaml'} --resume" in done.stderr
    assert (tmp_path / "run" / "curves.png").is_file()
    # a log file (not a terminal): one metrics line per update, no carriage returns
    log = done.stdout + done.stderr
    assert "\r" not in log and "\x1b[" not in log
    assert "step 1/5 | reward" in log and "step 2/5 | reward" in log
    assert [r["step"] for r in read_metrics(tmp_path / "run" / "metrics.jsonl")] == [1, 2]


@pytest.mark.heavy
def test_every_run_writes_each_rollout_transition_to_its_replay_once(tiny_model_dir, tmp_path):
    from wrappers import WMReplay

    config = _config(tiny_model_dir, tmp_path / "run", total_steps=3, save_every=2,
                     history_length=2)
    history = PaWTrainer(config).train()
    records = WMReplay.load(tmp_path / "run" / "replay", strict=True).records
    for metrics in history:
        mine = [r for r in records if r["update"] == metrics["step"]]
        with_response = [r for r in mine if r["response_ids"]]
        assert len(with_response) == metrics["transitions"]
        assert sum(r["wm_selected"] for r in mine) == metrics["wm_selected"]
        assert len({r["episode_id"] for r in mine}) == 4  # 2 groups x 2 rollouts
        assert {r["group"] for r in mine} == {0, 1} and all(r["source"] == "train" for r in mine)
    first = records[0]
    assert first["prompt_ids"] and isinstance(first["action_entropy"], float)
    assert first["lambda_g"] >= 0.0  # Eq. 10, unclamped: above 1 when the mean return is < 0
    # Resumed from step 2, update 3 is redone: its transitions are recorded once, as before.
    before = sorted(json.dumps(r, sort_keys=True) for r in records)
    PaWTrainer(config).train(resume=tmp_path / "run" / "checkpoints" / "step-000002")
    after = WMReplay.load(tmp_path / "run" / "replay", strict=True).records
    assert sorted(json.dumps(r, sort_keys=True) for r in after) == before
    # record_replay: false writes none
    PaWTrainer(_config(tiny_model_dir, tmp_path / "off", total_steps=1,
                       record_replay=False)).train()
    assert not (tmp_path / "off" / "replay").exists()


@pytest.mark.heavy
def test_validation_does_not_change_what_training_samples(tiny_model_dir, tmp_path):
    from wrappers import WMReplay

    actions = []
    for val_every in (0, 1):
        out = tmp_path / f"val{val_every}"
        PaWTrainer(_config(tiny_model_dir, out, val_every=val_every, val_limit=3,
                           save_every=0)).train()
        actions.append([r["a"] for r in sorted(WMReplay.load(out / "replay").records,
                                               key=lambda r: (r["episode_id"], r["step"]))])
    assert actions[0] == actions[1] and len(set(actions[0])) > 1
