"""Fast checks of the benchmark scripts' own logic (the measurements themselves are in
``benchmarks/``, run by ``python -m benchmarks.run_all --quick``)."""

import math
import mmap
from pathlib import Path

import pytest

from benchmarks.common import RSSPeak
from benchmarks.overhead import Span
from benchmarks.study_learning import PHASE_ORDER, Run, planned_runs
from benchmarks.study_report import mean_std, table
from benchmarks.throughput import slope


def test_loglog_slope_recovers_the_power():
    rows = [{"x": x, "y": 3.0 * x ** 2} for x in (1, 2, 4, 8)]
    assert slope(rows, "x", "y") == pytest.approx(2.0)
    assert slope(rows[:1], "x", "y") != slope(rows[:1], "x", "y")  # NaN with one point


def _touch_and_unmap(mib: int) -> None:
    """Map ``mib`` MiB straight from the kernel, write every page, unmap it. (Through malloc,
    a block freed by an earlier test can stay resident and be handed out again, so the RSS
    never grows; that made this test depend on the tests before it.)"""
    block = mmap.mmap(-1, mib * 2**20)
    for offset in range(0, len(block), mmap.PAGESIZE):  # no second buffer of that size
        block[offset] = 1
    block.close()


def test_rss_peak_sees_a_temporary_allocation_and_not_an_earlier_one():
    if not RSSPeak.reset_high_water():
        pytest.skip("this kernel does not let a process reset its RSS high-water mark")
    _touch_and_unmap(256)  # a higher peak before the measurement
    with RSSPeak() as mem:
        _touch_and_unmap(64)  # 64 MiB, touched, freed at once
    assert mem.exact and 40 < mem.growth < 128


def test_span_accumulates_cpu_and_wall_time():
    span = Span()
    with span:
        sum(i * i for i in range(200_000))
    assert span.cpu > 0 and span.wall >= span.cpu * 0.5


def test_planned_runs_are_unique_and_in_priority_order():
    runs = planned_runs(list(PHASE_ORDER), 3, None)
    names = [r.name for r in runs]
    assert len(names) == len(set(names))
    assert runs[0] == Run("webshop", "sft", "grpo", 0)
    assert PHASE_ORDER[0] == "main"
    main = planned_runs(["main"], 3, ["webshop"])
    assert {(r.variant, r.seed) for r in main} == {(v, s) for v in ("grpo", "grpo_paw")
                                                   for s in range(3)}


def test_report_aggregates_seeds_per_task_type():
    def result(variant, seed, a, b):
        extra = {"mean_return": a / 10, "invalid": b}
        rows = [{"task_type": "t1", "success": a, "score": a, "episodes": 2, **extra},
                {"task_type": "t2", "success": b, "score": b, "episodes": 2, **extra},
                {"task_type": "overall", "success": (a + b) / 2, "score": (a + b) / 2,
                 "episodes": 4, **extra}]
        return {"run": {"variant": variant, "seed": seed}, "eval": {"rows": rows},
                "history": [{"reward": 1.0}, {"reward": 3.0}]}

    text = table("alfworld", "sft", {"grpo": [result("grpo", 0, 0.0, 50.0),
                                              result("grpo", 1, 100.0, 50.0)]})
    line = next(x for x in text.splitlines() if x.startswith("| GRPO |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[1] == "2"
    assert cells[2] == mean_std([0.0, 100.0]) == f"50.0 ± {math.sqrt(5000):.1f}"
    assert cells[3] == "50.0 ± 0.0"
    assert cells[5] == mean_std([0.0, 10.0], 2) == f"5.00 ± {math.sqrt(50):.2f}"  # eval return
    assert cells[-1] == "2.00"


def test_bad_inputs_harness_classifies_real_cases():
    from benchmarks.bad_inputs import main

    result = main(["--only", "env"])  # the play/train env cases: seconds, no model training
    assert result["counts"]["clear"] == len(result["rows"]) >= 4, result["rows"]


@pytest.mark.slow
def test_no_bad_input_ends_in_a_traceback_or_is_silently_accepted():
    from benchmarks.bad_inputs import main

    counts = main(["--out", "/tmp/paw-gym-bad-inputs"])["counts"]
    assert counts["traceback"] == counts["accepted"] == counts["unclear"] == counts["lost"] == 0, \
        counts


def test_the_bad_inputs_harness_calls_a_lost_user_file_lost(tmp_path):
    """A case whose command removes a file the user had is "lost", whatever it printed."""
    from benchmarks.bad_inputs import Case, classify, write

    def removes_it(work: Path) -> int:
        write("out/notes.txt", "the user's notes")(work)
        (work / "out" / "notes.txt").unlink()
        return 0
    verdict, message = classify(Case("x", "y", removes_it, "", keeps=("out/notes.txt",)),
                                tmp_path)
    assert verdict == "lost" and message.startswith("lost ['out/notes.txt']")


@pytest.mark.heavy
def test_paw_overhead_times_the_same_rows_with_and_without_the_world_model_term():
    """gpu_check's Figure-5 part, CPU-sized: GRPO rows end after the response, the PaW rows are
    the same tokens with the observation on round(α·n) of them (all of them for the bound), and
    each ratio is that of the variants' median step times."""
    from benchmarks import gpu_check

    row = dict(prompt=16, action=8, obs=8)
    grpo, paw = (gpu_check.paper_rows(4, 256, row, with_obs=k) for k in (0, 2))
    assert [s.input_ids for s in grpo] == [s.input_ids[:24] for s in paw]
    assert [s.obs_len for s in paw] == [8, 8, 0, 0]
    result = gpu_check.paw_overhead("cpu", 1, row, n_rows=4, token_budget=64, alpha=0.5,
                                    repeats=3, vocab=256)
    assert [result[name]["rows_with_observation"] for name in ("grpo", "paw", "paw_every_row")] \
        == [0, 2, 4]
    assert [result[name]["tokens"] for name in ("grpo", "paw", "paw_every_row")] == [96, 112, 128]
    for name in ("paw", "paw_every_row"):
        assert result[f"{name}_vs_grpo"]["step_time_ratio"] == pytest.approx(
            result[name]["step_s_median"] / result["grpo"]["step_s_median"])
        assert sorted(result[name]["step_s_all"])[1] == result[name]["step_s_median"]
        assert len(result[name]["losses"]) == 3 and result[name]["micro_batches"] == 2
