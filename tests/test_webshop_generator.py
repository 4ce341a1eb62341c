"""The embedded procedural catalog: determinism, WebShop-like statistics, hard goals."""

from __future__ import annotations

import collections
import statistics

import pytest

from paw_gym.webshop import vocab
from paw_gym.webshop.env import WebShopEnv
from paw_gym.webshop.generator import (_attribute_pool, attribute_vocabulary,
                                       generate_products, query_vocabulary)
from paw_gym.webshop.reward import purchase_reward, token_set_score


@pytest.fixture(scope="module")
def products():
    return generate_products(1000, seed=0)


def test_generation_is_deterministic_per_seed(products):
    assert generate_products(1000, seed=0) == products
    assert generate_products(1000, seed=1) != products
    assert len({p.asin for p in products}) == 1000
    for n in (1, 13, 250):
        assert len(generate_products(n, seed=2)) == n


def test_statistics_resemble_the_real_catalog(products):
    categories = collections.Counter(p.category for p in products)
    assert set(categories) == {"beauty", "electronics", "fashion", "garden", "grocery"}
    assert 0.35 <= sum(bool(p.options) for p in products) / len(products) <= 0.50
    assert 0.35 <= sum(bool(p.instruction) for p in products) / len(products) <= 0.50
    assert 22 <= statistics.median(p.pricing[0] for p in products) <= 38
    assert 0.03 <= sum(len(p.pricing) == 2 for p in products) / len(products) <= 0.15
    depths = {len(p.product_category.split(" › ")) for p in products}
    assert depths <= {3, 4, 5} and len(depths) == 3
    groups = {g for p in products for g in p.options}
    assert {"color", "size"} <= groups and groups & {"style", "flavor name", "scent"}
    assert len(query_vocabulary()) >= 200 and len(attribute_vocabulary()) >= 300


def test_attribute_phrases_of_a_category_cannot_be_confused_by_the_reward():
    """Distractors must really miss an attribute: no phrase fuzzy-matches or contains another."""
    for category in vocab.CATEGORIES:
        phrases = [a for role in _attribute_pool(category).values() for a in role]
        assert len(phrases) == len(set(phrases)) >= 60
        for i, a in enumerate(phrases):
            for b in phrases[i + 1:]:
                assert token_set_score(a, b) <= 85 and a not in b and b not in a, (a, b)


def test_every_test_goal_has_at_least_ten_near_distractors():
    env = WebShopEnv(split="test", cache_dir=False)
    by_query = collections.defaultdict(list)
    for p in env.catalog.products:
        by_query[p.query].append(p)
    for goal in env.goals:
        distractors = 0
        for p in by_query[goal.query]:
            if p.asin == goal.asin:
                continue
            chosen = {name: next((v for v in goal.goal_options if v in values), values[0])
                      for name, values in p.options.items()}
            score, _ = purchase_reward(p, goal, env.prices[p.asin], chosen)
            distractors += score < 1.0
        assert distractors >= 10, goal.instruction_text


def test_goals_need_paging_or_inspection_sometimes():
    """The instruction alone does not always put the target on the first results page."""
    from paw_gym.webshop.expert import instruction_phrase
    env = WebShopEnv(split="test", cache_dir=False)
    ranks = []
    for goal in env.goals:
        hits = [p.asin for p in env.catalog.search(instruction_phrase(goal))]
        ranks.append(hits.index(goal.asin) if goal.asin in hits else 50)
    beyond_first_page = sum(r >= 10 for r in ranks) / len(ranks)
    assert 0.1 <= beyond_first_page <= 0.6


def test_no_option_value_is_shared_between_groups(products):
    """WebShop maps a clicked value to one option group, so shared values would be unpickable."""
    for p in products:
        values = [v for vs in p.options.values() for v in vs]
        assert len(values) == len(set(values)), p.options
