"""PaW/WebShop-v0 on the embedded catalog: contract, pages, navigation, expert, robustness."""

from __future__ import annotations

import re

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import paw_gym  # noqa: F401  (registers the env ids)
from paw_gym import INFO_KEYS
from paw_gym.webshop.env import WebShopEnv, parse_action


@pytest.fixture(scope="module")
def env() -> WebShopEnv:
    return WebShopEnv(split="test", cache_dir=False)


def run_expert(env: WebShopEnv, goal_index: int, max_steps: int = 15):
    obs, info = env.reset(options={"goal_index": goal_index})
    actions = []
    for _ in range(max_steps):
        action = env.expert_action()
        actions.append(action)
        obs, reward, terminated, truncated, info = env.step(action)
        assert not info["invalid_action"], (action, obs)
        if terminated:
            return reward, info, actions
    return 0.0, info, actions


def test_check_env_passes(env):
    check_env(env, skip_render_check=True)


def test_gym_make_applies_the_15_step_limit_and_shows_the_source():
    made = gym.make("PaW/WebShop-v0", split="test", cache_dir=False)
    assert made.spec.max_episode_steps == 15
    obs, info = made.reset(seed=3)
    assert "embedded procedural catalog" in info["data_source"]
    assert "embedded procedural catalog" in repr(made.unwrapped)
    truncated = False
    for step in range(15):
        obs, reward, terminated, truncated, info = made.step("click[nothing here]")
        assert info["invalid_action"] and reward == 0.0 and not terminated
    assert truncated


def test_reset_info_and_search_page(env):
    obs, info = env.reset(options={"goal_index": 0})
    goal = env.goals[0].instruction_text
    assert obs == f"WebShop [SEP] Instruction: [SEP] {goal} [SEP] Search"
    assert set(INFO_KEYS) <= set(info)
    assert info["task_description"] == goal and goal.startswith("Find me ")
    assert info["task_id"] == "webshop-test-0"
    assert info["task_type"] in {"beauty", "electronics", "fashion", "garden", "grocery"}
    assert info["admissible_actions"] == [] and info["search_allowed"] is True
    assert info["won"] is False and info["score"] == 0.0


def test_seeded_resets_are_deterministic_and_goal_index_selects(env):
    first = [env.reset(seed=s)[1]["task_id"] for s in range(20)]
    again = [env.reset(seed=s)[1]["task_id"] for s in range(20)]
    assert first == again and len(set(first)) > 5
    other = WebShopEnv(split="test", cache_dir=False)
    assert [other.reset(seed=s)[1]["task_id"] for s in range(20)] == first
    with pytest.raises(ValueError, match="goal_index"):
        env.reset(options={"goal_index": 10_000})


def test_results_item_and_sub_pages_look_like_webshop(env):
    env.reset(options={"goal_index": 1})
    goal = env.goal
    obs, reward, term, trunc, info = env.step(f"search[{goal.query}]")
    assert reward == 0.0 and not info["invalid_action"]
    assert obs.startswith(f"Instruction: [SEP] {goal.instruction_text} [SEP] Back to Search "
                          f"[SEP] Page 1 (Total results: {len(env.results)}) [SEP] ")
    first = env.results[0]
    assert f" [SEP] {first.asin} [SEP] {first.title} [SEP] {first.price_tag}" in obs
    assert info["search_allowed"] is False
    assert "click[back to search]" in info["admissible_actions"]
    assert f"click[{first.asin.lower()}]" in info["admissible_actions"]
    if len(env.results) > 10:
        assert "click[next >]" in info["admissible_actions"]
        obs, *_ , info = env.step("click[Next >]")  # case-insensitive like WebShop
        assert "Page 2 (Total results:" in obs and "click[< prev]" in info["admissible_actions"]
        obs, *_ , info = env.step("click[< prev]")
        assert "Page 1 (Total results:" in obs
    obs, *_, info = env.step(f"click[{first.asin.lower()}]")
    assert f"[SEP] {first.title} [SEP] Price: {first.price_tag} [SEP] Rating: {first.rating} " \
           "[SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now" in obs
    assert obs.startswith(f"Instruction: [SEP] {goal.instruction_text} [SEP] Back to Search "
                          "[SEP] < Prev")
    for group, values in first.options.items():
        assert f" [SEP] {group} [SEP] " + " [SEP] ".join(values) in obs
        assert f"click[{values[0]}]" in info["admissible_actions"]
    obs, *_ = env.step("click[features]")
    assert obs.endswith(" [SEP] ".join(b.strip() for b in first.bullets if b.strip()))
    obs, *_ = env.step("click[< prev]")
    assert "Buy Now" in obs
    obs, *_ = env.step("click[< prev]")
    assert "Page 1 (Total results:" in obs
    obs, *_, info = env.step("click[back to search]")
    assert obs.startswith("WebShop [SEP] Instruction:") and info["search_allowed"]


