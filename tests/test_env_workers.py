"""Env worker processes (``rollout(..., num_env_workers=N)``): same trajectories as in-process
envs, worker failures surface in the parent, no process outlives its rollout."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import pickle
import sys

import gymnasium as gym
import pytest

from agents import ExpertAgent, RandomAgent, rollout
from agents.env_workers import EnvWorkerError, EnvWorkers
from agents.envs import env_factory, make_agent_env
from agents.types import PolicyOutput
from tests.common import GUESS_ID
from wrappers import RecordTransitions, WMReplay

SHELF_ID = "PaW/Shelf-v0"


class HashPolicy:
    """A deterministic policy-like backend: the response (a valid action, or sometimes broken
    output) is a hash of prompt and seed; token ids and entropies ride along."""

    def act(self, prompts, temperature=1.0, max_new_tokens=256, stop=None, seed=None):
        outputs = []
        for prompt in prompts:
            digest = hashlib.sha256(f"{seed}|{prompt}".encode()).digest()
            text = "<think>hm</think>no tags" if digest[0] < 40 else \
                f"<think>hm</think><action>guess {digest[1] % 8 + 1}</action>"
            outputs.append(PolicyOutput(text=text, prompt_ids=list(digest[:4]),
                                        response_ids=list(digest[4:9]), logprobs=[-0.5] * 5,
                                        entropies=[digest[9] / 255] * 5))
        return outputs


def transcript(trajectories):
    """Everything a trajectory holds, as plain data (prompts, outputs, actions, observations,
    rewards, flags, infos of every transition)."""
    return [(t.task_id, t.task_type, t.group_index, t.initial_observation, t.won,
             [(s.prompt, s.output.text, s.action, s.next_observation, s.reward, s.terminated,
               s.truncated, s.invalid_action, s.info) for s in t.transitions])
            for t in trajectories]


@pytest.fixture(autouse=True)
def no_process_left():
    yield
    assert multiprocessing.active_children() == []


@pytest.mark.parametrize("env_id", [GUESS_ID, SHELF_ID])
@pytest.mark.parametrize("agent", [RandomAgent(), ExpertAgent(epsilon=0.3), HashPolicy()],
                         ids=["random", "expert", "policy"])
def test_workers_give_the_same_trajectories(env_id, agent):
    in_process = rollout(agent, env_id, 3, 3, seed=7, max_steps=5)
    assert sum(len(t) for t in in_process) > 9  # several steps, not just one
    for workers in (1, 2, 4):
        assert transcript(rollout(agent, env_id, 3, 3, seed=7, max_steps=5,
                                  num_env_workers=workers)) == transcript(in_process)


def test_remote_env_forwards_reads_and_calls():
    make = env_factory(GUESS_ID, action_format="search")
    local = make()
    local.reset(seed=3)
    with EnvWorkers(make, 3, 2) as workers:
        workers.reset([(i, 3, None) for i in range(3)])
        env = workers.handles[2]
        assert env.action_format == "search"
        assert env.unwrapped.high == 8
        assert env.unwrapped.expert_action() == local.unwrapped.expert_action()
        assert getattr(env.unwrapped, "no_such_method", None) is None


def test_policy_metadata_reaches_a_recorder_in_the_worker(tmp_path):
    def recorded():
        return RecordTransitions(make_agent_env(GUESS_ID), str(tmp_path))

    trajectories = rollout(HashPolicy(), recorded, 2, 2, seed=1, max_steps=3, num_env_workers=2)
    records = WMReplay.load(tmp_path).to_list()
    assert len(records) == sum(len(t) for t in trajectories)
    sent = {(tuple(s.output.response_ids), s.output.mean_entropy)
            for t in trajectories for s in t.transitions}
    assert {(tuple(r["response_ids"]), r["action_entropy"]) for r in records} == sent


class FailingStep(gym.Wrapper):
    """Raises (or kills its process) on the second step."""

    def __init__(self, env, exit_code=None):
        super().__init__(env)
        self.exit_code, self.steps = exit_code, 0

    def step(self, action):
        self.steps += 1
        if self.steps == 2:
            if self.exit_code is not None:
                os._exit(self.exit_code)
            raise ConnectionError("the env service is down")
        return self.env.step(action)


def test_a_worker_exception_surfaces_with_its_traceback():
    with pytest.raises(EnvWorkerError, match="the env service is down") as error:
        rollout(RandomAgent(), lambda: FailingStep(make_agent_env(SHELF_ID)), 2, 2, seed=0,
                num_env_workers=2)
    assert "Traceback" in str(error.value) and "in step" in str(error.value)


def test_a_failing_env_constructor_surfaces():
    def broken():
        raise FileNotFoundError("no game files here")

    with pytest.raises(EnvWorkerError, match="no game files here"):
        rollout(RandomAgent(), broken, 2, 1, num_env_workers=2)


def test_a_dead_worker_is_reported():
    with pytest.raises(EnvWorkerError, match=r"exited unexpectedly \(exit code 3\)"):
        rollout(RandomAgent(), lambda: FailingStep(make_agent_env(SHELF_ID), exit_code=3), 2, 1,
                seed=0, num_env_workers=1)


@pytest.mark.parametrize("bad", [-1, 1.5, "2", True])
def test_bad_num_env_workers(bad):
    with pytest.raises(ValueError, match="num_env_workers must be an integer >= 0"):
        rollout(RandomAgent(), SHELF_ID, 2, 1, num_env_workers=bad)


def test_more_workers_than_envs_is_capped():
    assert transcript(rollout(RandomAgent(), SHELF_ID, 2, 1, seed=4, num_env_workers=8)) == \
        transcript(rollout(RandomAgent(), SHELF_ID, 2, 1, seed=4))


def test_spawned_workers_build_envs_from_the_picklable_factory():
    # Fork is the default on Linux; spawn (macOS, Windows) pickles the factory (~2 s: imports).
    make = env_factory(SHELF_ID, history_length=1)
    pickle.dumps(make)
    local = make()
    with EnvWorkers(make, 2, 1, start_method="spawn") as workers:
        (prompt, info), _ = workers.reset([(0, 5, None), (1, 6, None)])
        assert (prompt, info) == local.reset(seed=5)
        assert workers.handles[0].unwrapped.expert_action() == local.unwrapped.expert_action()


def test_the_env_collector_reads_num_env_workers_from_the_config(monkeypatch):
    from training.config import TrainConfig
    from training.rl.collect import EnvCollector

    started = []

    class CountedWorkers(EnvWorkers):
        def __init__(self, make_env, num_envs, num_workers):
            started.append(num_workers)
            super().__init__(make_env, num_envs, num_workers)

    # sys.modules: ``agents.rollout`` as an attribute is the function (agents/__init__.py)
    monkeypatch.setattr(sys.modules["agents.rollout"], "EnvWorkers", CountedWorkers)
    config = TrainConfig(env_id=SHELF_ID, max_episode_steps=4)
    in_process = EnvCollector(config)(RandomAgent(), [1, 2], 2, 1.0, seed=3)
    config.num_env_workers = 2  # until TrainConfig has the field
    with_workers = EnvCollector(config)(RandomAgent(), [1, 2], 2, 1.0, seed=3)
    assert started == [2] and transcript(with_workers) == transcript(in_process)
