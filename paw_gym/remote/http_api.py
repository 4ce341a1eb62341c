"""The plain-HTTP side of ``paw-gym serve-env``: OpenEnv 0.10.0's HTTP routes, for text envs.

The server (:mod:`paw_gym.remote.server`) answers these beside the WebSocket sessions at
``/ws``, on the same port; this module holds what they answer, without any I/O:

=====================  =========================================================================
route                  answer
=====================  =========================================================================
``GET /health``        ``{"status": "healthy"}``
``GET /metadata``      ``{"name", "description", "version"}``
``GET /schema``        JSON schemas of the action, observation and state (the env's text spaces)
``GET /openapi.json``  :func:`openapi_document`: every route below, ``info.version`` = the
                       OpenEnv HTTP API version the routes follow
``POST /reset``        a one-shot reset: a fresh env, reset with the request's ``seed`` and
                       ``options``, its first observation, the env closed (OpenEnv's HTTP
                       simulation mode: an HTTP request holds no episode)
``POST /step``         409: no episode to step (a fresh env cannot step before a reset); after
                       the request is checked against the action schema (422 if it fails)
``GET /state``         the state of a fresh session (no episode, step 0)
``POST /mcp``          :func:`mcp_answer`: a JSON-RPC 2.0 answer, as OpenEnv's ``/mcp`` gives
                       for an env without MCP tools
=====================  =========================================================================

Episodes are WebSocket sessions (:mod:`paw_gym.remote.protocol`), which is what OpenEnv's
clients and :class:`~paw_gym.remote.client.RemoteEnv` use. Any other path is answered 404, a
known path with another method 405 (with ``Allow``), each with a JSON ``{"detail": ...}``; an
error in carrying out a request is ``{"detail": ..., "code": ...}`` with the WebSocket
protocol's codes.
"""

from __future__ import annotations

import json
from typing import Any

from paw_gym.remote.protocol import (
    ERROR_CODES,
    EXECUTION_ERROR,
    INVALID_JSON,
    OPENENV_HTTP_API_VERSION,
    VALIDATION_ERROR,
    WS_PATH,
    RequestError,
    brief,
    step_action,
)

#: Every HTTP route: path -> method (a GET route answers HEAD too).
ROUTES = {"/health": "GET", "/metadata": "GET", "/schema": "GET", "/openapi.json": "GET",
          "/state": "GET", "/reset": "POST", "/step": "POST", "/mcp": "POST"}
#: The status of an error answer, by its code (a code not here is carried out by the route).
ERROR_STATUS = {INVALID_JSON: 400, VALIDATION_ERROR: 422, EXECUTION_ERROR: 400,
                "CAPACITY_REACHED": 503, "FACTORY_ERROR": 500}
#: Why ``POST /step`` has nothing to step.
NO_EPISODE = (f"POST /step has no episode to step: HTTP requests are stateless (OpenEnv's HTTP "
              f"simulation mode: each request gets a fresh env, and a fresh env cannot step "
              f"before a reset); play an episode over a WebSocket session at {WS_PATH} "
              f"(paw_gym.remote.RemoteEnv, gym.make('PaW/Remote-v0', url=...), or OpenEnv's "
              f"EnvClient)")

# JSON-RPC 2.0 error codes (those OpenEnv's /mcp answers with).
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = (
    -32700, -32600, -32601, -32602, -32603)


def route_error(method: str, path: str) -> tuple[int, dict[str, str], list[tuple[str, str]]]:
    """``(status, body, extra headers)`` for a request no route takes: 405 with ``Allow`` for a
    known path, 426 for ``/ws`` without a WebSocket upgrade, 404 otherwise."""
    if path in ROUTES:
        allowed = "GET, HEAD" if ROUTES[path] == "GET" else ROUTES[path]
        return 405, {"detail": f"{path} takes {allowed}, not {method}"}, [("allow", allowed)]
    if path == WS_PATH:
        return 426, {"detail": f"{WS_PATH} is the WebSocket of the sessions: connect with a "
                               f"WebSocket client (RemoteEnv, OpenEnv's EnvClient)"}, \
            [("upgrade", "websocket")]
    routes = ", ".join(f"{verb} {route}" for route, verb in ROUTES.items())
    return 404, {"detail": f"no route {method} {brief(path)}; this server answers {routes} and "
                           f"WebSocket sessions at {WS_PATH} (docs/remote_envs.md)"}, []


