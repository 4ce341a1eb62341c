"""Per-task evaluation: success / score / exact match per ``task_type`` and overall, written as
Markdown, JSON and CSV.

Columns: ``episodes``; ``success`` (% of episodes won; for search QA this is EM); ``score``
(WebShop: 100 × mean raw reward ``info["score"]`` of the final step; QA: 100 × mean EM; other
envs: the success rate); ``return`` (mean episode return incl. invalid-action penalties);
``steps`` (mean episode length); ``invalid`` (% of invalid steps).
"""

from __future__ import annotations

import csv
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from agents.types import Trajectory

OVERALL = "overall"


@dataclass
class TaskRow:
    """Aggregates of one task type (or of all episodes: ``task_type == "overall"``)."""

    task_type: str
    episodes: int
    success: float
    score: float
    mean_return: float
    mean_steps: float
    invalid: float


@dataclass
class EvalResult:
    rows: list[TaskRow]
    """Per task type (sorted), then the overall row."""
    meta: dict[str, Any] = field(default_factory=dict)
    """What was evaluated: env, split, agent, model, temperature, seeds."""

    def row(self, task_type: str = OVERALL) -> TaskRow:
        return next(r for r in self.rows if r.task_type == task_type)

    def to_dict(self) -> dict[str, Any]:
        return {"meta": self.meta, "rows": [asdict(r) for r in self.rows]}


def _final_score(trajectory: Trajectory) -> float:
    """Raw score of an episode in [0, 1]: WebShop's ``score``, QA's ``em``, else won."""
    if not trajectory.transitions:
        return 0.0
    info = trajectory.transitions[-1].info
    for key in ("score", "em"):
        if isinstance(info.get(key), (int, float, bool)):
            return float(info[key])
    return float(trajectory.won)


def summarize(trajectories: Sequence[Trajectory], meta: dict[str, Any] | None = None
              ) -> EvalResult:
    """Per-task-type and overall aggregates of finished episodes."""
    by_type: dict[str, list[Trajectory]] = {}
    for t in trajectories:
        by_type.setdefault(t.task_type or "default", []).append(t)

    def row(name: str, group: list[Trajectory]) -> TaskRow:
        n = len(group)
        steps = [s for t in group for s in t.transitions]
        return TaskRow(
            task_type=name, episodes=n,
            success=100.0 * sum(t.won for t in group) / n if n else 0.0,
            score=100.0 * sum(_final_score(t) for t in group) / n if n else 0.0,
            mean_return=sum(t.total_reward for t in group) / n if n else 0.0,
            mean_steps=sum(len(t) for t in group) / n if n else 0.0,
            invalid=100.0 * sum(s.invalid_action for s in steps) / len(steps) if steps else 0.0)

    rows = [row(name, by_type[name]) for name in sorted(by_type)]
    rows.append(row(OVERALL, list(trajectories)))
    return EvalResult(rows, dict(meta or {}))


def to_markdown(result: EvalResult, title: str | None = None) -> str:
    lines = [f"### {title}", ""] if title else []
    lines += ["| task type | episodes | success % | score | return | steps | invalid % |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for r in result.rows:
        name = f"**{r.task_type}**" if r.task_type == OVERALL else r.task_type
        lines.append(f"| {name} | {r.episodes} | {r.success:.1f} | {r.score:.1f} | "
                     f"{r.mean_return:.2f} | {r.mean_steps:.1f} | {r.invalid:.1f} |")
    return "\n".join(lines) + "\n"


def write_tables(result: EvalResult, out_dir: str | Path, name: str = "eval") -> dict[str, Path]:
    """``<name>.md``, ``<name>.json`` and ``<name>.csv`` in ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"md": out / f"{name}.md", "json": out / f"{name}.json", "csv": out / f"{name}.csv"}
    paths["md"].write_text(to_markdown(result, name), encoding="utf-8")
    paths["json"].write_text(json.dumps(result.to_dict(), indent=2), encoding="utf-8")
    with open(paths["csv"], "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(asdict(result.rows[0])))
        writer.writeheader()
        writer.writerows(asdict(r) for r in result.rows)
    return paths


def load_policy(model: str | None = None, checkpoint: str | Path | None = None,
                device: str | None = None, seed: int = 0):
    """An ``HFPolicy`` from a model, a trainer checkpoint (``.../step-000010``), a saved model
    directory, or a LoRA adapter directory (its base model: ``model``, else the one recorded
    in the checkpoint or adapter config)."""
    from agents.hf_policy import HFPolicy
    from training.models import is_adapter_dir

    if checkpoint is None:
        if model is None:
            raise ValueError("give --model or --checkpoint")
        return HFPolicy(model, device=device, seed=seed)
    from training.checkpoint import check_safetensors, verify_checkpoint

    path = Path(checkpoint)
    if (path / "model").is_dir():
        if (path / "state.json").is_file():  # a trainer checkpoint: check every file first
            state = verify_checkpoint(path)
            model = model or state.get("config", {}).get("model")
        path = path / "model"
    if not path.is_dir():
        raise FileNotFoundError(f"checkpoint {str(checkpoint)!r} is not a directory")
    check_safetensors(path.glob("*.safetensors"))
    if is_adapter_dir(path):
        if model is None:
            adapter = json.loads((path / "adapter_config.json").read_text(encoding="utf-8"))
            model = adapter.get("base_model_name_or_path")
        if not model:
            raise ValueError(f"{path} is a LoRA adapter; give its base model with --model")
        return HFPolicy(model, adapter=path, device=device, seed=seed)
    return HFPolicy(path, tokenizer=path if (path / "tokenizer_config.json").is_file() else model,
                    device=device, seed=seed)


def default_temperature(env_id: str) -> float:
    """The paper's validation temperature: 0.0 for search QA, 0.4 otherwise."""
    return 0.0 if "SearchQA" in env_id else 0.4


def evaluate(agent, env_id: str, task_seeds: Sequence[int], *, temperature: float | None = None,
             max_new_tokens: int = 512, max_steps: int | None = None, seed: int = 0,
             trials: int = 1, progress: bool = False, meta: dict[str, Any] | None = None,
             env_kwargs: dict[str, Any] | None = None, **env_settings: Any) -> EvalResult:
    """Play one episode per task seed with ``agent`` (a policy or an ``agents`` Agent).

    ``trials > 1`` replays the same tasks (Reflexion learns between trials); the table is
    that of the last trial. ``env_settings`` (template, split ...) and ``env_kwargs`` go to
    ``agents.envs.make_agent_env``; use ``env_kwargs`` for an env argument whose name is also
    a parameter here (e.g. ALFWorld's ``progress``).
    """
    from agents.envs import env_factory
    from agents.rollout import rollout

    if not task_seeds:
        raise ValueError("evaluate needs at least one task seed")
    temperature = default_temperature(env_id) if temperature is None else temperature
    clashing = sorted(set(env_settings) & set(env_kwargs or {}))
    if clashing:
        raise ValueError(f"{clashing} given both as keyword arguments and in env_kwargs")
    env_settings = {**env_settings, **(env_kwargs or {})}
    trajectories: list[Trajectory] = []
    for _ in range(max(1, trials)):
        trajectories = rollout(agent, env_factory(env_id, **env_settings), len(task_seeds), 1,
                               temperature=temperature, max_new_tokens=max_new_tokens, seed=seed,
                               task_seeds=list(task_seeds), max_steps=max_steps,
                               progress=progress)
    info = {"env_id": env_id, "temperature": temperature, "episodes": len(task_seeds),
            "trials": trials, **(meta or {})}
    return summarize(trajectories, info)
