"""WebShop's reward components, goal construction, price bounds and splits."""

from __future__ import annotations

import random

import pytest

from paw_gym.webshop.catalog import Product
from paw_gym.webshop.goals import build_goals, price_bound, split_goals
from paw_gym.webshop.loader import parse_options, parse_pricing
from paw_gym.webshop.reward import (Goal, name_nouns, normalize_color, purchase_reward,
                                    token_set_score, type_reward)


def make_product(**kw) -> Product:
    base = dict(asin="B000000001", title="Acme Stainless Steel Water Bottle",
                description="Keeps drinks cold for 24 hours.", bullets=["BPA free lid"],
                pricing=[19.99], options={"color": ["navy blue", "black"],
                                          "size": ["16 oz", "32 oz"]},
                attributes=["stainless steel", "leak proof"], category="garden",
                query="water bottles", product_category="Home & Kitchen › Kitchen › Bottles")
    base.update(kw)
    return Product(**base)


def make_goal(**kw) -> Goal:
    base = dict(asin="B000000001", instruction_text="Find me leak proof water bottles",
                query="water bottles", category="garden",
                product_category="Home & Kitchen › Kitchen › Bottles",
                name="Acme Stainless Steel Water Bottle",
                attributes=("leak proof", "bpa free"), goal_options=("navy blue", "32 oz"),
                option_names=("color", "size"), price_upper=30.0)
    base.update(kw)
    return Goal(**base)


def test_normalize_color_follows_webshop_cases():
    cases = [("", ""), ("black forest", "black"), ("violet lavender", "lavender"),
             ("steelivy fuchsia", "fuchsia"), ("123alabaster", "alabaster"),
             ("webshop", "webshop")]
    for text, expected in cases:
        assert normalize_color(text) == expected


def test_token_set_score_is_thefuzz_compatible():
    assert token_set_score("Sulfate-Free!", "sulfate free") == 100  # punctuation, case
    assert token_set_score("gluten free", "free") == 100  # subset of tokens
    assert token_set_score("", "anything") == 0
    assert token_set_score("dry skin", "oily skin") < 85
    assert isinstance(token_set_score("a b", "a c"), int)


def test_full_purchase_scores_one_and_each_miss_costs_its_share():
    product, goal = make_product(), make_goal()
    chosen = {"color": "navy blue", "size": "32 oz"}
    score, info = purchase_reward(product, goal, 19.99, chosen)
    # "bpa free" is found in the bullets (substring rule), "leak proof" among attributes.
    assert score == 1.0 and info["n_attr"] == 2 and info["n_option"] == 2
    # Wrong size (exact match for size), over budget, an attribute the product lacks.
    assert purchase_reward(product, goal, 19.99, {"color": "navy blue", "size": "16 oz"})[0] \
        == pytest.approx(4 / 5)
    assert purchase_reward(product, goal, 35.0, chosen)[0] == pytest.approx(4 / 5)
    lacking = make_product(bullets=["Dishwasher safe"])
    assert purchase_reward(lacking, goal, 19.99, chosen)[0] == pytest.approx(4 / 5)
    # Colours are compared after WebShop's normalisation (first colour word of its list in
    # the value): "royal blue" and "navy blue" both become "blue" and match; "navy" does not.
    assert purchase_reward(product, goal, 19.99, {"color": "royal blue", "size": "32 oz"})[0] \
        == 1.0
    assert purchase_reward(product, goal, 19.99, {"color": "navy", "size": "32 oz"})[0] \
        == pytest.approx(4 / 5)
    # No option chosen: only attributes and price count.
    assert purchase_reward(product, goal, 19.99, {})[0] == pytest.approx(3 / 5)


def test_type_reward_steps():
    goal = make_goal()
    assert type_reward(make_product(), goal)["r_type"] == 1.0
    other = make_product(query="phone cases", product_category="Electronics › Cases",
                         title="Zeta Phone Case for Bottle Lovers Steel Edition")
    info = type_reward(other, goal)
    assert not info["query_match"] and not info["category_match"]
    # shares "steel" and "bottle" out of the goal name's nouns -> partial title score.
    assert 0.2 < info["title_score"] < 1 and info["r_type"] == 1.0
    unrelated = make_product(query="phone cases", product_category="Electronics › Cases",
                             title="Zeta Phone Case")
    assert type_reward(unrelated, goal)["r_type"] == 0.0
    assert purchase_reward(unrelated, goal, 19.99, {})[0] == 0.0
    assert "bottle" in name_nouns("Acme Water Bottle, 32 oz, Leak Proof")


def test_price_bound_rule():
    rng = random.Random(0)
    for price in [0.5, 9.99, 10.0, 29.23, 877.8, 955.0]:
        for _ in range(20):
            upper, text = price_bound(price, rng)
            steps = [10.0 * i for i in range(1, 100) if 10.0 * i > price][:4]
            assert upper in steps[1:] and upper > price
            assert text == f", and price lower than {upper:.2f} dollars"
    assert price_bound(985.0, rng) == (1_000_000.0, "")  # fewer than two steps left


def test_parsing_of_raw_fields():
    assert parse_pricing("") == [100.0]
    assert parse_pricing("$19.99 - $27.99") == [19.99, 27.99]
    assert parse_pricing("$1,299.00") == [1299.0]
    assert parse_options({"Color": [{"value": "Black/White "}], "Size": None}) == \
        {"color": ["black | white"]}
    assert make_product(pricing=[877.8]).price_tag == "$877.8"
    assert make_product(pricing=[10.0, 20.5]).price_tag == "$10.0 to $20.5"


def _products(n: int) -> list[Product]:
    out = []
    for i in range(n):
        options = {"size": ["s", "m"], "color": ["red", "blue", "green"]} if i % 2 else {}
        out.append(make_product(asin=f"B{i:09d}", options=options, pricing=[5.0 + i],
                                instruction=f"Find me item {i}" if i % 3 else None,
                                instruction_attributes=["leak proof"] if i % 3 else None))
    return out


def test_synthetic_goals_cover_option_combinations_and_are_deterministic():
    products = _products(30)
    goals, prices = build_goals(products)
    with_options = [p for p in products if p.instruction and p.options]
    without = [p for p in products if p.instruction and not p.options]
    assert len(goals) == 6 * len(with_options) + len(without)
    sample = next(g for g in goals if g.goal_options)
    assert sample.option_names == ("color", "size")  # sorted option groups
    assert " with color: " in sample.instruction_text and ", and size: " in sample.instruction_text
    assert sample.instruction_text.endswith(f", and price lower than {sample.price_upper:.2f} "
                                            "dollars")
    again, prices2 = build_goals(products)
    assert again == goals and prices2 == prices
    # Every goal's own target satisfies it (price below the bound).
    assert all(prices[g.asin] <= g.price_upper for g in goals)


def test_splits_are_positional_and_reject_bad_names():
    goals = list(range(2000))
    assert split_goals(goals, "test") == list(range(500))
    assert split_goals(goals, "dev") == list(range(500, 1500))
    assert split_goals(goals, "train") == list(range(1500, 2000))
    with pytest.raises(ValueError, match="validation"):
        split_goals(goals, "validation")
    with pytest.raises(ValueError, match="empty"):
        split_goals(list(range(100)), "train")
