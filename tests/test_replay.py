"""RecordTransitions and WMReplay: contents, filters, de-duplication, formats, crash safety."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import gymnasium as gym
import pytest

from tests.common import GUESS_ID
from tests.envs import GuessNumberEnv
from wrappers import HistoryPrompt, ParseAction, PolicyAction, RecordTransitions, WMReplay

REPO = Path(__file__).resolve().parents[1]


def recorded_env(replay, **kwargs):
    return RecordTransitions(ParseAction(HistoryPrompt(GuessNumberEnv())), replay, **kwargs)


def play(env, target, guesses, seed=0):
    env.reset(seed=seed, options={"target": target})
    for guess in guesses:
        *_, terminated, truncated, _ = env.step(f"<action>guess {guess}</action>")
        if terminated or truncated:
            break


def test_records_hold_prompt_raw_action_and_raw_next_observation():
    replay = WMReplay()
    env = recorded_env(replay)
    prompt, _ = env.reset(seed=0, options={"target": 3})
    env.step(PolicyAction("<think>t</think><action>guess 1</action>", action_entropy=1.25, response_ids=[4, 2]))
    env.step("<action>guess 3</action>")
    first, second = replay.records
    assert first["h"] == prompt
    assert first["a"] == "<think>t</think><action>guess 1</action>"
    assert first["o_next"] == "Go higher."  # the env's raw observation, not the next prompt
    assert (first["action_entropy"], first["response_ids"]) == (1.25, [4, 2])
    assert first["step"] == 0 and second["step"] == 1
    assert second["won"] and second["terminated"] and second["reward"] == 10.0
    assert first["episode_id"] == second["episode_id"]
    assert first["task_id"] == "guess-8-3" and first["task_type"] == "guess"
    assert first["schema_version"] == 1 and first["parsed_action"] == "guess 1"


def test_filters_and_export(tmp_path):
    replay = WMReplay(tmp_path / "replay")
    env = recorded_env(replay)
    play(env, 3, [1, 3])          # won
    play(env, 5, [1, 2, 3, 4])    # not won yet, then cut by the next reset
    play(env, 2, [2])             # won
    env.close()
    loaded = WMReplay.load(tmp_path / "replay")
    assert len(loaded) == len(replay) == 7 and not loaded.errors
    assert len(loaded.filter(success=True)) == 3
    assert len(loaded.filter(success=False)) == 4
    assert {r["task_id"] for r in loaded.filter(task_id="guess-8-5")} == {"guess-8-5"}
    assert len(loaded.filter(task_type="guess")) == 7 and len(loaded.filter(task_type="other")) == 0
    rows = loaded.to_list()
    assert rows == replay.to_list() and isinstance(rows[0], dict)
    dataset = loaded.to_dataset()
    assert dataset.num_rows == 7 and dataset[0]["h"] == rows[0]["h"]


def test_deduplication_at_write_time_and_at_load_time(tmp_path):
    replay = WMReplay(tmp_path / "dedup")
    env = recorded_env(replay, deduplicate=True)
    for _ in range(3):
        play(env, 3, [1, 3])      # three identical trajectories
    play(env, 3, [2, 3])          # a different one
    env.close()
    assert len(WMReplay.load(tmp_path / "dedup").episodes()) == 2
    plain = WMReplay()
    env = recorded_env(plain)
    for _ in range(3):
        play(env, 3, [1, 3])
    assert len(plain.episodes()) == 3 and len(plain.deduplicate().episodes()) == 1


def test_parquet_parts_and_pending_segment(tmp_path):
    pytest.importorskip("pyarrow")
    replay = WMReplay(tmp_path / "pq", format="parquet", parquet_rows=3)
    env = recorded_env(replay)
    play(env, 8, [1, 2, 3, 4, 5, 6, 7, 8])  # no TimeLimit here: 8 steps
    written = sorted(p.name for p in (tmp_path / "pq").iterdir())
    assert sum(name.endswith(".parquet") for name in written) == 2  # 8 records -> 2 full parts
    assert sum(name.endswith(".pending.jsonl") for name in written) == 1  # 2 records pending
    assert [r["step"] for r in sorted(WMReplay.load(tmp_path / "pq"), key=lambda r: r["step"])] == list(range(8))
    env.close()
    assert all(name.endswith(".parquet") for name in os.listdir(tmp_path / "pq"))
    assert len(WMReplay.load(tmp_path / "pq")) == 8


def test_orphan_parquet_temporaries_of_dead_writers_are_removed_on_load(tmp_path):
    import socket

    folder = tmp_path / "pq"
    folder.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])  # a writer that has exited
    dead.wait()
    host = socket.gethostname()
    names = {"dead": f"transitions-{host}-{dead.pid}-0123abcd-part00000.parquet.tmp",
             "alive": f"transitions-{host}-{os.getpid()}-0123abcd-part00000.parquet.tmp",
             "elsewhere": f"transitions-other-host-{dead.pid}-0123abcd-part00000.parquet.tmp"}
    for name in names.values():
        (folder / name).write_bytes(b"half a parquet file")
    assert len(WMReplay.load(folder)) == 0
    assert sorted(p.name for p in folder.iterdir()) == sorted([names["alive"], names["elsewhere"]])


def test_malformed_records_are_reported_not_dropped(tmp_path):
    replay = WMReplay(tmp_path / "bad")
    play(recorded_env(replay), 3, [1, 3])
    shard = next((tmp_path / "bad").glob("*.jsonl"))
    with open(shard, "a", encoding="utf-8") as handle:
        handle.write("{not json}\n")
        handle.write(json.dumps({"h": "x"}) + "\n")
        handle.write('{"h": "cut off mid-wri')
    with pytest.warns(UserWarning, match="3 malformed record"):
        loaded = WMReplay.load(tmp_path / "bad")
    assert len(loaded) == 2
    reasons = [e.reason for e in loaded.errors]
    assert reasons[0].startswith("not valid JSON") and reasons[1].startswith("missing field")
    assert reasons[2] == "truncated record (incomplete last line)"
    with pytest.raises(ValueError, match="malformed"):
        WMReplay.load(tmp_path / "bad", strict=True)
    with pytest.raises(ValueError, match="missing required field"):
        WMReplay().append({"h": "x"})


def test_a_short_write_raises_and_the_next_record_starts_on_a_fresh_line(tmp_path, monkeypatch):
    import errno

    import wrappers.replay as replay_module

    replay = WMReplay(tmp_path / "full")
    env = recorded_env(replay)
    env.reset(seed=0, options={"target": 5})
    env.step("<action>guess 1</action>")  # one complete record on disk
    real_write = os.write

    def disk_fills_up(fd, data):  # half the record reaches the disk, then ENOSPC
        if not getattr(disk_fills_up, "done", False):
            disk_fills_up.done = True
            return real_write(fd, data[:len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(replay_module.os, "write", disk_fills_up)
    with pytest.raises(OSError, match=r"wrote \d+ of \d+ bytes of a record .*not stored"):
        env.step("<action>guess 2</action>")  # the step must not look successful
    monkeypatch.setattr(replay_module.os, "write", real_write)
    assert len(replay) == 1  # memory holds only what reached the disk
    env.step("<action>guess 3</action>")
    with pytest.warns(UserWarning, match="1 malformed record"):
        loaded = WMReplay.load(tmp_path / "full")
    assert [r["a"] for r in loaded.to_list()] == ["<action>guess 1</action>",
                                                  "<action>guess 3</action>"]
    assert [r["a"] for r in replay.to_list()] == ["<action>guess 1</action>",
                                                  "<action>guess 3</action>"]


def test_a_lone_surrogate_in_model_output_is_stored_exactly(tmp_path):
    replay = WMReplay(tmp_path / "odd")
    env = recorded_env(replay)
    env.reset(seed=0, options={"target": 4})
    action = "<think>\ud800 odd bytes</think><action>guess 4</action>"
    env.step(action)
    loaded = WMReplay.load(tmp_path / "odd", strict=True)
    assert loaded.to_list()[0]["a"] == action == replay.to_list()[0]["a"]


def test_wrongly_typed_fields_are_malformed_not_misread(tmp_path):
    replay = WMReplay(tmp_path / "typed")
    play(recorded_env(replay), 2, [2])
    good = replay.to_list()[0]
    shard = next((tmp_path / "typed").glob("*.jsonl"))
    with open(shard, "a", encoding="utf-8") as handle:
        for bad in ({"won": "no"}, {"reward": "3"}, {"terminated": 1}, {"h": None},
                    {"reward": float("nan")}, {"episode_id": [1]}, {"step": "0"}):
            handle.write(json.dumps({**good, **bad}) + "\n")
    with pytest.warns(UserWarning, match="7 malformed record"):
        loaded = WMReplay.load(tmp_path / "typed")
    assert len(loaded) == 1 and len(loaded.filter(success=True)) == 1
    assert [e.reason for e in loaded.errors] == [
        "field 'won' is 'no', expected true or false",
        "field 'reward' is '3', expected a finite number",
        "field 'terminated' is 1, expected true or false",
        "field 'h' is None, expected a string",
        "field 'reward' is nan, expected a finite number",
        "field 'episode_id' is [1], expected a string",
        "field 'step' is '0', expected an integer >= 0"]


WRITER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {repo!r})
    from tests.envs import GuessNumberEnv
    from wrappers import HistoryPrompt, ParseAction, RecordTransitions, WMReplay
    env = RecordTransitions(ParseAction(HistoryPrompt(GuessNumberEnv(high=1000))), WMReplay({path!r}))
    step = 0
    env.reset(seed=0, options={{"target": 1000}})
    while True:  # an endless episode: killed from outside mid-episode
        env.step("<action>guess 1</action>" if step % 3 else "garbage")
        print(step, flush=True)
        step += 1
""")


