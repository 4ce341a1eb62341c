"""Asynchronous rollouts on the main job (issues 40, 49): updates per hour, learning, and the
replay of the update that broke the corrected runs.

The main job is ``paw-gym demo``'s RL stage: GRPO + PaW on PaW/Shelf-v0, 8 tasks × 8 episodes
per update, 20 updates, one optimizer step per update, from the seed's pretrained nano base
(``benchmarks.demo_seeds`` builds and caches the demos and the bases). Variants (``VARIANTS``):

* ``sync``: the trainer as the demo runs it; ``sync_corrected``: with ``token_truncate``;
* ``async1`` / ``async2``: ``async_rollouts`` with ``max_staleness`` 1 / 2 and
  ``rollout_correction: sampler_clip``; ``async1_uncorrected`` / ``async2_uncorrected``:
  without a correction. (``async1_token_truncate`` / ``async2_token_truncate``, measured before
  issue 49, are refused by the config now; their results stay in the report, and ``--replay``
  reproduces them in one process.)

Parts:

* ``--throughput``: seed 0's base, ``--updates`` updates of each variant without validation,
  in ``--rounds`` rounds whose variant order rotates; every process on one torch thread; at
  learning rate 0, so that every variant samples and trains the same tokens from the same
  seeds (with learning, an async run's stale rollouts are longer: 20–30 % more tokens than the
  sync run's on updates 2–8, which its step times would count as slowness). Per run, over its
  updates but the first (which waits for the worker to start): the sum and the medians of the
  step time, the rollout's and the update's (``rollout_time``, ``update_time``: in ``sync``
  each runs alone, in async side by side), seconds per 1,000 generated and trained tokens, and
  an async run's own ``async_speedup`` (:class:`training.rl.async_rollout.Overlap`, over the
  same updates). Per round, each async variant's measured speed-up (``sync``'s summed step
  time over its own) and its own figure over that; the load average before and after each
  run.
* ``--cores``: the machine itself: a single-thread matmul loop alone and two side by side,
  alternated over rounds: whether two processes slow each other down here, whatever they run.
* ``--learning``: seeds 0..N−1, each variant's RL stage from the seed's base, then the demo's
  own held-out evaluation (``training.demo.evaluate_held_out``: 48 tasks × 4, temperature
  0.4): held-out success after RL, paired per seed; the report gives each variant's mean and
  the paired difference with its 95 % CI, and the CPU time. A run's result is one JSON file in
  ``benchmarks/results/async_rollouts/``; existing ones are skipped, so the script resumes.
* ``--replay``: ``async_rollouts``' schedule with ``token_truncate`` on ``--seed`` (2), in one
  process (:class:`StaleCollector`), up to the update after which the rollouts fail (the first
  rollout below half the best so far, sampled by the weights that update made); then that
  update again from the same weights, optimizer state and stale rollout, under each objective of
  ``REPLAYS``, each followed by two rollouts of the next updates' tasks with the new weights;
  and at that update, the RL gradient split by token class.

    python -m benchmarks.async_rollouts --throughput --rounds 3 --updates 10
    python -m benchmarks.async_rollouts --throughput --rounds 1 --updates 4 \
        --config configs/real/shelf_smollm2_grpo_paw.yaml --init_checkpoint runs/real/shelf-sft
    python -m benchmarks.async_rollouts --cores
    python -m benchmarks.async_rollouts --learning --seeds 10 --variants sync async1 async2
    python -m benchmarks.async_rollouts --replay
    python -m benchmarks.async_rollouts --report
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import os
import resource
import statistics
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results" / "async_rollouts"
WORK = Path(__file__).resolve().parents[1] / "runs" / "async_rollouts"
VARIANTS: dict[str, dict[str, Any]] = {
    "sync": {},
    "sync_corrected": {"rollout_correction": "token_truncate"},
    "async1": {"async_rollouts": True, "max_staleness": 1, "rollout_correction": "sampler_clip"},
    "async2": {"async_rollouts": True, "max_staleness": 2, "rollout_correction": "sampler_clip"},
    "async1_uncorrected": {"async_rollouts": True, "max_staleness": 1},
    "async2_uncorrected": {"async_rollouts": True, "max_staleness": 2},
}
#: (variant, baseline) pairs of the report.
PAIRS = (("async1_uncorrected", "sync"), ("async1", "sync"), ("async1", "async1_uncorrected"),
         ("async1_token_truncate", "async1_uncorrected"), ("sync_corrected", "sync"),
         ("async2_uncorrected", "sync"), ("async2", "sync"), ("async2", "async2_uncorrected"),
         ("async2_token_truncate", "async2_uncorrected"))


def cpu_seconds() -> float:
    """CPU time of this process and its finished children (the rollout worker)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def rl_stage(seed: int, variant: str, output_dir: Path, **changes: Any):
    """The demo's RL TrainConfig of ``seed`` from its cached base, in ``variant``."""
    from dataclasses import replace

    from benchmarks.demo_seeds import build_base, record_demos
    from training.demo import DemoConfig, rl_config

    record_demos(seed)
    base = Path(build_base(seed, "next_turn")) / "model"
    config = rl_config(DemoConfig(seed=seed), base, output_dir)
    return replace(config, **VARIANTS[variant], **changes)


