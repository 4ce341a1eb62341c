"""The /retrieve server under abuse: what normal clients get, and what the server process holds.

Starts ``RetrievalServer`` (BM25 over the embedded knowledge base, 594 passages, default
``ServerLimits``) in its own process on 127.0.0.1, attackers in a second process, and normal
clients in this one. Three phases of ``--seconds`` each:

* **normal**: ``--clients`` keep-alive clients send one-query, topk-3 requests back to back
  (what the env sends per search): requests/s, latency p50/p99, answers other than 200;
* **abuse**: the same while ``--slow-loris`` clients hold half-sent requests (one more header
  byte every second, reconnecting once a second when cut off or refused) and ``--non-reading``
  clients each open a connection every ``--non-reading-every`` seconds, ask for 100 queries ×
  topk 100 (≈ 7 MB) and never read nor close it;
* **flood**: the same with ``--flood`` slow-loris clients (1,500: the issue's figure), more than
  the server's workers plus waiting places.

Throughout, a probe opens a fresh connection every 0.25 s and sends one request (what a client
arriving during the phase gets), and the server's RSS, threads and open file descriptors are
read from ``/proc/PID`` every 0.25 s (peak and last value). After the flood, the time until a
fresh connection gets a 200 again. ``--server-source`` runs another ``server.py`` (e.g. the
previous one, ``git show HEAD:paw_gym/searchqa/server.py > /tmp/old_server.py``) for an A/B.

    python -m benchmarks.retriever_abuse            # ~80 s; writes results/retriever_abuse.json
    python -m benchmarks.retriever_abuse --server-source /tmp/old_server.py --out /tmp/old.json
"""

from __future__ import annotations

import argparse
import http.client
import importlib.util
import json
import multiprocessing
import os
import platform
import queue
import selectors
import signal
import socket
import statistics
import sys
import threading
import time
from collections import Counter
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
#: Sent by a slow-loris client before it starts trickling one header byte per second.
HALF_REQUEST = b"POST /retrieve HTTP/1.1\r\nHost: bench\r\nContent-Length: 40\r\nX-Pad: "
PROBE_BODY = json.dumps({"queries": ["Maltis Belel"]}).encode()


def kb_texts() -> tuple[list, list[str], list[str]]:
    """Passages, question texts (normal queries) and 100 titles (the non-reading request)."""
    from paw_gym.searchqa.kb import KBConfig, build_kb

    kb = build_kb(KBConfig())
    questions = [q.question for q in kb.questions("all")]
    return kb.documents, questions, [d.title for d in kb.documents[:100]]


def serve(server_source: str | None, ready: multiprocessing.Queue) -> None:
    """Child process: the server under test, until terminated."""
    from paw_gym.searchqa.bm25 import BM25Retriever

    if server_source:
        spec = importlib.util.spec_from_file_location("server_under_test", server_source)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up while it loads
        spec.loader.exec_module(module)
    else:
        from paw_gym.searchqa import server as module
    server = module.RetrievalServer(BM25Retriever(kb_texts()[0]), port=0)
    ready.put(server.port)
    # socketserver prints a traceback per broken connection, thousands under the flood; the
    # parent reports whether the server survived.
    sys.stderr = open(os.devnull, "w")
    server.serve_forever()


def post(body: bytes) -> bytes:
    head = f"POST /retrieve HTTP/1.1\r\nHost: bench\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


class SlowLoris:
    """``count`` half-sent requests on non-blocking sockets, one thread, one tick a second.

    Connects are non-blocking, so a server whose listen queue overflows delays them (SYN
    retries) without holding up the others.
    """

    def __init__(self, address: tuple[str, int], count: int):
        self.address, self.count = address, count
        self.selector = selectors.DefaultSelector()
        self.stats = {"opened": 0, "cut_off": 0, "refused_503": 0, "connect_failed": 0}

    def open(self) -> None:
        sock = socket.socket()
        sock.setblocking(False)
        sock.connect_ex(self.address)
        self.selector.register(sock, selectors.EVENT_WRITE, "connecting")

    def drop(self, sock: socket.socket, outcome: str) -> None:
        self.stats[outcome] += 1
        self.selector.unregister(sock)
        sock.close()

    def tick(self) -> None:
        """Finish connects, note answers and hang-ups, trickle one byte each, top up."""
        for key, _ in self.selector.select(timeout=0):
            sock = key.fileobj
            if key.data == "connecting":
                if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                    self.drop(sock, "connect_failed")
                    continue
                try:
                    sock.send(HALF_REQUEST)
                except OSError:
                    self.drop(sock, "cut_off")
                    continue
                self.selector.modify(sock, selectors.EVENT_READ, "open")
                self.stats["opened"] += 1
                continue
            try:  # readable: the server answered (503) or hung up
                answered = sock.recv(64).startswith(b"HTTP/1.1 503")
            except OSError:
                answered = False
            self.drop(sock, "refused_503" if answered else "cut_off")
        for key in list(self.selector.get_map().values()):
            if key.data == "open":
                try:
                    key.fileobj.send(b"a")
                except OSError:
                    self.drop(key.fileobj, "cut_off")
        for _ in range(self.count - len(self.selector.get_map())):
            self.open()

    def close(self) -> None:
        for key in list(self.selector.get_map().values()):
            self.selector.unregister(key.fileobj)
            key.fileobj.close()


