"""A pure-Python stand-in for the Lucene English analyzer that WebShop's search index uses.

WebShop indexes products with pyserini's default analyzer (Lucene ``StandardTokenizer`` →
English possessive filter → lowercase → English stop words → Porter stemmer), and analyzes
queries the same way. This module reproduces that chain so that a query finds the same
products:

* tokens are runs of word characters, kept together across an inner ``.`` or apostrophe
  (``3.5``, ``don't``), which is how Unicode word segmentation (UAX #29, Lucene's
  ``StandardTokenizer``) treats them; hyphens, slashes and other punctuation split tokens;
* a trailing possessive ``'s`` is dropped;
* Lucene's 33 English stop words are removed;
* the remaining tokens are stemmed with the original Porter algorithm (PyStemmer's
  ``porter``, the algorithm Lucene's ``PorterStemFilter`` implements).
"""

from __future__ import annotations

import re
from functools import lru_cache

import Stemmer

#: Lucene's ``EnglishAnalyzer.ENGLISH_STOP_WORDS_SET``.
LUCENE_ENGLISH_STOP_WORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their "
    "then there these they this to was will with".split()
)

_TOKEN = re.compile(r"\w+(?:[.'’]\w+)*")
_POSSESSIVE = re.compile(r"['’]s$")
_STEMMER = Stemmer.Stemmer("porter")


@lru_cache(maxsize=1 << 20)
def _stem(word: str) -> str:
    return _STEMMER.stemWord(word)


def tokenize(text: str) -> list[str]:
    """Lowercased tokens of ``text`` before stop-word removal and stemming."""
    return [_POSSESSIVE.sub("", t) for t in _TOKEN.findall(text.lower())]


def analyze(text: str) -> list[str]:
    """The index terms of ``text``: tokenized, stop words removed, Porter-stemmed.

    Duplicates are kept (term frequency matters to BM25, and a query that repeats a word
    weighs it twice, as a Lucene ``BooleanQuery`` of repeated clauses does).

    >>> analyze("The Women's Running Shoes, 3.5 inch")
    ['women', 'run', 'shoe', '3.5', 'inch']
    """
    return [_stem(t) for t in tokenize(text) if t and t not in LUCENE_ENGLISH_STOP_WORDS]
