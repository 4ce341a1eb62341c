"""HistoryPrompt and ParseAction, alone and composed with Gymnasium's wrappers and vector envs."""

from __future__ import annotations

import gymnasium as gym
import pytest
from gymnasium.wrappers import RecordEpisodeStatistics, TimeLimit

from tests.common import GUESS_ID
from tests.envs import GuessNumberEnv
from wrappers import TEMPLATES, HistoryPrompt, ParseAction, extract_action
from wrappers.templates import ALFWORLD_TEMPLATE, SEARCH_TEMPLATE, WEBSHOP_TEMPLATE


def act(text: str) -> str:
    return f"<think>reasoning</think><action>{text}</action>"


def test_paper_templates_keep_the_papers_wording():
    assert ALFWORLD_TEMPLATE.startswith("You are an expert agent operating in the ALFRED embodied Environment.")
    assert "Your admissible actions of the current situation are: [{admissible_actions}]" in ALFWORLD_TEMPLATE
    assert "operating in the WebShop e-commerce environment" in WEBSHOP_TEMPLATE
    assert "[{available_actions}]" in WEBSHOP_TEMPLATE
    assert "History: {memory_context}" in SEARCH_TEMPLATE
    assert "For example, <answer>Beijing</answer>." in SEARCH_TEMPLATE


def test_history_prompt_shows_the_last_two_steps_by_default():
    env = HistoryPrompt(GuessNumberEnv(high=8), template="alfworld")
    prompt, info = env.reset(seed=0, options={"target": 8})
    assert "Your task is to: find the hidden number between 1 and 8." in prompt
    assert "Prior to this step" not in prompt  # first step: no-history variant
    assert info["raw_observation"].startswith("Your task is to:")
    for guess in (1, 2, 3):
        prompt, *_ = env.step(f"guess {guess}")
    assert "already taken 3 step(s)" in prompt
    assert "the most recent 2 observations" in prompt
    assert "Action 2: 'guess 2'" in prompt and "Action 3: 'guess 3'" in prompt
    assert "Action 1:" not in prompt
    assert "You are now at step 4 and your current observation is: Go higher." in prompt
    assert "'guess 1'\n 'guess 2'" in prompt


def test_history_prompt_full_history_and_custom_template():
    env = HistoryPrompt(GuessNumberEnv(), template="Goal: {task_description} | {action_history} | now: {current_observation}",
                        history_length=None)
    env.reset(seed=0, options={"target": 8})
    for guess in range(1, 6):
        prompt, *_ = env.step(f"guess {guess}")
    assert all(f"Action {n}: 'guess {n}'" in prompt for n in range(1, 6))
    assert prompt.startswith("Goal: find the hidden number")
    with pytest.raises(ValueError, match="unknown prompt template slot"):
        HistoryPrompt(GuessNumberEnv(), template="{not_a_slot}")
    with pytest.raises(ValueError, match="unknown template"):
        HistoryPrompt(GuessNumberEnv(), template="alfwrld")
    with pytest.raises(ValueError, match="history_length"):
        HistoryPrompt(GuessNumberEnv(), history_length=-1)


def test_search_memory_context_pairs_actions_with_results():
    env = HistoryPrompt(GuessNumberEnv(), template="search", history_length=None)
    prompt, _ = env.reset(seed=0, options={"target": 8})
    assert "Prior to this step" not in prompt
    env.step("guess 1")
    prompt, *_ = env.step("guess 2")
    assert "History: guess 1\nGo higher.\nguess 2\nGo higher." in prompt


def test_webshop_available_actions_include_search_when_allowed():
    class SearchPage(GuessNumberEnv):
        def _reset(self, options):
            observation, info = super()._reset(options)
            return observation, {**info, "search_allowed": True, "admissible_actions": ["click[back]"]}

    prompt, _ = HistoryPrompt(SearchPage(), template="webshop").reset(seed=0)
    assert "['search[<your query>]',\n'click[back]']" in prompt


@pytest.mark.parametrize("text, expected", [
    ("<think>x</think><action> guess 3 </action>", ("guess 3", None)),
    ("<action>a</action><action>b</action>", (None, "2 action elements; exactly one is allowed")),
    ("no tags at all", (None, "missing <action>...</action>")),
    ("<action></action>", (None, "empty <action> element")),
    ("<action>open", (None, "unbalanced <action> / </action> tags")),
    ("</action>x<action>", (None, "</action> comes before <action>")),
])
def test_extract_action(text, expected):
    assert extract_action(text) == expected


