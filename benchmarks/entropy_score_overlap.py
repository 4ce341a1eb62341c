"""How much does the entropy score change PaW's selection? ``full`` vs ``sampled`` on real rollouts.

PaW keeps the top-α transitions by action entropy for the world-model loss. ``full`` ranks them
by the mean entropy of the full next-token distribution at the action tokens; ``sampled`` by
−mean q_i log q_i over the sampled tokens' probabilities (the paper's §3.1 formula read
literally). On one rollout (16 tasks × 8 samples, temperature 1.0) of each Shelf start of
``benchmarks/study_small.py``, this prints the overlap of the two top-α sets (|A ∩ B| / |A|;
both sets have ⌈α N⌉ members), their Jaccard index, and the Spearman correlation of the scores.

    python -m benchmarks.entropy_score_overlap        # -> results/entropy_score_overlap.json
"""

from __future__ import annotations

import json
from pathlib import Path


def overlap(start: str, alpha: float = 0.75) -> dict:
    import torch
    from scipy.stats import spearmanr

    from agents.hf_policy import HFPolicy
    from agents.rollout import rollout
    from training.presets import ENV, PROMPT, STARTS, build_start
    from training.rl.losses import sampled_token_entropy, select_by_entropy

    torch.set_num_threads(1)
    model = build_start(Path("runs/study_shelf") / f"start-{start}", STARTS[start])
    policy = HFPolicy(str(model), device="cpu", seed=0)
    trajectories = rollout(policy, ENV, 16, 8, temperature=1.0, max_new_tokens=24, seed=0,
                           task_seeds=list(range(16)), max_steps=6, split="train", **PROMPT)
    outputs = [t.output for trajectory in trajectories for t in trajectory.transitions
               if t.output.response_ids]
    full = torch.tensor([o.mean_entropy for o in outputs], dtype=torch.float64)
    sampled = torch.tensor([sampled_token_entropy(o.logprobs) for o in outputs],
                           dtype=torch.float64)
    a, b = select_by_entropy(full, alpha), select_by_entropy(sampled, alpha)
    both, either = int((a & b).sum()), int((a | b).sum())
    return {"start": start, "transitions": len(outputs), "alpha": alpha,
            "selected": int(a.sum()), "shared": both,
            "overlap": round(both / max(1, int(a.sum())), 3),
            "jaccard": round(both / max(1, either), 3),
            "spearman": round(float(spearmanr(full, sampled).statistic), 3)}


def main() -> int:
    rows = [overlap(start) for start in ("normal", "sparse")]
    out = Path(__file__).resolve().parent / "results" / "entropy_score_overlap.json"
    out.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    for row in rows:
        print(row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
