"""The replay harness of ``benchmarks.async_rollouts``: ``StaleCollector`` is the asynchronous
schedule in one process."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tests.common import TIMING_METRICS  # noqa: E402


@pytest.mark.heavy
@pytest.mark.usefixtures("one_torch_thread")
def test_the_stale_collector_equals_an_asynchronous_run(tiny_model_dir, tmp_path):
    """max_staleness 1 over four updates: the synchronous trainer sampling with the weights of
    one update ago gives the async run's metrics and weights exactly."""
    from benchmarks.async_rollouts import StaleCollector
    from training.config import TrainConfig
    from training.trainer import PaWTrainer

    fields = dict(model=str(tiny_model_dir), env_id="Test/GuessNumber-v0", n_groups=2,
                  group_size=2, max_new_tokens=10, max_episode_steps=2, total_steps=4, lr=1e-2,
                  mini_batch_size=0, token_budget=1024, progress=False, device="cpu",
                  save_every=0, lora=False, record_replay=False)
    worker = PaWTrainer(TrainConfig(**fields, async_rollouts=True, max_staleness=1,
                                    output_dir=str(tmp_path / "async")))
    expected = worker.train()
    one = PaWTrainer(TrainConfig(**fields, output_dir=str(tmp_path / "one")))
    one.sampler.collect = StaleCollector(one, staleness=1)
    got = one.train()
    skip = TIMING_METRICS | {"policy_version", "staleness"}
    assert [row["staleness"] for row in expected] == [0, 1, 1, 1]
    assert [{k: v for k, v in row.items() if k not in skip} for row in got] == [
        {k: v for k, v in row.items() if k not in skip} for row in expected]
    weights = dict(worker.model.named_parameters())
    assert all(torch.equal(p, weights[name]) for name, p in one.model.named_parameters())