#: Per-update metrics a learning run keeps.
CURVE_KEYS = ("step", "success", "val_success", "invalid_frac", "zero_advantage_groups",
              "staleness", "rollout_logprob_gap", "rollout_weight_mean", "rollout_corrected_frac",
              "clip_frac", "step_time", "async_speedup")


def learning_run(variant: str, seed: int) -> Path:
    """One RL stage and its held-out evaluation; its result file."""
    import torch

    from training.infra.metrics_log import read_metrics
    from training.trainer import PaWTrainer

    path = RESULTS / f"{variant}__s{seed}.json"
    if path.is_file():
        return path
    torch.set_num_threads(1)
    out = WORK / f"{variant}__s{seed}"
    config = rl_stage(seed, variant, out)
    cpu, wall = cpu_seconds(), time.perf_counter()
    trainer = PaWTrainer(config)
    trainer.train()
    train_wall = time.perf_counter() - wall
    from training.demo import DemoConfig, evaluate_held_out

    row = evaluate_held_out(trainer.policy, DemoConfig(seed=seed)).row()
    after = {"success": row.success, "invalid": row.invalid}
    rows = read_metrics(out / "metrics.jsonl")
    result = {"variant": variant, "seed": seed, "settings": VARIANTS[variant],
              "after": after["success"], "invalid_after": after["invalid"],
              "step_time_median": statistics.median(r["step_time"] for r in rows[1:]),
              "train_wall_s": round(train_wall, 1),
              "curve": [{k: r[k] for k in CURVE_KEYS if k in r} for r in rows],
              "cpu_s": round(cpu_seconds() - cpu, 1),
              "wall_s": round(time.perf_counter() - wall, 1)}
    RESULTS.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1), encoding="utf-8")
    print(f"{variant} seed {seed}: held-out {after['success']:.1f} %, "
          f"{result['step_time_median']:.1f} s per update", flush=True)
    return path


def _phases(history: list[dict[str, Any]]) -> dict[str, float]:
    """A run's updates but the first (which waits for the worker to start): summed step time,
    the medians of each phase, the seconds per 1,000 tokens and an async run's own figure."""
    rows = history[1:]
    run = {"step_time_sum": sum(r["step_time"] for r in rows)}
    run.update({key: statistics.median(r[key] for r in rows)
                for key in ("step_time", "rollout_time", "update_time")})
    generated = sum(r["gen_tokens_per_s"] * r["rollout_time"] for r in rows)
    trained = sum(r["tokens_per_s"] * r["update_time"] for r in rows)
    run.update(rollout_s_per_1k_generated=1000 * sum(r["rollout_time"] for r in rows) / generated,
               update_s_per_1k_trained=1000 * sum(r["update_time"] for r in rows) / trained,
               generated_tokens=generated, trained_tokens=trained)
    if "async_speedup" in rows[-1]:
        run["async_speedup"] = rows[-1]["async_speedup"]  # the run's own, cumulative
        run["sync_step_estimate"] = statistics.median(r["sync_step_estimate"] for r in rows
                                                      if "sync_step_estimate" in r)
    return run


