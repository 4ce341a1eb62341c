"""A run that collapses says so (``training.infra.collapse``, ``on_collapse``)."""

from __future__ import annotations

import json

import pytest

from training.infra.collapse import CollapseWatch


def _run(watch: CollapseWatch, successes, episodes=64, validations=None, patience=1
         ) -> list[int]:
    """The updates (1, 2, ...) where ``watch`` finds the run collapsed."""
    validations = validations or [None] * len(successes)
    found = []
    for step, (success, validation) in enumerate(zip(successes, validations), start=1):
        metrics = {"success": success}
        if validation is not None:
            metrics["val_success"] = validation
        if watch.observe(step, metrics, episodes, patience, version=step - 1):
            found.append(step)
    return found


def test_rollouts_without_a_win_after_success_are_a_collapse_said_once():
    watch = CollapseWatch()
    assert _run(watch, [0.5, 0.9, 0.0, 0.0, 0.2, 0.0]) == [3, 6]  # once, again after a recovery
    assert (watch.best_rate, watch.best_rate_at, watch.failing) == (0.9, 2, [6])


def test_patience_waits_for_that_many_failed_updates_in_a_row():
    """The FrozenLake runs that recovered after one to three failed rollouts are not called
    collapsed with patience 4 (benchmarks/README.md)."""
    curve = [0.2, 0.16, 0.3, 0.0, 0.0, 0.0, 0.0, 0.2, 0.44, 0.0, 0.0, 0.0]
    assert _run(CollapseWatch(), curve, patience=3) == [6, 12]
    assert _run(CollapseWatch(), curve, patience=4) == [7]
    assert _run(CollapseWatch(), curve, patience=5) == []


def test_a_rare_win_and_then_none_is_no_collapse():
    """Best 5 % of 64 episodes: 0 of 64 happens 3.7 % of the time, more often than 1e-3; three
    such rollouts in a row 5e-5 of the time."""
    assert _run(CollapseWatch(), [0.0, 0.05, 0.0, 0.0]) == []
    assert _run(CollapseWatch(), [0.0, 0.05, 0.0, 0.0, 0.0], patience=3) == [5]
    assert _run(CollapseWatch(), [0.0, 0.2, 0.0]) == [3]  # 0.8 ** 64 = 6e-7
    assert _run(CollapseWatch(), [0.5, 0.0], episodes=8) == []  # 0.5 ** 8 = 4e-3


def test_a_validation_that_still_wins_is_no_collapse():
    assert _run(CollapseWatch(), [0.9, 0.0, 0.0], validations=[None, 0.3, 0.0]) == [3]


def test_a_checkpoint_is_scored_by_its_own_weights():
    """Checkpoint 1 holds the weights after update 1: update 2's rollout (version 1) scores
    it, not update 1's. A validation at the checkpoint's update scores it at once; a
    checkpoint that wins nothing is never the best; ties go to the later one."""
    watch = CollapseWatch()
    watch.observe(1, {"success": 0.9}, 64, version=0)
    watch.note_checkpoint(1, "run/checkpoints/step-000001", {"success": 0.9})
    assert watch.best_checkpoint is None and watch.protected() == ["run/checkpoints/step-000001"]
    watch.observe(2, {"success": 0.6}, 64, version=1)
    assert (watch.best_checkpoint, watch.best_score) == ("run/checkpoints/step-000001", 0.6)
    watch.note_checkpoint(2, "run/checkpoints/step-000002", {"success": 0.1, "val_success": 0.6})
    assert watch.best_checkpoint == "run/checkpoints/step-000002"
    watch.note_checkpoint(3, "run/checkpoints/step-000003", {"success": 0.7})
    watch.observe(4, {"success": 0.0}, 64, version=3)
    assert watch.best_checkpoint == "run/checkpoints/step-000002" and watch.waiting == []
    assert CollapseWatch.from_state(json.loads(json.dumps(watch.state()))) == watch


@pytest.mark.parametrize("action, then", [
    ("warn", "training goes on (on_collapse: stop or rollback acts on it)"),
    ("stop", "the run stops (on_collapse: stop)"),
    ("rollback", "training goes on from it (on_collapse: rollback)")])
def test_the_line_names_the_updates_the_best_and_what_happens(action, then):
    watch = CollapseWatch()
    _run(watch, [0.97, 0.5])
    watch.note_checkpoint(2, "runs/x/checkpoints/step-000002", {"success": 0.5})
    watch.observe(3, {"success": 0.6}, 64, 3, version=2)
    assert not watch.observe(4, {"success": 0.0}, 64, 3, version=3)
    assert not watch.observe(5, {"success": 0.0, "val_success": 0.0}, 64, 3, version=4)
    assert watch.observe(6, {"success": 0.0}, 64, 3, version=5)
    assert watch.line(64, action, save_every=1) == (
        "collapsed at update 6: every episode of the rollouts of updates 4–6 failed (64 each), "
        "and of any validation among them, after 97 % success at update 1; the best checkpoint "
        f"is runs/x/checkpoints/step-000002 (60 % success); {then}")