def test_replay_survives_kill_9_mid_episode(tmp_path):
    path = tmp_path / "killed"
    script = WRITER.format(repo=str(REPO), path=str(path))
    writer = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    completed = -1
    try:
        for line in writer.stdout:
            completed = int(line)
            if completed >= 300:
                break
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
    assert completed >= 300, "writer died before it wrote enough records"
    replay = WMReplay.load(path)
    steps = sorted(r["step"] for r in replay)
    # Every step that returned before the kill is on disk, complete and intact.
    assert steps[: completed + 1] == list(range(completed + 1))
    assert all(r["o_next"] in ("Go higher.", "Your task is to: find the hidden number between 1 and 1000.")
               for r in replay)
    assert len(replay.episodes()) == 1
    assert all(e.reason == "truncated record (incomplete last line)" for e in replay.errors)


def test_async_vector_env_workers_write_their_own_shards(tmp_path):
    path = tmp_path / "vector"

    def make():
        return RecordTransitions(ParseAction(HistoryPrompt(gym.make(GUESS_ID))), WMReplay(path))

    envs = gym.vector.AsyncVectorEnv([make, make], shared_memory=False)
    try:
        envs.reset(seed=[0, 1])
        for _ in range(3):
            envs.step(("<action>guess 1</action>", "<action>guess 2</action>"))
    finally:
        envs.close()
    assert len(list(path.glob("*.jsonl"))) == 2
    replay = WMReplay.load(path)
    assert len(replay) >= 6 and not replay.errors
