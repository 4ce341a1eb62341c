"""WebShop speed: search, search + results page, reset, catalog load (1k and 100k products).

Anchors measured with the original engine (pyserini/Lucene BM25) on the real 1k catalog:
1.6 ms p50 per ``search(q, 50)``; 4.4 ms p50 for WebShop's whole search path (it loads every
hit's stored JSON) at 1k, 3.7 ms at 100k. Goals: search + results page ≤ 0.5 ms p50 at 100k,
reset < 1 ms, catalog load at 100k < 10 s with the on-disk index cache.

Usage::

    python -m benchmarks.webshop_speed                 # 1k (real if present) + 100k embedded
    python -m benchmarks.webshop_speed --sizes 1000 --repeats 3
    python -m benchmarks.webshop_speed --bm25s         # also time bm25s.retrieve (A/B)

Queries are the product phrases of the test goals' instructions (what an agent types).
Timings alternate the measured operations and report medians over all calls: wall-clock
time, and for the search + results page also the thread's CPU time, which is the fairer
figure on a machine shared with other jobs (``uptime`` load above the core count).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from paw_gym.webshop.env import WebShopEnv, load_world
from paw_gym.webshop.expert import instruction_phrase

REAL_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "webshop"
ANCHOR_SEARCH_MS = 1.6
ANCHOR_PATH_MS = {1000: 4.4, 100_000: 3.7}
GOAL_PATH_MS = 0.5


def ms(seconds: list[float]) -> float:
    return 1000.0 * statistics.median(seconds)


def time_env(env: WebShopEnv, repeats: int, use_bm25s: bool) -> dict[str, float]:
    queries = [instruction_phrase(g) for g in env.goals[:200]]
    search_t, path_t, reset_t, bm25s_t, path_cpu = [], [], [], [], []
    retriever = tokenizer = None
    if use_bm25s:
        import bm25s
        import Stemmer
        stemmer = Stemmer.Stemmer("porter")
        tokenizer = lambda texts: bm25s.tokenize(texts, stopwords="en", stemmer=stemmer,  # noqa: E731
                                                 show_progress=False)
        retriever = bm25s.BM25(method="lucene", k1=0.9, b=0.4)
        retriever.index(tokenizer([p.index_text() for p in env.catalog.products]),
                        show_progress=False)
    for _ in range(repeats):
        for i, query in enumerate(queries):
            t0 = time.perf_counter()
            env.reset(options={"goal_index": i})
            t1 = time.perf_counter()
            c1 = time.thread_time()
            env.step(f"search[{query}]")
            c2 = time.thread_time()
            t2 = time.perf_counter()
            path_cpu.append(c2 - c1)
            env.catalog.search(query)
            t3 = time.perf_counter()
            reset_t.append(t1 - t0)
            path_t.append(t2 - t1)
            search_t.append(t3 - t2)
            if retriever is not None:
                t4 = time.perf_counter()
                retriever.retrieve(tokenizer([query]), k=50, show_progress=False,
                                   n_threads=1)
                bm25s_t.append(time.perf_counter() - t4)
    out = {"search_ms": ms(search_t), "search_path_ms": ms(path_t), "reset_ms": ms(reset_t),
           "search_path_cpu_ms": ms(path_cpu)}
    if bm25s_t:
        out["bm25s_retrieve_ms"] = ms(bm25s_t)
    return out


def time_load(n: int) -> dict[str, float]:
    """Env construction at n products: cold (generate + index) and warm (both from disk)."""
    with tempfile.TemporaryDirectory() as cache:
        load_world.cache_clear()
        t0 = time.perf_counter()
        WebShopEnv(split="test", num_products=n, cache_dir=cache)
        t1 = time.perf_counter()
        load_world.cache_clear()
        WebShopEnv(split="test", num_products=n, cache_dir=cache)
        t2 = time.perf_counter()
    load_world.cache_clear()
    return {"cold_s": t1 - t0, "warm_s": t2 - t1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 100_000])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--bm25s", action="store_true", help="also time bm25s.retrieve")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)

    setups = []
    if REAL_DATA.is_dir() and 1000 in args.sizes:
        setups.append(("real 1k", dict(data_dir=REAL_DATA, num_products=1000)))
    setups += [(f"embedded {n // 1000}k", dict(num_products=n)) for n in args.sizes]
    for name, kwargs in setups:
        env = WebShopEnv(split="test", cache_dir=False if kwargs["num_products"] <= 1000
                         else None, **kwargs)
        result = time_env(env, args.repeats, args.bm25s)
        n = kwargs["num_products"]
        anchor = ANCHOR_PATH_MS.get(n)
        line = (f"{name:>13}: search(q,50) p50 {result['search_ms']:.3f} ms "
                f"(anchor {ANCHOR_SEARCH_MS} ms, {ANCHOR_SEARCH_MS / result['search_ms']:.1f}x)"
                f" | search+results page p50 {result['search_path_ms']:.3f} ms")
        if anchor:
            line += f" (anchor {anchor} ms, {anchor / result['search_path_ms']:.1f}x faster)"
        line += f" [CPU time {result['search_path_cpu_ms']:.3f} ms]"
        if n >= 100_000:
            line += f" goal <= {GOAL_PATH_MS} ms: {result['search_path_ms'] <= GOAL_PATH_MS}"
        line += f" | reset p50 {result['reset_ms']:.3f} ms"
        if "bm25s_retrieve_ms" in result:
            line += f" | bm25s.retrieve p50 {result['bm25s_retrieve_ms']:.3f} ms"
        print(line, flush=True)
    for n in args.sizes:
        if n >= 10_000:
            load = time_load(n)
            print(f"env load {n // 1000}k: cold (generate + build index) {load['cold_s']:.2f} s,"
                  f" warm (catalog + index from the disk cache) {load['warm_s']:.2f} s "
                  f"(goal < 10 s)", flush=True)


if __name__ == "__main__":
    main()
