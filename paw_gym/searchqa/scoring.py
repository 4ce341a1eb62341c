"""Answer scoring as in Search-R1 (``verl/utils/reward_score/qa_em.py``) and SQuAD-style F1.

Normalisation: lowercase, drop ASCII punctuation, drop the articles *a*, *an*, *the*, collapse
whitespace. Exact match (EM) is true when the normalised prediction equals the normalised form
of any gold alias; sub-EM when any normalised alias occurs inside the normalised prediction;
token F1 is the best unigram-overlap F1 over the aliases (reporting only, never the reward).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Iterable

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """Search-R1 / SQuAD answer normalisation."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _aliases(golden: str | Iterable[str]) -> list[str]:
    return [golden] if isinstance(golden, str) else [str(alias) for alias in golden]


def exact_match(prediction: str, golden: str | Iterable[str]) -> bool:
    """True when ``prediction`` equals any gold alias after normalisation."""
    predicted = normalize_answer(prediction)
    return any(predicted == normalize_answer(alias) for alias in _aliases(golden))


def substring_exact_match(prediction: str, golden: str | Iterable[str]) -> bool:
    """True when any normalised gold alias occurs inside the normalised prediction (sub-EM)."""
    predicted = normalize_answer(prediction)
    return any(normalize_answer(alias) in predicted for alias in _aliases(golden))


def token_f1(prediction: str, golden: str | Iterable[str]) -> float:
    """Best token-level F1 between the prediction and any gold alias (after normalisation)."""
    predicted = normalize_answer(prediction).split()
    best = 0.0
    for alias in _aliases(golden):
        gold = normalize_answer(alias).split()
        common = sum((Counter(predicted) & Counter(gold)).values())
        if common == 0:
            continue
        precision, recall = common / len(predicted), common / len(gold)
        best = max(best, 2 * precision * recall / (precision + recall))
    return best
