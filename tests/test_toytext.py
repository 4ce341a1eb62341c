"""TextAdapter and the toy-text games built on it: contract, dynamics, splits, experts."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import paw_gym
from paw_gym import INFO_KEYS, TextAdapter
from paw_gym.toytext.blackjack import (BlackjackText, best_win_probability,
                                       optimal_win_probability)
from paw_gym.toytext.gridworlds import (CliffWalkingText, FrozenLakeText, TaxiText,
                                        is_test_layout)
from paw_gym.toytext.planning import greedy_policy, plan_length

GAMES = {"PaW/FrozenLake-v0": FrozenLakeText, "PaW/CliffWalking-v0": CliffWalkingText,
         "PaW/Taxi-v0": TaxiText, "PaW/Blackjack-v0": BlackjackText}


def reached_goal(observation, reward, terminated, info):
    return terminated


def expert_episode(env, seed: int) -> tuple[float, dict]:
    """Play the env's expert from ``reset(seed)``; the last reward and info."""
    env.reset(seed=seed)
    while True:
        _, reward, terminated, truncated, info = env.step(env.unwrapped.expert_action())
        if terminated or truncated:
            return reward, info


# -- the adapter --------------------------------------------------------------------------------
def test_adapter_keeps_gymnasium_dynamics_and_names_actions():
    env = TextAdapter("CliffWalking-v1", won=reached_goal)
    plain = gym.make("CliffWalking-v1", render_mode="ansi")
    text, info = env.reset(seed=3)
    plain.reset(seed=3)
    assert set(INFO_KEYS) <= set(info) and info["task_type"] == "CliffWalking-v1"
    assert info["admissible_actions"] == ["up", "right", "down", "left"]
    assert text == plain.render().strip("\n")
    rewards = []
    for name, number in [("up", 0), ("right", 1), ("right", 1), ("down", 2), ("left", 3)]:
        text, reward, terminated, truncated, info = env.step(name)
        _, plain_reward, plain_terminated, _, _ = plain.step(number)
        assert text == plain.render().strip("\n")
        assert (reward, terminated) == (plain_reward, plain_terminated)
        rewards.append(reward)
    assert rewards == [-1, -1, -1, -100, -1]  # down onto the cliff: back to the start


def test_adapter_expert_plans_on_the_tabular_model():
    env = TextAdapter("CliffWalking-v1", won=reached_goal)
    env.reset(seed=0)
    assert env.has_expert
    actions = []
    while True:
        actions.append(env.expert_action())
        _, reward, terminated, _, info = env.step(actions[-1])
        if terminated:
            break
    assert actions == ["up"] + ["right"] * 11 + ["down"] and info["won"]
    assert info["admissible_actions"] == []


def test_adapter_invalid_actions_and_the_end_of_an_episode():
    env = TextAdapter("FrozenLake-v1", is_slippery=False)
    first, info = env.reset(seed=0)
    assert "\x1b[" not in first  # colour codes removed from the ANSI rendering
    for action in ("jump", "LEFT", " left", ""):
        text, reward, terminated, _, info = env.step(action)
        assert info["invalid_action"] and text == first and reward == 0 and not terminated
    for action in ["down", "down", "right", "right", "down", "right"]:  # the 4x4 map's path
        _, reward, terminated, _, info = env.step(action)
    assert terminated and info["won"] and reward == 1.0
    _, reward, _, _, info = env.step("left")
    assert info["invalid_action"] and reward == 0


def test_gym_make_one_liner_passes_constructor_arguments():
    env = gym.make("PaW/Text-v0", env_id="FrozenLake-v1", is_slippery=False)
    env.reset(seed=0)
    for action in ["down", "down", "right", "right", "down"]:
        _, _, terminated, _, _ = env.step(action)
        assert not terminated  # not slippery: the path is exact
    _, reward, terminated, _, info = env.step("right")
    assert terminated and info["won"] and reward == 1.0


def test_adapter_passes_the_wrapped_envs_truncation_on():
    env = TextAdapter(gym.make("FrozenLake-v1", render_mode="ansi", is_slippery=False,
                               max_episode_steps=2))
    env.reset(seed=0)
    assert env.step("left")[3] is False
    _, _, terminated, truncated, info = env.step("left")
    assert truncated and not terminated and info["admissible_actions"] == []


