"""What makes ``paw-gym demo`` compute the same bits on every x86-64 CPU, and what it costs
(issue 51).

Other CPUs are emulated on this one (``tests/emulated_cpus.py``: torch's kernels by
``ATEN_CPU_CAPABILITY``, MKL's Intel kernels by a preloaded answer to its vendor check and
``MKL_ENABLE_INSTRUCTIONS``, oneDNN's by ``ONEDNN_MAX_CPU_ISA``, glibc's by
``GLIBC_TUNABLES``). Parts:

* ``--identity``: the demo, shortened to a few updates (``SHORT_DEMO``, the heavy test's;
  each run builds its own base model in a cache of its own), under every emulated CPU and
  each candidate setting of ``CANDIDATES``; per candidate, how many different results the
  CPUs gave and where each first differs from this CPU's (the base model's weights, an
  update's metrics, the tables).
* ``--speed``: the demo shortened to fewer updates but the default batch (``SPEED_DEMO``), in
  ``--rounds`` rounds of a ``native`` and a ``portable`` run whose order alternates, each with a
  fresh base model; per run the demo's own phase timings, the wall time and the CPU time of the
  process (``getrusage``), and per round portable / native; medians over the rounds.

* ``--physical DIR``: a finished ``PAW_GYM_NUMERICS=portable paw-gym demo`` (its output
  folder) against every physical CPU's record of the same demo in ``PHYSICAL`` (same config
  but the output folder), this CPU kind's included: per record, identical or where it first
  differs; then it is kept as that CPU kind's record, unless the kind has one (a record is
  never overwritten).

    python -m benchmarks.numerics --identity
    python -m benchmarks.numerics --speed --rounds 3
    PAW_GYM_NUMERICS=portable paw-gym demo --output_dir runs/demo-portable
    python -m benchmarks.numerics --physical runs/demo-portable
    python -m benchmarks.numerics --report
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.common import REPO, RESULTS, machine, write_json
from tests.emulated_cpus import (SHORT_DEMO, EmulatedCPU, demo_numbers, emulable,
                                 environment, first_difference)

OUT = RESULTS / "numerics"
#: One record per physical CPU kind and demo: a portable demo's numbers, config and machine.
PHYSICAL = OUT / "physical"
#: Demo settings that do not change its numbers.
_NOT_NUMBERS = ("output_dir", "overwrite")
WORK = REPO / "runs" / "numerics"
#: Library settings tried, on top of each emulated CPU (``portable``: the numerics mode itself,
#: through ``PAW_GYM_NUMERICS``; the others set the libraries' variables directly).
CANDIDATES: dict[str, dict[str, str]] = {
    "native": {},
    "ATen default": {"ATEN_CPU_CAPABILITY": "default"},
    "MKL COMPATIBLE": {"MKL_CBWR": "COMPATIBLE"},
    "ATen avx2 + MKL AVX2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2"},
    "ATen avx2 + MKL COMPATIBLE": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE"},
    "portable": {},
}
_ORDER = ("default", "avx2", "avx512")
#: The demo of ``--speed``: its default expert demos, batch (8 tasks × 8 rollouts) and
#: held-out tasks (48, each once), with 50 pretraining steps and 2 updates (every phase of the
#: demo, in a few CPU minutes).
SPEED_DEMO = ["--pretrain_steps", "50", "--rl_steps", "2", "--eval_repeats", "1",
              "--eval_episodes", "48", "--val_every", "0"]


def demo_run(flags: list[str], env: dict[str, str], name: str) -> dict[str, Any]:
    """``paw-gym demo FLAGS`` in a fresh process and base cache under ``env``: its numbers,
    summary, wall and CPU seconds."""
    folder = WORK / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "training.cli", "demo", *flags, "--output_dir",
                           str(folder / "demo")], cwd=REPO, capture_output=True, text=True,
                          env={**env, "PAW_GYM_CACHE": str(folder / "cache")})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise RuntimeError(f"{name}: paw-gym demo failed:\n{done.stderr[-3000:]}")
    summary = json.loads((folder / "demo" / "summary.json").read_text(encoding="utf-8"))
    result = {"numbers": demo_numbers(folder / "demo"), "machine": summary["machine"],
              "timings_s": summary["timings_s"], "wall_s": round(wall, 1),
              "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime
                             - before.ru_stime, 1),
              "held_out": [summary["before"]["success"], summary["after"]["success"]]}
    shutil.rmtree(folder)
    return result


def _candidate_environment(cpu: EmulatedCPU, candidate: str) -> dict[str, str] | None:
    """The environment of ``candidate`` on ``cpu``; None where it needs kernels the CPU
    lacks."""
    if candidate == "portable":
        return environment(cpu, "portable", WORK / "lib")
    settings = CANDIDATES[candidate]
    wanted = settings.get("ATEN_CPU_CAPABILITY")
    if wanted and cpu.capability != "native" and \
            _ORDER.index(wanted) > _ORDER.index(cpu.capability):
        return None  # torch would stop on an instruction the CPU does not have
    return {**environment(cpu, "native", WORK / "lib"), **settings}


def identity(candidates: list[str]) -> dict[str, Any]:
    cpus = emulable()
    table: dict[str, Any] = {}
    for candidate in candidates:
        runs: dict[str, Any] = {}
        for cpu in cpus:
            env = _candidate_environment(cpu, candidate)
            if env is None:
                runs[cpu.name] = None
                continue
            runs[cpu.name] = demo_run(SHORT_DEMO, env, "identity")
            print(f"{candidate} | {cpu.name}: base {runs[cpu.name]['numbers']['base_model'][:12]}"
                  f", torch's {runs[cpu.name]['machine']['cpu_capability']} kernels, "
                  f"{runs[cpu.name]['wall_s']} s", flush=True)
        reference = runs[cpus[0].name]["numbers"]
        distinct: list[dict] = []
        for run in filter(None, runs.values()):
            if run["numbers"] not in distinct:
                distinct.append(run["numbers"])
        table[candidate] = {
            "settings": CANDIDATES[candidate], "distinct_results": len(distinct),
            "cpus": {name: None if run is None else {
                "first_difference": first_difference(reference, run["numbers"]),
                "base_model": run["numbers"]["base_model"], "machine": run["machine"],
                "wall_s": run["wall_s"]} for name, run in runs.items()}}
        print(f"{candidate}: {len(distinct)} different result(s) over "
              f"{sum(run is not None for run in runs.values())} CPUs", flush=True)
    return {"machine": machine(), "demo_flags": SHORT_DEMO,
            "cpus": [asdict(cpu) for cpu in cpus], "candidates": table}


def speed(rounds: int) -> dict[str, Any]:
    this_cpu = emulable()[0]
    runs: list[dict[str, Any]] = []
    for index in range(rounds):
        order = ("native", "portable") if index % 2 == 0 else ("portable", "native")
        pair = {}
        for mode in order:
            load = os.getloadavg()[0]
            run = demo_run(SPEED_DEMO, environment(this_cpu, mode, WORK / "lib"), "speed")
            pair[mode] = {**{k: run[k] for k in ("timings_s", "wall_s", "cpu_s", "held_out")},
                          "load_before": load, "cpu_capability": run["machine"]["cpu_capability"]}
            print(f"round {index + 1} {mode}: wall {run['wall_s']} s, CPU {run['cpu_s']} s, "
                  f"phases {run['timings_s']}", flush=True)
        runs.append({"round": index + 1, "order": list(order), **pair,
                     "ratio": ratios(pair["native"], pair["portable"])})
        print(f"round {index + 1}: portable / native {runs[-1]['ratio']}", flush=True)
    keys = runs[0]["ratio"].keys()
    return {"machine": machine(), "demo_flags": SPEED_DEMO, "rounds": runs,
            "median_ratio": {k: round(statistics.median(r["ratio"][k] for r in runs), 2)
                             for k in keys}}


def ratios(native: dict[str, Any], portable: dict[str, Any]) -> dict[str, float]:
    """portable / native: CPU and wall seconds of the whole run, and each demo phase's wall
    seconds (a base model built in both)."""
    values = {"cpu_s": (native["cpu_s"], portable["cpu_s"]),
              "wall_s": (native["wall_s"], portable["wall_s"])}
    for phase, seconds in native["timings_s"].items():
        if phase in portable["timings_s"] and seconds > 0:
            values[phase] = (seconds, portable["timings_s"][phase])
    return {k: round(b / a, 2) for k, (a, b) in values.items() if a > 0}


def physical(folder: Path) -> dict[str, Any]:
    """Compare the portable demo in ``folder`` with every record of the same demo in
    :data:`PHYSICAL` (each made on a physical CPU, this kind's included); keep it as its CPU
    kind's record if there is none. Returns ``{record file: first difference or None}``."""
    summary_file = Path(folder) / "summary.json"
    if not summary_file.is_file():
        raise SystemExit(f"--physical {folder}: no summary.json there; give the output folder "
                         "of a finished `paw-gym demo`")
    summary = json.loads(summary_file.read_text(encoding="utf-8"))
    if summary["machine"]["numerics"] != "portable":
        raise SystemExit(f"--physical {folder}: that demo ran in {summary['machine']['numerics']}"
                         " numerics; only portable numerics are the same on every CPU (run it "
                         "with PAW_GYM_NUMERICS=portable)")
    config = {k: v for k, v in summary["config"].items() if k not in _NOT_NUMBERS}
    record = {"config": config, "machine": summary["machine"],
              "numbers": json.loads(json.dumps(demo_numbers(Path(folder))))}
    kind = summary["machine"]["cpu_kind"]
    demo = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:8]
    path = PHYSICAL / (f"{kind['vendor']}-family{kind['family']}-model{kind['model']}-"
                       f"stepping{kind['stepping']}-demo-{demo}.json")
    compared = {}
    for stored in sorted(PHYSICAL.glob("*.json")):
        other = json.loads(stored.read_text(encoding="utf-8"))
        if other["config"] == config:  # this kind's too: a rerun must match it as well
            compared[stored.name] = first_difference(other["numbers"], record["numbers"])
    for file, difference in compared.items():
        print(f"{file}: {'identical' if difference is None else 'first differs at ' + difference}")
    if not compared:
        print("no record of this demo to compare with")
    if path.is_file():
        print(f"this CPU kind's record of this demo is {path}; kept as it is")
    else:
        write_json(path, record)
        print(f"kept as {path}")
    return compared


