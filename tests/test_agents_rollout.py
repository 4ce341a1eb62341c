"""agents.rollout and the baselines (random, expert, ReAct, Reflexion) on real envs."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

import paw_gym
from agents import ExpertAgent, HFPolicy, RandomAgent, ReActAgent, ReflexionAgent, rollout
from agents.envs import make_agent_env
from agents.evaluate import format_table, main as evaluate_main, success_table
from agents.prompting import expert_examples
from tests.common import GUESS_ID

BUILTIN_IDS = ("PaW/WebShop-v0", "PaW/ALFWorld-v0", "PaW/SearchQA-v0")


class CountingPolicy(HFPolicy):
    """The real HFPolicy, recording the batch size of every ``act`` call."""

    calls: list[int]

    def act(self, prompts, *args, **kwargs):
        self.calls.append(len(prompts))
        return super().act(prompts, *args, **kwargs)


@pytest.fixture(scope="module")
def policy(tiny_model_dir) -> CountingPolicy:
    torch.set_num_threads(1)
    policy = CountingPolicy(tiny_model_dir, dtype=torch.float32, attn_implementation="eager")
    policy.calls = []
    return policy


def test_groups_share_a_task_and_experts_win(tmp_path):
    trajectories = rollout(ExpertAgent(), GUESS_ID, num_groups=3, group_size=4, seed=5)
    assert len(trajectories) == 12
    for group in range(3):
        members = [t for t in trajectories if t.group_index == group]
        assert len(members) == 4 and len({t.task_id for t in members}) == 1
    assert len({t.task_id for t in trajectories}) > 1
    for t in trajectories:
        assert t.won and len(t) == 1 and t.total_reward == 10.0 and t.task_type == "guess"
        step = t.transitions[0]
        assert step.prompt.startswith("You are an expert agent. Your task is to: find the hidden")
        assert step.output.text.endswith(f"<action>{step.action}</action>")
        assert step.next_observation == "Correct!" and step.terminated and not step.invalid_action
        assert t.initial_observation.startswith("Your task is to: find the hidden number")


def test_random_agent_is_admissible_and_seeded():
    a = rollout(RandomAgent(), GUESS_ID, 4, 2, seed=1)
    b = rollout(RandomAgent(), GUESS_ID, 4, 2, seed=1)
    assert [[s.action for s in t.transitions] for t in a] == \
        [[s.action for s in t.transitions] for t in b]
    steps = [s for t in a for s in t.transitions]
    assert not any(s.invalid_action for s in steps)
    assert all(s.action in s.info["admissible_actions"] for s in steps)
    # A random guesser sometimes fails within the 6-step limit; those episodes are truncated.
    rows = success_table(a + rollout(RandomAgent(), GUESS_ID, 8, 2, seed=2))
    assert 0.0 < rows[0]["success"] < 1.0


def test_one_act_call_per_step_for_all_live_envs(policy):
    policy.calls = []
    trajectories = rollout(policy, GUESS_ID, num_groups=3, group_size=2, max_new_tokens=12,
                           seed=0)
    longest = max(len(t) for t in trajectories)
    assert len(policy.calls) == longest and policy.calls[0] == 6
    assert policy.calls == sorted(policy.calls, reverse=True)
    # each step: as many prompts as envs still running
    assert policy.calls == [sum(len(t) > k for t in trajectories) for k in range(longest)]


def test_policy_token_data_reaches_trajectories_and_the_replay(policy, tmp_path):
    from wrappers import RecordTransitions, WMReplay

    replay_dir = tmp_path / "replay"

    def factory():
        return RecordTransitions(make_agent_env(GUESS_ID), WMReplay(replay_dir))

    trajectories = rollout(policy, factory, 2, 2, temperature=1.0, max_new_tokens=16,
                           max_steps=3, seed=4)
    steps = [s for t in trajectories for s in t.transitions]
    assert all(len(t) == 3 and t.transitions[-1].truncated for t in trajectories)
    for step in steps:
        assert step.output.prompt_ids == policy.encode_prompt(step.prompt, 16)[0]
        assert len(step.output.response_ids) == len(step.output.logprobs) >= 1
        if step.invalid_action:
            assert step.reward == pytest.approx(-0.1)
    records = list(WMReplay.load(replay_dir, strict=True))
    assert len(records) == len(steps)
    by_response = {tuple(s.output.response_ids): s for s in steps}
    for record in records:
        step = by_response[tuple(record["response_ids"])]
        assert record["action_entropy"] == pytest.approx(step.output.mean_entropy)
        assert record["h"] == step.prompt and record["o_next"] == step.next_observation


def test_react_prompts_carry_instruction_and_examples(policy):
    examples = expert_examples(GUESS_ID, num_episodes=1)
    assert "Action: guess" in examples[0] and "Observation: Correct!" in examples[0]
    agent = ReActAgent(policy, examples=examples)
    trajectories = rollout(agent, GUESS_ID, 2, 1, max_new_tokens=8, max_steps=1, seed=0)
    step = trajectories[0].transitions[0]
    react_prompt = agent.build_prompt(step.prompt, {"task_id": trajectories[0].task_id})
    assert react_prompt.startswith("Solve the task by interleaving reasoning and acting")
    assert examples[0] in react_prompt and react_prompt.endswith(step.prompt)
    assert step.output.prompt_ids == policy.encode_prompt(react_prompt, 8)[0]


def test_reflexion_keeps_reflections_across_trials_of_a_task(policy):
    agent = ReflexionAgent(policy, reflection_tokens=8)
    first = rollout(agent, GUESS_ID, 2, 1, max_new_tokens=8, max_steps=2, seed=3)
    failed = {t.task_id for t in first if not t.won}
    assert failed, "the untrained model should fail some task"
    assert set(agent.reflections) == failed
    # What the second trial's prompts must look like: built from the first trial's notes.
    after_first = ReflexionAgent(policy)
    after_first.reflections.update({k: list(v) for k, v in agent.reflections.items()})
    second = rollout(agent, GUESS_ID, 2, 1, max_new_tokens=8, max_steps=2, seed=3)
    assert {t.task_id for t in second} == {t.task_id for t in first}
    for t in second:
        prompt = after_first.build_prompt(t.transitions[0].prompt, {"task_id": t.task_id})
        assert t.transitions[0].output.prompt_ids == policy.encode_prompt(prompt, 8)[0]
        if t.task_id in failed:
            assert "Reflections from your earlier attempts" in prompt
            assert f"- Trial 1: {agent.reflections[t.task_id][0]}" in prompt
    failed_twice = failed & {t.task_id for t in second if not t.won}
    assert all(len(agent.reflections[task]) == 2 for task in failed_twice)


def test_success_table_and_cli(capsys):
    rows = success_table(rollout(ExpertAgent(), GUESS_ID, 3, 1, seed=0))
    assert rows == [{"task_type": "guess", "episodes": 3, "success": 1.0, "return": 10.0,
                     "steps": 1.0, "invalid": 0.0}]
    assert "guess" in format_table(rows)
    assert evaluate_main(["--env", GUESS_ID, "--agent", "expert", "--groups", "2"]) == 0
    out = capsys.readouterr().out
    assert "trial 1/1" in out and "1.000" in out


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="num_groups"):
        rollout(RandomAgent(), GUESS_ID, 0, 1)
    with pytest.raises(ValueError, match="unknown env id"):
        rollout(RandomAgent(), "Nope/Missing-v0", 1, 1)
    with pytest.raises(ValueError, match="task_seeds"):
        rollout(RandomAgent(), GUESS_ID, 2, 1, task_seeds=[1])
    with pytest.raises(TypeError, match="Agent or a policy"):
        rollout(object(), GUESS_ID, 1, 1)


@pytest.mark.parametrize("env_id", BUILTIN_IDS)
def test_baselines_run_on_builtin_envs(env_id):
    paw_gym.register_builtin_envs()
    if env_id not in gym.registry:
        pytest.skip(f"{env_id} is not registered yet")
    try:
        expert = rollout(ExpertAgent(), env_id, 2, 1, seed=0, max_steps=15)
    except FileNotFoundError as error:  # an env whose default needs downloaded data
        pytest.skip(f"{env_id} needs data that is not here: {error}")
    random = rollout(RandomAgent(), env_id, 2, 1, seed=0, max_steps=3)
    for t in expert + random:
        assert t.transitions and t.task_id
        assert t.transitions[0].prompt.startswith("You are an expert")
    assert sum(s.invalid_action for t in expert for s in t.transitions) == 0