class Dial(gym.Env):
    """Two dials (0-2, 0-1); the episode is won by setting them to (2, 1)."""

    action_space = spaces.MultiDiscrete([3, 2])
    observation_space = spaces.MultiDiscrete([3, 2])

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.state = np.zeros(2, dtype=np.int64)
        return self.state.copy(), {}

    def step(self, action):
        self.state = np.asarray(action)
        won = bool((self.state == [2, 1]).all())
        return self.state.copy(), float(won), won, False, {}


def test_adapter_multidiscrete_names_render_function_and_expert_function():
    env = TextAdapter(Dial(), render=lambda env, obs: f"dials at {obs[0]} {obs[1]}",
                      actions=[["low", "mid", "high"], ["off", "on"]], task_type="dials",
                      expert=lambda env: "high on")
    text, info = env.reset(seed=0)
    assert text == "dials at 0 0" and info["task_type"] == "dials"
    assert info["admissible_actions"] == ["low off", "low on", "mid off", "mid on",
                                          "high off", "high on"]
    assert env.step("mid on")[0] == "dials at 1 1"
    _, reward, terminated, _, info = env.step(env.expert_action())
    assert terminated and info["won"] and reward == 1.0
    check_env(TextAdapter(Dial(), render=lambda env, obs: str(obs)), skip_render_check=True)


def test_adapter_mistakes_are_named_before_any_work():
    with pytest.raises(ValueError, match="unknown Gymnasium env id 'Nope-v0'"):
        TextAdapter("Nope-v0")
    with pytest.raises(ValueError, match="render_mode=None; create it with render_mode='ansi'"):
        TextAdapter(gym.make("CliffWalking-v1"))
    with pytest.raises(ValueError, match="actions has 2 names but .* has 4 actions"):
        TextAdapter("CliffWalking-v1", actions=["a", "b"])
    with pytest.raises(ValueError, match="distinct"):
        TextAdapter("CliffWalking-v1", actions=["a", "a", "b", "c"])
    with pytest.raises(ValueError, match="Discrete or 1-D MultiDiscrete action space"):
        TextAdapter("Pendulum-v1", render=lambda env, obs: str(obs))
    with pytest.raises(ValueError, match=r"constructor arguments \['is_slippery'\] only apply"):
        TextAdapter(gym.make("FrozenLake-v1", render_mode="ansi"), is_slippery=False)
    no_model = TextAdapter("Blackjack-v1", render=lambda env, obs: str(obs))
    assert not no_model.has_expert
    no_model.reset(seed=0)
    with pytest.raises(NotImplementedError, match="expert=fn"):
        no_model.expert_action()


def test_value_iteration_finds_shortest_paths():
    env = gym.make("FrozenLake-v1", is_slippery=False).unwrapped
    policy = greedy_policy(env.P)
    assert plan_length(env.P, policy, 0) == 6  # the 4x4 map's shortest path
    assert policy[14] == 2  # right, into the goal
    with pytest.raises(ValueError, match="gamma=1.0"):
        greedy_policy(env.P, gamma=1.0)


# -- the registered games ---------------------------------------------------------------------
@pytest.mark.parametrize("env_id", sorted(GAMES))
def test_games_pass_check_env_and_are_deterministic_per_seed(env_id):
    check_env(GAMES[env_id](), skip_render_check=True)
    a, b = gym.make(env_id), gym.make(env_id)
    for seed in range(30):
        assert a.reset(seed=seed) == b.reset(seed=seed)
        for _ in range(4):
            action = a.unwrapped.expert_action()
            assert a.step(action) == b.step(action)


@pytest.mark.parametrize("env_id", ["PaW/FrozenLake-v0", "PaW/CliffWalking-v0", "PaW/Taxi-v0"])
@pytest.mark.parametrize("split", ["train", "test"])
def test_expert_solves_every_layout(env_id, split):
    env = gym.make(env_id, split=split)
    for seed in range(150):
        reward, info = expert_episode(env, seed)
        assert info["won"] and reward == 10.0, (env_id, split, seed)


def test_blackjack_expert_reaches_the_computed_optimum():
    # The optimum over Gymnasium's deal is 43.16 % (exact DP); 4000 deals put the measured
    # rate within ±1.6 points (95 %) of it.
    assert optimal_win_probability() == pytest.approx(0.4316, abs=1e-4)
    env = gym.make("PaW/Blackjack-v0", split="all")
    wins = sum(expert_episode(env, seed)[1]["won"] for seed in range(4000))
    assert abs(wins / 4000 - optimal_win_probability()) < 3 * np.sqrt(0.25 / 4000)
    assert best_win_probability(20, False, 10)[1] == "stick"
    assert best_win_probability(11, False, 6)[1] == "hit"


