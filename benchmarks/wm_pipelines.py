"""World-model pipelines on PaW/Shelf-v0 (issue 15): does learning a world model first, or
co-training it (PaW), help the policy, and which pipeline leaves the better world model?

Per seed, from the main job's pretrained base (``paw-gym demo --seed S``: noisy-expert demos of
the ``train`` split and a nano model pretrained on their transcripts), eight variants as in
RWML's table:

    base        the pretrained base
    wm_sft      + WM SFT: next-state cross-entropy on the demos (``train-wm --method sft``)
    rwml        + RWML: GRPO on next-state prediction, embedding reward (MiniLM, τ 0.95), from a
                short WM-SFT warm start (the nano base never writes the <observation> tag, so
                every RWML group would score 0; the paper's 7B bases follow the instruction)
    rl          + vanilla GRPO (20 updates × 8 tasks × 8 rollouts, the demo's RL)
    wm_sft_rl   wm_sft, then vanilla GRPO
    rwml_rl     rwml, then vanilla GRPO
    paw         + GRPO with PaW (CMAE world-model co-training)
    rwml_paw    rwml, then GRPO with PaW
    gentle_wm_sft, gentle_wm_sft_rl   a gentler WM SFT (30 steps at lr 1e-4), alone and then RL

Every variant's final model is measured three ways on held-out tasks (the ``test`` split:
target items never trained on):

* policy: held-out success, every one of the 48 test tasks played twice (temperature 0.4);
* world model, RWML format (``paw-gym eval-wm``): greedy prediction of o_next from the WM
  prompt, % exact and % with MiniLM cosine ≥ τ, on held-out transitions (expert episodes of
  the test split);
* world model, the policy's own serialisations (``training.warmstart.pretrain.next_observation_accuracy``):
  % of the same held-out transitions whose o_next greedy decoding reproduces exactly, and % of
  o_next tokens right, as the environment's next turn (``wm_context: next_turn``, the
  pretraining transcripts' and the PaW term's) and right after h ⊕ a, inside the policy's turn
  (``none``, the PaW term's serialisation before issue 25).

RL budgets are equal (20 updates); the world-model stages add their own CPU time, recorded
per variant (``cpu_s``). Paired design: a seed fixes demos, base, RL tasks and sampling, so the
report gives per-seed differences against ``rl`` (mean ± 95 % CI, Student t).

    python -m benchmarks.wm_pipelines --seeds 3 --workers 2      # resumable, one file per seed
    python -m benchmarks.wm_pipelines --seeds 1 --variants rwml_paw   # one pipeline
    python -m benchmarks.wm_pipelines --report
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

ENV = "PaW/Shelf-v0"
RESULTS = Path(__file__).resolve().parent / "results" / "wm_pipelines"
WORK = Path("runs/wm_pipelines")
VARIANTS = ("base", "wm_sft", "rwml", "rl", "wm_sft_rl", "rwml_rl", "paw", "rwml_paw",
            "gentle_wm_sft", "gentle_wm_sft_rl")
LABELS = {"base": "base", "wm_sft": "WM-SFT", "rwml": "RWML", "rl": "RL", "wm_sft_rl": "WM-SFT+RL",
          "rwml_rl": "RWML+RL", "paw": "PaW", "rwml_paw": "RWML+PaW",
          "gentle_wm_sft": "gentle WM-SFT", "gentle_wm_sft_rl": "gentle WM-SFT+RL"}
#: World-model stage sizes: WM-SFT steps; RWML = a short WM-SFT warm start, then GRPO steps.
WM_SFT_STEPS, RWML_WARM_STEPS, RWML_STEPS = 100, 40, 30
#: A gentler WM SFT (fewer steps, 10x lower lr), to see whether the policy survives it.
GENTLE_STEPS, GENTLE_LR = 30, 1e-4
#: Held-out transitions for the world-model measures (expert episodes of the test split).
HELD_OUT_EPISODES = 48


def demo_dir(seed: int) -> Path:
    return Path("runs/demo") if seed == 0 else Path(f"runs/demo-s{seed}")


def ensure_demo(seed: int) -> Path:
    """The demo run of ``seed`` (its base model and expert demos), run once if missing."""
    from training.demo import DemoConfig, run_demo

    folder = demo_dir(seed)
    if not (folder / "base-model" / "config.json").is_file() or \
            not (folder / "expert-demos").is_dir():
        run_demo(DemoConfig(seed=seed, output_dir=str(folder)))
    return folder


def held_out_transitions(seed: int) -> Path:
    """Expert episodes of the test split, as the demo's prompts show them (no history)."""
    from training.world_model import record_replay

    folder = WORK / f"s{seed}" / "held-out-transitions"
    if not folder.is_dir():
        record_replay(ENV, "expert", HELD_OUT_EPISODES, folder, seed=10_000 + seed,
                      split="test", history_length=0)
    return folder


