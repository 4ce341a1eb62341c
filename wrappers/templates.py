"""Prompt templates of the PaW paper (arXiv 2606.02388, Appendix A.3, Figures 7-9), and ones in
its style for the toy-text games (``GAME_TEMPLATES``).

The ``*_TEMPLATE`` strings are the paper's text word for word, with typographic quotes and
hyphens written in ASCII. Slots are Python ``str.format`` fields. The ``*_FIRST_STEP``
variants are used at step 0, when there is no history yet; they are the same text without the
history sentences, as in verl-agent (the code base the paper builds on).
"""

from __future__ import annotations

import string

# Each template is an opening, the history sentences (left out at step 0), the current state,
# and the closing instructions.
_HISTORY = (
    "Prior to this step, you have already taken {step_count} step(s). "
    "Below are the most recent {history_length} observations and the corresponding actions you took: {action_history}. "
    "You are now at step {current_step} and your current observation is: {current_observation}. "
)
_NO_HISTORY = "Your current observation is: {current_observation}. "

_ALFWORLD_OPENING = ("You are an expert agent operating in the ALFRED embodied Environment. "
                     "Your task is to: {task_description}. ")
_ALFWORLD_CLOSING = (
    "Your admissible actions of the current situation are: [{admissible_actions}]. "
    "Now it's your turn to take an action. "
    "You should first reason step-by-step about the current situation. "
    "This reasoning process MUST be enclosed within <think> </think> tags. "
    "Once you've finished your reasoning, you should choose an admissible action for current step "
    "and present it within <action> </action> tags."
)
ALFWORLD_TEMPLATE = _ALFWORLD_OPENING + _HISTORY + _ALFWORLD_CLOSING
ALFWORLD_FIRST_STEP = _ALFWORLD_OPENING + _NO_HISTORY + _ALFWORLD_CLOSING

_WEBSHOP_OPENING = ("You are an expert autonomous agent operating in the WebShop e-commerce environment. "
                    "Your task is to: {task_description}. ")
_WEBSHOP_CLOSING = (
    "Your admissible actions for the current situation are: [{available_actions}]. "
    "Now it's your turn to take one action for the current step. "
    "You should first reason step-by-step about the current situation, then think carefully which "
    "admissible action best advances the shopping goal. "
    "This reasoning process MUST be enclosed within <think> </think> tags. "
    "Once you've finished your reasoning, you should choose an admissible action for current step "
    "and present it within <action> </action> tags."
)
WEBSHOP_TEMPLATE = _WEBSHOP_OPENING + _HISTORY + _WEBSHOP_CLOSING
WEBSHOP_FIRST_STEP = _WEBSHOP_OPENING + _NO_HISTORY + _WEBSHOP_CLOSING

_SEARCH_OPENING = ("You are an expert agent tasked with answering the given question step-by-step. "
                   "Your question: {task_description}. ")
_SEARCH_HISTORY = (
    "Prior to this step, you have already taken {step_count} step(s). "
    "Below is the interaction history where <search> </search> wrapped your past search queries and "
    "<information> </information> wrapped the corresponding search results returned by the external "
    "search engine. History: {memory_context} "
)
_SEARCH_CLOSING = (
    "Now it's your turn to respond for the current step. "
    "You should first conduct reasoning process. This process MUST be enclosed within <think> </think> tags. "
    "After completing your reasoning, choose only one of the following actions (do not perform both): "
    "(1) If you find you lack some knowledge, you can call a search engine to get more external "
    "information using format: <search> your query </search>. "
    "(2) If you have enough knowledge to answer the question confidently, provide your final answer "
    "within <answer> </answer> tags, without detailed illustrations. For example, <answer>Beijing</answer>."
)
SEARCH_TEMPLATE = _SEARCH_OPENING + _SEARCH_HISTORY + _SEARCH_CLOSING
SEARCH_FIRST_STEP = _SEARCH_OPENING + _SEARCH_CLOSING

# Toy-text games (not in the paper): its ALFWorld template with the game's rules and legend
# in the opening, so a prompt says everything the next action depends on.
_GAME_OPENINGS = {
    "frozenlake": "You are an expert agent playing FrozenLake on a grid map. Your task is to: "
                  "{task_description}. Map legend: P is you, _ is ice, O is a hole, G is the goal. ",
    "cliffwalking": "You are an expert agent playing CliffWalking on a grid map. Your task is to: "
                    "{task_description}. Map legend: P is you, _ is ground, C is the cliff "
                    "(stepping on it sends you back to the start), G is the goal. ",
    "taxi": "You are an expert taxi driver agent on a grid map. Your task is to: "
            "{task_description}. Map legend: T is your taxi, R, G, Y and B are the four stops, "
            "| is a wall the taxi cannot cross; north is up. ",
    "sokoban": "You are an expert agent playing Sokoban. Your task is to: {task_description}. "
               "Map legend: # is a wall, _ is floor, O is a target, X is a box, √ is a box on a "
               "target, P is you, S is you on a target. You push a box by walking into it. ",
    "blackjack": "You are an expert Blackjack player. Your task is to: {task_description}. "
                 "Aces count 1 or 11, face cards 10; the dealer draws until reaching 17. ",
}
GAME_TEMPLATES: dict[str, tuple[str, str]] = {
    name: (opening + _HISTORY + _ALFWORLD_CLOSING, opening + _NO_HISTORY + _ALFWORLD_CLOSING)
    for name, opening in _GAME_OPENINGS.items()}

#: name -> (template, first-step template)
TEMPLATES: dict[str, tuple[str, str]] = {
    "alfworld": (ALFWORLD_TEMPLATE, ALFWORLD_FIRST_STEP),
    "webshop": (WEBSHOP_TEMPLATE, WEBSHOP_FIRST_STEP),
    "search": (SEARCH_TEMPLATE, SEARCH_FIRST_STEP),
    **GAME_TEMPLATES,
}

#: Every slot a template may use (see ``HistoryPrompt`` for what each holds).
SLOTS = frozenset({
    "task_description", "step_count", "history_length", "action_history", "current_step",
    "current_observation", "admissible_actions", "available_actions", "memory_context",
})


def template_slots(template: str) -> set[str]:
    """The named slots of a ``str.format`` template; raise ``ValueError`` on unknown ones."""
    try:
        fields = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as error:
        raise ValueError(f"malformed prompt template ({error}): {template[:80]!r}") from None
    if "" in fields or any(name.isdigit() for name in fields):
        raise ValueError("prompt template slots must be named, e.g. {current_observation}")
    unknown = fields - SLOTS
    if unknown:
        raise ValueError(f"unknown prompt template slot(s) {sorted(unknown)}; "
                         f"accepted slots: {sorted(SLOTS)}")
    return fields
