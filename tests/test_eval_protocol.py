"""The evaluation protocol: every task of the held-out split once, stratified subsets,
repeats, checkpoint settings, and validation during training."""

from __future__ import annotations

import io
import json
from collections import Counter

import gymnasium as gym
import pytest

import paw_gym
from agents.baselines import ExpertAgent, RandomAgent
from paw_gym.progress import LineProgress, progress_bar
from training.evaluate import (evaluate, held_out_split, plan_evaluation,
                               stratified_subset, write_trajectories)

TASK_LIST_ENVS = {"PaW/Shelf-v0": ("test", 48), "PaW/WebShop-v0": ("test", 500),
                  "PaW/SearchQA-v0": ("test", None)}


@pytest.mark.parametrize("env_id", sorted(TASK_LIST_ENVS))
def test_every_task_of_the_held_out_split_resets_to_its_own_task(env_id):
    split, size = TASK_LIST_ENVS[env_id]
    assert held_out_split(env_id) == split
    env = gym.make(env_id, split=split)
    tasks = env.unwrapped.tasks()
    if size is not None:
        assert len(tasks) == size
    seen = set()
    for index in range(0, len(tasks), max(1, len(tasks) // 25)):
        _, info = env.reset(seed=index, options=dict(tasks[index].options))
        assert info["task_type"] == tasks[index].task_type
        seen.add(info["task_id"])
    assert len(seen) == len(range(0, len(tasks), max(1, len(tasks) // 25)))  # distinct tasks


@pytest.mark.heavy
def test_alfworld_lists_every_game_of_its_split():
    pytest.importorskip("alfworld")
    assert held_out_split("PaW/ALFWorld-v0") == "eval_out_of_distribution"
    env = gym.make("PaW/ALFWorld-v0", split="eval_out_of_distribution", progress=False)
    tasks = env.unwrapped.tasks()
    assert len(tasks) == len(env.unwrapped.games)
    types = Counter(task.task_type for task in tasks)
    assert "pick_and_place_simple" in types
    _, info = env.reset(seed=0, options=dict(tasks[3].options))
    assert info["task_id"] == env.unwrapped.games[3].task_id
    env.close()


def test_eval_plays_each_split_item_exactly_once_and_records_the_split():
    result = evaluate(ExpertAgent(), "PaW/Shelf-v0", plan_evaluation("PaW/Shelf-v0"))
    # A Shelf task is its target ("Task: buy the red mug") and its shelf size (the task type).
    played = Counter((t.initial_observation.split(".")[0], t.task_type)
                     for t in result.trajectories)
    assert result.meta["split"] == "test" and result.meta["episodes"] == 48
    assert len(played) == 48 and set(played.values()) == {1}  # 16 targets x 3 shelf sizes
    assert {row.task_type: row.episodes for row in result.rows} == {
        "3 items": 16, "4 items": 16, "5 items": 16, "overall": 48}
    targets = {t.initial_observation.split(".")[0] for t in result.trajectories}
    assert targets == {f"Task: buy the {item}" for item in paw_gym.shelf.TEST_TARGETS}


def test_repeats_replay_each_task_and_limit_takes_a_stratified_subset():
    plan = plan_evaluation("PaW/Shelf-v0", limit=12, repeats=3, seed=5)
    assert plan.episodes == 36 and plan.split_size == 48
    assert plan.task_seeds == sorted(plan.task_seeds) and plan.task_seeds[0] >= 5
    assert plan == plan_evaluation("PaW/Shelf-v0", limit=12, repeats=3, seed=5)  # deterministic
    result = evaluate(RandomAgent(), "PaW/Shelf-v0", plan)
    by_group = {}
    for trajectory in result.trajectories:
        by_group.setdefault(trajectory.group_index, set()).add(trajectory.task_id)
    assert len(by_group) == 12 and all(len(ids) == 1 for ids in by_group.values())
    assert Counter(t.task_type for t in result.trajectories) == {
        "3 items": 12, "4 items": 12, "5 items": 12}


def test_stratified_subset_keeps_each_types_share_within_one():
    types = ["a"] * 70 + ["b"] * 25 + ["c"] * 5
    for limit in (1, 7, 10, 33, 99, 100, 500):
        chosen = stratified_subset(types, limit)
        assert len(chosen) == min(limit, 100) and len(set(chosen)) == len(chosen)
        counts = Counter(types[i] for i in chosen)
        for kind, total in Counter(types).items():
            assert abs(counts[kind] - total * min(limit, 100) / 100) <= 1, (limit, kind)


def test_envs_that_generate_tasks_play_consecutive_seeds():
    plan = plan_evaluation("PaW/FrozenLake-v0", limit=7, seed=3)
    assert plan.split == "test" and plan.split_size is None
    assert plan.task_seeds == list(range(3, 10)) and plan.task_options == [None] * 7
    assert plan_evaluation("Test/GuessNumber-v0").split is None  # an env without splits


def test_bad_protocol_values_are_clear():
    with pytest.raises(ValueError, match="limit must be a positive integer"):
        plan_evaluation("PaW/Shelf-v0", limit=0)
    with pytest.raises(ValueError, match="repeats must be a positive integer"):
        plan_evaluation("PaW/Shelf-v0", repeats=0)
    with pytest.raises(ValueError, match="split 'nope'"):
        plan_evaluation("PaW/Shelf-v0", split="nope")
    with pytest.raises(ValueError, match="shelf_size"):
        gym.make("PaW/Shelf-v0").reset(options={"target": "red mug", "shelf_size": 9})


def test_saved_trajectories_hold_what_the_model_wrote(tmp_path):
    result = evaluate(RandomAgent(), "PaW/Shelf-v0", plan_evaluation("PaW/Shelf-v0", limit=3))
    path = write_trajectories(result, tmp_path / "t.jsonl")
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(records) == 3
    step = records[0]["steps"][0]
    assert set(step) == {"prompt", "output", "action", "observation", "reward", "invalid"}
    assert step["output"] == result.trajectories[0].transitions[0].output.text
    assert "Task: buy the" in step["prompt"]


def test_eval_episodes_go_to_a_replay_in_the_schema_of_expert_demos(tmp_path):
    from training.evaluate import write_replay
    from wrappers import WMReplay
    from wrappers.replay import REQUIRED_FIELDS

    result = evaluate(ExpertAgent(), "PaW/Shelf-v0", plan_evaluation("PaW/Shelf-v0", limit=4))
    write_replay(result, tmp_path / "replay")
    write_replay(result, tmp_path / "replay")  # a second evaluation appends, ids stay apart
    records = WMReplay.load(tmp_path / "replay", strict=True).records
    steps = sum(len(t) for t in result.trajectories)
    assert len(records) == 2 * steps and len({r["episode_id"] for r in records}) == 8
    first, step = records[0], result.trajectories[0].transitions[0]
    assert set(REQUIRED_FIELDS) <= set(first) and first["source"] == "eval"
    assert (first["h"], first["a"], first["o_next"]) == (
        step.prompt, step.output.text, step.next_observation)
    assert first["parsed_action"] == step.action and first["task_type"].endswith("items")


def test_a_log_file_gets_plain_lines_not_carriage_returns():
    stream = io.StringIO()  # not a terminal
    bar = progress_bar(total=50, desc="rollout", unit="step", file=stream)
    assert isinstance(bar, LineProgress)
    for _ in range(50):
        bar.update(1)
        bar.set_postfix(live=3)
    bar.close()
    text = stream.getvalue()
    assert "\r" not in text and "\x1b" not in text
    lines = text.splitlines()
    assert 1 <= len(lines) <= 11 and lines[-1].startswith("rollout: 50/50 step")
    assert list(progress_bar(range(4), file=io.StringIO())) == [0, 1, 2, 3]



def test_eval_with_env_workers_gives_the_same_tables(tmp_path):
    from training.cli import main

    for workers in (0, 2):
        assert main(["eval", "--env", "PaW/Shelf-v0", "--agent", "random", "--limit", "6",
                     "--num_env_workers", str(workers), "--output_dir", str(tmp_path),
                     "--name", f"w{workers}"]) == 0
    rows = [json.loads((tmp_path / f"w{w}.json").read_text())["rows"] for w in (0, 2)]
    assert rows[0] == rows[1]
