"""Products, the catalog that holds them, and its search engine.

A :class:`Product` carries the fields WebShop's engine derives from its raw item files
(``Title``, ``Description``, ``BulletPoints``, ``Price``, ``options`` …) under Python names.
A :class:`Catalog` is an ordered list of products (order = search-index document number)
plus the BM25 index over WebShop's indexed text: ``title + description + first bullet +
option text``, lowercased.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from paw_gym.webshop.search import BM25Index

#: Products per results page and hits per search, as in WebShop.
PRODUCTS_PER_PAGE = 10
SEARCH_RETURN_N = 50


@dataclass(slots=True)
class Product:
    """One product as the WebShop engine sees it."""

    asin: str
    """10-character product id (shown upper-case, clicked lower-case)."""
    title: str
    """Product name (``Title``)."""
    description: str
    """Full description (``Description`` sub-page)."""
    bullets: list[str]
    """Feature bullets (``Features`` sub-page)."""
    pricing: list[float]
    """One price, or ``[low, high]`` for a price range."""
    options: dict[str, list[str]]
    """Option group (lowercase name) -> values (lowercase, ``/`` shown as `` | ``)."""
    attributes: list[str]
    """Attribute phrases used by the reward (``['DUMMY_ATTR']`` when unlabelled)."""
    category: str
    """Top-level category: beauty, electronics, fashion, garden or grocery."""
    query: str
    """The search query the product was scraped under (lowercase)."""
    product_category: str
    """Category path ``A › B › C``."""
    rating: str = "N.A."
    """Average rating as shown on the item page."""
    reviews: list[dict] = field(default_factory=list)
    """Reviews ``{title, score, body}`` (empty for the released catalogs)."""
    instruction: str | None = None
    """Synthetic instruction ("Find me …") when the product is a goal target."""
    instruction_attributes: list[str] | None = None
    """Attributes named by :attr:`instruction`."""
    human_instructions: list[dict] = field(default_factory=list)
    """Human-written goals ``{instruction, instruction_attributes, instruction_options}``."""

    @property
    def price_tag(self) -> str:
        """``$x`` or ``$a to $b``, formatted as WebShop does (Python float repr)."""
        if len(self.pricing) == 1:
            return f"${self.pricing[0]}"
        return f"${self.pricing[0]} to ${self.pricing[1]}"

    def index_text(self) -> str:
        """The text WebShop puts in the search index for this product."""
        option_text = ", and ".join(f"{name}: {', '.join(values)}"
                                    for name, values in self.options.items())
        first_bullet = self.bullets[0] if self.bullets else ""
        return " ".join([self.title, self.description, first_bullet, option_text]).lower()


def default_cache_dir() -> Path:
    """Where search indexes are cached (``$PAW_CACHE_DIR`` or ``~/.cache/paw_gym``)."""
    root = os.environ.get("PAW_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "paw_gym")
    return Path(root) / "webshop"


class Catalog:
    """Products in search-index order, with a BM25 index and lookup by ASIN.

    Args:
        products: the products; their order is the search engine's tie-break order.
        source: a short description of where the products came from (shown in ``repr``).
        cache_dir: where to cache the search index (``None``: build in memory).
        progress: show a progress bar while indexing.
        cache_key: names the index in the cache when the caller can identify the products
            (e.g. generator version + size + seed); otherwise their text is hashed.
    """

    def __init__(self, products: Sequence[Product], source: str,
                 cache_dir: str | os.PathLike | None = None, progress: bool = False,
                 cache_key: str | None = None):
        if not products:
            raise ValueError(f"catalog from {source} has no products")
        self.products = list(products)
        self.source = source
        self.by_asin = {p.asin: p for p in self.products}
        self.index = BM25Index.cached(lambda: [p.index_text() for p in self.products],
                                      cache_dir, progress=progress, key=cache_key)

    def __len__(self) -> int:
        return len(self.products)

    def __repr__(self) -> str:
        return f"Catalog({len(self.products)} products from {self.source})"

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[Product]:
        """Top ``k`` products for ``query`` (BM25, best first)."""
        hits: np.ndarray = self.index.search(query, k)
        products = self.products
        return [products[i] for i in hits.tolist()]
