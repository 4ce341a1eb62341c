"""PaW overhead (the paper's Fig. 5): the same training step with and without world-model
co-training, measured in one process, as ratios of step time and peak memory.

Two trainers start from the same weights with ``lr = 0`` (the weights never move, so both see
exactly the same rollouts at the same step index) and differ only in ``paw``. They alternate
step by step (A B A B ...); each step is split into

* ``rollout``  - sampling the group episodes (identical work for both),
* ``forward``  - the training pass (``micro_batch_loss``: backbone + LM head at scored positions),
* ``backward`` - ``loss.backward()`` + clipping + optimizer step,
* ``other``    - everything else of the update (advantages, entropy selection, serialising
  ``h ⊕ a ⊕ o`` rows, collation, metrics).

Peak memory is the largest resident-set growth during the update over the RSS at its start
(the kernel's high-water mark, reset at the update's start; glibc is told to return freed
blocks, so A and B start equal), plus the process high-water mark. Medians over the repeats.

    python -m benchmarks.overhead            # ~6 min on 2 busy CPU cores
    python -m benchmarks.overhead --quick    # ~2 min
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

# Fixed mmap/trim thresholds: freed tensors go back to the OS, so the RSS peak of one update
# does not depend on what the previous update left in the heap. Must be set before start-up.
_MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "131072"}

from benchmarks import common as C  # noqa: E402
from benchmarks.common import RSSPeak  # noqa: E402


def clocks() -> tuple[float, float]:
    """(wall seconds, CPU seconds of this thread). With one torch thread every op runs on the
    calling thread, so its CPU time is what the step costs, whatever else the machine runs."""
    return time.perf_counter(), time.thread_time()


class Span:
    """Accumulates wall and thread-CPU time over ``with`` blocks."""

    def __init__(self):
        self.wall = self.cpu = 0.0

    def __enter__(self):
        self._start = clocks()
        return self

    def __exit__(self, *exc):
        wall, cpu = clocks()
        self.wall += wall - self._start[0]
        self.cpu += cpu - self._start[1]


def timed(function, span):
    """``function`` with each call timed into the :class:`Span` that ``span()`` returns at call
    time (spans are replaced between steps)."""
    def wrapper(*args, **kwargs):
        with span():
            return function(*args, **kwargs)
    return wrapper


class PhaseTimer:
    """Times one trainer's forward passes (``micro_batch_loss``) and its optimisation calls
    (forward + backward + optimizer step) by wrapping them; the trainer's code is unchanged."""

    forward = Span()  # shared: only one trainer runs at a time
    head = Span()  # LM head at scored positions (its forward and its backward)
    _patched = False

    def __init__(self, trainer):
        self.optimize = Span()
        if not PhaseTimer._patched:
            from training.rl.objective import HeadTargetLogprobs
            import training.rl.update as update_module

            update_module.micro_batch_loss = timed(update_module.micro_batch_loss,
                                                   lambda: PhaseTimer.forward)
            # autograd looks both up on the class at call time
            for name in ("forward", "backward"):
                method = getattr(HeadTargetLogprobs, name)
                setattr(HeadTargetLogprobs, name,
                        staticmethod(timed(method, lambda: PhaseTimer.head)))
            PhaseTimer._patched = True
        trainer.updater.optimize = timed(trainer.updater.optimize, lambda: self.optimize)

    def reset(self):
        PhaseTimer.forward = Span()
        PhaseTimer.head = Span()
        self.optimize = Span()


def token_accounting(trainer, trajectories, obs_limits=(32, 64, 128, 256, 512)) -> list[dict]:
    """Tokens of the training pass with and without PaW on one rollout, per observation cap:
    real tokens, padded tokens (after the trainer's longest-first token-budget packing) and
    scored positions (LM-head rows). The backbone's cost follows the tokens, the head's the
    scored positions; this is where PaW's extra compute comes from."""
    from dataclasses import replace

    from training.rl.batch import token_budget_batches
    from training.rl.rollout_batch import build_batch

    def count(config) -> dict:
        batch = build_batch(trajectories, trainer.serializer, config)
        lengths = [len(s) for s in batch.samples]
        padded = sum(len(part) * max(lengths[i] for i in part)
                     for part in token_budget_batches(lengths, config.token_budget))
        return {"tokens": sum(lengths), "padded": padded,
                "scored": sum(s.action_len + s.obs_len for s in batch.samples),
                "obs": sum(s.obs_len for s in batch.samples),
                "prompt": sum(s.prompt_len for s in batch.samples)}

    rows = []
    vanilla = count(replace(trainer.config, paw=False))
    for limit in obs_limits:
        paw = count(replace(trainer.config, paw=True, max_obs_tokens=limit))
        rows.append({"max_obs_tokens": limit, "vanilla": vanilla, "paw": paw,
                     "token_ratio": paw["tokens"] / vanilla["tokens"],
                     "padded_ratio": paw["padded"] / vanilla["padded"],
                     "scored_ratio": paw["scored"] / vanilla["scored"]})
    return rows


