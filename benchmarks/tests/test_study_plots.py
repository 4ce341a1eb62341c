"""The study's figures (``benchmarks/study_small.py``, ``benchmarks/study_report.py``)."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")


def test_study_plots_draw_seed_bands(tmp_path):
    import json

    from benchmarks import study_report, study_small

    for variant, slope in (("grpo", 1.0), ("grpo_paw", 0.5)):
        for seed in range(2):
            run = study_small.run_dir(tmp_path / "work", "study_shelf_u4",
                                     f"normal__{variant}__s{seed}")
            run.mkdir(parents=True)
            records = [{"step": s, "success": slope * s / 4, "wm_leak": 0.01 * s,
                        "val_success": slope * s / 4 + 0.1 * seed, "val_wm_exact": 0.2 + s / 20}
                       for s in range(5)]
            (run / "metrics.jsonl").write_text("\n".join(map(json.dumps, records)))
    [figure] = study_small.plot("shelf", tmp_path / "work", updates=4, out_dir=tmp_path)
    assert figure == tmp_path / "study_shelf_u4_normal.png" and figure.stat().st_size > 0
    history = [{"step": s, "reward": s, "success": s / 8, "wm_loss": 0.0, "lambda_mean": 1.0}
               for s in range(1, 9)]
    variants = {"grpo": [{"run": {"seed": i}, "config": {"paw": False}, "history": history}
                         for i in range(2)]}
    study_report.plot("shelf", "sft", variants, tmp_path / "report.png")
    assert (tmp_path / "report.png").stat().st_size > 0
