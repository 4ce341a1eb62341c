"""Retrieval speed for PaW/SearchQA-v0: index build, query latency, server throughput.

For corpora of 10k and 100k passages of the embedded knowledge base (``KBConfig.scale`` 17 and
170) it measures

* BM25 (bm25s): index build time; p50/p90 latency of one query; median time of a 64-query batch;
* dense (offline all-MiniLM-L6-v2 + faiss flat and HNSW): passage embedding throughput, index
  build time, query embedding time for 64 queries, and faiss search time for a 64-query batch
  (batch 1 too);
* the /retrieve server over loopback with BM25: queries/s with 1-query and 64-query requests.

Embedding 100k passages with MiniLM on a small CPU takes many minutes, so by default only
``--embed-limit`` real passages are embedded and the rest of the index is filled with blends of
two random real vectors plus a little noise (re-normalised): faiss' search cost depends on the
number and dimension of vectors and (for HNSW) on how they spread, not on what they encode. The output says when this happened; pass
``--embed-limit 0`` to embed every passage. Goals (issue 5): dense top-3 for a batch of 64 in
< 50 ms plus embedding time (HNSW < 5 ms); BM25 < 1 ms p50 at 100k passages.

    python -m benchmarks.searchqa_retrieval                  # 10k and 100k, ~3-5 min on 2 cores
    python -m benchmarks.searchqa_retrieval --sizes 10000 --skip-dense
"""

from __future__ import annotations

import os
import sys

# BLAS thread pools are sized when numpy loads, so --threads must reach them first. On a busy
# 2-core machine a 2-thread OpenBLAS turned a 0.5 ms single-query matmul into ~45 ms.
_THREADS = next((sys.argv[i + 1] for i, arg in enumerate(sys.argv[:-1]) if arg == "--threads"), "1")
for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, _THREADS)

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from paw_gym.searchqa.bm25 import BM25Retriever  # noqa: E402
from paw_gym.searchqa.client import HTTPRetriever  # noqa: E402
from paw_gym.searchqa.kb import KBConfig, build_kb  # noqa: E402
from paw_gym.searchqa.server import RetrievalServer  # noqa: E402

#: Passages of the embedded knowledge base at ``scale=1`` (scale = size / this).
PASSAGES_AT_SCALE_1 = 594


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - start


def latencies(fn, batches, repeat: int = 1) -> list[float]:
    out = []
    for batch in batches:
        for _ in range(repeat):
            out.append(timed(fn, batch)[1])
    return out


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def corpus(size: int):
    """Passages, 1,280 question queries and 300 entity-name queries (what the oracle sends)."""
    kb = build_kb(KBConfig(seed=0, scale=size / PASSAGES_AT_SCALE_1))
    examples = kb.questions("all")
    rng = np.random.default_rng(0)
    picked = [examples[i] for i in rng.choice(len(examples), 64 * 20, replace=False)]
    return kb.documents, [q.question for q in picked], [q.plan[0][0] for q in picked[:300]]


def bench_bm25(documents, queries, names, report):
    retriever, build = timed(BM25Retriever, documents)
    retriever.search(queries[:64], 3)  # warm-up
    report["bm25_build_s"] = build
    print(f"  BM25  build {build:.2f} s")
    for kind, texts in (("question", queries), ("name", names)):
        single = latencies(lambda q: retriever.search(q, 3), [[q] for q in texts[:300]])
        batch = latencies(lambda q: retriever.search(q, 3), [texts[i:i + 64] for i in range(0, len(texts) - 63, 64)])
        report.update({f"bm25_{kind}_p50_ms": 1e3 * statistics.median(single),
                       f"bm25_{kind}_p90_ms": 1e3 * float(np.percentile(single, 90)),
                       f"bm25_{kind}_batch64_ms": 1e3 * statistics.median(batch)})
        print(f"  BM25  {kind} queries: batch 1 p50 {ms(statistics.median(single))}, "
              f"p90 {ms(np.percentile(single, 90))} | batch 64: {ms(statistics.median(batch))}")
    return retriever


def bench_server(retriever, queries, report):
    with RetrievalServer(retriever, port=0) as server:
        client = HTTPRetriever(server.url)
        client.search(queries[:64], 3)
        for size in (1, 64):
            batches = [queries[i:i + size] for i in range(0, min(len(queries), 64 * 10 if size > 1 else 300), size)]
            _, seconds = timed(lambda: [client.search(b, 3) for b in batches])
            qps = sum(map(len, batches)) / seconds
            report[f"server_qps_batch{size}"] = qps
            print(f"  server (BM25, loopback) batch {size}: {qps:,.0f} queries/s")
        client.close()


def dense_vectors(encoder, documents, embed_limit: int) -> tuple[np.ndarray, int]:
    """Corpus vectors: real embeddings of the first ``embed_limit`` passages, then blends of them."""
    sample = documents if embed_limit <= 0 else documents[:embed_limit]
    vectors, embed_s = timed(encoder.embed, [d.contents for d in sample])
    print(f"  dense embedding: {len(sample) / embed_s:,.1f} passages/s "
          f"(all-MiniLM-L6-v2, {len(sample)} real passages)")
    if len(sample) < len(documents):
        # Blends of two random real vectors (+ a little noise): spread like real embeddings,
        # without the near-duplicate clusters that plain copies would make.
        rng = np.random.default_rng(0)
        extra = len(documents) - len(sample)
        first, second = rng.integers(len(sample), size=(2, extra))
        weight = rng.uniform(0.2, 0.8, size=(extra, 1)).astype(np.float32)
        blends = weight * vectors[first] + (1 - weight) * vectors[second]
        blends += rng.normal(0, 0.01, blends.shape).astype(np.float32)
        blends /= np.linalg.norm(blends, axis=1, keepdims=True)
        vectors = np.concatenate([vectors, blends])
        print(f"  (index filled to {len(documents):,} vectors with blends of the real ones)")
    return np.ascontiguousarray(vectors, dtype=np.float32), len(sample) / embed_s


