"""Every registered PaW env through Gymnasium's own checks: ``check_env``, the same seed giving
the same episode, a copy (``pickle``, ``copy.deepcopy``) after ``reset`` and mid-episode that
goes on exactly as the original (same observations, rewards, ends and infos for the same
actions), and an ``AsyncVectorEnv`` whose workers are spawned (each builds its env from a
pickled factory, as on macOS and Windows).

Process-based vector envs, search agents that branch an episode and checkpointing env state
rely on the copy; SearchQA copies its retriever's settings (the index is shared per process)
and ALFWorld its game and the commands played (the engine is loaded again and replays them).
"""

from __future__ import annotations

import copy
import functools
import pickle
import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import paw_gym

#: The registered PaW envs (``PaW/Text-v0`` wraps any Gymnasium env: it has no env of its own).
ENV_IDS = sorted(env_id for env_id in paw_gym.list_text_envs()
                 if env_id.startswith("PaW/") and env_id != "PaW/Text-v0")
#: Constructor arguments for a quiet env.
KWARGS = {"PaW/ALFWorld-v0": {"progress": False}}
#: Envs whose construction takes seconds: one spawned worker each, and only in CI's heavy run.
SLOW = ("PaW/ALFWorld-v0", "PaW/WebShop-v0")


def make(env_id: str) -> gym.Env:
    return gym.make(env_id, **KWARGS.get(env_id, {}))


def play(env: gym.Env, steps: int) -> list[tuple]:
    """``steps`` steps of the expert, with one action the env does not take among them;
    each step's observation, reward, ends and info (a new episode after an end)."""
    results = []
    for index in range(steps):
        action = "no such action here" if index == 1 else env.unwrapped.expert_action()
        observation, reward, terminated, truncated, info = env.step(action)
        results.append((observation, reward, terminated, truncated, info))
        if terminated or truncated:
            env.reset(seed=index)
    return results


def test_the_nine_envs_are_checked():
    assert len(ENV_IDS) == 9, ENV_IDS


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_gymnasium_checks_and_the_same_seed_gives_the_same_episode(env_id):
    env = make(env_id)
    with warnings.catch_warnings():  # check_env's advice on spaces it cannot sample from
        warnings.simplefilter("ignore")
        check_env(env.unwrapped, skip_render_check=True)
    first, again = make(env_id), make(env_id)
    assert first.reset(seed=7) == again.reset(seed=7)
    assert play(first, 4) == play(again, 4)


@pytest.mark.parametrize("env_id", ENV_IDS)
@pytest.mark.parametrize("copying", ["pickle", "deepcopy"])
def test_a_copy_after_reset_and_mid_episode_goes_on_as_the_original(env_id, copying):
    duplicate = (lambda env: pickle.loads(pickle.dumps(env))) if copying == "pickle" \
        else copy.deepcopy
    env = make(env_id)
    env.reset(seed=3)
    after_reset = duplicate(env)
    assert play(after_reset, 3) == play(duplicate(env), 3)  # the copy, twice over
    play(env, 2)
    mid_episode = duplicate(env)
    assert play(mid_episode, 4) == play(env, 4)


@pytest.mark.parametrize("env_id", [pytest.param(env_id, marks=pytest.mark.heavy)
                                    if env_id in SLOW else env_id for env_id in ENV_IDS])
def test_an_async_vector_env_with_spawned_workers_steps_it(env_id):
    # "paw_gym:" makes gym.make import paw_gym (and so register the id) in a fresh worker.
    factory = functools.partial(gym.make, f"paw_gym:{env_id}", **KWARGS.get(env_id, {}))
    envs = gym.vector.AsyncVectorEnv([factory, factory], context="spawn", shared_memory=False)
    try:
        observations, infos = envs.reset(seed=[0, 1])
        local = [make(env_id) for _ in range(2)]
        assert observations == tuple(env.reset(seed=seed)[0] for seed, env in enumerate(local))
        actions = tuple(env.unwrapped.expert_action() for env in local)
        observations, rewards, *_ = envs.step(actions)
        assert observations == tuple(env.step(action)[0] for env, action in zip(local, actions))
    finally:
        envs.close()
