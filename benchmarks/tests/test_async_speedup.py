"""An async run's own speed-up figure (``Overlap``) against a synchronous run of the same work,
measured in the same process tree: ``benchmarks.async_rollouts --throughput``'s own config."""

from __future__ import annotations

import statistics

import pytest

pytest.importorskip("torch")


@pytest.mark.heavy
@pytest.mark.usefixtures("one_torch_thread")
def test_an_async_runs_own_speedup_agrees_with_a_sync_run_of_the_same_work(tmp_path, monkeypatch):
    """The main job's RL stage at learning rate 0 (both runs sample and train the same tokens),
    one torch thread per process, 8 updates each of ``sync`` and ``async1`` in 2 rounds (sync,
    async1, async1, sync, so that a drift of the machine's speed cancels): the async runs' own
    ``async_speedup`` lies within 10 % of the measured ratio (the sync run's summed step time
    over the async run's on the same updates, per round), both averaged over the rounds. The
    line that says async is slower needs 10 updates (``Overlap.SETTLE``): its test is the
    ``Overlap`` one in tests/test_async_rollouts.py."""
    import benchmarks.async_rollouts as bench

    monkeypatch.setattr(bench, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(bench, "WORK", tmp_path / "runs")
    result = bench.throughput(rounds=2, updates=8, variants=["sync", "async1"])
    sync, runs = result["runs"]["sync"], result["runs"]["async1"]
    assert all(s["trained_tokens"] == pytest.approx(a["trained_tokens"], rel=1e-9)
               for s, a in zip(sync, runs))  # the same work
    measured = statistics.mean(s["step_time_sum"] / a["step_time_sum"] for s, a in zip(sync, runs))
    own = statistics.mean(a["async_speedup"] for a in runs)
    assert own == pytest.approx(measured, rel=0.10)
