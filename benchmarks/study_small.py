"""Paired study on the small envs (PaW/Shelf-v0, PaW/FrozenLake-v0, PaW/Sokoban-v0): does RL
raise held-out success, and does PaW help it?

Shelf names the item to buy in a one-line prompt; FrozenLake shows a 4x4 map of ice and holes;
Sokoban a 6x6 room whose boxes must be pushed onto targets (a push into a corner cannot be
undone, so knowing what an action does should matter most there). All three are small enough
for a tiny model on CPU. Every run starts from a *reading start*: a nano model pretrained
(next-token, ``training.warmstart.pretrain``, in the PaW term's serialisation) on transcripts of a noisy
expert that takes a random admissible action with probability ε. ``normal`` uses ε = 0.5;
``sparse`` uses ε = 0.9 (the paper's §4.4 situation: the start rarely wins, most rollout groups
carry no reward). Each run trains one variant for its env's budget of updates and validates on
**every held-out task once** (Shelf: the 48 target item × shelf size tasks of ``test``;
FrozenLake and Sokoban: 100 maps of ``test``) at the paper's validation temperature 0.4 before
the first update and at 25 %, 50 %, 75 % and 100 % of the budget, together with the policy's
next-observation accuracy on held-out transitions (64 noisy-expert episodes of ``test``) in the
run's own ``wm_context`` (``val_wm_exact`` / ``val_wm_token``).

Paired design: a seed fixes the training tasks and the sampling seeds of every variant (and
every variant of a start starts from the same model), so ``variant − baseline`` differences
are taken per seed; the report gives their mean ± 95 % CI (Student t over seeds) at each
milestone, and the RL gain (after − before) of each variant the same way.

    python -m benchmarks.study_small --seeds 10 --workers 2     # Shelf, all cells, resumable
    python -m benchmarks.study_small --env frozenlake --starts normal --variants grpo grpo_paw
    python -m benchmarks.study_small --report                  # tables + plots from results

The envs, starts and the RL run are :mod:`training.presets` (the learning regression test
``tests/test_learning.py`` uses them too).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

from training.presets import (HELD_OUT, PROMPT, SHELF, STARTS, STUDY_ENVS, TEMPLATE, StudyEnv,
                              build_start, held_out_success, held_out_transitions,
                              train_and_evaluate)


VARIANTS: dict[str, dict[str, Any]] = {
    "grpo": {"algo": "grpo", "paw": False},
    "grpo_paw": {"algo": "grpo", "paw": True},
    "gigpo": {"algo": "gigpo", "paw": False},
    "gigpo_paw": {"algo": "gigpo", "paw": True},
    "paw_ce": {"algo": "grpo", "paw": True, "wm_loss": "ce"},
    "paw_fixed_lambda": {"algo": "grpo", "paw": True, "adaptive_coef": False},
    # Where the PaW term sits (agents.serialization); the start is the same for all three.
    "paw_end_of_turn": {"algo": "grpo", "paw": True, "wm_context": "end_of_turn"},
    "paw_none": {"algo": "grpo", "paw": True, "wm_context": "none"},
}
#: What a study runs unless ``--variants`` says otherwise.
DEFAULT_VARIANTS = list(VARIANTS)
# On request (scripts/table3_algorithms.sh, scripts/figure6_sensitivity.sh): the other
# estimators, and the paper's Figure 6 sweep around its α = 0.75, ρ = 0.2.
VARIANTS.update({
    "grpo_std_norm_off": {"algo": "grpo", "paw": False, "norm_adv_by_std": False},
    "grpo_entropy": {"algo": "grpo", "paw": False, "entropy_coef": 0.01},
    "paw_sampled_score": {"algo": "grpo", "paw": True, "entropy_score": "sampled"},
    "rloo": {"algo": "rloo", "paw": False},
    "rloo_paw": {"algo": "rloo", "paw": True},
    "ppo": {"algo": "ppo", "paw": False},
    "ppo_paw": {"algo": "ppo", "paw": True},
    **{f"paw_rho_{rho}": {"algo": "grpo", "paw": True, "rho": rho} for rho in (0.1, 0.5)},
    **{f"paw_alpha_{alpha}": {"algo": "grpo", "paw": True, "alpha": alpha}
       for alpha in (0.25, 0.5, 1.0)},
    # Issue 49: the PaW term without the groups that carry no advantage signal, or without the
    # invalid actions (whose next observation is the env's error text); and a run that rolls
    # back to its best checkpoint when it collapses (training.infra.collapse).
    **{f"{algo}_paw_{name}": {"algo": algo, "paw": True, field: False}
       for algo in ("grpo", "gigpo")
       for name, field in (("signal", "wm_zero_signal_groups"), ("valid", "wm_invalid_actions"))},
    **{f"{variant}_rollback": {"algo": algo, "paw": paw, "save_every": 1, "keep_checkpoints": 1,
                               "on_collapse": "rollback"}
       for variant, algo, paw in (("grpo", "grpo", False), ("grpo_paw", "grpo", True))},
})
#: (variant, baseline) pairs the report compares.
PAIRS = [("grpo_paw", "grpo"), ("gigpo_paw", "gigpo"), ("paw_ce", "grpo_paw"),
         ("paw_fixed_lambda", "grpo_paw"), ("paw_end_of_turn", "grpo_paw"),
         ("paw_none", "grpo_paw"), ("paw_none", "grpo"), ("grpo_std_norm_off", "grpo"),
         ("grpo_entropy", "grpo"), ("paw_sampled_score", "grpo_paw"),
         ("rloo_paw", "rloo"), ("ppo_paw", "ppo"),
         *[(v, "grpo_paw") for v in VARIANTS if v.startswith(("paw_rho_", "paw_alpha_"))],
         ("grpo_paw_signal", "grpo_paw"), ("grpo_paw_valid", "grpo_paw"),
         ("gigpo_paw_signal", "gigpo_paw"), ("gigpo_paw_valid", "gigpo_paw"),
         ("grpo_rollback", "grpo"), ("grpo_paw_rollback", "grpo_paw")]
RESULTS = Path(__file__).resolve().parent / "results"


def profile_start(name: str, work: Path, env: StudyEnv = SHELF) -> dict[str, Any]:
    """What start ``name`` knows before any RL, kept in ``<results>_starts/<name>.json``: its reading
    probe (expert action ranked first on the held-out reset prompts), held-out success (every
    task once, as validation measures it), its next-observation accuracy on the held-out
    transitions (:func:`training.warmstart.pretrain.next_observation_accuracy`, ``next_turn``) and the
    CPU seconds its build took (when built by this call)."""
    import torch

    from agents.hf_policy import HFPolicy
    from training.warmstart.pretrain import next_observation_accuracy, reading_probe

    path = RESULTS / f"{env.results}_starts" / f"{name}.json"
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    torch.set_num_threads(1)
    clock = time.process_time()
    model = build_start(work / f"start-{name}", STARTS[name], env=env)
    build_s = time.process_time() - clock
    policy = HFPolicy(str(model), device="cpu", seed=0)
    wm = next_observation_accuracy(policy, held_out_transitions(work, env), 512)
    profile = {"start": name, "recipe": STARTS[name].describe(),
               "reading_probe": 100 * reading_probe(policy, env.id, HELD_OUT, split="test",
                                                    **PROMPT),
               "held_out_success": held_out_success(policy, env),
               **{f"wm_{key}": value for key, value in wm.items()},
               "build_cpu_s": round(build_s, 1) if build_s > 1 else None}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(profile, indent=1), encoding="utf-8")
    return profile


def study_name(updates: int, env: StudyEnv = SHELF, mini_batch_size: int = 0) -> str:
    """``<results>_u<N>``, plus ``_mb<M>`` for runs that took PPO mini-batches of M
    transitions (several optimizer steps per update) instead of one step per update."""
    return f"{env.results}_u{updates}" + (f"_mb{mini_batch_size}" if mini_batch_size else "")


def results_dir(updates: int, env: StudyEnv = SHELF, mini_batch_size: int = 0) -> Path:
    """Where the result files of one study setting are kept."""
    return RESULTS / study_name(updates, env, mini_batch_size)


def run_cell(start: str, variant: str, seed: int, work: Path, updates: int,
             env: str = "shelf", mini_batch_size: int = 0) -> Path:
    """One (start, variant, seed) run, written to :func:`results_dir`; skipped when there."""
    import torch

    study_env = STUDY_ENVS[env]
    path = results_dir(updates, study_env, mini_batch_size) / f"{start}__{variant}__s{seed}.json"
    if path.is_file():
        return path
    torch.set_num_threads(1)
    model = build_start(work / f"start-{start}", STARTS[start], env=study_env)
    clock = time.process_time()
    result = train_and_evaluate(model, run_dir(work, path.parent.name, path.stem), seed=seed,
                                updates=updates, env=study_env,
                                wm_transitions=held_out_transitions(work, study_env),
                                mini_batch_size=mini_batch_size, **VARIANTS[variant])
    result.update(start=start, variant=variant, seed=seed, updates=updates,
                  mini_batch_size=mini_batch_size, cpu_s=round(time.process_time() - clock, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1), encoding="utf-8")
    return path


def run_dir(work: Path, setting: str, name: str) -> Path:
    """The trainer's output folder of a study run (metrics.jsonl, config.yaml, checkpoint);
    ``setting`` is the run's :func:`study_name`."""
    return work / "runs" / setting / name


