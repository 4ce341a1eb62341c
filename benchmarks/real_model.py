"""A real instruct model on CPU: SmolLM2-135M-Instruct zero-shot, after a short LoRA SFT on
expert transcripts, and GRPO against GRPO + PaW from that start over paired seeds.

Every step is a ``paw-gym`` command, the path a user takes (``get-model``, ``eval``, ``sft``,
``train``), run in its own process with one torch thread; its CPU time is read from the
operating system (``getrusage`` of the child). A stage whose result file exists is not run
again, so the study resumes where it stopped and runs in pieces.

    python -m benchmarks.real_model shelf --stages zero-shot sft       # the start
    python -m benchmarks.real_model shelf --stages rl --seeds 0 1 2    # paired RL runs
    python -m benchmarks.real_model shelf --report                     # the tables
    python -m benchmarks.real_model shelf --stop "session end"         # stop at a checkpoint
    python -m benchmarks.real_model shelf-sparse --term-gradients 6:3  # the gradient's split
    python -m benchmarks.real_model shelf-sparse --term-gradients 6:3 --wm-loss ce

Stages per recipe (:data:`RECIPES`): ``zero-shot`` (``eval`` of the model as it comes),
``sft`` (record expert episodes, ``sft`` with the recipe's config, ``eval`` of the adapter),
``rl`` (``train`` with the recipe's config from the SFT adapter, ``--paw true`` and ``--paw
false`` for each seed: same seed, same tasks; the trainer validates on every held-out task).
``--term-gradients SEED:UPDATE`` remakes an update of a finished GRPO + PaW run from its
checkpoint with ``term_gradient_metric`` (:func:`term_gradients`). Runs go to
``runs/real-model/<recipe>/`` (``--runs``: another clone's, for a study run from a worktree),
results to ``benchmarks/results/real_model/<recipe>/`` (one JSON file per stage and per RL run,
each naming the machine).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import REPO, RESULTS, machine
from training.infra.paw_settings import WMLoss

RUNS = REPO / "runs" / "real-model"
MODEL = "smollm2-135m-instruct"


@dataclass(frozen=True)
class Recipe:
    """One env's zero-shot → SFT → RL study."""

    env_id: str
    record_split: str
    """The split expert episodes are recorded on (the held-out split is the env's own)."""
    episodes: int
    """Expert episodes for the SFT."""
    sft_config: str
    """An SFTConfig YAML under configs/real/."""
    rl_config: str | None = None
    """A TrainConfig YAML under configs/real/ (None: no RL stage)."""
    eval_limit: int | None = None
    """Held-out tasks evaluated (a stratified subset; None: every task once)."""
    max_new_tokens: int = 48
    max_steps: int | None = None
    """Step limit of an evaluated episode (None: the env's registered limit)."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Env arguments of every stage (e.g. an ALFWorld game folder)."""
    eval_temperature: float | None = None
    """Sampling temperature of every ``paw-gym eval`` (0: greedy; None: eval's default, 0.4)."""
    wm_held_out: int = 0
    """Noisy-expert (ε = 0.5) episodes of the held-out split recorded once by the ``sft``
    stage; every validation of an RL run then reads the policy as a world model on their
    transitions (``--val_wm_replay``: ``val_wm_token``, ``val_wm_exact``). 0: none."""
    checkpoint_evals: bool = False
    """After an RL run, evaluate each of its checkpoints with ``paw-gym eval`` (every held-out
    task once, at ``eval_temperature``), besides the run's own validations."""


#: WebShop's real products (the 1,000-product WebShop-small catalog), where this checkout has
#: them (../shared/data; a user's clone does not: the recipe then says so and stops).
WEBSHOP_DATA = REPO.parent / "shared" / "data" / "webshop"

RECIPES: dict[str, Recipe] = {
    "shelf": Recipe("PaW/Shelf-v0", "train", 24, "configs/real/shelf_smollm2_sft.yaml",
                    "configs/real/shelf_smollm2_grpo_paw.yaml"),
    # Maps are generated from the seed: 48 held-out maps, at most 12 steps each (the expert
    # needs at most 6 on a 4x4 map; the registered limit is 20).
    "frozenlake": Recipe("PaW/FrozenLake-v0", "train", 24,
                         "configs/real/frozenlake_smollm2_sft.yaml", eval_limit=48, max_steps=12),
    # 20 of the 500 held-out goals (stratified), at most 10 steps each: an episode of a model
    # that never buys costs ~7,000 prompt tokens on one core.
    # Issue 55: the paper's sparse-reward regime. The Shelf SFT start sampled at 1.0 (97 %
    # invalid actions); greedy evaluations with the RL run's token and step budgets.
    "shelf-sparse": Recipe("PaW/Shelf-v0", "train", 24, "configs/real/shelf_smollm2_sft.yaml",
                           "configs/real/shelf_smollm2_sparse_grpo_paw.yaml",
                           max_new_tokens=32, max_steps=4, eval_temperature=0.0,
                           wm_held_out=48, checkpoint_evals=True),
    "webshop": Recipe("PaW/WebShop-v0", "train", 24, "configs/real/webshop_smollm2_sft.yaml",
                      eval_limit=20, max_steps=10,
                      env_kwargs={"data_dir": str(WEBSHOP_DATA), "expert": "visible"}),
    # 12 of the held-out (unseen-room) games, at most 20 steps each (the paper allows 50).
    "alfworld": Recipe("PaW/ALFWorld-v0", "train", 12, "configs/real/alfworld_smollm2_sft.yaml",
                       eval_limit=12, max_steps=20),
}