def real_stage(config_path: str, init_checkpoint: str | None, variant: str, output_dir: Path,
               **changes: Any):
    """A real-model recipe's TrainConfig (``configs/real/*.yaml``) from its SFT adapter, in
    ``variant``."""
    from dataclasses import replace

    from training.config import load_config

    overrides = {"output_dir": str(output_dir), "overwrite": True, "progress": False}
    if init_checkpoint:
        overrides["init_checkpoint"] = init_checkpoint
    return replace(load_config(config_path, overrides), **VARIANTS[variant], **changes)


def throughput(rounds: int, updates: int, variants: list[str], config: str | None = None,
               init_checkpoint: str | None = None) -> dict[str, Any]:
    """Each variant's phases per round (rotating order, the same work: learning rate 0), the
    load around each run, and each async variant's measured speed-up over ``sync`` beside its
    own figure. ``config``: a real-model recipe (from ``init_checkpoint``) instead of the main
    job."""
    import torch

    from benchmarks.common import machine
    from training.trainer import PaWTrainer

    torch.set_num_threads(1)
    runs: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
    for r in range(rounds):
        order = variants[r % len(variants):] + variants[:r % len(variants)]
        for variant in order:
            same_work = dict(total_steps=updates, val_every=0, val_before_train=False,
                             record_replay=False, lr=0.0)
            stage = (rl_stage(0, variant, WORK / f"throughput-{variant}", **same_work)
                     if config is None else
                     real_stage(config, init_checkpoint, variant,
                                WORK / f"throughput-real-{variant}", **same_work))
            before = os.getloadavg()[0]
            run = _phases(PaWTrainer(stage).train())
            run.update(load_before=before, load_after=os.getloadavg()[0])
            runs[variant].append(run)
            print(f"round {r + 1} {variant}: " + ", ".join(f"{k} {v:.2f}" for k, v in run.items()),
                  flush=True)
    result = {"rounds": rounds, "updates": updates, "machine": machine(), "runs": runs,
              "config": config or "the main job (paw-gym demo's RL stage)",
              "init_checkpoint": init_checkpoint,
              "updates_per_hour": {v: 3600 / statistics.median(x["step_time"] for x in t)
                                   for v, t in runs.items()}}
    if "sync" in runs:
        measured = {v: [s["step_time_sum"] / a["step_time_sum"]
                        for s, a in zip(runs["sync"], runs[v])]
                    for v in variants if v != "sync"}
        result["speedup_vs_sync"] = {v: statistics.median(m) for v, m in measured.items()}
        result["own_over_measured"] = {
            v: [a["async_speedup"] / m for a, m in zip(runs[v], measured[v])]
            for v in measured if "async_speedup" in runs[v][0]}
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = "throughput_same_work" + ("" if config is None else f"_{Path(config).stem}")
    (RESULTS / f"{name}_{'_'.join(variants)}.json").write_text(
        json.dumps(result, indent=1), encoding="utf-8")
    return result


def _matmul_loop(iterations: int, queue, go) -> None:
    """One thread of float32 512 × 512 matmuls once ``go`` is set; its wall seconds into
    ``queue``."""
    import torch

    torch.set_num_threads(1)
    a = torch.randn(512, 512)
    queue.put(None)  # ready
    go.wait()
    start = time.perf_counter()
    for _ in range(iterations):
        a = (a @ a).tanh_()
    queue.put(time.perf_counter() - start)


