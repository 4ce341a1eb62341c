"""A real instruct model on CPU: SmolLM2-135M-Instruct zero-shot, after a short LoRA SFT on
expert transcripts, and GRPO against GRPO + PaW from that start over paired seeds.

Every step is a ``paw-gym`` command, the path a user takes (``get-model``, ``eval``, ``sft``,
``train``), run in its own process with one torch thread; its CPU time is read from the
operating system (``getrusage`` of the child). A stage whose result file exists is not run
again, so the study resumes where it stopped and runs in pieces.

    python -m benchmarks.real_model shelf --stages zero-shot sft       # the start
    python -m benchmarks.real_model shelf --stages rl --seeds 0 1 2    # paired RL runs
    python -m benchmarks.real_model shelf --report                     # the tables

Stages per recipe (:data:`RECIPES`): ``zero-shot`` (``eval`` of the model as it comes),
``sft`` (record expert episodes, ``sft`` with the recipe's config, ``eval`` of the adapter),
``rl`` (``train`` with the recipe's config from the SFT adapter, ``--paw true`` and ``--paw
false`` for each seed: same seed, same tasks; the trainer validates on every held-out task).
Runs go to ``runs/real-model/<recipe>/``, results to ``benchmarks/results/real_model/<recipe>/``
(one JSON file per stage and per RL run, each naming the machine).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import REPO, RESULTS, machine

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
    evaluated = run_command(eval_args(recipe, folder / "sft-eval", checkpoint=adapter),
                            folder / "sft-eval" / "log.txt")
    return {**evaluation(folder / "sft-eval"), "sft_cpu_s": trained["cpu_s"],
            "sft_wall_s": trained["wall_s"], "eval_cpu_s": evaluated["cpu_s"],
            "eval_wall_s": evaluated["wall_s"]}


def rl(name: str, recipe: Recipe, seed: int, paw: bool) -> dict[str, Any]:
    folder = RUNS / name / "rl" / f"{'grpo_paw' if paw else 'grpo'}-s{seed}"
    args = ["train", "--config", recipe.rl_config, "--init_checkpoint", str(RUNS / name / "sft"),
            "--seed", str(seed), "--paw", str(paw).lower(), "--output_dir", str(folder),
            "--overwrite", "true", "--progress", "false"]
    cost = run_command(args, folder.with_name(folder.name + ".log"))
    metrics = [json.loads(line) for line in
               (folder / "metrics.jsonl").read_text(encoding="utf-8").splitlines() if line]
    validations = [m for m in metrics if "val_success" in m]
    updates = [m for m in metrics if "success" in m and "step_time" in m]
    return {"seed": seed, "paw": paw, **cost,
            "val": {int(m["step"]): m["val_success"] for m in validations},
            "val_invalid": {int(m["step"]): m.get("val_invalid_frac") for m in validations},
            "train_success": [m["success"] for m in updates],
            "lambda_mean": _mean([m.get("lambda_mean") for m in updates]),
            "wm_coverage": _mean([m["wm_selected"] / m["transitions"] for m in updates
                                  if m.get("transitions")]),
            "wm_leak": _mean([m.get("wm_leak") for m in updates]),
            "rollout_s": _mean([m.get("rollout_time") for m in updates]),
            "update_s": _mean([m.get("update_time") for m in updates])}


def _mean(values: list[float | None]) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def result_path(name: str, stage: str) -> Path:
    """One file per stage and per RL run, so studies of several seeds run side by side."""
    return RESULTS / "real_model" / name / f"{stage}.json"


def load_results(name: str) -> dict[str, Any]:
    """``{"zero_shot": ..., "sft": ..., "rl": {"grpo_paw-s0": ...}}`` of what has run."""
    folder = RESULTS / "real_model" / name
    results: dict[str, Any] = {"rl": {}}
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        data = json.loads(path.read_text(encoding="utf-8"))
        if path.stem.startswith("rl-"):
            results["rl"][path.stem[3:]] = data
        else:
            results[path.stem.replace("-", "_")] = data
    return results


def run_stage(name: str, stage: str, work) -> None:
    """Run ``work()`` unless its result file exists, then write it (with the machine)."""
    path = result_path(name, stage)
    if path.is_file():
        return
    result = {**work(), "machine": machine()}
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
            run_stage(name, "sft", lambda: sft(name, recipe))
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("recipe", choices=sorted(RECIPES))
    parser.add_argument("--stages", nargs="+", default=["zero-shot", "sft", "rl"],
                        choices=["zero-shot", "sft", "rl"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--variants", nargs="+", default=["grpo_paw", "grpo"],
                        choices=["grpo_paw", "grpo"])
    parser.add_argument("--report", action="store_true", help="only print the tables")
    args = parser.parse_args(argv)
    if not args.report:
        run_study(args.recipe, args.stages, args.seeds,
                  [variant == "grpo_paw" for variant in args.variants])
    print(report(args.recipe))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
