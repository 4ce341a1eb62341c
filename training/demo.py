"""The main job: tiny model → expert demos → SFT warm start → GRPO + PaW → per-task eval.

Everything runs offline on CPU. ``run_demo`` writes to ``output_dir``:

    expert-demos/        WMReplay of the scripted expert (train split)
    tiny-model/          the randomly initialised Qwen2 + tokenizer trained on that text
    sft-model/           the SFT warm start
    rl/                  PaW trainer run: metrics.jsonl, curves.png, checkpoints/
    eval_before.*        per-task table of the SFT model on held-out tasks (eval split),
                         .md/.json/.csv; eval_before_train_tasks.* on the RL training pool
    eval_after.*         the same after RL (and eval_after_train_tasks.*)
    results.md           before/after side by side, plus the settings used
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass
class DemoConfig:
    """Settings of ``paw-gym demo`` (sized for 2 CPU cores and ~15 minutes)."""

    env_id: str = "PaW/WebShop-v0"
    """Embedded env to train and evaluate on."""
    train_split: str = "dev"
    """Env split for expert demos and RL tasks."""
    eval_split: str = "test"
    """Env split for the before/after evaluation."""
    size: str = "nano"
    """Tiny model size: nano, micro or mini."""
    expert_episodes: int = 400
    """Expert episodes recorded for the tokenizer and the SFT warm start."""
    sft_epochs: int = 4
    """SFT passes over the expert transitions."""
    sft_lr: float = 3e-3
    """SFT learning rate."""
    history_length: int = 0
    """Steps of history in the prompt (paper: 2; 0 keeps CPU prompts short)."""
    max_steps: int = 6
    """Per-episode step limit (the expert needs 3–5 steps)."""
    max_new_tokens: int = 40
    """Longest response per step."""
    algo: str = "grpo"
    """RL estimator."""
    paw: bool = True
    """World-model co-training."""
    rl_steps: int = 12
    """RL updates."""
    n_groups: int = 4
    """Tasks per RL update."""
    group_size: int = 8
    """Rollouts per task."""
    rl_lr: float = 1e-3
    """RL learning rate (full fine-tuning of the tiny model)."""
    rl_mini_batch_size: int = 48
    """Transitions per PPO-clip optimizer step (several steps per update on old log-probs)."""
    max_obs_tokens: int = 128
    """Observation tokens kept as the world-model target (shorter: faster CPU updates)."""
    train_pool: int = 8
    """RL draws its tasks from the train-split seeds [0, train_pool): a small fixed
    pool of goals, so that 15 CPU minutes of updates revisit each goal many times (the nano
    model cannot generalise the search query to unseen goals; see docs/training.md)."""
    pool_eval_repeats: int = 4
    """Episodes per pool goal in the before/after table of the training pool."""
    eval_episodes: int = 50
    """Eval-split (held-out) tasks for the before/after tables."""
    eval_temperature: float = 0.4
    """Validation temperature (paper: 0.4)."""
    seed: int = 0
    """Seeds everything."""
    output_dir: str = "runs/demo"
    """Where everything goes."""
    threads: int = 1
    """torch CPU threads (the tiny model runs fastest on one; more threads only help an idle
    machine with a bigger model)."""


def run_demo(config: DemoConfig, log=print) -> dict[str, Any]:
    """Run the whole pipeline; returns the before/after overall rows and timings."""
    import torch

    from agents.tiny_model import build_tiny_model
    from training.config import TrainConfig
    from training.evaluate import evaluate, load_policy, write_tables
    from training.sft import SFTConfig, record_expert_demos, run_sft
    from training.trainer import PaWTrainer
    from wrappers import TEMPLATES, WMReplay

    if config.train_pool < 1 or config.pool_eval_repeats < 1:
        raise ValueError(f"train_pool ({config.train_pool}) and pool_eval_repeats "
                         f"({config.pool_eval_repeats}) must be at least 1")
    torch.set_num_threads(config.threads)
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        timings[name] = round(time.perf_counter() - clock, 1)
        clock = time.perf_counter()
        log(f"[demo] {name}: {timings[name]} s")

    prompt = {"history_length": config.history_length}
    demos = out / "expert-demos"
    shutil.rmtree(demos, ignore_errors=True)
    record_expert_demos(config.env_id, config.expert_episodes, demos, seed=config.seed,
                        max_steps=config.max_steps, split=config.train_split, **prompt)
    replay = WMReplay.load(demos)
    lap("expert demos")

    texts = [text for pair in TEMPLATES.values() for text in pair]
    texts += [r[k] for r in replay for k in ("h", "a", "o_next")]
    tiny = build_tiny_model(texts, out / "tiny-model", size=config.size, seed=config.seed)
    lap("tiny model")

    sft_dir, sft_history = run_sft(SFTConfig(
        model=str(tiny), replay=str(demos), output_dir=str(out / "sft-model"),
        epochs=config.sft_epochs, lr=config.sft_lr, seed=config.seed, device="cpu",
        token_budget=2048))  # small batches: more optimizer steps for the same compute
    lap("SFT warm start")

    # Two evaluations: held-out tasks of eval_split, and the RL training pool (each goal
    # repeated, as the paper's training-reward curves measure the tasks RL trains on).
    held_out = list(range(10_000, 10_000 + config.eval_episodes))
    pool = list(range(config.train_pool))
    seen = [task for task in pool for _ in range(config.pool_eval_repeats)]
    settings = dict(temperature=config.eval_temperature, max_new_tokens=config.max_new_tokens,
                    max_steps=config.max_steps, seed=config.seed, progress=True, **prompt)

    def evaluate_both(policy, name: str):
        test = evaluate(policy, config.env_id, held_out, split=config.eval_split,
                        meta={"model": name, "tasks": "held-out"}, **settings)
        train = evaluate(policy, config.env_id, seen, split=config.train_split,
                         meta={"model": name, "tasks": "training pool"}, **settings)
        return test, train

    before, before_train = evaluate_both(load_policy(checkpoint=sft_dir, device="cpu"),
                                         "SFT warm start")
    write_tables(before, out, "eval_before")
    write_tables(before_train, out, "eval_before_train_tasks")
    lap("eval before RL")

    train_config = TrainConfig(
        model=str(sft_dir), env_id=config.env_id, env_kwargs={"split": config.train_split},
        history_length=config.history_length, max_episode_steps=config.max_steps,
        algo=config.algo, paw=config.paw, lora=False, n_groups=config.n_groups,
        group_size=config.group_size, max_new_tokens=config.max_new_tokens,
        train_task_seeds=config.train_pool,
        total_steps=config.rl_steps, lr=config.rl_lr, mini_batch_size=config.rl_mini_batch_size,
        token_budget=16384, max_seq_len=2048, max_obs_tokens=config.max_obs_tokens,
        seed=config.seed, output_dir=str(out / "rl"),
        save_every=0, keep_checkpoints=1, device="cpu")
    trainer = PaWTrainer(train_config)
    history = trainer.train()
    lap("RL training")

    after, after_train = evaluate_both(
        trainer.policy, f"{config.algo.upper()}{' + PaW' if config.paw else ''}")
    write_tables(after, out, "eval_after")
    write_tables(after_train, out, "eval_after_train_tasks")
    lap("eval after RL")

    if (out / "rl" / "curves.png").is_file():
        shutil.copy(out / "rl" / "curves.png", out / "curves.png")
    summary = {"config": asdict(config), "timings_s": timings,
               "sft": sft_history, "rl_last_step": history[-1] if history else {},
               "before": asdict(before.row()), "after": asdict(after.row()),
               "before_train_tasks": asdict(before_train.row()),
               "after_train_tasks": asdict(after_train.row())}
    (out / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    tables = [("held-out", before, after), ("training-pool", before_train, after_train)]
    (out / "results.md").write_text(results_markdown(tables, config, timings), encoding="utf-8")
    return summary


def results_markdown(tables, config: DemoConfig, timings: dict[str, float]) -> str:
    """Before/after per task type for each (name, before, after) evaluation, then timings."""
    lines = [f"# paw-gym demo: {config.algo.upper()}{' + PaW' if config.paw else ''} on "
             f"{config.env_id} ({config.size} tiny model)", ""]
    for name, before, after in tables:
        split = config.eval_split if name == "held-out" else config.train_split
        lines += [f"## {name} tasks (split `{split}`, temperature {config.eval_temperature})", "",
                  "| task type | episodes | success before | success after | score before | "
                  "score after | invalid % before | invalid % after | return before | "
                  "return after |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        after_rows = {r.task_type: r for r in after.rows}
        for r in before.rows:
            a = after_rows[r.task_type]
            lines.append(f"| {r.task_type} | {r.episodes} | {r.success:.1f} | {a.success:.1f} | "
                         f"{r.score:.1f} | {a.score:.1f} | {r.invalid:.1f} | {a.invalid:.1f} | "
                         f"{r.mean_return:.2f} | {a.mean_return:.2f} |")
        lines.append("")
    lines += [f"RL: {config.rl_steps} updates of {config.n_groups} goals × {config.group_size} "
              f"rollouts from a pool of {config.train_pool} `{config.train_split}` goals "
              f"(training-pool table: {config.pool_eval_repeats} episodes per goal), lr "
              f"{config.rl_lr}.", "",
              "Timings (s): " + ", ".join(f"{k} {v}" for k, v in timings.items()),
              f"Total: {sum(timings.values()):.0f} s", "", "Curves: `curves.png`; metrics: "
              "`rl/metrics.jsonl`."]
    return "\n".join(lines) + "\n"