def run_command(args: list[str], log: Path) -> dict[str, float]:
    """Run ``paw-gym ARGS`` with one torch thread, its output into ``log``; returns its wall
    and CPU seconds (user + system of the child and its children)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w", encoding="utf-8") as out:
        out.write("$ paw-gym " + " ".join(args) + "\n")
        out.flush()
        done = subprocess.run([sys.executable, "-m", "training.cli", *args], stdout=out,
                              stderr=subprocess.STDOUT, cwd=REPO, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"paw-gym {' '.join(args)} exited {done.returncode}; see {log}")
    return {"wall_s": time.perf_counter() - start,
            "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)}


def eval_args(recipe: Recipe, out: Path, *, model: str | None = None,
              checkpoint: Path | None = None) -> list[str]:
    args = ["eval", "--env", recipe.env_id, "--max_new_tokens", str(recipe.max_new_tokens),
            "--output_dir", str(out), "--name", "eval", "--save_trajectories", "true",
            "--overwrite", "true"]
    args += ["--model", model] if model else ["--checkpoint", str(checkpoint)]
    if recipe.eval_limit is not None:
        args += ["--limit", str(recipe.eval_limit)]
    if recipe.max_steps is not None:
        args += ["--max_steps", str(recipe.max_steps)]
    if recipe.env_kwargs:
        args += ["--env_kwargs", json.dumps(recipe.env_kwargs)]
    if recipe.eval_temperature is not None:
        args += ["--temperature", str(recipe.eval_temperature)]
    return args


def evaluation(out: Path) -> dict[str, Any]:
    """Success, invalid-action share and per-type success of ``paw-gym eval``'s table."""
    rows = json.loads((out / "eval.json").read_text(encoding="utf-8"))["rows"]
    overall = rows[-1]  # the table's last row is the overall one (its percentages as shares)
    return {"success": overall["success"] / 100, "invalid": overall["invalid"] / 100,
            "episodes": overall["episodes"],
            "by_type": {row["task_type"]: row["success"] / 100 for row in rows[:-1]}}


def zero_shot(name: str, recipe: Recipe) -> dict[str, Any]:
    out = RUNS / name / "zero-shot"
    cost = run_command(eval_args(recipe, out, model=MODEL), out / "log.txt")
    return {**evaluation(out), **cost}


def sft(name: str, recipe: Recipe) -> dict[str, Any]:
    folder = RUNS / name
    adapter = folder / "sft"
    record = ["sft", "--config", recipe.sft_config, "--record_env", recipe.env_id,
              "--split", recipe.record_split, "--episodes", str(recipe.episodes),
              "--replay", str(folder / "demos"), "--output_dir", str(adapter),
              "--overwrite", "true", "--progress", "false"]
    if recipe.env_kwargs:
        record += ["--env_kwargs", json.dumps(recipe.env_kwargs)]
    trained = run_command(record, folder / "sft-log.txt")
    if recipe.wm_held_out:
        record_held_out(recipe, held_out_replay(name))
    evaluated = run_command(eval_args(recipe, folder / "sft-eval", checkpoint=adapter),
                            folder / "sft-eval" / "log.txt")
    return {**evaluation(folder / "sft-eval"), "sft_cpu_s": trained["cpu_s"],
            "sft_wall_s": trained["wall_s"], "eval_cpu_s": evaluated["cpu_s"],
            "eval_wall_s": evaluated["wall_s"]}


def trained(args: list[str], folder: Path) -> dict[str, float]:
    """Run ``paw-gym train ARGS`` into ``folder`` and return its cost, kept in
    ``<folder>.cost.json`` (beside the run: the trainer's folder holds what it writes): a run
    that finished is not trained again when the stage's evaluations or result file are redone.
    A run that was stopped (a session's end) and left a checkpoint goes on from it with
    ``--resume``, exactly (the trainer restores weights, optimizer, schedule and every RNG);
    its cost here is the piece that finished (``pieces`` is then 2, however many there were:
    the updates a stopped piece made after its last checkpoint are made again); a piece that
    ``--stop`` ended has its CPU time in :data:`STOPPED_PIECES` (:func:`stop_runs`)."""
    cost_file = folder.with_name(folder.name + ".cost.json")
    if cost_file.is_file():
        return json.loads(cost_file.read_text(encoding="utf-8"))
    log = folder.with_name(folder.name + ".log")
    if any((folder / "checkpoints").glob("step-*")):
        at = args.index("--overwrite")  # a resumed run keeps what its folder holds
        resumed = args[:at] + args[at + 2:] + ["--resume"]
        cost = {**run_command(resumed, log.with_name(log.stem + ".resumed.log")), "pieces": 2}
    else:
        cost = {**run_command(args, log), "pieces": 1}
    cost_file.write_text(json.dumps(cost), encoding="utf-8")
    return cost


def _config_value(config: str, key: str) -> Any:
    import yaml

    return yaml.safe_load((REPO / config).read_text(encoding="utf-8"))[key]


def held_out_replay(name: str) -> Path:
    return RUNS / name / "wm-held-out"


def record_held_out(recipe: Recipe, folder: Path) -> None:
    """``recipe.wm_held_out`` noisy-expert (ε = 0.5) episodes of the held-out split, task seeds
    0.., with the RL runs' prompt (the env's preset) and step limit: the transitions on which
    validation reads each policy as a world model (the small-env study's protocol,
    ``training.presets.held_out_transitions``). Recorded once; the same episodes every time."""
    from training.warmstart.sft import record_expert_episodes

    if not folder.is_dir():
        record_expert_episodes(recipe.env_id, recipe.wm_held_out, folder, seed=0, epsilon=0.5,
                               max_steps=recipe.max_steps, split="test", **recipe.env_kwargs)


#: The per-update training metrics an RL result keeps (metrics.jsonl's names).
CURVE_KEYS = ("step", "success", "reward", "invalid_frac", "action_entropy",
              "zero_advantage_groups", "lambda_mean", "wm_selected", "transitions", "wm_leak",
              "wm_term", "wm_loss", "grad_norm")
#: The validation metrics an RL result keeps per validated update.
VAL_KEYS = ("val_success", "val_invalid_frac", "val_wm_token", "val_wm_exact",
            "val_wm_token_kept", "val_wm_token_changed")


