"""Prompt string -> token ids, the same way for every backend (chat template, left truncation)."""

from __future__ import annotations

import functools
import logging
import warnings
from typing import Any, Sequence

logger = logging.getLogger(__name__)


def render_chat(tokenizer, messages: list[dict], **kwargs) -> str:
    """``tokenizer.apply_chat_template(messages, tokenize=False)``, with a template that fails
    to render (a syntax error, or an access transformers' Jinja sandbox refuses) as one
    ValueError."""
    from jinja2 import TemplateError

    try:
        return tokenizer.apply_chat_template(messages, tokenize=False, **kwargs)
    except TemplateError as error:
        raise ValueError(f"the chat template of {getattr(tokenizer, 'name_or_path', 'the model')!r}"
                         f" failed to render ({type(error).__name__}: {error}); transformers "
                         f"renders it in a sandbox, so nothing it asked for ran") from None


def template_default_system(tokenizer) -> bool:
    """Whether ``tokenizer``'s chat template inserts a system message of its own when the
    messages have none: the text it puts before a user message is longer without a system
    message than with an empty one."""
    mark = "\x1eUSER\x1e"
    try:
        alone = render_chat(tokenizer, [{"role": "user", "content": mark}])
        empty = render_chat(tokenizer, [{"role": "system", "content": ""},
                                        {"role": "user", "content": mark}])
    except ValueError:  # a template that refuses a system message has no default one
        return False
    return mark in empty and alone.find(mark) > empty.find(mark)


class ChatEncoder:
    """Turns a user message into the prompt ids a backend generates from.

    The tokenizer's chat template is applied with ``add_generation_prompt=True``; the text is
    tokenised without extra special tokens; ids that do not fit in ``max_context -
    max_new_tokens`` are cut from the left (the oldest history goes first), and each cut is
    counted in :attr:`truncated_prompts`.

    **The system message** is decided here, on purpose, for every backend alike:

    * ``system_prompt`` a string: that system message before every prompt (``""``: an empty
      one).
    * ``system_prompt=None`` (the default): the env's prompt alone says what is asked. A chat
      template that inserts a default system message of its own when none is given (SmolLM2:
      "You are a helpful AI assistant named SmolLM, trained by Hugging Face"; Qwen2.5: "You
      are Qwen, created by Alibaba Cloud. You are a helpful assistant.") gets an empty system
      message instead, so that identity line is not there; a template without such a default
      renders the prompt alone. (SmolLM2-135M-Instruct, asked Shelf's prompt under its default
      line, answered "I'm ready to assist you. What's your task?".) To reproduce a run that
      had the default line (the paper's verl-agent runs on Qwen2.5), give its text as
      ``system_prompt``.
    """

    def __init__(self, tokenizer: Any, max_context: int | None, system_prompt: str | None,
                 fallback_start_id: int):
        self.tokenizer = tokenizer
        self.max_context = max_context
        self.system_prompt = system_prompt
        self.fallback_start_id = fallback_start_id
        self.truncated_prompts = 0

    def chat_text(self, prompt: str) -> str:
        """The prompt as the model sees it: chat template with the generation prompt."""
        if not getattr(self.tokenizer, "chat_template", None):
            raise ValueError(f"tokenizer {type(self.tokenizer).__name__} has no chat template; "
                             "use an instruct model or set tokenizer.chat_template")
        messages = [{"role": "user", "content": prompt}]
        system = self.system_message
        if system is not None:
            messages.insert(0, {"role": "system", "content": system})
        return render_chat(self.tokenizer, messages, add_generation_prompt=True)

    @functools.cached_property
    def system_message(self) -> str | None:
        """The system message every prompt gets (None: none; see the class docstring)."""
        if self.system_prompt is not None:
            return self.system_prompt
        return "" if template_default_system(self.tokenizer) else None

    def encode(self, prompt: str, max_new_tokens: int) -> tuple[list[int], bool]:
        """Prompt ids and whether they were cut from the left."""
        ids = list(self.tokenizer(self.chat_text(prompt), add_special_tokens=False)["input_ids"])
        if not ids:  # a template that renders an empty prompt to nothing: give the model a start
            bos = self.tokenizer.bos_token_id
            ids = [bos if bos is not None else self.fallback_start_id]
        budget = self.prompt_budget(max_new_tokens)
        if budget is not None and len(ids) > budget:
            return ids[len(ids) - budget:], True
        return ids, False

    def encode_batch(self, prompts: Sequence[str], max_new_tokens: int
                     ) -> list[tuple[list[int], bool]]:
        """:meth:`encode` for each prompt, counting (and warning about) truncations."""
        if isinstance(prompts, str):
            raise TypeError("act() takes a list of prompts, got a single str")
        encoded = [self.encode(p, max_new_tokens) for p in prompts]
        self._count_truncations(sum(cut for _, cut in encoded))
        return encoded

    def prompt_budget(self, max_new_tokens: int) -> int | None:
        if self.max_context is None:
            return None
        budget = self.max_context - max_new_tokens
        if budget < 1:
            raise ValueError(f"max_new_tokens={max_new_tokens} leaves no room for the prompt in "
                             f"a context of {self.max_context} tokens")
        return budget

    def _count_truncations(self, count: int) -> None:
        if not count:
            return
        if self.truncated_prompts == 0:
            warnings.warn(f"{count} prompt(s) longer than the context ({self.max_context} tokens "
                          "minus max_new_tokens) were cut from the left; see the policy's "
                          "truncated_prompts for the running count", stacklevel=4)
        self.truncated_prompts += count
        logger.info("%d prompt(s) truncated so far", self.truncated_prompts)


def check_sampling_args(temperature: float, max_new_tokens: int) -> None:
    """Name the bad value of a sampling argument."""
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
