"""Multi-process training (``training.infra.distributed``): exactness and scaling, 1 vs 2 processes.

Every multi-process measurement is a real ``torchrun --standalone`` launch of this script's
worker (gloo on CPU, one torch thread per process).

exactness: fixed rollouts are sampled once, on-policy, by a single-process trainer (the demo's
Shelf base model); the same updates are then replayed in 1 and in 2 processes (each rank given
its groups) and the largest absolute difference of every trained parameter (policy and PPO
critic) is printed, with the largest difference of the update metrics and of the gradients the
optimizer saw. Variants: GRPO, GiGPO and PPO, each with PaW, LoRA and full fine-tuning; in
float64 (where float summation order is invisible, so any difference is a bug) and in float32.
The control: one process again with a different micro-batch split, i.e. another float
summation order and nothing else.

scaling: ``train_step`` (rollout on Shelf + update) with 1 and 2 processes, launches
alternating over rounds; medians of rollout time, update time, generated tokens/s and trained
transitions/s, and the 2-process speed-up and efficiency (speed-up / 2). Since 1 and 2
processes sample different episodes, the update is also timed on the same fixed rollouts, and
validation (every held-out Shelf task once, shared by the ranks) is timed on its own.

    paw-gym demo                                     # once: builds the base model it uses
    python -m benchmarks.distributed                 # both, ~10 min on 2 cores
    python -m benchmarks.distributed --only exactness --updates 2
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = REPO / "runs" / "demo" / "base-model"

#: The exactness variants: TrainConfig fields over the shared settings.
VARIANTS = {
    f"{algo}+paw {'lora' if lora else 'full'}": dict(algo=algo, lora=lora,
                                                       lr=1e-3 if lora else 1e-4)
    for algo in ("grpo", "gigpo", "ppo") for lora in (True, False)
}
VARIANTS.update({f"{algo}+paw fsdp": dict(algo=algo, lora=False, lr=1e-4, sharding="fsdp")
                 for algo in ("grpo", "gigpo", "ppo")})


def base_fields(model: str, **overrides) -> dict:
    """The TrainConfig of every measurement: Shelf, PaW, 4 groups × 4, two mini-batches."""
    fields = dict(model=str(model), env_id="PaW/Shelf-v0", n_groups=4, group_size=4,
                  max_new_tokens=40, max_episode_steps=6, history_length=1, paw=True,
                  alpha=0.5, mini_batch_size=24, token_budget=4096, device="cpu",
                  progress=False, save_every=0, record_replay=False, seed=0,
                  output_dir=tempfile.mkdtemp(prefix="paw-dist-"))
    fields.update(overrides)
    return fields


def launch(world_size: int, job: dict, timeout: int = 1800) -> dict:
    """Run the worker on ``job`` in ``world_size`` torchrun processes; rank 0's result."""
    with tempfile.TemporaryDirectory() as folder:
        job_file, out_file = Path(folder, "job.pkl"), Path(folder, "out.pkl")
        job_file.write_bytes(pickle.dumps(job))
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   f"--nproc_per_node={world_size}", str(Path(__file__).resolve()),
                   "--worker", str(job_file), "--out", str(out_file)]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
        done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"torchrun with {world_size} process(es) failed "
                               f"({done.returncode}):\n{done.stderr[-4000:]}")
        return pickle.loads(out_file.read_bytes())


# -- the worker (one rank) ---------------------------------------------------------------------