def rl(name: str, recipe: Recipe, seed: int, paw: bool) -> dict[str, Any]:
    folder = RUNS / name / "rl" / f"{'grpo_paw' if paw else 'grpo'}-s{seed}"
    args = ["train", "--config", recipe.rl_config, "--init_checkpoint", str(RUNS / name / "sft"),
            "--seed", str(seed), "--paw", str(paw).lower(), "--output_dir", str(folder),
            "--overwrite", "true", "--progress", "false"]
    if recipe.wm_held_out:
        args += ["--val_wm_replay", str(held_out_replay(name))]
    from training.infra.checkpoint import checkpoint_step, checkpoints_newest_first
    from training.infra.metrics_log import read_metrics

    cost = trained(args, folder)
    metrics = read_metrics(folder / "metrics.jsonl")
    validations = [m for m in metrics if "val_success" in m]
    updates = [m for m in metrics if "success" in m and "step_time" in m]
    extra: dict[str, Any] = {}
    if recipe.checkpoint_evals:
        extra["checkpoint_evals"] = {}
        every = _config_value(recipe.rl_config, "val_every")
        for checkpoint in reversed(checkpoints_newest_first(folder)):
            step = checkpoint_step(checkpoint)
            if step % every:
                continue  # evaluated where the run validates; other checkpoints are for resume
            out = folder.with_name(folder.name + "-eval") / checkpoint.name
            evaluated = run_command(eval_args(recipe, out, checkpoint=checkpoint),
                                    out.with_suffix(".log"))
            extra["checkpoint_evals"][step] = {
                **evaluation(out), "temperature": recipe.eval_temperature, **evaluated}
        extra["curves"] = [{k: m.get(k) for k in CURVE_KEYS} for m in updates]
        extra["validations"] = [{"step": m["step"], **{k: m.get(k) for k in VAL_KEYS}}
                                for m in validations]
        extra["first_win_outputs"] = first_win_outputs(folder / "replay")
        extra["win_groups"] = win_groups(folder / "replay")
    return {"seed": seed, "paw": paw, **cost, **extra,
            "val": {int(m["step"]): m["val_success"] for m in validations},
            "val_invalid": {int(m["step"]): m.get("val_invalid_frac") for m in validations},
            "train_success": [m["success"] for m in updates],
            "lambda_mean": _mean([m.get("lambda_mean") for m in updates]),
            "wm_coverage": _mean([m["wm_selected"] / m["transitions"] for m in updates
                                  if m.get("transitions")]),
            "wm_leak": _mean([m.get("wm_leak") for m in updates]),
            "rollout_s": _mean([m.get("rollout_time") for m in updates]),
            "update_s": _mean([m.get("update_time") for m in updates])}


def first_win_outputs(replay: Path) -> dict[str, Any] | None:
    """The policy's outputs on the rollout before its first training win and on that win (one
    episode each, from the run's replay): what changed when it began to win. None: no win."""
    from wrappers import WMReplay

    episodes: dict[int, list[list[dict[str, Any]]]] = {}
    for episode in WMReplay.load(replay).episodes().values():
        episodes.setdefault(int(episode[0]["update"]), []).append(episode)
    wins = [u for u in sorted(episodes) if any(_won(e) for e in episodes[u])]
    if not wins:
        return None
    first = wins[0]
    win = next(e for e in episodes[first] if _won(e))
    before = episodes.get(first - 1, [[]])[0]
    return {"update": first,
            "before": [{"h_tail": r["h"][-300:], "a": r["a"], "o_next": r["o_next"][:300]}
                       for r in before],
            "win": [{"h_tail": r["h"][-300:], "a": r["a"], "o_next": r["o_next"][:300]}
                    for r in win]}


def win_groups(replay: Path) -> dict[int, float]:
    """Per update, the share of its rollout groups with at least one won episode: the groups
    whose task return gives GRPO a signal (an invalid-action penalty alone also makes a
    group's advantages non-zero, which ``zero_advantage_groups`` counts)."""
    from wrappers import WMReplay

    groups: dict[int, dict[int, bool]] = {}
    for episode in WMReplay.load(replay).episodes().values():
        update, group = int(episode[0]["update"]), int(episode[0]["group"])
        groups.setdefault(update, {})
        groups[update][group] = groups[update].get(group, False) or _won(episode)
    return {update: sum(won.values()) / len(won) for update, won in sorted(groups.items())}


#: The per-update metrics a term-gradient measurement keeps: what identifies the update
#: (compared with the run's own record of it) and the split itself.
TERM_KEYS = ("success", "invalid_frac", "zero_advantage_groups", "lambda_mean", "wm_selected",
             "wm_loss", "wm_clipped_frac", "wm_active_tokens", "grad_norm", "grad_norm_rl",
             "grad_norm_wm", "grad_cos_rl_wm")


def term_gradient_inputs(name: str, seed: int, update: int) -> tuple[Path, Path, Path]:
    """What :func:`term_gradients` reads: the run's folder, its checkpoint before ``update``
    and its result file; a clear exit naming what is missing (checked for every requested
    measurement before any runs)."""
    from training.infra.checkpoint import checkpoint_dir, checkpoint_step, checkpoints_newest_first

    run = RUNS / name / "rl" / f"grpo_paw-s{seed}"
    checkpoint = checkpoint_dir(run, update - 1)
    result = result_path(name, f"rl-grpo_paw-s{seed}")
    if not checkpoint.is_dir() or not result.is_file():
        saved = sorted(checkpoint_step(c) + 1 for c in checkpoints_newest_first(run))
        saved = saved[:-1]  # the last checkpoint is the run's end
        raise SystemExit(f"--term-gradients {seed}:{update} needs the finished run {run.name} "
                         f"and its checkpoint {checkpoint.name}; the updates its checkpoints "
                         f"allow: {saved or 'none (no checkpoint under ' + str(run) + ')'}")
    return run, checkpoint, result