def cores(rounds: int = 5, iterations: int = 400) -> dict[str, Any]:
    """A single-thread matmul loop alone and two side by side, alternated: their wall times
    and the slowdown side by side (1.0: the two cores do not slow each other down)."""
    import multiprocessing

    from benchmarks.common import machine

    context = multiprocessing.get_context("spawn")
    times: dict[str, list[float]] = {"alone": [], "side_by_side": []}
    loads = []
    for _ in range(rounds):
        for kind, count in (("alone", 1), ("side_by_side", 2)):
            loads.append(os.getloadavg()[0])
            queues, go = [context.Queue() for _ in range(count)], context.Event()
            processes = [context.Process(target=_matmul_loop, args=(iterations, q, go))
                         for q in queues]
            for process in processes:
                process.start()
            for q in queues:
                q.get()
            go.set()  # both start together (a reply on the ready queue could be read back)
            times[kind] += [q.get() for q in queues]
            for process in processes:
                process.join()
    alone, both = statistics.median(times["alone"]), statistics.median(times["side_by_side"])
    result = {"machine": machine(), "rounds": rounds, "iterations": iterations, "seconds": times,
              "slowdown_side_by_side": both / alone, "load_average": loads}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "cores.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    return result


class StaleCollector:
    """The synchronous trainer's collector on ``async_rollouts``' schedule, in one process:
    rollout s is sampled by a copy of the policy holding the weights after max(0, s − k)
    updates, with the seeds the worker would use. It equals an asynchronous run, metric for
    metric and weight for weight (``benchmarks/tests``), and runs the corrections the config
    refuses with ``async_rollouts``. ``last``: a copy of the last rollout sampled."""

    def __init__(self, trainer, staleness: int):
        from training.models import build_policy

        self.trainer, self.staleness = trainer, staleness
        self.collect = trainer.collect
        self.sampler = build_policy(trainer.config)  # as the worker builds its own
        self.versions: dict[int, dict[str, Any]] = {}
        self.last = None

    def __call__(self, policy, task_seeds, group_size, temperature, seed):
        import torch

        step = self.trainer.step
        self.versions[step] = {name: p.detach().clone()
                               for name, p in self.trainer.model.named_parameters()}
        version = max(0, step - self.staleness)
        parameters = dict(self.sampler.model.named_parameters())
        with torch.no_grad():  # as the worker takes its weights
            for name, tensor in self.versions[version].items():
                parameters[name].copy_(tensor)
        self.versions = {v: w for v, w in self.versions.items() if v >= version}
        trajectories = self.collect(self.sampler, task_seeds, group_size, temperature, seed)
        self.last = copy.deepcopy(trajectories)
        return trajectories


#: The objectives the replay runs the breaking update with (TrainConfig changes; and
#: ``mini_batches``: that many optimizer steps on the rollout; ``fresh``: the update on a
#: rollout its own weights sample, as the synchronous trainer's).
REPLAYS: dict[str, dict[str, Any]] = {
    "token_truncate": {"rollout_correction": "token_truncate"},
    "token_mask": {"rollout_correction": "token_mask"},
    "token_truncate, 4 mini-batches": {"rollout_correction": "token_truncate",
                                       "mini_batches": 4},
    "none": {"rollout_correction": "none"},
    "none without its clip": {"rollout_correction": "none", "clip_eps": 1.0,
                              "clip_eps_high": 100.0},
    "none, no gradient-norm clip": {"rollout_correction": "none", "max_grad_norm": 1e6},
    "none without its clip or the gradient-norm clip": {
        "rollout_correction": "none", "clip_eps": 1.0, "clip_eps_high": 100.0,
        "max_grad_norm": 1e6},
    "sampler_clip": {"rollout_correction": "sampler_clip"},
    "sampler_clip, lower side only": {"rollout_correction": "sampler_clip",
                                      "clip_eps_high": 100.0},
    "none, fresh synchronous rollout": {"rollout_correction": "none", "fresh": True},
}


def _state(trainer) -> dict[str, Any]:
    return copy.deepcopy({"model": trainer.model.state_dict(),
                          "optimizer": trainer.updater.optimizer.state_dict(),
                          "scheduler": trainer.updater.scheduler.state_dict()})