def worker(job_file: str, out_file: str) -> None:
    import torch

    from training.config import TrainConfig
    from training.infra.distributed import shutdown
    from training.trainer import PaWTrainer

    torch.set_num_threads(1)
    job = pickle.loads(Path(job_file).read_bytes())
    result = {}
    for name, fields in job["variants"].items():
        config = TrainConfig(**fields)
        if job["mode"] == "exactness":
            trainer = PaWTrainer(config, collect=_no_collection)
            gradients = record_gradients(trainer)
            metrics = []
            for trajectories in job["rollouts"][name]:
                metrics.append(trainer.update(own_groups(trainer, trajectories)))
                trainer.run_state.step += 1
            result[name] = {"params": trained_parameters(trainer), "metrics": metrics,
                            "gradients": gradients, "sharded": trainer.world.sharded}
        elif job["mode"] == "memory":
            trainer = PaWTrainer(config, collect=_no_collection)
            trainer.update(own_groups(trainer, job["rollouts"][name][0]))
            result[name] = trainer.world.gather([held_bytes(trainer)])
        elif job["mode"] == "update_timing":
            trainer = PaWTrainer(config, collect=_no_collection)
            seconds = []
            for trajectories in job["rollouts"][name]:
                mine = own_groups(trainer, trajectories)
                start = time.perf_counter()
                trainer.update(mine)
                seconds.append(trainer.world.reduce(
                    {"s": time.perf_counter() - start}, "max")["s"])  # the slowest rank's
                trainer.run_state.step += 1
            result[name] = seconds[job["warmup"]:]
        elif job["mode"] == "validation_timing":
            trainer = PaWTrainer(config)
            seconds = []
            for _ in range(job["warmup"] + job["steps"]):
                start = time.perf_counter()
                episodes = trainer.validate()["val_episodes"]
                seconds.append(trainer.world.reduce(
                    {"s": time.perf_counter() - start}, "max")["s"])
            result[name] = {"seconds": seconds[job["warmup"]:], "episodes": episodes}
        else:
            trainer = PaWTrainer(config)
            for _ in range(job["warmup"]):
                trainer.train_step()
            result[name] = [trainer.train_step() for _ in range(job["steps"])]
        del trainer
    if int(os.environ.get("RANK", "0")) == 0:
        Path(out_file).write_bytes(pickle.dumps(result))
    shutdown()


def own_groups(trainer, trajectories: list) -> list:
    """Copies of the trajectories of this rank's groups (``training.infra.distributed.group_shard``
    of the update's groups, as ``PaWTrainer.train_step`` shares them)."""
    from training.infra.distributed import group_shard

    world = trainer.world
    shard = group_shard(trainer.config.rollout_groups, world.world_size, world.rank)
    return [copy.deepcopy(t) for t in trajectories if t.group_index in shard]


def _no_collection(*args):
    raise RuntimeError("the exactness worker replays fixed rollouts and collects none")


def record_gradients(trainer) -> list[dict]:
    """A list that receives the policy's gradients at every optimizer step (after DDP's
    all-reduce and clipping, as the optimizer sees them)."""
    from training.infra.distributed import whole

    steps: list[dict] = []
    named = [(n, p) for n, p in trainer.model.named_parameters() if p.requires_grad]

    def keep(optimizer, args, kwargs):
        steps.append({n: whole(p.grad).detach().cpu().clone() for n, p in named
                      if p.grad is not None})

    trainer.updater.optimizer.register_step_pre_hook(keep)
    return steps


def trained_parameters(trainer) -> dict:
    """Every trainable tensor of the policy, and the PPO critic's, as CPU copies."""
    from training.infra.distributed import whole

    params = {f"policy.{n}": whole(p).detach().cpu().clone()
              for n, p in trainer.model.named_parameters() if p.requires_grad}
    if trainer.updater.critic is not None:
        params.update({f"critic.{n}": whole(p).detach().cpu().clone()
                       for n, p in trainer.updater.critic.named_parameters()})
    return params


