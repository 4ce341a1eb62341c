"""``RemoteEnv``: a Gymnasium env whose episodes run in a ``paw-gym serve-env`` server.

Code written for ``gym.make("PaW/Shelf-v0")`` runs unchanged against a served env::

    env = gym.make("PaW/Remote-v0", url="http://127.0.0.1:8001")   # or RemoteEnv(url)
    observation, info = env.reset(seed=0)
    observation, reward, terminated, truncated, info = env.step("take red mug")
    env.close()                                                    # ends the session

The spaces are the served env's text spaces (read from the server's ``/schema``); observations,
rewards, ``terminated``/``truncated`` and ``info`` dicts (admissible actions included) come back
as the served env returned them, and a seeded reset is as deterministic as the env itself.
The local ``np_random`` is seeded by ``reset(seed=...)`` as Gymnasium expects; the episode's
randomness is the server's. What differs from an in-process env: a request the server refuses
(a non-text action, a step before reset, a session that has ended) raises
:class:`RemoteEnvError`; the env object's own attributes and methods (``expert_action()``,
``tasks()``) stay on the server.
"""

from __future__ import annotations

import http.client
import json
from contextlib import ExitStack
from typing import Any
from urllib.parse import urlsplit

import gymnasium as gym
from websockets.exceptions import ConnectionClosed, WebSocketException
from websockets.sync.client import ClientConnection, connect

from paw_gym.remote.protocol import WS_PATH, space_from_schema

#: Largest answer frame the client takes (bytes): an observation of the longest text the
#: observation space allows, four bytes a character, with its info.
MAX_ANSWER_BYTES = 64 << 20


class RemoteEnvError(RuntimeError):
    """The server refused a request or the session ended; ``code`` is OpenEnv's error code
    (``VALIDATION_ERROR``, ``EXECUTION_ERROR``, ``CAPACITY_REACHED``, ...) or ``None`` when
    there was no answer at all."""

    def __init__(self, message: str, code: str | None = None):
        super().__init__(message)
        self.code = code


