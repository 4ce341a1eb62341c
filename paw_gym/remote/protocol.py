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
the session as it was. Plain HTTP ``GET /health``, ``/metadata`` and ``/schema`` describe the
server; ``/schema`` also gives the env's spaces (:func:`space_schema`), from which
:class:`~paw_gym.remote.client.RemoteEnv` rebuilds them.
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