def report() -> None:
    path = OUT / "identity.json"
    if path.is_file():
        data = json.loads(path.read_text(encoding="utf-8"))
        cpus = [cpu["name"] for cpu in data["cpus"]]
        print(f"Shortened demo ({' '.join(data['demo_flags'])}) on {data['machine']['cpu']}: "
              "where each emulated CPU's numbers first differ from this CPU's (= : "
              "identical: base model, every update's metrics, the tables)\n")
        print("| settings | different results | " + " | ".join(cpus[1:]) + " |")
        print("|---|---:|" + "---|" * (len(cpus) - 1))
        for name, row in data["candidates"].items():
            cells = ["n/a" if row["cpus"][cpu] is None else
                     (row["cpus"][cpu]["first_difference"] or "=") for cpu in cpus[1:]]
            print(f"| {name} | {row['distinct_results']} | " + " | ".join(cells) + " |")
    path = OUT / "speed.json"
    if path.is_file():
        data = json.loads(path.read_text(encoding="utf-8"))
        print(f"\nSpeed ({' '.join(data['demo_flags'])}) on {data['machine']['cpu']}, "
              f"{len(data['rounds'])} rounds, portable / native:")
        for round_ in data["rounds"]:
            print(f"  round {round_['round']} ({' then '.join(round_['order'])}): "
                  f"{round_['ratio']}")
        print(f"  median: {data['median_ratio']}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--identity", action="store_true")
    parser.add_argument("--candidates", nargs="+", choices=list(CANDIDATES),
                        default=list(CANDIDATES))
    parser.add_argument("--speed", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--report", action="store_true")
    parser.add_argument("--physical", type=Path, metavar="DEMO_DIR",
                        help="a finished portable demo's output folder, compared with the "
                             "records of other physical CPUs")
    args = parser.parse_args(argv)
    if args.physical is not None:
        physical(args.physical)
        return
    if args.identity:
        write_json(OUT / "identity.json", identity(args.candidates))
    if args.speed:
        write_json(OUT / "speed.json", speed(args.rounds))
    report()


if __name__ == "__main__":
    main()
