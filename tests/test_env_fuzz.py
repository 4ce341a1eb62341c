"""Every registered PaW env against fuzzed actions: admissible ones, near misses, junk text,
non-text and over-long actions. Bounded here; ``-m slow`` runs many more episodes.

Invariants at every step: no exception; a ``str`` observation; a finite float reward; the
``info`` contract's keys with the right types; an invalid action neither wins nor earns a
positive reward. An episode that ends is followed by a new one.
"""

from __future__ import annotations

import math

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import paw_gym
from paw_gym import INFO_KEYS, MAX_ACTION_LENGTH

ENV_IDS = sorted(env_id for env_id in paw_gym.list_text_envs()
                 if env_id.startswith("PaW/") and env_id != "PaW/Text-v0")
_ENVS: dict[str, gym.Env] = {}


def env_for(env_id: str) -> gym.Env:
    """One env per id for the whole module (ALFWorld and WebShop take seconds to build)."""
    if env_id not in _ENVS:
        kwargs = {"progress": False} if env_id == "PaW/ALFWorld-v0" else {}
        _ENVS[env_id] = gym.make(env_id, **kwargs)
    return _ENVS[env_id]


def actions(admissible: list[str]):
    """Admissible actions, their near misses, junk, non-text and over-long actions."""
    near = ([a.upper() for a in admissible] + [f" {a}" for a in admissible]
            + [a[:-1] for a in admissible])
    return st.one_of(
        st.sampled_from(admissible or ["look"]),
        st.sampled_from(near or ["LOOK"]),
        st.text(max_size=40),
        st.sampled_from([None, 42, b"bytes", ["list"], "x" * (MAX_ACTION_LENGTH + 1),
                         "<search> q </search>", "<answer> a </answer>", "search[x]",
                         "click[back to search]", "\ud800"]),
    )


def check_step(result) -> bool:
    observation, reward, terminated, truncated, info = result
    assert isinstance(observation, str)
    assert isinstance(reward, float) and math.isfinite(reward)
    assert set(INFO_KEYS) <= set(info)
    assert isinstance(info["admissible_actions"], list)
    assert isinstance(info["won"], bool) and isinstance(info["invalid_action"], bool)
    if info["invalid_action"]:
        assert not info["won"] and reward <= 0
    return terminated or truncated


def fuzz(env_id: str, seed: int, data, steps: int) -> None:
    env = env_for(env_id)
    _, info = env.reset(seed=seed)
    for _ in range(steps):
        action = data.draw(actions(list(info["admissible_actions"])))
        result = env.step(action)
        info = result[4]
        if check_step(result):
            _, info = env.reset(seed=seed + 1)


@pytest.mark.parametrize("env_id", ENV_IDS)
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 10_000), data=st.data())
def test_fuzzed_actions_keep_the_contract(env_id, seed, data):
    fuzz(env_id, seed, data, steps=8)


@pytest.mark.slow
@pytest.mark.parametrize("env_id", ENV_IDS)
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 10**6), data=st.data())
def test_long_fuzz_keeps_the_contract(env_id, seed, data):
    fuzz(env_id, seed, data, steps=30)
