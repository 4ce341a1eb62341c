"""A Search-R1 compatible retrieval server on the standard library's ``http.server``.

Endpoints:

* ``POST /retrieve`` with ``{"queries": [str, ...], "topk": int, "return_scores": bool}`` ->
  ``{"result": [[{"document": {"id", "contents"}, "score": float}, ...], ...]}``
  (bare documents when ``return_scores`` is false, as in Search-R1);
* ``GET /health`` -> ``{"status": "ok", "documents": N}``.

Malformed requests get a JSON ``{"error": "..."}`` naming the bad value: status 400 (411
without a length, 413 when the body, queries × topk or the answer exceeds its limit, 408 when
the body does not arrive in time, 503 when every worker is working and every waiting place is
taken, 404 for other paths). Every bound is a :class:`ServerLimits` field. Binds 127.0.0.1 unless told::

    with RetrievalServer(BM25Retriever(documents), port=0) as server:
        HTTPRetriever(server.url).search(["who founded Rekist Airlines"])
"""

from __future__ import annotations

import io
import json
import logging
import math
import queue
import socket
import sys
import threading
import time
from dataclasses import dataclass, fields
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

from paw_gym.searchqa.retriever import Retriever

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerLimits:
    """Bounds on what one request may ask for and on what the server holds for its clients."""

    default_topk: int = 3
    """``topk`` used when a request leaves it out."""
    max_topk: int = 100
    """Largest ``topk`` accepted."""
    max_queries: int = 1024
    """Most queries in one request."""
    max_results: int = 10_000
    """Most hits in one answer (queries × topk), checked before any retrieval work: 1,024
    queries × topk 100 would otherwise make a 74 MB answer out of a 30 KB request."""
    max_body_bytes: int = 1 << 20
    """Largest request body (bytes)."""
    max_response_bytes: int = 16 << 20
    """Largest answer (bytes); a backstop for corpora of long passages, where even
    ``max_results`` hits would be too big. Checked after retrieval, before anything is sent."""
    io_timeout: float = 10.0
    """Seconds a client gets to send a whole request (request line, headers, body), and to take
    each write of an answer; a keep-alive connection idle this long is closed. A client that
    trickles bytes, sends less than its Content-Length or never reads is cut off after this."""
    max_workers: int = 64
    """Threads serving connections. A keep-alive connection keeps its thread between requests;
    while others wait for one, the connections whose threads have waited longest on their
    clients (half-sent requests first) are shut down to make room."""
    max_pending: int = 64
    """Accepted connections that may wait for a thread. With every thread working on a request
    and every place taken, a new connection is answered 503 after a second: threads and
    buffered answers stay bounded however many clients connect."""

    def __post_init__(self) -> None:
        for field in fields(self):
            value, least = getattr(self, field.name), 0 if field.name == "max_pending" else 1
            if field.name == "io_timeout":
                if not (isinstance(value, (int, float)) and 0 < value < math.inf):
                    raise ValueError(f"ServerLimits.io_timeout must be a positive number of "
                                     f"seconds, got {value!r}")
            elif isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"ServerLimits.{field.name} must be an integer >= {least}, "
                                 f"got {value!r}")
        if self.default_topk > self.max_topk:
            raise ValueError(f"ServerLimits.default_topk {self.default_topk} exceeds max_topk "
                             f"{self.max_topk}")