def test_invalid_actions_are_no_ops(env):
    obs0, info0 = env.reset(options={"goal_index": 2})
    for bad in ["click[buy now]", "search[]", "hello", "click[]", "Search [x]",
                "<action>search[x]</action>", "click[B000000000]"]:
        obs, reward, term, trunc, info = env.step(bad)
        assert (obs, reward, term, info["invalid_action"]) == (obs0, 0.0, False, True), bad
        assert info["task_id"] == info0["task_id"] and info["search_allowed"]
    env.step("search[anything at all]")
    obs1 = env.page.observation
    obs, reward, term, trunc, info = env.step("search[again]")  # no search bar on results
    assert info["invalid_action"] and obs == obs1


def test_expert_wins_every_test_goal(env):
    wins = sum(run_expert(env, i)[1]["won"] for i in range(len(env.goals)))
    assert wins / len(env.goals) >= 0.99


def test_purchase_reward_info_and_end_of_episode(env):
    reward, info, actions = run_expert(env, 3)
    assert reward == 10.0 and info["won"] and info["score"] == 1.0
    assert actions[0].startswith("search[") and actions[-1] == "click[buy now]"
    assert info["purchased_asin"] == env.goal.asin
    obs, reward, term, trunc, info = env.step("click[buy now]")
    assert info["invalid_action"] and reward == 0.0
    assert env.expert_action() == ""


def test_buying_a_distractor_scores_below_one(env):
    env.reset(options={"goal_index": 4})
    goal = env.goal
    env.step(f"search[{goal.query}]")
    wrong = next(p for p in env.results if p.asin != goal.asin)
    env.step(f"click[{wrong.asin.lower()}]")
    obs, reward, term, trunc, info = env.step("click[buy now]")
    assert term and obs.startswith("Thank you for shopping with us!")
    assert info["score"] < 1.0 and reward == 0.0 and not info["won"]


def test_parse_action():
    assert parse_action("click[Buy Now]") == ("click", "buy now")
    assert parse_action(" search[ Red Shoes ] ") == ("search", "red shoes")
    assert parse_action("click Buy Now") is None
    assert parse_action("think[x]") is None


ACTION_TEXT = st.one_of(
    st.text(max_size=40),
    st.builds(lambda v, a: f"{v}[{a}]", st.sampled_from(["click", "search", "Click", "buy"]),
              st.text(max_size=30)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(ACTION_TEXT, st.sampled_from(["admissible", "expert"])), max_size=25),
       st.integers(0, 499))
def test_random_and_fuzzed_actions_never_crash(env, plan, goal_index):
    import random
    chooser = random.Random(goal_index)
    obs, info = env.reset(options={"goal_index": goal_index})
    for item in plan:
        if item == "admissible":
            choices = info["admissible_actions"] or ["search[" + env.goal.query + "]"]
            action = chooser.choice(choices)
        elif item == "expert":
            action = env.expert_action() or "click[buy now]"
        else:
            action = item
        obs, reward, term, trunc, info = env.step(action)
        assert isinstance(obs, str) and reward in (0.0, 10.0)
        assert 0.0 <= info["score"] <= 1.0
        assert all(re.fullmatch(r"click\[.+\]", a) for a in info["admissible_actions"])
        if term:
            break


def test_expert_through_wrappers_and_vector_env():
    vec = gym.vector.SyncVectorEnv([lambda: gym.make("PaW/WebShop-v0", split="test",
                                                     cache_dir=False) for _ in range(2)])
    obs, info = vec.reset(options={"goal_index": 5})
    assert list(info["task_id"]) == ["webshop-test-5", "webshop-test-5"]
    for _ in range(15):
        actions = vec.call("expert_action")
        obs, reward, terminated, truncated, info = vec.step(list(actions))
        if terminated.all():
            break
    assert terminated.all() and (reward == 10.0).all()


def test_default_make_has_all_three_splits():
    """The default embedded 1k catalog yields enough goals (like WebShop's real 1k: 6,910)."""
    made = gym.make("PaW/WebShop-v0", cache_dir=False)
    obs, info = made.reset(seed=0)
    assert info["task_id"].startswith("webshop-train-")
    assert len(made.unwrapped.goals) >= 1500
    assert len(WebShopEnv(split="dev", cache_dir=False).goals) == 1000


def test_visible_expert_acts_only_on_what_the_pages_show():
    from paw_gym.webshop.expert import instruction_phrase

    env = WebShopEnv(split="test", cache_dir=False, expert="visible")
    wins = 0
    for goal_index in range(60):
        obs, info = env.reset(options={"goal_index": goal_index})
        assert env.expert_action() == f"search[{instruction_phrase(env.goal)}]"
        obs, *_ = env.step(env.expert_action())
        first_id = obs.split(" [SEP] ")[obs.split(" [SEP] ").index("Next >") + 1]
        action = env.expert_action()
        assert action == f"click[{first_id}]" and first_id.isupper()  # the ID as displayed
        for _ in range(12):
            obs, reward, terminated, _, info = env.step(action)
            assert not info["invalid_action"], action
            if terminated:
                wins += info["won"]
                break
            action = env.expert_action()
        assert terminated
    assert 0 < wins < 60  # no hidden information: it buys the first hit, often not the target
    with pytest.raises(ValueError, match="expert 'oracle'"):
        WebShopEnv(split="test", cache_dir=False, expert="oracle")
