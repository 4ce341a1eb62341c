"""The /retrieve HTTP server, its client, and env parity between in-process and HTTP retrieval."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from paw_gym.searchqa.bm25 import BM25Retriever
from paw_gym.searchqa.client import HTTPRetriever, RetrievalError, retrieve_url
from paw_gym.searchqa.env import SearchQAEnv
from paw_gym.searchqa.kb import KBConfig, build_kb
from paw_gym.searchqa.server import RetrievalServer, ServerLimits


@pytest.fixture(scope="module")
def kb():
    return build_kb(KBConfig())


@pytest.fixture(scope="module")
def retriever(kb):
    return BM25Retriever(kb.documents)


@pytest.fixture(scope="module")
def server(retriever):
    with RetrievalServer(retriever, port=0, limits=ServerLimits(max_body_bytes=4096, max_queries=8)) as running:
        yield running


def post(url: str, body: bytes, headers: dict | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_server_binds_loopback_and_answers_search_r1_format(server, retriever):
    assert server.host == "127.0.0.1" and server.url.endswith("/retrieve")
    queries = ["Rekist Airlines founder", "Maltis Belel", "zz"]
    status, payload = post(server.url, json.dumps({"queries": queries, "topk": 2, "return_scores": True}).encode())
    assert status == 200 and len(payload["result"]) == 3
    expected = retriever.search(queries, 2)
    for row, hits in zip(payload["result"], expected):
        assert [item["document"] for item in row] == [h.document.to_json() for h in hits]
        assert [item["score"] for item in row] == pytest.approx([h.score for h in hits])
    status, payload = post(server.url, json.dumps({"queries": ["Maltis Belel"]}).encode())
    assert status == 200 and set(payload["result"][0][0]) == {"id", "contents"}  # no scores: bare docs
    assert len(payload["result"][0]) == 3  # default topk


def test_health_and_unknown_paths(server, kb):
    with urllib.request.urlopen(server.url.replace("/retrieve", "/health"), timeout=10) as response:
        assert json.loads(response.read()) == {"status": "ok", "documents": len(kb.documents)}
    status, payload = post(server.url.replace("/retrieve", "/search"), b"{}")
    assert status == 404 and "/retrieve" in payload["error"]


@pytest.mark.parametrize("body, message", [
    (b"{not json", "not valid JSON"),
    (b"\xff\xfe", "not valid JSON"),
    (b"[1, 2]", "JSON object"),
    (b'{"query": "x"}', "'queries' must be a list of strings"),
    (b'{"queries": ["a", 3]}', "'queries' must be a list of strings"),
    (b'{"queries": ["a"], "topk": 0}', "'topk' must be an integer"),
    (b'{"queries": ["a"], "topk": true}', "'topk' must be an integer"),
    (b'{"queries": ["a"], "topk": 101}', "'topk' must be an integer"),
    (b'{"queries": ["a"], "return_scores": "yes"}', "'return_scores'"),
    (json.dumps({"queries": ["a"] * 9}).encode(), "at most 8"),
])
def test_malformed_requests_get_400_with_a_clear_message(server, body, message):
    status, payload = post(server.url, body)
    assert status == 400 and message in payload["error"]


def test_request_size_is_bounded_and_server_survives(server):
    status, payload = post(server.url, json.dumps({"queries": ["x" * 5000]}).encode())
    assert status == 413 and "exceeds the limit of 4096" in payload["error"]
    status, _ = post(server.url, b'{"queries": ["still alive"]}')
    assert status == 200


def test_client_matches_in_process_retriever_and_reports_errors(server, retriever):
    client = HTTPRetriever(server.url.removesuffix("/retrieve"))
    assert client.url == server.url
    queries = [f"who founded {name}" for name in ("Rekist Airlines", "Rekist Textiles")] + ["Maltis Belel"]
    remote, local = client.search(queries, 3), retriever.search(queries, 3)
    assert [[h.document for h in row] for row in remote] == [[h.document for h in row] for row in local]
    with pytest.raises(RetrievalError, match="answered 400"):
        client.search(["a"] * 9, 3)
    client.close()
    with pytest.raises(ValueError, match="must look like"):
        retrieve_url("localhost:8000")


def test_env_gives_identical_episodes_in_process_and_over_http(server):
    local = SearchQAEnv(split="test")
    remote = SearchQAEnv(split="test", retriever=server.url)
    for seed in range(25):
        assert local.reset(seed=seed) == remote.reset(seed=seed)
        for _ in range(4):
            action = local.expert_action()
            assert remote.expert_action() == action
            local_step, remote_step = local.step(action), remote.step(action)
            assert local_step == remote_step
            if local_step[2]:
                break
    # an unusual query, and an invalid turn, behave the same too
    for action in ("<search>the of a</search>", "<search>Ünïcödé ›™ query</search>", "no tags"):
        assert local.step(action) == remote.step(action)


def test_unreachable_server_is_a_clear_error(server):
    env = SearchQAEnv(retriever="http://127.0.0.1:9/retrieve")
    env.reset(seed=0)
    with pytest.raises(RetrievalError, match="unreachable"):
        env.step("<search>x</search>")


def test_serve_retriever_command(tmp_path, kb):
    """`paw-gym serve-retriever` on a corpus file: builds and saves the index, serves, stops."""
    from paw_gym.searchqa.data import save_corpus

    save_corpus(kb.documents[:200], tmp_path / "corpus.jsonl")
    command = [sys.executable, "-m", "training.cli", "serve-retriever", "--corpus",
               str(tmp_path / "corpus.jsonl"), "--index", str(tmp_path / "index"), "--port", "0"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = None
        for line in process.stdout:
            match = re.search(r"serving 200 passages at (http://127\.0\.0\.1:\d+/retrieve)", line)
            if match:
                url = match.group(1)
                break
        assert url, "server did not start"
        hits = HTTPRetriever(url).search([kb.documents[5].title], 1)[0]
        assert hits[0].document == kb.documents[5]
        assert (tmp_path / "index" / "paw_index.json").is_file()
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_serve_retriever_rejects_a_missing_corpus(tmp_path, capsys):
    from training.cli import main

    assert main(["serve-retriever", "--corpus", str(tmp_path / "nope.jsonl")]) == 2
    assert "is not a file" in capsys.readouterr().err


def test_concurrent_clients_get_their_own_answers(server, retriever, kb):
    from concurrent.futures import ThreadPoolExecutor

    titles = [d.title.strip('"') for d in kb.documents[:40]]

    def ask(offset: int) -> list[str]:
        client = HTTPRetriever(server.url)
        try:
            return [client.search([titles[i]], 1)[0][0].document.id for i in range(offset, 40, 4)]
        finally:
            client.close()

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(ask, range(4)))
    expected = [[retriever.search([titles[i]], 1)[0][0].document.id for i in range(offset, 40, 4)]
                for offset in range(4)]
    assert answers == expected
