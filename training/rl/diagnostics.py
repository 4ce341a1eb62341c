"""The paper's noise-gradient diagnostic (Appendix A.4, Figure 2c): how much of the world-model
gradient falls on next-observation tokens that ``h`` and ``a`` cannot predict.

For the i-th target token of o_{t+1} with probability p_i (teacher-forced, the WM
serialisation), the magnitude of the loss gradient with respect to the target token's logit is

    CE   −log p_i          →  1 − p_i
    MAE  1 − p_i           →  p_i (1 − p_i)
    CMAE 1[p_i ≤ ρ](1 − p_i)  →  1[p_i ≤ ρ] p_i (1 − p_i)

A loss's *noise share* is Σ_{noisy i} g_i / Σ_i g_i over all scored tokens. Noisy tokens follow
the paper's WebShop rules: a token is noisy when its character span overlaps an ASIN-style
product identifier (``B[0-9A-Z]{9}``) or a brand-like uppercase span (four or more capitals,
optionally followed by digits; ``SEP`` has three and stays meaningful).

    >>> gradient_shares([0.9, 0.01], [False, True])    # doctest: +SKIP
    {'ce': 0.9166..., 'mae': 0.0990..., 'cmae': 1.0}
"""

from __future__ import annotations

import re
from typing import Sequence

#: ASIN-style identifiers and brand-like uppercase spans (Appendix A.4).
NOISE_PATTERN = re.compile(r"B[0-9A-Z]{9}|[A-Z]{4,}[0-9]*")


def noisy_spans(text: str) -> list[tuple[int, int]]:
    """Character spans ``[start, end)`` of the noisy strings in ``text``."""
    return [match.span() for match in NOISE_PATTERN.finditer(text)]


def noisy_token_mask(pieces: Sequence[str]) -> list[bool]:
    """Per token: does its character span overlap a noisy span of the text the ``pieces``
    (the tokens' strings, in order) concatenate to? A subword inherits its word's label."""
    spans = noisy_spans("".join(pieces))
    mask, start = [], 0
    for piece in pieces:
        end = start + len(piece)
        mask.append(any(s < end and start < e for s, e in spans) if end > start else False)
        start = end
    return mask


def gradient_shares(probabilities: Sequence[float], noisy: Sequence[bool],
                    rho: float = 0.2) -> dict[str, float]:
    """Share of the target-logit gradient magnitude on noisy tokens under CE, MAE and CMAE
    (``nan`` for a loss whose gradient is zero on every token)."""
    if len(probabilities) != len(noisy):
        raise ValueError(f"{len(probabilities)} probabilities but {len(noisy)} noise labels")
    weights = {
        "ce": [1.0 - p for p in probabilities],
        "mae": [p * (1.0 - p) for p in probabilities],
        "cmae": [p * (1.0 - p) if p <= rho else 0.0 for p in probabilities],
    }
    shares = {}
    for loss, ws in weights.items():
        total = sum(ws)
        shares[loss] = (sum(w for w, n in zip(ws, noisy) if n) / total) if total > 0 else float("nan")
    return shares
