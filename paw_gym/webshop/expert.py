"""A scripted WebShop expert: search, page to the target, open it, pick the options, buy.

The expert knows the goal's target product (privileged information) and acts like a
careful shopper: it searches with a natural query, pages through the results until the
target is listed, opens it, clicks each goal option, and buys. The query is the first of

1. the instruction's product phrase (``Find me <this>`` up to the options and price clause),
2. the target's own search query followed by the goal attributes,
3. the target's title,

whose top 50 hits contain the target (checked with the same search engine the env uses),
so that every episode fits WebShop's 15-step limit. It is used as the solvability check of
goals and catalogs.

:class:`VisibleExpert` uses nothing a policy cannot see: the instruction's product phrase as
the query, the first result (its ID written as the page shows it), the options the instruction
names, buy. A policy can learn exactly this mapping from its prompt, so it is the honest SFT
target (``WebShopEnv(expert="visible")``); it wins far less often than the target-knowing
expert (docs/webshop.md).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from paw_gym.webshop.catalog import PRODUCTS_PER_PAGE, Catalog
from paw_gym.webshop.reward import Goal

if TYPE_CHECKING:
    from paw_gym.webshop.env import WebShopEnv

_FIND_ME = re.compile(r"^\s*(?:find me|i need|i want|i am looking for)\s+", re.IGNORECASE)
_PRICE_CLAUSE = re.compile(r",? and price lower than [\d.]+ dollars\s*$", re.IGNORECASE)


def instruction_phrase(goal: Goal) -> str:
    """The product phrase of the instruction: no "Find me", option list or price clause."""
    text = _PRICE_CLAUSE.sub("", goal.instruction_text)
    if goal.option_names and goal.option_names[0]:
        text = text.split(f" with {goal.option_names[0]}: ")[0]
    return _FIND_ME.sub("", text).strip().lower()


def _next_goal_option(env: "WebShopEnv") -> str | None:
    """On an item page, the click on the next option the instruction names that is not chosen
    yet (None when all are): option values are visible in the instruction."""
    goal, page = env.goal, env.page
    for name, value in zip(goal.option_names, goal.goal_options):
        clickable = page.clickables.get(value)
        if clickable is None or clickable.kind != "option":
            continue  # not selectable on this page (e.g. a human goal's free-text option)
        if name and clickable.target != name:
            continue  # the value also names an option of a later group, which wins
        if env.options.get(clickable.target) != value:
            return f"click[{value}]"
    return None


class WebShopExpert:
    """Chooses the next bare action of the expert for a :class:`WebShopEnv` state."""

    def __init__(self, catalog: Catalog):
        self.catalog = catalog
        self._queries: dict[tuple[str, str], str] = {}

    def query_for(self, goal: Goal) -> str:
        """The first candidate query whose top-50 results contain the target."""
        key = (goal.asin, goal.instruction_text)
        if key not in self._queries:
            target = self.catalog.by_asin[goal.asin]
            candidates = [instruction_phrase(goal),
                          " ".join([goal.query, *goal.attributes]).lower(),
                          target.title.lower()]
            chosen = candidates[-1]
            for query in candidates:
                if query and any(p.asin == goal.asin for p in self.catalog.search(query)):
                    chosen = query
                    break
            self._queries[key] = chosen
        return self._queries[key]

    def next_action(self, env: "WebShopEnv") -> str:
        page = env.page
        if page.name == "done":
            return ""
        if page.name == "search":
            return f"search[{self.query_for(env.goal)}]"
        if page.name == "sub_page":
            return "click[< prev]"
        if page.name == "results":
            return self.results_action(env)
        return self.item_action(env)

    def results_action(self, env: "WebShopEnv") -> str:
        """Page to the target and open it."""
        goal = env.goal
        rank = next((i for i, p in enumerate(env.results) if p.asin == goal.asin), None)
        if rank is None:
            return "click[back to search]"
        wanted_page = rank // PRODUCTS_PER_PAGE + 1
        if wanted_page > env.result_page:
            return "click[next >]"
        if wanted_page < env.result_page:
            return "click[< prev]"
        return f"click[{goal.asin.lower()}]"

    def item_action(self, env: "WebShopEnv") -> str:
        """Back to the results from a wrong item; else the goal's options, then buy."""
        if env.product is None or env.product.asin != env.goal.asin:
            return "click[< prev]"
        return _next_goal_option(env) or "click[buy now]"


class VisibleExpert(WebShopExpert):
    """The next action of a shopper who knows only what the pages show (module docstring)."""

    def query_for(self, goal: Goal) -> str:
        return instruction_phrase(goal)

    def results_action(self, env: "WebShopEnv") -> str:
        if not env.results:
            return "click[back to search]"
        first = env.results[(env.result_page - 1) * PRODUCTS_PER_PAGE]
        return f"click[{first.asin.upper()}]"  # as displayed (WebShop IDs are upper case)

    def item_action(self, env: "WebShopEnv") -> str:
        return _next_goal_option(env) or "click[buy now]"
