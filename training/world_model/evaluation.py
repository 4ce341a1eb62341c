"""Evaluating a world model: sampled predictions, their scores per task type, and the tables and
prediction files ``paw-gym eval-wm`` writes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from training.world_model.data import WMExample, parse_prediction
from training.world_model.methods import sample_predictions
from training.world_model.rewards import EmbeddingReward, exact_match


OVERALL = "overall"


def predict(policy, examples: Sequence[WMExample], samples: int, *, temperature: float,
            max_new_tokens: int, seed: int) -> list[dict[str, Any]]:
    """One predictions record per example: h, a, target, task_type, episode_id, the raw
    ``answers`` and the parsed ``predictions`` (``samples`` of each)."""
    groups = sample_predictions(policy, examples, samples, temperature=temperature,
                                max_new_tokens=max_new_tokens, seed=seed)
    return [{"h": e.h, "a": e.a, "target": e.o_next, "task_type": e.task_type,
             "episode_id": e.episode_id, "answers": [o.text for o in group],
             "predictions": [parse_prediction(o.text) for o in group]}
            for e, group in zip(examples, groups)]


def summarize_predictions(records: Sequence[dict[str, Any]], embedding: EmbeddingReward
                          ) -> list[dict[str, Any]]:
    """Per task type (sorted) and overall: ``items``, ``samples``, mean cosine ``similarity``
    of every predicted vs real next observation, ``above_tau`` (% of predictions with cosine
    ≥ τ), ``exact`` (% exactly right) and ``nonuniform_groups`` (% of items whose samples do
    not all get the same embedding reward: GRPO groups with a signal; None with one sample)."""
    predictions = [p for r in records for p in r["predictions"]]
    targets = [r["target"] for r in records for _ in r["predictions"]]
    similarities = iter(embedding.similarities(predictions, targets))
    scored = []
    for record in records:
        cosines = [next(similarities) for _ in record["predictions"]]
        rewards = {c >= embedding.tau for c in cosines}
        scored.append((record["task_type"], cosines,
                       [exact_match(p, record["target"]) for p in record["predictions"]],
                       len(rewards) > 1))
    by_type: dict[str, list] = {}
    for item in scored:
        by_type.setdefault(item[0], []).append(item)

    def row(name: str, items: list) -> dict[str, Any]:
        cosines = [c for _, cs, _, _ in items for c in cs]
        exact = [x for _, _, xs, _ in items for x in xs]
        several = all(len(cs) > 1 for _, cs, _, _ in items)
        return {"task_type": name, "items": len(items), "samples": len(cosines),
                "similarity": sum(cosines) / len(cosines),
                "above_tau": 100.0 * sum(c >= embedding.tau for c in cosines) / len(cosines),
                "exact": 100.0 * sum(exact) / len(exact),
                "nonuniform_groups": 100.0 * sum(n for *_, n in items) / len(items)
                if several else None}

    return [row(name, by_type[name]) for name in sorted(by_type)] + [row(OVERALL, scored)]


def table_markdown(rows: Sequence[dict[str, Any]], title: str, tau: float) -> str:
    lines = [f"### {title}", "",
             f"| task type | items | samples | similarity | ≥ τ={tau:g} % | exact % | "
             "non-uniform groups % |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        name = f"**{r['task_type']}**" if r["task_type"] == OVERALL else r["task_type"]
        groups = "–" if r["nonuniform_groups"] is None else f"{r['nonuniform_groups']:.1f}"
        lines.append(f"| {name} | {r['items']} | {r['samples']} | {r['similarity']:.3f} | "
                     f"{r['above_tau']:.1f} | {r['exact']:.1f} | {groups} |")
    return "\n".join(lines) + "\n"


def write_wm_tables(rows: Sequence[dict[str, Any]], meta: dict[str, Any], out_dir: str | Path,
                    name: str) -> dict[str, Path]:
    """``<name>.md`` and ``<name>.json`` (``{"meta": ..., "rows": [...]}``) in ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"md": out / f"{name}.md", "json": out / f"{name}.json"}
    paths["md"].write_text(table_markdown(rows, name, meta["tau"]), encoding="utf-8")
    paths["json"].write_text(json.dumps({"meta": meta, "rows": list(rows)}, indent=2),
                             encoding="utf-8")
    return paths


def write_predictions(records: Sequence[dict[str, Any]], path: str | Path) -> Path:
    path = Path(path)
    with open(path, "w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path


def read_predictions(path: str | Path) -> list[dict[str, Any]]:
    """The records of a predictions file, through the one predictions schema
    (:data:`training.infra.data_files.PREDICTION_RECORD`); a ``DataFileError`` (a
    ``ValueError``) names the first bad ``file:line``, or says the file is empty."""
    from training.infra.data_files import read_predictions_file

    return read_predictions_file(path)
