"""``PaW/WebShop-v0``: WebShop (Yao et al., 2022) in its text observation mode, pure Python.

Usage::

    import gymnasium as gym, paw_gym
    env = gym.make("PaW/WebShop-v0", split="test")            # embedded catalog, 1k products
    env = gym.make("PaW/WebShop-v0", data_dir="path/to/webshop/data")   # official files
    obs, info = env.reset(options={"goal_index": 17})
    obs, reward, terminated, truncated, info = env.step("search[" + "console table" + "]")

Actions are WebShop's bare actions ``search[query]`` (only on the search page, see
``info["search_allowed"]``) and ``click[x]`` with ``x`` one of ``info["admissible_actions"]``.
Anything else is a no-op with ``info["invalid_action"] = True`` and reward 0. Buying ends the
episode with reward ``10 × success`` (success: WebShop's raw reward is 1.0; the raw reward is
``info["score"]``). ``gym.make`` adds the 15-step limit.
"""

from __future__ import annotations

import gc
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, Mapping, Sequence

import numpy as np

from paw_gym.core import Task, TaskList, TextEnv
from paw_gym.webshop.catalog import Catalog, Product, default_cache_dir
from paw_gym.webshop.goals import GOAL_SOURCES, build_goals, split_goals
from paw_gym.webshop.loader import load_official_products, resolve_data_dir
from paw_gym.webshop.pages import Page, item_page, results_page, search_page, sub_page, done_page
from paw_gym.webshop.reward import Goal, purchase_reward

_ACTION = re.compile(r"^\s*(search|click)\[(.*)\]\s*$", re.DOTALL)
GOAL_SAMPLING = ("weighted", "uniform")
EXPERTS = ("target", "visible")


def parse_action(action: str) -> tuple[str, str] | None:
    """``"click[Buy Now]"`` -> ``("click", "buy now")``; ``None`` if not an action."""
    match = _ACTION.match(action)
    if match is None:
        return None
    return match.group(1), match.group(2).strip().lower()


@lru_cache(maxsize=4)
def load_world(data_dir: str | None, num_products: int | None, catalog_seed: int,
               goal_source: str, cache_dir: str | None) -> tuple[Catalog, Sequence[Goal],
                                                                 dict[str, float]]:
    """Catalog, goals (fixed order) and prices; shared by every env of the process."""
    # Loading creates millions of small, long-lived objects and no reference cycles: the
    # cyclic garbage collector would rescan them again and again while loading (seconds at
    # 100k products), so it is paused meanwhile. (No gc.freeze(): that would also pin
    # whatever else the user's process holds at that moment.)
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _load_world(data_dir, num_products, catalog_seed, goal_source, cache_dir)
    finally:
        if gc_was_enabled:
            gc.enable()


def _load_world(data_dir: str | None, num_products: int | None, catalog_seed: int,
                goal_source: str, cache_dir: str | None) -> tuple[Catalog, Sequence[Goal],
                                                                  dict[str, float]]:
    key = None
    if data_dir is not None:
        products, source = load_official_products(data_dir, num_products)
    else:
        from paw_gym.webshop.generator import cached_products, catalog_key
        products = cached_products(num_products or 1000, catalog_seed, cache_dir)
        source = f"embedded procedural catalog (seed {catalog_seed})"
        key = catalog_key(num_products or 1000, catalog_seed)
    catalog = Catalog(products, source, cache_dir=cache_dir, progress=len(products) > 20_000,
                      cache_key=key)
    goals, prices = build_goals(products, goal_source)
    return catalog, goals, prices