def _layout_text(env) -> str:
    return env.unwrapped._last_observation


@pytest.mark.parametrize("env_id", ["PaW/FrozenLake-v0", "PaW/CliffWalking-v0",
                                    "PaW/Blackjack-v0"])
def test_held_out_layouts_never_occur_in_train(env_id):
    train, test = gym.make(env_id, split="train"), gym.make(env_id, split="test")
    held_out = set()
    for seed in range(200):
        train.reset(seed=seed)
        test.reset(seed=seed)
        assert not is_test_layout(_layout_text(train)) and is_test_layout(_layout_text(test))
        held_out.add(_layout_text(test))
    assert len(held_out) > 20  # many distinct held-out layouts, not one repeated


def test_taxi_holds_out_the_diagonal_routes():
    for split, diagonal in (("train", False), ("test", True)):
        env = TaxiText(split)
        for seed in range(100):
            env.reset(seed=seed)
            _, _, passenger, destination = env.env.decode(int(env.env.s))
            assert (passenger + destination == 3) == diagonal


def test_frozen_lake_text_hole_and_goal():
    env = FrozenLakeText(split="all")
    for seed in range(100):
        text, info = env.reset(seed=seed)
        grid = [row.split(" ") for row in text.split("\n")]
        assert grid[0][0] == "P" and grid[-1][-1] == "G" and info["task_type"] == "4x4"
        assert set(sum(grid, [])) <= {"P", "_", "O", "G"}
        if grid[0][1] == "O":  # a hole right of the start
            text, reward, terminated, _, info = env.step("right")
            assert text.split("\n")[0].startswith("_ P ")
            assert terminated and not info["won"] and reward == 0.0
            return
    pytest.fail("no map with a hole next to the start in 100 seeds")


def test_cliff_walking_cliff_sends_back_to_start():
    env = CliffWalkingText(split="all", shapes=((3, 5),), extra_cliffs=(0, 0))
    start, _ = env.reset(seed=0)
    assert start == "_ _ _ _ _\n_ _ _ _ _\nP C C C G"
    assert env.step("right")[0] == start  # onto the cliff: back to the start, not terminated
    text, *_ = env.step("up")
    assert text == "_ _ _ _ _\nP _ _ _ _\n_ C C C G"


def test_taxi_text_tracks_the_passenger():
    env = TaxiText(split="all")
    env.reset(seed=0)
    while True:
        text, _, terminated, _, info = env.step(env.expert_action())
        if "Passenger: in the taxi." in text:
            break
    assert "T" in text and not terminated


def test_games_bad_arguments_are_named():
    with pytest.raises(ValueError, match="split 'dev'"):
        FrozenLakeText("dev")
    with pytest.raises(ValueError, match=r"sizes \(2,\)"):
        FrozenLakeText(sizes=(2,))
    with pytest.raises(ValueError, match="extra_cliffs"):
        CliffWalkingText(extra_cliffs=(3, 1))
    with pytest.raises(ValueError, match="split 'val'"):
        BlackjackText("val")


@pytest.mark.parametrize("env_id", [*sorted(GAMES), "PaW/Sokoban-v0"])
def test_game_templates_explain_the_legend(env_id):
    from agents.envs import make_agent_env

    prompt, _ = make_agent_env(env_id).reset(seed=0)
    assert "Your task is to:" in prompt and "<action> </action>" in prompt
    names = gym.make(env_id).reset(seed=0)[1]["admissible_actions"]
    assert "[" + "\n ".join(f"'{name}'" for name in names) + "]" in prompt  # verl-agent's format


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(GAMES)), st.integers(0, 10_000), st.lists(st.one_of(
    st.text(max_size=12), st.sampled_from(["left", "down", "right", "up", "north", "south",
                                           "east", "west", "pickup", "dropoff", "hit",
                                           "stick"])), max_size=12))
def test_fuzzed_actions_never_raise(env_id, seed, actions):
    env = gym.make(env_id)
    env.reset(seed=seed)
    for action in actions:
        observation, reward, terminated, truncated, info = env.step(action)
        assert isinstance(observation, str) and reward in (0.0, 10.0)
        if terminated or truncated:
            break


def test_text_adapter_is_exported():
    assert paw_gym.TextAdapter is TextAdapter
    assert "PaW/Text-v0" in paw_gym.list_text_envs()
