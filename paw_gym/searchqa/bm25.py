"""BM25 retrieval with bm25s (sparse, Lucene scoring, English stemming and stopwords)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import bm25s
import numpy as np
import Stemmer

from paw_gym.searchqa.data import Document
from paw_gym.searchqa.retriever import Hit, Retriever, check_topk, read_manifest, write_manifest


def top_indices(scores: np.ndarray, k: int) -> list[int]:
    """The ``k`` best documents, ties broken by lower index; documents without any matching
    term (score 0) only fill up the list, in index order.

    Selecting among the matching documents only is what keeps a rare-name query fast: a full
    ``argpartition`` over a mostly-zero score array of 100k documents takes milliseconds.
    """
    candidates = np.flatnonzero(scores > 0)
    if len(candidates) > k:
        candidates = candidates[np.argpartition(-scores[candidates], k - 1)[:k]]
    best = candidates[np.lexsort((candidates, -scores[candidates]))].tolist()
    if len(best) < k:
        taken = set(best)
        best += [i for i in range(k + len(best)) if i not in taken][:k - len(best)]
    return best


class BM25Retriever(Retriever):
    """BM25 over ``documents``' full ``contents`` (title line included).

    Args:
        documents: the passages.
        k1, b: BM25 parameters (bm25s defaults).
        show_progress: tqdm bars while indexing.
    """

    def __init__(self, documents: Sequence[Document], *, k1: float = 1.5, b: float = 0.75,
                 show_progress: bool = False, _model: bm25s.BM25 | None = None):
        if not documents:
            raise ValueError("BM25Retriever needs at least one document")
        self.documents = list(documents)
        self.stemmer = Stemmer.Stemmer("english")
        if _model is None:
            _model = bm25s.BM25(k1=k1, b=b)
            tokens = bm25s.tokenize([d.contents for d in self.documents], stopwords="en",
                                    stemmer=self.stemmer, show_progress=show_progress)
            _model.index(tokens, show_progress=show_progress)
        self.model = _model

    def __len__(self) -> int:
        return len(self.documents)

    def search(self, queries: Sequence[str], topk: int = 3) -> list[list[Hit]]:
        check_topk(topk)
        if not queries:
            return []
        topk = min(topk, len(self.documents))
        # Strings (not ids) so words unseen in the corpus are simply ignored.
        tokens = bm25s.tokenize(list(queries), stopwords="en", stemmer=self.stemmer,
                                return_ids=False, show_progress=False)
        results = []
        for query_tokens in tokens:
            scores = (self.model.get_scores(query_tokens) if query_tokens
                      else np.zeros(len(self.documents), dtype=np.float32))
            results.append([Hit(self.documents[i], float(scores[i])) for i in top_indices(scores, topk)])
        return results

    def save(self, directory: str | Path) -> None:
        """Write the index (not the corpus) to ``directory``."""
        directory = Path(directory)
        write_manifest(directory, "bm25", self.documents)
        self.model.save(str(directory), show_progress=False)

    @classmethod
    def load(cls, directory: str | Path, documents: Sequence[Document]) -> "BM25Retriever":
        """Load an index written by :meth:`save` for the same ``documents``."""
        read_manifest(directory, documents)
        model = bm25s.BM25.load(str(directory), show_progress=False)
        return cls(documents, _model=model)
