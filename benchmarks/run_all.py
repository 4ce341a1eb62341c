"""Run the three benchmarks (overhead, throughput, learning study) and print one summary table.

    python -m benchmarks.run_all --quick   # reduced versions, <= 20 min on 2 CPU cores
    python -m benchmarks.run_all           # full versions (the study takes ~1.5 h; resumable)

Each script runs in its own process (the overhead script sets allocator variables at start-up)
and writes its JSON to ``benchmarks/results/`` (``*_quick`` names with ``--quick``).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import common as C


def run(script: str, *args: str) -> float:
    start = time.time()
    command = [sys.executable, "-m", f"benchmarks.{Path(script).stem}", *args]
    print(f"\n$ {' '.join(command[1:])}", flush=True)
    done = subprocess.run(command, cwd=C.REPO)
    if done.returncode:
        print(f"!! {script} exited with {done.returncode}", flush=True)
    return time.time() - start


def summary(quick: bool) -> str:
    tag = "_quick" if quick else ""
    lines = ["| benchmark | figure | value |", "|---|---|---:|"]
    from benchmarks.overhead import pooled_step_ratio

    overheads = [("WebShop", C.RESULTS / f"overhead{tag}.json")]
    if not quick:  # the two extra runs of benchmarks/README.md, when they have been made
        overheads = [("ALFWorld", C.RESULTS / "overhead_alfworld.json"), *overheads,
                     ("WebShop, max_obs_tokens 64", C.RESULTS / "overhead_webshop_obs64.json")]
    for env, path in overheads:
        if not path.is_file():
            continue
        data = C.load_json(path)
        r = data["ratio_of_medians"]
        lines += [f"| PaW overhead {env} | whole-step CPU time ratio (rollout pooled) | "
                  f"{pooled_step_ratio(data):.3f} |",
                  f"| PaW overhead {env} | update CPU time ratio | {r['update_cpu_s']:.3f} |",
                  f"| PaW overhead {env} | update peak RSS growth ratio | "
                  f"{r['update_rss_growth_mb']:.3f} |"]
    throughput = C.RESULTS / f"throughput{tag}.json"
    if throughput.is_file():
        t = C.load_json(throughput)
        for name, row in t["env_speed"].items():
            if "steps_per_cpu_s" in row:
                lines.append(f"| throughput | {row['env']} env steps / CPU s | "
                             f"{row['steps_per_cpu_s']:.0f} |")
        base = t["curves"]["group_size"][0] if t["curves"]["group_size"] else None
        if base:
            lines += [f"| throughput | rollout generated tokens / CPU s | "
                      f"{base['gen_tokens_per_cpu_s']:.0f} |",
                      f"| throughput | update tokens / CPU s | "
                      f"{base['update_tokens_per_cpu_s']:.0f} |"]
        for curve, s in t["loglog_slopes"].items():
            lines.append(f"| throughput | step cost log-log slope vs {curve} | "
                         f"{s['step_cpu_s']:.2f} |")
    from benchmarks.study_report import LABELS, load
    from benchmarks.study_learning import results_dir

    for (env, start), variants in sorted(load(results_dir(quick)).items()):
        for variant, runs in variants.items():
            for key in ("success", "invalid"):
                values = [d["eval"]["rows"][-1][key] for d in runs]
                spread = f" ± {statistics.stdev(values):.1f}" if len(values) > 1 else ""
                lines.append(f"| study {env}/{start} | {LABELS.get(variant, variant)}: eval "
                             f"{key} % ({len(values)} seed(s)) | "
                             f"{statistics.mean(values):.1f}{spread} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--workers", type=int, default=2, help="parallel study runs (full only)")
    parser.add_argument("--summary-only", action="store_true",
                        help="run nothing: write results/summary[_quick].md from saved results")
    args = parser.parse_args(argv)
    tag = "_quick" if args.quick else ""
    if args.summary_only:
        text = summary(args.quick)
        (C.RESULTS / f"summary{tag}.md").write_text(text + "\n", encoding="utf-8")
        print(text)
        return 0
    quick = ["--quick"] if args.quick else []
    times = {
        "overhead": run("overhead.py", *quick, "--no-progress",
                        "--out", str(C.RESULTS / f"overhead{tag}.json")),
        "throughput": run("throughput.py", *quick, "--no-progress",
                          "--out", str(C.RESULTS / f"throughput{tag}.json")),
        "study": run("study_learning.py", *(quick or ["--phase", "all", "--workers",
                                                      str(args.workers)])),
    }
    times["report"] = run("study_report.py", *quick)
    print("\n## Summary" + (" (quick)" if args.quick else "") + "\n")
    text = summary(args.quick)
    (C.RESULTS / f"summary{tag}.md").write_text(text + "\n", encoding="utf-8")
    print(text)
    print("\nwall time: " + ", ".join(f"{k} {v / 60:.1f} min" for k, v in times.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
