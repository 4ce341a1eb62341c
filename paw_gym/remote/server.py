"""Serve one registered text env to many clients: a session per WebSocket connection.

Why a server: an env that lives in another process or on another machine (a large catalog, an
engine with its own dependencies) can then be stepped by any trainer, paw-gym's
:class:`~paw_gym.remote.client.RemoteEnv` or an OpenEnv client alike. The wire format is
OpenEnv's WebSocket protocol (:mod:`paw_gym.remote.protocol`) at ``/ws``, beside OpenEnv's
plain-HTTP routes (:mod:`paw_gym.remote.http_api`: ``/health``, ``/metadata``, ``/schema``,
``/openapi.json``, one-shot ``/reset``, ``/step``, ``/state``, ``/mcp``) on the same port; an
ASGI app served by ``uvicorn``::

    with EnvServer("PaW/Shelf-v0", port=0) as server:     # port 0: a free port
        env = RemoteEnv(server.url)

Each connection gets its own ``gym.make(env_id, **env_kwargs)`` (the registered step limit
included). Bounds, all in :class:`ServerLimits`: at most ``max_sessions`` sessions (one more
connection is answered with OpenEnv's ``CAPACITY_REACHED`` error and closed), a session idle
for ``idle_timeout`` seconds ends (its env is closed), a request (WebSocket frame or HTTP body)
holds at most ``max_message_bytes``, a connection is not read further while its request waits
for an answer, a connection gets :data:`REQUEST_TIMEOUT` seconds to send a request's head (and
an HTTP body), and at most ``max_sessions`` HTTP requests wait for the env thread. Env calls run
one at a time on one worker thread, off the event loop: Python envs are CPU-bound (threads
would not step them faster under the GIL), and envs written for one thread never see two.
Binds 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import socket
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from typing import Any, Awaitable, Callable

import gymnasium as gym
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from paw_gym.remote import http_api, protocol
from paw_gym.remote.protocol import (
    CAPACITY_REACHED,
    EXECUTION_ERROR,
    FACTORY_ERROR,
    INVALID_JSON,
    SESSION_ERROR,
    UNKNOWN_TYPE,
    VALIDATION_ERROR,
    WS_PATH,
    RequestError,
    brief,
    encode,
    error,
)

logger = logging.getLogger(__name__)

#: Seconds a connection gets to send a request's head (the WebSocket handshake included), and
#: an HTTP request its body; a client that sends nothing or trickles bytes is cut off.
REQUEST_TIMEOUT = 10.0
#: Seconds between the server's WebSocket pings, and for the pong to come back.
PING_INTERVAL = 20.0
#: Seconds :meth:`EnvServer.close` lets open requests finish before cancelling them.
SHUTDOWN_TIMEOUT = 5

ASGISend = Callable[[dict[str, Any]], Awaitable[None]]
ASGIReceive = Callable[[], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class ServerLimits:
    """Bounds on the sessions a server holds and on what one request may send."""

    max_sessions: int = 64
    """Sessions (connections, each with its own env) at once; one more connection is refused
    with OpenEnv's CAPACITY_REACHED error."""
    idle_timeout: float = 600.0
    """Seconds a session may wait for its client's next request (or for the client to take an
    answer) before it ends and its env is closed."""
    max_message_bytes: int = 1 << 20
    """Largest request (bytes): a larger WebSocket frame closes its connection (WebSocket code
    1009), a larger HTTP body is answered 413. The default holds the longest action the text
    spaces allow."""

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if field.name == "idle_timeout":
                if isinstance(value, bool) or not isinstance(value, (int, float)) \
                        or not 0 < value < float("inf"):
                    raise ValueError(f"idle_timeout must be a positive number of seconds, "
                                     f"got {value!r}")
            elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{field.name} must be an integer >= 1, got {value!r}")


class BindError(OSError):
    """The server cannot listen where it was asked: the port is in use, the host is not this
    machine's, or there is no permission (``strerror`` says which)."""


@dataclass
class _Session:
    """One client's env and where its episode stands."""

    id: str
    env: gym.Env | None = None
    episode_id: str | None = None
    step_count: int = 0
    done: bool = False