def bench_dense(documents, queries, report, embed_limit: int, hnsw_m: int, ef_searches: list[int]):
    from paw_gym.searchqa.dense import DenseRetriever

    retriever = DenseRetriever(documents[:2])  # loads the encoder; its index is replaced below
    retriever.embed([d.contents for d in documents[:32]])  # warm-up
    vectors, report["embed_passages_per_s"] = dense_vectors(retriever, documents, embed_limit)
    batches = [queries[i:i + 64] for i in range(0, 64 * 5, 64)]
    query_vectors = [retriever.embed(batch) for batch in batches]
    embed_q = latencies(retriever.embed, batches)
    report["embed_64_queries_ms"] = 1e3 * statistics.median(embed_q)
    print(f"  embedding 64 queries: {ms(statistics.median(embed_q))}")
    retriever.documents = list(documents)

    def measure(name: str) -> list:
        batch = latencies(lambda v: retriever.search_vectors(v, 3), query_vectors, repeat=2)
        single = latencies(lambda v: retriever.search_vectors(v, 3), [query_vectors[0][i:i + 1] for i in range(64)])
        ids = [[h.document.id for h in row] for v in query_vectors for row in retriever.search_vectors(v, 3)]
        report.update({f"{name}_batch64_ms": 1e3 * statistics.median(batch),
                       f"{name}_batch1_p50_ms": 1e3 * statistics.median(single)})
        return ids, statistics.median(batch), statistics.median(single)

    retriever.index_type = "flat"
    retriever.index, build = timed(retriever.build_index, vectors)
    exact, batch, single = measure("flat")
    print(f"  flat  build {build:.2f} s | batch 64: {ms(batch)} | batch 1 p50: {ms(single)}"
          "  (+ query embedding)")
    # A/B of the two flat search paths, alternated batch by batch (same results, see tests).
    times: dict[str, list[float]] = {"numpy": [], "faiss": []}
    for vectors_64 in query_vectors:
        for backend in times:
            retriever.flat_search = backend
            times[backend].append(timed(retriever.search_vectors, vectors_64, 3)[1])
    retriever.flat_search = "auto"
    faiss_ms, numpy_ms = (1e3 * statistics.median(times[b]) for b in ("faiss", "numpy"))
    report.update(flat_faiss_batch64_ms=faiss_ms, flat_numpy_batch64_ms=numpy_ms)
    print(f"  flat batch 64, A/B: faiss.IndexFlatIP.search {faiss_ms:.1f} ms vs numpy chunked "
          f"matmul {numpy_ms:.1f} ms ({faiss_ms / numpy_ms:.1f}x)")
    retriever.index_type, retriever.hnsw_m = "hnsw", hnsw_m
    retriever.index, build = timed(retriever.build_index, vectors)
    report["hnsw_build_s"] = build
    print(f"  faiss hnsw build {build:.2f} s (M={hnsw_m}, efConstruction={retriever.ef_construction})")
    for ef in ef_searches:
        retriever.index.hnsw.efSearch = ef
        ids, batch, single = measure(f"hnsw_ef{ef}")
        recall = statistics.mean(len(set(a) & set(b)) / 3 for a, b in zip(ids, exact))
        report[f"hnsw_ef{ef}_recall_at_3"] = recall
        print(f"  faiss hnsw efSearch={ef:<3} batch 64: {ms(batch)} | batch 1 p50: {ms(single)} | "
              f"recall@3 vs flat {recall:.3f} | flat/hnsw {report['flat_batch64_ms'] / (1e3 * batch):.0f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--skip-dense", action="store_true")
    parser.add_argument("--embed-limit", type=int, default=500,
                        help="real passages to embed (0: all); the rest of the index repeats them")
    parser.add_argument("--threads", type=int, default=1, help="BLAS, torch and faiss threads")
    parser.add_argument("--hnsw-m", type=int, default=32)
    parser.add_argument("--ef-search", type=int, nargs="+", default=[16, 32, 64, 128])
    parser.add_argument("--out", default=None, help="also write the figures to this JSON file")
    args = parser.parse_args()

    import faiss

    faiss.omp_set_num_threads(args.threads)
    if not args.skip_dense:
        import torch

        torch.set_num_threads(args.threads)  # reproducible figures on a shared machine
    results = {}
    for size in args.sizes:
        documents, queries, names = corpus(size)
        print(f"\n{len(documents):,} passages ({args.threads} thread(s), load average "
              f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs); queries: embedded questions")
        report: dict = {"passages": len(documents)}
        retriever = bench_bm25(documents, queries, names, report)
        bench_server(retriever, queries, report)
        if not args.skip_dense:
            bench_dense(documents, queries, report, args.embed_limit, args.hnsw_m, args.ef_search)
        results[size] = report
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(results, handle, indent=2)


if __name__ == "__main__":
    main()
