"""WebShop's goal construction, price bounds, weights, fixed shuffle and splits.

Synthetic goals (WebShop's ``get_synthetic_goals``): every product with an instruction gives
one goal per combination of its option values (option groups in sorted order), with the text
``{instruction} with {name}: {value}, and {name}: {value}, and price lower than X.00
dollars``. The price bound is drawn from the first four multiples of ten above the product's
price (two are sampled, the larger is kept); if fewer than two exist, there is no bound.
A product's price is its single price or a uniform draw inside its price range. Goal weight
is the mean over its attributes of ``1 / (number of goals naming that attribute)``.

Human goals (``get_human_goals``) come from ``items_human_ins.json`` instead, weight 1.

All goals are then shuffled once with the fixed seed 233 and split by position: test =
goals 0–499, dev = 500–1499, train = 1500 onwards. Unlike WebShop (whose price draws use the
unseeded global ``random``) every draw here comes from one ``random.Random(seed)``, so goals,
prices and splits are identical in every process, worker and episode seed.
"""

from __future__ import annotations

import itertools
import math
import random
from collections import defaultdict
from typing import Sequence

from paw_gym.webshop.catalog import Product
from paw_gym.webshop.reward import Goal

GOAL_SHUFFLE_SEED = 233
PRICE_STEPS = [10.0 * i for i in range(1, 100)]
NO_PRICE_BOUND = 1_000_000.0
#: Goal positions (after the fixed shuffle) of each split: ``[start, stop)``.
SPLITS = {"test": (0, 500), "dev": (500, 1500), "train": (1500, None)}
GOAL_SOURCES = ("synthetic", "human")


def sample_prices(products: Sequence[Product], rng: random.Random) -> dict[str, float]:
    """The price each product sells at: its price, or a uniform draw inside its range."""
    prices = {}
    for p in products:
        prices[p.asin] = p.pricing[0] if len(p.pricing) == 1 else rng.uniform(*p.pricing[:2])
    return prices


def price_bound(price: float, rng: random.Random) -> tuple[float, str]:
    """``(price_upper, text)`` by WebShop's rule (two of the next four multiples of 10)."""
    first = max(0, int(price // 10) - 1)  # a step or two early, filtered exactly below
    steps = [p for p in PRICE_STEPS[first:first + 6] if p > price][:4]
    if len(steps) < 2:
        return NO_PRICE_BOUND, ""
    _, upper = sorted(rng.sample(steps, 2))
    return upper, f", and price lower than {upper:.2f} dollars"


def synthetic_goals(products: Sequence[Product], prices: dict[str, float],
                    rng: random.Random) -> list[Goal]:
    targets = [p for p in products if p.instruction and p.instruction_attributes]
    # A goal's weight is the mean of 1 / (goals naming the attribute) over its attributes;
    # every option combination of a product is one goal naming the same attributes.
    counts: dict[str, int] = defaultdict(int)
    for p in targets:
        n_combinations = math.prod(len(v) for v in p.options.values())
        for a in p.instruction_attributes:
            counts[a] += n_combinations
    goals: list[Goal] = []
    for p in targets:
        upper, price_text = price_bound(prices[p.asin], rng)
        attributes = tuple(p.instruction_attributes)
        weight = sum(1.0 / counts[a] for a in attributes) / len(attributes)
        names = tuple(sorted(p.options))
        for combo in itertools.product(*(p.options[n] for n in names)):
            option_text = ", and ".join(f"{n}: {v}" for n, v in zip(names, combo))
            option_text = f" with {option_text}" if option_text else ""
            goals.append(Goal(p.asin, f"{p.instruction}{option_text}{price_text}", p.query,
                              p.category, p.product_category, p.title, attributes, combo,
                              names, upper, weight))
    return goals


def human_goals(products: Sequence[Product], prices: dict[str, float],
                rng: random.Random) -> list[Goal]:
    goals = []
    for p in products:
        for ins in p.human_instructions:
            attributes = ins.get("instruction_attributes") or []
            if not attributes:
                continue
            upper, price_text = price_bound(prices[p.asin], rng)
            options = ins.get("instruction_options") or []
            if isinstance(options, dict):
                names, values = tuple(options), tuple(options.values())
            else:
                names, values = tuple("" for _ in options), tuple(options)
            goals.append(Goal(asin=p.asin, instruction_text=ins["instruction"].strip(".")
                              + price_text, query=p.query, category=p.category,
                              product_category=p.product_category, name=p.title,
                              attributes=tuple(attributes), goal_options=values,
                              option_names=names, price_upper=upper, weight=1.0))
    return goals


def build_goals(products: Sequence[Product], source: str = "synthetic",
                seed: int = GOAL_SHUFFLE_SEED) -> tuple[list[Goal], dict[str, float]]:
    """All goals in their fixed shuffled order, and the product prices they were built on."""
    if source not in GOAL_SOURCES:
        raise ValueError(f"goal source {source!r} is not one of {GOAL_SOURCES}")
    rng = random.Random(seed)
    prices = sample_prices(products, rng)
    goals = (synthetic_goals if source == "synthetic" else human_goals)(products, prices, rng)
    random.Random(seed).shuffle(goals)
    return goals, prices


def split_goals(goals: Sequence[Goal], split: str) -> list[Goal]:
    """The goals of ``split`` ("train", "dev", "test" or "all")."""
    if split == "all":
        return list(goals)
    if split not in SPLITS:
        raise ValueError(f"split {split!r} is not one of {sorted(SPLITS) + ['all']}")
    start, stop = SPLITS[split]
    chosen = list(goals[start:stop])
    if not chosen:
        raise ValueError(f"split {split!r} is empty: the catalog has only {len(goals)} goals "
                         f"and {split!r} takes goals {start}..{stop or 'end'}; use a larger "
                         f"catalog or split='all'")
    return chosen
