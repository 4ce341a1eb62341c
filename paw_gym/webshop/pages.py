"""WebShop's pages in its "text" observation mode, and what can be clicked on each.

WebShop renders HTML pages and, in text mode, joins their visible strings with ``[SEP]``.
These functions build the same strings directly (no HTML) and, for each page, the map
``clickable text -> what it does`` that WebShop's text env derives from the page's buttons,
product links and option radios (keys lowercased, as the agent must type them).

=============  ===========================================================================
page           visible strings
=============  ===========================================================================
search         ``WebShop``, ``Instruction:``, goal, ``Search``
results        ``Instruction:``, goal, ``Back to Search``, ``Page p (Total results: n)``,
               ``< Prev``, ``Next >``, then ASIN, title, price for each of ≤ 10 products
item           ``Instruction:``, goal, ``Back to Search``, ``< Prev``, each option group
               name followed by its values, title, ``Price: …``, ``Rating: …``,
               ``Description``, ``Features``, ``Reviews``, ``Buy Now``
sub-page       ``Instruction:``, goal, ``Back to Search``, ``< Prev``, then the description,
               the feature bullets, or the reviews
done           ``Thank you for shopping with us!`` and the purchase summary with its score
=============  ===========================================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, NamedTuple, Sequence

from paw_gym.webshop.catalog import PRODUCTS_PER_PAGE, Product

SEP = " [SEP] "
BACK_TO_SEARCH = "Back to Search"
NEXT_PAGE = "Next >"
PREV_PAGE = "< Prev"
BUY_NOW = "Buy Now"
SUB_PAGES = ("Description", "Features", "Reviews")


class Clickable(NamedTuple):
    """What clicking a page element does."""

    kind: str
    """One of ``back``, ``next``, ``prev``, ``product``, ``option``, ``sub_page``, ``buy``."""
    target: str = ""
    """Product ASIN, option group name, or sub-page name."""


@dataclass
class Page:
    """A rendered page: the observation and its clickables."""

    name: str
    """``search``, ``results``, ``item``, ``sub_page`` or ``done``."""
    observation: str
    """Visible strings joined by `` [SEP] ``."""
    clickables: dict[str, Clickable] = field(default_factory=dict)
    """Lowercased clickable text -> action."""
    search_bar: bool = False
    """Whether ``search[...]`` is possible on this page."""


def _join(parts: Sequence[str]) -> str:
    return SEP.join(s for s in (p.strip() for p in parts) if s)


def _instruction(goal_text: str) -> list[str]:
    return ["Instruction:", goal_text]


def search_page(goal_text: str) -> Page:
    return Page("search", _join(["WebShop", *_instruction(goal_text), "Search"]),
                search_bar=True)


def num_result_pages(total: int) -> int:
    return max(1, -(-total // PRODUCTS_PER_PAGE))


def results_page(goal_text: str, results: Sequence[Product], page: int) -> Page:
    """Page ``page`` (1-based) of the search ``results``."""
    total = len(results)
    shown = results[(page - 1) * PRODUCTS_PER_PAGE: page * PRODUCTS_PER_PAGE]
    parts = [_join(_instruction(goal_text)), BACK_TO_SEARCH,
             f"Page {page} (Total results: {total})"]
    clickables = {BACK_TO_SEARCH.lower(): Clickable("back")}
    if page > 1:
        parts.append(PREV_PAGE)
        clickables[PREV_PAGE.lower()] = Clickable("prev")
    if page * PRODUCTS_PER_PAGE < total:
        parts.append(NEXT_PAGE)
        clickables[NEXT_PAGE.lower()] = Clickable("next")
    for product in shown:
        title = product.title.strip()
        parts += (product.asin, title, product.price_tag) if title else (product.asin,
                                                                         product.price_tag)
        clickables[product.asin.lower()] = Clickable("product", product.asin)
    # Header strings are stripped by _join; product strings were stripped above.
    return Page("results", SEP.join(parts), clickables)


def item_page(goal_text: str, product: Product) -> Page:
    parts = [*_instruction(goal_text), BACK_TO_SEARCH, PREV_PAGE]
    clickables = {BACK_TO_SEARCH.lower(): Clickable("back"), PREV_PAGE.lower(): Clickable("prev")}
    for name in SUB_PAGES:
        clickables[name.lower()] = Clickable("sub_page", name)
    clickables[BUY_NOW.lower()] = Clickable("buy")
    # Option radios are registered after the buttons, so (as in WebShop) an option value
    # that equals a button text, or appears in two groups, maps to the last one registered.
    for group, values in product.options.items():
        parts.append(group)
        for value in values:
            parts.append(value)
            clickables[value] = Clickable("option", group)
    parts += [product.title, f"Price: {product.price_tag}", f"Rating: {product.rating}",
              *SUB_PAGES, BUY_NOW]
    return Page("item", _join(parts), clickables)


def sub_page(goal_text: str, product: Product, which: str) -> Page:
    """The ``Description``, ``Features`` or ``Reviews`` page of ``product``."""
    parts = [*_instruction(goal_text), BACK_TO_SEARCH, PREV_PAGE]
    if which == "Description":
        parts.append(product.description)
    elif which == "Features":
        parts += product.bullets
    else:
        if not product.reviews:
            parts.append("No reviews found")
        for review in product.reviews:
            parts += [f"\"{review.get('title', '')}\"", str(review.get("score", "")),
                      str(review.get("body", ""))]
    clickables = {BACK_TO_SEARCH.lower(): Clickable("back"), PREV_PAGE.lower(): Clickable("prev")}
    return Page("sub_page", _join(parts), clickables)


def done_page(product: Product, options: Mapping[str, str], score: float) -> Page:
    chosen = ", ".join(f"{k}: {v}" for k, v in options.items()) or "none"
    parts = ["Thank you for shopping with us!", "Purchased", product.asin, product.title,
             f"Options: {chosen}", "Your score (min 0.0, max 1.0)", f"{score:.4f}"]
    return Page("done", _join(parts))
