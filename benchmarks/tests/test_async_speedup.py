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
    ``async_speedup`` lies within 15 % of the measured ratio (the sync run's summed step time
    over the async run's on the same updates, per round), both averaged over the rounds. Why
    15 %: over the 10 runs measured (benchmarks/README.md, "The run's own figure, made true"),
    own / measured was 0.88-1.04, and the CI of 2026-11-30 failed at 10 % with 0.88 and 0.92
    (the phases in a synchronous process ran 8-12 % slower than the estimate timed them in the
    async one). A figure that ignored the overlap (1.0 against the 1.23-1.43 measured on two
    cores) still fails. The line that says async is slower needs 10 updates
    (``Overlap.SETTLE``): its test is the ``Overlap`` one in tests/test_async_rollouts.py."""
    import benchmarks.async_rollouts as bench

    monkeypatch.setattr(bench, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(bench, "WORK", tmp_path / "runs")
    result = bench.throughput(rounds=2, updates=8, variants=["sync", "async1"])
    sync, runs = result["runs"]["sync"], result["runs"]["async1"]
    assert all(s["trained_tokens"] == pytest.approx(a["trained_tokens"], rel=1e-9)
               for s, a in zip(sync, runs))  # the same work
    measured = statistics.mean(s["step_time_sum"] / a["step_time_sum"] for s, a in zip(sync, runs))
    own = statistics.mean(a["async_speedup"] for a in runs)
    assert own == pytest.approx(measured, rel=0.15)


def test_a_real_model_recipe_runs_each_variant_from_its_sft_start(tmp_path):
    """``--throughput --config``: the recipe's own settings, the variant's on top, the given SFT
    adapter as the start, and the same-work changes."""
    from benchmarks.async_rollouts import VARIANTS, real_stage
    from training.config import load_config

    recipe = "configs/real/shelf_smollm2_grpo_paw.yaml"
    adapter = tmp_path / "sft"
    adapter.mkdir()
    own = load_config(recipe, {"init_checkpoint": str(adapter)})
    config = real_stage(recipe, str(adapter), "async1", tmp_path / "run", lr=0.0, total_steps=3)
    assert config.init_checkpoint == str(adapter) and config.output_dir == str(tmp_path / "run")
    assert (config.lr, config.total_steps) == (0.0, 3)
    assert all(getattr(config, key) == value for key, value in VARIANTS["async1"].items())
    assert config.async_rollouts and not own.async_rollouts
    for key in ("model", "env_id", "n_groups", "group_size", "temperature", "token_budget",
                "paw"):
        assert getattr(config, key) == getattr(own, key), key


@pytest.mark.parametrize("mode", ["--cores", "--learning", "--replay", "--report"])
def test_a_real_model_recipe_outside_the_throughput_mode_is_refused_by_name(mode, capsys):
    from benchmarks.async_rollouts import main

    with pytest.raises(SystemExit) as stop:
        main([mode, "--config", "configs/real/shelf_smollm2_grpo_paw.yaml"])
    assert stop.value.code == 2
    message = capsys.readouterr().err
    assert "--config configs/real/shelf_smollm2_grpo_paw.yaml goes with --throughput" in message
