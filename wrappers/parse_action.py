"""``ParseAction``: extract the env action from raw model output and penalise invalid ones."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from paw_gym.core import MAX_ACTION_LENGTH

#: action_format -> the tag pairs it accepts (exactly one pair must occur in the output).
ACTION_TAGS = {
    "action": ("action",),
    "search": ("search", "answer"),
}


def extract_action(text: Any, action_format: str = "action",
                   require_think: bool = False) -> tuple[str | None, str | None]:
    """Parse model output; return ``(action, None)`` or ``(None, reason)``.

    ``action_format="action"``: exactly one ``<action>…</action>``; the stripped content is the
    action. ``"search"``: exactly one ``<search>…</search>`` or ``<answer>…</answer>``; the action is
    that element re-emitted canonically (``<search>query</search>``). Linear time on any input
    (no regex backtracking), so megabytes of junk are fine.
    """
    if action_format not in ACTION_TAGS:
        raise ValueError(f"action_format must be one of {sorted(ACTION_TAGS)}, got {action_format!r}")
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", errors="replace")
    if not isinstance(text, str):
        return None, f"model output must be text, got {type(text).__name__}"
    if require_think and ("<think>" not in text or "</think>" not in text):
        return None, "missing <think>...</think>"
    found = []
    for tag in ACTION_TAGS[action_format]:
        opening, closing = f"<{tag}>", f"</{tag}>"
        opens, closes = text.count(opening), text.count(closing)
        if opens != closes:
            return None, f"unbalanced {opening} / {closing} tags"
        found.extend((tag, text.find(opening), opening, closing) for _ in range(opens))
    if not found:
        tags = " or ".join(f"<{t}>...</{t}>" for t in ACTION_TAGS[action_format])
        return None, f"missing {tags}"
    if len(found) > 1:
        return None, f"{len(found)} action elements; exactly one is allowed"
    tag, start, opening, closing = found[0]
    end = text.find(closing, start)
    if end < 0:
        return None, f"{closing} comes before {opening}"
    content = text[start + len(opening):end].strip()
    if not content:
        return None, f"empty <{tag}> element"
    if len(content) > MAX_ACTION_LENGTH:
        return None, f"action longer than {MAX_ACTION_LENGTH} characters"
    return (content if action_format == "action" else f"<{tag}>{content}</{tag}>"), None


class ParseAction(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Accept raw model output as the action; send the extracted action to the env.

    The output is *invalid* when the tags are missing, unbalanced, repeated or empty (then the
    env receives ``""``, which every PaW env treats as an invalid no-op, so the step still counts
    towards the time limit but changes nothing), or when the env itself reports the extracted
    action as invalid (e.g. not admissible). Invalid steps get ``invalid_penalty`` added to the
    reward. ``info`` gains ``invalid_action``, ``parsed_action`` (``None`` if parsing failed),
    ``parse_error`` (a reason, or ``None``) and ``format_penalty`` (what was added: the penalty
    or 0.0; the env's own reward is the step's reward minus it). Never raises on any action
    value.

    Args:
        env: a text env.
        action_format: ``"action"`` (``<action>…</action>``: ALFWorld, WebShop) or ``"search"``
            (``<search>…</search>`` / ``<answer>…</answer>``: search QA).
        invalid_penalty: reward added on an invalid step (paper: −0.1; −0.01 for search QA).
        require_think: also require a ``<think>…</think>`` block (as verl-agent does).

    Example:
        >>> env = ParseAction(HistoryPrompt(gym.make("PaW/ALFWorld-v0")))           # doctest: +SKIP
        >>> prompt, info = env.reset(seed=0)                                         # doctest: +SKIP
        >>> _, reward, *_ , info = env.step("<think>…</think><action>look</action>")  # doctest: +SKIP
    """

    def __init__(self, env: gym.Env, action_format: str = "action", invalid_penalty: float = -0.1,
                 require_think: bool = False):
        gym.utils.RecordConstructorArgs.__init__(self, action_format=action_format,
                                                 invalid_penalty=invalid_penalty,
                                                 require_think=require_think)
        super().__init__(env)
        if action_format not in ACTION_TAGS:
            raise ValueError(f"action_format must be one of {sorted(ACTION_TAGS)}, got {action_format!r}")
        self.action_format = action_format
        self.invalid_penalty = float(invalid_penalty)
        self.require_think = require_think

    def step(self, action):
        parsed, error = extract_action(action, self.action_format, self.require_think)
        observation, reward, terminated, truncated, info = self.env.step("" if parsed is None else parsed)
        if error is None and info.get("invalid_action"):
            error = "the environment rejected the action (not admissible here)"
        invalid = error is not None
        penalty = self.invalid_penalty if invalid else 0.0
        if invalid:
            reward = float(reward) + penalty
        info = {**info, "invalid_action": invalid, "parsed_action": parsed, "parse_error": error,
                "format_penalty": penalty}
        return observation, reward, terminated, truncated, info


def wrapped_action_format(env: gym.Env) -> str:
    """The format of the outermost ``ParseAction`` around ``env`` (``"action"`` when there is
    none)."""
    while isinstance(env, gym.Wrapper):
        if isinstance(env, ParseAction):
            return env.action_format
        env = env.env
    return "action"