def json_body(body: bytes, empty: Any = None) -> Any:
    """The request body as JSON (``empty`` for an empty body); :class:`RequestError`
    (``INVALID_JSON``) when it is not JSON."""
    if not body.strip() and empty is not None:
        return empty
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise RequestError(f"request body is not valid JSON: {exc}", INVALID_JSON) from None


def check_step_request(body: bytes) -> str:
    """The action of a ``POST /step`` body (OpenEnv's ``StepRequest``: ``{"action": {"action":
    "<text>"}}``, optionally with ``timeout_s`` and ``request_id``); :class:`RequestError`."""
    request, shape = json_body(body), 'a step request is {"action": {"action": "<text>"}}'
    if not isinstance(request, dict) or "action" not in request \
            or set(request) - {"action", "timeout_s", "request_id"}:
        raise RequestError(f"{shape}, got {brief(request)}", VALIDATION_ERROR)
    try:
        return step_action(request["action"])
    except RequestError as refused:
        raise RequestError(f"{shape}: its action object: {refused}", refused.code) from None


def mcp_answer(body: bytes, env_id: str) -> dict[str, Any]:
    """The JSON-RPC 2.0 answer of ``POST /mcp`` to ``body``.

    The served env has no MCP tools (its one action is a step, in a session), so as OpenEnv's
    server does for such an env: ``tools/list`` and ``tools/call`` are an internal error saying
    so, any other method is not found, and a request that is not JSON or not a JSON-RPC 2.0
    request object is a parse error or an invalid request (answered with a null ``id``, as
    OpenEnv does).
    """
    try:
        request = json.loads(body)
    except (ValueError, RecursionError) as exc:
        return _rpc_error(PARSE_ERROR, f"Parse error: {exc}")
    if not isinstance(request, dict):
        return _rpc_error(INVALID_REQUEST, f"Invalid request: one JSON-RPC 2.0 request object, "
                                           f"not {brief(request)} (batches are not supported)")
    request_id = request.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, (str, int, type(None))):
        return _rpc_error(INVALID_REQUEST, f"Invalid request: id must be a string, an integer "
                                           f"or null, got {brief(request_id)}")
    method, params = request.get("method"), request.get("params", {})
    extra = set(request) - {"jsonrpc", "method", "params", "id"}
    if request.get("jsonrpc") != "2.0" or not isinstance(method, str) \
            or not isinstance(params, dict) or extra:
        return _rpc_error(INVALID_REQUEST, f'Invalid request: {{"jsonrpc": "2.0", "method": str, '
                                           f'"params": object, "id": ...}}, got {brief(request)}')
    if method == "tools/call" and not params.get("name"):
        return _rpc_error(INVALID_PARAMS, "Missing 'name' in params", request_id)
    if method in ("tools/list", "tools/call"):
        return _rpc_error(INTERNAL_ERROR, f"{env_id} does not support MCP: it has no tools; step "
                                          f"it in a session at {WS_PATH}", request_id)
    return _rpc_error(METHOD_NOT_FOUND, f"Method not found: {brief(method)} (this server has no "
                                        f"MCP tools; sessions are WebSocket connections to "
                                        f"{WS_PATH})", request_id)


