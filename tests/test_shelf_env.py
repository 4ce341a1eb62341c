"""PaW/Shelf-v0: contract, splits, dynamics, expert, robustness."""

from __future__ import annotations

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import paw_gym  # noqa: F401  (registers the env ids)
from paw_gym import INFO_KEYS
from paw_gym.shelf import ITEMS, SPLITS, TEST_TARGETS, ShelfEnv


def test_check_env_passes():
    check_env(ShelfEnv(), skip_render_check=True)


def test_gym_make_limit_and_first_observation():
    env = gym.make("PaW/Shelf-v0", split="test")
    assert env.spec.max_episode_steps == 6
    observation, info = env.reset(seed=0)
    target = env.unwrapped.target
    assert set(INFO_KEYS) <= set(info)
    assert observation.startswith(f"Task: buy the {target}. You stand at a shelf with: ")
    assert info["admissible_actions"] == [f"take {item}" for item in env.unwrapped.shelf]
    assert info["task_type"] == f"{len(env.unwrapped.shelf)} items"
    assert info["task_description"] == f"buy the {target}"


def test_held_out_targets_are_never_training_targets():
    assert len(ITEMS) == 64 and len(TEST_TARGETS) == 16
    assert not set(SPLITS["train"]) & set(SPLITS["test"])
    train, test = ShelfEnv("train"), ShelfEnv("test")
    for seed in range(300):
        train.reset(seed=seed)
        test.reset(seed=seed)
        assert train.target not in TEST_TARGETS and test.target in TEST_TARGETS
        assert 3 <= len(train.shelf) <= 5 and len(set(train.shelf)) == len(train.shelf)
        assert train.target in train.shelf


def test_take_put_back_and_pay_dynamics():
    env = ShelfEnv()
    env.reset(seed=1)
    wrong = next(item for item in env.shelf if item != env.target)
    observation, reward, terminated, _, info = env.step(f"take {wrong}")
    assert observation == (f"Task: buy the {env.target}. You hold the {wrong}. "
                           "Pay for it or put it back.")
    assert info["admissible_actions"] == ["pay", "put back"] and reward == 0 and not terminated
    observation, _, _, _, info = env.step("put back")
    assert observation.endswith(f"shelf with: {', '.join(env.shelf)}.")
    env.step(f"take {env.target}")
    observation, reward, terminated, _, info = env.step("pay")
    assert (observation, reward, terminated, info["won"]) == (
        f"You bought the {env.target}. Task complete.", 10.0, True, True)
    env.reset(seed=1)
    env.step(f"take {wrong}")
    observation, reward, terminated, _, info = env.step("pay")
    assert reward == 0.0 and terminated and not info["won"]
    assert observation == f"You bought the {wrong}. You were asked for the {env.target}."


def test_invalid_action_leaves_the_state():
    env = ShelfEnv()
    first, info = env.reset(seed=2)
    observation, reward, terminated, _, info = env.step("pay")
    assert info["invalid_action"] and observation == first and reward == 0 and not terminated
    assert info["admissible_actions"] == [f"take {item}" for item in env.shelf]


def test_deterministic_per_seed_and_expert_always_wins():
    for split in ("train", "test", "all"):
        a, b = ShelfEnv(split), ShelfEnv(split)
        for seed in range(200):
            assert a.reset(seed=seed) == b.reset(seed=seed)
            for _ in range(2):
                a.step(a.expert_action())
            assert a._last_info["won"]


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="split 'dev'"):
        ShelfEnv("dev")
    with pytest.raises(ValueError, match="shelf_sizes"):
        ShelfEnv(shelf_sizes=(1,))
    with pytest.raises(ValueError, match="'purple cat' is not an item"):
        ShelfEnv().reset(seed=0, options={"target": "purple cat"})
    observation, _ = ShelfEnv().reset(seed=0, options={"target": "red mug"})
    assert observation.startswith("Task: buy the red mug.")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), st.lists(st.one_of(st.text(max_size=20), st.sampled_from(
    ["pay", "put back", *[f"take {item}" for item in ITEMS[:8]]])), max_size=8))
def test_fuzzed_actions_never_raise(seed, actions):
    env = ShelfEnv("all")
    env.reset(seed=seed)
    for action in actions:
        observation, reward, terminated, truncated, info = env.step(action)
        assert isinstance(observation, str) and reward in (0.0, 10.0)
        if terminated:
            break
