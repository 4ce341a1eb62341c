"""Paired study on the small envs (PaW/Shelf-v0, PaW/FrozenLake-v0): does RL raise held-out
success, and does PaW help it?

Shelf names the item to buy in a one-line prompt; FrozenLake shows a 4x4 map of ice and holes.
Both are small enough for a tiny model to learn on CPU. Every run starts from a *reading start*: a nano model pretrained (next-token, ``training.pretrain``)
on transcripts of a noisy expert that takes a random admissible action with probability ε.
``normal`` uses ε = 0.5 (the start wins about half of the held-out tasks at temperature 1);
``sparse`` uses ε = 0.9 (the paper's §4.4 situation: the start rarely wins, most rollout
groups carry no reward). Each run trains one variant for the same budget, and plays every one
of 64 held-out tasks (Shelf: target items RL never trains on; FrozenLake: maps of the ``test``
split) once before and once after RL.

Paired design: a seed fixes the training tasks and the sampling seeds of every variant, so
``variant − baseline`` differences are taken per seed; the report gives their mean ± 95 % CI
(Student t over seeds), and the RL gain (after − before) of each variant the same way.

    python benchmarks/study_small.py --seeds 5 --workers 2     # Shelf, all cells, resumable
    python benchmarks/study_small.py --env frozenlake --starts normal --variants grpo grpo_paw
    python benchmarks/study_small.py --report                  # tables + plot from results
    python benchmarks/study_small.py --env frozenlake --report --world-model   # + o_next accuracy

The learning regression test (``tests/test_learning.py``) uses this module's start and run.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


@dataclass(frozen=True)
class StudyEnv:
    """An env of the study and its episode settings."""

    id: str
    max_steps: int
    """Step limit of training and evaluation episodes."""
    results: str
    """Folder under ``benchmarks/results`` (``<results>_u<N>`` for a non-default budget)."""


STUDY_ENVS = {
    "shelf": StudyEnv("PaW/Shelf-v0", max_steps=6, results="study_shelf"),
    # The 4x4 maps' shortest paths are 6 moves; 10 leaves room for a detour.
    "frozenlake": StudyEnv("PaW/FrozenLake-v0", max_steps=10, results="study_frozenlake"),
}
SHELF = STUDY_ENVS["shelf"]
ENV = SHELF.id
#: The observation (Shelf: task + shelf or held item; FrozenLake: the map) and the actions; the
#: state is Markov in both, so no history.
TEMPLATE = "{current_observation} Actions: [{admissible_actions}]."
PROMPT = dict(template=TEMPLATE, history_length=0)
HELD_OUT = list(range(10_000, 10_064))
STARTS = {"normal": 0.5, "sparse": 0.9}
VARIANTS: dict[str, dict[str, Any]] = {
    "grpo": {"algo": "grpo", "paw": False},
    "grpo_paw": {"algo": "grpo", "paw": True},
    "gigpo": {"algo": "gigpo", "paw": False},
    "gigpo_paw": {"algo": "gigpo", "paw": True},
    "paw_ce": {"algo": "grpo", "paw": True, "wm_loss": "ce"},
    "paw_fixed_lambda": {"algo": "grpo", "paw": True, "adaptive_coef": False},
    "grpo_std_norm_off": {"algo": "grpo", "paw": False, "norm_adv_by_std": False},
    "grpo_entropy": {"algo": "grpo", "paw": False, "entropy_coef": 0.01},
    # lambda_clamp: the other runs predate λ_g's switch to the uncapped Eq. 10 (2026-11-23),
    # so this one keeps the cap to differ from grpo_paw in the entropy score only.
    "paw_sampled_score": {"algo": "grpo", "paw": True, "entropy_score": "sampled",
                          "lambda_clamp": True},
}
#: What a study runs unless ``--variants`` says otherwise.
DEFAULT_VARIANTS = list(VARIANTS)
# On request (scripts/table3_algorithms.sh, scripts/figure6_sensitivity.sh): the other
# estimators, and the paper's Figure 6 sweep around its α = 0.75, ρ = 0.2.
VARIANTS.update({
    "rloo": {"algo": "rloo", "paw": False},
    "rloo_paw": {"algo": "rloo", "paw": True},
    "ppo": {"algo": "ppo", "paw": False},
    "ppo_paw": {"algo": "ppo", "paw": True},
    **{f"paw_rho_{rho}": {"algo": "grpo", "paw": True, "rho": rho} for rho in (0.1, 0.5)},
    **{f"paw_alpha_{alpha}": {"algo": "grpo", "paw": True, "alpha": alpha}
       for alpha in (0.25, 0.5, 1.0)},
})
#: (variant, baseline) pairs the report compares.
PAIRS = [("grpo_paw", "grpo"), ("gigpo_paw", "gigpo"), ("paw_ce", "grpo_paw"),
         ("paw_fixed_lambda", "grpo_paw"), ("grpo_std_norm_off", "grpo"),
         ("grpo_entropy", "grpo"), ("paw_sampled_score", "grpo_paw"),
         ("rloo_paw", "rloo"), ("ppo_paw", "ppo"),
         *[(v, "grpo_paw") for v in VARIANTS if v.startswith(("paw_rho_", "paw_alpha_"))]]
RESULTS = Path(__file__).resolve().parent / "results"
#: RL updates per study run: fewer than the regression test's 12, so that variants are compared
#: while they are still learning rather than all at the 100 % ceiling.
STUDY_UPDATES = 8


def build_start(root: Path, epsilon: float = 0.5, steps: int = 500, seed: int = 0,
                env: StudyEnv = SHELF) -> Path:
    """A nano model that reads its prompt: a tokenizer trained on, and next-token pretraining
    over, 1000 noisy-expert episodes (train split). Built once per folder."""
    from agents.tiny_model import build_tiny_model
    from training.pretrain import PretrainConfig, run_pretrain
    from training.sft import record_expert_demos
    from wrappers import WMReplay

    model = root / "base"
    if (model / "config.json").is_file():
        return model
    demos = record_expert_demos(env.id, 1000, root / "demos", seed=seed, epsilon=epsilon,
                                max_steps=env.max_steps, split="train", **PROMPT)
    texts = [r[k] for r in WMReplay.load(demos) for k in ("h", "a", "o_next")]
    tiny = build_tiny_model(texts, root / "init", size="nano", seed=seed)
    run_pretrain(PretrainConfig(model=str(tiny), replay=str(demos), output_dir=str(model),
                                steps=steps, lr=1e-3, batch_size=16, seed=seed, device="cpu",
                                progress=False))
    return model


def held_out_success(policy, env: StudyEnv = SHELF) -> float:
    """% of the 64 held-out tasks won, each played once at the rollout temperature 1.0."""
    from training.evaluate import evaluate

    result = evaluate(policy, env.id, HELD_OUT, split="test", temperature=1.0,
                      max_new_tokens=24, max_steps=env.max_steps, seed=1, **PROMPT)
    return result.row().success


def train_and_evaluate(start: Path, output_dir: Path, seed: int = 0, updates: int = 12,
                       env: StudyEnv = SHELF, **overrides: Any) -> dict[str, Any]:
    """RL from ``start`` (8 tasks × 8 rollouts per update, full fine-tuning at lr 3e-4);
    held-out success before and after, and the per-update training metrics.

    RLOO's advantages are raw leave-one-out returns, in reward units (up to ±R_max = 10), where
    GRPO's, GiGPO's and PPO's are normalised to about ±1; RLOO therefore gets lr 3e-4 / R_max
    (at 3e-4 it gained only 12 points in one seed of the regression test).
    """
    from training.config import TrainConfig
    from training.trainer import PaWTrainer

    algo = overrides.get("algo", "grpo")
    settings = dict(algo=algo, lora=False, n_groups=8, group_size=8,
                    lr=3e-4 / (10.0 if algo == "rloo" else 1.0), mini_batch_size=64)
    config = TrainConfig(
        model=str(start), env_id=env.id, env_kwargs={"split": "train"}, template=TEMPLATE,
        history_length=0, max_episode_steps=env.max_steps, max_new_tokens=24,
        total_steps=updates,
        max_seq_len=512, seed=seed, output_dir=str(output_dir), overwrite_output_dir=True,
        save_every=0, device="cpu",
        progress=False, **{**settings, **overrides})
    trainer = PaWTrainer(config)
    before = held_out_success(trainer.policy, env)
    history = trainer.train()
    return {"before": before, "after": held_out_success(trainer.policy, env),
            "curve": [{k: h[k] for k in ("step", "success", "reward", "action_entropy",
                                         "invalid_frac")} for h in history]}


def results_dir(updates: int = STUDY_UPDATES, env: StudyEnv = SHELF) -> Path:
    """Where runs of ``updates`` RL updates on ``env`` are kept."""
    suffix = "" if updates == STUDY_UPDATES else f"_u{updates}"
    return RESULTS / f"{env.results}{suffix}"


def run_cell(start: str, variant: str, seed: int, work: Path,
             updates: int = STUDY_UPDATES, env: str = "shelf") -> Path:
    """One (start, variant, seed) run, written to :func:`results_dir`; skipped when there."""
    import torch

    study_env = STUDY_ENVS[env]
    path = results_dir(updates, study_env) / f"{start}__{variant}__s{seed}.json"
    if path.is_file():
        return path
    torch.set_num_threads(1)
    model = build_start(work / f"start-{start}", STARTS[start], env=study_env)
    clock = time.process_time()
    result = train_and_evaluate(model, work / "runs" / f"u{updates}" / path.stem, seed=seed,
                                updates=updates, env=study_env, **VARIANTS[variant])
    result.update(start=start, variant=variant, seed=seed, updates=updates,
                  cpu_s=round(time.process_time() - clock, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1), encoding="utf-8")
    return path


def mean_ci(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95 % Student-t confidence interval."""
    from scipy.stats import t

    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, float("nan")
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, t.ppf(0.975, n - 1) * sd / math.sqrt(n)


