"""A Search-R1 compatible retrieval server on the standard library's ``ThreadingHTTPServer``.

Endpoints:

* ``POST /retrieve`` with ``{"queries": [str, ...], "topk": int, "return_scores": bool}`` ->
  ``{"result": [[{"document": {"id", "contents"}, "score": float}, ...], ...]}``
  (bare documents when ``return_scores`` is false, as in Search-R1);
* ``GET /health`` -> ``{"status": "ok", "documents": N}``.

Malformed requests get a JSON ``{"error": "..."}`` with status 400 (411 without a length,
413 when the body exceeds the limit, 404 for other paths). Binds 127.0.0.1 unless told::

    with RetrievalServer(BM25Retriever(documents), port=0) as server:
        HTTPRetriever(server.url).search(["who founded Rekist Airlines"])
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from paw_gym.searchqa.retriever import Retriever

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerLimits:
    """Bounds on what one request may ask for."""

    default_topk: int = 3
    """``topk`` used when a request leaves it out."""
    max_topk: int = 100
    """Largest ``topk`` accepted."""
    max_queries: int = 1024
    """Most queries in one request."""
    max_body_bytes: int = 1 << 20
    """Largest request body (bytes)."""


class BadRequest(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def parse_request(body: bytes, limits: ServerLimits) -> tuple[list[str], int, bool]:
    """Validate a ``/retrieve`` body; :class:`BadRequest` names what is wrong."""
    try:
        payload = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise BadRequest(400, f"request body is not valid JSON: {error}") from error
    if not isinstance(payload, dict):
        raise BadRequest(400, "request body must be a JSON object with a 'queries' list")
    queries = payload.get("queries")
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        raise BadRequest(400, "'queries' must be a list of strings")
    if len(queries) > limits.max_queries:
        raise BadRequest(400, f"{len(queries)} queries in one request; at most {limits.max_queries}")
    topk = payload.get("topk")
    topk = limits.default_topk if topk is None else topk
    if isinstance(topk, bool) or not isinstance(topk, int) or not 1 <= topk <= limits.max_topk:
        raise BadRequest(400, f"'topk' must be an integer from 1 to {limits.max_topk}, got {topk!r}")
    return_scores = payload.get("return_scores", False)
    if not isinstance(return_scores, bool):
        raise BadRequest(400, f"'return_scores' must be true or false, got {return_scores!r}")
    return queries, topk, return_scores


class RetrievalServer:
    """Serve ``retriever`` over HTTP; :meth:`start` runs it in a daemon thread.

    Args:
        retriever: any :class:`~paw_gym.searchqa.retriever.Retriever`.
        host: interface to bind (default loopback only).
        port: TCP port; ``0`` picks a free one (see :attr:`port` after construction).
        limits: request bounds.
    """

    def __init__(self, retriever: Retriever, host: str = "127.0.0.1", port: int = 8000,
                 limits: ServerLimits = ServerLimits()):
        self.retriever, self.limits = retriever, limits
        # One search at a time: retrievers (torch encoders, bm25s) are not promised thread-safe;
        # throughput comes from batching queries within a request.
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer((host, port), _make_handler(self))
        self.httpd.daemon_threads = True
        self.thread: threading.Thread | None = None

    @property
    def host(self) -> str:
        return str(self.httpd.server_address[0])

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/retrieve"

    def retrieve(self, queries: list[str], topk: int, return_scores: bool) -> dict[str, Any]:
        with self.lock:
            results = self.retriever.search(queries, topk)
        if return_scores:
            return {"result": [[{"document": h.document.to_json(), "score": h.score} for h in row]
                               for row in results]}
        return {"result": [[h.document.to_json() for h in row] for row in results]}

    def start(self) -> "RetrievalServer":
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="retrieval-server",
                                       daemon=True)
        self.thread.start()
        return self

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def close(self) -> None:
        if self.thread is not None:
            self.httpd.shutdown()
            self.thread.join(timeout=10)
            self.thread = None
        self.httpd.server_close()

    def __enter__(self) -> "RetrievalServer":
        return self.start() if self.thread is None else self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


def _make_handler(server: RetrievalServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: clients reuse one connection

        def setup(self) -> None:
            super().setup()
            # Headers and body go out as two writes; without TCP_NODELAY Nagle's algorithm and
            # the client's delayed ACK hold the body back ~40 ms on every keep-alive request.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def do_GET(self) -> None:
            if self.path.rstrip("/") == "/health":
                self.send_json(200, {"status": "ok", "documents": len(server.retriever)})
            else:
                self.send_json(404, {"error": f"no such path {self.path!r}; use POST /retrieve"})

        def do_POST(self) -> None:
            if self.path.rstrip("/") != "/retrieve":
                self.send_json(404, {"error": f"no such path {self.path!r}; use POST /retrieve"})
                return
            try:
                length = self.headers.get("Content-Length")
                if length is None or not length.strip().isdigit():
                    raise BadRequest(411, "a Content-Length header is required")
                if int(length) > server.limits.max_body_bytes:
                    self.close_connection = True  # the unread body must not be parsed as a request
                    raise BadRequest(413, f"request body of {int(length)} bytes exceeds the limit "
                                          f"of {server.limits.max_body_bytes}")
                request = parse_request(self.rfile.read(int(length)), server.limits)
                self.send_json(200, server.retrieve(*request))
            except BadRequest as error:
                self.send_json(error.status, {"error": str(error)})
            except Exception as error:  # noqa: BLE001 - a retriever failure must not kill the server
                logger.exception("retrieval failed")
                self.send_json(500, {"error": f"retrieval failed: {type(error).__name__}: {error}"})

        def send_json(self, status: int, payload: dict[str, Any]) -> None:
            body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
            logger.debug("%s - %s", self.address_string(), format % args)

    return Handler
