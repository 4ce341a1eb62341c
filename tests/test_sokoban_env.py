"""PaW/Sokoban-v0: contract, generator, splits, dynamics, solver, expert, robustness."""

from __future__ import annotations

import hashlib
import time
from collections import Counter

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import paw_gym  # noqa: F401  (registers the env ids)
from paw_gym import INFO_KEYS
from paw_gym.toytext.gridworlds import is_test_layout
from paw_gym.toytext.sokoban import (
    ACTIONS,
    MAX_SOLUTION_LENGTH,
    MAX_STEPS,
    WIN_REWARD,
    SokobanEnv,
    parse_grid,
    render_grid,
    solve,
)

LEGEND = set("#_OX√PS")


def spaced(grid: str) -> str:
    """A compactly written grid (``"#PX#"``) as the env writes it: cells separated by spaces."""
    return "\n".join(" ".join(row) for row in grid.split("\n"))


def test_check_env_passes():
    check_env(SokobanEnv(), skip_render_check=True)


def test_first_observation_and_info():
    env = SokobanEnv(size=7, box_counts=(3,))
    observation, info = env.reset(seed=0)
    grid = observation
    rows = [row.split(" ") for row in grid.split("\n")]
    assert len(rows) == 7 and all(len(row) == 7 for row in rows)
    assert set(sum(rows, [])) <= LEGEND and rows[0] == rows[-1] == ["#"] * 7
    assert sum(grid.count(symbol) for symbol in "PS") == 1
    assert sum(grid.count(symbol) for symbol in "X√") == sum(grid.count(s) for s in "O√S") == 3
    assert grid == env.initial_grid
    assert set(INFO_KEYS) <= set(info)
    assert info["admissible_actions"] == list(ACTIONS) and not info["won"]
    assert info["task_type"] == "3 boxes"
    assert info["task_description"] == "push the 3 boxes onto the targets"
    assert info["task_id"] == "sokoban-" + hashlib.sha1(grid.encode()).hexdigest()[:12]
    _, info = SokobanEnv(box_counts=(1,)).reset(seed=0)
    assert info["task_type"] == "1 box"
    assert info["task_description"] == "push the box onto the target"


def test_gym_make_applies_the_step_limit():
    env = gym.make("PaW/Sokoban-v0")
    assert env.spec.max_episode_steps == MAX_STEPS
    observation, _ = env.reset(seed=0)
    assert observation == env.unwrapped.initial_grid


def test_push_bump_target_and_win():
    env = SokobanEnv()
    env.reset(seed=0)
    env.layout, env.player, env.boxes = parse_grid("######\n"
                                                   "#PX_O#\n"
                                                   "#____#\n"
                                                   "#X___#\n"
                                                   "#O___#\n"
                                                   "######")

    def step(action, *rows):
        observation, reward, terminated, truncated, info = env.step(action)
        assert observation == spaced("\n".join(rows)) and not truncated
        assert not info["invalid_action"]
        return reward, terminated, info

    rows = ("######", "#PX_O#", "#____#", "#X___#", "#O___#", "######")
    reward, terminated, _ = step("up", *rows)                      # into the wall: no change
    assert (reward, terminated) == (0.0, False)
    step("right", "######", "#_PXO#", *rows[2:])                   # push
    reward, terminated, info = step("right", "######", "#__P√#", *rows[2:])  # onto a target
    assert (reward, terminated, info["won"]) == (0.0, False, False)
    step("right", "######", "#__P√#", *rows[2:])                   # box against the wall: no change
    for action in ("left", "left", "down"):
        env.step(action)
    reward, terminated, info = step("down", "######", "#___√#", "#____#", "#P___#", "#√___#",
                                    "######")
    assert (reward, terminated, info["won"], info["admissible_actions"]) == (WIN_REWARD, True,
                                                                            True, [])
    observation, reward, terminated, _, info = env.step("up")  # the episode is over
    assert info["invalid_action"] and reward == 0 and not terminated
    assert observation.endswith(spaced("#P___#\n#√___#\n######"))


def test_box_blocked_by_a_box_and_player_on_a_target():
    env = SokobanEnv()
    env.reset(seed=0)
    env.layout, env.player, env.boxes = parse_grid("######\n#PXXO#\n#____#\n#O___#\n######")
    observation, *_ = env.step("right")
    assert observation == spaced("######\n#PXXO#\n#____#\n#O___#\n######")
    env.step("down")
    observation, *_ = env.step("down")
    assert observation == spaced("######\n#_XXO#\n#____#\n#S___#\n######")


def test_invalid_action_leaves_the_state():
    env = SokobanEnv()
    first, _ = env.reset(seed=3)
    for action in ("Up", " up", "north", "push left", ""):
        observation, reward, terminated, _, info = env.step(action)
        assert info["invalid_action"] and observation == first and reward == 0 and not terminated
        assert info["admissible_actions"] == list(ACTIONS)


def test_deterministic_per_seed():
    rng = np.random.default_rng(0)
    for split in ("train", "test", "all"):
        a, b = SokobanEnv(split, box_counts=(1, 2, 3)), SokobanEnv(split, box_counts=(1, 2, 3))
        for seed in range(50):
            assert a.reset(seed=seed) == b.reset(seed=seed)
            for action in rng.choice(ACTIONS, size=10):
                assert a.step(str(action)) == b.step(str(action))
    observations = {SokobanEnv().reset(seed=seed)[0] for seed in range(50)}
    assert len(observations) >= 48  # seeds give different rooms