def report(updates: int = STUDY_UPDATES, env: str = "shelf") -> str:
    """Markdown tables (RL gain per variant; paired differences) and a plot of the curves."""
    folder = results_dir(updates, STUDY_ENVS[env])
    runs: dict[tuple[str, str], dict[int, dict]] = {}
    for path in sorted(folder.glob("*.json")):
        r = json.loads(path.read_text(encoding="utf-8"))
        runs.setdefault((r["start"], r["variant"]), {})[r["seed"]] = r
    lines = []
    for start in STARTS:
        cells = {v: runs.get((start, v), {}) for v in VARIANTS}
        if not any(cells.values()):
            continue
        lines += [f"### start `{start}` (noisy-expert ε = {STARTS[start]})", "",
                  "| variant | seeds | held-out before % | after % | RL gain (pp, 95 % CI) | "
                  "CPU s / run |", "|---|---:|---:|---:|---:|---:|"]
        for variant, by_seed in cells.items():
            if not by_seed:
                continue
            rs = list(by_seed.values())
            gain, half = mean_ci([r["after"] - r["before"] for r in rs])
            lines.append(f"| {variant} | {len(rs)} | {mean_ci([r['before'] for r in rs])[0]:.1f}"
                         f" | {mean_ci([r['after'] for r in rs])[0]:.1f} | {gain:+.1f} ± "
                         f"{half:.1f} | {sum(r['cpu_s'] for r in rs) / len(rs):.0f} |")
        lines += ["", "| paired comparison | seeds | Δ held-out after (pp, 95 % CI) |",
                  "|---|---:|---:|"]
        for variant, baseline in PAIRS:
            seeds = sorted(set(cells[variant]) & set(cells[baseline]))
            if seeds:
                diff, half = mean_ci([cells[variant][s]["after"] - cells[baseline][s]["after"]
                                      for s in seeds])
                lines.append(f"| {variant} − {baseline} | {len(seeds)} | {diff:+.1f} ± "
                             f"{half:.1f} |")
        lines.append("")
    _plot(runs, folder.with_suffix(".png"), STUDY_ENVS[env].id)
    return "\n".join(lines)


