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

import math
import random
from collections import defaultdict
from collections.abc import Sequence as SequenceABC
from dataclasses import replace
from typing import NamedTuple, Sequence

import numpy as np

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


class _Template(NamedTuple):
    """One product's goals: a base goal plus the option lists whose combinations it spans."""

    base: Goal
    option_values: tuple[list[str], ...]
    price_text: str


class GoalTable(SequenceABC):
    """Goals in their fixed shuffled order, built on access (a 100k catalog has ~400k goals).

    Behaves like a read-only list of :class:`Goal`; slicing gives another table.
    """

    def __init__(self, templates: list[_Template], order: np.ndarray):
        self._templates = templates
        counts = np.array([math.prod(len(v) for v in t.option_values) for t in templates],
                          dtype=np.int64)
        self._starts = np.concatenate([[0], np.cumsum(counts)])
        self._order = order

    @classmethod
    def shuffled(cls, templates: list[_Template], seed: int) -> "GoalTable":
        """All goals of ``templates`` in the order ``random.Random(seed).shuffle`` gives.

        Shuffling goal numbers gives exactly the permutation WebShop's ``random.seed(233);
        random.shuffle(goals)`` applies to its goal list.
        """
        table = cls(templates, np.zeros(0, dtype=np.int64))
        order = list(range(int(table._starts[-1])))
        random.Random(seed).shuffle(order)
        table._order = np.asarray(order, dtype=np.int64)
        return table

    def __len__(self) -> int:
        return len(self._order)

    def __getitem__(self, index):
        if isinstance(index, slice):
            sliced = GoalTable.__new__(GoalTable)
            sliced._templates, sliced._starts = self._templates, self._starts
            sliced._order = self._order[index]
            return sliced
        return self._goal(int(self._order[index]))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SequenceABC) or len(other) != len(self):
            return False
        return all(a == b for a, b in zip(self, other))

    __hash__ = None  # mutable-looking sequence semantics, like list

    def weights(self) -> np.ndarray:
        """Sampling weight of every goal, in order."""
        per_template = np.array([t.base.weight for t in self._templates], dtype=np.float64)
        return per_template[np.searchsorted(self._starts, self._order, side="right") - 1]

    def _goal(self, number: int) -> Goal:
        t = int(np.searchsorted(self._starts, number, side="right")) - 1
        template = self._templates[t]
        if not template.option_values:
            return template.base
        rest, combo = number - int(self._starts[t]), []
        for values in reversed(template.option_values):  # the last group varies fastest
            rest, i = divmod(rest, len(values))
            combo.append(values[i])
        combo.reverse()
        base = template.base
        option_text = ", and ".join(f"{n}: {v}" for n, v in zip(base.option_names, combo))
        return replace(base, goal_options=tuple(combo),
                       instruction_text=f"{base.instruction_text} with {option_text}"
                                        f"{template.price_text}")


def synthetic_goals(products: Sequence[Product], prices: dict[str, float],
                    rng: random.Random) -> list[_Template]:
    targets = [p for p in products if p.instruction and p.instruction_attributes]
    # A goal's weight is the mean of 1 / (goals naming the attribute) over its attributes;
    # every option combination of a product is one goal naming the same attributes.
    counts: dict[str, int] = defaultdict(int)
    for p in targets:
        n_combinations = math.prod(len(v) for v in p.options.values())
        for a in p.instruction_attributes:
            counts[a] += n_combinations
    templates: list[_Template] = []
    for p in targets:
        upper, price_text = price_bound(prices[p.asin], rng)
        attributes = tuple(p.instruction_attributes)
        weight = sum(1.0 / counts[a] for a in attributes) / len(attributes)
        names = tuple(sorted(p.options))
        values = tuple(p.options[n] for n in names)
        # With options, the option clause goes between instruction and price text.
        text = p.instruction if names else f"{p.instruction}{price_text}"
        base = Goal(p.asin, text, p.query, p.category, p.product_category, p.title,
                    attributes, (), names, upper, weight)
        templates.append(_Template(base, values, price_text))
    return templates


def human_goals(products: Sequence[Product], prices: dict[str, float],
                rng: random.Random) -> list[_Template]:
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
    return [_Template(goal, (), "") for goal in goals]


def build_goals(products: Sequence[Product], source: str = "synthetic",
                seed: int = GOAL_SHUFFLE_SEED) -> tuple[GoalTable, dict[str, float]]:
    """All goals in their fixed shuffled order, and the product prices they were built on."""
    if source not in GOAL_SOURCES:
        raise ValueError(f"goal source {source!r} is not one of {GOAL_SOURCES}")
    rng = random.Random(seed)
    prices = sample_prices(products, rng)
    templates = (synthetic_goals if source == "synthetic" else human_goals)(products, prices,
                                                                            rng)
    return GoalTable.shuffled(templates, seed), prices


def split_goals(goals: Sequence[Goal], split: str) -> Sequence[Goal]:
    """The goals of ``split`` ("train", "dev", "test" or "all")."""
    if split == "all":
        return goals
    if split not in SPLITS:
        raise ValueError(f"split {split!r} is not one of {sorted(SPLITS) + ['all']}")
    start, stop = SPLITS[split]
    chosen = goals[start:stop]
    if not len(chosen):
        raise ValueError(f"split {split!r} is empty: the catalog has only {len(goals)} goals "
                         f"and {split!r} takes goals {start}..{stop or 'end'}; use a larger "
                         f"catalog or split='all'")
    return chosen
