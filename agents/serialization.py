"""The one serialisation of a transition (h_t, a_t, o_{t+1}) as token ids, for every
world-model path: the trainer's PaW term, the pretraining transcripts, offline ``cmae`` in
``paw-gym train-wm``, :func:`training.warmstart.pretrain.next_observation_accuracy` and the
noise-gradient diagnostic, and the transcript agent (:mod:`agents.transcript`). It sits in
``agents/`` because both agents and training use it.

A row is ``chat(h) ⊕ a ⊕ s ⊕ o``: the prompt ids the policy saw (chat template, generation
prompt), the response ids it generated, a separator ``s`` chosen by ``wm_context``, then the
next-observation tokens (the WM targets; ``s`` is never a target):

* ``next_turn`` (default): o_{t+1} arrives as the environment's next message, rendered by the
  model's chat template: the end-of-turn token, then the template's header of the observation's
  turn (ChatML: ``<|im_end|>\\n<|im_start|>user\\n``). Observations are what the prompts show
  as user messages, so this is where a chat model meets them.
* ``end_of_turn``: one end-of-turn token, then o_{t+1}.
* ``none``: o_{t+1} right after the action's last token (the literal reading of the paper's
  "(h_t, a_t, o_{t+1})"). Rollouts stop at the ``</action>`` stop string, so there o_{t+1} is
  trained as a continuation of the policy's *own* turn, where its next token should be its
  end-of-turn; a small model learns to write environment text as its action (issue 25:
  ``paw-gym demo --seed 7`` fell from 60.9 % to 15.6 % held-out). Kept for ablations.

A response that already ends with an end-of-turn token (generation stopped on EOS rather than a
stop string) does not get a second one. A row without observation tokens gets no separator,
so ``h ⊕ a`` rows are the same in every context.

    >>> serializer = TransitionSerializer(tokenizer, "next_turn", eos_ids)  # doctest: +SKIP
    >>> row = serializer(prompt_ids, response_ids, obs_ids, max_len=4096)     # doctest: +SKIP
    >>> row.ids[row.obs_start:row.obs_start + row.obs_len] == obs_ids          # doctest: +SKIP
"""

from __future__ import annotations

import typing
from typing import Any, Literal, NamedTuple, Sequence

WMContext = Literal["next_turn", "end_of_turn", "none"]
WM_CONTEXTS: tuple[str, ...] = typing.get_args(WMContext)
#: The chat role of the environment's message: the prompts carry observations as user
#: messages (the paper's Appendix A.3 templates), so the next observation is the next user turn.
OBSERVATION_ROLE = "user"
# Sentinels that no template alters; the text between them is the separator.
_ACTION_MARK, _OBSERVATION_MARK = "\x1eACTION\x1e", "\x1eOBSERVATION\x1e"


class Serialized(NamedTuple):
    """One serialised row and where its parts are."""

    ids: list[int]
    prompt_len: int
    action_len: int
    separator_len: int
    obs_len: int

    @property
    def obs_start(self) -> int:
        """Index of the first observation token in :attr:`ids`."""
        return self.prompt_len + self.action_len + self.separator_len


def serialize(prompt_ids: Sequence[int], response_ids: Sequence[int], obs_ids: Sequence[int],
              max_len: int, separator: Sequence[int] = ()) -> Serialized:
    """Concatenate ``h ⊕ a ⊕ separator ⊕ o`` within ``max_len`` tokens.

    The observation is cut first (from its end; with no observation token left the separator
    goes too), then the prompt from its left (keeping at least one token, so the first action
    token still has a context to be predicted from). The action is never cut: the RL loss needs
    every generated token.
    """
    if not response_ids:
        raise ValueError("a transition with an empty response has no action token to train on")
    room_for_prompt = max(1, max_len - len(response_ids))
    prompt = list(prompt_ids[-room_for_prompt:]) if len(prompt_ids) > room_for_prompt \
        else list(prompt_ids)
    if not prompt:
        raise ValueError("a transition needs at least one prompt token")
    room = max(0, max_len - len(prompt) - len(response_ids) - len(separator))
    obs = list(obs_ids[:room])
    sep = list(separator) if obs else []
    return Serialized(prompt + list(response_ids) + sep + obs, len(prompt), len(response_ids),
                      len(sep), len(obs))