def train_wm(method: str, model: Path, replay: Path, out: Path, seed: int, steps: int,
             lr: float | None = None) -> Path:
    from training.world_model import WorldModelConfig, train_world_model

    if not (out / "model" / "config.json").is_file():
        train_world_model(WorldModelConfig(
            method=method, model=str(model), replay=str(replay), output_dir=str(out),
            steps=steps, batch_size=8, lr=lr or (1e-3 if method == "sft" else 1e-4), seed=seed,
            group_size=8, max_new_tokens=64, easy_filter=False, device="cpu", progress=False,
            log_every=steps))
    return out / "model"


def train_rl(model: Path, out: Path, seed: int, paw: bool) -> Path:
    """The demo's RL stage (GRPO, optionally + PaW) from ``model``; returns the final model."""
    from training.config import TrainConfig
    from training.demo import DemoConfig
    from training.trainer import PaWTrainer

    final = out / "final-model"
    if (final / "config.json").is_file():
        return final
    demo = DemoConfig()
    trainer = PaWTrainer(TrainConfig(
        model=str(model), env_id=ENV, env_kwargs={"split": "train"},
        history_length=demo.history_length, max_episode_steps=demo.max_steps, algo="grpo",
        paw=paw, lora=False, n_groups=demo.n_groups, group_size=demo.group_size,
        max_new_tokens=demo.max_new_tokens, total_steps=demo.rl_steps, lr=demo.rl_lr,
        mini_batch_size=demo.rl_mini_batch_size, token_budget=16384, max_seq_len=2048,
        max_obs_tokens=demo.max_obs_tokens, seed=seed, output_dir=str(out),
        overwrite=True, save_every=0, keep_checkpoints=1, device="cpu",
        log_every=0, progress=False, record_replay=False))
    trainer.train()
    trainer.model.save_pretrained(str(final), safe_serialization=True)
    trainer.tokenizer.save_pretrained(str(final))
    return final


def measure(model: Path, held_out: Path, seed: int) -> dict[str, Any]:
    """Held-out policy success and both world-model measures of ``model``."""
    from agents.hf_policy import HFPolicy
    from training.demo import DemoConfig
    from training.evaluate import evaluate, plan_evaluation
    from training.warmstart.pretrain import next_observation_accuracy
    from training.world_model import (DEFAULT_TAU, EmbeddingReward, load_examples, predict,
                                      summarize_predictions)

    demo = DemoConfig()
    policy = HFPolicy(str(model), device="cpu", seed=seed)
    plan = plan_evaluation(ENV, split="test", repeats=2, seed=10_000)
    result = evaluate(policy, ENV, plan, temperature=demo.eval_temperature,
                      max_new_tokens=demo.max_new_tokens, max_steps=demo.max_steps, seed=seed,
                      history_length=demo.history_length)
    records = predict(policy, load_examples(held_out), 1, temperature=0.0, max_new_tokens=96,
                      seed=seed)
    wm = summarize_predictions(records, EmbeddingReward(tau=DEFAULT_TAU))[-1]
    next_turn = next_observation_accuracy(policy, held_out)  # the PaW term's default
    in_turn = next_observation_accuracy(policy, held_out, wm_context="none")
    return {"success": result.row().success,
            "success_by_type": {r.task_type: r.success for r in result.rows[:-1]},
            "invalid": result.row().invalid, "wm_exact": wm["exact"],
            "wm_above_tau": wm["above_tau"], "wm_similarity": wm["similarity"],
            "next_obs_exact": next_turn["exact"], "next_obs_token": next_turn["token"],
            "in_turn_obs_exact": in_turn["exact"], "in_turn_obs_token": in_turn["token"],
            "wm_items": wm["items"]}


