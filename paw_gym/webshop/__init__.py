"""``PaW/WebShop-v0``: a pure-Python, faithful WebShop (catalog, BM25 search, pages, reward).

See :class:`paw_gym.webshop.env.WebShopEnv` and ``docs/webshop.md``.
"""

from paw_gym.webshop.env import WebShopEnv

__all__ = ["WebShopEnv"]