def make_trainer(model: Path, paw: bool, out: Path, args):
    from training.trainer import PaWTrainer

    config = C.train_config(
        args.env, model, out / ("paw" if paw else "vanilla"), paw=paw, lr=0.0,
        n_groups=args.groups, group_size=args.group_size, history_length=args.history,
        max_episode_steps=args.max_steps, max_obs_tokens=args.max_obs_tokens,
        max_seq_len=args.max_seq_len,
        mini_batch_size=args.mini_batch, total_steps=args.repeats + args.warmup)
    return PaWTrainer(config)


def measure(args) -> dict:
    C.set_threads(args.threads)
    model = C.bench_model(args.env)
    out = C.CACHE / "overhead"
    trainers = {"vanilla": make_trainer(model, False, out, args),
                "paw": make_trainer(model, True, out, args)}
    timers = {name: PhaseTimer(t) for name, t in trainers.items()}
    rows: dict[str, list[dict]] = {name: [] for name in trainers}
    import random

    from tqdm.auto import tqdm

    from training.infra.seeding import seed_everything

    steps = args.warmup + args.repeats
    bar = tqdm(total=2 * steps, desc="overhead A/B", unit="step", disable=not args.progress)
    for k in range(steps):
        order = ("vanilla", "paw") if k % 2 == 0 else ("paw", "vanilla")
        for name in order:
            trainer, timer = trainers[name], timers[name]
            timer.reset()
            # The trainer's own task draw and collector (as train_step), then the update under
            # the RSS sampler.
            config = trainer.config
            step_seed = config.seed * 1_000_003 + trainer.step
            seed_everything(step_seed)
            rng = random.Random(step_seed)
            tasks = [rng.randrange(config.train_task_seeds) for _ in range(config.n_groups)]
            with Span() as rollout:
                trajectories = trainer.collect(trainer.policy, tasks, config.group_size,
                                               config.temperature, step_seed)
            with RSSPeak() as mem, Span() as update:
                metrics = trainer.update(trajectories)
            trainer.run_state.step += 1
            bar.update(1)
            if k < args.warmup:
                continue
            row = {"update_rss_growth_mb": mem.growth, "process_peak_mb": metrics["peak_mem_mb"],
                   "transitions": metrics["transitions"], "wm_selected": metrics["wm_selected"],
                   "train_tokens": metrics["tokens_per_s"] * metrics["update_time"]}
            forward, optimize = PhaseTimer.forward, timer.optimize
            for kind in ("cpu", "wall"):
                get = lambda span: getattr(span, kind)  # noqa: E731
                row.update({
                    f"rollout_{kind}_s": get(rollout), f"forward_{kind}_s": get(forward),
                    f"lm_head_{kind}_s": get(PhaseTimer.head),
                    f"backward_{kind}_s": get(optimize) - get(forward),
                    f"other_{kind}_s": get(update) - get(optimize),
                    f"update_{kind}_s": get(update),
                    f"step_{kind}_s": get(rollout) + get(update)})
            rows[name].append(row)
    bar.close()
    parts = ["rollout", "forward", "lm_head", "backward", "other", "update", "step"]
    keys = [f"{p}_{kind}_s" for kind in ("cpu", "wall") for p in parts] + \
        ["update_rss_growth_mb", "process_peak_mb", "train_tokens"]
    med = {name: {k: C.median([r[k] for r in rows[name]]) for k in keys} for name in rows}
    ratio = {k: med["paw"][k] / med["vanilla"][k] if med["vanilla"][k] else float("nan")
             for k in keys}
    # Paired per-step ratios (A and B of the same step index saw the same rollout).
    paired = {k: C.median([p[k] / v[k] for p, v in zip(rows["paw"], rows["vanilla"]) if v[k]])
              for k in keys if k.startswith(("update", "step"))}
    accounting = token_accounting(trainers["paw"], trajectories)
    return {"machine": C.machine(), "settings": vars(args) | {"model": str(model)},
            "median": med, "ratio_of_medians": ratio, "median_paired_ratio": paired,
            "token_accounting": accounting, "rows": rows}


LABELS = [("rollout", "rollout"), ("forward", "forward (backbone + LM head)"),
          ("lm_head", "  LM head at scored positions (its share of the two rows above)"),
          ("backward", "backward + clip + optimizer"), ("other", "other (batching, advantages)"),
          ("update", "update total"), ("step", "**whole step**")]