def run_seed(seed: int, variants: tuple[str, ...] = VARIANTS) -> dict[str, Any]:
    """The ``variants`` of one seed, each with the stages it needs (a stage whose output
    exists is reused, so each pipeline is also one command: ``--variants rwml_rl``)."""
    from benchmarks.common import set_threads

    set_threads(1)
    demo = ensure_demo(seed)
    base, demos = demo / "base-model", demo / "expert-demos"
    held_out = held_out_transitions(seed)
    work = WORK / f"s{seed}"
    # variant: (the variant it continues, its folder, how it is built there from that model)
    stages = {
        "wm_sft": ("base", "wm_sft", lambda m, out: train_wm("sft", m, demos, out, seed,
                                                             WM_SFT_STEPS)),
        "rwml": ("base", "rwml", lambda m, out: train_wm("rwml", train_wm(
            "sft", m, demos, work / "rwml_warm", seed, RWML_WARM_STEPS),
            demos, out, seed, RWML_STEPS)),
        "rl": ("base", "rl", lambda m, out: train_rl(m, out, seed, paw=False)),
        "wm_sft_rl": ("wm_sft", "wm_sft_rl", lambda m, out: train_rl(m, out, seed, paw=False)),
        "rwml_rl": ("rwml", "rwml_rl", lambda m, out: train_rl(m, out, seed, paw=False)),
        "paw": ("base", "paw", lambda m, out: train_rl(m, out, seed, paw=True)),
        "rwml_paw": ("rwml", "rwml_paw", lambda m, out: train_rl(m, out, seed, paw=True)),
        "gentle_wm_sft": ("base", "gentle_wm_sft", lambda m, out: train_wm(
            "sft", m, demos, out, seed, GENTLE_STEPS, lr=GENTLE_LR)),
        "gentle_wm_sft_rl": ("gentle_wm_sft", "gentle_wm_sft_rl",
                             lambda m, out: train_rl(m, out, seed, paw=False)),
    }
    models: dict[str, Path] = {"base": base}
    cpu: dict[str, float | None] = {"base": 0.0}

    def build(name: str) -> Path:
        """``name``'s model; ``cpu[name]``: CPU seconds of its whole pipeline (None when a
        stage was built by an earlier version of this script that did not record it)."""
        if name not in models:
            parent, folder, make = stages[name]
            start_model = build(parent)
            record = work / folder / "cpu_s.json"
            built_before = (work / folder).is_dir()
            start = time.process_time()
            models[name] = make(start_model, work / folder)
            spent: float | None = time.process_time() - start
            if record.is_file():
                spent = json.loads(record.read_text())["cpu_s"]
            elif built_before:
                spent = None
            else:
                record.write_text(json.dumps({"cpu_s": spent}))
            cpu[name] = None if spent is None or cpu[parent] is None else cpu[parent] + spent
        return models[name]

    results = {}
    for name in variants:
        build(name)
        results[name] = {**measure(models[name], held_out, seed),
                         "cpu_s": None if cpu[name] is None else round(cpu[name], 1)}
        print(f"seed {seed} {name}: {results[name]}", flush=True)
    return {"seed": seed, "env": ENV, "variants": results}


def result_path(seed: int, variants: tuple[str, ...]) -> Path:
    """Where a seed's results go: ``seed0.json`` for every variant, else a file of its own
    (merged into the seed's row of the report)."""
    suffix = "" if variants == VARIANTS else "-" + "-".join(variants)
    return RESULTS / f"seed{seed}{suffix}.json"


