"""Choosing and building a retriever: BM25 or dense, fresh or from a saved index, or the HTTP
client of a ``/retrieve`` server. The implementations import :mod:`paw_gym.searchqa.retriever`
(the interface), and this module imports them, so the interface never imports its
implementations."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from paw_gym.searchqa.data import Document
from paw_gym.searchqa.retriever import MANIFEST_NAME, Retriever, read_manifest


def load_retriever(directory: str | Path, documents: Sequence[Document], **options: Any) -> Retriever:
    """Load a saved BM25 or dense index for ``documents`` (the kind is read from the manifest)."""
    kind = read_manifest(directory, documents)["kind"]
    if kind == "bm25":
        from paw_gym.searchqa.bm25 import BM25Retriever

        return BM25Retriever.load(directory, documents)  # BM25 has no load-time options
    if kind == "dense":
        from paw_gym.searchqa.dense import DenseRetriever

        return DenseRetriever.load(directory, documents, **options)
    raise ValueError(f"index {str(directory)!r} has unknown kind {kind!r}")


def make_retriever(spec: str, documents: Sequence[Document] | None = None, *,
                   index: str | Path | None = None, **options: Any) -> Retriever:
    """``"bm25"``, ``"dense"`` or an ``http(s)://`` URL of a ``/retrieve`` server.

    ``index``: a saved index directory, loaded when it exists and written after building when
    it does not. ``options`` go to the retriever's constructor (for dense: model, index_type,
    prefixes, device, ...).
    """
    if spec.startswith(("http://", "https://")):
        from paw_gym.searchqa.client import HTTPRetriever

        return HTTPRetriever(spec)
    if spec not in ("bm25", "dense"):
        raise ValueError(f"retriever {spec!r} is not 'bm25', 'dense' or an http(s):// URL")
    if documents is None:
        raise ValueError(f"retriever {spec!r} needs a passage corpus (corpus=path.jsonl)")
    if index is not None and (Path(index) / MANIFEST_NAME).is_file():
        return load_retriever(index, documents, **options)
    if spec == "bm25":
        from paw_gym.searchqa.bm25 import BM25Retriever

        retriever: Retriever = BM25Retriever(documents, **options)
    else:
        from paw_gym.searchqa.dense import DenseRetriever

        retriever = DenseRetriever(documents, **options)
    if index is not None:
        retriever.save(index)  # type: ignore[attr-defined]
    return retriever