def _rpc_error(code: int, message: str, request_id: str | int | None = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def openapi_document(env_id: str, description: str, schemas: dict[str, Any],
                     paw_gym_version: str) -> dict[str, Any]:
    """``GET /openapi.json``: an OpenAPI 3.1 description of every HTTP route (the WebSocket
    sessions are named in ``info.description``; OpenAPI does not describe WebSockets)."""
    def ref(name: str) -> dict[str, str]:
        return {"$ref": f"#/components/schemas/{name}"}

    def answers(status: int, name: str, what: str, errors: dict[int, str] | None = None
                ) -> dict[str, Any]:
        table = {str(status): {"description": what,
                               "content": {"application/json": {"schema": ref(name)}}}}
        for code, why in (errors or {}).items():
            table[str(code)] = {"description": why,
                                "content": {"application/json": {"schema": ref("Error")}}}
        return table

    def body(name: str) -> dict[str, Any]:
        return {"required": False, "content": {"application/json": {"schema": ref(name)}}}

    paths = {
        "/reset": {"post": {
            "summary": "One-shot reset: a fresh env's first observation",
            "description": "Makes a fresh env, resets it with `seed` and `options`, answers its "
                           "first observation and closes it: an HTTP request holds no episode "
                           f"(OpenEnv's HTTP simulation mode). Episodes are sessions at "
                           f"{WS_PATH}.",
            "requestBody": body("ResetRequest"),
            "responses": answers(200, "ObservationAnswer", "the first observation", {
                400: "not JSON, or the env refused the reset (e.g. bad options)",
                422: "the request does not match ResetRequest",
                503: "too many HTTP requests waiting for the env"})}},
        "/step": {"post": {
            "summary": "No episode to step over HTTP",
            "description": NO_EPISODE,
            "requestBody": {"required": True,
                            "content": {"application/json": {"schema": ref("StepRequest")}}},
            "responses": answers(200, "ObservationAnswer", "never: see 409", {
                400: "not JSON", 409: "always, for a valid request: no episode",
                422: "the request does not match StepRequest"})}},
        "/state": {"get": {
            "summary": "The state of a fresh session",
            "description": "HTTP holds no episode, so this is a new session's state (no "
                           "episode, step 0); a session's own state is its `state` request.",
            "responses": answers(200, "TextState", "the state")}},
        "/health": {"get": {"summary": "Health check",
                            "responses": answers(200, "Health", "healthy")}},
        "/metadata": {"get": {"summary": "The served env",
                              "responses": answers(200, "Metadata", "name and description")}},
        "/schema": {"get": {"summary": "JSON schemas of the action, observation and state",
                            "responses": answers(200, "Schemas", "the schemas")}},
        "/mcp": {"post": {
            "summary": "MCP JSON-RPC 2.0 endpoint",
            "description": "Answers JSON-RPC 2.0; the env has no MCP tools, so tools/list and "
                           "tools/call answer an error saying so, as OpenEnv's server does.",
            "requestBody": {"required": True, "content": {"application/json": {
                "schema": ref("JsonRpcRequest")}}},
            "responses": answers(200, "JsonRpcResponse", "a JSON-RPC 2.0 answer")}},
    }
    components = {
        "TextAction": schemas["action"],
        "TextObservation": schemas["observation"],
        "TextState": schemas["state"],
        "ResetRequest": {"type": "object", "additionalProperties": False, "properties": {
            "seed": {"type": ["integer", "null"], "minimum": 0},
            "options": {"type": ["object", "null"]},
            "episode_id": {"type": ["string", "null"]}}},
        "StepRequest": {"type": "object", "additionalProperties": False, "required": ["action"],
                        "properties": {"action": ref("TextAction"),
                                       "timeout_s": {"type": ["number", "null"]},
                                       "request_id": {"type": ["string", "null"]}}},
        "ObservationAnswer": {"type": "object", "required": ["observation", "reward", "done"],
                              "properties": {"observation": ref("TextObservation"),
                                             "reward": {"type": ["number", "null"]},
                                             "done": {"type": "boolean"}}},
        "Error": {"type": "object", "required": ["detail"], "properties": {
            "detail": {"type": "string"}, "code": {"enum": list(ERROR_CODES)}}},
        "Health": {"type": "object", "properties": {"status": {"const": "healthy"}}},
        "Metadata": {"type": "object", "properties": {
            "name": {"type": "string"}, "description": {"type": "string"},
            "version": {"type": "string"}}},
        "Schemas": {"type": "object", "required": ["action", "observation", "state"],
                    "properties": {key: {"type": "object"}
                                   for key in ("action", "observation", "state")}},
        "JsonRpcRequest": {"type": "object", "required": ["jsonrpc", "method"], "properties": {
            "jsonrpc": {"const": "2.0"}, "method": {"type": "string"},
            "params": {"type": "object"}, "id": {"type": ["string", "integer", "null"]}}},
        "JsonRpcResponse": {"type": "object", "required": ["jsonrpc", "id"], "properties": {
            "jsonrpc": {"const": "2.0"}, "id": {"type": ["string", "integer", "null"]},
            "result": {}, "error": {"type": "object", "properties": {
                "code": {"type": "integer"}, "message": {"type": "string"}}}}},
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": f"paw-gym serve-env: {env_id}",
                 "version": OPENENV_HTTP_API_VERSION,
                 "description": f"{description}. OpenEnv's HTTP API (simulation mode), served "
                                f"by paw-gym {paw_gym_version}. Episodes are WebSocket "
                                f"sessions at {WS_PATH}: one connection, one env; "
                                f"docs/remote_envs.md describes the protocol."},
        "paths": paths,
        "components": {"schemas": components},
    }