def test_extract_search_format():
    assert extract_action("<think>t</think><search> capital of France </search>", "search") == (
        "<search>capital of France</search>", None)
    assert extract_action("<answer>Paris</answer>", "search") == ("<answer>Paris</answer>", None)
    assert extract_action("<search>a</search><answer>b</answer>", "search")[1] is not None
    assert extract_action("<action>x</action>", "search")[1] is not None
    assert extract_action("<action>x</action>", require_think=True) == (None, "missing <think>...</think>")


def test_parse_action_penalises_and_leaves_state_unchanged():
    env = ParseAction(GuessNumberEnv(), invalid_penalty=-0.5)
    observation, _ = env.reset(seed=0, options={"target": 4})
    after, reward, terminated, _, info = env.step("I will guess 2")
    assert (after, reward, terminated, info["invalid_action"]) == (observation, -0.5, False, True)
    assert info["parsed_action"] is None and "missing" in info["parse_error"]
    _, reward, _, _, info = env.step(act("guess 77"))  # well-formed but not admissible
    assert (reward, info["invalid_action"], info["parsed_action"]) == (-0.5, True, "guess 77")
    _, reward, terminated, _, info = env.step(act("guess 4"))
    assert (reward, terminated, info["invalid_action"], info["won"]) == (10.0, True, False, True)
    with pytest.raises(ValueError, match="action_format"):
        ParseAction(GuessNumberEnv(), action_format="json")


def make_agent_env():
    env = gym.make(GUESS_ID)  # TimeLimit(6) from registration
    env = HistoryPrompt(env, template="alfworld")
    env = ParseAction(env)
    return RecordEpisodeStatistics(env)


def test_wrappers_compose_with_time_limit_and_episode_statistics():
    env = RecordEpisodeStatistics(TimeLimit(ParseAction(HistoryPrompt(GuessNumberEnv())), max_episode_steps=3))
    env.reset(seed=0, options={"target": 8})
    results = [env.step("junk") for _ in range(3)]
    assert [r[3] for r in results] == [False, False, True]
    episode = results[-1][4]["episode"]
    assert episode["l"] == 3 and episode["r"] == pytest.approx(-0.3)


@pytest.mark.parametrize("vector_cls", [gym.vector.SyncVectorEnv, gym.vector.AsyncVectorEnv])
def test_wrappers_run_in_vector_envs(vector_cls):
    kwargs = {"shared_memory": False} if vector_cls is gym.vector.AsyncVectorEnv else {}
    envs = vector_cls([make_agent_env for _ in range(3)], **kwargs)
    try:
        prompts, infos = envs.reset(seed=[1, 2, 3])
        assert len(prompts) == 3 and all(p.startswith("You are an expert agent") for p in prompts)
        targets = envs.call("expert_action")
        _, rewards, terminated, _, infos = envs.step(tuple(act(t) for t in targets))
        assert list(terminated) == [True] * 3
        assert list(rewards) == [10.0] * 3
        assert list(infos["won"]) == [True] * 3
    finally:
        envs.close()


def test_async_vector_env_with_shared_memory_fails_with_a_clear_message():
    with pytest.raises(ValueError, match="shared_memory=False"):
        gym.vector.AsyncVectorEnv([make_agent_env, make_agent_env])


def test_the_wrapped_stack_records_its_constructor_args_and_round_trips_through_its_spec():
    env = ParseAction(HistoryPrompt(gym.make("PaW/Shelf-v0", split="test"), template="webshop",
                                    history_length=1), invalid_penalty=-0.5)
    names = [(w.name, w.kwargs) for w in env.spec.additional_wrappers]
    assert ("HistoryPrompt", {"template": "webshop", "history_length": 1,
                              "first_step_template": None}) in names
    assert ("ParseAction", {"action_format": "action", "invalid_penalty": -0.5,
                            "require_think": False}) in names
    again = gym.make(env.spec)
    assert again.reset(seed=3) == env.reset(seed=3)
    assert again.step("<action>pay</action>")[1] == env.step("<action>pay</action>")[1] == -0.5
