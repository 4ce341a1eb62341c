"""Asynchronous rollouts (``async_rollouts``, ``training.rl.async_rollout``): the worker's
schedule against the synchronous trainer, the staleness bound, and a resume after a kill."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from safetensors.torch import load_file  # noqa: E402

from training.config import TrainConfig  # noqa: E402
from training.infra.checkpoint import latest_checkpoint  # noqa: E402
from training.infra.metrics_log import read_metrics  # noqa: E402
from training.trainer import PaWTrainer  # noqa: E402
from tests.common import TIMING_METRICS, replay_record_key  # noqa: E402
from wrappers import WMReplay  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
#: What differs between runs that train alike: timing, and the async runs' own bookkeeping.
UNTIMED = TIMING_METRICS | {"policy_version", "staleness"}

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _fields(model_dir, **overrides):
    values = dict(model=str(model_dir), env_id="Test/GuessNumber-v0", n_groups=2, group_size=2,
                  max_new_tokens=10, max_episode_steps=2, total_steps=3, lr=1e-2,
                  mini_batch_size=0, token_budget=1024, progress=False, device="cpu",
                  save_every=0, lora=False)
    values.update(overrides)
    return values


def _weights(trainer):
    return {name: p.detach().clone() for name, p in trainer.model.named_parameters()}


@pytest.mark.heavy
def test_staleness_zero_is_the_synchronous_trainer(tiny_model_dir, tmp_path):
    """max_staleness 0: every rollout sampled by the worker with the weights the update starts
    from, so metrics and weights equal the synchronous run's on the same seed."""
    sync = PaWTrainer(TrainConfig(**_fields(tiny_model_dir), output_dir=str(tmp_path / "sync")))
    expected = sync.train()
    worker = PaWTrainer(TrainConfig(**_fields(tiny_model_dir, async_rollouts=True,
                                              max_staleness=0),
                                    output_dir=str(tmp_path / "async")))
    got = worker.train()
    assert [row["policy_version"] for row in got] == [0, 1, 2]
    assert [row["staleness"] for row in got] == [0, 0, 0]
    for a, b in zip(expected, got):
        assert {k: v for k, v in a.items() if k not in UNTIMED} == {
            k: v for k, v in b.items() if k not in UNTIMED}
    weights = _weights(sync)
    assert all(torch.equal(weights[name], p) for name, p in _weights(worker).items())
    assert max(float((weights[name] - p.detach()).abs().max()) for name, p in
               PaWTrainer(TrainConfig(**_fields(tiny_model_dir),
                                      output_dir=str(tmp_path / "start"))).model.named_parameters()
               ) > 0, "the updates should move the weights"


@pytest.mark.heavy
def test_no_rollout_trained_on_is_older_than_max_staleness(tiny_model_dir, tmp_path):
    """max_staleness 2 over four updates: rollouts 1-3 sampled by the first weights, the fourth
    by those after one update (as metrics.jsonl logs them); the correction sees the gap."""
    out = tmp_path / "run"
    PaWTrainer(TrainConfig(**_fields(tiny_model_dir, total_steps=4, async_rollouts=True,
                                     max_staleness=2, rollout_correction="sampler_clip"),
                           output_dir=str(out))).train()
    rows = read_metrics(out / "metrics.jsonl")
    assert [row["policy_version"] for row in rows] == [0, 0, 0, 1]
    assert [row["staleness"] for row in rows] == [0, 1, 2, 2]
    assert all(row["step"] - 1 - row["policy_version"] <= 2 for row in rows)
    assert rows[0]["rollout_logprob_gap"] < 1e-4  # sampled by the weights it trains
    assert all(row["rollout_logprob_gap"] > 1e-3 for row in rows[1:])
    assert all(0 < row["rollout_weight_mean"] <= 2 and row["weight_sync_time"] >= 0
               for row in rows)


@pytest.mark.parametrize("k, first, ready, expected", [
    (1, 0, set(), [[0, 1], [2], [3], [4]]),
    (2, 0, set(), [[0, 1, 2], [3], [4], [5]]),
    (0, 0, set(), [[0], [1], [2], [3]]),           # the synchronous schedule
    (1, 3, {3}, [[4], [5], [6], [7]]),             # a resume: rollout 3 from its checkpoint
    (2, 3, {3, 4}, [[5], [6], [7], []]),
])
def test_the_schedule_asks_for_each_rollout_with_the_weights_that_sample_it(k, first, ready,
                                                                            expected):
    """What the worker is asked for at the start, then as each version is published (the
    rollouts the previous weights still sample first): every rollout s once, sampled by
    v(s) = max(first, s − k), with 8 updates in all."""
    from training.rl.async_rollout import Schedule

    schedule = Schedule(total=8, max_staleness=k)
    asked = [schedule.start(first, ready)]
    for version in range(first + 1, first + 4):
        asked.append(schedule.due(version - 1) + schedule.due(version))
    assert asked == expected
    assert all(schedule.version_for(s) == max(first, s - k) for step in asked for s in step)