def test_rooms_are_solvable_within_the_cap_and_not_yet_solved():
    for size in (5, 6, 8):
        env = SokobanEnv("all", size=size, box_counts=(1, 2, 3))
        for seed in range(30):
            env.reset(seed=seed)
            solution = solve(env.initial_grid)
            assert solution is not None and 1 <= len(solution) <= MAX_SOLUTION_LENGTH


def test_splits_are_disjoint():
    def held_out(grid):  # recomputed here: the SHA-1 of the initial grid, mod 5
        return int(hashlib.sha1(grid.encode("utf-8")).hexdigest(), 16) % 5 == 0

    tasks = {}
    for split in ("train", "test", "all"):
        env = SokobanEnv(split)
        grids = [env.reset(seed=seed)[0] for seed in range(200)]
        assert all(is_test_layout(grid) == held_out(grid) for grid in grids)
        tasks[split] = set(grids)
    assert not any(held_out(grid) for grid in tasks["train"])
    assert all(held_out(grid) for grid in tasks["test"])
    assert not tasks["train"] & tasks["test"]
    assert 10 <= sum(held_out(grid) for grid in tasks["all"]) <= 80  # about a fifth


def test_solver_on_small_rooms():
    assert solve("#####\n#PXO#\n#####") == ["right"]
    assert solve("#####\n#P√_#\n#####") == []
    assert solve("#####\n#_PX#\n#O__#\n#####") is None  # box in a corner
    assert solve("#######\n#PX__O#\n#######") == ["right"] * 3
    assert solve("#######\n#PX__O#\n#######", max_moves=2) is None
    with pytest.raises(ValueError, match="one player"):
        solve("#####\n#_XO#\n#####")
    with pytest.raises(ValueError, match="walled in"):
        solve("#####\n#PXO_\n#####")
    with pytest.raises(ValueError, match="outside the legend"):
        solve("#####\n#PX?#\n#####")


def test_solver_is_optimal_against_a_plain_search_over_env_steps():
    """Breadth-first search through ``env.step`` itself (no pruning) finds no shorter plan."""
    env = SokobanEnv("all", box_counts=(1, 2))
    for seed in range(15):
        env.reset(seed=seed)
        start = (env.player, env.boxes)
        depth, frontier, seen = 0, [start], {start}
        while not any(boxes <= env.layout.targets for _, boxes in frontier):
            depth, next_frontier = depth + 1, []
            for state in frontier:
                for action in ACTIONS:
                    env.player, env.boxes = state
                    env.step(action)
                    if (env.player, env.boxes) not in seen:
                        seen.add((env.player, env.boxes))
                        next_frontier.append((env.player, env.boxes))
            frontier = next_frontier
        assert len(solve(env.initial_grid)) == depth


def test_render_and_parse_round_trip():
    env = SokobanEnv("all", size=8, box_counts=(3,))
    for seed in range(20):
        observation, _ = env.reset(seed=seed)
        assert render_grid(*parse_grid(observation)) == observation


def test_expert_wins_within_the_step_limit():
    assert MAX_STEPS == 30 and MAX_SOLUTION_LENGTH <= MAX_STEPS
    for split in ("train", "test"):
        env = SokobanEnv(split)
        episodes, wins = Counter(), Counter()
        for seed in range(200):
            _, info = env.reset(seed=seed)
            episodes[info["task_type"]] += 1
            for _ in range(MAX_STEPS):
                _, reward, terminated, _, info = env.step(env.expert_action())
                if terminated:
                    wins[info["task_type"]] += reward == WIN_REWARD
                    break
        assert set(episodes) == {"1 box", "2 boxes"}
        for task_type, n in episodes.items():
            assert wins[task_type] >= 0.99 * n, (split, task_type, wins[task_type], n)


def test_expert_replans_after_other_moves():
    env = SokobanEnv("all", size=7, box_counts=(1, 2, 3))
    rng = np.random.default_rng(0)
    for seed in range(60):
        env.reset(seed=seed)
        won = False
        for action in rng.choice(ACTIONS, size=6):
            won = won or env.step(str(action))[4]["won"]
        for _ in range(3 * MAX_STEPS):
            if won:
                break
            won = env.step(env.expert_action())[4]["won"]
        # The expert wins unless the random moves had already left a box stuck for good.
        assert won or (env._stuck and solve(env._last_observation) is None)


def test_reset_is_fast():
    env = SokobanEnv("test")
    start = time.perf_counter()
    for seed in range(200):
        env.reset(seed=seed)
    assert (time.perf_counter() - start) / 200 < 0.01


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="split 'dev'"):
        SokobanEnv("dev")
    for size in (4, 9, "6", 6.0):
        with pytest.raises(ValueError, match=f"size {size!r} must be an integer in \\[5, 8\\]"):
            SokobanEnv(size=size)
    for box_counts in ((), (0,), (4,), (1, 5), 2, (1.5,)):
        with pytest.raises(ValueError, match=r"box_counts .* in \[1, 3\]"):
            SokobanEnv(box_counts=box_counts)
    assert SokobanEnv(size=5, box_counts=[3]).box_counts == (3,)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), st.lists(st.one_of(st.text(max_size=12), st.sampled_from(
    [*ACTIONS, "Up", "left ", "stay"])), max_size=12))
def test_fuzzed_actions_never_raise(seed, actions):
    env = SokobanEnv("all", box_counts=(1, 2, 3))
    env.reset(seed=seed)
    for action in actions:
        observation, reward, terminated, _, info = env.step(action)
        assert isinstance(observation, str) and reward in (0.0, WIN_REWARD)
        assert info["invalid_action"] == (action not in ACTIONS)
        if terminated:
            break
