"""Reproduction study at tiny scale: does PaW help GRPO / GiGPO on embedded WebShop and ALFWorld?

Every run starts from the same warm start of the tiny model (SFT on expert demos), trains with
one variant for the same budget, and is evaluated on held-out tasks per task type. Runs are
independent and resumable: a finished run's result is written at once to
``benchmarks/results/study/<env>__<start>__<variant>__s<seed>.json`` and skipped next time; an
interrupted run continues from its last trainer checkpoint.

Variants (the paper's Tables 1 and 4): ``grpo``, ``grpo_paw``, ``gigpo``, ``gigpo_paw``,
``paw_no_adaptive`` (GRPO + PaW with λ_g ≡ 1), ``paw_ce`` (GRPO + PaW with CE instead of CMAE).
Starts: ``sft`` (the regular warm start) and ``weak`` (the sparse-reward case of §4.4: a
warm start from very few demos, where GRPO sees almost no positive reward).

    python -m benchmarks.study_learning --phase main            # GRPO vs GRPO+PaW, 3 seeds
    python -m benchmarks.study_learning --phase all --workers 2 # everything, in priority order
    python -m benchmarks.study_learning --quick                 # a 2-step smoke version
    python -m benchmarks.study_report                           # tables + plots from results
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks import common as C

VARIANTS: dict[str, dict] = {
    "grpo": {"algo": "grpo", "paw": False},
    "grpo_paw": {"algo": "grpo", "paw": True},
    "gigpo": {"algo": "gigpo", "paw": False},
    "gigpo_paw": {"algo": "gigpo", "paw": True},
    "paw_no_adaptive": {"algo": "grpo", "paw": True, "adaptive_coef": False},
    "paw_ce": {"algo": "grpo", "paw": True, "wm_loss": "ce"},
}
#: Warm starts: (SFT epochs, expert episodes used; None = all).
STARTS: dict[str, tuple[int, int | None]] = {"sft": (2, None), "weak": (1, 20)}
#: Phases in priority order: (envs, start, variants).
PHASES: dict[str, list[tuple[tuple[str, ...], str, tuple[str, ...]]]] = {
    "main": [(("webshop", "alfworld"), "sft", ("grpo", "grpo_paw"))],
    "gigpo": [(("webshop", "alfworld"), "sft", ("gigpo", "gigpo_paw"))],
    "ablations": [(("webshop", "alfworld"), "sft", ("paw_no_adaptive", "paw_ce"))],
    "sparse": [(("webshop",), "weak", ("grpo", "grpo_paw"))],
}
PHASE_ORDER = ("main", "sparse", "gigpo", "ablations")
#: Tiny-scale RL budget per env (same for every variant).
#: mini_batch_size 16: ~4 PPO optimizer steps per update, so the ratio moves and can clip.
BUDGET = {"webshop": dict(n_groups=2, group_size=4, total_steps=8, mini_batch_size=16),
          "alfworld": dict(n_groups=2, group_size=4, total_steps=8, max_episode_steps=15,
                           mini_batch_size=16)}
RL_LR = 1e-3
EVAL_EPISODES = {"webshop": 60, "alfworld": 36}


@dataclass(frozen=True)
class Run:
    env: str
    start: str
    variant: str
    seed: int

    @property
    def name(self) -> str:
        return f"{self.env}__{self.start}__{self.variant}__s{self.seed}"


def results_dir(quick: bool) -> Path:
    return C.RESULTS / ("study_quick" if quick else "study")


def start_model(env: str, start: str, quick: bool = False) -> Path:
    """The warm start; ``--quick`` uses the cheap weak one for every start."""
    epochs, episodes = STARTS["weak" if quick else start]
    return C.warm_start(env, epochs, episodes=episodes)


def evaluate_start(env: str, start: str, quick: bool) -> dict:
    """The warm start's own held-out table (the "before RL" row), computed once."""
    from training.evaluate import load_policy

    path = results_dir(quick) / f"{env}__{start}__init.json"
    if path.is_file():
        return C.load_json(path)
    episodes = 8 if quick else EVAL_EPISODES[env]
    result = C.evaluate_policy(load_policy(checkpoint=start_model(env, start, quick), device="cpu"),
                               env, episodes, max_steps=_max_steps(env))
    data = {"run": {"env": env, "start": start, "variant": "init"}, "eval": result.to_dict(),
            "machine": C.machine()}
    C.write_json(path, data)
    return data


