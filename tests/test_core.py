"""The TextEnv base, the info contract, seeding and registration."""

from __future__ import annotations

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import paw_gym
from paw_gym import INFO_KEYS, TextSpace
from tests.common import GUESS_ID
from tests.envs import GuessNumberEnv


def test_check_env_passes():
    check_env(GuessNumberEnv(), skip_render_check=True)
    check_env(gym.make(GUESS_ID).unwrapped, skip_render_check=True)


def test_text_space_accepts_any_unicode_and_bounds_length():
    space = TextSpace(20)
    assert space.contains("Price: $3 › ™ é")
    assert space.contains("")
    assert not space.contains("x" * 21)
    assert not space.contains(b"bytes")
    assert all(space.contains(space.sample()) for _ in range(20))


def test_reset_is_deterministic_for_a_seed():
    env = gym.make(GUESS_ID, high=1000)
    first = [env.reset(seed=s)[1]["task_id"] for s in range(10)]
    again = [env.reset(seed=s)[1]["task_id"] for s in range(10)]
    assert first == again
    assert len(set(first)) > 1  # different seeds give different tasks


def test_info_contract_on_reset_and_step():
    env = gym.make(GUESS_ID)
    _, info = env.reset(seed=3)
    assert set(INFO_KEYS) <= set(info)
    assert info["task_description"] and info["admissible_actions"]
    _, _, _, _, info = env.step("guess 1")
    assert set(INFO_KEYS) <= set(info)


@pytest.mark.parametrize("action", ["", "nonsense", "guess 99", "\x00\xff", 12345, None, b"guess 1"])
def test_invalid_actions_are_noops_and_never_raise(action):
    env = GuessNumberEnv()
    observation, _ = env.reset(seed=0)
    after, reward, terminated, truncated, info = env.step(action)
    assert info["invalid_action"] is True
    assert (after, reward, terminated, truncated) == (observation, 0.0, False, False)


def test_winning_sets_won_and_terminates():
    env = GuessNumberEnv()
    env.reset(seed=0, options={"target": 5})
    _, reward, terminated, _, info = env.step(env.expert_action())
    assert (reward, terminated, info["won"]) == (10.0, True, True)


def test_register_text_env_and_errors():
    env_id = "TestCore/Guess-v0"
    paw_gym.register_text_env(env_id, GuessNumberEnv, max_episode_steps=3, description="core test")
    assert paw_gym.list_text_envs()[env_id] == "core test"
    env = gym.make(env_id, high=4)
    env.reset(seed=0)
    truncated = [env.step("guess 9")[3] for _ in range(3)]
    assert truncated == [False, False, True]  # TimeLimit from max_episode_steps
    with pytest.raises(ValueError, match="already registered"):
        paw_gym.register_text_env(env_id, GuessNumberEnv)
    paw_gym.register_text_env(env_id, GuessNumberEnv, override=True)
    with pytest.raises(ValueError, match="module:ClassName|package.module"):
        paw_gym.register_text_env("TestCore/Bad-v0", "no_colon_here")
    with pytest.raises(ValueError, match="high must be"):
        gym.make(env_id, high=0)


def test_only_implemented_builtins_are_registered():
    from paw_gym.registration import BUILTIN_ENVS

    for spec in BUILTIN_ENVS:
        assert spec.id in gym.registry
    unregistered_builtins = {"PaW/WebShop-v0", "PaW/ALFWorld-v0", "PaW/SearchQA-v0"} - {
        spec.id for spec in BUILTIN_ENVS}
    for env_id in unregistered_builtins:
        assert env_id not in gym.registry


def test_render_modes():
    env = GuessNumberEnv(render_mode="ansi")
    observation, _ = env.reset(seed=0)
    assert env.render() == observation
    with pytest.raises(ValueError, match="render_mode"):
        GuessNumberEnv(render_mode="rgb_array")


@pytest.mark.parametrize("env_id", ["PaW/Shelf-v0", "PaW/WebShop-v0", "PaW/SearchQA-v0",
                                    "PaW/FrozenLake-v0", "PaW/Sokoban-v0", "PaW/ALFWorld-v0"])
def test_non_text_and_over_long_actions_get_the_envs_own_invalid_answer(env_id):
    from paw_gym import MAX_ACTION_LENGTH

    kwargs = {"progress": False} if env_id == "PaW/ALFWorld-v0" else {}
    answers = []
    for action in ("", None, 42, "x" * (MAX_ACTION_LENGTH + 1)):
        env = gym.make(env_id, **kwargs)
        env.reset(seed=0)
        observation, reward, terminated, _, info = env.step(action)
        assert info["invalid_action"] and not terminated
        answers.append(observation)
    # ALFWorld answers "Nothing happens.", search QA its correction: not the previous page.
    assert answers[1:] == [answers[0]] * 3


def _every_registered_env():
    from paw_gym.registration import BUILTIN_ENVS

    kwargs = {"PaW/ALFWorld-v0": {"progress": False}, "PaW/Text-v0": {"env_id": "FrozenLake-v1"}}
    return [(spec.id, kwargs.get(spec.id, {})) for spec in BUILTIN_ENVS]


@pytest.mark.parametrize("env_id, kwargs", _every_registered_env())
def test_expert_action_before_reset_is_one_reset_needed_error(env_id, kwargs):
    from gymnasium.error import ResetNeeded

    env = gym.make(env_id, **kwargs)
    with pytest.raises(ResetNeeded, match=r"call reset\(\) before expert_action\(\)"):
        env.unwrapped.expert_action()
    env.reset(seed=0)
    assert isinstance(env.unwrapped.expert_action(), str)
