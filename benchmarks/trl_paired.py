"""Paired TRL run on PaW/Shelf-v0 (issue 30): TRL's ``GRPOTrainer`` on paw-gym episodes,
without (``grpo``) and with (``paw``) PaW's world-model term (:mod:`training.integrations.trl`).

Both variants of a seed start from the same *transcript* reading start (the study's nano model,
pretrained on 1000 noisy-expert episodes, ε = 0.5, each as one chat transcript: the form TRL
trains, since TRL's policy acts on the whole episode) and see the same tasks in the same order
(TRL shuffles the dataset with the seed). Per update: 8 training tasks × 8 episodes, learning
rate 3e-4 (constant), no KL, TRL's default loss (``dapo``) and group scaling, 16 updates: the
native study's Shelf setting. Held-out success: every one of the 48 ``test`` tasks once, at
temperature 0.4, played by a :class:`agents.TranscriptAgent` (the context the model trained
in), before and after. Results go to ``benchmarks/results/trl_shelf/<variant>__s<seed>.json``.

    python -m benchmarks.trl_paired --seeds 3          # resumable: finished runs are skipped
    python -m benchmarks.trl_paired --report
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from benchmarks.study_small import RESULTS, mean_ci
from training.presets import SHELF, STARTS, VAL_TEMPERATURE, build_start

RESULTS_DIR = RESULTS / "trl_shelf"
VARIANTS = ("grpo", "paw")
TASKS_PER_UPDATE, EPISODES_PER_TASK, UPDATES, LR = 8, 8, 16, 3e-4


def held_out_success(model, tokenizer=None) -> float:
    """% of Shelf's 48 held-out tasks won by a TranscriptAgent of ``model`` (T = 0.4)."""
    from agents import HFPolicy, TranscriptAgent
    from agents.transcript import TRANSCRIPT_TEMPLATE
    from training.evaluate import evaluate, plan_evaluation

    policy = HFPolicy(model, tokenizer, device="cpu")
    plan = plan_evaluation(SHELF.id, split="test", seed=0)
    result = evaluate(TranscriptAgent(policy), SHELF.id, plan, temperature=VAL_TEMPERATURE,
                      max_new_tokens=24, max_steps=SHELF.max_steps, seed=1,
                      template=TRANSCRIPT_TEMPLATE, history_length=0)
    return result.row().success


def run(variant: str, seed: int, work: Path) -> Path:
    """One paired run, written to :data:`RESULTS_DIR` (skipped when there)."""
    import numpy as np
    import torch

    from training.integrations.trl import EnvRollout, PaWGRPOConfig, PaWGRPOTrainer, task_dataset

    path = RESULTS_DIR / f"{variant}__s{seed}.json"
    if path.is_file():
        return path
    torch.set_num_threads(1)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    start = build_start(work / "start-normal", STARTS["normal"], rows="episode")
    clock = time.process_time()
    before = held_out_success(str(start))
    tasks = np.random.default_rng(seed).integers(0, 1_000_000, TASKS_PER_UPDATE * UPDATES)
    args = PaWGRPOConfig(
        output_dir=str(work / "runs" / f"{variant}__s{seed}"), paw=variant == "paw",
        num_generations=EPISODES_PER_TASK,
        per_device_train_batch_size=TASKS_PER_UPDATE * EPISODES_PER_TASK, max_steps=UPDATES,
        learning_rate=LR, lr_scheduler_type="constant", seed=seed, use_cpu=True,
        report_to=[], save_strategy="no", logging_steps=1, disable_tqdm=True, r_max=10.0)
    env = EnvRollout(SHELF.id, max_steps=SHELF.max_steps, max_new_tokens=24,
                     env_kwargs={"split": "train"})
    trainer = PaWGRPOTrainer(model=str(start), env=env, args=args,
                             train_dataset=task_dataset(SHELF.id, tasks.tolist(), split="train"))
    trainer.train()
    after = held_out_success(trainer.model, trainer.processing_class)
    curve = [{k: h[k] for k in ("step", "env/success", "reward", "paw/wm_loss", "paw/lambda")
              if k in h} for h in trainer.state.log_history if "env/success" in h]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"variant": variant, "seed": seed, "updates": UPDATES,
                                "before": before, "after": after, "curve": curve,
                                "cpu_s": round(time.process_time() - clock, 1)}, indent=1),
                    encoding="utf-8")
    return path


def report() -> str:
    """Markdown: held-out success before/after per variant and the paired difference."""
    runs = {v: {} for v in VARIANTS}
    for path in sorted(RESULTS_DIR.glob("*.json")):
        r = json.loads(path.read_text(encoding="utf-8"))
        runs[r["variant"]][r["seed"]] = r
    lines = ["| variant | seeds | held-out % before | after | gain (pp, 95 % CI) | CPU s / run |",
             "|---|---:|---:|---:|---:|---:|"]
    for variant, by_seed in runs.items():
        if not by_seed:
            continue
        rs = list(by_seed.values())
        gain, half = mean_ci([r["after"] - r["before"] for r in rs])
        lines.append(f"| {variant} | {len(rs)} | {mean_ci([r['before'] for r in rs])[0]:.1f} | "
                     f"{mean_ci([r['after'] for r in rs])[0]:.1f} | {gain:+.1f} ± {half:.1f} | "
                     f"{sum(r['cpu_s'] for r in rs) / len(rs):.0f} |")
    seeds = sorted(set(runs["grpo"]) & set(runs["paw"]))
    if seeds:
        diff, half = mean_ci([runs["paw"][s]["after"] - runs["grpo"][s]["after"] for s in seeds])
        lines += ["", f"paw − grpo after {UPDATES} updates, {len(seeds)} paired seeds "
                  f"({', '.join(map(str, seeds))}): {diff:+.1f} ± {half:.1f} pp; per seed: "
                  + ", ".join(f"s{s} {runs['grpo'][s]['after']:.1f} → "
                              f"{runs['paw'][s]['after']:.1f}" for s in seeds)]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--work", default="runs/trl_shelf")
    parser.add_argument("--report", action="store_true", help="only print the report")
    args = parser.parse_args(argv)
    if not args.report:
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            for variant in VARIANTS:  # seed-major: a cut-short run stays paired
                print("done", run(variant, seed, Path(args.work)), flush=True)
    print(report())
    return 0


if __name__ == "__main__":
    sys.exit(main())
