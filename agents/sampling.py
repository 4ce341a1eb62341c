"""Backend-independent pieces of sampling: token statistics and per-row stop bookkeeping."""

from __future__ import annotations

from typing import Any, Sequence

import torch

from agents.types import PolicyOutput

#: Stop strings of the paper's prompt templates: an action, a search query, an answer.
DEFAULT_STOP = ("</action>", "</search>", "</answer>")


def token_statistics(logits: torch.Tensor, temperature: float,
                     generator: torch.Generator | None = None,
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sample one token per row and return ``(tokens, logprobs, entropies)``.

    The distribution is ``softmax(logits / temperature)`` (``softmax(logits)`` when
    ``temperature == 0``, where the token is the argmax); log-probs and entropies are of that
    same distribution, computed in float32.
    """
    logits = logits.float()
    if temperature > 0:
        logits = logits / temperature
    logp = torch.log_softmax(logits, dim=-1)
    if temperature > 0:
        tokens = sample_categorical(logp.exp(), generator)
    else:
        tokens = logp.argmax(dim=-1)
    return tokens, logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1), entropy_from_logprobs(logp)


def sample_categorical(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One index per row drawn from ``probs`` by inverting the CDF with one uniform number
    (exact; ~5x faster than ``torch.multinomial`` on CPU for a batch of 128 x 8k)."""
    cdf = probs.cumsum(-1)
    u = torch.rand((probs.shape[0], 1), generator=generator, device=probs.device,
                   dtype=cdf.dtype) * cdf[:, -1:]
    tokens = torch.searchsorted(cdf, u, right=True).squeeze(-1)
    return tokens.clamp_(max=probs.shape[-1] - 1)


def entropy_from_logprobs(logp: torch.Tensor) -> torch.Tensor:
    """Entropy over the last dim of a log-softmax tensor (0 * -inf counts as 0)."""
    return -(logp.exp() * logp.nan_to_num(neginf=0.0)).sum(-1)


class SamplingBatch:
    """Responses being generated for a batch of prompts, and when each one must stop.

    A row stops when it emits an EOS id, when its decoded text contains a stop string, or after
    ``max_new_tokens`` tokens. Stop strings are looked for in a decoded window of the last
    tokens only (long enough to hold any stop string), so a step costs O(batch) decoding.
    """

    def __init__(self, prompt_ids: Sequence[list[int]], tokenizer: Any, eos_ids: Sequence[int],
                 stop: Sequence[str], max_new_tokens: int):
        self.prompt_ids = list(prompt_ids)
        self.tokenizer = tokenizer
        self.eos_ids = frozenset(eos_ids)
        self.stop = tuple(s for s in stop if s)
        self.max_new_tokens = max_new_tokens
        # Each token holds at least one byte and a character at most four.
        self._window = 4 * max((len(s) for s in self.stop), default=0) + 2
        n = len(self.prompt_ids)
        self.response_ids: list[list[int]] = [[] for _ in range(n)]
        self.logprobs: list[list[float]] = [[] for _ in range(n)]
        self.entropies: list[list[float]] = [[] for _ in range(n)]
        self.finish_reason: list[str | None] = [None] * n

    def append(self, rows: Sequence[int], tokens: Sequence[int], logprobs: Sequence[float],
               entropies: Sequence[float]) -> list[bool]:
        """Add one token to each of ``rows``; return, per row, whether it is now finished."""
        finished = []
        for row, token, logprob, entropy in zip(rows, tokens, logprobs, entropies):
            self.response_ids[row].append(token)
            self.logprobs[row].append(logprob)
            self.entropies[row].append(entropy)
            if token in self.eos_ids or self._hit_stop(row):
                self.finish_reason[row] = "stop"
            elif len(self.response_ids[row]) >= self.max_new_tokens:
                self.finish_reason[row] = "length"
            finished.append(self.finish_reason[row] is not None)
        return finished

    def _hit_stop(self, row: int) -> bool:
        if not self.stop:
            return False
        tail = self.tokenizer.decode(self.response_ids[row][-self._window:],
                                     skip_special_tokens=True)
        return any(s in tail for s in self.stop)

    def output(self, row: int, prompt_truncated: bool = False) -> PolicyOutput:
        """The finished row as a :class:`PolicyOutput`."""
        text = self.tokenizer.decode(self.response_ids[row], skip_special_tokens=True)
        return PolicyOutput(
            text=cut_at_stop(text, self.stop),
            prompt_ids=list(self.prompt_ids[row]),
            response_ids=list(self.response_ids[row]),
            logprobs=list(self.logprobs[row]),
            entropies=list(self.entropies[row]),
            finish_reason=self.finish_reason[row] or "length",
            prompt_truncated=prompt_truncated,
        )


def cut_at_stop(text: str, stop: Sequence[str]) -> str:
    """``text`` up to and including the earliest stop string in it (unchanged if none)."""
    ends = [text.index(s) + len(s) for s in stop if s and s in text]
    return text[:min(ends)] if ends else text