@pytest.mark.parametrize("trainer_threads, cores, expected", [
    (1, 2, (1, 1)), (2, 2, (1, 1)), (16, 16, (8, 8)), (4, 16, (4, 4)), (3, 4, (2, 2)),
    (1, 1, (1, 1)),  # one core: oversubscribed whatever the split (Overlap reports it)
])
def test_the_trainer_and_the_worker_split_the_cores(trainer_threads, cores, expected):
    from training.rl.async_rollout import split_threads

    assert split_threads(trainer_threads, cores) == expected


def test_the_overlap_is_measured_against_the_phases_alone_and_slower_says_so():
    """Timed alone: a rollout of 100 generated tokens in 1 s, an update of 1000 trained tokens
    in 2 s. Updates of the same work that take 3.5 s each are slower than the 3 s the
    synchronous trainer would take: after Overlap.SETTLE of them, one line, once. A re-timing
    replaces the rates."""
    from training.rl.async_rollout import Overlap

    overlap = Overlap()
    assert overlap.add(100, 1000, 30.0) == {}  # nothing timed alone yet (a start, a resume)
    overlap.time_update(2.0, 1000)
    assert overlap.add(100, 1000, 30.0) == {}  # the rollout not yet
    overlap.time_rollout(1.0, 100)
    rows = [overlap.add(100, 1000, 3.5) for _ in range(Overlap.SETTLE - 1)]
    assert overlap.slower_line((1, 1), 2) is None  # not yet
    rows.append(overlap.add(100, 1000, 3.5))
    assert [row["sync_step_estimate"] for row in rows] == pytest.approx([3.0] * Overlap.SETTLE)
    assert rows[-1]["async_speedup"] == pytest.approx(3.0 / 3.5)
    assert overlap.slower_line((1, 1), 2) == (
        "async_rollouts is slower here than the synchronous trainer: 3.50 s per update against "
        "about 3.00 s for the same rollouts and updates one after the other (0.86x; each phase "
        f"timed alone every {Overlap.RETIME_EVERY} updates, lately rollout 1.00 s, update "
        "2.00 s): the two processes (1 + 1 threads on 2 cores) slow each other down more than "
        "they overlap, so async_rollouts: false trains faster on this machine "
        "(docs/training.md, \"When async pays\")")
    assert overlap.slower_line((1, 1), 2) is None  # said once
    overlap.time_update(4.0, 1000)  # re-timed: the machine got slower
    assert overlap.add(100, 1000, 3.5)["sync_step_estimate"] == pytest.approx(5.0)
    faster = Overlap()
    faster.time_rollout(1.0, 100)
    faster.time_update(2.0, 1000)
    for _ in range(Overlap.SETTLE):
        faster.add(100, 1000, 2.0)
    assert faster.slower_line((1, 1), 2) is None


@pytest.mark.parametrize("k, first, expected", [
    (1, 0, [1, 11, 21]), (2, 0, [1, 11, 21]), (0, 0, []),
    (1, 5, [11, 21]),  # a resume times the updates the uninterrupted run timed
])
def test_the_phases_are_timed_alone_every_n_updates_after_a_warm_up(k, first, expected):
    from training.rl.async_rollout import Overlap, Schedule

    assert Overlap.RETIME_EVERY == 10
    schedule = Schedule(total=25, max_staleness=k, first=first)
    assert [s for s in range(first, 25) if schedule.times_alone(s)] == expected


@pytest.mark.heavy
def test_an_async_run_logs_its_overlap_from_the_update_after_the_timed_one(tiny_model_dir,
                                                                          tmp_path):
    out = tmp_path / "run"
    PaWTrainer(TrainConfig(**_fields(tiny_model_dir, total_steps=3, async_rollouts=True,
                                     max_staleness=1), output_dir=str(out))).train()
    rows = read_metrics(out / "metrics.jsonl")
    assert "async_speedup" not in rows[0]
    assert all(row["async_speedup"] > 0 and row["sync_step_estimate"] > 0 for row in rows[1:])


