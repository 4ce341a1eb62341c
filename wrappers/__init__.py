"""Gymnasium wrappers that turn a PaW text env into an LLM agent loop.

Compose them innermost first::

    import gymnasium as gym
    import paw_gym
    from wrappers import HistoryPrompt, ParseAction, RecordTransitions, WMReplay

    env = gym.make("PaW/WebShop-v0")                   # TimeLimit(15) applied by gym.make
    env = HistoryPrompt(env, template="webshop")       # observation -> prompt h_t
    env = ParseAction(env, invalid_penalty=-0.1)       # raw model output -> env action
    env = RecordTransitions(env, WMReplay("runs/replay"))  # (h, a, o_next, ...) -> replay
"""

from wrappers.history_prompt import HistoryPrompt
from wrappers.parse_action import ParseAction, extract_action
from wrappers.record import PolicyAction, RecordTransitions
from wrappers.replay import SCHEMA_VERSION, LoadError, WMReplay
from wrappers.templates import TEMPLATES

__all__ = [
    "HistoryPrompt",
    "LoadError",
    "ParseAction",
    "PolicyAction",
    "RecordTransitions",
    "SCHEMA_VERSION",
    "TEMPLATES",
    "WMReplay",
    "extract_action",
]