def term_gradients(name: str, seed: int, update: int, wm_loss: str | None = None
                   ) -> dict[str, Any]:
    """Where the gradient of the recipe's GRPO + PaW run of ``seed`` comes from at ``update``:
    that update made again from the run's checkpoint before it (``--resume``: the same rollout
    and gradient, which the result shows beside the run's own record of the update) with
    ``term_gradient_metric``, the norms of the policy term's and the world-model term's parts
    of the gradient and their cosine (``PolicyUpdate.term_gradients``). ``wm_loss``: the same
    update with another world-model loss (None: the run's own), whose gradient then differs
    from the run's. Nothing is saved but the metrics: no checkpoint, no validation."""
    from training.infra.metrics_log import read_metrics

    run, checkpoint, result = term_gradient_inputs(name, seed, update)
    out = RUNS / name / "term-gradients" / (f"grpo_paw-s{seed}-u{update}"
                                            + (f"-{wm_loss}" if wm_loss else ""))
    cost = run_command(["train", "--config", str(run / "config.yaml"), "--resume",
                        str(checkpoint), "--output_dir", str(out), "--total_steps", str(update),
                        "--val_every", "0", "--val_before_train", "false", "--save_every", "0",
                        "--term_gradient_metric", "true", "--progress", "false",
                        *(["--wm_loss", wm_loss] if wm_loss else [])],
                       out.with_suffix(".log"))
    [measured] = [m for m in read_metrics(out / "metrics.jsonl") if m["step"] == update]
    [recorded] = [c for c in json.loads(result.read_text(encoding="utf-8"))["curves"]
                  if c["step"] == update]
    return {"seed": seed, "update": update, "wm_loss": wm_loss or _config_value(
                str(run / "config.yaml"), "wm_loss"), **cost,
            "measured": {k: measured.get(k) for k in TERM_KEYS},
            "run_record": {k: recorded.get(k) for k in TERM_KEYS if k in recorded}}


def _won(episode: list[dict[str, Any]]) -> bool:
    return any(record["won"] for record in episode)


def _mean(values: list[float | None]) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def result_path(name: str, stage: str) -> Path:
    """One file per stage and per RL run, so studies of several seeds run side by side."""
    return RESULTS / "real_model" / name / f"{stage}.json"


#: Beside a recipe's results: one JSON line per RL run piece that ``--stop`` ended.
STOPPED_PIECES = "stopped-pieces.jsonl"


def _argument(command: list[str], flag: str) -> str | None:
    return command[command.index(flag) + 1] if flag in command[:-1] else None


def _cpu_seconds(process) -> float:
    """User + system CPU seconds of a ``psutil.Process`` and of its children it has waited
    for."""
    times = process.cpu_times()
    return times.user + times.system + times.children_user + times.children_system


def recipe_trainers(name: str) -> dict[Any, Path]:
    """The running ``paw-gym train`` processes of ``name``'s RL stage in this clone, as
    ``psutil.Process`` (which refuses to signal a process whose pid was reused) → run folder:
    their ``--output_dir`` (read against the process's working folder) is a run folder under
    ``RUNS/<name>/rl/`` (another clone's runs, e.g. a study's worktree, are not touched)."""
    import psutil

    runs = (RUNS / name / "rl").resolve()
    trainers = {}
    for process in psutil.process_iter(["cmdline", "cwd"]):
        command, cwd = process.info["cmdline"] or [], process.info["cwd"]
        if "training.cli" not in command or "train" not in command or cwd is None:
            continue
        folder = _argument(command, "--output_dir")
        if folder is not None and (Path(cwd) / folder).resolve().parent == runs:
            trainers[process] = Path(cwd) / folder
    return trainers


