"""Metrics reach TensorBoard and Weights & Biases (offline) from a real trainer run."""

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
wandb = pytest.importorskip("wandb")

from training.config import TrainConfig  # noqa: E402
from training.infra.metrics_log import MetricsLogger, read_metrics  # noqa: E402
from training.trainer import PaWTrainer  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def wandb_offline(monkeypatch, tmp_path):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb-cache"))


@pytest.mark.heavy
def test_trainer_metrics_reach_tensorboard_and_wandb(tiny_model_dir, tmp_path, wandb_offline):
    out = tmp_path / "run"
    config = TrainConfig(model=str(tiny_model_dir), env_id="Test/GuessNumber-v0", n_groups=2,
                         group_size=2, max_new_tokens=8, max_episode_steps=2, total_steps=2,
                         lr=1e-3, token_budget=1024, output_dir=str(out), progress=False,
                         device="cpu", save_every=0, tensorboard=True, wandb=True,
                         wandb_project="paw-gym-test")
    PaWTrainer(config).train()
    logged = read_metrics(out / "metrics.jsonl")
    board = event_accumulator.EventAccumulator(str(out / "tensorboard"))
    board.Reload()
    for key in ("reward", "wm_loss", "lambda_mean", "clip_frac"):
        events = board.Scalars(key)
        assert [e.step for e in events] == [1, 2]
        assert [e.value for e in events] == pytest.approx([r[key] for r in logged], rel=1e-6)
    runs = list((out / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and next(runs[0].glob("*.wandb")).stat().st_size > 0


@pytest.mark.heavy
def test_wandb_run_holds_every_numeric_metric_of_the_last_step(tmp_path, wandb_offline):
    logger = MetricsLogger(tmp_path, wandb=True, wandb_project="paw-gym-test",
                           config={"algo": "grpo"})
    try:
        logger.log(1, {"reward": 0.5, "wm_loss": 0.9, "env_id": "not numeric"})
        logger.log(2, {"reward": 1.5, "wm_loss": 0.7})
        run = logger._wandb
        assert run.offline and dict(run.config) == {"algo": "grpo"}
        summary = dict(run.summary)
        assert summary["_step"] == 2 and summary["reward"] == 1.5 and summary["wm_loss"] == 0.7
        assert "env_id" not in summary
    finally:
        logger.close()
    assert [r["step"] for r in read_metrics(Path(tmp_path) / "metrics.jsonl")] == [1, 2]


def test_damaged_rows_are_skipped_and_a_resume_rewrites_the_history_aside(tmp_path):
    path = Path(tmp_path) / "metrics.jsonl"
    path.write_text('{"step": 1, "reward": 1}\n[1, 2]\n7\n{"reward": 3}\n{"step": "2"}\n'
                    '{"step": true}\n{"step": 2, "reward": 2}\n{"step": 3, "rew')
    assert [r["step"] for r in read_metrics(path)] == [1, 2]
    logger = MetricsLogger(tmp_path, start_step=1)  # resume after step 1
    logger.log(2, {"reward": 5.0})
    logger.close()
    assert [(r["step"], r["reward"]) for r in read_metrics(path)] == [(1, 1), (2, 5.0)]
    assert sorted(p.name for p in Path(tmp_path).iterdir()) == ["metrics.jsonl"]  # no temp left
