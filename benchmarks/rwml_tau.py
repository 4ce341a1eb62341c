"""τ calibration of RWML's embedding reward (training/world_model/rewards.py) with all-MiniLM-L6-v2.

The reward is 1[cos(E(ŝ), E(s)) ≥ τ]. A good τ accepts right predictions and rejects wrong
ones. On real replays (recorded here with ``paw-gym play --agent expert|random --replay``):

* **right**: the real o_next s against the o_next of *another* record with the same (h, a)
  (an exact repeat of the transition; for a deterministic env the same text, so no paraphrase
  credit is assumed), or against itself where the replay has no repeat;
* **wrong**: s against the o_next of another step of the same episode, and against that of a
  step of another episode of the same task type (texts equal to s are not wrong and skipped).

Per env it prints the cosine quantiles of both, the share of wrong pairs that τ = 0.8 (the
paper's, with Qwen3-Embedding-8B), 0.9, 0.95 and 0.99 would reward, and the τ that separates
the two best (highest balanced accuracy; ties: the lowest such τ, the most lenient to
paraphrases). Writes ``benchmarks/results/rwml_tau.json``.

    python -m benchmarks.rwml_tau                 # ~3 minutes on 2 CPU cores
    python -m benchmarks.rwml_tau --episodes 10   # quicker
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
from training.world_model import EmbeddingReward  # noqa: E402
from wrappers import WMReplay  # noqa: E402

ENVS = ("PaW/Shelf-v0", "PaW/FrozenLake-v0", "PaW/Sokoban-v0", "PaW/WebShop-v0")
REPORTED_TAUS = (0.8, 0.9, 0.95, 0.99)
QUANTILES = (0.0, 0.05, 0.5, 0.95, 1.0)


def record(env_id: str, agent: str, episodes: int, folder: Path) -> None:
    subprocess.run([sys.executable, "-m", "training.cli", "play", "--env", env_id, "--agent",
                    agent, "--episodes", str(episodes), "--replay", str(folder)],
                   check=True, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def pairs(records: list[dict], rng: random.Random, max_pairs: int
          ) -> tuple[list[tuple[str, str]], list[tuple[str, str]], int]:
    """``(right, wrong, repeats)``: (s, other) text pairs, and how many right pairs come from a
    repeated (h, a) rather than s itself."""
    records = [r for r in records if r["o_next"]]
    by_transition: dict[tuple[str, str], list[int]] = {}
    by_episode: dict[str, list[int]] = {}
    by_type: dict[str, list[int]] = {}
    for i, r in enumerate(records):
        by_transition.setdefault((r["h"], r["a"]), []).append(i)
        by_episode.setdefault(r["episode_id"], []).append(i)
        by_type.setdefault(r["task_type"], []).append(i)
    right, wrong, repeats = [], [], 0
    for i in rng.sample(range(len(records)), min(max_pairs, len(records))):
        s = records[i]["o_next"]
        twins = [j for j in by_transition[(records[i]["h"], records[i]["a"])] if j != i]
        right.append((s, records[rng.choice(twins)]["o_next"] if twins else s))
        repeats += bool(twins)
        same_episode = [j for j in by_episode[records[i]["episode_id"]]
                        if records[j]["o_next"] != s]
        other_episode = [j for j in by_type[records[i]["task_type"]]
                         if records[j]["episode_id"] != records[i]["episode_id"]
                         and records[j]["o_next"] != s]
        for candidates in (same_episode, other_episode):
            if candidates:
                wrong.append((s, records[rng.choice(candidates)]["o_next"]))
    return right, wrong, repeats


def best_tau(right: np.ndarray, wrong: np.ndarray) -> tuple[float, float]:
    """(τ, balanced accuracy) over the candidate thresholds 0.50, 0.51, ..., 1.00."""
    best = (1.0, -1.0)
    for tau in np.round(np.arange(0.50, 1.0001, 0.01), 2):
        accuracy = ((right >= tau - 1e-6).mean() + (wrong < tau - 1e-6).mean()) / 2
        if accuracy > best[1] + 1e-12:
            best = (float(tau), float(accuracy))
    return best


def summary(right: np.ndarray, wrong: np.ndarray) -> dict:
    tau, accuracy = best_tau(right, wrong)
    return {"right_pairs": len(right), "wrong_pairs": len(wrong),
            "right_quantiles": [round(float(np.quantile(right, q)), 3) for q in QUANTILES],
            "wrong_quantiles": [round(float(np.quantile(wrong, q)), 3) for q in QUANTILES],
            "wrong_rewarded": {str(t): round(float((wrong >= t).mean()), 3)
                               for t in REPORTED_TAUS},
            "right_rewarded": {str(t): round(float((right >= t - 1e-6).mean()), 3)
                               for t in REPORTED_TAUS},
            "best_tau": tau, "balanced_accuracy": round(accuracy, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=40, help="episodes per env and agent")
    parser.add_argument("--max_pairs", type=int, default=600, help="anchor records per env")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "rwml_tau.json"))
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    embedding = EmbeddingReward()
    rng = random.Random(args.seed)
    results, pooled_right, pooled_wrong = {}, [], []
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for env_id in ENVS:
            records = []
            for agent in ("expert", "random"):
                folder = Path(tmp) / env_id.split("/")[1] / agent
                record(env_id, agent, args.episodes, folder)
                records += WMReplay.load(folder).records
            right, wrong, repeats = pairs(records, rng, args.max_pairs)
            right_cos = np.array(embedding.similarities(*zip(*right)))
            wrong_cos = np.array(embedding.similarities(*zip(*wrong)))
            pooled_right.append(right_cos)
            pooled_wrong.append(wrong_cos)
            results[env_id] = {"transitions": len(records), "right_from_repeats": repeats,
                               **summary(right_cos, wrong_cos)}
    results["all envs"] = summary(np.concatenate(pooled_right), np.concatenate(pooled_wrong))
    print(f"MiniLM cosines, right vs wrong next observations ({args.episodes} expert + "
          f"{args.episodes} random episodes per env; {time.time() - started:.0f} s)\n")
    print("| env | right min / 5 % / median | wrong median / 95 % / max | wrong rewarded at "
          "τ = 0.8 / 0.9 / 0.95 / 0.99 | best τ (bal. acc.) |")
    print("|---|---|---|---|---|")
    for env_id, r in results.items():
        rq, wq, wr = r["right_quantiles"], r["wrong_quantiles"], r["wrong_rewarded"]
        print(f"| {env_id} | {rq[0]:.3f} / {rq[1]:.3f} / {rq[2]:.3f} | "
              f"{wq[2]:.3f} / {wq[3]:.3f} / {wq[4]:.3f} | "
              + " / ".join(f"{100 * wr[str(t)]:.0f} %" for t in REPORTED_TAUS)
              + f" | {r['best_tau']:.2f} ({r['balanced_accuracy']:.3f}) |")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"episodes": args.episodes, "seed": args.seed,
                                          "results": results}, indent=2), encoding="utf-8")
    print(f"\nwritten: {args.out}")


if __name__ == "__main__":
    main()
