"""The embedded procedural catalog: WebShop-like products with hard near-distractors.

Products come in *families*: 12–16 products of one query (product type) sharing two "core"
attributes, price level and option groups, but each with one or two attributes of its own.
About 42 % of products are goal targets; a target's instruction names its own attributes
plus core ones, so every other family member is a near-distractor that misses a named
attribute. Some families add *clones* of a target that differ only in price (above any
possible price bound) or in lacking one option value. Searching the instruction therefore
lists a dozen look-alikes: the agent must page, open items and read their features.

Statistics follow the real catalog: category shares, 3–5 level category paths, ~42 % of
products with options (colour, size, style, flavour, scent, fit), log-normal prices with
median ≈ $29 and ~9 % price ranges, 3–6 feature bullets, a short description. Generation is
deterministic for ``seed`` and scales to 100k products in a few seconds.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import string
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path

from paw_gym.webshop.catalog import Product
from paw_gym.webshop.reward import token_set_score
from paw_gym.webshop import vocab

OPTION_SHARE = 0.42
TARGET_SHARE = 0.42
PRICE_RANGE_SHARE = 0.09
MEDIAN_PRICE = 29.0
FAMILY_SIZE = (12, 16)
_ASIN_CHARS = string.ascii_uppercase + string.digits


@dataclass(frozen=True)
class QueryInfo:
    category: str
    query: str
    path: str


@lru_cache(maxsize=None)
def _title_case(phrase: str) -> str:
    return string.capwords(phrase)


def _split(text: str) -> list[str]:
    return [w.strip() for w in text.split(",") if w.strip()]


def _attribute_pool(category: str) -> dict[str, list[str]]:
    """Role -> phrases, dropping any phrase a fuzzy match could confuse with an earlier one."""
    kept: list[str] = []
    pool: dict[str, list[str]] = {}
    sources = [vocab.CATEGORY_ATTRIBUTES[category], vocab.EXTRA_CATEGORY_ATTRIBUTES[category],
               vocab.GENERIC_ATTRIBUTES]
    for role in ("adj", "with", "for"):
        pool[role] = []
        for source in sources:
            for phrase in _split(source[role]):
                if all(token_set_score(phrase, k) <= 85 and phrase not in k and k not in phrase
                       for k in kept):
                    kept.append(phrase)
                    pool[role].append(phrase)
    return pool


def _queries(rng: random.Random) -> dict[str, list[QueryInfo]]:
    out: dict[str, list[QueryInfo]] = {}
    for category, (_, roots, departments) in vocab.CATEGORIES.items():
        infos = []
        for i, (department, queries) in enumerate(departments.items()):
            root = roots[i % len(roots)]
            for query in _split(queries):
                depth = rng.choice((3, 4, 4, 5))
                parts = [root, department]
                if depth >= 4:
                    parts.append(rng.choice(vocab.PATH_SUBLEVELS))
                parts.append(string.capwords(query))
                if depth == 5:
                    parts.append(rng.choice(vocab.PATH_LEAVES))
                infos.append(QueryInfo(category, query, " › ".join(parts)))
        out[category] = infos
    return out


def _option_values(category: str, group: str) -> list[str]:
    if group == "color":
        return vocab.COLOR_VALUES
    if group == "size":
        return vocab.SIZE_VALUES[category]
    return {"style": vocab.STYLE_VALUES, "flavor name": vocab.FLAVOR_VALUES,
            "scent": vocab.SCENT_VALUES, "fit type": vocab.FIT_VALUES}[group]


def instruction_text(query: str, attributes: list[str], roles: dict[str, str]) -> str:
    """"Find me {adj, adj} {query} with {with, with} for {for, for}" as WebShop phrases it."""
    by_role = {r: [a for a in attributes if roles[a] == r] for r in ("adj", "with", "for")}
    text = "Find me " + (", ".join(by_role["adj"]) + " " if by_role["adj"] else "") + query
    if by_role["with"]:
        text += " with " + ", ".join(by_role["with"])
    if by_role["for"]:
        text += " for " + ", ".join(by_role["for"])
    return text


class _Generator:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.queries = _queries(self.rng)
        self.pools = {c: _attribute_pool(c) for c in vocab.CATEGORIES}
        self.roles = {c: {a: r for r, phrases in pool.items() for a in phrases}
                      for c, pool in self.pools.items()}
        self.categories = list(vocab.CATEGORIES)
        self.shares = [vocab.CATEGORIES[c][0] for c in self.categories]
        self.asins: set[str] = set()
        self.products_made = 0
        self.products_with_options = 0

    def asin(self) -> str:
        while True:
            code = "B0" + "".join(self.rng.choices(_ASIN_CHARS, k=8))
            if code not in self.asins:
                self.asins.add(code)
                return code

    def brand(self) -> str:
        syllables = self.rng.choices(vocab.BRAND_SYLLABLES, k=self.rng.choice((2, 3)))
        return "".join(syllables).capitalize()

    def price(self, level: float) -> list[float]:
        low = round(max(0.99, level * math.exp(self.rng.gauss(0.0, 0.12))), 2)
        if self.rng.random() < PRICE_RANGE_SHARE:
            return [low, round(low * self.rng.uniform(1.2, 2.0), 2)]
        return [low]

    def family(self, size: int) -> list[Product]:
        rng = self.rng
        category = rng.choices(self.categories, weights=self.shares)[0]
        info = rng.choice(self.queries[category])
        pool = self.pools[category]
        all_attrs = [a for phrases in pool.values() for a in phrases]
        chosen = rng.sample(all_attrs, 2 + 2 * size)
        core, spare = chosen[:2], chosen[2:]
        level = min(900.0, MEDIAN_PRICE * math.exp(rng.gauss(0.0, 0.9)))
        options: dict[str, list[str]] = {}
        # Error diffusion instead of a coin per family keeps the share of products with
        # options at OPTION_SHARE even in a 1k catalog of only ~70 families.
        self.products_made += size
        if self.products_with_options < OPTION_SHARE * self.products_made:
            self.products_with_options += size
            groups = vocab.CATEGORY_OPTION_GROUPS[category]
            for group in rng.sample(groups, min(len(groups), rng.choice((1, 2, 2, 2, 3)))):
                # A value may appear in one group only ("lavender" is a colour and a scent):
                # WebShop's page maps a clicked value to a single option group.
                taken = {v for vs in options.values() for v in vs}
                values = [v for v in _option_values(category, group) if v not in taken]
                options[group] = sorted(rng.sample(values, min(len(values), rng.randint(3, 7))),
                                        key=values.index)  # shop order: s, m, l
        brands = [self.brand() for _ in range(3)]
        products = []
        n_targets = max(1, round(TARGET_SHARE * size))
        for m in range(size):
            own = [spare[2 * m]] + ([spare[2 * m + 1]] if rng.random() < 0.5 else [])
            member_options = {g: sorted(rng.sample(v, rng.randint(max(2, len(v) - 2), len(v))),
                                         key=v.index)
                              for g, v in options.items()}
            products.append(self.product(info, rng.choice(brands), core + own, own,
                                         member_options, self.price(level), m < n_targets))
        # Clones of the first target that differ only in price, or lack one option value.
        target = products[0]
        clone = self.product(info, rng.choice(brands), target.attributes,
                             [], target.options, [round(target.pricing[-1] + 40 + rng.uniform(
                                 1, 40), 2)], False)
        products[-1] = clone
        if target.options and size > 3:
            group = next(iter(target.options))
            values = target.options[group]
            fewer = dict(target.options, **{group: values[1:]}) if len(values) > 2 else {}
            if fewer:
                products[-2] = self.product(info, rng.choice(brands), target.attributes, [],
                                            fewer, list(target.pricing), False)
        return products

    def product(self, info: QueryInfo, brand: str, attributes: list[str], own: list[str],
                options: dict[str, list[str]], pricing: list[float], is_target: bool) -> Product:
        rng = self.rng
        roles = self.roles[info.category]
        # Own attributes tell family members apart. Half the time the first one is in the
        # title (searchable); otherwise they appear only in later feature bullets, which the
        # search index does not cover: the agent has to page and open items to find them.
        in_title = own[:1] if rng.random() < 0.5 else []
        shown = [a for a in attributes if a not in own or a in in_title]
        title_attrs = [a for a in shown[:3] if roles[a] == "adj"]
        with_attrs = [a for a in shown if roles[a] == "with"][:1]
        title = " ".join([brand, *(_title_case(a) for a in title_attrs),
                          _title_case(info.query)])
        if with_attrs:
            title += f" with {_title_case(with_attrs[0])}"
        fillers = rng.choices(vocab.FILLER_SENTENCES, k=len(attributes))
        bullets = [f"{_title_case(a)}: {f}" for a, f in zip(attributes, fillers)]
        first, rest = bullets[:1], bullets[1:]  # attributes[0] is a core one: indexed
        rng.shuffle(rest)
        bullets = first + rest
        description = " ".join([f"The {brand} {info.query} you have been looking for.",
                                *rng.sample(vocab.FILLER_SENTENCES, 2)])
        instruction = ins_attrs = None
        if is_target:
            ins_attrs = list(dict.fromkeys(own + rng.sample(attributes[:2], rng.randint(1, 2))))
            instruction = instruction_text(info.query, ins_attrs, roles)
        rating = "N.A." if rng.random() < 0.36 else f"{rng.uniform(3.5, 5.0):.1f}"
        return Product(asin=self.asin(), title=title, description=description, bullets=bullets,
                       pricing=pricing, options=options, attributes=list(attributes),
                       category=info.category, query=info.query,
                       product_category=info.path, rating=rating, instruction=instruction,
                       instruction_attributes=ins_attrs)


def generate_products(num_products: int = 1000, seed: int = 0) -> list[Product]:
    """``num_products`` WebShop-like products, deterministic for ``seed``, in shuffled order."""
    if num_products < 1:
        raise ValueError(f"num_products must be positive, got {num_products!r}")
    gen = _Generator(seed)
    sizes: list[int] = []
    while sum(sizes) < num_products:
        sizes.append(gen.rng.randint(*FAMILY_SIZE))
    # Trim the overshoot from families in turn, never below the smallest family size, so
    # that every target keeps its distractors (tiny catalogs excepted).
    excess, i = sum(sizes) - num_products, 0
    while excess > 0:
        shrinkable = [j for j, s in enumerate(sizes) if s > FAMILY_SIZE[0]] or [len(sizes) - 1]
        j = shrinkable[i % len(shrinkable)]
        cut = min(excess, sizes[j] - 1) if sizes[j] <= FAMILY_SIZE[0] else 1
        sizes[j] -= cut
        excess -= cut
        i += 1
    products: list[Product] = []
    for size in (s for s in sizes if s > 0):
        products += gen.family(size)
    gen.rng.shuffle(products)
    return products


_PRODUCT_FIELDS = tuple(f.name for f in fields(Product))


def catalog_key(num_products: int, seed: int) -> str:
    """Identifies a generated catalog: generator code, size and seed."""
    return f"generated-{_generator_fingerprint()}-n{num_products}-s{seed}"


@lru_cache(maxsize=1)
def _generator_fingerprint() -> str:
    """Hash of this generator's code and vocabulary: a cache made by other code is stale."""
    digest = hashlib.sha1()
    for module_file in (__file__, vocab.__file__):
        digest.update(Path(module_file).read_bytes())
    return digest.hexdigest()[:12]