def test_async_settings_that_cannot_work_are_refused_before_any_work(tmp_path):
    with pytest.raises(ValueError, match=r"rollout_backend='vllm' is invalid; expected hf with "
                                         r"async_rollouts"):
        TrainConfig(model="m", async_rollouts=True, rollout_backend="vllm")
    with pytest.raises(ValueError, match=r"max_staleness"):
        TrainConfig(model="m", max_staleness=-1)
    from training.preflight import PreflightError, preflight

    config = TrainConfig(model=str(tmp_path / "never-loaded"), env_id="PaW/Shelf-v0",
                         async_rollouts=True)
    with pytest.raises(PreflightError, match=r"async_rollouts runs in one process, not a launch "
                                             r"of 2"):
        preflight(config, world_size=2, model=False, outputs=False)


KILLED_RUN = textwrap.dedent("""
    import os, signal, sys
    import torch
    sys.path[:0] = [{repo!r}, {tests!r}]
    import conftest  # registers Test/GuessNumber-v0
    from training.config import TrainConfig
    from training.trainer import PaWTrainer

    if __name__ == "__main__":  # the worker process is spawned: it imports this file
        torch.set_num_threads(1)
        trainer = PaWTrainer(TrainConfig(**{fields!r}, output_dir=sys.argv[1]))
        update = trainer.update

        def update_then_die(trajectories):
            if trainer.step == 2:  # inside update 3, after checkpoint 2
                with open(sys.argv[2], "w") as pid:
                    pid.write(str(trainer.sampler.worker._process.pid))
                os.kill(os.getpid(), signal.SIGKILL)
            return update(trajectories)

        trainer.update = update_then_die
        trainer.train()
""")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


@pytest.mark.heavy  # kill-and-resume / base build: 15-25 s of the 8-minute fast suite
def test_a_killed_async_run_resumes_as_if_it_had_never_stopped(tiny_model_dir, tmp_path):
    """SIGKILL inside update 3 of 4 (max_staleness 1: rollout 3 was sampled ahead and stored with
    checkpoint 2). The worker notices and exits; --resume trains on the stored rollout and
    ends with the uninterrupted run's metrics, weights and replay."""
    fields = _fields(tiny_model_dir, total_steps=4, save_every=1, async_rollouts=True,
                     max_staleness=1, rollout_correction="sampler_clip")
    script = tmp_path / "run.py"
    script.write_text(KILLED_RUN.format(repo=str(REPO), tests=str(REPO / "tests"), fields=fields))
    PaWTrainer(TrainConfig(**fields, output_dir=str(tmp_path / "full"))).train()
    killed = subprocess.run([sys.executable, str(script), str(tmp_path / "killed"),
                             str(tmp_path / "worker.pid")], cwd=REPO, capture_output=True,
                            text=True, timeout=300)
    assert killed.returncode == -9, killed.stderr[-3000:]
    worker = int((tmp_path / "worker.pid").read_text())
    deadline = time.monotonic() + 20
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(worker), "the worker outlived its trainer"
    state = json.loads((tmp_path / "killed" / "checkpoints" / "step-000002" /
                        "state.json").read_text())
    assert state["rollouts_ahead"] == {"max_staleness": 1, "steps": [2]}  # v1; rollout 3 is v2

    PaWTrainer(TrainConfig(**fields, output_dir=str(tmp_path / "killed"))).train(resume=True)
    full, resumed = (read_metrics(tmp_path / run / "metrics.jsonl") for run in ("full", "killed"))
    assert [row["step"] for row in resumed] == [1, 2, 3, 4]
    assert [row["policy_version"] for row in resumed] == [0, 0, 1, 2]
    for a, b in zip(full, resumed):
        assert {k: v for k, v in a.items() if k not in UNTIMED} == {
            k: v for k, v in b.items() if k not in UNTIMED}
    weights = [load_file(str(next((latest_checkpoint(tmp_path / run) / "model").glob(
        "*.safetensors")))) for run in ("full", "killed")]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    replays = [WMReplay.load(tmp_path / run / "replay").records for run in ("full", "killed")]
    assert sorted(map(replay_record_key, replays[0])) == sorted(map(replay_record_key,
                                                                    replays[1]))
    assert len(set(map(replay_record_key, replays[1]))) == len(replays[1])