def _max_steps(env: str) -> int:
    return BUDGET[env].get("max_episode_steps", C.PRESETS[env].max_steps)


def run_one(run: Run, quick: bool) -> str:
    """Train and evaluate one run unless its result exists; returns a one-line status."""
    import torch

    from training.infra.checkpoint import latest_checkpoint
    from training.trainer import PaWTrainer

    C.set_threads(1)
    path = results_dir(quick) / f"{run.name}.json"
    if path.is_file():
        return f"{run.name}: done before"
    start = time.time()
    try:
        model = start_model(run.env, run.start, quick)
        budget = dict(BUDGET[run.env])
        if quick:
            budget.update(n_groups=1, group_size=2, total_steps=2)
        out = C.CACHE / ("study_quick" if quick else "study") / run.name
        config = C.train_config(run.env, model, out, seed=run.seed, lr=RL_LR, save_every=2,
                                **budget, **VARIANTS[run.variant])
        trainer = PaWTrainer(config)
        resume = latest_checkpoint(out) is not None
        trainer.train(resume=resume)
        from training.infra.metrics_log import read_metrics

        history = read_metrics(out / "metrics.jsonl")
        episodes = 8 if quick else EVAL_EPISODES[run.env]
        torch.manual_seed(run.seed)
        result = C.evaluate_policy(trainer.policy, run.env, episodes, seed=run.seed,
                                   max_steps=config.max_episode_steps)
        keep = ("reward", "success", "lambda_mean", "wm_loss", "wm_clipped_frac", "clip_frac",
                "action_entropy", "policy_loss", "invalid_frac", "episode_length", "step_time",
                "rollout_time", "update_time", "tokens_per_s", "transitions")
        C.write_json(path, {
            "run": asdict(run), "config": {k: v for k, v in vars(config).items()},
            "eval": result.to_dict(), "resumed": resume,
            "history": [{k: h.get(k) for k in ("step",) + keep} for h in history],
            "wall_s": time.time() - start, "machine": C.machine()})
        return (f"{run.name}: success {result.row().success:.1f} % score "
                f"{result.row().score:.1f} ({time.time() - start:.0f} s)")
    except Exception:  # one broken run must not stop the study; it is retried next time
        return f"{run.name}: FAILED\n{traceback.format_exc()}"


def planned_runs(phases: list[str], seeds: int, envs: list[str] | None) -> list[Run]:
    runs = []
    for phase in phases:
        for phase_envs, start, variants in PHASES[phase]:
            for seed in range(seeds):
                for env in phase_envs:
                    if envs and env not in envs:
                        continue
                    runs += [Run(env, start, v, seed) for v in variants]
    return runs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--phase", nargs="+", default=["main"],
                        choices=list(PHASE_ORDER) + ["all"])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--envs", nargs="+", default=None, choices=sorted(C.PRESETS))
    parser.add_argument("--workers", type=int, default=1, help="runs in parallel (1 thread each)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke version: WebShop, 1 seed, main phase, 2 tiny steps, weak "
                             "warm start, 8 eval tasks")
    args = parser.parse_args(argv)
    phases = list(PHASE_ORDER) if "all" in args.phase else args.phase
    seeds = 1 if args.quick else args.seeds
    envs = args.envs or (["webshop"] if args.quick else None)  # ALFWorld demos take minutes
    runs = planned_runs(phases, seeds, envs)
    C.set_threads(1)
    # Warm starts and their "before" tables first (shared by all runs; built once).
    for env, start in dict.fromkeys((r.env, r.start) for r in runs):
        print(f"[study] warm start {env}/{start}: {start_model(env, start, args.quick)}",
              flush=True)
        init = evaluate_start(env, start, args.quick)
        overall = init["eval"]["rows"][-1]
        print(f"[study] {env}/{start} before RL: success {overall['success']:.1f} %", flush=True)
    todo = [r for r in runs if not (results_dir(args.quick) / f"{r.name}.json").is_file()]
    print(f"[study] {len(runs)} runs planned, {len(runs) - len(todo)} done, {len(todo)} to run",
          flush=True)
    if args.workers > 1:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(args.workers, mp_context=mp.get_context("spawn")) as pool:
            futures = [pool.submit(run_one, run, args.quick) for run in todo]
            for future in as_completed(futures):
                print(f"[study] {future.result()}", flush=True)
    else:
        for run in todo:
            print(f"[study] {run_one(run, args.quick)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