def mean_ci(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95 % Student-t confidence interval."""
    from scipy.stats import t

    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, float("nan")
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, t.ppf(0.975, n - 1) * sd / math.sqrt(n)


def load_runs(updates: int, env: StudyEnv, mini_batch_size: int = 0
              ) -> dict[tuple[str, str], dict[int, dict]]:
    """The results of one study setting: {(start, variant): {seed: result}}."""
    runs: dict[tuple[str, str], dict[int, dict]] = {}
    for path in sorted(results_dir(updates, env, mini_batch_size).glob("*.json")):
        r = json.loads(path.read_text(encoding="utf-8"))
        runs.setdefault((r["start"], r["variant"]), {})[r["seed"]] = r
    return runs


def at(result: dict, fraction: float, key: str = "success") -> float | None:
    """The validation value of ``key`` at ``fraction`` of the run's budget (0: the start)."""
    step = round(fraction * result["updates"])
    return next((v.get(key) for v in result["val"] if v["step"] == step), None)


QUARTERS = (0.25, 0.5, 1.0)


def report(env: str = "shelf", updates: int | None = None, mini_batch_size: int = 0) -> str:
    """Markdown per start: held-out success at 0, 25, 50 and 100 % of the budget and the gain,
    the world model's next-observation accuracy before and after; then paired differences at
    the same points."""
    study_env = STUDY_ENVS[env]
    updates = updates or study_env.updates
    runs = load_runs(updates, study_env, mini_batch_size)
    steps = (f"PPO mini-batches of {mini_batch_size}" if mini_batch_size
             else "one optimizer step per update")
    lines = []
    for start in STARTS:
        cells = {v: runs.get((start, v), {}) for v in VARIANTS}
        if not any(cells.values()):
            continue
        lines += [f"### `{study_env.id}`, start `{start}` ({STARTS[start].describe()}), "
                  f"{updates} updates, {steps}", "",
                  "| variant | seeds | held-out % at 0 | 25 % | 50 % | 100 % | gain (pp, 95 % CI) "
                  "| WM exact % start → end | WM token % start → end | WM changed tokens % "
                  "start → end | CPU s / run |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for variant, by_seed in cells.items():
            if not by_seed:
                continue
            rs = list(by_seed.values())
            mean = lambda f, key="success": mean_ci([at(r, f, key) for r in rs])[0]  # noqa: E731
            gain, half = mean_ci([r["after"] - r["before"] for r in rs])
            wm = lambda key: (f"{mean(0, key):.1f} → {mean(1, key):.1f}"  # noqa: E731
                              if all(at(r, f, key) is not None for r in rs for f in (0, 1))
                              else "–")
            lines.append(
                f"| {variant} | {len(rs)} | " + " | ".join(f"{mean(f):.1f}" for f in (0, *QUARTERS))
                + f" | {gain:+.1f} ± {half:.1f} | {wm('wm_exact')} | {wm('wm_token')} | "
                f"{wm('wm_token_changed')} | {sum(r['cpu_s'] for r in rs) / len(rs):.0f} |")
        lines += ["", "| paired comparison | seeds | Δ held-out 25 % | Δ 50 % | Δ 100 % (pp, 95 % "
                  "CI) | Δ WM exact at 100 % | Δ WM token at 100 % |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for variant, baseline in PAIRS:
            seeds = sorted(set(cells.get(variant, {})) & set(cells.get(baseline, {})))
            if len(seeds) < 2:
                continue

            def diff(fraction: float, key: str = "success") -> str:
                d, h = mean_ci([at(cells[variant][s], fraction, key)
                                - at(cells[baseline][s], fraction, key) for s in seeds])
                return f"{d:+.1f} ± {h:.1f}"
            lines.append(f"| {variant} − {baseline} | {len(seeds)} | "
                         + " | ".join(diff(f) for f in QUARTERS)
                         + f" | {diff(1, 'wm_exact')} | {diff(1, 'wm_token')} |")
        lines += ["", *per_seed_lines(cells), *coverage_table(cells), ""]
    return "\n".join(start_table(study_env) + lines)


def per_seed_lines(cells: dict[str, dict[int, dict]]) -> list[str]:
    """Every seed's end point for the estimator pairs (vanilla → PaW): held-out success %, and
    the next-observation token accuracy % in brackets."""
    lines = []
    for variant, baseline in PAIRS[:2]:
        seeds = sorted(set(cells.get(variant, {})) & set(cells.get(baseline, {})))
        if not seeds:
            continue
        ends = [f"s{s} {cells[baseline][s]['after']:.0f} → {cells[variant][s]['after']:.0f} "
                f"({at(cells[baseline][s], 1, 'wm_token'):.1f} → "
                f"{at(cells[variant][s], 1, 'wm_token'):.1f})" for s in seeds]
        lines += [f"Per seed, held-out % at the end, {baseline} → {variant} (next-observation "
                  f"token accuracy % in brackets): " + ", ".join(ends) + ".", ""]
    return lines


def start_table(env: StudyEnv) -> list[str]:
    """What each profiled start knows before RL (:func:`profile_start`), one row per start."""
    profiles = [json.loads(path.read_text(encoding="utf-8"))
                for path in sorted((RESULTS / f"{env.results}_starts").glob("*.json"))]
    if not profiles:
        return []
    lines = [f"### `{env.id}`: the starts before RL", "",
             "| start | recipe | reading probe % | held-out success % | WM exact % | WM token % "
             "| kept tokens % | changed tokens % | build CPU s |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for p in sorted(profiles, key=lambda p: list(STARTS).index(p["start"])):
        lines.append(f"| {p['start']} | {p['recipe']} | {p['reading_probe']:.1f} | "
                     f"{p['held_out_success']:.1f} | {p['wm_exact']:.1f} | {p['wm_token']:.1f} | "
                     f"{p['wm_token_kept']:.1f} | {p['wm_token_changed']:.1f} | "
                     f"{p['build_cpu_s'] or '–'} |")
    return [*lines, ""]


#: Where the PaW term's coverage is read: the updates of each quarter of the budget.
COVERAGE = (("lambda_mean", "λ_g mean", 1.0), ("wm_trained_frac", "transitions trained %", 100.0),
            ("wm_active_tokens", "tokens with a gradient / update", 1.0),
            ("wm_clipped_frac", "tokens clipped (p > ρ) %", 100.0))


def coverage_table(cells: dict[str, dict[int, dict]]) -> list[str]:
    """How much the PaW term trained on in each quarter of the budget (``q1 / q2 / q3 / q4``):
    the mean over the quarter's updates and the seeds of λ_g, the share of transitions with a
    WM weight, the observation tokens CMAE puts a gradient on, and the share it clips. Runs
    recorded before these metrics were logged show '–'."""
    lines = ["| PaW variant, by quarter of the budget | "
             + " | ".join(label for _, label, _ in COVERAGE) + " |",
             "|---|" + "---:|" * len(COVERAGE)]
    for variant, by_seed in cells.items():
        if not by_seed or not VARIANTS[variant].get("paw"):
            continue
        row = []
        for key, _, scale in COVERAGE:
            quarters = []
            for quarter in range(4):
                values = [scale * h[key] for r in by_seed.values() for h in r["curve"]
                          if key in h and quarter / 4 < h["step"] / r["updates"] <= (quarter + 1) / 4]
                quarters.append(f"{sum(values) / len(values):.2f}" if values else "–")
            row.append(" / ".join(quarters) if any(q != "–" for q in quarters) else "–")
        lines.append(f"| {variant} | " + " | ".join(row) + " |")
    return lines if len(lines) > 2 else []


#: Variants drawn in the seed-band figures.
PLOTTED = ("grpo", "grpo_paw", "gigpo", "gigpo_paw", "paw_end_of_turn", "paw_none")


def plot(env: str, work: Path, updates: int | None = None, out_dir: Path = RESULTS,
         mini_batch_size: int = 0) -> list[Path]:
    """``paw-gym plot --group`` of every start's runs: held-out success and next-observation
    accuracy (validation), training success and the leak metric, mean ± sd over seeds; one
    figure per start, ``<out_dir>/<study_name>_<start>.png``."""
    from training.cli import main as paw_gym

    study_env = STUDY_ENVS[env]
    updates = updates or study_env.updates
    setting = study_name(updates, study_env, mini_batch_size)
    written = []
    for start in STARTS:
        groups = [f"{variant}={run_dir(work, setting, f'{start}__{variant}__s')}*"
                  for variant in PLOTTED
                  if list(run_dir(work, setting, "").glob(f"{start}__{variant}__s*"))]
        if not groups:
            continue
        out = out_dir / f"{setting}_{start}.png"
        argv = ["plot", *[arg for group in groups for arg in ("--group", group)],
                "--metrics", "val_success,val_wm_exact,success,wm_leak", "--smooth", "0",
                "--title", f"{study_env.id}, start {start}: mean ± sd over seeds",
                "--out", str(out), "--overwrite", "true"]
        if paw_gym(argv) == 0:
            written.append(out)
    return written


#: The pilot's seed: outside every study's seeds, so the budget is not chosen on them.
PILOT_SEED = 100


def pilot(env: str, work: Path, updates: int) -> Path:
    """Vanilla GRPO from the normal start for ``updates`` updates on :data:`PILOT_SEED`,
    without validation: the per-update training success from which the env's budget is chosen
    (where it levels off). Written to ``<results>_pilot.json``."""
    import torch

    from training.config import TrainConfig
    from training.trainer import PaWTrainer

    torch.set_num_threads(1)
    study_env = STUDY_ENVS[env]
    start = build_start(work / "start-normal", STARTS["normal"], env=study_env)
    config = TrainConfig(
        model=str(start), env_id=study_env.id, env_kwargs={"split": "train"}, template=TEMPLATE,
        history_length=0, max_episode_steps=study_env.max_steps, max_new_tokens=24,
        total_steps=updates, max_seq_len=512, seed=PILOT_SEED, lora=False, n_groups=8,
        group_size=8, lr=3e-4, mini_batch_size=64, algo="grpo", paw=False,
        output_dir=str(work / "pilot"), overwrite=True, save_every=0, device="cpu",
        progress=False, log_every=0)
    clock = time.process_time()
    history = PaWTrainer(config).train()
    out = RESULTS / f"{study_env.results}_pilot.json"
    out.write_text(json.dumps({"env": study_env.id, "seed": PILOT_SEED, "updates": updates,
                               "cpu_s": round(time.process_time() - clock, 1),
                               "success": [round(h["success"], 4) for h in history]}, indent=1),
                   encoding="utf-8")
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="shelf", choices=list(STUDY_ENVS))
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--starts", nargs="+", default=list(STARTS), choices=list(STARTS))
    parser.add_argument("--variants", nargs="+", default=DEFAULT_VARIANTS, choices=list(VARIANTS))
    parser.add_argument("--workers", type=int, default=1, help="parallel runs (1 thread each)")
    parser.add_argument("--work", default=None,
                        help="models and trainer runs (default: runs/<results folder>)")
    parser.add_argument("--updates", type=int, default=None,
                        help="RL updates per run (default: the env's budget)")
    parser.add_argument("--mini-batch-size", type=int, default=0,
                        help="PPO mini-batch in transitions; 0 (default): one optimizer step on "
                        "the whole rollout per update, as the main job (issue 25)")
    parser.add_argument("--report", action="store_true", help="only print the report")
    parser.add_argument("--profile", action="store_true",
                        help="only build and profile the --starts (reading probe, held-out "
                        "success, next-observation accuracy before RL)")
    parser.add_argument("--pilot", type=int, default=None, metavar="N",
                        help="only run the budget pilot: vanilla GRPO for N updates on seed "
                        f"{PILOT_SEED}, printing its training success per update")
    args = parser.parse_args(argv)
    study_env = STUDY_ENVS[args.env]
    updates = args.updates or study_env.updates
    work = Path(args.work or f"runs/{study_env.results}")
    if args.pilot:
        path = pilot(args.env, work, args.pilot)
        print(path.read_text(encoding="utf-8"))
        return 0
    if args.profile:
        for start in args.starts:
            print(json.dumps(profile_start(start, work, study_env)), flush=True)
        return 0
    if not args.report:
        for start in args.starts:  # once, before workers race to build them
            profile_start(start, work, study_env)
        # Seed-major order: every variant of seed 0 first, so a cut-short study stays paired.
        cells = [(start, variant, seed)
                 for seed in range(args.first_seed, args.first_seed + args.seeds)
                 for start in args.starts for variant in args.variants]
        if args.workers > 1:
            from concurrent.futures import ProcessPoolExecutor

            with ProcessPoolExecutor(args.workers) as pool:
                for path in pool.map(run_cell, *zip(*cells), [work] * len(cells),
                                     [updates] * len(cells), [args.env] * len(cells),
                                     [args.mini_batch_size] * len(cells)):
                    print("done", path.name, flush=True)
        else:
            for cell in cells:
                print("done", run_cell(*cell, work, updates, args.env,
                                                args.mini_batch_size).name, flush=True)
    print(report(args.env, updates, args.mini_batch_size))
    if work.is_dir():
        for path in plot(args.env, work, updates, mini_batch_size=args.mini_batch_size):
            print("wrote", path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
