"""Building the agent loop env (env -> HistoryPrompt -> ParseAction) for any registered id."""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any, Callable

import gymnasium as gym

from paw_gym.registration import check_env_id
from wrappers.templates import ALFWORLD_FIRST_STEP, ALFWORLD_TEMPLATE

#: A custom env's default prompt: the paper's ALFWorld wording without naming an env.
GENERIC_TEMPLATE, GENERIC_FIRST_STEP = (
    template.replace("You are an expert agent operating in the ALFRED embodied Environment. ",
                     "You are an expert agent. ")
    for template in (ALFWORLD_TEMPLATE, ALFWORLD_FIRST_STEP))


@dataclass(frozen=True)
class PromptSettings:
    """How an env's observations become prompts and model output becomes actions."""

    template: str = GENERIC_TEMPLATE
    """A built-in ``HistoryPrompt`` template name or a ``str.format`` template."""
    first_step_template: str | None = GENERIC_FIRST_STEP
    """Template for step 0 (None: the built-in's own, or ``template``)."""
    action_format: str = "action"
    """``"action"`` (``<action>…</action>``) or ``"search"`` (``<search>`` / ``<answer>``)."""
    history_length: int | None = 2
    """Recent steps shown in the prompt; None shows the whole history."""
    invalid_penalty: float = -0.1
    """Reward added on an invalid step."""


#: The paper's settings per built-in env id (toy-text games: their template in the paper's style);
#: any other id gets ``PromptSettings()``.
PRESETS: dict[str, PromptSettings] = {
    "PaW/ALFWorld-v0": PromptSettings("alfworld", None),
    "PaW/WebShop-v0": PromptSettings("webshop", None),
    "PaW/SearchQA-v0": PromptSettings("search", None, "search", None, -0.01),
    **{f"PaW/{game}-v0": PromptSettings(game.lower(), None)
       for game in ("FrozenLake", "CliffWalking", "Taxi", "Sokoban", "Blackjack")},
}


def prompt_settings(env_id: str | None, **overrides: Any) -> PromptSettings:
    """The preset for ``env_id`` with the non-None ``overrides`` applied."""
    settings = PRESETS.get(env_id or "", PromptSettings())
    given = {k: v for k, v in overrides.items() if v is not None}
    if "template" in given and "first_step_template" not in given:
        given["first_step_template"] = None  # a new template brings its own first step
    return replace(settings, **given)


def make_agent_env(env_id: str, /, *, template: str | None = None,
                   action_format: str | None = None, history_length: int | None | str = "preset",
                   invalid_penalty: float | None = None, **env_kwargs: Any) -> gym.Env:
    """``gym.make(env_id)`` wrapped in ``HistoryPrompt`` and ``ParseAction``.

    Its observation is the prompt h_t and its action the raw model output; defaults come from
    :data:`PRESETS` (the paper's template, action format, history window and penalty).

    Args:
        env_id: a registered id.
        template: ``HistoryPrompt`` template name or format string (None: preset).
        action_format: ``"action"`` or ``"search"`` (None: preset).
        history_length: recent steps in the prompt; None shows the full history, and the
            default ``"preset"`` keeps the env's preset.
        invalid_penalty: reward added on an invalid step (None: preset).
        **env_kwargs: passed to ``gym.make`` (e.g. ``split="test"``).

    Example:
        >>> env = make_agent_env("PaW/WebShop-v0")                       # doctest: +SKIP
        >>> prompt, info = env.reset(seed=0)                              # doctest: +SKIP
    """
    from wrappers import HistoryPrompt, ParseAction

    check_env_id(env_id)  # registers the built-in ids too
    settings = prompt_settings(env_id, template=template, action_format=action_format,
                               invalid_penalty=invalid_penalty)
    if history_length != "preset":
        settings = replace(settings, history_length=history_length)
    env = gym.make(env_id, **env_kwargs)
    env = HistoryPrompt(env, template=settings.template, history_length=settings.history_length,
                        first_step_template=settings.first_step_template)
    return ParseAction(env, action_format=settings.action_format,
                       invalid_penalty=settings.invalid_penalty)


#: An env id (wrapped by :func:`make_agent_env`) or a factory returning a prompt env.
EnvSource = str | Callable[[], gym.Env]


def env_factory(env: EnvSource, **kwargs: Any) -> Callable[[], gym.Env]:
    """A zero-argument factory for ``env``: an id (plus ``make_agent_env`` kwargs) or a factory.

    The factory of an id pickles (a ``functools.partial``), so env workers started with
    ``spawn`` can build their envs from it.
    """
    if isinstance(env, str):
        return functools.partial(make_agent_env, env, **kwargs)
    if callable(env):
        if kwargs:
            raise ValueError(f"env settings {sorted(kwargs)} only apply to an env id; a factory "
                             "must build its own wrappers")
        return env
    raise TypeError(f"env must be an env id or a factory, got {type(env).__name__}")


def action_format_of(env: gym.Env) -> str:
    """The ``ParseAction`` format of a wrapped env (``"action"`` when there is none)."""
    from agents.env_workers import WorkerEnv
    from wrappers.parse_action import wrapped_action_format

    if isinstance(env, WorkerEnv):  # an env in a worker process: the format read there
        return env.action_format
    return wrapped_action_format(env)