class BadRequest(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _brief(text: str, limit: int = 40) -> str:
    """``text`` cut to ``limit`` characters, so an error message never echoes a huge value."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


def parse_request(body: bytes, limits: ServerLimits) -> tuple[list[str], int, bool]:
    """Validate a ``/retrieve`` body; :class:`BadRequest` names what is wrong."""
    try:
        payload = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise BadRequest(400, f"request body is not valid JSON: {error}") from error
    except RecursionError as error:
        raise BadRequest(400, "request body nests JSON arrays or objects too deeply to parse; a "
                              "/retrieve request is one object holding a list of strings") from error
    except ValueError as error:  # json.loads' other ValueError: int() refusing that many digits
        raise BadRequest(400, f"request body holds an integer of more than "
                              f"{sys.get_int_max_str_digits()} digits; no /retrieve field takes "
                              f"one") from error
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
        raise BadRequest(400, f"'topk' must be an integer from 1 to {limits.max_topk}, "
                              f"got {_brief(repr(topk))}")
    if len(queries) * topk > limits.max_results:
        raise BadRequest(413, f"{len(queries)} queries × topk {topk} = {len(queries) * topk:,} "
                              f"results in one request; at most {limits.max_results:,} "
                              f"(send fewer queries per request or a smaller topk)")
    return_scores = payload.get("return_scores", False)
    if not isinstance(return_scores, bool):
        raise BadRequest(400, f"'return_scores' must be true or false, got {_brief(repr(return_scores))}")
    return queries, topk, return_scores


#: Seconds a worker must have waited on its client before that connection may be shut down for
#: a waiting one: a client that means it sends its request, or takes its answer, well within it.
_SHUT_AFTER = 0.1


class _PooledHTTPServer(HTTPServer):
    """``HTTPServer`` whose connections run on at most ``max_workers`` threads.

    ``ThreadingHTTPServer`` starts a thread per connection and keeps it as long as the client
    does: 1,500 half-sent requests held 1,500 threads. Here at most ``max_workers`` threads
    serve and ``max_pending`` accepted connections wait for one. Bounded alone, the pool would
    let a flood of half-sent requests lock every other client out for ``io_timeout``. So while
    a connection waits and no worker is idle, connections whose workers have waited on their
    clients (a half-sent request, an answer not being read, an idle keep-alive connection) for
    at least ``_SHUT_AFTER`` are shut down, those never answered first (a half-sent request
    never is), then the longest waits; never one whose request is being worked on. A new
    connection is answered 503 only when every worker is working and every waiting place is
    taken. While connections wait, a keep-alive client is also asked to reconnect after each
    answer (``send_body``).
    """

    # Room for a burst of connects while the accepting thread is busy (socketserver's is 5,
    # after which clients wait out a one-second SYN retry).
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler],
                 limits: ServerLimits):
        self.limits = limits
        self.lock = threading.Lock()
        self.slots = threading.BoundedSemaphore(limits.max_workers + limits.max_pending)
        self.connections: set[socket.socket] = set()  # accepted: waiting or with a worker
        self.waiting = 0  # accepted, not yet taken by a worker
        self.admitting = 0  # 1 while the accepting thread waits for a place for a connection
        # Not a ThreadPoolExecutor: it counts a thread idle each time that thread finishes a job,
        # so after a burst of short connections it may run one thread while others queue.
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.workers: list[threading.Thread] = []
        self.idle_workers = 0
        # Connections whose worker waits on the client (for a request, or for it to take the
        # answer): whether it has been answered yet, and since when; the others are being
        # worked on. make_room shuts the smallest first.
        self.on_client: dict[socket.socket, tuple[bool, float]] = {}
        self.shut: set[socket.socket] = set()  # shut down by make_room, their workers not yet free
        self.room_wanted = threading.Event()
        self.closing = False
        self.keeper = threading.Thread(target=self.keep_room, name="retrieval-room-keeper",
                                       daemon=True)
        # Binds last: a failed bind calls server_close, which needs the state above.
        super().__init__(address, handler)
        self.keeper.start()

    def process_request(self, request: socket.socket, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            with self.lock:
                self.admitting += 1
                self.room_wanted.set()
            # make_room frees a place within milliseconds, unless every worker works through a
            # request for the whole second.
            admitted = self.slots.acquire(timeout=1.0)
            with self.lock:
                self.admitting -= 1
            if not admitted:
                self.refuse(request)
                return
        with self.lock:
            self.connections.add(request)
            self.waiting += 1
            if self.waiting > self.idle_workers:
                if len(self.workers) < self.limits.max_workers:
                    worker = threading.Thread(target=self.work, daemon=True,
                                              name=f"retrieval-worker-{len(self.workers)}")
                    worker.start()
                    self.workers.append(worker)
                else:
                    self.room_wanted.set()
        self.jobs.put((request, client_address))

    def keep_room(self) -> None:
        """While connections wait for a worker, :meth:`make_room` for them.

        Every 10 ms rather than once per arrival: a connection taken from the queue shows that
        it stalls only once its worker has read what there is of it.
        """
        while True:
            self.room_wanted.wait()
            if self.closing:
                return
            self.make_room()
            time.sleep(0.01)
            with self.lock:
                if not (self.waiting or self.admitting):
                    self.room_wanted.clear()

    def make_room(self) -> None:
        """Shut down connections whose workers wait on their clients (in ``on_client`` order),
        one for each waiting connection that has no idle worker or one being freed for it."""
        with self.lock:
            spare = self.idle_workers + self.limits.max_workers - len(self.workers) + len(self.shut)
            excess = self.waiting + self.admitting - spare
            if excess <= 0:
                return
            stalled_since = time.monotonic() - _SHUT_AFTER
            stalled = [c for c, (_, since) in self.on_client.items() if since <= stalled_since]
            for victim in sorted(stalled, key=self.on_client.__getitem__)[:excess]:
                del self.on_client[victim]
                self.shut.add(victim)
                try:  # its worker's read or write ends at once, and the worker takes the next one
                    victim.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def working(self, connection: socket.socket) -> None:
        """The request has been read: from now on, its worker works for it."""
        with self.lock:
            self.on_client.pop(connection, None)

    def answering(self, connection: socket.socket) -> None:
        """The worker now waits on the client to take the answer, then for its next request."""
        with self.lock:
            self.on_client[connection] = (True, time.monotonic())

    def work(self) -> None:
        while True:
            with self.lock:
                self.idle_workers += 1
            job = self.jobs.get()
            with self.lock:
                self.idle_workers -= 1
            if job is None:  # server_close
                return
            self.serve_connection(*job)

    def serve_connection(self, request: socket.socket, client_address: Any) -> None:
        with self.lock:
            self.waiting -= 1
            self.on_client[request] = (False, time.monotonic())  # its worker waits for a request
        try:
            self.finish_request(request, client_address)
        except OSError as error:  # the client went away mid-request: routine, not a bug
            logger.debug("connection from %s ended: %r", client_address, error)
        except Exception:  # noqa: BLE001 - one connection's failure must not kill its worker
            logger.exception("error serving %s", client_address)
        finally:
            with self.lock:
                self.connections.discard(request)
                self.on_client.pop(request, None)
                self.shut.discard(request)
            self.shutdown_request(request)
            self.slots.release()

    def refuse(self, request: socket.socket) -> None:
        body = json.dumps({"error": f"server busy: all {self.limits.max_workers} workers are "
                                    f"working and all {self.limits.max_pending} waiting places "
                                    f"are taken; retry later"}).encode()
        head = (f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n")
        try:
            # Never block the accepting thread on a client: a fresh socket's send buffer takes
            # these few hundred bytes at once, and if it does not the client gets no answer.
            request.setblocking(False)
            request.sendall(head.encode() + body)
        except OSError:
            pass
        self.shutdown_request(request)

    def server_close(self) -> None:
        super().server_close()
        with self.lock:
            self.closing = True
            self.room_wanted.set()
            # Workers block in reads and writes for up to io_timeout; shutting their sockets
            # down ends those calls now, so closing the server does not wait on its clients.
            for connection in self.connections:
                try:
                    connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        if self.keeper.is_alive():  # not started when the bind failed
            self.keeper.join()
        for _ in self.workers:
            self.jobs.put(None)
        for worker in self.workers:
            worker.join()


class _RequestReader(io.RawIOBase):
    """Socket reads against one deadline per request.

    A timeout per read lets a client that sends a byte every few seconds hold a worker forever;
    :meth:`start_request` gives the whole request (line, headers, body) ``io_timeout`` instead.
    """

    def __init__(self, connection: socket.socket, timeout: float):
        super().__init__()
        self.connection, self.timeout, self.deadline = connection, timeout, math.inf

    def start_request(self) -> None:
        self.deadline = time.monotonic() + self.timeout

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"request not received within {self.timeout:g} s")
        self.connection.settimeout(remaining)
        return self.connection.recv_into(buffer)


class RetrievalServer:
    """Serve ``retriever`` over HTTP; :meth:`start` runs it in a daemon thread.

    Args:
        retriever: any :class:`~paw_gym.searchqa.retriever.Retriever`.
        host: interface to bind (default loopback only).
        port: TCP port; ``0`` picks a free one (see :attr:`port` after construction).
        limits: request, timeout and concurrency bounds.
    """

    def __init__(self, retriever: Retriever, host: str = "127.0.0.1", port: int = 8000,
                 limits: ServerLimits = ServerLimits()):
        self.retriever, self.limits = retriever, limits
        # One search at a time: retrievers (torch encoders, bm25s) are not promised thread-safe;
        # throughput comes from batching queries within a request.
        self.lock = threading.Lock()
        self.httpd = _PooledHTTPServer((host, port), _make_handler(self), limits)
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


def _encode(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, ensure_ascii=False).encode("utf-8")


def _make_handler(server: RetrievalServer) -> type[BaseHTTPRequestHandler]:
    limits = server.limits

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: clients reuse one connection

        def setup(self) -> None:
            super().setup()
            # Headers and body go out as two writes; without TCP_NODELAY Nagle's algorithm and
            # the client's delayed ACK hold the body back ~40 ms on every keep-alive request.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.rfile.close()  # socketserver's reader, replaced by one with a request deadline
            self.reader = _RequestReader(self.connection, limits.io_timeout)
            self.rfile = io.BufferedReader(self.reader)

        def handle_one_request(self) -> None:
            self.reader.start_request()
            super().handle_one_request()

        def do_GET(self) -> None:
            if self.path.rstrip("/") == "/health":
                self.send_body(200, _encode({"status": "ok", "documents": len(server.retriever)}))
            else:
                self.send_body(404, _encode({"error": f"no such path {self.path!r}; use POST /retrieve"}))

        def do_POST(self) -> None:
            if self.path.rstrip("/") != "/retrieve":
                self.send_body(404, _encode({"error": f"no such path {self.path!r}; use POST /retrieve"}))
                return
            try:
                queries, topk, return_scores = parse_request(self.read_body(), limits)
                body = _encode(server.retrieve(queries, topk, return_scores))
                if len(body) > limits.max_response_bytes:
                    raise BadRequest(413, f"the answer to {len(queries)} queries × topk {topk} is "
                                          f"{len(body):,} bytes; at most {limits.max_response_bytes:,} "
                                          f"(send fewer queries per request or a smaller topk)")
                status = 200
            except BadRequest as error:
                status, body = error.status, _encode({"error": str(error)})
            except Exception as error:  # noqa: BLE001 - a retriever failure must not kill the server
                logger.exception("retrieval failed")
                status, body = 500, _encode({"error": f"retrieval failed: {type(error).__name__}: {error}"})
            self.send_body(status, body)

        def read_body(self) -> bytes:
            """The body; on a refusal the connection closes, its unread rest not being a request."""
            try:
                length = self.headers.get("Content-Length")
                if length is None:
                    raise BadRequest(411, "a Content-Length header is required")
                length = length.strip()
                if not (length.isascii() and length.isdigit()):  # int() refuses '²', isdigit() not
                    raise BadRequest(400, f"Content-Length must be a number of bytes in the digits "
                                          f"0-9, got {_brief(repr(length))}")
                digits = length.lstrip("0") or "0"
                # Compared as text first: int() refuses numbers of more than 4,300 digits.
                if len(digits) > len(str(limits.max_body_bytes)) or int(digits) > limits.max_body_bytes:
                    raise BadRequest(413, f"request body of {_brief(digits)} bytes exceeds the limit "
                                          f"of {limits.max_body_bytes}")
                try:
                    body = self.rfile.read(int(digits))
                except TimeoutError as error:
                    raise BadRequest(408, f"request body of {digits} bytes (its Content-Length) not "
                                          f"received within {limits.io_timeout:g} s") from error
                if len(body) < int(digits):
                    raise BadRequest(400, f"request body ended after {len(body)} of the {digits} "
                                          f"bytes its Content-Length announced")
                self.server.working(self.connection)
                return body
            except BadRequest:
                self.close_connection = True
                raise

        def send_body(self, status: int, body: bytes) -> None:
            self.connection.settimeout(limits.io_timeout)  # the reader left the rest of its deadline
            if self.server.waiting:
                # Others wait for a worker: this client reconnects for its next request and queues
                # behind them, rather than keeping the worker between its requests.
                self.close_connection = True
            self.server.answering(self.connection)
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