def run(seeds: list[int], workers: int, variants: tuple[str, ...] = VARIANTS) -> None:
    from concurrent.futures import ProcessPoolExecutor
    from functools import partial

    RESULTS.mkdir(parents=True, exist_ok=True)
    todo = [s for s in seeds if not result_path(s, variants).is_file()]
    # Demos first, one at a time: two base builds side by side would share the cache folder.
    for seed in todo:
        ensure_demo(seed)
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for result in pool.map(partial(run_seed, variants=variants), todo):
            result_path(result["seed"], variants).write_text(json.dumps(result, indent=2))


def load_results() -> list[dict[str, Any]]:
    """One record per seed with every variant measured for it (whole runs and single
    pipelines merged)."""
    seeds: dict[int, dict[str, Any]] = {}
    for path in sorted(RESULTS.glob("seed*.json")):
        result = json.loads(path.read_text())
        seeds.setdefault(result["seed"], {"seed": result["seed"], "variants": {}})
        seeds[result["seed"]]["variants"].update(result["variants"])
    return [seeds[s] for s in sorted(seeds)]


def report() -> str:
    from statistics import mean, stdev

    from benchmarks.study_small import mean_ci

    runs = load_results()
    if not runs:
        return "no results yet"
    shown = [v for v in VARIANTS if all(v in r["variants"] for r in runs)]
    keys = (("success", "held-out success %"),
            ("next_obs_exact", "o_next exact as the next turn %"),
            ("in_turn_obs_exact", "o_next exact right after h⊕a %"),
            ("in_turn_obs_token", "o_next tokens right after h⊕a %"),
            ("wm_exact", "o_next exact, WM prompt %"), ("wm_above_tau", "cos ≥ τ, WM prompt %"))
    lines = [f"Seeds {[r['seed'] for r in runs]} on {ENV}; mean ± std over seeds.", "",
             "| variant | " + " | ".join(label for _, label in keys) + " | CPU s |",
             "|---|" + "---:|" * (len(keys) + 1)]
    for name in shown:
        cells = []
        for key, _ in keys:
            values = [r["variants"][name][key] for r in runs]
            cells.append(f"{mean(values):.1f} ± {stdev(values) if len(values) > 1 else 0:.1f}")
        spent = [r["variants"][name]["cpu_s"] for r in runs]
        cpu = f"{mean(spent):.0f}" if None not in spent else "–"
        lines.append(f"| {LABELS[name]} | " + " | ".join(cells) + f" | {cpu} |")
    lines += ["", "Paired differences against RL (mean ± 95 % CI over seeds, points):", "",
              "| variant − RL | " + " | ".join(label for _, label in keys) + " |",
              "|---|" + "---:|" * len(keys)]
    for name in shown:
        if name == "rl":
            continue
        cells = []
        for key, _ in keys:
            diffs = [r["variants"][name][key] - r["variants"]["rl"][key] for r in runs]
            m, half = mean_ci(diffs)
            cells.append(f"{m:+.1f} ± {half:.1f}")
        lines.append(f"| {LABELS[name]} | " + " | ".join(cells) + " |")
    types = sorted(runs[0]["variants"]["base"]["success_by_type"])
    lines += ["", "Held-out success per task type (mean over seeds, %):", "",
              "| variant | " + " | ".join(types) + " |", "|---|" + "---:|" * len(types)]
    for name in shown:
        cells = [f"{mean(r['variants'][name]['success_by_type'][t] for r in runs):.1f}"
                 for t in types]
        lines.append(f"| {LABELS[name]} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0 .. N-1")
    parser.add_argument("--workers", type=int, default=2, help="seeds run side by side")
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS),
                        help="pipelines to run (default: all eight)")
    parser.add_argument("--report", action="store_true", help="print the tables of the results")
    args = parser.parse_args()
    if not args.report:
        run(list(range(args.seeds)), args.workers, tuple(args.variants))
    text = report()
    (RESULTS / "report.md").write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