def _listen(host: str, port: int) -> socket.socket:
    """A TCP socket listening on ``host:port``; :class:`BindError` when it cannot."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port,
                                                             type=socket.SOCK_STREAM)[0]
        listener = socket.socket(family, kind, proto)
    except OSError as exc:  # socket.gaierror: a host name that does not resolve
        raise BindError(exc.errno, exc.strerror or str(exc)) from exc
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past TIME_WAIT only
        listener.bind(address)
        listener.listen(128)
    except OSError as exc:
        listener.close()
        raise BindError(exc.errno, exc.strerror or str(exc)) from exc
    return listener


class _ClientGone(Exception):
    """The HTTP client went away before its request's body arrived."""


class _HTTPProtocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with a deadline for a connection's request head (every
    answer closes its connection, so there is one): uvicorn times out only idle keep-alive
    connections, so a client that connects and sends nothing would hold its connection for
    ever."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        self._head_deadline = self.loop.call_later(REQUEST_TIMEOUT, self._no_request_head)

    def connection_lost(self, exc: Exception | None) -> None:
        self._head_deadline.cancel()
        super().connection_lost(exc)

    def _no_request_head(self) -> None:
        # No request cycle and not handed to the WebSocket protocol: the head never came.
        if self.cycle is None and self.transport.get_protocol() is self \
                and not self.transport.is_closing():
            self.transport.close()