def attack(port: int, slow_loris: int, non_reading: int, every: float, big_body: bytes,
           stop: multiprocessing.Event, report: multiprocessing.Queue) -> None:
    """Child process: slow-loris and non-reading clients until ``stop``."""
    loris = SlowLoris(("127.0.0.1", port), slow_loris)
    silent: list[socket.socket] = []
    next_silent = time.monotonic()
    while not stop.is_set():
        loris.tick()
        if non_reading and time.monotonic() >= next_silent:
            next_silent += every
            for _ in range(non_reading):
                sock = socket.socket()
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # fills up at once
                sock.settimeout(2)
                try:
                    sock.connect(("127.0.0.1", port))
                    sock.sendall(post(big_body))
                    silent.append(sock)
                except OSError:
                    sock.close()
        stop.wait(1.0)
    loris.close()
    for sock in silent:
        sock.close()
    report.put({**loris.stats, "non_reading_opened": len(silent)})


class Sampler(threading.Thread):
    """RSS, threads and open descriptors of process ``pid`` every 0.25 s."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.samples, self.running = pid, [], True

    def read(self) -> dict[str, float]:
        status = dict(line.split(":", 1) for line in
                      Path(f"/proc/{self.pid}/status").read_text().splitlines() if ":" in line)
        return {"rss_mib": int(status["VmRSS"].split()[0]) / 1024, "threads": int(status["Threads"]),
                "fds": len(os.listdir(f"/proc/{self.pid}/fd"))}

    def run(self) -> None:
        while self.running:
            self.samples.append(self.read())
            time.sleep(0.25)


def client(port: int, queries: list[str], offset: int, stop: threading.Event, out: dict) -> None:
    """Keep-alive requests back to back; latency of each 200, count of everything else."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    index = offset
    while not stop.is_set():
        body = json.dumps({"queries": [queries[index % len(queries)]], "topk": 3}).encode()
        index += 7
        start = time.perf_counter()
        try:
            connection.request("POST", "/retrieve", body, {"Content-Type": "application/json"})
            response = connection.getresponse()
            response.read()
        except (OSError, http.client.HTTPException) as error:
            out["errors"][type(error).__name__] += 1
            connection.close()  # the next request reconnects
            stop.wait(0.1)  # a refused client retries after a pause, not in a busy loop
            continue
        if response.status == 200:
            out["latencies"].append(time.perf_counter() - start)
        else:
            out["statuses"][str(response.status)] += 1
            stop.wait(0.1)
    connection.close()