def _plot(runs, out: Path, env_id: str) -> None:
    """Training curves per start (a row each): per variant, the mean over seeds with a band of
    ± one sample standard deviation (the seeds' spread, not a confidence interval)."""
    from matplotlib.figure import Figure

    from training.plots import Run, Series, add_series_legend, draw_panel, panel_keys, \
        series_colors

    variants = [v for v in ("grpo", "grpo_paw", "gigpo", "gigpo_paw")
                if any(key[1] == v for key in runs)]
    color_of = dict(zip(variants, series_colors(len(variants))))  # the same in every row
    rows = []
    for start in STARTS:
        series = [Series(variant, tuple(Run(f"s{seed}", tuple(r["curve"]), VARIANTS[variant])
                                        for seed, r in sorted(by_seed.items())))
                  for variant in variants if (by_seed := runs.get((start, variant)))]
        if series:
            rows.append((start, series, panel_keys(series, ("success", "invalid_frac", "reward"))))
    if not rows:
        return
    columns = max(len(keys) for _, _, keys in rows)
    fig = Figure(figsize=(4.5 * columns, 3.4 * len(rows) + 0.6), layout="constrained")
    axes = fig.subplots(len(rows), columns, squeeze=False)
    for row_axes, (start, series, keys) in zip(axes, rows):
        colors = [color_of[one.label] for one in series]
        for ax, key in zip(row_axes, keys):
            draw_panel(ax, key, series, colors, smooth=0.0)  # 8 updates: too few to smooth
            ax.set_title(f"{ax.get_title()}, start {start}", fontsize=10)
        for ax in row_axes[len(keys):]:
            ax.set_visible(False)
    fig.suptitle(f"{env_id}: training curves, mean ± sd over seeds")
    seeds = {v: "/".join(map(str, sorted({len(by_seed) for (_, variant), by_seed in runs.items()
                                          if variant == v}))) for v in variants}
    add_series_legend(fig, [f"{v} ({seeds[v]} seeds)" for v in variants], list(color_of.values()))
    fig.savefig(out, dpi=100)


