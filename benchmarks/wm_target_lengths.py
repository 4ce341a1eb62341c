"""How often would a cap of 512 tokens cut PaW's world-model target o_{t+1}, per env?

The paper states no cap on the WM target; ``TrainConfig.max_obs_tokens`` keeps one as an option
(default 512; the paper configs set none). This plays random and expert episodes through the
agent loop of each env (``rollout`` with ``RandomAgent`` / ``ExpertAgent``), tokenizes every next
observation and reports its length distribution and the share longer than 256 / 512 tokens.

Tokenizer: the hub models' tokenizers cannot be downloaded here, so the lengths use the
WordPiece tokenizer of the offline all-MiniLM-L6-v2 (a pretrained English tokenizer, shipped by
the ``[search]`` extra) as a stand-in; Qwen2.5's larger BPE vocabulary usually needs somewhat
fewer tokens for English text, so the shares are upper bounds for it.

    python -m benchmarks.wm_target_lengths                # ~2 min
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks import common as C

#: (label, env id, step limit, env kwargs)
ENVS = [("PaW/WebShop-v0", "PaW/WebShop-v0", 15, {}),
        ("PaW/ALFWorld-v0", "PaW/ALFWorld-v0", 50, {}),
        ("PaW/SearchQA-v0", "PaW/SearchQA-v0", 4, {}),
        ("PaW/Shelf-v0", "PaW/Shelf-v0", 6, {}),
        ("PaW/FrozenLake-v0", "PaW/FrozenLake-v0", 20, {}),
        ("PaW/Sokoban-v0", "PaW/Sokoban-v0", 30, {})]
#: WebShop's real 1,000-product catalog, when the shared data folder is there (see its README).
REAL_WEBSHOP = C.REPO.parent / "shared" / "data" / "webshop"
CAPS = (256, 512)


def lengths(env_id: str, episodes: int, max_steps: int, tokenizer, **env_kwargs) -> list[int]:
    """Token counts of every non-empty next observation of random and expert episodes."""
    from agents.baselines import ExpertAgent, RandomAgent
    from agents.rollout import rollout

    counts = []
    for index, agent in enumerate([RandomAgent(), ExpertAgent()]):
        trajectories = rollout(agent, env_id, episodes, 1, seed=index * episodes,
                               max_steps=max_steps, **env_kwargs)
        for trajectory in trajectories:
            counts += [len(tokenizer(t.next_observation, add_special_tokens=False)["input_ids"])
                       for t in trajectory.transitions if t.next_observation]
    return counts


def main(argv=None) -> dict:
    import numpy as np
    from transformers import AutoTokenizer

    from paw_gym.searchqa.dense import resolve_model

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=20, help="per agent and env")
    parser.add_argument("--out", default=str(C.RESULTS / "wm_target_lengths.json"))
    args = parser.parse_args(argv)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(None))
    tokenizer.model_max_length = 10**9  # count, never truncate
    result = {"tokenizer": "all-MiniLM-L6-v2 WordPiece", "episodes_per_agent": args.episodes,
              "envs": {}}
    print("| env | targets | mean | p50 | p99 | max | > 256 | > 512 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    envs = list(ENVS)
    if REAL_WEBSHOP.is_dir():
        envs.insert(1, ("PaW/WebShop-v0 (real 1,000-product catalog)", "PaW/WebShop-v0", 15,
                        {"data_dir": str(REAL_WEBSHOP)}))
    for label, env_id, max_steps, env_kwargs in envs:
        counts = np.array(lengths(env_id, args.episodes, max_steps, tokenizer, **env_kwargs))
        row = {"targets": int(counts.size), "mean": float(counts.mean()),
               "p50": float(np.percentile(counts, 50)), "p99": float(np.percentile(counts, 99)),
               "max": int(counts.max()),
               **{f"over_{cap}_pct": float(100 * (counts > cap).mean()) for cap in CAPS}}
        result["envs"][label] = row
        print(f"| {label} | {row['targets']} | {row['mean']:.0f} | {row['p50']:.0f} | "
              f"{row['p99']:.0f} | {row['max']} | {row['over_256_pct']:.1f} % | "
              f"{row['over_512_pct']:.1f} % |", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1), encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
