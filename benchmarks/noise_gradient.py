"""The paper's Appendix A.4 diagnostic on WebShop: how much of the world-model gradient each
loss puts on noisy next-observation tokens (ASIN codes, brand-like capitals).

Protocol (A.4, at tiny scale): 100 search-result steps (the action is ``search[...]``, the next
observation a results page) from held-out (``test`` split) expert episodes, serialised as in WM
training (chat(h) ⊕ a ⊕ <end of turn> ⊕ o_next); per next-observation token the target
probability p_i, teacher-forced; per loss the target-logit gradient magnitude (CE 1 − p,
MAE p(1 − p), CMAE 1[p ≤ ρ] p(1 − p), ρ = 0.2) summed over noisy tokens and normalised by the
sum over all scored tokens (``training.rl.diagnostics``). The paper scores Qwen2.5-1.5B-Instruct;
here the nano tiny model, twice: untrained (random weights, tokenizer trained on the env's
text) and after next-token pretraining on 300 train-split expert episodes (``training.warmstart.pretrain``)
— the model that has learnt the page layout is the one whose gradient allocation matters.
Runs on the embedded catalog and, when ``../shared/data/webshop`` exists, on WebShop's real
1,000-product catalog (whose brands are often written in capitals).

    python -m benchmarks.noise_gradient          # ~40 CPU minutes (two pretrainings)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks import common as C

REAL_WEBSHOP = C.REPO.parent / "shared" / "data" / "webshop"


def search_steps(replay: Path, out: Path, limit: int) -> Path:
    """A replay with the first ``limit`` search → results-page transitions of ``replay``."""
    from wrappers import WMReplay

    kept = WMReplay(out)
    count = 0
    for record in WMReplay.load(replay):
        if count < limit and "<action>search[" in str(record.get("a")) and record.get("o_next"):
            kept.append(record)
            count += 1
    kept.close()
    return out


def shares(model_dir: Path, replay: Path, rho: float) -> dict:
    """Noise shares of CE / MAE / CMAE over the next-observation tokens of ``replay``."""
    import numpy as np
    import torch

    from agents.hf_policy import HFPolicy
    from training.warmstart.pretrain import transcript_parts
    from training.rl.diagnostics import gradient_shares, noisy_token_mask

    policy = HFPolicy(str(model_dir), device="cpu")
    probabilities, noisy = [], []
    with torch.no_grad():
        for row in transcript_parts(policy, replay, 2048):
            start, obs_len = row.obs_start, row.obs_len
            logits = policy.model(torch.tensor([row.ids])).logits[0, start - 1:start - 1 + obs_len]
            targets = torch.tensor(row.ids[start:start + obs_len])
            probabilities += torch.softmax(logits.float(), -1).gather(
                1, targets[:, None])[:, 0].tolist()
            noisy += noisy_token_mask([policy.tokenizer.decode([t]) for t in targets.tolist()])
    result = gradient_shares(probabilities, noisy, rho)
    p, n = np.array(probabilities), np.array(noisy)
    result.update(tokens=int(n.size), noisy_token_frac=float(n.mean()),
                  mean_p_noisy=float(p[n].mean()) if n.any() else float("nan"),
                  mean_p_meaningful=float(p[~n].mean()))
    return result


def run_catalog(name: str, work: Path, steps: int, rho: float, limit: int,
                **env_kwargs) -> dict:
    from agents.tiny_model import build_tiny_model
    from training.warmstart.pretrain import PretrainConfig, run_pretrain
    from training.warmstart.sft import record_expert_demos
    from wrappers import WMReplay

    env_id = "PaW/WebShop-v0"
    train = record_expert_demos(env_id, 300, work / f"{name}-train", seed=0, epsilon=0.2,
                                max_steps=15, split="train", **env_kwargs)
    test = record_expert_demos(env_id, 150, work / f"{name}-test", seed=50_000, max_steps=15,
                               split="test", **env_kwargs)
    scored = search_steps(test, work / f"{name}-scored", limit)
    texts = [r[k] for r in WMReplay.load(train) for k in ("h", "a", "o_next")]
    init = build_tiny_model(texts, work / f"{name}-init", size="nano", seed=0)
    pretrained, _ = run_pretrain(PretrainConfig(
        model=str(init), replay=str(train), output_dir=str(work / f"{name}-pretrained"),
        steps=steps, lr=1e-3, batch_size=8, max_seq_len=2048, device="cpu", progress=False))
    scored_steps = len(WMReplay.load(scored))
    return {"catalog": name, "scored_steps": scored_steps, "pretrain_steps": steps,
            "untrained": shares(init, scored, rho), "pretrained": shares(pretrained, scored, rho)}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300, help="pretraining steps")
    parser.add_argument("--limit", type=int, default=100, help="search-result steps scored")
    parser.add_argument("--rho", type=float, default=0.2)
    parser.add_argument("--work", default="runs/noise_gradient")
    parser.add_argument("--out", default=str(C.RESULTS / "noise_gradient.json"))
    args = parser.parse_args(argv)
    C.set_threads(1)
    catalogs = [("embedded", {})]
    if REAL_WEBSHOP.is_dir():
        catalogs.append(("real-1000", {"data_dir": str(REAL_WEBSHOP)}))
    runs = [run_catalog(name, Path(args.work), args.steps, args.rho, args.limit, **kwargs)
            for name, kwargs in catalogs]
    print("| catalog | model | steps | tokens | noisy % | mean p noisy / meaningful | "
          "CE share | MAE share | CMAE share |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for run in runs:
        for model in ("untrained", "pretrained"):
            r = run[model]
            print(f"| {run['catalog']} | {model} | {run['scored_steps']} | {r['tokens']} | "
                  f"{100 * r['noisy_token_frac']:.1f} | {r['mean_p_noisy']:.3f} / "
                  f"{r['mean_p_meaningful']:.3f} | {100 * r['ce']:.1f} % | "
                  f"{100 * r['mae']:.1f} % | {100 * r['cmae']:.1f} % |")
    result = {"machine": C.machine(), "rho": args.rho, "runs": runs}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1), encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
