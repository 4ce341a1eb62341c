"""``paw-gym serve-env`` and ``RemoteEnv``: a real server on 127.0.0.1, real clients (paw-gym's
and OpenEnv's own), and remote episodes compared with in-process ones."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

import paw_gym
from paw_gym.remote import EnvServer, RemoteEnv, RemoteEnvError, ServerLimits
from training.cli import main

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def server():
    with EnvServer("PaW/Shelf-v0", port=0) as running:
        yield running


def in_process_episode(env_id: str, seed: int, options=None, actions=None, env_kwargs=None):
    """``[(observation, info), (observation, reward, terminated, truncated, info), ...]`` of one
    in-process episode and the actions taken: ``actions`` if given, else the expert's with an
    action the env cannot execute second."""
    env = gym.make(env_id, **(env_kwargs or {}))
    steps, taken, done = [env.reset(seed=seed, options=options)], [], False
    while not done and (actions is None or len(taken) < len(actions)):
        if actions is not None:
            action = actions[len(taken)]
        elif len(taken) == 1:
            action = "dance on the table"
        else:
            action = env.unwrapped.expert_action()
        taken.append(action)
        steps.append(env.step(action))
        done = steps[-1][2] or steps[-1][3]
    env.close()
    return steps, taken


def remote_episode(env: gym.Env, seed: int, actions: list[str], options=None):
    return [env.reset(seed=seed, options=options)] + [env.step(action) for action in actions]


def test_check_env_passes_through_the_client(server):
    env = gym.make("PaW/Remote-v0", url=server.url)
    check_env(env.unwrapped)  # also makes its own envs from the spec, one per render mode
    assert env.unwrapped.env_id == "PaW/Shelf-v0"
    env.close()
    assert server.session_count == 0  # close() returns once the server has closed the env


@pytest.mark.parametrize("env_id, env_kwargs", [("PaW/Shelf-v0", {"split": "test"}),
                                                ("PaW/Sokoban-v0", {})])
def test_a_remote_episode_equals_the_in_process_one(env_id, env_kwargs):
    with EnvServer(env_id, env_kwargs, port=0) as server:
        env = gym.make("PaW/Remote-v0", url=server.url)
        for seed in (0, 7):
            expected, actions = in_process_episode(env_id, seed, env_kwargs=env_kwargs)
            assert expected[2][4]["invalid_action"] and expected[-1][2]  # solved, after a slip
            assert remote_episode(env, seed, actions) == expected
        # Options reach the env's reset; the step limit is the served env's (truncation).
        tasks = gym.make(env_id, **env_kwargs).unwrapped.tasks()
        options = dict(tasks[5].options) if tasks else None
        limit = gym.spec(env_id).max_episode_steps
        expected, actions = in_process_episode(env_id, 3, options, ["wait"] * limit, env_kwargs)
        got = remote_episode(env, 3, actions, options)
        assert got == expected and got[-1][3] and not got[-1][2]
        assert env.unwrapped.state()["step_count"] == limit
        env.close()


def test_the_agent_wrappers_see_the_same_episode_remotely(server):
    from wrappers import HistoryPrompt, ParseAction, RecordTransitions, WMReplay

    runs = []
    for env in (gym.make("PaW/Shelf-v0"), gym.make("PaW/Remote-v0", url=server.url)):
        replay = WMReplay(None)
        env = RecordTransitions(HistoryPrompt(ParseAction(env), template="webshop"), replay)
        prompt, info = env.reset(seed=0)
        target = info["admissible_actions"][1]
        steps = [env.step(text) for text in (f"<think>x</think><action>{target}</action>",
                                             "no tags at all", "<action>pay</action>")]
        env.close()
        records = [(t["h"], t["a"], t["o_next"], t["reward"], t["task_id"]) for t in replay]
        runs.append(([prompt, *steps], records))
    assert runs[0] == runs[1] and len(runs[0][1]) == 3


def test_two_concurrent_clients_have_independent_sessions(server):
    expected = {seed: in_process_episode("PaW/Shelf-v0", seed) for seed in (1, 2)}
    results, errors = {}, []

    def play(seed: int) -> None:
        try:
            env = RemoteEnv(server.url)
            steps, actions = expected[seed]
            results[seed] = remote_episode(env, seed, actions)
            results[seed, "episode"] = env.state()["episode_id"]
            env.close()
        except Exception as error:  # noqa: BLE001 - reported by the assertion below
            errors.append(error)

    threads = [threading.Thread(target=play, args=(seed,)) for seed in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    assert results[1] == expected[1][0] and results[2] == expected[2][0]
    assert results[1, "episode"] != results[2, "episode"]
    # Interleaved on one thread too: a step in one session leaves the other's state alone.
    a, b = RemoteEnv(server.url), RemoteEnv(server.url)
    (a_steps, a_actions), (b_steps, b_actions) = expected[1], expected[2]
    assert a.reset(seed=1) == a_steps[0] and b.reset(seed=2) == b_steps[0]
    assert a.step(a_actions[0]) == a_steps[1]
    assert b.step(b_actions[0]) == b_steps[1]
    assert a.state()["step_count"] == 1 and b.state()["step_count"] == 1
    a.close()
    b.close()


def test_a_client_beyond_max_sessions_is_refused_clearly():
    with EnvServer("PaW/Shelf-v0", port=0, limits=ServerLimits(max_sessions=2)) as server:
        first, second = RemoteEnv(server.url), RemoteEnv(server.url)
        with pytest.raises(RemoteEnvError, match=r"server full: 2 of 2 sessions in use "
                                                 r"\(serve-env --max_sessions 2\)") as refused:
            RemoteEnv(server.url)
        assert refused.value.code == "CAPACITY_REACHED"
        assert first.reset(seed=0)[0]  # the sessions it holds go on
        second.close()
        third = RemoteEnv(server.url)  # the place second freed
        assert third.reset(seed=0) == first.reset(seed=0)
        first.close()
        third.close()
        assert server.session_count == 0


def raw_session(server: EnvServer):
    return connect(server.ws_url, proxy=None)


def ask(ws, message) -> dict:
    ws.send(message if isinstance(message, (str, bytes)) else json.dumps(message))
    return json.loads(ws.recv(timeout=10))


@pytest.mark.parametrize("message, code, text", [
    ("{not json", "INVALID_JSON", "not valid JSON"),
    (b'{"type": "state"}', "INVALID_JSON", "text frame"),
    ([1, 2], "VALIDATION_ERROR", "a request is a JSON object"),
    ({"type": "jump"}, "UNKNOWN_TYPE", "unknown request type 'jump'; the types are reset, step"),
    ({"type": "step", "data": {"action": "take red mug"}}, "EXECUTION_ERROR", "step before reset"),
    ({"type": "step", "data": {"action": 42}}, "VALIDATION_ERROR", "action must be a string"),
    ({"type": "step", "data": {"act": "pay"}}, "VALIDATION_ERROR", 'step data is {"action"'),
    ({"type": "reset", "data": {"seed": -1}}, "VALIDATION_ERROR", "non-negative integer"),
    ({"type": "reset", "data": {"seed": True}}, "VALIDATION_ERROR", "non-negative integer"),
    ({"type": "reset", "data": {"seeds": 1}}, "VALIDATION_ERROR", "any of seed, options"),
    ({"type": "reset", "data": {"options": [1]}}, "VALIDATION_ERROR", "options must be an object"),
    ({"type": "reset", "data": {"options": {"target": "gold mug"}}}, "EXECUTION_ERROR",
     "reset failed: ValueError: options['target']='gold mug' is not an item"),
])
def test_a_bad_request_gets_one_clear_error_and_the_session_goes_on(server, message, code, text):
    with raw_session(server) as ws:
        answer = ask(ws, message)
        assert answer["type"] == "error" and answer["data"]["code"] == code
        assert text in answer["data"]["message"]
        answer = ask(ws, {"type": "reset", "data": {"seed": 0}})
        assert answer["type"] == "observation"
        assert answer["data"]["observation"]["text"] == gym.make("PaW/Shelf-v0").reset(seed=0)[0]


def test_wire_format_is_openenvs(server):
    with raw_session(server) as ws:
        answer = ask(ws, {"type": "reset", "data": {"seed": 0, "episode_id": "ep-1"}})
        assert answer["type"] == "observation"
        assert set(answer["data"]) == {"observation", "reward", "done"}
        assert answer["data"]["reward"] is None and answer["data"]["done"] is False
        assert set(answer["data"]["observation"]) == {"text", "info", "terminated", "truncated",
                                                      "metadata"}
        action = answer["data"]["observation"]["info"]["admissible_actions"][0]
        answer = ask(ws, {"type": "step", "data": {"action": action, "metadata": {}}})
        assert answer["data"]["reward"] == 0.0
        assert ask(ws, {"type": "state"}) == {"type": "state", "data": {
            "episode_id": "ep-1", "step_count": 1, "env_id": "PaW/Shelf-v0", "done": False}}


def test_oversized_request_closes_only_its_own_session():
    limits = ServerLimits(max_message_bytes=4096)
    with EnvServer("PaW/Shelf-v0", port=0, limits=limits) as server:
        other = RemoteEnv(server.url)
        with raw_session(server) as ws:
            ws.send(json.dumps({"type": "step", "data": {"action": "x" * 5000}}))
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=10)
            assert closed.value.rcvd.code == 1009  # message too big
        assert other.reset(seed=0)[0]
        other.close()


def test_a_connection_without_a_whole_request_is_cut_off(monkeypatch):
    import paw_gym.remote.server as server_module

    monkeypatch.setattr(server_module, "REQUEST_TIMEOUT", 0.5)
    with EnvServer("PaW/Shelf-v0", port=0) as server:
        for data in (b"", b"GET /health HTTP/1.1\r\nHost: x\r\n"):  # nothing; half a head
            with socket.create_connection((server.host, server.port), timeout=10) as raw:
                raw.sendall(data)
                started = time.monotonic()
                assert raw.recv(100) == b"" and time.monotonic() - started < 5
        with socket.create_connection((server.host, server.port), timeout=10) as raw:
            raw.sendall(b"POST /reset HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{}")
            assert raw.recv(100).startswith(b"HTTP/1.1 408 ")  # a body that does not come
        env = RemoteEnv(server.url)  # the server goes on
        assert env.reset(seed=0)[0]
        env.close()


def test_step_before_reset_and_an_ended_session_raise_clear_errors():
    with EnvServer("PaW/Shelf-v0", port=0, limits=ServerLimits(idle_timeout=1.5)) as server:
        env = RemoteEnv(server.url)
        with pytest.raises(RemoteEnvError, match="step before reset"):
            env.step("take red mug")
        env.reset(seed=0)
        time.sleep(2.5)
        with pytest.raises(RemoteEnvError, match=r"session expired: no request for 1.5 s "
                                                 r"\(serve-env --idle_timeout\)"):
            env.step("take red mug")
        with pytest.raises(RemoteEnvError, match="has ended: session expired; make a new"):
            env.reset(seed=0)
        assert server.session_count == 0  # the expired session's env is closed
        env.close()
        env.close()  # closing twice is allowed
        with pytest.raises(RemoteEnvError, match="closed RemoteEnv"):
            env.reset()


def test_remote_env_says_when_no_server_answers():
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(RemoteEnvError, match=r"no env server answers at http://127.0.0.1:\d+ "
                                              r".*paw-gym serve-env"):
        RemoteEnv(f"http://127.0.0.1:{port}")
    with pytest.raises(ValueError, match="give the server's base URL"):
        RemoteEnv("ftp://127.0.0.1:8001")


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), 0, -1.0, "5", True])
def test_a_timeout_that_is_no_positive_finite_number_is_refused(timeout):
    with pytest.raises(ValueError, match=f"timeout must be a positive number of seconds, got "
                                         f"{re.escape(repr(timeout))}"):
        RemoteEnv("http://127.0.0.1:8001", timeout=timeout)


def test_serve_env_says_when_it_serves_other_machines_without_authentication():
    from training.commands.serve_env import is_loopback

    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("::") and not is_loopback("10.1.2.3")
    command = [sys.executable, "-m", "training.cli", "serve-env", "--env", "PaW/Shelf-v0",
               "--host", "0.0.0.0", "--port", "0"]
    process = subprocess.Popen(command, cwd=REPO, stderr=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True)
    try:
        warning = process.stderr.readline()
    finally:
        process.kill()
        process.communicate(timeout=30)
    assert warning.startswith("paw-gym: warning: 0.0.0.0 is reachable from other machines and "
                              "the server has no authentication")


def test_http_routes_describe_the_server(server):
    def get(path: str):
        try:
            with urllib.request.urlopen(server.url + path, timeout=10) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    assert get("/health") == (200, {"status": "healthy"})
    status, metadata = get("/metadata")
    assert metadata["name"] == "PaW/Shelf-v0" and "OpenEnv 0.10.0" in metadata["version"]
    status, schema = get("/schema")
    assert schema["action"]["properties"]["action"]["maxLength"] == paw_gym.MAX_ACTION_LENGTH
    assert get("/state") == (200, {"episode_id": None, "step_count": 0,
                                   "env_id": "PaW/Shelf-v0", "done": False})
    status, body = get("/reset")  # POST only; tests/test_openenv_validate.py tries the rest
    assert status == 405 and body["detail"] == "/reset takes POST, not GET"


@pytest.mark.heavy
def test_openenvs_own_client_steps_the_server(server):
    openenv_core = pytest.importorskip("openenv.core")
    expected, actions = in_process_episode("PaW/Shelf-v0", 5)
    with openenv_core.GenericEnvClient(base_url=server.url).sync() as client:
        result = client.reset(seed=5)
        assert (result.observation["text"], result.observation["info"]) == expected[0]
        for action, (observation, reward, terminated, truncated, info) in zip(actions,
                                                                              expected[1:]):
            result = client.step({"action": action})
            assert result.observation["text"] == observation and result.reward == reward
            assert result.observation["info"] == info
            assert result.done == (terminated or truncated)
        assert client.state()["step_count"] == len(actions)
        with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
            client.step({"action": ["not", "text"]})
    with EnvServer("PaW/Shelf-v0", port=0, limits=ServerLimits(max_sessions=1)) as full:
        holder = RemoteEnv(full.url)
        with pytest.raises(RuntimeError, match=r"server full.*CAPACITY_REACHED"):
            with openenv_core.GenericEnvClient(base_url=full.url).sync() as client:
                client.reset()
        holder.close()


def test_cli_bind_and_argument_errors_are_one_line(server, capsys):
    assert main(["serve-env", "--env", "PaW/Shelf-v0", "--port", str(server.port)]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == (f"paw-gym serve-env: error: cannot serve on --host 127.0.0.1 --port "
                   f"{server.port}: Address already in use")
    assert main(["serve-env", "--env", "PaW/Shelf-v0", "--port", "70000"]) == 2
    assert "port=70000 is invalid; expected a TCP port in [0, 65,535]" in capsys.readouterr().err
    assert main(["serve-env", "--env", "PaW/Shelf-v0", "--max_sessions", "0"]) == 2
    assert "max_sessions=0 is invalid; expected an integer in [1, 10,000]" in \
        capsys.readouterr().err
    assert main(["serve-env", "--env", "PaW/Shelff-v0", "--port", "0"]) == 2
    assert "did you mean PaW/Shelf-v0?" in capsys.readouterr().err
    assert main(["serve-env", "--env", "FrozenLake-v1", "--port", "0"]) == 2
    assert "'FrozenLake-v1' is one of Gymnasium's own envs, whose observations are not text" \
        in capsys.readouterr().err
    assert main(["serve-env", "--env", "PaW/Shelf-v0", "--env_kwargs", "split=nope"]) == 2
    assert ("env_kwargs split='nope' is invalid for PaW/Shelf-v0; expected one of train | test"
            " | all") in capsys.readouterr().err
    assert main(["serve-env", "--env", "PaW/Shelf-v0", "--env_kwargs", "shelf_sizes=abc"]) == 2
    assert "shelf_sizes='abc' is invalid" in capsys.readouterr().err


def test_cli_serves_until_interrupted(tmp_path):
    command = [sys.executable, "-m", "training.cli", "serve-env", "--env", "PaW/Shelf-v0",
               "--env_kwargs", "split=test", "--port", "0"]
    # SIGINT as a terminal's Ctrl-C sends it; a test run in the background (`pytest &`) would
    # pass its ignored SIGINT on to the server, so the server gets the default disposition.
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        url = next(found.group(1) for line in process.stdout if (found := re.search(
            r"serving PaW/Shelf-v0 at (http://127\.0\.0\.1:\d+)", line)))
        env = gym.make("PaW/Remote-v0", url=url)
        expected, actions = in_process_episode("PaW/Shelf-v0", 0, env_kwargs={"split": "test"})
        assert remote_episode(env, 0, actions) == expected
        env.close()
    finally:
        process.send_signal(signal.SIGINT)
        output = process.communicate(timeout=30)[0]
    assert process.returncode == 130 and "interrupted" in output


def test_remote_is_registered_but_not_listed_as_a_text_env():
    assert "PaW/Remote-v0" in gym.registry
    assert "PaW/Remote-v0" not in paw_gym.list_text_envs()


def test_docs_example_runs(capsys):
    docs = (REPO / "docs" / "remote_envs.md").read_text(encoding="utf-8")
    start = docs.index("<!-- remote-env-example")
    code = re.search(r"```python\n(.*?)```", docs[start:], re.DOTALL).group(1)
    assert len(code.strip().splitlines()) <= 5
    exec(compile(code, "docs/remote_envs.md", "exec"), {"__name__": "docs_example"})
    assert "Task: buy the" in capsys.readouterr().out
