"""``HistoryPrompt``: turn raw observations into the paper's decision context h_t."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from wrappers.templates import TEMPLATES, template_slots


class HistoryPrompt(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Replace each observation by the prompt h_t built from a template and recent history.

    Built-in templates are the paper's (``"alfworld"``, ``"webshop"``, ``"search"``, see
    :mod:`wrappers.templates`); any other string is used as a ``str.format`` template with the
    same named slots:

    ========================  ==========================================================
    ``task_description``      ``info["task_description"]`` at reset (else the first observation)
    ``step_count``            steps taken so far (t)
    ``history_length``        number of (observation, action) pairs shown
    ``action_history``        ``[Observation n: '...', Action n: '...']`` lines, most recent last
    ``current_step``          t + 1
    ``current_observation``   the env's current observation
    ``admissible_actions``    ``'a1'``, ``'a2'`` ... from ``info["admissible_actions"]``
    ``available_actions``     WebShop style: ``'search[<your query>]'`` when
                              ``info["search_allowed"]``, then the clickable actions
    ``memory_context``        search style: every past action followed by its result
    ========================  ==========================================================

    The env's raw observation stays available as ``info["raw_observation"]`` (the world-model
    target o_{t+1} that :class:`~wrappers.RecordTransitions` stores). The action recorded in the
    history is ``info["parsed_action"]`` when an outer :class:`~wrappers.ParseAction` set it,
    else the action this wrapper received.

    Args:
        env: a text env honouring the PaW ``info`` contract.
        template: a built-in template name or a format string.
        history_length: how many recent steps to show (default 2, the paper's ALFWorld/WebShop
            setting); ``None`` shows the full history (the paper's search setting).
        first_step_template: template for step 0 (no history yet). Defaults to the built-in's
            no-history variant, or to ``template`` itself for a custom template.

    Example:
        >>> import gymnasium as gym, paw_gym
        >>> from wrappers import HistoryPrompt
        >>> env = HistoryPrompt(gym.make("PaW/WebShop-v0"), template="webshop")  # doctest: +SKIP
        >>> prompt, info = env.reset(seed=0)                                       # doctest: +SKIP
        >>> prompt.startswith("You are an expert autonomous agent")               # doctest: +SKIP
        True
    """

    def __init__(self, env: gym.Env, template: str = "alfworld", history_length: int | None = 2,
                 first_step_template: str | None = None):
        gym.utils.RecordConstructorArgs.__init__(self, template=template,
                                                 history_length=history_length,
                                                 first_step_template=first_step_template)
        super().__init__(env)
        if history_length is not None and (not isinstance(history_length, int) or history_length < 0):
            raise ValueError(f"history_length must be a non-negative int or None, got {history_length!r}")
        if template in TEMPLATES:
            self.template, default_first = TEMPLATES[template]
        elif "{" in template:
            self.template, default_first = template, template
        else:
            raise ValueError(f"unknown template {template!r}: use one of {sorted(TEMPLATES)} "
                             "or a format string with named slots")
        self.first_step_template = first_step_template or default_first
        self._slots = template_slots(self.template) | template_slots(self.first_step_template)
        self.history_length = history_length
        self._history: list[tuple[str, str]] = []
        self._observation = ""
        self._task_description = ""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        observation, info = self.env.reset(seed=seed, options=options)
        self._history = []
        self._observation = observation
        self._task_description = str(info.get("task_description") or observation)
        return self._prompt(info), {**info, "raw_observation": observation}

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        taken = info.get("parsed_action")
        self._history.append((self._observation, str(action if taken is None else taken)))
        self._observation = observation
        return self._prompt(info), reward, terminated, truncated, {**info, "raw_observation": observation}

    @property
    def history(self) -> list[tuple[str, str]]:
        """All (observation, action) pairs of the current episode, oldest first."""
        return list(self._history)

    def _prompt(self, info: dict[str, Any]) -> str:
        step_count = len(self._history)
        if self.history_length is None:
            shown = self._history
        else:
            shown = self._history[max(0, step_count - self.history_length):] if self.history_length else []
        first_shown = step_count - len(shown) + 1
        values: dict[str, Any] = {
            "task_description": self._task_description,
            "step_count": step_count,
            "history_length": len(shown),
            "current_step": step_count + 1,
            "current_observation": self._observation,
        }
        if "action_history" in self._slots:
            values["action_history"] = "\n".join(
                f"[Observation {first_shown + i}: '{obs}', Action {first_shown + i}: '{act}']"
                for i, (obs, act) in enumerate(shown))
        if "memory_context" in self._slots:
            # Every past action then the result it got (the observation that followed it).
            results = [obs for obs, _ in self._history[1:]] + [self._observation]
            values["memory_context"] = "\n".join(
                f"{act}\n{result}" for (_, act), result in zip(self._history, results))
        admissible = [a for a in info.get("admissible_actions", []) if a != "help"]
        if "admissible_actions" in self._slots:
            values["admissible_actions"] = "\n ".join(f"'{a}'" for a in admissible)
        if "available_actions" in self._slots:
            available = (["search[<your query>]"] if info.get("search_allowed") else []) + admissible
            values["available_actions"] = ",\n".join(f"'{a}'" for a in available)
        template = self.template if step_count else self.first_step_template
        return template.format(**values)
