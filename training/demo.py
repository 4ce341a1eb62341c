"""The main job: demos → tiny model pretrained on them → (SFT) → GRPO + PaW → per-task eval.

Everything runs offline on CPU. ``run_demo`` writes to ``output_dir``:

    expert-demos/        WMReplay of the scripted expert (train split)
    base-model/          the Qwen2 tiny model + tokenizer trained on that text, pretrained on
                         its transcripts (built once per recipe under $PAW_GYM_CACHE/tiny-base)
    sft-model/           the SFT warm start (when sft_epochs > 0)
    rl/                  PaW trainer run: metrics.jsonl, checkpoints/
    curves.png           the run's training and validation curves (moved out of rl/)
    eval_before.*        per-task table of the RL start on held-out tasks (eval split),
                         .md/.json/.csv; eval_before_train_tasks.* on the RL training pool
    eval_after.*         the same after RL (and eval_after_train_tasks.*)
    results.md           before/after side by side, plus the settings used
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from agents.serialization import WMContext
from paw_gym.progress import quiet_libraries
from training.config import Algo
from training.infra.checked_config import (MAX_TOKENS, CheckedConfig, bounded, check_config,
                                           env_id, output_folder, text)


#: Bump when the base-model recipe changes meaning, so cached bases are rebuilt.
BASE_RECIPE_VERSION = 2


@dataclass
class DemoConfig(CheckedConfig):
    """Settings of ``paw-gym demo`` (sized for one CPU core: ~9 minutes with the one-time base
    build, ~2 minutes once the base is cached, on the project's 2-core AMD EPYC VM). Defaults:
    GRPO + PaW on ``PaW/Shelf-v0``; ``configs/demo/webshop_sft.yaml`` holds the earlier WebShop
    settings (which do not learn at this scale, see docs/training.md)."""

    env_id: str = env_id("PaW/Shelf-v0")
    """Embedded env to train and evaluate on."""
    train_split: str = text("train")
    """Env split for expert demos and RL tasks."""
    eval_split: str = text("test")
    """Env split for the before/after evaluation (held-out tasks)."""
    size: Literal["nano", "micro", "mini"] = "nano"
    """Tiny model size: nano, micro or mini."""
    expert_episodes: int = bounded(1000, 1, 10**6)
    """Expert episodes recorded for the tokenizer, pretraining and SFT."""
    expert_epsilon: float = bounded(0.5, 0, 1, what="a probability")
    """Chance of a random admissible action at each demo step (imperfect demos; all episodes,
    won or not, are then imitated)."""
    pretrain_steps: int = bounded(800, 0, 10**7)
    """Next-token pretraining steps on the demo transcripts h ⊕ a ⊕ o_next (0: none); see
    :mod:`training.warmstart.pretrain`."""
    pretrain_lr: float = bounded(1e-3, 0, 1, low_open=True, what="a learning rate")
    """Pretraining learning rate."""
    sft_epochs: int = bounded(0, 0, 10**4)
    """SFT passes over the expert transitions (0: RL starts from the base model)."""
    sft_lr: float = bounded(3e-3, 0, 1, low_open=True, what="a learning rate")
    """SFT learning rate."""
    history_length: int = bounded(0, 0, 10**5)
    """Steps of history in the prompt (paper: 2; 0 keeps CPU prompts short)."""
    max_steps: int = bounded(6, 1, 10**5)
    """Per-episode step limit."""
    max_new_tokens: int = bounded(40, 1, MAX_TOKENS)
    """Longest response per step."""
    algo: Algo = "grpo"
    """RL estimator."""
    paw: bool = True
    """World-model co-training."""
    wm_context: WMContext = "next_turn"
    """Where o_next follows the action, in the pretraining transcripts and the PaW term alike
    (``agents.serialization``): next_turn, end_of_turn or none."""
    pretrain_wm_context: WMContext | None = None
    """The pretraining transcripts' serialisation, where it should differ from ``wm_context``
    (None: the same). ``end_of_turn`` with ``wm_context: none`` rebuilds the pipeline before
    issue 25, whose PaW term taught small policies to write environment text."""
    rl_steps: int = bounded(20, 1, 10**7, note="the number of RL updates")
    """RL updates."""
    n_groups: int = bounded(8, 1, 10**6)
    """Tasks per RL update."""
    group_size: int = bounded(8, 1, 10**5)
    """Rollouts per task."""
    rl_lr: float = bounded(3e-4, 0, 1, what="a learning rate")
    """RL learning rate (full fine-tuning of the tiny model)."""
    norm_adv_by_std: bool = True
    """Divide group-centred returns by the group std (False: Dr. GRPO)."""
    entropy_coef: float = bounded(0.0, 0, 100)
    """Entropy bonus weight."""
    rl_mini_batch_size: int = bounded(0, 0, 10**7)
    """Transitions per optimizer step (0: one step on the whole rollout per update). Several
    PPO-clip steps per update (48 transitions each, the setting before issue 25's step-size
    fix) let one early update break the tiny model's response format on 6 of 20 runs over
    seeds 0–9 (``benchmarks/demo_stability.py``)."""
    max_obs_tokens: int = bounded(128, 1, MAX_TOKENS)
    """Observation tokens kept as the world-model target (shorter: faster CPU updates)."""
    train_pool: int = bounded(1_000_000, 1, 2**32)
    """RL draws its tasks from the train-split seeds [0, train_pool) (the WebShop settings use
    a small fixed pool: the nano model does not generalise there, see docs/training.md)."""
    pool_eval_repeats: int = bounded(1, 1, 10**6)
    """Episodes per pool goal in the before/after table of the training pool (its first
    ``eval_episodes`` goals)."""
    eval_episodes: int = bounded(200, 1, 10**6)
    """Held-out prompts of the reading probe, and pool tasks of the training-pool table."""
    eval_limit: int | None = bounded(None, 1, 10**7, note="none: every task")
    """Held-out tasks in the before/after table: a stratified subset of the eval split (None:
    every task; Shelf's test split has 48, each target item with each shelf size)."""
    eval_repeats: int = bounded(4, 1, 10**6)
    """Episodes per held-out task in the before/after table (same task, new samples)."""
    val_every: int = bounded(5, 0, 10**7, note="0: no validation")
    """Validation on the held-out tasks every N RL updates and before the first (0: none);
    the ``val_success`` curve in ``curves.png``."""
    eval_temperature: float = bounded(0.4, 0, 100)
    """Validation temperature (paper: 0.4)."""
    seed: int = 0
    """Seeds everything."""
    output_dir: str = output_folder("runs/demo")
    """Where everything goes."""
    overwrite: bool = False
    """Replace an earlier demo (or anything paw-gym wrote) in ``output_dir``; refused
    otherwise, before any work."""
    threads: int = bounded(1, 1, 1024)
    """torch CPU threads (the tiny model runs fastest on one; more threads only help an idle
    machine with a bigger model)."""


#: Where the demo writes in its output_dir (the output guard refuses a user's entry there,
#: :mod:`run_files.outputs`): all in place but base-model/ (staged); sft-model/ and rl/ are
#: outputs of their own (``sft``'s and ``train``'s claims), which judge what is inside them.
DEMO_WRITES = ("expert-demos/**", "base-model/**", "sft-model/", "rl/", "curves.png",
               "eval_*.md", "eval_*.json", "eval_*.csv", "summary.json", "results.md")


def run_demo(config: DemoConfig, log=print) -> dict[str, Any]:
    """Run the whole pipeline in ``output_dir`` (claimed through the output guard); returns the
    before/after overall rows and timings."""
    from run_files.outputs import claim_folder

    check_demo_config(config)
    with claim_folder(config.output_dir, "demo", config.overwrite, writes=DEMO_WRITES):
        return _run_demo(config, Path(config.output_dir), log)


def _run_demo(config: DemoConfig, out: Path, log) -> dict[str, Any]:
    import torch

    from run_files.outputs import seal, staged, write_text_atomically
    from training.evaluate import evaluate, load_policy, write_tables
    from training.infra.numerics import machine
    from training.warmstart.sft import SFTConfig, record_expert_demos, run_sft
    from training.trainer import PaWTrainer

    torch.set_num_threads(config.threads)
    quiet_libraries()  # the demo's output is its report, from the CLI or from Python
    timings: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        timings[name] = round(time.perf_counter() - clock, 1)
        clock = time.perf_counter()
        log(f"[demo] {name}: {timings[name]} s")

    prompt = {"history_length": config.history_length}
    demos = out / "expert-demos"
    record_expert_demos(config.env_id, config.expert_episodes, demos, seed=config.seed,
                        max_steps=config.max_steps, split=config.train_split,
                        epsilon=config.expert_epsilon, **prompt)
    lap("expert demos")

    cached, built_now = cached_base(config, demos, log=lambda text: log(f"[demo] {text}"))
    base = out / "base-model"
    with staged(base) as folder:
        shutil.copytree(cached / "model", folder, dirs_exist_ok=True)
    try:
        reading = json.loads((cached / "probe.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:  # the cache is built whole: damaged afterwards
        raise ValueError(f"the cached base model {str(cached)!r} is damaged (probe.json: "
                         f"{error}); remove that folder and rerun: it is built again") from None
    lap("base model (built)" if built_now else "base model (cached)")
    log("[demo] reading probe on held-out prompts (expert action ranked first): " +
        ", ".join(f"{k.replace('_', ' ')} {v:.2f}" for k, v in reading.items()
                  if isinstance(v, float)))

    if config.sft_epochs:
        sft_dir, sft_history = run_sft(SFTConfig(
            model=str(base), replay=str(demos), output_dir=str(out / "sft-model"),
            overwrite=True, epochs=config.sft_epochs, lr=config.sft_lr, seed=config.seed,
            device="cpu",
            successful_only=config.expert_epsilon == 0,
            token_budget=2048))  # small batches: more optimizer steps for the same compute
        lap("SFT warm start")
    else:
        sft_dir, sft_history = base, []

    # Two evaluations: held-out tasks of eval_split, and the RL training pool (each goal
    # repeated, as the paper's training-reward curves measure the tasks RL trains on).
    pool = list(range(min(config.train_pool, config.eval_episodes)))
    seen = [task for task in pool for _ in range(config.pool_eval_repeats)]
    settings = {**evaluation_settings(config), "progress": True}

    def evaluate_both(policy, name: str):
        test = evaluate_held_out(policy, config, meta={"model": name, "tasks": "held-out"},
                                 progress=True)
        train = evaluate(policy, config.env_id, seen, split=config.train_split,
                         meta={"model": name, "tasks": "training pool"}, **settings)
        return test, train

    before, before_train = evaluate_both(load_policy(checkpoint=sft_dir, device="cpu"),
                                         "SFT warm start")
    write_tables(before, out, "eval_before")
    write_tables(before_train, out, "eval_before_train_tasks")
    lap("eval before RL")

    train_config = rl_config(config, sft_dir, out / "rl")
    trainer = PaWTrainer(train_config)
    history = trainer.train()
    lap("RL training")

    after, after_train = evaluate_both(
        trainer.policy, f"{config.algo.upper()}{' + PaW' if config.paw else ''}")
    write_tables(after, out, "eval_after")
    write_tables(after_train, out, "eval_after_train_tasks")
    lap("eval after RL")

    validation = validation_summary(out / "rl" / "metrics.jsonl")
    if (out / "rl" / "curves.png").is_file():  # moved, not copied: one figure, where it is read
        (out / "rl" / "curves.png").replace(out / "curves.png")
        seal(out / "curves.png")  # the demo's now (the guard's record of it)
    summary = {"config": asdict(config), "timings_s": timings, "reading_probe": reading,
               "sft": sft_history, "rl_last_step": history[-1] if history else {},
               "before": asdict(before.row()), "after": asdict(after.row()),
               "before_train_tasks": asdict(before_train.row()),
               "after_train_tasks": asdict(after_train.row()), "validation": validation,
               "machine": machine()}
    write_text_atomically(out / "summary.json", json.dumps(summary, indent=2))
    tables = [("held-out", before, after), ("training-pool", before_train, after_train)]
    write_text_atomically(out / "results.md", results_markdown(tables, config, timings,
                                                               summary["machine"], validation))
    return summary


def evaluation_settings(config: DemoConfig) -> dict[str, Any]:
    """How the demo plays an evaluation episode (sampling, limits, prompt, seed)."""
    return dict(temperature=config.eval_temperature, max_new_tokens=config.max_new_tokens,
                max_steps=config.max_steps, seed=config.seed,
                history_length=config.history_length)


def evaluate_held_out(policy, config: DemoConfig, **options: Any):
    """The demo's held-out evaluation of ``policy``: every task of ``eval_split`` (up to
    ``eval_limit``) ``eval_repeats`` times, the same episodes for every policy; ``options``
    (``meta``, ``progress``) go to :func:`training.evaluate.evaluate`."""
    from training.evaluate import evaluate, plan_evaluation

    plan = plan_evaluation(config.env_id, split=config.eval_split, limit=config.eval_limit,
                           repeats=config.eval_repeats, seed=10_000)
    return evaluate(policy, config.env_id, plan, **evaluation_settings(config), **options)


def check_demo_config(config: DemoConfig) -> None:
    """``ValueError`` naming the bad setting and what is accepted, before any work (the RL
    stage's settings are checked by :class:`~training.config.TrainConfig`, under the demo's
    names, and by :func:`~training.preflight.preflight`)."""
    from training.preflight import check_expert, preflight

    check_config(config)  # a config changed after it was made
    check_expert(config.env_id, "env_id")  # its demos are the expert's
    try:
        rl = rl_config(config, Path(config.output_dir) / "base-model",
                       Path(config.output_dir) / "rl")
    except ValueError as error:
        name = str(error).split("=", 1)[0]
        raise ValueError(str(error).replace(name, RL_FLAGS.get(name, name), 1)) from None
    # The model is built by the demo and the output folder is the demo's own.
    preflight(rl, model=False, outputs=False)


#: TrainConfig fields that the demo sets from a differently named field of its own.
RL_FLAGS = {"total_steps": "rl_steps", "lr": "rl_lr", "mini_batch_size": "rl_mini_batch_size",
            "max_episode_steps": "max_steps", "train_task_seeds": "train_pool",
            "val_temperature": "eval_temperature", "val_limit": "eval_limit"}


def rl_config(config: DemoConfig, model: Path, output_dir: Path):
    """The :class:`~training.config.TrainConfig` of the demo's RL stage, starting from
    ``model`` and writing to ``output_dir`` (the demo's own folder, so it is overwritten)."""
    from training.config import TrainConfig

    return TrainConfig(
        model=str(model), env_id=config.env_id, env_kwargs={"split": config.train_split},
        history_length=config.history_length, max_episode_steps=config.max_steps,
        algo=config.algo, paw=config.paw, wm_context=config.wm_context, lora=False,
        n_groups=config.n_groups,
        group_size=config.group_size, max_new_tokens=config.max_new_tokens,
        train_task_seeds=config.train_pool,
        total_steps=config.rl_steps, lr=config.rl_lr, mini_batch_size=config.rl_mini_batch_size,
        norm_adv_by_std=config.norm_adv_by_std, entropy_coef=config.entropy_coef,
        token_budget=16384, max_seq_len=2048, max_obs_tokens=config.max_obs_tokens,
        seed=config.seed, output_dir=str(output_dir), overwrite=True,
        save_every=0, keep_checkpoints=1, device="cpu", val_every=config.val_every,
        val_before_train=config.val_every > 0, val_split=config.eval_split,
        val_limit=config.eval_limit, val_temperature=config.eval_temperature)


def pretraining_context(config: DemoConfig) -> str:
    """The serialisation of the base's pretraining transcripts."""
    return config.pretrain_wm_context or config.wm_context


def base_recipe(config: DemoConfig, demos: Path) -> dict[str, Any]:
    """Everything the base model's weights depend on, the cache key of
    :func:`cached_base`: the settings, a digest of the demo transcripts (so a change to the
    env's text, the prompts or the expert rebuilds it), the torch thread count and the numerics
    mode (float sums differ between thread counts, and in ``native`` mode between CPUs:
    :func:`training.infra.numerics.numerics_key`) and the versions of the libraries that
    initialise, tokenise and train."""
    import tokenizers
    import torch
    import transformers

    from training.infra.numerics import numerics_key
    from wrappers import WMReplay

    digest = hashlib.sha256()
    for record in WMReplay.load(demos):
        for key in ("h", "a", "o_next"):
            digest.update(str(record.get(key) or "").encode("utf-8") + b"\x1f")
    return {"version": BASE_RECIPE_VERSION, **{k: getattr(config, k) for k in (
        "env_id", "train_split", "eval_split", "eval_episodes", "expert_episodes",
        "expert_epsilon", "max_steps", "history_length", "size", "seed", "pretrain_steps",
        "pretrain_lr")}, "pretrain_wm_context": pretraining_context(config),
        "demos_sha256": digest.hexdigest(),
        "torch_threads": torch.get_num_threads(), "numerics": numerics_key(),
        "libraries": {"torch": torch.__version__, "transformers": transformers.__version__,
                      "tokenizers": tokenizers.__version__}}


def cached_base(config: DemoConfig, demos: Path, log=print) -> tuple[Path, bool]:
    """The pretrained base of ``config`` built from the demo replay ``demos`` (tokenizer
    trained on its text, seeded initialisation, next-token pretraining, reading probe), from
    the cache when the :func:`base_recipe` is there. Returns ``(folder, built_now)``; the
    folder holds ``model/`` and ``probe.json``."""
    from agents.hf_policy import HFPolicy
    from agents.tiny_model import build_tiny_model
    from training.warmstart.pretrain import PretrainConfig, cached_build, reading_probe, run_pretrain
    from wrappers import TEMPLATES, WMReplay

    probe_tasks = dict(seeds=list(range(10_000, 10_000 + config.eval_episodes)),
                       split=config.eval_split, history_length=config.history_length)

    def build(folder: Path) -> None:
        texts = [text for pair in TEMPLATES.values() for text in pair]
        texts += [r[k] for r in WMReplay.load(demos) for k in ("h", "a", "o_next")]
        tiny = build_tiny_model(texts, folder / "init", size=config.size, seed=config.seed)
        probe = {"before_pretraining": reading_probe(HFPolicy(str(tiny), device="cpu"),
                                                     config.env_id, **probe_tasks)}
        model = tiny
        if config.pretrain_steps:
            model, losses = run_pretrain(PretrainConfig(
                model=str(tiny), replay=str(demos), output_dir=str(folder / "model"),
                steps=config.pretrain_steps, lr=config.pretrain_lr, seed=config.seed,
                wm_context=pretraining_context(config), device="cpu"))
            probe["after_pretraining"] = reading_probe(HFPolicy(str(model), device="cpu"),
                                                       config.env_id, **probe_tasks)
            probe["pretraining_loss"] = losses
            shutil.rmtree(tiny)
        else:
            model.rename(folder / "model")
        (folder / "probe.json").write_text(json.dumps(probe, indent=2), encoding="utf-8")

    return cached_build(base_recipe(config, demos), build, log=log)


def validation_summary(metrics: Path) -> dict[str, Any] | None:
    """The RL run's held-out validations (``val_success``, every task once): the first, the
    best (the earliest of equals) and the last, as ``{"step", "success"}`` in %; None when the
    run did not validate."""
    from training.infra.metrics_log import read_metrics

    points = [{"step": r["step"], "success": 100.0 * r["val_success"]}
              for r in (read_metrics(metrics) if metrics.is_file() else []) if "val_success" in r]
    if not points:
        return None
    best = max(points, key=lambda point: (point["success"], -point["step"]))
    return {"first": points[0], "best": best, "last": points[-1], "count": len(points)}


def validation_line(validation: dict[str, Any] | None) -> str | None:
    """One sentence on the validation curve that says which update the tables show."""
    if validation is None:
        return None
    first, best, last = validation["first"], validation["best"], validation["last"]
    text = (f"Validation (held-out, each task once, {validation['count']} points): "
            f"{first['success']:.1f} % at update {first['step']}, best {best['success']:.1f} % "
            f"at update {best['step']}, last {last['success']:.1f} % at update {last['step']}.")
    if best["step"] != last["step"]:
        text += (f" The tables show the policy after the last update ({last['step']}), not the "
                 f"best one; the difference is {best['success'] - last['success']:.1f} points.")
    else:
        text += " The tables show that last, best policy."
    return text


#: What each figure of the demo's output measures, and which way is better.
GLOSSARY = (
    ("success", "% of episodes won (Shelf: paid for the item the task names). Higher is better."),
    ("score", "the env's task score in % (Shelf: the same as success; WebShop gives partial "
              "credit for a close product). Higher is better."),
    ("invalid actions", "% of steps whose action the env could not parse or carry out (each "
                        "costs −0.1). Lower is better; RL may trade a few for wins early on."),
    ("return", "mean episode return: the task reward (Shelf: 10 for a win) plus the invalid-"
               "action penalties. Higher is better."),
    ("reading probe", "share of held-out prompts on which the base model ranks the expert's "
                      "action first: whether the start reads its prompt (1.0 = always)."),
    ("reward, success (per update)", "the training rollouts of that update (training tasks, "
                                     "temperature 1). Rising is good."),
    ("val_success", "held-out success during RL, each task once at the evaluation temperature "
                    "(the curve in curves.png)."),
    ("leak", "wm_leak: how strongly the policy starts its own turn with environment text (what a "
             "misplaced world-model term teaches). Should stay near 0."),
    ("wm_loss", "the PaW world-model term (CMAE on the next observation's tokens of the "
                "selected transitions). Lower means the policy predicts the env better; it is "
                "not a success measure."),
    ("λ_g", "lambda_mean: the world-model term's weight per rollout group, 1 − group mean return"
            " / R_max: near 1 while a group fails, 0 once it always wins."),
)

#: What a good run of the default demo looks like (measured: docs/training.md, "Main job").
#: A good run of the default demo raises held-out success by this many points (the learning
#: test's bar), unless it reaches the ceiling first.
GOOD_GAIN = 20.0
#: Held-out success (%) that counts as the ceiling: a start this near it cannot gain the bar.
CEILING = 99.0


def verdict(before: float, after: float) -> str:
    """The closing judgement of a demo run from its held-out success before and after RL (in
    %): what this run shows, a gain of the bar or the ceiling reached, or that it shows
    neither."""
    gain = after - before
    where = "docs/training.md#main-job gives the measured range over seeds 0–9"
    if after >= CEILING and gain < GOOD_GAIN:
        return (f"This run reached the ceiling: held-out success {before:.1f} % -> {after:.1f} % "
                f"(a start this high cannot gain the {GOOD_GAIN:.0f} points of a good run); "
                f"{where}.")
    if gain >= GOOD_GAIN:
        return (f"This run learned: held-out success +{gain:.1f} points ({before:.1f} % -> "
                f"{after:.1f} %), at or above the {GOOD_GAIN:.0f}-point bar of a good run; "
                f"{where}.")
    return (f"This run did not show learning: held-out success {gain:+.1f} points ({before:.1f} "
            f"% -> {after:.1f} %), under the {GOOD_GAIN:.0f}-point bar of a good run and short "
            f"of the ceiling; {where}.")


def results_markdown(tables, config: DemoConfig, timings: dict[str, float],
                     machine: dict[str, Any], validation: dict[str, Any] | None = None) -> str:
    """Before/after per task type for each (name, before, after) evaluation, the validation
    curve's first, best and last points, timings, the machine (a
    :func:`training.infra.numerics.machine` record) and a glossary."""
    from training.infra.numerics import machine_line

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
    pool = (f"the `{config.train_split}` split's goals" if config.train_pool >= 1_000_000 else
            f"a pool of the first {config.train_pool} `{config.train_split}` goals")
    repeats = "1 episode" if config.pool_eval_repeats == 1 else \
        f"{config.pool_eval_repeats} episodes"
    held = "every held-out task" if config.eval_limit is None else \
        f"{config.eval_limit} held-out tasks (a stratified subset)"
    steps = "one optimizer step on the whole rollout" if config.rl_mini_batch_size <= 0 else \
        f"optimizer steps of {config.rl_mini_batch_size} transitions"
    lines += [f"RL: {config.rl_steps} updates of {config.n_groups} goals × {config.group_size} "
              f"rollouts drawn from {pool}, {steps} per update, lr {config.rl_lr}. The "
              f"training-pool table plays the first {min(config.train_pool, config.eval_episodes)}"
              f" goals, {repeats} each. The held-out table plays {held} {config.eval_repeats} "
              "times; the `val_success` curve of `curves.png` plays each once, so its first "
              "point differs from the table's 'before' by sampling alone.", "",
              *([validation_line(validation), ""] if validation else []),
              "Timings (s): " + ", ".join(f"{k} {v}" for k, v in timings.items()),
              f"Total: {sum(timings.values()):.0f} s", "",
              machine_line(machine), "", "Curves: `curves.png`; metrics: "
              "`rl/metrics.jsonl`.", "", "## What the numbers mean", "",
              *[f"- **{name}**: {text}" for name, text in GLOSSARY], "",
              verdict(tables[0][1].row().success, tables[0][2].row().success)]
    return "\n".join(lines) + "\n"