def _success(trainer, step: int) -> float:
    """Success of rollout ``step``'s tasks and seeds sampled with the trainer's weights."""
    from training.infra.seeding import seed_everything

    request = trainer.sampler.request(step)
    seed_everything(request.step_seed)
    trajectories = trainer.collect(trainer.policy, request.task_seeds, request.group_size,
                                   request.temperature, request.sampling_seed)
    return 100 * sum(t.won for t in trajectories) / len(trajectories)


def _token_classes(trainer, trajectories, epsilon: float) -> dict[str, dict[str, float]]:
    """At the replayed update, under ``token_truncate``: the action tokens by the sign of their
    advantage and their ratio r = π_old / μ, each class's share and the norm of its part of
    the RL gradient (without the PaW term), and its cosine to the whole RL gradient."""
    import torch

    from training.infra.paw_settings import PaWSettings
    from training.rl.batch import collate
    from training.rl.objective import micro_batch_loss, objective_weights
    from training.rl.rollout_batch import build_batch

    batch = build_batch(copy.deepcopy(trajectories), trainer.serializer, trainer.config)
    sampled = [list(s.old_logprobs) for s in batch.samples]
    trainer.updater.score_correction(batch)
    ratios = [[math.exp(a - b) for a, b in zip(s.old_logprobs, mu)]
              for s, mu in zip(batch.samples, sampled)]
    weights = [list(s.is_weights) for s in batch.samples]
    classes = {
        "A > 0, r > 1 + ε (gained since sampling)": lambda a, r: a > 0 and r > 1 + epsilon,
        "A < 0, r < 1 − ε (pushed down since sampling)": lambda a, r: a < 0 and r < 1 - epsilon,
        "A > 0, r < 1 − ε": lambda a, r: a > 0 and r < 1 - epsilon,
        "A < 0, r > 1 + ε": lambda a, r: a < 0 and r > 1 + epsilon,
        "every action token": lambda a, r: True,
    }
    settings = dataclasses.replace(trainer.updater.settings, world_model=PaWSettings(paw=False))
    rows = list(range(len(batch.samples)))
    w_rl, w_wm = objective_weights(batch.samples, batch.selected, batch.group_lambda, settings)
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    gradients, shares = {}, {}
    for name, member in classes.items():
        keep = [[member(s.advantage, r) for r in row] for s, row in zip(batch.samples, ratios)]
        for s, w, k in zip(batch.samples, weights, keep):
            s.is_weights = [x * m for x, m in zip(w, k)]
        trainer.model.zero_grad()
        for micro in trainer.updater.micro_batches(batch, rows):
            mb = collate(batch.samples, micro, trainer.policy.pad_id, trainer.device)
            loss, _ = micro_batch_loss(trainer.model, mb, w_rl[micro], w_wm[micro], settings)
            loss.backward()
        gradients[name] = torch.cat([p.grad.flatten().double() for p in params])
        shares[name] = sum(map(sum, keep)) / sum(map(len, keep))
    trainer.model.zero_grad()
    whole = gradients["every action token"]
    return {name: {"tokens_pct": 100 * shares[name], "grad_norm": float(g.norm()),
                   "cosine_to_whole": float(g @ whole / (g.norm() * whole.norm() + 1e-30))}
            for name, g in gradients.items()}