def world_model_accuracy(env: str, work: Path, updates: int = STUDY_UPDATES) -> str:
    """Next-observation accuracy (``training.pretrain.next_observation_accuracy``) of each run's
    final model and of its start, on held-out transitions: 64 noisy-expert (ε = 0.5) episodes
    on the ``test`` split, the same for every model. PaW's premise is that co-training makes
    the policy a better predictor of o_next; this measures it. Written to
    ``<results>_wm.json``; returns a Markdown table with paired differences."""
    import torch

    from agents.hf_policy import HFPolicy
    from training.checkpoint import latest_checkpoint
    from training.pretrain import next_observation_accuracy
    from training.sft import record_expert_demos

    torch.set_num_threads(1)
    study_env = STUDY_ENVS[env]
    transitions = work / "wm-held-out"
    if not transitions.is_dir():
        record_expert_demos(study_env.id, len(HELD_OUT), transitions, seed=HELD_OUT[0],
                            epsilon=0.5, max_steps=study_env.max_steps, split="test", **PROMPT)
    out = results_dir(updates, study_env).with_name(
        results_dir(updates, study_env).name + "_wm.json")
    scores = json.loads(out.read_text(encoding="utf-8")) if out.is_file() else {}
    for path in sorted(results_dir(updates, study_env).glob("*.json")):
        r = json.loads(path.read_text(encoding="utf-8"))
        start_key = f"{r['start']}__start"
        if start_key not in scores:
            model = build_start(work / f"start-{r['start']}", STARTS[r["start"]], env=study_env)
            scores[start_key] = next_observation_accuracy(HFPolicy(str(model), device="cpu"),
                                                          transitions)
        checkpoint = latest_checkpoint(work / "runs" / f"u{updates}" / path.stem)
        if path.stem not in scores and checkpoint is not None:
            policy = HFPolicy(str(checkpoint / "model"), device="cpu")
            scores[path.stem] = next_observation_accuracy(policy, transitions)
    out.write_text(json.dumps(scores, indent=1), encoding="utf-8")
    lines = ["| model | runs | exact next observation % | token % |", "|---|---:|---:|---:|"]
    for start in STARTS:
        if f"{start}__start" in scores:
            s = scores[f"{start}__start"]
            lines.append(f"| start `{start}` | 1 | {s['exact']:.1f} | {s['token']:.1f} |")
        for variant in VARIANTS:
            runs = [v for k, v in scores.items() if k.startswith(f"{start}__{variant}__s")]
            if runs:
                lines.append(f"| {start} {variant} | {len(runs)} | "
                             f"{mean_ci([r['exact'] for r in runs])[0]:.1f} | "
                             f"{mean_ci([r['token'] for r in runs])[0]:.1f} |")
    lines += ["", "| paired comparison | seeds | Δ exact (pp, 95 % CI) | Δ token (pp, 95 % CI) |",
              "|---|---:|---:|---:|"]
    for start in STARTS:
        for variant, baseline in PAIRS:
            seeds = [s for s in range(100) if f"{start}__{variant}__s{s}" in scores
                     and f"{start}__{baseline}__s{s}" in scores]
            if not seeds:
                continue
            cells = []
            for metric in ("exact", "token"):
                diff, half = mean_ci([scores[f"{start}__{variant}__s{s}"][metric]
                                      - scores[f"{start}__{baseline}__s{s}"][metric]
                                      for s in seeds])
                cells.append(f"{diff:+.1f} ± {half:.1f}")
            lines.append(f"| {start}: {variant} − {baseline} | {len(seeds)} | {cells[0]} | "
                         f"{cells[1]} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="shelf", choices=list(STUDY_ENVS))
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--starts", nargs="+", default=list(STARTS), choices=list(STARTS))
    parser.add_argument("--variants", nargs="+", default=DEFAULT_VARIANTS, choices=list(VARIANTS))
    parser.add_argument("--workers", type=int, default=1, help="parallel runs (1 thread each)")
    parser.add_argument("--work", default=None,
                        help="models and trainer runs (default: runs/<results folder>)")
    parser.add_argument("--updates", type=int, default=STUDY_UPDATES,
                        help="RL updates per run (12: the regression test's budget)")
    parser.add_argument("--report", action="store_true", help="only print the report")
    parser.add_argument("--world-model", action="store_true",
                        help="also score every run's final model as a next-observation predictor")
    args = parser.parse_args(argv)
    if not args.report:
        work = Path(args.work or f"runs/{STUDY_ENVS[args.env].results}")
        for start in args.starts:  # once, before workers race to build it
            build_start(work / f"start-{start}", STARTS[start], env=STUDY_ENVS[args.env])
        # Seed-major order: every variant of seed 0 first, so a cut-short study stays paired.
        cells = [(start, variant, seed) for seed in range(args.seeds) for start in args.starts
                 for variant in args.variants]
        if args.workers > 1:
            from concurrent.futures import ProcessPoolExecutor

            with ProcessPoolExecutor(args.workers) as pool:
                for path in pool.map(run_cell, *zip(*cells), [work] * len(cells),
                                     [args.updates] * len(cells), [args.env] * len(cells)):
                    print("done", path.name, flush=True)
        else:
            for cell in cells:
                print("done", run_cell(*cell, work, args.updates, args.env).name, flush=True)
    print(report(args.updates, args.env))
    if args.world_model:
        work = Path(args.work or f"runs/{STUDY_ENVS[args.env].results}")
        print(world_model_accuracy(args.env, work, args.updates))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
