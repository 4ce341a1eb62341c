"""Serve one registered text env to many clients: a session per WebSocket connection.

Why a server: an env that lives in another process or on another machine (a large catalog, an
engine with its own dependencies) can then be stepped by any trainer, paw-gym's
:class:`~paw_gym.remote.client.RemoteEnv` or an OpenEnv client alike. The wire format is
OpenEnv's WebSocket protocol (:mod:`paw_gym.remote.protocol`), served with the ``websockets``
package on one port, beside plain ``GET /health``, ``/metadata`` and ``/schema``::

    with EnvServer("PaW/Shelf-v0", port=0) as server:     # port 0: a free port
        env = RemoteEnv(server.url)

Each connection gets its own ``gym.make(env_id, **env_kwargs)`` (the registered step limit
included). Bounds, all in :class:`ServerLimits`: at most ``max_sessions`` sessions (one more
connection is answered with OpenEnv's ``CAPACITY_REACHED`` error and closed), a session idle
for ``idle_timeout`` seconds ends (its env is closed), a request frame holds at most
``max_message_bytes``, and at most two unread frames are buffered per connection. Env calls run
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
from typing import Any, Callable

import gymnasium as gym
from websockets.asyncio.server import ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from paw_gym.remote import protocol
from paw_gym.remote.protocol import (
    CAPACITY_REACHED,
    EXECUTION_ERROR,
    FACTORY_ERROR,
    INVALID_JSON,
    SESSION_ERROR,
    UNKNOWN_TYPE,
    VALIDATION_ERROR,
    WS_PATH,
    encode,
    error,
)

logger = logging.getLogger(__name__)

#: Frames a connection may have received and not yet had answered; the protocol is one request,
#: one answer, so a client never needs more, and a flood waits in the socket, not in memory.
MAX_QUEUED_FRAMES = 2
#: Seconds a client gets for the WebSocket handshake.
OPEN_TIMEOUT = 10.0


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
    """Largest request frame (bytes); a larger one closes the connection (WebSocket code 1009).
    The default holds the longest action the text spaces allow."""

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


def _brief(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters, so an error never echoes a huge request."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


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
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs or {})
        self.limits = limits
        probe = self._make_env()
        try:
            self.schemas = protocol.schemas(probe.observation_space, probe.action_space)
        finally:
            probe.close()
        self._socket = _listen(host, port)
        # Where it listens (for port 0, the free port picked); kept, as the socket closes.
        self.host: str = self._socket.getsockname()[0]
        self.port: int = self._socket.getsockname()[1]
        self._sessions: dict[str, _Session] = {}
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="paw-env")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
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
        """Serve on this thread until :meth:`close` (from another thread) or Ctrl-C."""
        try:
            asyncio.run(self._serve())
        finally:
            self._loop = None
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
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and self._thread is not None:
            loop.call_soon_threadsafe(stop.set)
            self._thread.join(timeout=30)
            self._thread = None
        self._executor.shutdown(wait=True)
        self._socket.close()

    def __enter__(self) -> "EnvServer":
        return self.start() if self._thread is None else self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with serve(self._session, sock=self._socket, process_request=self._http,
                         compression=None, max_size=self.limits.max_message_bytes,
                         max_queue=MAX_QUEUED_FRAMES, open_timeout=OPEN_TIMEOUT,
                         logger=logger):
            self._ready.set()
            await self._stop.wait()

    # -- plain HTTP -------------------------------------------------------------------------
    def _http(self, connection: ServerConnection, request: Request) -> Response | None:
        """``GET /health``, ``/metadata``, ``/schema``; ``/ws`` goes on to the WebSocket
        handshake."""
        path = request.path.split("?", 1)[0].rstrip("/") or "/"
        if path == WS_PATH:
            return None
        if path == "/health":
            status, body = 200, {"status": "healthy"}
        elif path == "/metadata":
            from paw_gym import __version__, list_text_envs

            description = list_text_envs().get(self.env_id) or self.env_id
            status, body = 200, {"name": self.env_id, "description": description,
                                 "version": f"paw-gym {__version__}; {protocol.PROTOCOL}"}
        elif path == "/schema":
            status, body = 200, self.schemas
        else:
            status, body = 404, {"error": f"no such path {path!r}; sessions are WebSocket "
                                          f"connections to {WS_PATH}, and GET /health, "
                                          f"/metadata and /schema describe the server"}
        data = json.dumps(body).encode("utf-8")
        headers = Headers([("Content-Type", "application/json"),
                           ("Content-Length", str(len(data))), ("Connection", "close")])
        return Response(status, "OK" if status == 200 else "Not Found", headers, data)

    # -- sessions ---------------------------------------------------------------------------
    def _make_env(self) -> gym.Env:
        return gym.make(self.env_id, **self.env_kwargs)

    async def _call(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``function(*args, **kwargs)`` on the env thread."""
        return await asyncio.get_running_loop().run_in_executor(
            self._executor, functools.partial(function, *args, **kwargs))

    async def _session(self, connection: ServerConnection) -> None:
        try:
            if len(self._sessions) >= self.limits.max_sessions:
                await self._refuse(connection)
            else:
                await self._open_session(connection)
        except ConnectionClosed:  # the client went away: routine
            pass

    async def _refuse(self, connection: ServerConnection) -> None:
        """OpenEnv's answer to a connection beyond capacity: an error frame, then close."""
        limit = self.limits.max_sessions
        await connection.send(encode(error(
            f"server full: {len(self._sessions)} of {limit} sessions in use (serve-env "
            f"--max_sessions {limit}); retry after a session ends, or start the server with a "
            f"larger --max_sessions", CAPACITY_REACHED)))
        await connection.close(1013, "server full")

    async def _open_session(self, connection: ServerConnection) -> None:
        """Make the session's env, converse, and close the env however the session ends."""
        session = _Session(id=uuid.uuid4().hex)
        self._sessions[session.id] = session  # counted before the await: no two take one place
        try:
            try:
                session.env = await self._call(self._make_env)
            except Exception as exc:  # noqa: BLE001 - reported to the client, the server goes on
                logger.exception("creating %s failed", self.env_id)
                await connection.send(encode(error(
                    f"cannot create {self.env_id}: {type(exc).__name__}: {exc}", FACTORY_ERROR)))
                return
            await self._converse(connection, session)
        finally:
            try:
                if session.env is not None:
                    await self._call(session.env.close)
            except Exception:  # noqa: BLE001 - the env's failure; its place is freed all the same
                logger.exception("closing %s failed", self.env_id)
            finally:
                del self._sessions[session.id]

    async def _converse(self, connection: ServerConnection, session: _Session) -> None:
        """Answer the session's requests until it closes, goes idle or disconnects."""
        idle = self.limits.idle_timeout
        while True:
            try:
                raw = await asyncio.wait_for(connection.recv(), idle)
            except asyncio.TimeoutError:
                await connection.send(encode(error(
                    f"session expired: no request for {idle:g} s (serve-env --idle_timeout); "
                    f"connect again to start a new session", SESSION_ERROR)))
                await connection.close(1000, "session expired")
                return
            answer = await self._answer(session, raw)
            if answer is None:  # the client's close request
                return
            try:
                await asyncio.wait_for(connection.send(answer), idle)
            except asyncio.TimeoutError:
                await connection.close(1000, "answer not taken")
                return

    async def _answer(self, session: _Session, raw: str | bytes) -> str | None:
        """The answer frame to one request frame (an ``error`` frame for a bad request), or
        None for ``{"type": "close"}``."""
        if not isinstance(raw, str):
            return encode(error("send each request as a JSON text frame, not a binary one",
                                INVALID_JSON))
        try:
            message = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            return encode(error(f"request is not valid JSON: {exc}", INVALID_JSON))
        if not isinstance(message, dict) or set(message) - {"type", "data"}:
            return encode(error(f'a request is a JSON object {{"type": ..., "data": {{...}}}}, '
                                f"got {_brief(message)}", VALIDATION_ERROR))
        kind, data = message.get("type"), message.get("data", {})
        if kind == "reset":
            return await self._reset(session, data)
        if kind == "step":
            return await self._step(session, data)
        if kind == "close":
            return None
        if kind == "state":
            return encode({"type": "state", "data": {
                "episode_id": session.episode_id, "step_count": session.step_count,
                "env_id": self.env_id, "done": session.done}})
        return encode(error(f"unknown request type {_brief(kind)}; the types are reset, step, "
                            f"state and close", UNKNOWN_TYPE))

    async def _reset(self, session: _Session, data: Any) -> str:
        keys = ("seed", "options", "episode_id")
        if not isinstance(data, dict) or set(data) - set(keys):
            return encode(error(f"reset data is an object with any of {', '.join(keys)}; got "
                                f"{_brief(data)}", VALIDATION_ERROR))
        seed, options, episode_id = (data.get(key) for key in keys)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            return encode(error(f"reset seed must be a non-negative integer or null, got "
                                f"{_brief(seed)}", VALIDATION_ERROR))
        if options is not None and not isinstance(options, dict):
            return encode(error(f"reset options must be an object or null, got "
                                f"{_brief(options)}", VALIDATION_ERROR))
        if episode_id is not None and not isinstance(episode_id, str):
            return encode(error(f"reset episode_id must be a string or null, got "
                                f"{_brief(episode_id)}", VALIDATION_ERROR))
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

    async def _step(self, session: _Session, data: Any) -> str:
        if not isinstance(data, dict) or "action" not in data \
                or set(data) - {"action", "metadata"}:
            return encode(error(f'step data is {{"action": "<text>"}}, got {_brief(data)}',
                                VALIDATION_ERROR))
        action = data["action"]
        if not isinstance(action, str):
            return encode(error(f"step action must be a string (this env's actions are text), "
                                f"got {_brief(action)}", VALIDATION_ERROR))
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

