"""Issue 56's figures in one table: a real model's RL step against what the CPU can compute,
against TRL, and each change tried, read from the result files the measurements wrote.

    python -m benchmarks.real_model_report            # Markdown to stdout

Each row names its result file, the machine that made it and the command that remakes it
(the measurements take minutes to an hour each on one core; they are run one by one, with the
machine quiet where a row says so). A file that is absent prints as "not measured". The
WebShop update's cost has no result file: it was timed by hand with ``/usr/bin/time``
(benchmarks/README.md, "A WebShop update's cost").
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Callable

from benchmarks.common import RESULTS
from training.infra.numerics import kernels_phrase

#: Each section: its title, its result file (under benchmarks/results), the command that
#: remakes it, and the function that turns the file into rows of (figure, value).
SECTIONS: list[tuple[str, str, str, Callable[[dict[str, Any]], list[tuple[str, str]]]]] = []


def section(title: str, file: str, command: str):
    def register(rows: Callable[[dict[str, Any]], list[tuple[str, str]]]):
        SECTIONS.append((title, file, command, rows))
        return rows
    return register


@section("Each phase against the core's matmul rate and the model's plain pass",
         "real_model_speed_flops.json",
         "python -m benchmarks.real_model_speed --rows 6 --repeats 3 --out "
         "benchmarks/results/real_model_speed_flops.json")
def phases(result: dict[str, Any]) -> list[tuple[str, str]]:
    rows = [("core's float32 matmul rate", f"{result['matmul_gflops']:.0f} GFLOP/s")]
    for name in ("generation", "scoring", "update"):
        rows.append((f"{name}: s, ratio to the plain pass, share of the matmul rate",
                     f"{result['median_s'][name]:.2f} s, {result['ratio_to_ceiling'][name]:.2f}, "
                     f"{result['share_of_matmul_rate'][name]:.2f}"))
    return rows


def _trl_rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    median, ratios = result["median"], result["ratios"]
    advantages = [row.get("advantage_abs_mean", 0.0) for row in result["rounds"]["paw-gym"]]
    return [("update s, paw-gym / TRL", f"{median['paw-gym']['update_s']:.1f} / "
             f"{median['trl']['update_s']:.1f} = {ratios['paw-gym / trl update_s']:.2f}"),
            ("whole step, paw-gym / TRL", f"{ratios['paw-gym / trl step_s']:.2f}"),
            ("s per 1,000 tokens backward, paw-gym / TRL",
             f"{ratios['paw-gym / trl update_s_per_1k_tokens_backward']:.2f}"),
            ("paw-gym's mean absolute advantage per round",
             ", ".join(f"{value:.3f}" for value in advantages))]


section("The same update in TRL, from the bare model (every advantage 0)", "trl_update_speed.json",
        "python -m benchmarks.trl_update_speed")(_trl_rows)
section("The same update in TRL, from the SFT adapter (non-zero advantages)",
        "trl_update_speed_sft.json",
        "python -m benchmarks.trl_update_speed --init-checkpoint <the Shelf SFT adapter> "
        "--temperature 0.6 --out benchmarks/results/trl_update_speed_sft.json")(_trl_rows)


@section("torch.compile of scoring and the update (not kept)", "real_model_compile.json",
         "python -m benchmarks.real_model_speed --rows 6 --repeats 3 --compile --out "
         "benchmarks/results/real_model_compile.json")
def compiled(result: dict[str, Any]) -> list[tuple[str, str]]:
    return [(f"{name}: compiled / eager, first call",
             f"{result['compiled_over_eager'][name]:.2f}, {result['compile_s'][name]:.0f} s")
            for name in ("scoring", "update")]


@section("Where each phase's time goes (torch.profiler)", "real_model_profile.json",
         "python -m benchmarks.real_model_speed --rows 6 --repeats 3 --profile --out "
         "benchmarks/results/real_model_profile.json")
def profile(result: dict[str, Any]) -> list[tuple[str, str]]:
    rows = [(f"{name}: shares of its time", ", ".join(
        f"{category} {share:.2f}" for category, share in
        sorted(entry["shares"].items(), key=lambda item: -item[1]) if share >= 0.005))
        for name, entry in result["profile"].items()]
    pad = result["padding"]
    rows.append(("padding of the rows as the trainer splits them",
                 f"{100 * pad['padding_share']:.1f} % ({pad['micro_batches']} micro-batch(es) "
                 f"at {pad['token_budget']} tokens)"))
    return rows


@section("More torch threads for a run alone on the machine", "real_model_threads.json",
         "python -m benchmarks.real_model_speed --rows 6 --repeats 3 --threads 1 2 --out "
         "benchmarks/results/real_model_threads.json")
def threads(result: dict[str, Any]) -> list[tuple[str, str]]:
    return [(f"{key.replace('_threads', ' at ')} threads: speed-up over {result['threads'][0]}",
             f"{speedup:.2f}") for key, speedup in result["thread_speedup"].items()]


@section("Asynchronous rollouts with the real model (Shelf recipe, same work)",
         "async_rollouts/throughput_same_work_shelf_smollm2_grpo_paw_sync_async1.json",
         "python -m benchmarks.async_rollouts --throughput --rounds 1 --updates 4 --config "
         "configs/real/shelf_smollm2_grpo_paw.yaml --init_checkpoint <the Shelf SFT adapter>")
def asynchronous(result: dict[str, Any]) -> list[tuple[str, str]]:
    own = result["runs"]["async1"][0]["async_speedup"]
    return [("async1 over sync, measured", f"{result['speedup_vs_sync']['async1']:.2f}"),
            ("async1's own speed-up figure", f"{own:.2f}")]


def _memory_rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    return [(f"token budget {row['case']['overrides']['token_budget']}, gradient checkpointing "
             f"{str(row['gradient_checkpointing']).lower()}: estimate / peak",
             f"{row['estimate_gib']:.2f} GiB / {row['ru_maxrss_mib'] / 1024:.2f} GiB = "
             f"{row['estimate_over_peak']:.2f}") for row in result["rows"]]


section("The memory estimate against the measured peak", "memory_peak_phases.json",
        "python -m benchmarks.memory_peak --init_checkpoint <the SFT adapter> --token_budget "
        "1024 2048 --gradient_checkpointing false true --val_limit 0 --out "
        "benchmarks/results/memory_peak_phases.json")(_memory_rows)
section("The memory estimate at a 4,096-token budget", "memory_peak_phases_4096.json",
        "python -m benchmarks.memory_peak --init_checkpoint <the SFT adapter> --token_budget "
        "4096 --val_limit 0 --out benchmarks/results/memory_peak_phases_4096.json")(_memory_rows)


def machine_words(record: dict[str, Any] | None) -> str:
    if not record:
        return "machine not recorded"
    return f"{kernels_phrase(record)}, {record.get('date_utc', 'undated')}"


def report(results: Path = RESULTS) -> str:
    lines = ["| section | figure | value |", "|---|---|---|"]
    notes = []
    for title, file, command, rows in SECTIONS:
        path = results / file
        if not path.is_file():
            lines.append(f"| {title} | not measured (`{file}`) | |")
            notes.append(f"- {title}: `{command}`")
            continue
        result = json.loads(path.read_text(encoding="utf-8"))
        for figure, value in rows(result):
            lines.append(f"| {title} | {figure} | {value} |")
        notes.append(f"- {title}: `{file}`, {machine_words(result.get('machine'))}; "
                     f"`{command}`")
    lines += ["", "A WebShop update's cost: timed by hand, no result file (benchmarks/README.md, "
              "\"A WebShop update's cost\").", "", "Sources:", *notes]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", default=str(RESULTS), help="the result files' folder")
    args = parser.parse_args(argv)
    print(report(Path(args.results)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
