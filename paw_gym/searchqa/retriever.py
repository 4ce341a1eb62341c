"""The retriever interface, Search-R1's rendering of hits, and saved-index bookkeeping.

Every retriever (BM25, dense, HTTP client) answers a *batch* of queries with the top-k
documents of each, best first::

    hits = retriever.search(["who founded Rekist Airlines"], topk=3)[0]
    information_block(hits)
    # '<information>Doc 1(Title: "Rekist Airlines") Rekist Airlines was ...\\nDoc 2(...) ...</information>'

Build one with :func:`paw_gym.searchqa.retriever_factory.make_retriever`.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from paw_gym.searchqa.data import Document

#: Name of the JSON file describing a saved index (kind, corpus size and fingerprint, options).
MANIFEST_NAME = "paw_index.json"


@dataclass(frozen=True)
class Hit:
    """One retrieved document and its retriever score (higher is better)."""

    document: Document
    score: float


class Retriever(ABC):
    """Top-k passage search over a fixed corpus."""

    @abstractmethod
    def search(self, queries: Sequence[str], topk: int = 3) -> list[list[Hit]]:
        """For each query, the ``topk`` best documents, best first."""

    def __len__(self) -> int:
        """Number of documents searched (``0`` where unknown, e.g. a remote server)."""
        return 0


def format_passages(hits: Sequence[Hit]) -> str:
    """Search-R1's rendering: ``Doc i(Title: <first line>) <rest>`` one per line."""
    lines = []
    for rank, hit in enumerate(hits, start=1):
        title, _, text = hit.document.contents.partition("\n")
        lines.append(f"Doc {rank}(Title: {title}) {text}\n")
    return "".join(lines)


def information_block(hits: Sequence[Hit]) -> str:
    """The observation after a search: ``<information>…</information>`` (Search-R1 strips it)."""
    return f"<information>{format_passages(hits).strip()}</information>"


def check_topk(topk: Any) -> int:
    if isinstance(topk, bool) or not isinstance(topk, int) or topk < 1:
        raise ValueError(f"topk must be a positive integer, got {topk!r}")
    return topk


# -- saved indexes -------------------------------------------------------------------------------
def corpus_fingerprint(documents: Sequence[Document]) -> str:
    """Cheap identity of a corpus (ids and lengths), to refuse an index built for another one."""
    digest = hashlib.blake2b(digest_size=16)
    for document in documents:
        digest.update(f"{document.id}\t{len(document.contents)}\n".encode())
    return digest.hexdigest()


def write_manifest(directory: Path, kind: str, documents: Sequence[Document], **options: Any) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    manifest = {"kind": kind, "num_documents": len(documents),
                "corpus_fingerprint": corpus_fingerprint(documents), **options}
    (directory / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")


def read_manifest(directory: str | Path, documents: Sequence[Document]) -> dict[str, Any]:
    """The manifest of a saved index, checked against the corpus it is loaded with."""
    path = Path(directory) / MANIFEST_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{str(directory)!r} is not a saved paw-gym index (no {MANIFEST_NAME})")
    manifest = json.loads(path.read_text(encoding="utf-8"))
    if manifest.get("num_documents") != len(documents) or \
            manifest.get("corpus_fingerprint") != corpus_fingerprint(documents):
        raise ValueError(f"index {str(directory)!r} was built for another corpus "
                         f"({manifest.get('num_documents')} documents); this corpus has "
                         f"{len(documents)}: rebuild the index")
    return manifest

