"""The Lucene-like analyzer and the BM25 index behind WebShop search."""

from __future__ import annotations

import math

import numpy as np
import pytest

from paw_gym.webshop.analyzer import LUCENE_ENGLISH_STOP_WORDS, analyze, tokenize
from paw_gym.webshop.search import BM25Index, _int_to_byte4

DOCS = [
    "wireless earbuds with charging case and noise cancelling",
    "women's running shoes, lightweight and breathable",
    "stainless steel water bottle 32 oz, leak proof",
    "noise cancelling over ear headphones, wireless, 40h battery",
    "running shorts for men with zipper pockets",
    "earbuds earbuds earbuds cheap earbuds",
    "the of and a",  # only stop words: an empty document
]


def test_analyzer_lowercases_drops_stop_words_possessives_and_stems():
    assert analyze("The Women's RUNNING Shoes") == ["women", "run", "shoe"]
    assert analyze("a an and the of with") == []
    assert len(LUCENE_ENGLISH_STOP_WORDS) == 33
    # Lucene keeps decimal numbers and apostrophe contractions whole, splits on hyphens.
    assert tokenize("3.5 inch clip-in don't") == ["3.5", "inch", "clip", "in", "don't"]
    # Original Porter (Lucene's PorterStemFilter), not Porter2: "generously" -> "gener".
    assert analyze("generously caresses ponies") == ["gener", "caress", "poni"]


def test_lucene_norm_encoding_is_exact_below_24_and_lossy_above():
    lengths = np.array([0, 1, 23, 24, 25, 40, 41, 100, 1000])
    decoded = _int_to_byte4(lengths)
    assert decoded[:4].tolist() == [0, 1, 23, 24]
    # Above 24 the excess keeps 4 significant bits: 40-24=16 exact, 41-24=17 -> 16.
    assert decoded[5] == 40 and decoded[6] == 40
    assert decoded[7] == 24 + 72  # 76 = 0b1001100 -> 0b1001000 = 72
    assert np.all(decoded <= lengths) and np.all(decoded >= 0.9 * lengths - 1)


def _reference_scores(docs: list[str], query: str, k1=0.9, b=0.4) -> dict[int, float]:
    """Lucene BM25 computed directly from the formula, document by document."""
    analyzed = [analyze(d) for d in docs]
    n = len(docs)
    avgdl = sum(len(a) for a in analyzed) / n
    norm_len = _int_to_byte4(np.array([len(a) for a in analyzed]))
    scores: dict[int, float] = {}
    for term in analyze(query):
        df = sum(term in a for a in analyzed)
        if df == 0:
            continue
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        for i, a in enumerate(analyzed):
            tf = a.count(term)
            if tf:
                scores[i] = scores.get(i, 0.0) + idf * tf / (tf + k1 * (1 - b + b * norm_len[i]
                                                                        / avgdl))
    return scores


@pytest.mark.parametrize("query", ["wireless earbuds", "running", "noise cancelling headphones",
                                   "earbuds earbuds", "leak proof bottle", "zzz unknown", "the"])
def test_index_scores_match_the_lucene_formula(query):
    index = BM25Index.build(DOCS)
    docs, scores = index.score(query)
    expected = _reference_scores(DOCS, query)
    assert sorted(docs.tolist()) == sorted(expected)
    for d, s in zip(docs.tolist(), scores.tolist()):
        assert s == pytest.approx(expected[d], rel=1e-5)
    ranked = index.search(query, k=50).tolist()
    assert ranked == sorted(expected, key=lambda d: (-expected[d], d))


def test_top_k_breaks_ties_by_document_number_and_truncates():
    docs = ["red shirt"] * 30 + ["blue shirt"] * 30
    index = BM25Index.build(docs)
    top = index.search("red shirt", k=50).tolist()
    assert top[:30] == list(range(30))  # all red ones first, lowest numbers first
    assert top[30:] == list(range(30, 50))
    assert index.search("shirt", k=5).tolist() == [0, 1, 2, 3, 4]


def test_top_k_over_many_candidates_equals_a_full_sort():
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(40)]
    docs = [" ".join(rng.choice(words, size=rng.integers(3, 30))) for _ in range(3000)]
    index = BM25Index.build(docs)
    for query in ["w1 w2 w3", "w5", "w7 w7 w8 w9 w10 w11"]:
        cand, scores = index.score(query)
        full = cand[np.lexsort((cand, -scores))][:50]
        assert index.search(query, 50).tolist() == full.tolist()


def test_pruned_top_k_is_exact_on_skewed_term_frequencies():
    """Common words (low idf) are pruned to lookups; the ranking must not change."""
    rng = np.random.default_rng(1)
    words = np.array([f"w{i}" for i in range(300)])
    zipf = 1.0 / np.arange(1, 301)
    docs = [" ".join(rng.choice(words, size=rng.integers(5, 40), p=zipf / zipf.sum()))
            for _ in range(5000)]
    index = BM25Index.build(docs)
    queries = ["w0 w1 w250", "w0 w0 w299 w120", "w2 w3 w4 w200 w201", "w0 w1 w2 w3 w280",
               "w150 w0", "w5 w6"]
    for query in queries:
        cand, scores = index.score(query)
        for k in (1, 10, 50):
            full = cand[np.lexsort((cand, -scores))][:k]
            assert index.search(query, k).tolist() == full.tolist(), (query, k)


def test_disk_cache_round_trip(tmp_path):
    built = BM25Index.cached(DOCS, tmp_path)
    files = list(tmp_path.glob("bm25-*.npz"))
    assert len(files) == 1
    loaded = BM25Index.cached(DOCS, tmp_path)
    assert loaded.terms == built.terms
    for query in ["wireless earbuds", "running shoes"]:
        assert loaded.search(query).tolist() == built.search(query).tolist()
    # Different documents get a different cache entry.
    BM25Index.cached(DOCS[:-1], tmp_path)
    assert len(list(tmp_path.glob("bm25-*.npz"))) == 2
    # A corrupt cache file is rebuilt rather than crashing.
    files[0].write_bytes(b"not an npz")
    again = BM25Index.cached(DOCS, tmp_path)
    assert again.search("earbuds").tolist() == built.search("earbuds").tolist()


def test_scores_equal_bm25s_lucene_where_lucene_norms_are_exact():
    """An independent implementation (bm25s, method="lucene") gives the same scores.

    Documents shorter than 24 terms keep their exact length under Lucene's norm encoding, so
    here the two must agree to float precision.
    """
    bm25s = pytest.importorskip("bm25s")
    docs = DOCS[:-1]
    assert all(len(analyze(d)) < 24 for d in docs)
    reference = bm25s.BM25(method="lucene", k1=0.9, b=0.4)
    reference.index([analyze(d) for d in docs], show_progress=False)
    index = BM25Index.build(docs)
    for query in ["wireless earbuds", "noise cancelling headphones", "running", "leak proof"]:
        expected = reference.get_scores(analyze(query))
        got = np.zeros(len(docs))
        cand, scores = index.score(query)
        got[cand] = scores
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7)
