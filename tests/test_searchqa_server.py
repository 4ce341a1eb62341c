"""The /retrieve HTTP server, its client, and env parity between in-process and HTTP retrieval."""

from __future__ import annotations

import http.client
import json
import re
import select
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from paw_gym.searchqa.bm25 import BM25Retriever
from paw_gym.searchqa.client import HTTPRetriever, RetrievalError, retrieve_url
from paw_gym.searchqa.env import SearchQAEnv
from paw_gym.searchqa.kb import KBConfig, build_kb
from paw_gym.searchqa.retriever import Retriever
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
    assert "corpus='" in (err := capsys.readouterr().err) and "nope.jsonl' does not exist" in err


def test_a_port_in_use_is_an_os_error_and_the_command_says_it_in_one_line(server, retriever,
                                                                          capsys):
    from training.cli import main

    with pytest.raises(OSError, match="in use"):  # not an AttributeError from cleanup
        RetrievalServer(retriever, port=server.port)
    assert main(["serve-retriever", "--port", str(server.port)]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == (f"paw-gym serve-retriever: error: cannot serve on --host 127.0.0.1 --port "
                   f"{server.port}: Address already in use")
    assert main(["serve-retriever", "--port", "70000"]) == 2
    assert "port=70000 is invalid; expected a TCP port in [0, 65,535]" in capsys.readouterr().err


def test_export_corpus_keeps_an_existing_file_unless_overwrite(tmp_path, capsys):
    from training.cli import main

    mine = tmp_path / "mine.jsonl"
    mine.write_text("a user's file\n")
    assert main(["serve-retriever", "--export_corpus", str(mine), "--port", "0"]) == 2
    assert "already exists; pass --overwrite true" in capsys.readouterr().err
    assert mine.read_text() == "a user's file\n"


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


# -- abuse: oversized answers, slow and silent clients, hostile numbers (issue: retriever hardening)
class WatchedRetriever(Retriever):
    """Counts the searches (a refusal must come before any) and holds each until ``gate`` opens."""

    def __init__(self, inner: Retriever):
        self.inner, self.searches = inner, 0
        self.gate, self.entered = threading.Event(), threading.Event()
        self.gate.set()

    def search(self, queries, topk=3):
        self.searches += 1
        self.entered.set()
        self.gate.wait(10)
        return self.inner.search(queries, topk)


def serving(retriever, **limits) -> RetrievalServer:
    return RetrievalServer(retriever, port=0, limits=ServerLimits(**limits))


def connect(server: RetrievalServer, *, receive_buffer: int | None = None) -> socket.socket:
    sock = socket.socket()
    if receive_buffer is not None:  # set before connecting, so the kernel does not grow it
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.settimeout(5)
    sock.connect((server.host, server.port))
    return sock


def raw_post(body: bytes, content_length: str | None = None) -> bytes:
    length = str(len(body)) if content_length is None else content_length
    head = f"POST /retrieve HTTP/1.1\r\nHost: test\r\nContent-Length: {length}\r\n\r\n"
    return head.encode("latin-1") + body


def answer(sock: socket.socket) -> tuple[int, dict]:
    response = http.client.HTTPResponse(sock)
    response.begin()
    return response.status, json.loads(response.read())


def closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(1 << 16) == b""
    except ConnectionResetError:
        return True


@pytest.fixture(scope="module")
def roomy(retriever):
    """Default limits: the 1 MiB body room that hostile payloads need."""
    with RetrievalServer(retriever, port=0) as running:
        yield running


@pytest.mark.parametrize("body, message", [
    (b'{"queries": ["a"], "topk": ' + b"9" * 5000 + b"}", "integer of more than 4300 digits"),
    (b'{"queries": ["a"], "topk": ' + b"9" * 4000 + b"}", "from 1 to 100, got 9999"),
    (b'{"queries": ' + b"[" * 200_000 + b"]" * 200_000 + b"}", "nests JSON arrays or objects too deeply"),
])
def test_hostile_numbers_and_nesting_get_400_not_500(roomy, body, message):
    status, payload = post(roomy.url, body)
    assert status == 400 and message in payload["error"]
    assert len(payload["error"]) < 200  # a 4,000-digit topk is not echoed back


@pytest.mark.parametrize("length, status, message", [
    ("\u00b2", 400, "Content-Length must be a number of bytes in the digits 0-9, got '\u00b2'"),
    ("-5", 400, "got '-5'"),
    ("9" * 5000, 413, "(5,000 characters) bytes exceeds the limit of 1048576"),
])
def test_malformed_content_length_gets_a_clear_answer(roomy, length, status, message):
    with connect(roomy) as sock:
        sock.sendall(raw_post(b'{"queries": ["a"]}', content_length=length))
        got_status, payload = answer(sock)
        assert (got_status, message in payload["error"]) == (status, True), payload
        assert closed_by_server(sock)  # the body was not read: it must not pass for a request
    assert post(roomy.url, b'{"queries": ["still alive"]}')[0] == 200


def test_queries_times_topk_and_answer_size_are_bounded_before_work(retriever):
    watched = WatchedRetriever(retriever)
    with serving(watched, max_results=20) as server:
        status, payload = post(server.url, json.dumps({"queries": ["a"] * 8, "topk": 3}).encode())
        assert status == 413 and watched.searches == 0
        assert "8 queries × topk 3 = 24 results in one request; at most 20" in payload["error"]
        assert post(server.url, json.dumps({"queries": ["a"] * 10, "topk": 2}).encode())[0] == 200
    with serving(retriever, max_response_bytes=2000) as server:
        status, payload = post(server.url, json.dumps({"queries": ["Maltis Belel"], "topk": 5}).encode())
        assert status == 413
        assert re.search(r"1 queries × topk 5 is [\d,]+ bytes; at most 2,000", payload["error"])


def test_default_limits_refuse_the_74_mb_request(roomy):
    """The reported request: 30 KB asking 1,024 queries × topk 100 (a 74 MB answer)."""
    body = json.dumps({"queries": ["who founded Rekist Airlines"] * 1024, "topk": 100}).encode()
    status, payload = post(roomy.url, body)
    assert status == 413 and "102,400 results in one request; at most 10,000" in payload["error"]


def test_body_shorter_than_content_length_times_out(retriever):
    with serving(retriever, io_timeout=0.5) as server, connect(server) as sock:
        start = time.monotonic()
        sock.sendall(raw_post(b'{"queries": ["a"]}', content_length="100"))
        status, payload = answer(sock)
        assert status == 408 and time.monotonic() - start < 3
        assert payload["error"] == "request body of 100 bytes (its Content-Length) not received within 0.5 s"
        with connect(server) as early:  # a client that gives up sending gets told what was missing
            early.sendall(raw_post(b'{"queries": ["a"]}', content_length="100"))
            early.shutdown(socket.SHUT_WR)
            status, payload = answer(early)
            assert status == 400 and "ended after 18 of the 100 bytes" in payload["error"]


def test_trickling_client_is_cut_off_after_io_timeout(retriever):
    """A byte every 0.1 s defeats a per-read timeout; the deadline covers the whole request."""
    with serving(retriever, io_timeout=0.5) as server, connect(server) as sock:
        sock.sendall(b"POST /retrieve HTTP/1.1\r\n")
        start, closed = time.monotonic(), False
        while not closed and time.monotonic() - start < 5:
            time.sleep(0.1)
            try:
                sock.sendall(b"X")
                sock.settimeout(0.001)
                closed = closed_by_server(sock)
            except (TimeoutError, BrokenPipeError, ConnectionResetError) as error:
                closed = not isinstance(error, TimeoutError)
        assert closed and 0.4 < time.monotonic() - start < 2


def test_client_that_never_reads_is_cut_off_after_io_timeout(retriever, kb):
    """Its 7 MB answer fills the socket buffers; the write gives up after io_timeout."""
    with serving(retriever, io_timeout=0.5, max_queries=100) as server, \
            connect(server, receive_buffer=4096) as silent:
        titles = [d.title for d in kb.documents[:100]]
        silent.sendall(raw_post(json.dumps({"queries": titles, "topk": 100}).encode()))
        # Not reading from the moment the server starts writing (computing the answer can take
        # over a second on a loaded machine) for twice its io_timeout.
        assert select.select([silent], [], [], 60)[0]
        time.sleep(1.0)
        response = http.client.HTTPResponse(silent)
        response.begin()
        assert response.status == 200
        with pytest.raises(http.client.IncompleteRead):
            response.read()
        assert post(server.url, b'{"queries": ["Maltis Belel"]}')[0] == 200


def test_half_sent_requests_make_room_for_new_clients(retriever):
    """Twenty half-sent requests on two workers: the server shuts them to serve a newcomer."""
    with serving(retriever, io_timeout=10, max_workers=2, max_pending=1) as server:
        threads_before = threading.active_count()
        half_sent = [connect(server) for _ in range(20)]
        for sock in half_sent:
            sock.sendall(b"POST /retrieve HTTP/1.1\r\nContent-Le")
        start = time.monotonic()
        assert post(server.url, b'{"queries": ["a"]}')[0] == 200
        # Each shut waits _SHUT_AFTER (0.1 s), two at a time: ~1 s here, not io_timeout.
        assert time.monotonic() - start < 5
        assert threading.active_count() - threads_before <= 2
        for sock in half_sent[:16]:
            sock.settimeout(2)
            assert closed_by_server(sock)
        for sock in half_sent:
            sock.close()


def test_half_sent_request_is_shut_before_an_idle_keep_alive_client(retriever):
    with serving(retriever, io_timeout=5, max_workers=2, max_pending=1) as server:
        keeper = http.client.HTTPConnection(server.host, server.port, timeout=5)
        keeper.request("POST", "/retrieve", b'{"queries": ["Maltis Belel"]}')
        assert keeper.getresponse().read()  # the keep-alive connection now idles in a worker
        with connect(server) as half_sent:
            half_sent.sendall(b"POST /retrieve HTTP/1.1\r\nContent-Le")
            time.sleep(0.3)  # both have waited on their clients longer than the keeper's wait
            assert post(server.url, b'{"queries": ["a"]}')[0] == 200
            assert closed_by_server(half_sent)
        keeper.request("POST", "/retrieve", b'{"queries": ["Maltis Belel"]}')
        assert keeper.getresponse().status == 200  # on the same connection
        keeper.close()


def test_busy_server_answers_503_only_when_every_worker_is_working(retriever):
    watched = WatchedRetriever(retriever)
    watched.gate.clear()
    with serving(watched, max_workers=1, max_pending=0) as server:
        first: list = []
        worker = threading.Thread(target=lambda: first.append(post(server.url, b'{"queries": ["a"]}')))
        worker.start()
        assert watched.entered.wait(5)
        with connect(server) as refused:
            status, payload = answer(refused)
        assert status == 503
        assert "all 1 workers are working and all 0 waiting places are taken" in payload["error"]
        watched.gate.set()
        worker.join(5)
        assert first[0][0] == 200 and post(server.url, b'{"queries": ["a"]}')[0] == 200


def test_waiting_client_gets_its_turn_from_a_keep_alive_one(retriever):
    """The one worker is working for a keep-alive client when another connects: the answer
    asks the keep-alive client to reconnect, so the other does not wait for it to idle out."""
    watched = WatchedRetriever(retriever)
    watched.gate.clear()
    with serving(watched, io_timeout=5, max_workers=1, max_pending=1) as server:
        keeper = http.client.HTTPConnection(server.host, server.port, timeout=5)
        keeper.request("POST", "/retrieve", b'{"queries": ["Maltis Belel"]}')
        assert watched.entered.wait(5)
        with connect(server) as waiting:
            waiting.sendall(raw_post(b'{"queries": ["Rekist Airlines"]}'))
            time.sleep(0.1)  # accepted and queued
            watched.gate.set()
            response = keeper.getresponse()
            response.read()
            assert response.status == 200 and response.getheader("Connection") == "close"
            start = time.monotonic()
            assert answer(waiting)[0] == 200 and time.monotonic() - start < 2
        keeper.close()


def test_close_does_not_wait_for_idle_keep_alive_clients(retriever):
    server = serving(retriever, io_timeout=30).start()
    client = HTTPRetriever(server.url)
    assert client.search(["Maltis Belel"], 1)  # its keep-alive connection now idles in a worker
    start = time.monotonic()
    server.close()
    assert time.monotonic() - start < 2
    client.close()


@pytest.mark.parametrize("limits, message", [
    (dict(default_topk=5, max_topk=3), "default_topk 5 exceeds max_topk 3"),
    (dict(io_timeout=0), "io_timeout must be a positive number of seconds, got 0"),
    (dict(max_workers=0), "max_workers must be an integer >= 1, got 0"),
    (dict(max_pending=-1), "max_pending must be an integer >= 0, got -1"),
])
def test_server_limits_are_checked(limits, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        ServerLimits(**limits)