def probe(port: int, body: bytes, timeout: float = 10.0) -> str:
    """One request on a fresh connection: its status, or the kind of failure."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("POST", "/retrieve", body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        response.read()
        return str(response.status)
    except TimeoutError:
        return "timeout"
    except (OSError, http.client.HTTPException) as error:
        return type(error).__name__
    finally:
        connection.close()


def prober(port: int, body: bytes, stop: threading.Event, out: dict) -> None:
    while not stop.is_set():
        out[probe(port, body)] += 1
        stop.wait(0.25)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def phase(name: str, port: int, pid: int, args, queries: list[str], big_body: bytes,
          slow_loris: int, non_reading: int) -> dict:
    attacker = None
    if slow_loris or non_reading:
        context = multiprocessing.get_context("spawn")
        attacker_stop, report = context.Event(), context.Queue()
        attacker = context.Process(target=attack, args=(port, slow_loris, non_reading,
                                                        args.non_reading_every, big_body,
                                                        attacker_stop, report))
        attacker.start()
        time.sleep(args.ramp)  # the attackers' connections are in place before measuring
    sampler = Sampler(pid)
    sampler.start()
    stop = threading.Event()
    outs = [{"latencies": [], "statuses": Counter(), "errors": Counter()}
            for _ in range(args.clients)]
    probes: Counter = Counter()
    threads = [threading.Thread(target=client, args=(port, queries, i, stop, out))
               for i, out in enumerate(outs)]
    threads.append(threading.Thread(target=prober, args=(port, PROBE_BODY, stop, probes)))
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    time.sleep(args.seconds)
    stop.set()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    sampler.running = False
    sampler.join()
    attack_stats = {}
    if attacker is not None:
        attacker_stop.set()
        attack_stats = report.get(timeout=60)
        attacker.join()
    latencies = [x for out in outs for x in out["latencies"]]
    statuses = sum((out["statuses"] for out in outs), Counter())
    errors = sum((out["errors"] for out in outs), Counter())
    samples = sampler.samples
    result = {
        "slow_loris": slow_loris, "non_reading": non_reading, "seconds": elapsed,
        "requests_ok": len(latencies), "requests_per_s": len(latencies) / elapsed,
        "p50_ms": 1e3 * statistics.median(latencies) if latencies else float("nan"),
        "p99_ms": 1e3 * percentile(latencies, 0.99),
        "max_ms": 1e3 * max(latencies, default=float("nan")),
        "other_statuses": dict(statuses), "client_errors": dict(errors),
        "probes": dict(probes), "attack": attack_stats,
        **{f"{key}_peak": max(s[key] for s in samples) for key in ("rss_mib", "threads", "fds")},
        **{f"{key}_last": samples[-1][key] for key in ("rss_mib", "threads", "fds")},
    }
    print(f"  {name}: {result['requests_per_s']:.0f} req/s, p50 {result['p50_ms']:.2f} ms, "
          f"p99 {result['p99_ms']:.2f} ms, other {result['other_statuses']}, errors "
          f"{result['client_errors']}, probes {result['probes']}, RSS peak {result['rss_mib_peak']:.0f} MiB, threads peak "
          f"{result['threads_peak']}, attack {attack_stats}", flush=True)
    return result


def recovery(port: int, limit: float = 30.0) -> float | None:
    """Seconds until a fresh connection gets a 200 (``None`` if not within ``limit``)."""
    start = time.perf_counter()
    while time.perf_counter() - start < limit:
        if probe(port, PROBE_BODY, timeout=limit) == "200":
            return time.perf_counter() - start
        time.sleep(0.1)
    return None


def table(result: dict) -> str:
    rows = ["| phase | slow-loris / non-reading clients | normal req/s | p50 ms | p99 ms | "
            "normal answers ≠ 200 (+ errors) | fresh-connection probes | server RSS peak / last "
            "MiB | threads peak / last | open fds peak |",
            "|---|---|---:|---:|---:|---|---|---:|---:|---:|"]
    for name, p in result["phases"].items():
        other = sum(p["other_statuses"].values())
        probes = ", ".join(f"{k}: {v}" for k, v in sorted(p["probes"].items()))
        errors = sum(p["client_errors"].values())
        rows.append(f"| {name} | {p['slow_loris']} / {p['non_reading']} | {p['requests_per_s']:.0f} | "
                    f"{p['p50_ms']:.2f} | {p['p99_ms']:.2f} | {other} (+{errors}) | "
                    f"{probes} | {p['rss_mib_peak']:.0f} / {p['rss_mib_last']:.0f} | "
                    f"{p['threads_peak']} / {p['threads_last']} | {p['fds_peak']} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="measured time per phase")
    parser.add_argument("--ramp", type=float, default=3.0,
                        help="seconds the attackers get to connect before a phase is measured")
    parser.add_argument("--clients", type=int, default=4, help="normal keep-alive clients")
    parser.add_argument("--slow-loris", type=int, default=30, help="half-sent requests (abuse phase)")
    parser.add_argument("--non-reading", type=int, default=10, help="clients that never read")
    parser.add_argument("--non-reading-every", type=float, default=5.0,
                        help="seconds between a non-reading client's new connections")
    parser.add_argument("--flood", type=int, default=1500, help="half-sent requests (flood phase)")
    parser.add_argument("--server-source", default=None, help="another server.py to measure")
    parser.add_argument("--out", default=str(RESULTS / "retriever_abuse.json"))
    args = parser.parse_args(argv)

    _, questions, titles = kb_texts()
    big_body = json.dumps({"queries": titles, "topk": 100}).encode()
    context = multiprocessing.get_context("spawn")
    ready = context.Queue()
    server = context.Process(target=serve, args=(args.server_source, ready), daemon=True)
    server.start()
    port = None
    while port is None and server.is_alive():
        try:
            port = ready.get(timeout=1)
        except queue.Empty:
            pass
    ready.close()
    if port is None:
        raise SystemExit(f"the server process exited with code {server.exitcode} before serving")
    print(f"server pid {server.pid} on 127.0.0.1:{port} ({args.server_source or 'paw_gym'}), "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs", flush=True)
    result = {"machine": {"date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
                          "cores": os.cpu_count(), "python": platform.python_version(),
                          "load_average_start": os.getloadavg()[0]},
              "server_source": args.server_source or "paw_gym/searchqa/server.py",
              "args": vars(args), "phases": {}}
    try:
        for name, slow_loris, non_reading in (("normal", 0, 0),
                                              ("abuse", args.slow_loris, args.non_reading),
                                              ("flood", args.flood, args.non_reading)):
            result["phases"][name] = phase(name, port, server.pid, args, questions, big_body,
                                           slow_loris, non_reading)
        result["recovery_after_flood_s"] = recovery(port)
        result["server_alive"] = server.is_alive()
    finally:
        # Ctrl-C rather than SIGTERM: the child then exits through its finalizers, which give
        # back the semaphores multiprocessing made for it.
        os.kill(server.pid, signal.SIGINT)
        server.join(timeout=10)
        if server.is_alive():
            server.terminate()
    result["machine"]["load_average_end"] = os.getloadavg()[0]
    print()
    print(table(result))
    recovered = result["recovery_after_flood_s"]
    print(f"\nafter the flood a fresh connection got 200 within "
          f"{'(not within 30 s)' if recovered is None else f'{recovered:.1f} s'}; "
          f"server alive: {result['server_alive']}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