class WebShopEnv(TextEnv):
    """WebShop shopping tasks: search, browse, pick options, buy.

    Args:
        split: goal split, "train" (goals 1500+), "dev" (500–1499), "test" (0–499) or "all".
        data_dir: folder with WebShop's ``items_shuffle*.json`` + ``items_ins_v2*.json``
            (default ``$PAW_WEBSHOP_DATA``; unset: the embedded procedural catalog).
        num_products: catalog size (official data: the first ``n`` products of the file;
            ``None`` for all).
        catalog_seed: seed of the embedded catalog generator (ignored for official data).
        goal_source: "synthetic" (WebShop's generated instructions) or "human"
            (``items_human_ins.json``, official data only).
        goal_sampling: how ``reset`` picks a goal without ``goal_index``: "weighted" (WebShop's
            attribute-rarity weights) or "uniform".
        cache_dir: where the search index (and the generated catalog) is cached; default
            ``$PAW_CACHE_DIR`` or ``~/.cache/paw_gym``; ``False`` keeps both in memory only.
        expert: what ``expert_action`` follows: "target" (knows the goal's product; the
            solvability check) or "visible" (only what the pages show; honest SFT demos).
        render_mode: "ansi" or "human".
    """

    metadata = {"render_modes": ["ansi", "human"]}
    task_type = "webshop"

    held_out_split = "test"

    def __init__(self, split: Literal["train", "dev", "test", "all"] = "train",
                 data_dir: str | os.PathLike | None = None,
                 num_products: int | None = 1000, catalog_seed: int = 0,
                 goal_source: str = "synthetic", goal_sampling: str = "weighted",
                 cache_dir: str | os.PathLike | bool | None = None,
                 expert: str = "target", render_mode: str | None = None):
        super().__init__(render_mode=render_mode)
        if expert not in EXPERTS:
            raise ValueError(f"expert {expert!r} is not one of {EXPERTS}")
        if goal_source not in GOAL_SOURCES:
            raise ValueError(f"goal_source {goal_source!r} is not one of {GOAL_SOURCES}")
        if goal_sampling not in GOAL_SAMPLING:
            raise ValueError(f"goal_sampling {goal_sampling!r} is not one of {GOAL_SAMPLING}")
        if num_products is not None and num_products < 1:
            raise ValueError(f"num_products must be positive or None, got {num_products!r}")
        resolved = resolve_data_dir(data_dir)
        if cache_dir is False:
            cache = None
        else:
            cache = str(Path(cache_dir)) if cache_dir not in (None, True) else str(default_cache_dir())
        self.catalog, all_goals, self.prices = load_world(
            str(resolved) if resolved else None, num_products, catalog_seed, goal_source, cache)
        self.split = split
        self.goals = split_goals(all_goals, split)
        if goal_sampling == "uniform":
            weights = np.ones(len(self.goals))
        elif hasattr(self.goals, "weights"):
            weights = self.goals.weights()
        else:
            weights = np.array([g.weight for g in self.goals])
        self._cum_weights = np.cumsum(weights) / weights.sum()
        self.data_source = self.catalog.source
        self.goal_index = 0
        self.goal: Goal = self.goals[0]
        self.expert = expert
        self._expert = None
        self._new_session()

    def __repr__(self) -> str:
        return (f"WebShopEnv(split={self.split!r}, goals={len(self.goals)}, "
                f"catalog={self.catalog!r})")

    __str__ = __repr__

    # -- session state --------------------------------------------------------------------
    def _new_session(self) -> None:
        self.keywords: str | None = None
        self.results: list[Product] = []
        self.result_page = 1
        self.product: Product | None = None
        self.options: dict[str, str] = {}
        self.page: Page = search_page(self.goal.instruction_text)
        self.done = False

    def _show_results(self) -> Page:
        return results_page(self.goal.instruction_text, self.results, self.result_page)

    def _info(self, **extra: Any) -> dict[str, Any]:
        return self.make_info(
            admissible_actions=[f"click[{c}]" for c in self.page.clickables],
            search_allowed=self.page.search_bar, task_id=f"webshop-{self.split}-{self.goal_index}",
            task_type=self.goal.category or self.task_type, data_source=self.data_source,
            page=self.page.name, **extra)

    def _carry_info(self) -> dict[str, Any]:
        carried = super()._carry_info()
        for key in ("search_allowed", "data_source", "page", "score"):
            if key in self._last_info:
                carried[key] = self._last_info[key]
        return carried

    # -- TextEnv ----------------------------------------------------------------------------
    def tasks(self) -> TaskList:
        """Every goal of the split (``test``: WebShop's goals 0–499), by ``goal_index``."""
        return TaskList(len(self.goals), lambda i: Task(
            {"goal_index": i}, self.goals[i].category or self.task_type))

    def _reset(self, options: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        if options.get("goal_index") is not None:
            index = options["goal_index"]
            if not isinstance(index, (int, np.integer)) or not 0 <= index < len(self.goals):
                raise ValueError(f"goal_index {index!r} is out of range for split "
                                 f"{self.split!r} with {len(self.goals)} goals")
            self.goal_index = int(index)
        else:
            draw = self.np_random.random()
            self.goal_index = min(int(np.searchsorted(self._cum_weights, draw, side="right")),
                                  len(self.goals) - 1)
        self.goal = self.goals[self.goal_index]
        self._new_session()
        info = self._info(task_description=self.goal.instruction_text, score=0.0)
        return self.page.observation, info

    def _step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        parsed = parse_action(action)
        if parsed is None or self.done:
            return self.page.observation, 0.0, False, self._info(invalid_action=True, score=0.0)
        verb, arg = parsed
        if verb == "search":
            if not self.page.search_bar or not arg:
                return self.page.observation, 0.0, False, self._info(invalid_action=True,
                                                                     score=0.0)
            self.keywords = arg
            self.results = self.catalog.search(arg)
            self.result_page, self.product, self.options = 1, None, {}
            self.page = self._show_results()
            return self.page.observation, 0.0, False, self._info(score=0.0)
        clickable = self.page.clickables.get(arg)
        if clickable is None:
            return self.page.observation, 0.0, False, self._info(invalid_action=True, score=0.0)
        return self._click(arg, clickable.kind, clickable.target)

    def _click(self, text: str, kind: str, target: str) -> tuple[str, float, bool, dict]:
        goal_text = self.goal.instruction_text
        if kind == "buy":
            assert self.product is not None
            price = self.prices[self.product.asin]
            score, details = purchase_reward(self.product, self.goal, price, self.options)
            won = score >= 1.0 - 1e-9
            self.page = done_page(self.product, self.options, score)
            self.done = True
            info = self._info(score=float(score), won=won, purchased_asin=self.product.asin,
                              purchased_options=dict(self.options), reward_details=details)
            return self.page.observation, 10.0 * won, True, info
        if kind == "back":
            self._new_session()
        elif kind in ("next", "prev") and self.page.name == "results":
            self.result_page += 1 if kind == "next" else -1
            self.page = self._show_results()
        elif kind == "prev" and self.page.name == "item":
            self.product, self.options = None, {}
            self.page = self._show_results()
        elif kind == "prev":  # from a sub-page back to its item page
            self.page = item_page(goal_text, self.product)
        elif kind == "product":
            self.product, self.options = self.catalog.by_asin[target], {}
            self.page = item_page(goal_text, self.product)
        elif kind == "option":
            self.options[target] = text
            self.page = item_page(goal_text, self.product)
        elif kind == "sub_page":
            self.page = sub_page(goal_text, self.product, target)
        return self.page.observation, 0.0, False, self._info(score=0.0)

    # -- expert -----------------------------------------------------------------------------
    def _expert_action(self) -> str:
        """The scripted expert's next bare action for the current state (see ``expert.py``):
        ``expert="target"`` knows the goal's product, ``"visible"`` only what the pages show."""
        from paw_gym.webshop.expert import VisibleExpert, WebShopExpert
        if self._expert is None:
            self._expert = (WebShopExpert if self.expert == "target" else VisibleExpert)(
                self.catalog)
        return self._expert.next_action(self)