def replay(seed: int = 2, staleness: int = 1, updates: int = 20,
           update: int | None = None) -> dict[str, Any]:
    """The replay of the update that broke the ``token_truncate`` run (module docstring), or of
    ``update`` (1-based) of that run."""
    from dataclasses import replace

    import torch

    from training.infra.seeding import seed_everything
    from training.trainer import PaWTrainer

    torch.set_num_threads(1)
    cpu = cpu_seconds()
    config = rl_stage(seed, "sync", WORK / f"replay-s{seed}", rollout_correction="token_truncate",
                      val_every=0, val_before_train=False, record_replay=False,
                      total_steps=updates)
    trainer = PaWTrainer(config)
    stale = StaleCollector(trainer, staleness)
    trainer.sampler.collect = stale
    curve, states, rollouts, broke = [], [], [], None
    while trainer.step < updates and broke is None:
        states.append(_state(trainer))
        metrics = trainer.train_step()
        rollouts.append(stale.last)
        curve.append(100 * metrics["success"])
        best = max(curve[:-1], default=0.0)
        if update is not None:
            broke = update - 1 if len(curve) == update else None
        elif best >= 50 and curve[-1] < best / 2:
            # rollout s was sampled by the weights after update s − k: the update that
            # made them (0-based) is s − k − 1
            broke = len(curve) - 1 - staleness - 1
    if broke is None:
        raise RuntimeError(f"seed {seed}: no rollout fell below half the best in {updates} "
                           f"updates ({curve})")
    result = {"seed": seed, "staleness": staleness, "curve": curve, "update": broke + 1,
              "replays": {}}
    for name, changes in REPLAYS.items():
        changes = dict(changes)
        fresh = changes.pop("fresh", False)
        if "mini_batches" in changes:
            transitions = sum(len(t.transitions) for t in rollouts[broke])
            changes["mini_batch_size"] = math.ceil(transitions / changes.pop("mini_batches"))
        replayed = PaWTrainer(replace(config, **changes))
        # a copy: the optimizer takes the state's tensors as they are and steps them in place
        state = copy.deepcopy(states[broke])
        replayed.model.load_state_dict(state["model"])
        replayed.updater.optimizer.load_state_dict(state["optimizer"])
        replayed.updater.scheduler.load_state_dict(state["scheduler"])
        replayed.run_state.step = broke
        request = replayed.sampler.request(broke)
        seed_everything(request.step_seed)
        trajectories = (replayed.collect(replayed.policy, request.task_seeds,
                                         request.group_size, request.temperature,
                                         request.sampling_seed)
                        if fresh else copy.deepcopy(rollouts[broke]))
        if name == "token_truncate":
            result["token_classes"] = _token_classes(replayed, trajectories, config.clip_eps)
        metrics = replayed.update(trajectories)
        result["replays"][name] = {
            "next_rollouts_success": [_success(replayed, broke + 1), _success(replayed, broke + 2)],
            "clip_frac": metrics["clip_frac"], "grad_norm": metrics["grad_norm"],
            "weights": {k: v.detach().clone() for k, v in replayed.model.state_dict().items()}}
        print(f"replay {name}: {result['replays'][name]['next_rollouts_success']}", flush=True)
    same = {a: {b: max(float((result["replays"][a]["weights"][k] - w).abs().max())
                       for k, w in result["replays"][b]["weights"].items())
                for b in result["replays"]} for a in ("none without its clip",)}
    for entry in result["replays"].values():
        del entry["weights"]
    result["max_weight_difference"] = same
    result["cpu_s"] = round(cpu_seconds() - cpu, 1)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"replay_s{seed}_k{staleness}_u{broke + 1}.json").write_text(
        json.dumps(result, indent=1), encoding="utf-8")
    return result


