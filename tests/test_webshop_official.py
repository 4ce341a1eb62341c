"""PaW/WebShop-v0 on WebShop's real 1,000-product catalog (skipped when the data is absent)."""

from __future__ import annotations

import collections
import json
import re

import gymnasium as gym
import pytest

import paw_gym  # noqa: F401
from paw_gym.webshop.env import WebShopEnv
from paw_gym.webshop.loader import DATA_ENV_VAR, load_official_products

from tests.common import SHARED_DATA

WEBSHOP_DATA = SHARED_DATA / "webshop"
pytestmark = pytest.mark.skipif(not (WEBSHOP_DATA / "items_shuffle_1000.json").is_file(),
                                reason=f"WebShop data not present at {WEBSHOP_DATA}")


@pytest.fixture(scope="module")
def env() -> WebShopEnv:
    return WebShopEnv(split="test", data_dir=WEBSHOP_DATA, cache_dir=False)


def expert_episode(env: WebShopEnv, i: int):
    env.reset(options={"goal_index": i})
    for _ in range(15):
        obs, reward, terminated, truncated, info = env.step(env.expert_action())
        assert not info["invalid_action"]
        if terminated:
            return reward, info
    return 0.0, info


def test_catalog_loads_like_webshop():
    products, source = load_official_products(WEBSHOP_DATA, 1000)
    raw = json.loads((WEBSHOP_DATA / "items_shuffle_1000.json").read_text())
    assert len(products) == len({r["asin"] for r in raw}) == 1000
    assert "items_shuffle_1000.json" in source
    assert collections.Counter(p.category for p in products).keys() == \
        {"beauty", "electronics", "fashion", "garden", "grocery"}
    assert sum(bool(p.instruction) for p in products) == 415
    first = products[0]
    assert first.asin == raw[0]["asin"] and first.title == raw[0]["name"]
    assert first.price_tag == raw[0]["pricing"]  # "$877.8" is kept as WebShop prints it
    ranged = next(p for p in products if len(p.pricing) == 2)
    assert " to $" in ranged.price_tag


def test_goals_and_splits_match_webshop_construction(env):
    everything = WebShopEnv(split="all", data_dir=WEBSHOP_DATA, cache_dir=False)
    # One goal per option combination of each of the 415 instructed products.
    assert len(everything.goals) == 6910
    assert everything.goals[:500] == env.goals
    assert WebShopEnv(split="dev", data_dir=WEBSHOP_DATA, cache_dir=False).goals == \
        everything.goals[500:1500]
    assert all(g.instruction_text.startswith("Find me ") for g in env.goals)


def test_data_dir_from_environment_variable(monkeypatch):
    monkeypatch.setenv(DATA_ENV_VAR, str(WEBSHOP_DATA))
    made = gym.make("PaW/WebShop-v0", split="test", cache_dir=False)
    obs, info = made.reset(options={"goal_index": 0})
    assert "official WebShop data" in info["data_source"]
    assert "official WebShop data" in repr(made.unwrapped)


def test_missing_or_wrong_data_dir_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a directory"):
        WebShopEnv(data_dir=tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="items_shuffle"):
        WebShopEnv(data_dir=tmp_path)


def test_observations_look_like_webshop(env):
    obs, info = env.reset(options={"goal_index": 0})
    goal = info["task_description"]
    assert obs == f"WebShop [SEP] Instruction: [SEP] {goal} [SEP] Search"
    obs, *_ , info = env.step(f"search[{env.goal.query}]")
    assert obs.startswith(f"Instruction: [SEP] {goal} [SEP] Back to Search [SEP] Page 1 "
                          "(Total results: ")
    assert re.search(r"\[SEP\] Next > \[SEP\] B[0-9A-Z]{9} \[SEP\] ", obs)
    target = env.catalog.by_asin[env.goal.asin]
    env.reset(options={"goal_index": 0})
    obs, *_ = env.step(f"search[{target.title}]")
    obs, *_ = env.step(f"click[{target.asin.lower()}]")
    assert obs.endswith(f"[SEP] Price: {target.price_tag} [SEP] Rating: {target.rating} [SEP] "
                        "Description [SEP] Features [SEP] Reviews [SEP] Buy Now")


def test_every_real_test_goal_is_solved_by_the_expert(env):
    results = [expert_episode(env, i) for i in range(len(env.goals))]
    assert sum(info["score"] == 1.0 for _, info in results) / len(results) >= 0.99
    assert all(reward == 10.0 * info["won"] for reward, info in results)


@pytest.mark.slow
def test_every_real_goal_is_solved_by_the_expert():
    env = WebShopEnv(split="all", data_dir=WEBSHOP_DATA, cache_dir=False)
    wins = sum(expert_episode(env, i)[1]["won"] for i in range(len(env.goals)))
    assert wins / len(env.goals) >= 0.99

