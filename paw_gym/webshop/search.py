"""BM25 search over the catalog, faithful to the Lucene index that WebShop queries.

WebShop searches with pyserini (Lucene BM25, ``k1=0.9``, ``b=0.4``) over one text field per
product. :class:`BM25Index` reproduces Lucene's scoring exactly where it matters for ranking:

* ``idf = ln(1 + (N - df + 0.5) / (df + 0.5))`` and ``score = idf · tf / (tf + k1·(1 - b +
  b·dl/avgdl))`` (Lucene ≥ 8 drops the constant ``k1 + 1`` factor);
* the document length ``dl`` goes through Lucene's lossy one-byte norm encoding
  (``SmallFloat.intToByte4``), while ``avgdl`` is exact, as in Lucene;
* hits are ordered by score, ties by document number (insertion order);
* the analyzer is :func:`paw_gym.webshop.analyzer.analyze`.

The index is a term-major sparse matrix of precomputed per-(term, doc) scores (the "eager"
layout of bm25s): a query sums a few posting slices and picks the top k among the touched
documents only, so a search costs microseconds even at 100k products. Indexes are cached on
disk (``.npz``, no pickle) keyed by a hash of the documents and parameters.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from itertools import accumulate
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

from paw_gym.progress import progress_bar
from paw_gym.webshop.analyzer import analyze

#: Lucene's BM25 defaults as configured by pyserini (and therefore by WebShop).
LUCENE_K1 = 0.9
LUCENE_B = 0.4
_CACHE_VERSION = 1
#: Below this many postings a query is scored exhaustively (pruning costs more than it saves).
PRUNE_MIN_POSTINGS = 4096


def _int_to_byte4(length: np.ndarray) -> np.ndarray:
    """Lucene ``SmallFloat.intToByte4`` followed by ``byte4ToInt``: the decoded norm length.

    Lengths below 24 are exact; above, only 4 significant bits of ``length - 24`` survive.
    """
    free = 24  # 255 - longToInt4(Integer.MAX_VALUE)
    out = length.astype(np.int64).copy()
    big = out >= free
    rest = out[big] - free
    num_bits = np.floor(np.log2(np.maximum(rest, 1))).astype(np.int64) + 1
    num_bits[rest == 0] = 0
    shift = np.maximum(num_bits - 4, 0)
    normal = num_bits >= 4
    mantissa = np.where(normal, ((rest >> shift) & 0x07) | 0x08, rest)
    decoded = np.where(normal, mantissa << shift, rest)
    out[big] = free + decoded
    return out


class BM25Index:
    """Lucene-equivalent BM25 over a fixed list of documents (document number = position)."""

    def __init__(self, terms: list[str], indptr: np.ndarray, doc_ids: np.ndarray,
                 weights: np.ndarray, num_docs: int, k1: float = LUCENE_K1, b: float = LUCENE_B):
        self.terms = terms
        self.vocab = {t: i for i, t in enumerate(terms)}
        self.indptr = indptr
        self.doc_ids = doc_ids
        self.weights = weights
        self.num_docs = num_docs
        self.k1, self.b = k1, b
        self._accumulator = np.zeros(num_docs, dtype=np.float32)
        # Largest contribution of each term to any document: bounds for top-k pruning.
        nonempty = indptr[:-1] < indptr[1:]
        self.max_weight = np.zeros(len(terms), dtype=np.float32)
        if weights.size:
            self.max_weight[nonempty] = np.maximum.reduceat(weights, indptr[:-1][nonempty])
        # Plain-Python copies for the per-query bookkeeping (numpy scalars are slow to index).
        self._bounds = self.max_weight.tolist()
        self._starts = indptr.tolist()

    # -- building -------------------------------------------------------------------------
    @classmethod
    def build(cls, documents: Sequence[str], k1: float = LUCENE_K1, b: float = LUCENE_B,
              progress: bool = False) -> "BM25Index":
        """Index ``documents`` (already lowercased or not: the analyzer lowercases)."""
        vocab: dict[str, int] = {}
        term_col: list[int] = []
        doc_col: list[int] = []
        tf_col: list[int] = []
        lengths = np.zeros(len(documents), dtype=np.int64)
        docs: Iterable[str] = documents
        if progress:
            docs = progress_bar(documents, desc="indexing catalog", unit="doc", leave=False)
        for doc_number, text in enumerate(docs):
            analyzed = analyze(text)
            lengths[doc_number] = len(analyzed)
            for term, tf in Counter(analyzed).items():
                term_col.append(vocab.setdefault(term, len(vocab)))
                doc_col.append(doc_number)
                tf_col.append(tf)
        terms = list(vocab)
        t = np.asarray(term_col, dtype=np.int64)
        d = np.asarray(doc_col, dtype=np.int32)
        tf = np.asarray(tf_col, dtype=np.float32)
        n = len(documents)
        df = np.bincount(t, minlength=len(terms)).astype(np.float64)
        idf = np.log(1.0 + (n - df + 0.5) / (df + 0.5)).astype(np.float32)
        avgdl = float(lengths.sum()) / max(n, 1)
        norm_len = _int_to_byte4(lengths).astype(np.float32)
        norm = (k1 * ((1.0 - b) + b * norm_len / max(avgdl, 1e-9))).astype(np.float32)
        weights = (idf[t] * (tf / (tf + norm[d]))).astype(np.float32)
        order = np.lexsort((d, t))  # term-major, documents ascending inside a term
        indptr = np.zeros(len(terms) + 1, dtype=np.int64)
        np.cumsum(np.bincount(t, minlength=len(terms)), out=indptr[1:])
        return cls(terms, indptr, d[order], weights[order], n, k1, b)

    # -- persistence ----------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> None:
        """Write the index to ``path`` (``.npz``; vocabulary as UTF-8 bytes, no pickle)."""
        vocab_bytes = np.frombuffer("\n".join(self.terms).encode("utf-8"), dtype=np.uint8)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp.npz")
        np.savez(tmp, vocab=vocab_bytes, indptr=self.indptr, doc_ids=self.doc_ids,
                 weights=self.weights, meta=np.array([self.num_docs, self.k1, self.b,
                                                      _CACHE_VERSION], dtype=np.float64))
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "BM25Index":
        with np.load(path, allow_pickle=False) as data:
            num_docs, k1, b, version = data["meta"].tolist()
            if int(version) != _CACHE_VERSION:
                raise ValueError(f"index cache {path} has version {version}, "
                                 f"expected {_CACHE_VERSION}")
            raw = data["vocab"].tobytes().decode("utf-8")
            terms = raw.split("\n") if raw else []
            return cls(terms, data["indptr"], data["doc_ids"], data["weights"], int(num_docs),
                       k1, b)

    @classmethod
    def cached(cls, documents: Sequence[str] | Callable[[], Sequence[str]],
               cache_dir: str | os.PathLike | None, k1: float = LUCENE_K1, b: float = LUCENE_B,
               progress: bool = False, key: str | None = None) -> "BM25Index":
        """Load the index of ``documents`` from ``cache_dir`` or build and store it there.

        ``documents`` may be a callable producing them (called only when the index must be
        built or hashed). The cache file is named by ``key`` when given (the caller vouches
        that the key identifies the documents), else by a hash of the documents.
        ``cache_dir=None`` builds in memory without touching the disk.
        """
        texts: Sequence[str] | None = None if callable(documents) else documents

        def get_texts() -> Sequence[str]:
            nonlocal texts
            if texts is None:
                texts = documents()  # type: ignore[operator]
            return texts

        if cache_dir is None:
            return cls.build(get_texts(), k1, b, progress)
        if key is None:
            digest = hashlib.sha1()
            for text in get_texts():
                digest.update(text.encode("utf-8"))
                digest.update(b"\x00")
            key = digest.hexdigest()
        name = hashlib.sha1(f"v{_CACHE_VERSION} k1={k1} b={b} {key}".encode()).hexdigest()[:20]
        path = Path(cache_dir) / f"bm25-{name}.npz"
        if path.exists():
            try:
                return cls.load(path)
            except (OSError, ValueError, KeyError):
                pass  # a torn or stale cache file is rebuilt below
        index = cls.build(get_texts(), k1, b, progress)
        try:
            index.save(path)
        except OSError:
            pass  # a read-only cache location only costs the rebuild next time
        return index

    # -- querying -------------------------------------------------------------------------
    def score(self, query: str) -> tuple[np.ndarray, np.ndarray]:
        """``(doc_numbers, scores)`` of every document matching at least one query term.

        ``doc_numbers`` is ascending. Repeated query terms count once per occurrence.
        """
        ids = [self.vocab[t] for t in analyze(query) if t in self.vocab]
        if not ids:
            return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.float32)
        if len(ids) == 1:
            lo, hi = self._starts[ids[0]], self._starts[ids[0] + 1]
            return self.doc_ids[lo:hi], self.weights[lo:hi]
        acc = self._accumulator
        slices = []
        for term_id in ids:
            lo, hi = self._starts[term_id], self._starts[term_id + 1]
            docs = self.doc_ids[lo:hi]
            acc[docs] += self.weights[lo:hi]
            slices.append(docs)
        touched = sum(len(s) for s in slices)
        if touched > self.num_docs // 8:
            candidates = np.flatnonzero(acc).astype(np.int32)
        else:
            candidates = np.unique(np.concatenate(slices))
        scores = acc[candidates]
        acc[candidates] = 0.0
        return candidates, scores

    def search(self, query: str, k: int = 50) -> np.ndarray:
        """Document numbers of the top ``k`` hits, best first (ties: lower number first).

        Exact top-k with MaxScore-style pruning: query terms are added rarest-impact last;
        once the terms still to come cannot lift an unseen document above the current k-th
        score, they only update the documents already found (a binary search in their
        postings) instead of touching all their postings.
        """
        counts = Counter(self.vocab[t] for t in analyze(query) if t in self.vocab)
        if not counts:
            return np.zeros(0, dtype=np.int32)
        postings = sum(self._starts[t + 1] - self._starts[t] for t in counts)
        if postings <= PRUNE_MIN_POSTINGS:
            return self._top_k(*self.score(query), k)
        max_weight = self._bounds
        terms = sorted(counts.items(), key=lambda tc: -max_weight[tc[0]] * tc[1])
        bounds = [max_weight[t] * c for t, c in terms]
        remaining = list(accumulate(reversed(bounds)))[::-1] + [0.0]
        seen_bound = list(accumulate(bounds))  # no score can exceed the bounds seen so far
        acc = self._accumulator
        found: list[np.ndarray] = []  # documents first reached by each term (disjoint)
        n_found = 0
        done = len(terms)
        for i, (term_id, count) in enumerate(terms):
            lo, hi = self._starts[term_id], self._starts[term_id + 1]
            docs = self.doc_ids[lo:hi]
            found.append(docs[acc[docs] == 0.0] if found else docs)  # weights are > 0
            n_found += len(found[-1])
            acc[docs] += self.weights[lo:hi] * count if count > 1 else self.weights[lo:hi]
            if i + 1 < len(terms) and n_found >= k and remaining[i + 1] < seen_bound[i]:
                candidates = np.concatenate(found) if len(found) > 1 else found[0]
                partial = acc[candidates]
                kth = partial[np.argpartition(-partial, k - 1)[k - 1]]
                if remaining[i + 1] < kth * (1.0 - 1e-6):
                    done = i + 1
                    break
        candidates = np.concatenate(found) if len(found) > 1 else found[0]
        scores = acc[candidates]
        acc[candidates] = 0.0
        needles_sorted = False
        for j in range(done, len(terms)):
            # Keep only documents that the terms still to come could lift to the k-th score
            # (which only grows), then add term j's weight to them by lookup.
            kth = scores[np.argpartition(-scores, k - 1)[k - 1]]
            keep = scores + remaining[j] >= kth * (1.0 - 1e-6)
            candidates, scores = candidates[keep], scores[keep]
            term_id, count = terms[j]
            lo, hi = self._starts[term_id], self._starts[term_id + 1]
            docs = self.doc_ids[lo:hi]
            if hi - lo < 4 * len(candidates):
                # Few postings per candidate: a scatter through the accumulator is cheaper
                # than one binary search per candidate.
                acc[docs] = self.weights[lo:hi] * count
                scores += acc[candidates]
                acc[docs] = 0.0
                continue
            if not needles_sorted:  # sorted needles make the binary searches cache-friendly
                order = np.argsort(candidates)
                candidates, scores = candidates[order], scores[order]
                needles_sorted = True
            pos = np.minimum(np.searchsorted(docs, candidates), len(docs) - 1)
            hit = docs[pos] == candidates
            scores[hit] += self.weights[lo:hi][pos[hit]] * count
        return self._top_k(candidates, scores, k)

    @staticmethod
    def _top_k(candidates: np.ndarray, scores: np.ndarray, k: int) -> np.ndarray:
        if len(candidates) > k:
            # Partition only the touched documents, then keep everything tied with the k-th
            # score so the final (score, doc number) order is exact.
            kth = scores[np.argpartition(-scores, k - 1)[k - 1]]
            keep = scores >= kth
            candidates, scores = candidates[keep], scores[keep]
        order = np.lexsort((candidates, -scores))[:k]
        return candidates[order]
