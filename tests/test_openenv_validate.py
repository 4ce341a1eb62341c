"""OpenEnv's own validator (``openenv validate --url``) against ``paw-gym serve-env``, for every
registered env; and what the server's HTTP side answers beyond it: a request it has no route
for, OpenEnv's one-shot ``/reset``, ``/step``, ``/state``, and JSON-RPC 2.0 at ``/mcp``."""

from __future__ import annotations

import http.client
import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

import paw_gym
from paw_gym.remote import EnvServer, RemoteEnv, ServerLimits

REPO = Path(__file__).resolve().parents[1]

#: Every registered text env, with the env_kwargs it is served with (PaW/Text-v0 wraps a
#: Gymnasium env it is given) and the marks of its test: ALFWorld builds its games (28 s the
#: first time on 2 cores, 3 s from the cache) and needs the alfworld extra.
SERVED = {
    "PaW/ALFWorld-v0": ({}, [pytest.mark.heavy]),
    "PaW/Blackjack-v0": ({}, []),
    "PaW/CliffWalking-v0": ({}, []),
    "PaW/FrozenLake-v0": ({}, []),
    "PaW/SearchQA-v0": ({}, []),
    "PaW/Shelf-v0": ({}, []),
    "PaW/Sokoban-v0": ({}, []),
    "PaW/Taxi-v0": ({}, []),
    "PaW/Text-v0": ({"env_id": "FrozenLake-v1"}, []),
    "PaW/WebShop-v0": ({}, []),
}
#: What each env needs beyond the core install.
NEEDS = {"PaW/ALFWorld-v0": "alfworld"}


def test_every_registered_env_is_validated():
    # paw-gym's own; tests may register more (Test/GuessNumber-v0).
    assert set(SERVED) == {env_id for env_id in paw_gym.list_text_envs()
                           if env_id.startswith("PaW/")}


def serve(env_id: str, **settings) -> EnvServer:
    """An EnvServer for ``env_id`` on a free port; skips when the env needs what is not here."""
    if env_id in NEEDS:
        pytest.importorskip(NEEDS[env_id], reason=f"{env_id} needs the {NEEDS[env_id]} package "
                                                  f"(pip install 'paw-gym[alfworld]')")
    return EnvServer(env_id, SERVED[env_id][0], port=0, **settings)


def request(server: EnvServer, method: str, path: str, body: bytes | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, dict, bytes]:
    """``(status, headers, body)`` of one plain HTTP request."""
    connection = http.client.HTTPConnection(server.host, server.port, timeout=10)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


@pytest.mark.parametrize("env_id", [pytest.param(env_id, marks=marks)
                                    for env_id, (_, marks) in SERVED.items()])
def test_openenvs_validator_passes_every_criterion(env_id):
    # What `openenv validate --url URL` runs (openenv.cli.commands.validate); importing the
    # command itself costs 8 s of imports, so the CLI runs once, in the heavy test below.
    from openenv.cli._validation import validate_running_environment

    env_kwargs = SERVED[env_id][0]
    with serve(env_id) as server:
        report = validate_running_environment(server.url)
        failed = [criterion for criterion in report["criteria"] if not criterion["passed"]]
        assert not failed and report["passed"], json.dumps(failed, indent=1)
        assert len(report["criteria"]) == 6
        assert (report["mode"], report["standard_profile"]) == ("simulation", "openenv-http/1.x")
        # The one-shot HTTP reset is a fresh env's: the in-process reset for the same seed.
        status, _, body = request(server, "POST", "/reset", b'{"seed": 3}',
                                  {"Content-Type": "application/json"})
        env = gym.make(env_id, **env_kwargs)
        observation, info = env.reset(seed=3)
        env.close()
        assert status == 200
        assert json.loads(body) == {"observation": {
            "text": observation, "info": json.loads(json.dumps(info)), "terminated": False,
            "truncated": False, "metadata": {}}, "reward": None, "done": False}