def cached_products(num_products: int, seed: int,
                    cache_dir: str | os.PathLike | None) -> list[Product]:
    """:func:`generate_products`, stored as JSON in ``cache_dir`` and reloaded from there.

    Loading 100k products from the cache takes about a second instead of several seconds of
    generation. The file name carries a fingerprint of the generator's code, so a changed
    generator never serves stale products. ``cache_dir=None`` always generates.
    """
    if cache_dir is None:
        return generate_products(num_products, seed)
    path = Path(cache_dir) / f"catalog-{catalog_key(num_products, seed)}.json"
    if path.exists():
        try:
            rows = json.loads(path.read_text(encoding="utf-8"))
            return [Product(*row) for row in rows]
        except (OSError, ValueError, TypeError):
            pass  # unreadable cache: regenerate below
    products = generate_products(num_products, seed)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps([[getattr(p, f) for f in _PRODUCT_FIELDS] for p in products]),
                       encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass  # read-only cache location: generate again next time
    return products


def attribute_vocabulary() -> list[str]:
    """Every attribute phrase the generator can use (for statistics and tests)."""
    return sorted({a for c in vocab.CATEGORIES for p in _attribute_pool(c).values() for a in p})


def query_vocabulary() -> list[str]:
    return sorted({q.query for infos in _queries(random.Random(0)).values() for q in infos})


__all__ = ["generate_products", "cached_products", "instruction_text", "attribute_vocabulary", "query_vocabulary"]