class EnvServer:
    """Serves ``gym.make(env_id, **env_kwargs)`` per connection (see the module docstring).

    Binds at construction, so a port in use or a bad host is a :class:`BindError` here; a bad
    env id, bad ``env_kwargs`` or an env whose spaces are not text fail here too (one env is
    made to read its spaces). :meth:`start` serves on a background thread, :meth:`serve_forever` on
    this one; :meth:`close` (or leaving the ``with`` block) ends every session.
    """

    def __init__(self, env_id: str, env_kwargs: dict[str, Any] | None = None, *,
                 host: str = "127.0.0.1", port: int = 8001,
                 limits: ServerLimits = ServerLimits()):
        from paw_gym import __version__, list_text_envs

        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs or {})
        self.limits = limits
        probe = self._make_env()
        try:
            self.schemas = protocol.schemas(probe.observation_space, probe.action_space)
        finally:
            probe.close()
        description = list_text_envs().get(env_id) or env_id
        self._metadata = {"name": env_id, "description": description,
                          "version": f"paw-gym {__version__}; {protocol.PROTOCOL}"}
        self._openapi = http_api.openapi_document(env_id, description, self.schemas,
                                                  __version__)
        self._socket = _listen(host, port)
        # Where it listens (for port 0, the free port picked); kept, as the socket closes.
        self.host: str = self._socket.getsockname()[0]
        self.port: int = self._socket.getsockname()[1]
        self._sessions: dict[str, _Session] = {}
        self._http_waiting = 0  # HTTP requests waiting for (or in) an env call
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="paw-env")
        self._server: uvicorn.Server | None = None
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None

    # -- where and how many -----------------------------------------------------------------
    @property
    def url(self) -> str:
        """The base URL clients take: ``RemoteEnv(url)``, OpenEnv's ``EnvClient(base_url=url)``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def ws_url(self) -> str:
        """Where the sessions are: the WebSocket URL an OpenEnv client derives from :attr:`url`."""
        return f"ws{self.url[4:]}{WS_PATH}"

    @property
    def session_count(self) -> int:
        """Sessions open now (a session counts from its connection until its env is closed)."""
        return len(self._sessions)

    # -- running ----------------------------------------------------------------------------
    def serve_forever(self) -> None:
        """Serve on this thread until :meth:`close` (from another thread) or Ctrl-C (then
        ``KeyboardInterrupt`` is raised here once every session has ended)."""
        try:
            asyncio.run(self._serve())
        finally:
            self._ready.set()  # a server that failed to start does not keep start() waiting

    def start(self) -> "EnvServer":
        """Serve on a background thread; returns once connections are accepted."""
        self._thread = threading.Thread(target=self.serve_forever, name="paw-env-server",
                                        daemon=True)
        self._thread.start()
        self._ready.wait()
        return self

    def close(self) -> None:
        """Stop serving: every session ends and its env is closed."""
        if self._server is not None:
            self._server.should_exit = True  # uvicorn's main loop looks every 0.1 s
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        self._executor.shutdown(wait=True)
        self._socket.close()

    def __enter__(self) -> "EnvServer":
        return self.start() if self._thread is None else self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    async def _serve(self) -> None:
        config = uvicorn.Config(
            self._app, interface="asgi3", http=_HTTPProtocol, ws="websockets-sansio",
            lifespan="off",
            ws_max_size=self.limits.max_message_bytes, ws_per_message_deflate=False,
            ws_ping_interval=PING_INTERVAL, ws_ping_timeout=PING_INTERVAL,
            timeout_graceful_shutdown=SHUTDOWN_TIMEOUT, proxy_headers=False,
            log_config=None, access_log=False)
        self._server = uvicorn.Server(config)
        serving = asyncio.ensure_future(self._server.serve(sockets=[self._socket]))
        while not self._server.started and not serving.done():
            await asyncio.sleep(0.01)
        self._ready.set()
        await serving

    async def _app(self, scope: dict[str, Any], receive: ASGIReceive, send: ASGISend) -> None:
        """The ASGI app: WebSocket sessions at ``/ws``, the HTTP routes of
        :mod:`~paw_gym.remote.http_api`."""
        if scope["type"] == "websocket":
            await self._websocket(scope, receive, send)
        elif scope["type"] == "http":
            await self._http(scope, receive, send)

    # -- plain HTTP -------------------------------------------------------------------------
    async def _http(self, scope: dict[str, Any], receive: ASGIReceive, send: ASGISend) -> None:
        try:
            await _send_json(send, "http.response", *await self._http_answer(scope, receive))
        except _ClientGone:  # before its body arrived: nothing to answer, no env to make
            pass

    async def _http_answer(self, scope: dict[str, Any], receive: ASGIReceive
                           ) -> tuple[int, dict[str, Any], list[tuple[str, str]]]:
        """``(status, JSON body, extra headers)`` of one HTTP request."""
        method, path = scope["method"], scope["path"].rstrip("/") or "/"
        if method == "HEAD" and http_api.ROUTES.get(path) == "GET":
            method = "GET"  # uvicorn sends the head of the answer alone
        if http_api.ROUTES.get(path) != method:
            return http_api.route_error(method, path)
        if method == "GET":
            return 200, {
                "/health": {"status": "healthy"}, "/metadata": self._metadata,
                "/schema": self.schemas, "/openapi.json": self._openapi,
                "/state": protocol.state_data(self.env_id, None, 0, False)}[path], []
        try:
            request = await asyncio.wait_for(self._http_body(scope, receive), REQUEST_TIMEOUT)
        except asyncio.TimeoutError:
            return 408, {"detail": f"the request body did not arrive within "
                                   f"{REQUEST_TIMEOUT:g} s"}, []
        if request is None:
            return 413, {"detail": f"request body over {self.limits.max_message_bytes:,} bytes "
                                   f"(serve-env --max_message_bytes)"}, []
        if path == "/mcp":
            return 200, http_api.mcp_answer(request, self.env_id), []
        return *await self._http_episode(path, request), []

    async def _http_body(self, scope: dict[str, Any], receive: ASGIReceive) -> bytes | None:
        """The request body, or None when it is larger than ``max_message_bytes``."""
        limit = self.limits.max_message_bytes
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        if declared.isdigit() and int(declared) > limit:
            return None
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _ClientGone
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _http_episode(self, path: str, request: bytes) -> tuple[int, dict[str, Any]]:
        """``POST /reset`` (one-shot, on the env thread) or ``POST /step`` (409 once checked)."""
        try:
            if path == "/step":
                http_api.check_step_request(request)
                return 409, {"detail": http_api.NO_EPISODE, "code": EXECUTION_ERROR}
            seed, options, _ = protocol.reset_arguments(http_api.json_body(request, empty={}))
            if self._http_waiting >= self.limits.max_sessions:
                raise RequestError(f"busy: {self._http_waiting} HTTP requests are waiting for "
                                   f"the env; retry later", CAPACITY_REACHED)
            self._http_waiting += 1
            try:
                return 200, json.loads(await self._call(self._one_shot_reset, seed, options))
            finally:
                self._http_waiting -= 1
        except RequestError as refused:
            return http_api.ERROR_STATUS[refused.code], {"detail": str(refused),
                                                         "code": refused.code}

    def _one_shot_reset(self, seed: int | None, options: dict[str, Any] | None) -> str:
        """A fresh env's first observation (encoded), the env closed; on the env thread."""
        try:
            env = self._make_env()
        except Exception as exc:  # noqa: BLE001 - reported to the client, the server goes on
            logger.exception("creating %s failed", self.env_id)
            raise RequestError(f"cannot create {self.env_id}: {type(exc).__name__}: {exc}",
                               FACTORY_ERROR) from exc
        try:
            observation, info = env.reset(seed=seed, options=options)
            return encode(protocol.observation_data(observation, info, None, False, False))
        except Exception as exc:  # noqa: BLE001 - the env's error, reported
            raise RequestError(f"reset failed: {type(exc).__name__}: {exc}",
                               EXECUTION_ERROR) from exc
        finally:
            env.close()

    # -- sessions ---------------------------------------------------------------------------
    def _make_env(self) -> gym.Env:
        return gym.make(self.env_id, **self.env_kwargs)

    async def _call(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``function(*args, **kwargs)`` on the env thread."""
        return await asyncio.get_running_loop().run_in_executor(
            self._executor, functools.partial(function, *args, **kwargs))

    async def _websocket(self, scope: dict[str, Any], receive: ASGIReceive,
                         send: ASGISend) -> None:
        if (await receive())["type"] != "websocket.connect":
            return
        path = scope["path"].rstrip("/") or "/"
        if path != WS_PATH:  # an HTTP answer instead of the handshake
            status, body, headers = http_api.route_error("GET", path)
            await _send_json(send, "websocket.http.response", status, body, headers)
            return
        await send({"type": "websocket.accept"})
        if len(self._sessions) >= self.limits.max_sessions:
            # OpenEnv's answer to a connection beyond capacity: an error frame, then close.
            limit = self.limits.max_sessions
            await send({"type": "websocket.send", "text": encode(error(
                f"server full: {len(self._sessions)} of {limit} sessions in use (serve-env "
                f"--max_sessions {limit}); retry after a session ends, or start the server "
                f"with a larger --max_sessions", CAPACITY_REACHED))})
            await _close(send, 1013, "server full")
            return
        closing = await self._open_session(receive, send)
        if closing is not None:
            await _close(send, *closing)

    async def _open_session(self, receive: ASGIReceive, send: ASGISend
                            ) -> tuple[int, str] | None:
        """Make the session's env, converse, and close the env however the session ends;
        the close code and reason to send after, or None when the client has gone."""
        session = _Session(id=uuid.uuid4().hex)
        self._sessions[session.id] = session  # counted before the await: no two take one place
        try:
            try:
                session.env = await self._call(self._make_env)
            except Exception as exc:  # noqa: BLE001 - reported to the client, the server goes on
                logger.exception("creating %s failed", self.env_id)
                await send({"type": "websocket.send", "text": encode(error(
                    f"cannot create {self.env_id}: {type(exc).__name__}: {exc}",
                    FACTORY_ERROR))})
                return 1011, "cannot create the env"
            return await self._converse(receive, send, session)
        finally:
            try:
                if session.env is not None:
                    await self._call(session.env.close)
            except Exception:  # noqa: BLE001 - the env's failure; its place is freed all the same
                logger.exception("closing %s failed", self.env_id)
            finally:
                del self._sessions[session.id]

    async def _converse(self, receive: ASGIReceive, send: ASGISend, session: _Session
                        ) -> tuple[int, str] | None:
        """Answer the session's requests until it closes, goes idle or disconnects."""
        idle = self.limits.idle_timeout
        while True:
            try:
                message = await asyncio.wait_for(receive(), idle)
            except asyncio.TimeoutError:
                try:
                    await asyncio.wait_for(send({"type": "websocket.send", "text": encode(error(
                        f"session expired: no request for {idle:g} s (serve-env "
                        f"--idle_timeout); connect again to start a new session",
                        SESSION_ERROR))}), idle)
                except asyncio.TimeoutError:
                    return None
                return 1000, "session expired"
            if message["type"] == "websocket.disconnect":
                return None
            answer = await self._answer(session, message.get("text"))
            if answer is None:  # the client's close request
                return 1000, "closed"
            try:
                await asyncio.wait_for(send({"type": "websocket.send", "text": answer}), idle)
            except asyncio.TimeoutError:
                return None  # the client takes no answers: end the session, close nothing

    async def _answer(self, session: _Session, raw: str | None) -> str | None:
        """The answer frame to one request frame (an ``error`` frame for a bad request; ``raw``
        is None for a binary frame), or None for ``{"type": "close"}``."""
        if raw is None:
            return encode(error("send each request as a JSON text frame, not a binary one",
                                INVALID_JSON))
        try:
            message = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            return encode(error(f"request is not valid JSON: {exc}", INVALID_JSON))
        if not isinstance(message, dict) or set(message) - {"type", "data"}:
            return encode(error(f'a request is a JSON object {{"type": ..., "data": {{...}}}}, '
                                f"got {brief(message)}", VALIDATION_ERROR))
        kind, data = message.get("type"), message.get("data", {})
        try:
            if kind == "reset":
                return await self._reset(session, *protocol.reset_arguments(data))
            if kind == "step":
                return await self._step(session, protocol.step_action(data))
        except RequestError as refused:
            return encode(error(str(refused), refused.code))
        if kind == "close":
            return None
        if kind == "state":
            return encode({"type": "state", "data": protocol.state_data(
                self.env_id, session.episode_id, session.step_count, session.done)})
        return encode(error(f"unknown request type {brief(kind)}; the types are reset, step, "
                            f"state and close", UNKNOWN_TYPE))

    async def _reset(self, session: _Session, seed: int | None, options: dict[str, Any] | None,
                     episode_id: str | None) -> str:
        try:
            observation, info = await self._call(session.env.reset, seed=seed, options=options)
            answer = encode({"type": "observation",
                             "data": protocol.observation_data(observation, info, None, False,
                                                               False)})
        except Exception as exc:  # noqa: BLE001 - the env's error, reported; the session stays
            return encode(error(f"reset failed: {type(exc).__name__}: {exc}", EXECUTION_ERROR))
        session.episode_id = episode_id or uuid.uuid4().hex
        session.step_count, session.done = 0, False
        return answer

    async def _step(self, session: _Session, action: str) -> str:
        if session.episode_id is None:
            return encode(error('step before reset: send {"type": "reset"} first (Gymnasium: '
                                "ResetNeeded)", EXECUTION_ERROR))
        try:
            observation, reward, terminated, truncated, info = await self._call(
                session.env.step, action)
            answer = encode({"type": "observation", "data": protocol.observation_data(
                observation, info, float(reward), bool(terminated), bool(truncated))})
        except Exception as exc:  # noqa: BLE001 - the env's error, reported; the session stays
            return encode(error(f"step failed: {type(exc).__name__}: {exc}", EXECUTION_ERROR))
        session.step_count += 1
        session.done = bool(terminated or truncated)
        return answer


async def _send_json(send: ASGISend, kind: str, status: int, body: dict[str, Any],
                     headers: list[tuple[str, str]]) -> None:
    """One JSON answer, then the connection closes (one request per connection, so the
    deadline for a connection's request head bounds every request): ``kind`` is
    ``http.response`` or ``websocket.http.response`` (an HTTP answer to a WebSocket handshake)."""
    data = encode(body).encode("utf-8")
    await send({"type": f"{kind}.start", "status": status, "headers": [
        (name.encode("latin-1"), value.encode("latin-1")) for name, value in
        [("content-type", "application/json"), ("content-length", str(len(data))),
         ("connection", "close"), *headers]]})
    await send({"type": f"{kind}.body", "body": data})


async def _close(send: ASGISend, code: int, reason: str) -> None:
    """Close the WebSocket, unless the client takes nothing (then it is left to uvicorn)."""
    try:
        await asyncio.wait_for(send({"type": "websocket.close", "code": code, "reason": reason}),
                               REQUEST_TIMEOUT)
    except asyncio.TimeoutError:
        pass