def pooled_step_ratio(result: dict) -> float:
    """(R + U_paw) / (R + U_vanilla), R the median rollout CPU time of all steps of A and B,
    U the median update CPU times."""
    rows = result["rows"]
    rollout = C.median([r["rollout_cpu_s"] for name in rows for r in rows[name]])
    med = result["median"]
    return (rollout + med["paw"]["update_cpu_s"]) / (rollout + med["vanilla"]["update_cpu_s"])


def table(result: dict) -> str:
    """Markdown: CPU seconds (primary) and wall seconds per part, medians, and ratios."""
    med, ratio = result["median"], result["ratio_of_medians"]
    lines = ["| part | CPU s without PaW | CPU s with PaW | ratio (CPU) | ratio (wall) |",
             "|---|---:|---:|---:|---:|"]
    for key, label in LABELS:
        cpu, wall = f"{key}_cpu_s", f"{key}_wall_s"
        if cpu not in med["vanilla"]:
            continue  # a result from before this part was timed
        lines.append(f"| {label} | {med['vanilla'][cpu]:.3f} | {med['paw'][cpu]:.3f} | "
                     f"{ratio[cpu]:.3f} | {ratio[wall]:.3f} |")
    # (The process high-water mark is shared by A and B in one process: kept in the JSON only.)
    for key, label in [("update_rss_growth_mb", "peak RSS growth during the update (MiB)"),
                       ("train_tokens", "tokens in the training pass")]:
        lines.append(f"| {label} | {med['vanilla'][key]:.1f} | {med['paw'][key]:.1f} | "
                     f"{ratio[key]:.3f} | |")
    pooled = pooled_step_ratio(result)
    lines += ["", f"Whole-step CPU ratio with the rollout time pooled over A and B (both roll out "
              f"exactly the same episodes, so their rollout difference is noise): "
              f"**{pooled:.3f}**"]
    lines += ["", "Training-pass tokens of the last rollout vs the observation cap "
              "(PaW / vanilla):", "",
              "| max_obs_tokens | prompt tok | action+obs scored (PaW) | obs tok | token ratio | "
              "padded ratio | scored-position ratio |", "|---:|---:|---:|---:|---:|---:|---:|"]
    for row in result.get("token_accounting", []):
        paw = row["paw"]
        lines.append(f"| {row['max_obs_tokens']} | {paw['prompt']} | {paw['scored']} | "
                     f"{paw['obs']} | {row['token_ratio']:.3f} | {row['padded_ratio']:.3f} | "
                     f"{row['scored_ratio']:.3f} |")
    return "\n".join(lines)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats, smaller batch")
    parser.add_argument("--env", default="webshop", choices=sorted(C.PRESETS))
    parser.add_argument("--repeats", type=int, default=None, help="measured steps per variant")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured steps per variant")
    parser.add_argument("--groups", type=int, default=None, help="groups per step")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--history", type=int, default=2, help="history length (paper: 2)")
    parser.add_argument("--max-steps", type=int, default=8)
    parser.add_argument("--max-obs-tokens", type=int, default=512, help="paper-like: 512")
    parser.add_argument("--max-seq-len", type=int, default=4096,
                        help="training row limit; paper-like 4096 (WebShop's prompt limit), so no "
                             "row is cut and every selected observation is scored in full")
    parser.add_argument("--mini-batch", type=int, default=64, help="transitions per optimizer step")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=str(C.RESULTS / "overhead.json"))
    parser.add_argument("--no-progress", dest="progress", action="store_false")
    parser.add_argument("--show", metavar="JSON", default=None,
                        help="print the tables of a saved result and exit")
    args = parser.parse_args(argv)
    if args.repeats is None:
        args.repeats = 2 if args.quick else 5
    if args.groups is None:
        args.groups = 2 if args.quick else 4
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.show:
        print(table(C.load_json(Path(args.show))))
        return {}
    if any(os.environ.get(k) != v for k, v in _MALLOC_ENV.items()):
        # Re-run with the allocator settings in place (they only act at process start).
        os.execve(sys.executable, [sys.executable, "-m", "benchmarks.overhead",
                                   *(argv or sys.argv[1:])],
                  {**os.environ, **_MALLOC_ENV})
    result = measure(args)
    C.write_json(Path(args.out), result)
    print(table(result))
    paired = result["median_paired_ratio"]
    print("median paired ratios: " + ", ".join(f"{k} {v:.3f}" for k, v in paired.items()))
    print(f"written to {args.out}")
    return result


if __name__ == "__main__":
    main()
