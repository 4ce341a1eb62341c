"""Client for any server speaking Search-R1's ``POST /retrieve`` API (ours or Search-R1's own).

Request ``{"queries": [...], "topk": k, "return_scores": true}``; response
``{"result": [[{"document": {"id", "contents"}, "score"}, ...], ...]}`` (one list per query).
"""

from __future__ import annotations

from typing import Any, Sequence
from urllib.parse import urlsplit, urlunsplit

from paw_gym.searchqa.data import Document
from paw_gym.searchqa.retriever import Hit, Retriever, check_topk


class RetrievalError(RuntimeError):
    """The retrieval server could not be reached or answered something unusable."""


def retrieve_url(url: str) -> str:
    """``http://host:port`` -> ``http://host:port/retrieve``; a URL with a path is kept as is."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"retriever URL {url!r} must look like http://127.0.0.1:8000/retrieve")
    path = parts.path if parts.path not in ("", "/") else "/retrieve"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


class HTTPRetriever(Retriever):
    """Search through a remote ``/retrieve`` endpoint (keep-alive session, batched queries).

    Args:
        url: the server, e.g. ``http://127.0.0.1:8000/retrieve`` (``/retrieve`` is added when
            the URL has no path).
        timeout: seconds to wait for one answer.
    """

    def __init__(self, url: str, *, timeout: float = 60.0):
        import requests

        self.url = retrieve_url(url)
        self.timeout = timeout
        self.session = requests.Session()

    def search(self, queries: Sequence[str], topk: int = 3) -> list[list[Hit]]:
        import requests

        check_topk(topk)
        if not queries:
            return []
        payload = {"queries": list(queries), "topk": topk, "return_scores": True}
        try:
            response = self.session.post(self.url, json=payload, timeout=self.timeout)
        except requests.RequestException as error:
            raise RetrievalError(f"retrieval server {self.url} unreachable: {error}") from error
        if response.status_code != 200:
            raise RetrievalError(f"retrieval server {self.url} answered {response.status_code}: "
                                 f"{response.text[:300]}")
        try:
            results = response.json()["result"]
        except (ValueError, KeyError, TypeError) as error:
            raise RetrievalError(f"retrieval server {self.url} sent no 'result' list") from error
        if not isinstance(results, list) or len(results) != len(queries):
            raise RetrievalError(f"retrieval server {self.url} answered {len(results)} result lists "
                                 f"for {len(queries)} queries")
        return [[_hit(item) for item in row] for row in results]

    def close(self) -> None:
        self.session.close()


def _hit(item: Any) -> Hit:
    """A result item, with or without scores (``return_scores`` false sends bare documents)."""
    document = item.get("document", item) if isinstance(item, dict) else None
    if not isinstance(document, dict):
        raise RetrievalError(f"unexpected result item {str(item)[:200]!r}")
    contents = document.get("contents")
    if contents is None:  # some corpora keep title and text apart
        contents = f"\"{document.get('title', '')}\"\n{document.get('text', '')}"
    return Hit(Document(id=str(document.get("id", "")), contents=str(contents)),
               float(item.get("score", 0.0)) if "document" in item else 0.0)