def stop_runs(name: str, reason: str, poll_s: float = 5.0) -> list[dict[str, Any]]:
    """End ``name``'s running RL trainers where ``--resume`` loses nothing (a session's end):
    wait until each has written a checkpoint newer than the one it had, pause it there
    (SIGSTOP), read its CPU seconds (:func:`_cpu_seconds`), then kill its driver (this module's
    process that started it, so that no evaluation or next seed starts) and it. One JSON line
    per run goes to :data:`STOPPED_PIECES` beside the recipe's results; ``--report`` adds those
    CPU seconds to the run's, whose result file holds only the piece that finished. The
    updates a trainer makes after the checkpoint it stops at are made again on resume."""
    import psutil

    from training.infra.checkpoint import (checkpoint_step, latest_checkpoint,
                                           latest_intact_checkpoint)

    trainers = recipe_trainers(name)
    if not trainers:
        raise SystemExit(f"no RL run of {name} is running (no `paw-gym train` process whose "
                         f"--output_dir is in {RUNS / name / 'rl'})")
    had = {process: latest_checkpoint(folder) for process, folder in trainers.items()}
    print(f"waiting for the next checkpoint of {', '.join(f.name for f in trainers.values())}",
          flush=True)
    stopped: dict[Any, tuple[Path | None, float | None]] = {}
    while len(stopped) < len(trainers):
        for process, folder in trainers.items():
            if process in stopped:
                continue
            if not process.is_running():  # it finished (or failed) meanwhile
                stopped[process] = (latest_intact_checkpoint(folder), None)
                continue
            newest = latest_checkpoint(folder)
            if newest is not None and newest != had[process]:
                intact = latest_intact_checkpoint(folder)
                if intact == newest:
                    process.suspend()
                    stopped[process] = (intact, _cpu_seconds(process))
        time.sleep(poll_s)
    for process in stopped:
        try:
            driver = process.parent()
            if driver is not None and "benchmarks.real_model" in driver.cmdline():
                driver.kill()
            process.kill()
        except psutil.NoSuchProcess:
            pass
    records = [{"run": trainers[process].name,
                "after_update": checkpoint_step(checkpoint) if checkpoint else None,
                "cpu_s": cpu,
                "stopped_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "reason": reason}
               for process, (checkpoint, cpu) in stopped.items() if cpu is not None]
    path = RESULTS / "real_model" / name / STOPPED_PIECES
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as log:
        for record in records:
            log.write(json.dumps(record) + "\n")
            print(f"stopped {record['run']} after update {record['after_update']}: "
                  f"{record['cpu_s']:.0f} CPU s in this piece", flush=True)
    return records


def stopped_cpu(name: str) -> dict[str, float]:
    """Per RL run (``grpo_paw-s0``), the CPU seconds of its pieces that ``--stop`` ended."""
    path = RESULTS / "real_model" / name / STOPPED_PIECES
    totals: dict[str, float] = {}
    for line in path.read_text(encoding="utf-8").splitlines() if path.is_file() else []:
        record = json.loads(line)
        totals[record["run"]] = totals.get(record["run"], 0.0) + record["cpu_s"]
    return totals


def load_results(name: str) -> dict[str, Any]:
    """``{"zero_shot": ..., "sft": ..., "rl": {"grpo_paw-s0": ...}}`` of what has run."""
    folder = RESULTS / "real_model" / name
    results: dict[str, Any] = {"rl": {}}
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        data = json.loads(path.read_text(encoding="utf-8"))
        if path.stem.startswith("rl-"):
            results["rl"][path.stem[3:]] = data
        elif path.stem.startswith("term-gradients-"):
            results.setdefault("term_gradients", {})[path.stem] = data
        else:
            results[path.stem.replace("-", "_")] = data
    return results


def code_version() -> dict[str, Any]:
    """The commit the stage ran (a study's runs use one commit: run it from a worktree) and
    whether the tree had changes beside it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True,
                              text=True).stdout.strip()

    return {"commit": git("rev-parse", "HEAD"),
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


def run_stage(name: str, stage: str, work, outputs: Path | None = None) -> None:
    """Run ``work()`` unless its result file exists, then write it (with the machine).

    ``outputs``: what later stages read from this one (the SFT adapter the RL runs start
    from). A result file is committed while the run folders are not, so on a fresh clone the
    result is there and the adapter is not: the stage is then run again (same commit and seed:
    the same adapter and the same numbers, which the rewritten result file shows in git)."""
    path = result_path(name, stage)
    if path.is_file() and (outputs is None or outputs.exists()):
        return
    result = {**work(), "machine": machine(), "code": code_version()}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1, sort_keys=True), encoding="utf-8")
    tmp.replace(path)
    print(f"{name}: {stage} done ({result.get('cpu_s', result.get('sft_cpu_s', 0)) / 60:.1f} "
          "CPU min)", flush=True)


def run_study(name: str, stages: list[str], seeds: list[int], variants: list[bool]) -> None:
    recipe = RECIPES[name]
    data = recipe.env_kwargs.get("data_dir")
    if data and not Path(data).is_dir():
        raise SystemExit(f"the {name} recipe reads real data from {data}, which this checkout "
                         "does not have")
    for stage in stages:
        if stage == "zero-shot":
            run_stage(name, "zero-shot", lambda: zero_shot(name, recipe))
        elif stage == "sft":
            run_stage(name, "sft", lambda: sft(name, recipe), outputs=RUNS / name / "sft")
        elif stage == "rl" and recipe.rl_config:
            for seed in seeds:  # seed-major: a study cut short stays paired
                for paw in variants:
                    run_stage(name, f"rl-{'grpo_paw' if paw else 'grpo'}-s{seed}",
                              lambda: rl(name, recipe, seed, paw))


def report(name: str) -> str:
    """Markdown tables of one recipe's results (every seed that ran)."""
    from benchmarks.study_small import mean_ci

    results = load_results(name)
    lines = [f"#### {RECIPES[name].env_id}", ""]
    for key, label in (("zero_shot", "zero-shot"), ("sft", "after LoRA SFT")):
        if key in results:
            r = results[key]
            cpu = r.get("cpu_s", r.get("eval_cpu_s", 0.0)) + r.get("sft_cpu_s", 0.0)
            lines.append(f"- {label}: {100 * r['success']:.1f} % held-out success "
                         f"({r['episodes']} episodes), {100 * (r['invalid'] or 0):.1f} % invalid "
                         f"actions ({cpu / 60:.1f} CPU min)")
    runs = results.get("rl", {})
    if runs:
        lines += ["", "| seed | variant | held-out success at each validation (%) | Δ (pp) | "
                      "held-out invalid first → last (%) | train success first → last update "
                      "(%) | mean λ_g | WM coverage | wm_leak | CPU min |",
                  "|---:|---|---|---:|---|---|---:|---:|---:|---:|"]
        for key in sorted(runs, key=lambda k: (runs[k]["seed"], runs[k]["paw"])):
            r = runs[key]
            val = {int(k): v for k, v in r["val"].items()}
            invalid = {int(k): v for k, v in r["val_invalid"].items()}
            first, last = val[min(val)], val[max(val)]
            # λ_g, coverage and leak describe the world-model term, which GRPO does not train.
            paw_columns = (f"{r['lambda_mean']:.2f} | {r['wm_coverage'] or 0:.2f} | "
                           f"{r['wm_leak']:.3f}") if r["paw"] else "– | – | –"
            lines.append(
                f"| {r['seed']} | {'GRPO + PaW' if r['paw'] else 'GRPO'} | "
                + " → ".join(f"{100 * val[k]:.1f}" for k in sorted(val))
                + f" | {100 * (last - first):+.1f} | {100 * invalid[min(invalid)]:.0f} → "
                f"{100 * invalid[max(invalid)]:.0f} | {100 * r['train_success'][0]:.0f} → "
                f"{100 * r['train_success'][-1]:.0f} | {paw_columns} | {r['cpu_s'] / 60:.0f} |")
        seeds = sorted({r["seed"] for r in runs.values() if f"grpo-s{r['seed']}" in runs
                        and f"grpo_paw-s{r['seed']}" in runs})

        def final(key):
            val = runs[key]["val"]
            return 100 * val[max(val, key=int)]

        def gain(key, curve="val"):
            val = {int(k): v for k, v in runs[key][curve].items()}
            return 100 * (val[max(val)] - val[min(val)])

        lines.append("")
        if len(seeds) >= 2:
            for variant, label in (("grpo", "GRPO"), ("grpo_paw", "GRPO + PaW")):
                mean, half = mean_ci([gain(f"{variant}-s{s}") for s in seeds])
                invalid, invalid_half = mean_ci([gain(f"{variant}-s{s}", "val_invalid")
                                                 for s in seeds])
                lines.append(f"- {label}: held-out gain {mean:+.1f} ± {half:.1f} pp, invalid "
                             f"actions {invalid:+.1f} ± {invalid_half:.1f} pp, over "
                             f"{len(seeds)} seeds (95 % CI)")
            mean, half = mean_ci([final(f"grpo_paw-s{s}") - final(f"grpo-s{s}") for s in seeds])
            lines.append(f"- GRPO + PaW − GRPO, final held-out success: {mean:+.1f} ± {half:.1f} "
                         f"pp (paired, {len(seeds)} seeds)")
        cpu = sum(r["cpu_s"] for r in runs.values())
        where = next(iter(runs.values())).get("machine", {}).get("cpu", "?")
        lines.append(f"- CPU time of the {len(runs)} RL runs: {cpu / 3600:.1f} h ({where})")
    return "\n".join(lines)


def report_cell(name: str) -> str:
    """The sparse-regime cell's tables (issue 55): per seed the regime figure, the first
    training win, the groups with signal, λ_g and the WM term's coverage, held-out success and
    invalid actions at the rollout temperature and greedy, the world-model readings; then the
    paired PaW − GRPO differences with their 95 % CIs. Every seed that ran is listed."""
    from benchmarks.study_small import mean_ci

    results = load_results(name)
    runs = results.get("rl", {})
    lines = [f"#### {RECIPES[name].env_id}, {name}", ""]
    if "sft" in results:
        r = results["sft"]
        lines.append(f"- the start (LoRA SFT), greedy: {100 * r['success']:.1f} % held-out "
                     f"success ({r['episodes']} episodes), {100 * (r['invalid'] or 0):.1f} % "
                     f"invalid actions")
    if not runs:
        return "\n".join(lines)
    lines += ["", "| seed | variant | GRPO's train wins, updates 1–3 (%) | first train win "
              "(update) | train success, all updates (%) | groups with a win (%) | groups "
              "with a non-zero advantage (%) | held-out at T = 1.0: 0 → 10 → 20 (%) | greedy: "
              "0 → 10 → 20 (%) | held-out invalid at T = 1.0, 0 → 20 (%) | greedy invalid "
              "0 → 20 (%) | WM token acc. 0 → 20 (%) | WM exact 0 → 20 (%) | mean λ_g | "
              "WM coverage | wm_leak | CPU min |",
              "|---:|---|---:|---:|---:|---:|---:|---|---|---|---|---|---|---:|---:|---:|---:|"]
    start_greedy = results.get("sft", {}).get("success")
    start_greedy_invalid = results.get("sft", {}).get("invalid")
    stopped = stopped_cpu(name)
    # A resumed run's result file has the CPU time of its last piece only; --stop logs the
    # pieces it ends. A resumed run none of whose stopped pieces were logged is marked.
    unlogged = {key for key, r in runs.items() if r.get("pieces", 1) > 1 and key not in stopped}
    for key in sorted(runs, key=lambda k: (runs[k]["seed"], runs[k]["paw"])):
        r = runs[key]
        c = cell_numbers(r, start_greedy)
        regime = runs.get(f"grpo-s{r['seed']}")
        regime_text = f"{100 * cell_numbers(regime)['early_success']:.1f}" if regime else "–"
        paw = (f"{c['lambda']:.2f} | {c['coverage']:.2f} | {c['leak']:.3f}" if r["paw"]
               else "– | – | –")
        lines.append(
            f"| {r['seed']} | {'GRPO + PaW' if r['paw'] else 'GRPO'} | {regime_text} | "
            f"{c['first_win'] if c['first_win'] is not None else 'none'} | "
            f"{100 * c['train_success']:.1f} | {100 * c['win_groups']:.0f} | "
            f"{100 * c['signal_groups']:.0f} | "
            + " → ".join(f"{100 * v:.1f}" for v in c["val"]) + " | "
            + " → ".join("–" if v is None else f"{100 * v:.1f}" for v in c["greedy"]) + " | "
            f"{100 * c['val_invalid'][0]:.0f} → {100 * c['val_invalid'][-1]:.0f} | "
            + " → ".join(_pct(v) for v in (start_greedy_invalid, c["greedy_invalid"])) + " | "
            + " → ".join(_pct(v) for v in (c["wm_token"][0], c["wm_token"][-1])) + " | "
            + " → ".join(_pct(v) for v in (c["wm_exact"][0], c["wm_exact"][-1]))
            + f" | {paw} | {(r['cpu_s'] + stopped.get(key, 0.0)) / 60:.0f}"
            f"{RESUMED_MARK if key in unlogged else ''} |")
    seeds = sorted({r["seed"] for r in runs.values()
                    if f"grpo-s{r['seed']}" in runs and f"grpo_paw-s{r['seed']}" in runs})
    lines.append("")
    if unlogged:
        lines += [f"{RESUMED_MARK} resumed from a checkpoint before `--stop` logged stopped "
                  "pieces: its CPU minutes are those of the last piece only", ""]
    held = [s for s in seeds if cell_numbers(runs[f"grpo-s{s}"])["early_success"] < 0.05]
    lines.append(f"- the regime (GRPO wins < 5 % of its training rollouts over updates 1–3) "
                 f"holds on {len(held)} of {len(seeds)} paired seeds")
    if len(seeds) >= 2:
        rows = [("final held-out success at T = 1.0", lambda c: 100 * c["val"][-1]),
                ("final held-out success, greedy", lambda c: 100 * (c["greedy"][-1] or 0)),
                ("held-out invalid actions at T = 1.0, final", lambda c: 100 * c["val_invalid"][-1]),
                ("held-out invalid actions, greedy, final",
                 lambda c: 100 * (c["greedy_invalid"] or 0)),
                ("training success, all updates", lambda c: 100 * c["train_success"]),
                ("groups with a win, all updates", lambda c: 100 * c["win_groups"]),
                ("WM token accuracy, final", lambda c: 100 * (c["wm_token"][-1] or 0))]
        for label, value in rows:
            diffs = [value(cell_numbers(runs[f"grpo_paw-s{s}"], start_greedy))
                     - value(cell_numbers(runs[f"grpo-s{s}"], start_greedy)) for s in seeds]
            mean, half = mean_ci(diffs)
            lines.append(f"- GRPO + PaW − GRPO, {label}: {mean:+.1f} ± {half:.1f} pp (paired, "
                         f"{len(seeds)} seeds, 95 % CI)")
        firsts = {variant: [cell_numbers(runs[f"{variant}-s{s}"])["first_win"] for s in seeds]
                  for variant in ("grpo", "grpo_paw")}
        both = [(g, p) for g, p in zip(firsts["grpo"], firsts["grpo_paw"])
                if g is not None and p is not None]
        if len(both) >= 2:
            mean, half = mean_ci([p - g for g, p in both])
            lines.append(f"- GRPO + PaW − GRPO, update of the first training win: {mean:+.1f} ± "
                         f"{half:.1f} updates (paired, {len(both)} seeds where both won, "
                         f"95 % CI); PaW's came earlier in {sum(p < g for g, p in both)}, "
                         f"at the same update in {sum(p == g for g, p in both)}")
        for variant, label in (("grpo", "GRPO"), ("grpo_paw", "GRPO + PaW")):
            firsts = [cell_numbers(runs[f"{variant}-s{s}"])["first_win"] for s in seeds]
            lines.append(f"- {label}: a training win in {sum(f is not None for f in firsts)} of "
                         f"{len(seeds)} runs, first at update(s) "
                         + ", ".join("none" if f is None else str(f) for f in firsts))
    cpu = sum(r["cpu_s"] + stopped.get(key, 0.0)
              + sum(e.get("cpu_s", 0) for e in r.get("checkpoint_evals", {}).values())
              for key, r in runs.items())
    where = next(iter(runs.values())).get("machine", {}).get("cpu", "?")
    commits = sorted({r.get("code", {}).get("commit", "?")[:7] for r in runs.values()})
    lines.append(f"- CPU time of the {len(runs)} RL runs with their evaluations: "
                 f"{cpu / 3600:.1f} h ({where}; code {', '.join(commits)})"
                 + (f", {sum(stopped.get(key, 0.0) for key in runs) / 3600:.1f} h of it in "
                    "pieces that `--stop` ended" if stopped else "")
                 + (f"; {len(unlogged)} of them resumed, counted from their last piece only"
                    if unlogged else ""))
    lines += report_term_gradients(results)
    return "\n".join(lines)


def report_term_gradients(results: dict[str, Any]) -> list[str]:
    """The table of a recipe's ``--term-gradients`` measurements (``results``: its
    :func:`load_results`; none measured: no lines)."""
    measured = results.get("term_gradients", {})
    if not measured:
        return []
    lines = ["", "Term gradients of GRPO + PaW updates (`--term-gradients`; the update made "
             "again from the run's checkpoint; ‖g‖ as the run logged it, then as remade):",
             "", "| seed | update | WM loss | training success (%) | invalid (%) | mean λ_g | "
             "‖g‖ run → remade | ‖g_rl‖ | ‖g_wm‖ | ‖g_wm‖ / ‖g_rl‖ | cos(g_rl, g_wm) | "
             "CPU min |",
             "|---:|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
    for key in sorted(measured, key=lambda k: (measured[k]["seed"], measured[k]["update"],
                                               k)):
        r, m = measured[key], measured[key]["measured"]
        lines.append(
            f"| {r['seed']} | {r['update']} | {r['wm_loss']} | {100 * m['success']:.1f} | "
            f"{100 * m['invalid_frac']:.0f} | {m['lambda_mean']:.2f} | "
            f"{r['run_record'].get('grad_norm', float('nan')):.4f} → {m['grad_norm']:.4f} | "
            f"{m['grad_norm_rl']:.4f} | {m['grad_norm_wm']:.4f} | "
            + (f"{m['grad_norm_wm'] / m['grad_norm_rl']:.3f}" if m["grad_norm_rl"] else "–")
            + f" | {m['grad_cos_rl_wm']:+.2f} | "
            f"{r['cpu_s'] / 60:.0f} |")
    return lines


#: Marks a resumed run whose stopped pieces were not logged: its CPU time is its last piece's.
RESUMED_MARK = "†"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def cell_numbers(run: dict[str, Any], start_greedy: float | None = None) -> dict[str, Any]:
    """One sparse-regime run's figures: the update of its first training win (rollouts counted
    from 1), training success over its first 3 updates and over all, the shares of groups with
    a win and with any non-zero advantage, the PaW term's mean λ_g, coverage and leak, and per
    validation (0, 10, 20) held-out success, invalid share and WM readings; greedy held-out
    success at 0 (the start's, shared by every run) and at each checkpoint, and the last
    checkpoint's greedy invalid share."""
    curves = run["curves"]
    success = [c["success"] for c in curves]
    first_win = next((i + 1 for i, value in enumerate(success) if value > 0), None)
    vals = sorted(run["validations"], key=lambda v: v["step"])
    evals = {int(k): v for k, v in run.get("checkpoint_evals", {}).items()}
    return {
        "first_win": first_win,
        "early_success": sum(success[:3]) / len(success[:3]),
        "train_success": sum(success) / len(success),
        "win_groups": _mean(list(run["win_groups"].values())) or 0.0,
        "signal_groups": 1 - (_mean([c["zero_advantage_groups"] for c in curves]) or 0.0),
        "lambda": _mean([c["lambda_mean"] for c in curves]) or 0.0,
        "coverage": _mean([c["wm_selected"] / c["transitions"] for c in curves
                           if c.get("transitions")]) or 0.0,
        "leak": _mean([c["wm_leak"] for c in curves]) or 0.0,
        "val": [v["val_success"] for v in vals],
        "val_invalid": [v["val_invalid_frac"] for v in vals],
        "wm_token": [v.get("val_wm_token") for v in vals],
        "wm_exact": [v.get("val_wm_exact") for v in vals],
        "greedy": [start_greedy] + [evals[k]["success"] for k in sorted(evals)],
        "greedy_invalid": evals[max(evals)].get("invalid") if evals else None,
    }


def plot_cell(name: str, path: Path) -> Path:
    """Figure 4's panels for the cell: per update, training success, invalid-action share and
    the share of groups with a win, each variant's mean over seeds with a band of ± one
    standard deviation (every seed that ran)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    runs = load_results(name)["rl"]
    panels = (("training success", lambda r: [c["success"] for c in r["curves"]]),
              ("invalid actions (training)", lambda r: [c["invalid_frac"] for c in r["curves"]]),
              ("groups with a win", lambda r: list(r["win_groups"].values())))
    figure, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4))
    for axis, (title, series) in zip(axes, panels):
        for variant, label, colour in (("grpo", "GRPO", "tab:blue"),
                                       ("grpo_paw", "GRPO + PaW", "tab:orange")):
            curves = [series(r) for k, r in runs.items() if k.startswith(variant + "-s")]
            if not curves:
                continue
            data = np.array([c[:min(map(len, curves))] for c in curves], dtype=float)
            x = np.arange(1, data.shape[1] + 1)
            mean, sd = data.mean(0), data.std(0)
            axis.plot(x, mean, color=colour, label=f"{label} ({len(curves)} seeds)")
            axis.fill_between(x, mean - sd, mean + sd, color=colour, alpha=0.2)
        axis.set_title(title)
        axis.set_xlabel("update")
        axis.set_ylim(-0.02, 1.02)
    axes[0].legend(fontsize=8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def set_runs(folder: Path) -> None:
    """Read and write the recipes' runs under ``folder`` (``--runs``)."""
    global RUNS
    RUNS = folder.resolve()


def _seed_update(value: str) -> tuple[int, int]:
    """``--term-gradients``' ``SEED:UPDATE`` (an update from 2: the first has no checkpoint
    before it), as an argparse type."""
    seed, _, update = value.partition(":")
    if not (seed.isdigit() and update.isdigit() and int(update) >= 2):
        raise argparse.ArgumentTypeError(f"{value!r}: expected SEED:UPDATE, two integers, the "
                                         "update from 2 (e.g. 6:3)")
    return int(seed), int(update)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("recipe", choices=sorted(RECIPES))
    parser.add_argument("--stages", nargs="+", default=["zero-shot", "sft", "rl"],
                        choices=["zero-shot", "sft", "rl"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--variants", nargs="+", default=["grpo_paw", "grpo"],
                        choices=["grpo_paw", "grpo"])
    parser.add_argument("--report", action="store_true", help="only print the tables")
    parser.add_argument("--stop", metavar="REASON",
                        help="stop the recipe's running RL runs at their next checkpoint, "
                             "logging each piece's CPU time, and exit")
    parser.add_argument("--term-gradients", nargs="+", metavar="SEED:UPDATE", default=[],
                        type=_seed_update, dest="measurements",
                        help="remake these updates of finished GRPO + PaW runs from their "
                             "checkpoints, measuring how the gradient splits between the policy "
                             "and world-model terms, and exit after the report")
    parser.add_argument("--wm-loss", choices=typing.get_args(WMLoss),
                        help="--term-gradients with this world-model loss instead of the run's "
                             "own (the same rollout; the paper's ablation compares CE)")
    parser.add_argument("--runs", type=Path, default=RUNS,
                        help="where the recipe's runs are (default: runs/real-model of this "
                             "clone; another clone's for a study run from a worktree)")
    args = parser.parse_args(argv)
    set_runs(args.runs)
    measurements = args.measurements
    if args.stop is not None:
        stop_runs(args.recipe, args.stop)
        return 0
    if args.wm_loss and not measurements:
        parser.error("--wm-loss goes with --term-gradients")
    stages = {(seed, update): f"term-gradients-s{seed}-u{update}"
              + (f"-{args.wm_loss}" if args.wm_loss else "") for seed, update in measurements}
    for (seed, update), stage in stages.items():
        if not result_path(args.recipe, stage).is_file():
            term_gradient_inputs(args.recipe, seed, update)
    for (seed, update), stage in stages.items():
        run_stage(args.recipe, stage,
                  lambda: term_gradients(args.recipe, seed, update, args.wm_loss))
    if not args.report and not measurements:
        run_study(args.recipe, args.stages, args.seeds,
                  [variant == "grpo_paw" for variant in args.variants])
    if RECIPES[args.recipe].checkpoint_evals:
        print(report_cell(args.recipe))
        if load_results(args.recipe)["rl"]:
            print(plot_cell(args.recipe, RESULTS / "real_model" / f"{args.recipe}.png"))
    else:
        print(report(args.recipe))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