def held_bytes(trainer) -> dict:
    """What this rank holds after an update, in bytes: its weights (its FSDP shards), AdamW's
    states, the unsharded sampler copy, and the process's peak resident memory."""
    import resource

    import torch

    def size(tensors) -> int:
        tensors = [t.to_local() if hasattr(t, "to_local") else t for t in tensors]
        return sum(t.numel() * t.element_size() for t in tensors)

    def states(optimizer) -> list:
        return [v for state in optimizer.state.values() for v in state.values()
                if torch.is_tensor(v) and v.dim() > 0]  # not the scalar step counts

    critic = (size(trainer.updater.critic.parameters()) + size(states(trainer.updater.critic_optimizer))
              if trainer.updater.critic is not None else 0)
    return {"weights": size(trainer.model.parameters()),
            "optimizer": size(states(trainer.updater.optimizer)),
            "sampler": size(trainer.sampler.copy.model.parameters()) if trainer.sampler.copy else 0,
            "critic": critic,
            "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def memory(model: str, worlds: tuple[int, ...] = (1, 2, 4)) -> dict:
    """Per-rank bytes held by FSDP training (GRPO + PaW and PPO + PaW, full fine-tuning) on 1,
    2 and 4 processes after one update of the same fixed rollout, against
    ``training.infra.memory``'s estimate of the same parts; GRPO with DDP on 2 processes for
    comparison."""
    from training.config import TrainConfig
    from training.infra.memory import estimate, model_shape

    shape = model_shape(model)
    report = {}
    for algo in ("grpo", "ppo"):
        fields = base_fields(model, algo=algo, lora=False, lr=1e-4, sharding="fsdp", n_groups=4)
        rollouts, _ = sample_rollouts(fields, 1)
        runs = [("fsdp", n) for n in worlds] + ([("ddp", 2)] if algo == "grpo" else [])
        for sharding, world in runs:
            variant = {**fields, "sharding": sharding}
            ranks = launch(world, {"mode": "memory", "variants": {"run": variant},
                                   "rollouts": {"run": rollouts}})["run"]
            parts = estimate(TrainConfig(**variant), shape, world).parts
            # what is held between updates: the critic part without its gradients (¼ of it)
            parts["critic"] *= 3 / 4
            report[f"{algo} {sharding} x{world}"] = {
                "measured": {key: max(rank[key] for rank in ranks) for key in ranks[0]},
                "estimated": {key: parts[key]
                              for key in ("weights", "optimizer", "sampler", "critic")}}
    return report


# -- exactness ---------------------------------------------------------------------------------

def sample_rollouts(fields: dict, updates: int, reward_spread: bool = False
                    ) -> tuple[list, dict]:
    """``updates`` on-policy rollouts of a single-process trainer that trains on each, and the
    trainable parameters before the first update.

    ``reward_spread``: give each trajectory a reward from its position in its group (for a
    model whose actions are all invalid, so that advantages are not all zero)."""
    from training.config import TrainConfig
    from training.trainer import PaWTrainer

    # One unsharded process samples (a sharded one in this process would be a world of one,
    # with a process group that outlives it); sharding does not change the sampled rollouts.
    trainer = PaWTrainer(TrainConfig(**{**fields, "sharding": "ddp", "mixed_precision": "no"}))
    config = trainer.config
    initial = trained_parameters(trainer)
    rollouts = []
    for step in range(updates):
        n_tasks = config.rollout_groups
        trajectories = trainer.collect(trainer.policy, list(range(step * n_tasks,
                                                                  (step + 1) * n_tasks)),
                                       1 if config.algo == "ppo" else config.group_size,
                                       config.temperature, 1000 + step)
        if reward_spread:
            for k, trajectory in enumerate(trajectories):
                for j, transition in enumerate(trajectory.transitions):
                    transition.reward = float((k * 7 + j * 3) % 5) / 4
        rollouts.append(copy.deepcopy(trajectories))
        trainer.update(trajectories)
        trainer.run_state.step += 1
    return rollouts, initial


def max_differences(a: dict, b: dict) -> tuple[float, float, float]:
    """(largest |Δ| over every parameter, largest |Δ| over every numeric update metric but
    timings, memory and padding, largest |Δ gradient| / largest |gradient| over the optimizer
    steps)."""
    params = max(float((a["params"][k] - b["params"][k]).abs().max()) for k in a["params"])
    gradients = max(max(float((left[k] - right[k]).abs().max()) for k in left) /
                    max(float(left[k].abs().max()) for k in left)
                    for left, right in zip(a["gradients"], b["gradients"], strict=True))
    # Not the update's math: how long it took, what it held, and ``pad_frac``, which counts
    # the padding of the micro-batches each process packs from its own share of the rows
    # (another split by design, like the control's).
    skip = ("time", "per_s", "mem", "pad_frac")
    metrics = 0.0
    for left, right in zip(a["metrics"], b["metrics"]):
        for key, value in left.items():
            if any(s in key for s in skip) or not isinstance(value, (int, float)):
                continue
            if value == value and right[key] == right[key]:  # both not NaN
                metrics = max(metrics, abs(value - right[key]))
    return params, metrics, gradients


#: The control: one process again, with micro-batches of a quarter of the tokens (another
#: float summation order, nothing else changed).
CONTROL = " (1 process, token_budget/4)"


def exactness(model: str, variants: dict, updates: int, reward_spread: bool = False,
              **overrides) -> dict[str, dict]:
    """Per variant: the differences between 1 and 2 processes, and between two single-process
    runs that differ only in their micro-batch split (the control)."""
    fields = {name: base_fields(model, **{**settings, **overrides})
              for name, settings in variants.items()}
    sampled = {name: sample_rollouts(f, updates, reward_spread) for name, f in fields.items()}
    rollouts = {name: rollouts for name, (rollouts, _) in sampled.items()}
    controls = {name + CONTROL: {**f, "token_budget": f["token_budget"] // 4}
                for name, f in fields.items()}
    one = launch(1, {"mode": "exactness", "variants": {**fields, **controls},
                     "rollouts": {**rollouts, **{name + CONTROL: r
                                                 for name, r in rollouts.items()}}})
    two = launch(2, {"mode": "exactness", "variants": fields, "rollouts": rollouts})
    report = {}
    for name in variants:
        params, metrics, gradients = max_differences(one[name], two[name])
        control = max_differences(one[name], one[name + CONTROL])
        initial = sampled[name][1]
        changed = max(float((one[name]["params"][k] - initial[k]).abs().max()) for k in initial)
        report[name] = {"max_param_diff": params, "max_metric_diff": metrics,
                        "max_rel_grad_diff": gradients, "max_param_change": changed,
                        "control_max_param_diff": control[0],
                        "control_max_rel_grad_diff": control[2],
                        "optimizer_steps": len(one[name]["gradients"]),
                        "sharded": two[name]["sharded"],
                        "transitions": sum(m["transitions"] for m in one[name]["metrics"])}
    return report


# -- scaling -----------------------------------------------------------------------------------

def scaling(model: str, rounds: int, steps: int) -> dict:
    """Median per-step figures for 1 and 2 processes (launches alternate, ``rounds`` each)."""
    job = {"mode": "scaling", "warmup": 1, "steps": steps,
           "variants": {"grpo+paw lora": base_fields(model, algo="grpo", lora=True,
                                                     lr=1e-3, n_groups=8)}}
    fields = job["variants"]["grpo+paw lora"]
    rollouts, _ = sample_rollouts(fields, 1 + steps)
    update_job = {"mode": "update_timing", "warmup": 1, "variants": job["variants"],
                  "rollouts": {"grpo+paw lora": rollouts}}
    validation_job = {"mode": "validation_timing", "warmup": 1, "steps": steps,
                      "variants": job["variants"]}  # every held-out Shelf task once
    samples: dict[int, list[dict]] = {1: [], 2: []}
    fixed: dict[int, list[float]] = {1: [], 2: []}
    validation: dict[int, list[float]] = {1: [], 2: []}
    validation_episodes: dict[int, int] = {}
    for index in range(rounds):
        for world in ((1, 2) if index % 2 == 0 else (2, 1)):
            samples[world] += launch(world, job)["grpo+paw lora"]
            fixed[world] += launch(world, update_job)["grpo+paw lora"]
            timed = launch(world, validation_job)["grpo+paw lora"]
            validation[world] += timed["seconds"]
            validation_episodes[world] = timed["episodes"]
    figures = {}
    for world, steps_run in samples.items():
        median = lambda key: statistics.median(s[key] for s in steps_run)  # noqa: E731
        figures[world] = {
            "rollout_s": median("rollout_time"), "update_s": median("update_time"),
            "step_s": median("step_time"), "gen_tokens_per_s": median("gen_tokens_per_s"),
            "update_transitions_per_s": statistics.median(
                s["transitions"] / s["update_time"] for s in steps_run),
            "steps": len(steps_run), "fixed_rollout_update_s": statistics.median(fixed[world]),
            "validation_s": statistics.median(validation[world]),
            "validation_episodes": validation_episodes[world]}
    for key in ("gen_tokens_per_s", "update_transitions_per_s"):
        figures[f"speedup_{key}"] = figures[2][key] / figures[1][key]
        figures[f"efficiency_{key}"] = figures[f"speedup_{key}"] / 2
    figures["speedup_step"] = figures[1]["step_s"] / figures[2]["step_s"]
    figures["speedup_fixed_rollout_update"] = (figures[1]["fixed_rollout_update_s"] /
                                               figures[2]["fixed_rollout_update_s"])
    figures["speedup_validation"] = figures[1]["validation_s"] / figures[2]["validation_s"]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(DEFAULT_MODEL),
                        help="a model folder (default: the demo's base model, runs/demo)")
    parser.add_argument("--only", choices=("exactness", "scaling", "memory"))
    parser.add_argument("--updates", type=int, default=2, help="updates per exactness variant")
    parser.add_argument("--rounds", type=int, default=3, help="scaling launches per world size")
    parser.add_argument("--steps", type=int, default=3, help="timed train steps per launch")
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.out)
        return
    import torch

    torch.set_num_threads(1)  # like each worker process
    if not Path(args.model, "config.json").is_file():
        parser.error(f"--model {args.model} is not a model folder; `paw-gym demo` builds the "
                     f"default one, or pass any HF causal LM folder")
    results = {"model": args.model, "cpu_count": os.cpu_count()}
    start = time.perf_counter()
    for dtype in ("float64", "float32") if args.only in (None, "exactness") else ():
        results[f"exactness_{dtype}"] = exactness(args.model, VARIANTS, args.updates,
                                                  dtype=dtype)
        print(f"{dtype}, {args.updates} update(s) per variant")
        print(f"{'variant':<17} {'|Δgrad|/|grad|':>14} {'|Δparam|':>9} {'|Δmetric|':>9} "
              f"{'control |Δgrad|/|grad|':>22} {'control |Δparam|':>16} {'|param change|':>14}")
        for name, row in results[f"exactness_{dtype}"].items():
            print(f"{name:<17} {row['max_rel_grad_diff']:>14.1e} {row['max_param_diff']:>9.1e} "
                  f"{row['max_metric_diff']:>9.1e} {row['control_max_rel_grad_diff']:>22.1e} "
                  f"{row['control_max_param_diff']:>16.1e} {row['max_param_change']:>14.1e}")
    if args.only in (None, "scaling"):
        figures = results["scaling"] = scaling(args.model, args.rounds, args.steps)
        for world in (1, 2):
            row = figures[world]
            print(f"{world} process(es): rollout {row['rollout_s']:.2f} s, update "
                  f"{row['update_s']:.2f} s, step {row['step_s']:.2f} s, "
                  f"{row['gen_tokens_per_s']:.0f} generated tok/s, "
                  f"{row['update_transitions_per_s']:.1f} trained transitions/s; update of "
                  f"the fixed rollouts {row['fixed_rollout_update_s']:.2f} s; validation "
                  f"({row['validation_episodes']:.0f} episodes) {row['validation_s']:.2f} s")
        print(f"2 vs 1 process: generation ×{figures['speedup_gen_tokens_per_s']:.2f} "
              f"(efficiency {figures['efficiency_gen_tokens_per_s']:.2f}), update "
              f"×{figures['speedup_update_transitions_per_s']:.2f} (efficiency "
              f"{figures['efficiency_update_transitions_per_s']:.2f}), step "
              f"×{figures['speedup_step']:.2f}, update of the fixed rollouts "
              f"×{figures['speedup_fixed_rollout_update']:.2f}, validation "
              f"×{figures['speedup_validation']:.2f}")
    if args.only in (None, "memory"):
        results["memory"] = memory(args.model)
        print(f"{'run':<12} {'weights MiB':>12} {'(estimate)':>10} {'AdamW MiB':>10} "
              f"{'(estimate)':>10} {'sampler MiB':>11} {'critic MiB':>10} {'(estimate)':>10} "
              f"{'peak RSS MiB':>12}")
        for name, row in results["memory"].items():
            got, est = row["measured"], row["estimated"]
            print(f"{name:<12} {got['weights'] / 2**20:>12.2f} {est['weights'] / 2**20:>10.2f} "
                  f"{got['optimizer'] / 2**20:>10.2f} {est['optimizer'] / 2**20:>10.2f} "
                  f"{got['sampler'] / 2**20:>11.2f} {got['critic'] / 2**20:>10.2f} "
                  f"{est['critic'] / 2**20:>10.2f} {got['peak_rss'] / 2**20:>12.0f}")
    results["seconds"] = time.perf_counter() - start
    out = REPO / "benchmarks" / "results" / "distributed.json"
    # --only keeps the other part's figures from an earlier run
    kept = json.loads(out.read_text()) if out.is_file() else {}
    out.write_text(json.dumps({**kept, **results}, indent=1, default=str) + "\n")
    print(f"{results['seconds']:.0f} s; written to {out}")


if __name__ == "__main__":
    main()