def chat_separator_text(tokenizer: Any, role: str = OBSERVATION_ROLE) -> str:
    """The text a chat template puts between an assistant message's content and the content of
    the next ``role`` message (ChatML: ``<|im_end|>\\n<|im_start|>user\\n``)."""
    template = getattr(tokenizer, "chat_template", None)
    if not template:
        raise ValueError(f"wm_context='next_turn' needs a chat template, and tokenizer "
                         f"{type(tokenizer).__name__} has none; use wm_context: end_of_turn")
    messages = [{"role": "user", "content": "h"}, {"role": "assistant", "content": _ACTION_MARK},
                {"role": role, "content": _OBSERVATION_MARK}]
    from agents.chat import render_chat

    text = render_chat(tokenizer, messages)
    start, end = text.find(_ACTION_MARK), text.find(_OBSERVATION_MARK)
    if start < 0 or end < start:
        raise ValueError("the chat template does not render an assistant message followed by a "
                         f"{role!r} message; use wm_context: end_of_turn")
    return text[start + len(_ACTION_MARK):end]


def observation_separator(tokenizer: Any, wm_context: str, eos_ids: Sequence[int]) -> list[int]:
    """Token ids that ``wm_context`` puts between a response and o_{t+1} (before the
    already-ended-turn rule of :class:`TransitionSerializer`).

    ``end_of_turn`` uses the end-of-turn token of the chat template (the first token of its
    ``next_turn`` separator) when that is one of ``eos_ids``, else ``eos_ids[0]``.
    """
    if wm_context not in WM_CONTEXTS:
        raise ValueError(f"wm_context={wm_context!r} is invalid; expected "
                         + " | ".join(WM_CONTEXTS))
    if wm_context == "none":
        return []
    if not eos_ids:
        raise ValueError(f"wm_context={wm_context!r} needs an end-of-turn token, and the model "
                         "defines no EOS token")
    if wm_context == "next_turn":
        ids = list(tokenizer(chat_separator_text(tokenizer), add_special_tokens=False)["input_ids"])
        if not ids:
            raise ValueError("the chat template puts nothing between two turns; use "
                             "wm_context: end_of_turn")
        return ids
    try:
        first = tokenizer(chat_separator_text(tokenizer), add_special_tokens=False)["input_ids"][:1]
    except ValueError:  # no usable chat template: the model's EOS ends a turn
        first = []
    return [first[0]] if first and first[0] in eos_ids else [int(eos_ids[0])]


class TransitionSerializer:
    """``wm_context``'s serialisation of transitions for one tokenizer (see the module
    docstring). Call it with token ids; :meth:`encode` takes text the way the policy encodes
    its prompts.

    Args:
        tokenizer: the policy's tokenizer (with its chat template).
        wm_context: ``next_turn``, ``end_of_turn`` or ``none``.
        eos_ids: the policy's end-of-turn / EOS ids (``HFPolicy.eos_ids``).
    """

    def __init__(self, tokenizer: Any, wm_context: str, eos_ids: Sequence[int]):
        self.tokenizer = tokenizer
        self.wm_context = wm_context
        self.eos_ids = frozenset(int(i) for i in eos_ids)
        self.separator = observation_separator(tokenizer, wm_context, tuple(eos_ids))

    @classmethod
    def for_policy(cls, policy: Any, wm_context: str) -> "TransitionSerializer":
        """The serializer of an :class:`agents.HFPolicy` (its tokenizer and EOS ids)."""
        return cls(policy.tokenizer, wm_context, policy.eos_ids)

    def separator_after(self, response_ids: Sequence[int]) -> list[int]:
        """The separator for this response: without its leading end-of-turn token when the
        response already ends with one."""
        sep = self.separator
        if sep and response_ids and int(response_ids[-1]) in self.eos_ids and sep[0] in self.eos_ids:
            return sep[1:]
        return sep

    def __call__(self, prompt_ids: Sequence[int], response_ids: Sequence[int],
                 obs_ids: Sequence[int], max_len: int) -> Serialized:
        return serialize(prompt_ids, response_ids, obs_ids, max_len,
                         self.separator_after(response_ids))

    def encode(self, policy: Any, h: str, a: str, o_next: str, max_len: int,
               max_obs_tokens: int | None = None) -> Serialized:
        """A transition given as text: ``h`` through the policy's chat encoding (as it was
        prompted), ``a`` and ``o_next`` tokenised without special tokens."""
        prompt_ids, _ = policy.encode_prompt(h, max_new_tokens=1)
        action_ids = self.tokenizer(a, add_special_tokens=False)["input_ids"]
        obs_ids = self.tokenizer(o_next, add_special_tokens=False)["input_ids"]
        return self(prompt_ids, action_ids, obs_ids[:max_obs_tokens], max_len)