@pytest.mark.heavy
def test_openenv_validate_cli_passes_against_paw_gym_serve_env():
    """The commands as a user runs them: ``paw-gym serve-env`` and ``openenv validate --url``."""
    server = subprocess.Popen([sys.executable, "-m", "training.cli", "serve-env", "--env",
                               "PaW/Shelf-v0", "--port", "0"], cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        url = next(found.group(1) for line in server.stdout
                   if (found := re.search(r"serving PaW/Shelf-v0 at (http://\S+) ", line)))
        done = subprocess.run([sys.executable, "-m", "openenv.cli", "validate", "--url", url,
                               "--level", "runtime"], cwd=REPO, capture_output=True, text=True,
                              timeout=300)
    finally:
        server.terminate()
        server.communicate(timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Verdict: PASS" in done.stdout and "FAIL" not in done.stdout
    assert len(re.findall(r"^\s+PASS ", done.stdout, re.MULTILINE)) == 6


@pytest.fixture(scope="module")
def shelf():
    with EnvServer("PaW/Shelf-v0", port=0, limits=ServerLimits(max_message_bytes=4096)) as server:
        yield server


@pytest.mark.parametrize("method, path, status, allow", [
    ("GET", "/nope", 404, None),
    ("POST", "/", 404, None),
    ("DELETE", "/reset", 405, "POST"),
    ("GET", "/reset", 405, "POST"),
    ("PUT", "/health", 405, "GET, HEAD"),
    ("BREW", "/mcp", 405, "POST"),
    ("GET", "/ws", 426, None),
])
def test_a_request_without_a_route_gets_an_http_answer(shelf, method, path, status, allow):
    got, headers, body = request(shelf, method, path)
    assert got == status and headers.get("allow") == allow
    assert headers["content-type"] == "application/json" and json.loads(body)["detail"]
    env = RemoteEnv(shelf.url)  # and the server goes on
    assert env.reset(seed=0)[0]
    env.close()


def test_the_http_edges_get_answers_too(shelf):
    status, headers, body = request(shelf, "HEAD", "/health")
    assert status == 200 and body == b"" and int(headers["content-length"]) > 0
    # A body over --max_message_bytes (4096 here), sent or only declared.
    status, _, body = request(shelf, "POST", "/mcp", b"x" * 5000)
    assert status == 413 and "serve-env --max_message_bytes" in json.loads(body)["detail"]
    assert raw_answer(shelf, b"POST /reset HTTP/1.1\r\nHost: x\r\nContent-Length: 1073741824"
                             b"\r\n\r\n").startswith(b"HTTP/1.1 413 ")
    # A WebSocket handshake to a path that is not /ws: an HTTP 404, not a dropped connection.
    with pytest.raises(InvalidStatus) as refused:
        connect(shelf.url.replace("http", "ws") + "/sessions", proxy=None, open_timeout=10)
    assert refused.value.response.status_code == 404
    # Not HTTP at all: uvicorn's 400.
    assert raw_answer(shelf, b"\x16\x03\x01 not a request line\r\n\r\n").startswith(
        b"HTTP/1.1 400 ")


def raw_answer(server: EnvServer, data: bytes) -> bytes:
    """The first bytes the server answers to ``data`` sent on a new connection."""
    with socket.create_connection((server.host, server.port), timeout=10) as raw:
        raw.sendall(data)
        return raw.recv(100)


@pytest.mark.parametrize("body, status, code, text", [
    (b"", 200, None, None),
    (b'{"seed": 0, "options": null, "episode_id": "e1"}', 200, None, None),
    (b"{oops", 400, "INVALID_JSON", "not valid JSON"),
    (b'{"seed": -1}', 422, "VALIDATION_ERROR", "non-negative integer"),
    (b'{"seeds": 1}', 422, "VALIDATION_ERROR", "any of seed, options, episode_id"),
    (b'{"options": {"target": "gold mug"}}', 400, "EXECUTION_ERROR",
     "reset failed: ValueError: options['target']='gold mug' is not an item"),
])
def test_http_reset_is_one_shot(shelf, body, status, code, text):
    got, _, answer = request(shelf, "POST", "/reset", body)
    answer = json.loads(answer)
    assert got == status
    if code is None:
        assert set(answer) == {"observation", "reward", "done"} and answer["reward"] is None
    else:
        assert answer["code"] == code and text in answer["detail"]
    assert shelf.session_count == 0  # its env was closed


@pytest.mark.parametrize("body, status, code", [
    (b'{"action": {"action": "take red mug"}}', 409, "EXECUTION_ERROR"),
    (b'{"action": {"action": "pay", "metadata": {}}, "request_id": "r1"}', 409,
     "EXECUTION_ERROR"),
    (b'{"action": "pay"}', 422, "VALIDATION_ERROR"),
    (b'{"action": {"action": 42}}', 422, "VALIDATION_ERROR"),
    (b'{"act": {"action": "pay"}}', 422, "VALIDATION_ERROR"),
    (b"", 400, "INVALID_JSON"),
])
def test_http_step_has_no_episode_and_state_is_a_fresh_sessions(shelf, body, status, code):
    got, _, answer = request(shelf, "POST", "/step", body)
    answer = json.loads(answer)
    assert (got, answer["code"]) == (status, code)
    if status == 409:
        assert "HTTP requests are stateless" in answer["detail"] and "/ws" in answer["detail"]
    status, _, state = request(shelf, "GET", "/state")
    assert json.loads(state) == {"episode_id": None, "step_count": 0, "env_id": "PaW/Shelf-v0",
                                 "done": False}


MCP_REQUESTS = [  # (body, JSON-RPC error code, id of the answer)
    (b"{}", -32600, None),
    (b"not json", -32700, None),
    (b'{"jsonrpc": "2.0", "method": "tools/list", "id": 1}', -32603, 1),
    (b'{"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "step"}, "id": "a"}',
     -32603, "a"),
    (b'{"jsonrpc": "2.0", "method": "tools/call", "params": {}, "id": 2}', -32602, 2),
    (b'{"jsonrpc": "2.0", "method": "resources/list", "id": 3}', -32601, 3),
    (b'{"jsonrpc": "1.0", "method": "tools/list", "id": 4}', -32600, None),
    (b'{"jsonrpc": "2.0", "method": "tools/list", "params": [1], "id": 5}', -32600, None),
]


@pytest.mark.parametrize("body, code, request_id", MCP_REQUESTS)
def test_mcp_answers_json_rpc(shelf, body, code, request_id):
    status, headers, answer = request(shelf, "POST", "/mcp", body)
    answer = json.loads(answer)
    assert status == 200 and headers["content-type"] == "application/json"
    assert answer["jsonrpc"] == "2.0" and answer["error"]["code"] == code
    assert answer["id"] == request_id and "result" not in answer


@pytest.mark.heavy
def test_mcp_answers_as_openenvs_own_server(shelf):
    """The same requests to OpenEnv 0.10.0's own server (an env without MCP tools) get the same
    JSON-RPC error codes and ids."""
    from fastapi.testclient import TestClient
    from openenv.core.env_server.http_server import create_fastapi_app
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import Action, Observation, State

    class Plain(Environment):
        def reset(self, seed=None, episode_id=None, **kwargs):
            return Observation()

        def step(self, action, timeout_s=None, **kwargs):
            return Observation()

        @property
        def state(self):
            return State()

    with TestClient(create_fastapi_app(Plain, Action, Observation)) as openenv_server:
        for body, _, _ in MCP_REQUESTS:
            theirs = openenv_server.post("/mcp", content=body)
            ours = json.loads(request(shelf, "POST", "/mcp", body)[2])
            assert theirs.status_code == 200
            theirs = theirs.json()
            assert (ours["jsonrpc"], ours["id"], ours["error"]["code"]) == \
                (theirs["jsonrpc"], theirs["id"], theirs["error"]["code"]), body