def test_without_a_winning_checkpoint_the_line_says_so():
    watch = CollapseWatch()
    _run(watch, [0.97, 0.0])
    assert watch.line(64, "rollback", save_every=10) == (
        "collapsed at update 2: every episode of the rollouts of update 2 failed (64 each), and "
        "of any validation among them, after 97 % success at update 1; no saved checkpoint has "
        "won an episode yet (save_every=10); nothing to roll back to, so training goes on")


torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def guesser(tiny_model_dir, tmp_path_factory):
    """The tiny model taught by SFT to play GuessNumber with one number (any well-formed
    ``guess 1`` wins): its rollouts win most of the time."""
    from training.warmstart.sft import SFTConfig, record_expert_demos, run_sft

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    folder = tmp_path_factory.mktemp("guesser")
    replay = record_expert_demos("Test/GuessNumber-v0", 16, folder / "demos", seed=0, high=1)
    model, _ = run_sft(SFTConfig(model=str(tiny_model_dir), replay=str(replay),
                                 output_dir=str(folder / "sft"), epochs=30, lr=3e-3,
                                 device="cpu", progress=False, token_budget=4096))
    torch.set_num_threads(previous)
    return model


def _fields(model, out, **changes):
    fields = dict(model=str(model), env_id="Test/GuessNumber-v0", env_kwargs={"high": 1},
                  n_groups=4, group_size=4, max_new_tokens=16, max_episode_steps=2,
                  total_steps=2, lr=0.0, lora=False, mini_batch_size=0, token_budget=4096,
                  output_dir=str(out), progress=False, device="cpu", save_every=1,
                  keep_checkpoints=1, record_replay=False, log_every=0)
    return {**fields, **changes}


@pytest.mark.heavy
@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.filterwarnings("ignore:--resume with settings")
@pytest.mark.parametrize("action", ["stop", "rollback"])
def test_a_run_that_collapses_says_so_and_acts(guesser, tmp_path, capfd, action):
    """Two updates at lr 0 keep the taught weights (checkpoints 1 and 2 win); resumed at
    lr 1, update 3 breaks them, so the rollouts of updates 4 and 5 fail in every episode
    (collapse_patience 2): the run prints the line naming the best checkpoint (kept from
    pruning), its metrics show it, and on_collapse stops the run or rolls back to that
    checkpoint, whose next rollout wins again."""
    from training.config import TrainConfig
    from training.infra.metrics_log import read_metrics
    from training.trainer import PaWTrainer

    out = tmp_path / "run"
    PaWTrainer(TrainConfig(**_fields(guesser, out))).train()
    trainer = PaWTrainer(TrainConfig(**_fields(guesser, out, lr=1.0, total_steps=8,
                                               on_collapse=action, collapse_patience=2)))
    trainer.train(resume=True)
    rows = read_metrics(out / "metrics.jsonl")
    assert rows[0]["success"] > 0.5 and rows[1]["success"] > 0.5 and rows[2]["success"] > 0.5
    assert [row["success"] for row in rows[3:5]] == [0, 0]
    assert [row["zero_advantage_groups"] for row in rows[3:5]] == [1.0, 1.0]
    lines = [text for text in capfd.readouterr().err.splitlines() if "collapsed at" in text]
    checkpoints = out / "checkpoints"
    # Checkpoint 2 holds the weights before update 3 broke them; update 3's rollout (sampled
    # by them) won every episode.
    assert lines[0] == (
        f"collapsed at update 5: every episode of the rollouts of updates 4–5 failed (16 each), "
        f"and of any validation among them, after 100 % success at update 1; the best "
        f"checkpoint is {checkpoints / 'step-000002'} (100 % success); "
        + ("the run stops (on_collapse: stop)" if action == "stop" else
           "training goes on from it (on_collapse: rollback)"))
    if action == "stop":
        assert [row["step"] for row in rows] == [1, 2, 3, 4, 5] and len(lines) == 1
        assert (checkpoints / "step-000002" / "state.json").is_file()  # kept from pruning
    else:
        # Update 6's rollout is sampled by checkpoint 2's weights (as checkpoint 5 now holds
        # them, scored by that rollout below checkpoint 2's 100 %); update 6 breaks them
        # again, and the run rolls back to checkpoint 2 once more.
        assert [row["step"] for row in rows] == [1, 2, 3, 4, 5, 6, 7, 8]
        assert 0.5 < rows[5]["success"] < 1 and [row["success"] for row in rows[6:]] == [0, 0]
        assert lines[1].startswith("collapsed at update 8: every episode of the rollouts of "
                                   "updates 7–8 failed") and \
            f"the best checkpoint is {checkpoints / 'step-000002'}" in lines[1]
        assert (checkpoints / "step-000002" / "state.json").is_file()
