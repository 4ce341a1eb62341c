"""Solvability of the embedded SearchQA questions: the scripted oracle per retriever and hop count.

The oracle reads its answers out of what it retrieves (never the gold answer), so its success
rate measures whether the knowledge base + retriever make every question answerable within the
4-turn budget. A "question as query" row shows how often one search with the raw question
already contains a gold answer (high for 1-hop, low for 2-hop: the second hop needs its own
search).

    python -m benchmarks.searchqa_oracle                       # BM25 and dense (MiniLM, flat)
    python -m benchmarks.searchqa_oracle --retrievers bm25 --split all
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

from paw_gym.searchqa.env import SearchQAEnv
from paw_gym.searchqa.retriever import information_block
from paw_gym.searchqa.scoring import normalize_answer


def oracle_success(env: SearchQAEnv) -> tuple[Counter, Counter, Counter]:
    wins, total, turns = Counter(), Counter(), Counter()
    for index in range(len(env.examples)):
        env.reset(options={"index": index})
        for turn in range(1, 5):
            _, _, terminated, _, info = env.step(env.expert_action())
            if terminated:
                break
        hops = len(env.example.plan)
        wins[hops] += info["won"]
        total[hops] += 1
        turns[hops] += turn
    return wins, total, turns


def question_as_query(env: SearchQAEnv) -> Counter:
    found = Counter()
    results = env.retriever.search([e.question for e in env.examples], env.topk)
    for example, hits in zip(env.examples, results):
        block = normalize_answer(information_block(hits))
        found[len(example.plan)] += any(normalize_answer(a) in block for a in example.golden_answers)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--retrievers", nargs="+", default=["bm25", "dense"])
    parser.add_argument("--split", default="test", choices=("train", "test", "all"))
    parser.add_argument("--kb-seed", type=int, default=0)
    args = parser.parse_args()
    for name in args.retrievers:
        start = time.perf_counter()
        env = SearchQAEnv(split=args.split, retriever=name, kb_seed=args.kb_seed)
        build = time.perf_counter() - start
        wins, total, turns = oracle_success(env)
        found = question_as_query(env)
        n = sum(total.values())
        print(f"{name:<6} ({len(env.retriever)} passages, index {build:.1f} s, split {args.split}, {n} questions)")
        print(f"  oracle success: {sum(wins.values()) / n:.1%} overall | "
              + " | ".join(f"{h}-hop {wins[h] / total[h]:.1%} ({turns[h] / total[h]:.2f} turns)"
                           for h in sorted(total)))
        print("  one search with the question contains a gold answer: "
              + " | ".join(f"{h}-hop {found[h] / total[h]:.1%}" for h in sorted(total)))


if __name__ == "__main__":
    main()