class RemoteEnv(gym.Env[str, str]):
    """The env served at ``url`` (see the module docstring).

    Args:
        url: the server's base URL, as ``paw-gym serve-env`` prints it (``http://HOST:PORT``;
            ``ws://`` works too).
        render_mode: ``"ansi"`` (``render()`` returns the last observation), ``"human"``
            (prints it) or None.
        timeout: seconds to wait for the connection and for each answer; an answer that does
            not come in time ends the session.
    """

    metadata = {"render_modes": ["ansi", "human"]}

    def __init__(self, url: str, render_mode: str | None = None, timeout: float = 60.0):
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode={render_mode!r} is not supported; use one of "
                             f"{self.metadata['render_modes']} or None")
        parts, secure = _parse_url(url, timeout)
        self.url = f"{'https' if secure else 'http'}://{parts.netloc}"
        self.render_mode = render_mode
        self.timeout = timeout
        self.observation_space, self.action_space = self._read_spaces(parts, secure)
        self._last_observation = ""
        # The connection is a context manager held open across calls; close() exits it.
        self._connection = ExitStack()
        self._ws: ClientConnection | None = None
        try:
            self._ws = self._connection.enter_context(connect(
                f"{'wss' if secure else 'ws'}://{parts.netloc}{WS_PATH}", open_timeout=timeout,
                max_size=MAX_ANSWER_BYTES, compression=None, proxy=None))
        except (OSError, TimeoutError, WebSocketException) as exc:
            raise RemoteEnvError(f"cannot open a session at {self.url}: {exc}") from exc
        # The first answer also tells whether the server took the session (it refuses a
        # connection beyond --max_sessions with an error frame).
        try:
            self.env_id: str = self.state()["env_id"]
        except RemoteEnvError:
            self.close()
            raise

    @classmethod
    def check_settings(cls, url: str, render_mode: str | None = None,
                       timeout: float = 60.0) -> None:
        """``ValueError`` (one line) for a malformed ``url`` or one where no paw-gym env server
        answers ``GET /schema`` (within ``timeout``, at most 10 s); opens no session. The
        commands call it before any work (``training.preflight.check_env``)."""
        parts, secure = _parse_url(url, timeout)
        probe = cls.__new__(cls)
        probe.url = f"{'https' if secure else 'http'}://{parts.netloc}"
        probe.timeout = min(float(timeout), 10.0)
        try:
            probe._read_spaces(parts, secure)
        except RemoteEnvError as error:
            raise ValueError(f"PaW/Remote-v0 url={url!r}: {error}") from None

    # -- Gymnasium API ----------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        data = self._request("reset", {"seed": seed, "options": options})
        self._last_observation = data["observation"]["text"]
        return self._last_observation, data["observation"]["info"]

    def step(self, action: str):
        data = self._request("step", {"action": action})
        observation = data["observation"]
        self._last_observation = observation["text"]
        return (observation["text"], float(data["reward"]), observation["terminated"],
                observation["truncated"], observation["info"])

    def render(self) -> str | None:
        if self.render_mode == "human":
            print(self._last_observation)
            return None
        if self.render_mode == "ansi":
            return self._last_observation
        return None

    def close(self) -> None:
        """End the session: the server closes its env and frees its place before this returns.
        Closing again does nothing."""
        ws, self._ws = self._ws, None
        if ws is None:
            return
        try:
            ws.send(json.dumps({"type": "close"}))
            ws.recv(timeout=self.timeout)  # the server closes the connection once it is done
        except (ConnectionClosed, TimeoutError):
            pass
        finally:
            self._connection.close()

    # -- beyond Gymnasium -------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """The session's state on the server: ``episode_id``, ``step_count``, ``env_id``,
        ``done``."""
        return self._request("state", None)

    # -- the wire ---------------------------------------------------------------------------
    def _request(self, kind: str, data: dict[str, Any] | None) -> dict[str, Any]:
        """Send one request and return its answer's ``data``; :class:`RemoteEnvError` when the
        server refuses it or the session has ended."""
        if self._ws is None:
            raise RemoteEnvError(f"{kind} on a closed RemoteEnv ({self.url}); make a new one to "
                                 f"start another session")
        message = {"type": kind} if data is None else {"type": kind, "data": data}
        try:
            self._ws.send(json.dumps(message))
        except ConnectionClosed:
            pass  # the server may have said why before it closed: read that below
        try:
            answer = json.loads(self._ws.recv(timeout=self.timeout))
        except TimeoutError as exc:
            self._ws = None  # a late answer must not be taken for the next request's
            self._connection.close()
            raise RemoteEnvError(f"{self.url} did not answer {kind} within {self.timeout:g} s; "
                                 f"the session is closed") from exc
        except ConnectionClosed as exc:
            self._ws = None
            self._connection.close()
            reason = f": {exc.rcvd.reason}" if exc.rcvd and exc.rcvd.reason else ""
            raise RemoteEnvError(f"the session at {self.url} has ended{reason}; make a new "
                                 f"RemoteEnv to start another") from exc
        if answer.get("type") == "error":
            raise RemoteEnvError(f"{self.url}: {answer['data']['message']}",
                                 answer["data"]["code"])
        return answer["data"]

    def _read_spaces(self, parts: Any, secure: bool) -> tuple[gym.spaces.Text, gym.spaces.Text]:
        """The observation and action spaces from the server's ``GET /schema``."""
        connection_class = http.client.HTTPSConnection if secure else http.client.HTTPConnection
        connection = connection_class(parts.hostname, parts.port, timeout=self.timeout)
        try:
            connection.request("GET", "/schema")
            response = connection.getresponse()
            status, body = response.status, response.read()
        except OSError as exc:
            raise RemoteEnvError(f"no env server answers at {self.url} ({exc.strerror or exc}); "
                                 f"start one with `paw-gym serve-env --env ENV_ID`") from exc
        finally:
            connection.close()
        try:
            schemas = json.loads(body) if status == 200 else None
            return (space_from_schema(schemas["observation"]["properties"]["text"]),
                    space_from_schema(schemas["action"]["properties"]["action"]))
        except (ValueError, TypeError, KeyError) as exc:
            raise RemoteEnvError(f"{self.url} is not a paw-gym text env server (GET /schema "
                                 f"answered HTTP {status} without text observation and action "
                                 f"schemas); serve the env with `paw-gym serve-env`") from exc


def _parse_url(url: Any, timeout: Any) -> tuple[Any, bool]:
    """``(urlsplit of the server's base URL, whether it is https/wss)``; ValueError for a bad
    ``url`` or ``timeout``."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) \
            or not 0 < timeout < float("inf"):  # nan and inf compare false / never answer
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if not isinstance(url, str):
        raise ValueError(f"url {url!r}: give the server's base URL, http://HOST:PORT (what "
                         f"`paw-gym serve-env` prints)")
    parts = urlsplit(url if "://" in url else f"http://{url}")
    try:
        parts.port  # noqa: B018  (a port that is not a number raises here)
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https", "ws", "wss") or \
            not parts.hostname or parts.path.rstrip("/") not in ("", WS_PATH):
        raise ValueError(f"url {url!r}: give the server's base URL, http://HOST:PORT (what "
                         f"`paw-gym serve-env` prints)")
    return parts, parts.scheme in ("https", "wss")