def report() -> str:
    """Markdown: each variant's held-out success and collapses, the paired differences, every
    seed."""
    from benchmarks.study_small import mean_ci

    runs: dict[str, dict[int, dict]] = {}
    for path in sorted(RESULTS.glob("*__s*.json")):
        r = json.loads(path.read_text(encoding="utf-8"))
        runs.setdefault(r["variant"], {})[r["seed"]] = r
    lines = ["| variant | seeds | held-out after RL % (95 % CI) | collapsed (< 10 %) | "
             "s per update (median) | CPU min / run |", "|---|---|---|---|---|---|"]
    for variant, by_seed in runs.items():
        after = [r["after"] for r in by_seed.values()]
        mean, ci = mean_ci(after)
        lines.append(f"| {variant} | {len(after)} | {mean:.1f} ± {ci:.1f} | "
                     f"{sum(a < 10 for a in after)} | "
                     f"{statistics.median(r['step_time_median'] for r in by_seed.values()):.1f}"
                     f" | {statistics.mean(r['cpu_s'] for r in by_seed.values()) / 60:.1f} |")
    lines += ["", "| pair | seeds | Δ held-out (pp, 95 % CI) |", "|---|---|---|"]
    for a, b in PAIRS:
        seeds = sorted(set(runs.get(a, {})) & set(runs.get(b, {})))
        if seeds:
            mean, ci = mean_ci([runs[a][s]["after"] - runs[b][s]["after"] for s in seeds])
            lines.append(f"| {a} − {b} | {len(seeds)} | {mean:+.1f} ± {ci:.1f} |")
    seeds = sorted({s for by_seed in runs.values() for s in by_seed})
    lines += ["", "| seed | " + " | ".join(runs) + " |", "|---" * (len(runs) + 1) + "|"]
    for s in seeds:
        lines.append(f"| {s} | " + " | ".join(
            f"{runs[v][s]['after']:.1f}" if s in runs[v] else "—" for v in runs) + " |")
    for path in sorted(RESULTS.glob("replay_s*.json")):
        lines += ["", replay_table(json.loads(path.read_text(encoding="utf-8")))]
    return "\n".join(lines)


def replay_table(result: dict[str, Any]) -> str:
    """Markdown of one :func:`replay`."""
    lines = [f"Replay of update {result['update']} (seed {result['seed']}, staleness "
             f"{result['staleness']}; training success by update before it: "
             f"{', '.join(f'{c:.0f}' for c in result['curve'])} %)", "",
             "| objective at that update | next two rollouts, success % | clip fraction | "
             "grad norm |", "|---|---|---|---|"]
    for name, entry in result["replays"].items():
        lines.append(f"| {name} | {' / '.join(f'{x:.0f}' for x in entry['next_rollouts_success'])}"
                     f" | {entry['clip_frac']:.3f} | {entry['grad_norm']:.2f} |")
    lines += ["", "| action tokens (token_truncate) | share % | RL gradient norm | cosine to "
              "the whole |", "|---|---|---|---|"]
    for name, entry in result["token_classes"].items():
        lines.append(f"| {name} | {entry['tokens_pct']:.1f} | {entry['grad_norm']:.3f} | "
                     f"{entry['cosine_to_whole']:.2f} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--throughput", action="store_true")
    parser.add_argument("--cores", action="store_true")
    parser.add_argument("--learning", action="store_true")
    parser.add_argument("--replay", action="store_true")
    parser.add_argument("--report", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--updates", type=int, default=8)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--seed", type=int, default=2, help="--replay's seed")
    parser.add_argument("--update", type=int, default=None,
                        help="--replay this update (default: the one that broke the run)")
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS),
                        default=["sync", "async1"])
    parser.add_argument("--config", default=None,
                        help="--throughput of a real-model recipe (configs/real/*.yaml) instead "
                             "of the main job")
    parser.add_argument("--init_checkpoint", default=None,
                        help="with --config: the SFT adapter it starts from (default: the "
                             "config's)")
    args = parser.parse_args(argv)
    if args.init_checkpoint and not args.config:
        parser.error("--init_checkpoint needs --config (the main job starts from its own base)")
    if args.config and not args.throughput:
        # Only the throughput comparison runs a real-model recipe; the other modes would run the
        # main job and silently drop the recipe.
        parser.error(f"--config {args.config} goes with --throughput (the only mode that runs a "
                     "real-model recipe); --cores, --learning, --replay and --report measure "
                     "the main job")
    if args.throughput:
        print(json.dumps(throughput(args.rounds, args.updates, args.variants, args.config,
                                    args.init_checkpoint), indent=1))
    if args.cores:
        print(json.dumps(cores(args.rounds), indent=1))
    if args.learning:
        for seed in range(args.seeds):
            for variant in args.variants:
                learning_run(variant, seed)
    if args.replay:
        print(replay_table(replay(args.seed, update=args.update)))
    if args.report:
        print(report())


if __name__ == "__main__":
    main()
