"""WebShop's purchase reward (``get_reward``), with rapidfuzz and a lexical noun rule.

``reward = (n_attr + n_option + r_price) / (|goal attributes| + |goal options| + 1) × r_type``

* attributes: a goal attribute matches when ``token_set_ratio`` with one of the product's
  attributes exceeds 85, or when it is a substring of the title, bullets or description;
* options: each *purchased* option value (colour-normalised) matches exactly for ``size``,
  by ``token_set_ratio > 85`` against a goal option otherwise, or as a substring of the
  product text;
* ``r_price``: price ≤ the goal's price bound;
* ``r_type`` ∈ {1, 0.5, 0.1, 0}: same query, ≥ 2 shared category-path segments, or the share
  of the goal product's name nouns found in the purchased product's name.

Fuzzy scores are computed as thefuzz does (lowercase, punctuation to spaces, ASCII only,
rounded to an integer) on top of rapidfuzz. WebShop tags nouns with spaCy; here a *noun* is
any alphabetic name token of two or more letters that is not an English function word or a
common adjective/marketing word (:data:`NON_NOUNS`). The target product always gets
``r_type = 1`` under either rule (same query, same name).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

from rapidfuzz import fuzz

from paw_gym.webshop.catalog import Product

#: Option groups matched exactly rather than fuzzily.
EXACT_MATCH_OPTIONS = ("size",)

#: WebShop's colour vocabulary; an option containing one of these is reduced to the first hit.
COLOR_SET = (
    "alabaster apricot aqua ash asphalt azure banana beige black blue blush bordeaux bronze "
    "brown burgundy camel camo caramel champagne charcoal cheetah chestnut chocolate christmas "
    "coffee cognac copper coral cranberry cream crystal dark denim eggplant elephant espresso "
    "fuchsia gold granite grape graphite grass gray green grey heather indigo ivory ivy khaki "
    "lavender lemon leopard light lilac lime magenta maroon mauve merlot midnight mint mocha "
    "multicolor mushroom mustard natural navy nude olive orange peach pewter pink plum purple "
    "rainbow red rose royal rust sand sapphire seashell silver skull slate steel stone "
    "stonewash sunflower tan taupe teal tiger turquoise violet walnut wheat white wine yellow"
).split()

#: Name tokens that are not nouns for the type reward (function words, units, adjectives).
NON_NOUNS = frozenset((
    "a an and are as at be but by for from if in into is it its no not of on or such that the "
    "their then there these they this to was will with without your you our my all any each "
    "per plus up out off over under new best great premium high quality professional natural "
    "organic original classic small large medium big mini extra super ultra soft hard light "
    "heavy long short full free easy portable adjustable durable waterproof compatible "
    "multi double single large-size pack set inch inches oz ounce ounces lb lbs cm mm ml ft "
    "count pcs pc piece pieces x"
).split())

_NAME_TOKEN = re.compile(r"[a-z]+(?:'[a-z]+)?")
_NON_ALNUM = re.compile(r"[^0-9a-z]+")


def normalize_color(value: str) -> str:
    """The first WebShop colour contained in ``value``, else ``value`` unchanged."""
    for color in COLOR_SET:
        if color in value:
            return color
    return value


def _fuzzy_prepare(text: str) -> str:
    """thefuzz's ``full_process`` with ``force_ascii``: ASCII, lowercase, punctuation→space."""
    ascii_text = text.encode("ascii", "ignore").decode()
    return _NON_ALNUM.sub(" ", ascii_text.lower()).strip()


def token_set_score(a: str, b: str) -> int:
    """``thefuzz.fuzz.token_set_ratio(a, b)``: an integer in [0, 100]."""
    pa, pb = _fuzzy_prepare(a), _fuzzy_prepare(b)
    if not pa or not pb:
        return 0
    return int(round(fuzz.token_set_ratio(pa, pb)))


def name_nouns(name: str) -> list[str]:
    """The lexical stand-in for spaCy's noun tokens of a product name (duplicates kept)."""
    return [t for t in _NAME_TOKEN.findall(name.lower()) if len(t) > 1 and t not in NON_NOUNS]


@dataclass(frozen=True)
class Goal:
    """A shopping instruction and what the reward checks."""

    asin: str
    """Target product (one product that satisfies the goal)."""
    instruction_text: str
    """What the agent reads: "Find me …, and price lower than X.00 dollars"."""
    query: str
    """The target's search query (the type reward compares it)."""
    category: str
    """Top-level category of the target (``info["task_type"]``)."""
    product_category: str
    """Category path of the target."""
    name: str
    """Target product name."""
    attributes: tuple[str, ...]
    """Attribute phrases the purchase must show."""
    goal_options: tuple[str, ...]
    """Option values the purchase must select."""
    option_names: tuple[str, ...]
    """Option group of each value in :attr:`goal_options` (empty names for human goals)."""
    price_upper: float
    """Price bound (1e6 when the instruction names none)."""
    weight: float = 1.0
    """Sampling weight (rarer attributes weigh more)."""


def type_reward(product: Product, goal: Goal) -> dict[str, float | bool]:
    query_match = product.query == goal.query
    bought = {x.strip() for x in product.product_category.split("›")}
    wanted = {x.strip() for x in goal.product_category.split("›")}
    category_match = len(bought & wanted) >= 2
    desired = name_nouns(goal.name)
    purchased = set(name_nouns(product.title))
    title_score = len(purchased & set(desired)) / len(desired) if desired else 0.2
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return {"r_type": r_type, "query_match": query_match, "category_match": category_match,
            "title_score": title_score}


def _in_product_text(phrase: str, product: Product) -> bool:
    return (phrase in product.title.lower() or phrase in " ".join(product.bullets).lower()
            or phrase in product.description.lower())


def attribute_matches(product: Product, goal: Goal) -> int:
    matches = 0
    for wanted in goal.attributes:
        if any(token_set_score(have, wanted) > 85 for have in product.attributes):
            matches += 1
        elif _in_product_text(wanted, product):
            matches += 1
    return matches


def option_matches(product: Product, goal: Goal, chosen: Mapping[str, str]) -> int:
    goal_values = [normalize_color(v) for v in goal.goal_options]
    matches = 0
    for name, raw_value in chosen.items():
        value = normalize_color(raw_value)
        if name.lower() in EXACT_MATCH_OPTIONS:
            matched = value in goal_values
        else:
            matched = any(token_set_score(g, value) > 85 for g in goal_values)
        if matched or _in_product_text(value, product):
            matches += 1
    return matches


def purchase_reward(product: Product, goal: Goal, price: float,
                    chosen: Mapping[str, str]) -> tuple[float, dict[str, float | bool]]:
    """WebShop's raw reward in [0, 1] for buying ``product`` at ``price`` with ``chosen``."""
    type_info = type_reward(product, goal)
    r_price = float(price <= goal.price_upper)
    n_attr = attribute_matches(product, goal)
    n_opt = option_matches(product, goal, chosen)
    total = (n_attr + n_opt + r_price) / (len(goal.attributes) + len(goal.goal_options) + 1)
    total *= type_info["r_type"]
    info = dict(type_info, r_price=r_price, n_attr=n_attr, n_option=n_opt)
    return total, info
