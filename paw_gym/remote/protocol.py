"""The wire format of ``paw-gym serve-env``: OpenEnv's WebSocket protocol, for text envs.

One WebSocket connection to ``/ws`` is one session with its own env instance. Every message is
one JSON text frame; the client sends a request and reads its one answer (OpenEnv 0.10.0's
``EnvClient``, simulation mode):

========================================================  =====================================
client sends                                              server answers
========================================================  =====================================
``{"type": "reset", "data": {"seed": 0, "options": {}}}``  ``{"type": "observation", "data": O}``
``{"type": "step", "data": {"action": "take red mug"}}``   ``{"type": "observation", "data": O}``
``{"type": "state"}``                                      ``{"type": "state", "data": S}``
``{"type": "close"}``                                      (the server closes the connection)
========================================================  =====================================

``O`` is ``{"observation": {"text": str, "info": {...}, "terminated": bool, "truncated": bool,
"metadata": {}}, "reward": float | null, "done": bool}`` (``reward`` is null after a reset;
``done`` is ``terminated or truncated``); ``S`` is ``{"episode_id", "step_count", "env_id",
"done"}``. A request that cannot be carried out is answered ``{"type": "error", "data":
{"message": str, "code": str}}`` with one of OpenEnv's codes (:data:`ERROR_CODES`) and leaves
the session as it was. The same port answers plain HTTP too (:mod:`paw_gym.remote.http_api`):
``GET /schema`` also gives the env's spaces (:func:`space_schema`), from which
:class:`~paw_gym.remote.client.RemoteEnv` rebuilds them. :func:`reset_arguments` and
:func:`step_action` check a request's ``data`` for both.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from gymnasium import spaces

from paw_gym.core import TextSpace

#: Path of the session WebSocket (OpenEnv clients append it to the base URL).
WS_PATH = "/ws"
#: The protocol, as the docs and ``/metadata`` name it.
PROTOCOL = "OpenEnv 0.10.0 WebSocket protocol (simulation mode: reset/step/state)"
#: ``info.version`` of ``GET /openapi.json``: the version of OpenEnv's HTTP API that the routes
#: follow, as OpenEnv 0.10.0's own server declares it (``openenv validate`` reads it as its
#: ``openenv-http/1.x`` profile).
OPENENV_HTTP_API_VERSION = "1.0.0"

#: OpenEnv's ``WSErrorCode`` values that this server sends.
INVALID_JSON = "INVALID_JSON"
UNKNOWN_TYPE = "UNKNOWN_TYPE"
VALIDATION_ERROR = "VALIDATION_ERROR"
EXECUTION_ERROR = "EXECUTION_ERROR"
CAPACITY_REACHED = "CAPACITY_REACHED"
FACTORY_ERROR = "FACTORY_ERROR"
SESSION_ERROR = "SESSION_ERROR"
ERROR_CODES = (INVALID_JSON, UNKNOWN_TYPE, VALIDATION_ERROR, EXECUTION_ERROR, CAPACITY_REACHED,
               FACTORY_ERROR, SESSION_ERROR)
#: The keys a reset request's ``data`` may have.
RESET_KEYS = ("seed", "options", "episode_id")


class RequestError(ValueError):
    """A request that cannot be carried out: ``code`` is one of :data:`ERROR_CODES`."""

    def __init__(self, message: str, code: str):
        super().__init__(message)
        self.code = code


def brief(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters, so an error never echoes a huge request."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


def reset_arguments(data: Any) -> tuple[int | None, dict[str, Any] | None, str | None]:
    """``(seed, options, episode_id)`` of a reset request's ``data``; :class:`RequestError`
    (``VALIDATION_ERROR``) naming what is wrong."""
    if not isinstance(data, dict) or set(data) - set(RESET_KEYS):
        raise RequestError(f"reset data is an object with any of {', '.join(RESET_KEYS)}; got "
                           f"{brief(data)}", VALIDATION_ERROR)
    seed, options, episode_id = (data.get(key) for key in RESET_KEYS)
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise RequestError(f"reset seed must be a non-negative integer or null, got "
                           f"{brief(seed)}", VALIDATION_ERROR)
    if options is not None and not isinstance(options, dict):
        raise RequestError(f"reset options must be an object or null, got {brief(options)}",
                           VALIDATION_ERROR)
    if episode_id is not None and not isinstance(episode_id, str):
        raise RequestError(f"reset episode_id must be a string or null, got "
                           f"{brief(episode_id)}", VALIDATION_ERROR)
    return seed, options, episode_id


def step_action(data: Any) -> str:
    """The action text of a step request's ``data`` (``{"action": "<text>"}``, optionally
    with ``metadata``); :class:`RequestError` (``VALIDATION_ERROR``) otherwise."""
    if not isinstance(data, dict) or "action" not in data or set(data) - {"action", "metadata"}:
        raise RequestError(f'step data is {{"action": "<text>"}}, got {brief(data)}',
                           VALIDATION_ERROR)
    if not isinstance(data["action"], str):
        raise RequestError(f"step action must be a string (this env's actions are text), got "
                           f"{brief(data['action'])}", VALIDATION_ERROR)
    return data["action"]


def state_data(env_id: str, episode_id: str | None, step_count: int, done: bool
               ) -> dict[str, Any]:
    """The ``data`` of a ``state`` answer (``GET /state``'s body)."""
    return {"episode_id": episode_id, "step_count": step_count, "env_id": env_id, "done": done}


def space_schema(space: spaces.Space, name: str) -> dict[str, Any]:
    """The JSON schema of one string field holding a value of the text ``space``.

    A paw-gym :class:`~paw_gym.core.TextSpace` accepts any character; a plain Gymnasium
    ``Text`` space only those of its charset, carried as the schema's ``x-charset``.
    ``name`` ("observation space", ...) names the space in the error for a non-text space.
    """
    if not isinstance(space, spaces.Text):
        raise ValueError(f"serve-env serves text envs (gymnasium.spaces.Text observation and "
                         f"action spaces); this env's {name} is {space}")
    schema: dict[str, Any] = {"type": "string", "minLength": space.min_length,
                              "maxLength": space.max_length}
    if not isinstance(space, TextSpace):
        schema["x-charset"] = space.characters
    return schema


def space_from_schema(schema: dict[str, Any]) -> spaces.Text:
    """The text space that :func:`space_schema` described."""
    if "x-charset" in schema:
        return spaces.Text(schema["maxLength"], min_length=schema["minLength"],
                           charset=schema["x-charset"])
    return TextSpace(schema["maxLength"], min_length=schema["minLength"])


def schemas(observation_space: spaces.Space, action_space: spaces.Space) -> dict[str, Any]:
    """``GET /schema``: OpenEnv's ``SchemaResponse`` (JSON schemas of the action, observation
    and state objects) for a text env with these spaces."""
    observation = space_schema(observation_space, "observation space")
    action = space_schema(action_space, "action space")
    return {
        "action": {"title": "TextAction", "type": "object", "additionalProperties": False,
                   "required": ["action"],
                   "properties": {"action": action, "metadata": {"type": "object"}}},
        "observation": {"title": "TextObservation", "type": "object", "properties": {
            "text": observation, "info": {"type": "object"},
            "terminated": {"type": "boolean"}, "truncated": {"type": "boolean"},
            "done": {"type": "boolean"}, "reward": {"type": ["number", "null"]},
            "metadata": {"type": "object"}}},
        "state": {"title": "TextState", "type": "object", "properties": {
            "episode_id": {"type": ["string", "null"]}, "step_count": {"type": "integer"},
            "env_id": {"type": "string"}, "done": {"type": "boolean"}}},
    }


def observation_data(text: str, info: dict[str, Any], reward: float | None, terminated: bool,
                     truncated: bool) -> dict[str, Any]:
    """The ``data`` of an ``observation`` answer (OpenEnv's ``serialize_observation`` shape)."""
    return {"observation": {"text": text, "info": info, "terminated": terminated,
                            "truncated": truncated, "metadata": {}},
            "reward": reward, "done": terminated or truncated}


def error(message: str, code: str) -> dict[str, Any]:
    """An ``error`` answer."""
    return {"type": "error", "data": {"message": message, "code": code}}


def encode(message: dict[str, Any]) -> str:
    """``message`` as one JSON text frame; NumPy scalars and arrays in an ``info`` become plain
    numbers and lists, anything else JSON cannot hold is a ``TypeError`` naming its type."""
    return json.dumps(message, ensure_ascii=False, default=_plain)


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"a {type(value).__name__} ({value!r:.60}) cannot be sent as JSON; an env "
                    f"served by serve-env keeps its info values to str, numbers, bools, None, "
                    f"lists and dicts")
