"""Per-task evaluation: success / score / exact match per ``task_type`` and overall, written as
Markdown, JSON and CSV.

The protocol (:func:`plan_evaluation`): by default the env's **held-out** split, and, for an env
that lists its split's tasks (``TextEnv.tasks()``: WebShop's goals, ALFWorld's games, a QA
file's questions, Shelf's item × shelf-size pairs), **every task exactly once**, task ``i``
reset with seed ``seed + i`` and ``options = tasks[i].options``. ``repeats = K`` plays each task
K times (one rollout group: same seed and options, different samples). ``limit = N`` plays a
deterministic stratified subset: the tasks sorted by (task type, index), then every
(n / N)-th of them (systematic sampling), so each task type keeps its share to within one task
and the subset is the same on every machine. An env whose tasks are generated from the seed
(random maps, card deals) plays seeds ``seed .. seed + limit - 1`` (``limit`` default
:data:`PROCEDURAL_EPISODES`).

Columns: ``episodes``; ``success`` (% of episodes won; for search QA this is EM); ``score``
(WebShop: 100 × mean raw reward ``info["score"]`` of the final step; QA: 100 × mean EM; other
envs: the success rate); ``return`` (mean episode return incl. invalid-action penalties);
``steps`` (mean episode length); ``invalid`` (% of invalid steps).
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from agents.types import Trajectory
from paw_gym.progress import Progress

OVERALL = "overall"
#: Episodes played on an env without a task list when no limit is given.
PROCEDURAL_EPISODES = 100
#: ``split`` argument meaning "the env's held-out split" (``TextEnv.held_out_split``).
HELD_OUT = "held-out"


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
    trajectories: list[Trajectory] = field(default_factory=list, repr=False)
    """The episodes played (not written to the tables; see :func:`write_trajectories`)."""

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
    return EvalResult(rows, dict(meta or {}), list(trajectories))


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
    from run_files.outputs import write_text_atomically

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"md": out / f"{name}.md", "json": out / f"{name}.json", "csv": out / f"{name}.csv"}
    table = io.StringIO(newline="")
    writer = csv.DictWriter(table, fieldnames=list(asdict(result.rows[0])))
    writer.writeheader()
    writer.writerows(asdict(r) for r in result.rows)
    # Each file whole or absent: a kill leaves no half-written table.
    for kind, text in (("md", to_markdown(result, name)), ("csv", table.getvalue()),
                       ("json", json.dumps(result.to_dict(), indent=2))):
        write_text_atomically(paths[kind], text)
    return paths


def episode_record(trajectory: Trajectory, episode: int) -> dict[str, Any]:
    """One episode as plain JSON: per step the prompt, the raw model output, the parsed action,
    the next observation, the reward and whether the action was invalid."""
    return {
        "episode": episode, "task_id": trajectory.task_id, "task_type": trajectory.task_type,
        "won": trajectory.won, "return": trajectory.total_reward, "steps": [
            {"prompt": s.prompt, "output": s.output.text, "action": s.action,
             "observation": s.next_observation, "reward": s.reward, "invalid": s.invalid_action}
            for s in trajectory.transitions]}


def write_trajectories(result: EvalResult, path: str | Path) -> Path:
    """Every episode of ``result`` as one JSON line (:func:`episode_record`)."""
    from run_files.outputs import write_text_atomically

    path = Path(path)
    write_text_atomically(path, "".join(
        json.dumps(episode_record(trajectory, index), ensure_ascii=False) + "\n"
        for index, trajectory in enumerate(result.trajectories)))
    return path


def write_replay(result: EvalResult, folder: str | Path) -> Path:
    """Every episode of ``result`` into the WM replay at ``folder`` (appending), in the record
    schema of expert demos and training rollouts, marked ``source: "eval"``."""
    import uuid

    from wrappers.replay import WMReplay

    run = uuid.uuid4().hex[:8]  # episodes of two evaluations in one folder stay apart
    with WMReplay(folder, keep_in_memory=False) as replay:
        for index, trajectory in enumerate(result.trajectories):
            replay.extend(trajectory.to_records(f"eval-{run}-{index:05d}", source="eval"))
    return Path(folder)


def show_episodes(result: EvalResult, count: int, width: int = 300) -> str:
    """The first ``count`` episodes as readable text: what the model wrote at every step, what
    was parsed from it and what the env answered (long texts cut to ``width`` characters)."""
    def cut(text: str) -> str:
        text = text.replace("\n", "⏎ ")
        return text if len(text) <= width else text[:width] + f"… (+{len(text) - width} chars)"

    lines = []
    for index, trajectory in enumerate(result.trajectories[:count]):
        lines.append(f"── episode {index}: {trajectory.task_id} ({trajectory.task_type}), "
                     f"{'won' if trajectory.won else 'lost'}, return {trajectory.total_reward:.2f}")
        if trajectory.initial_observation:
            lines.append(f"   observation: {cut(trajectory.initial_observation)}")
        for number, step in enumerate(trajectory.transitions):
            parsed = "INVALID" if step.invalid_action else repr(step.action)
            lines.append(f"   [{number}] model wrote: {cut(step.output.text)}")
            lines.append(f"       parsed: {parsed}   reward {step.reward:+.2f}")
            lines.append(f"       observation: {cut(step.next_observation)}")
    return "\n".join(lines)


def load_policy(model: str | None = None, checkpoint: str | Path | None = None,
                device: str | None = None, seed: int = 0, system_prompt: str | None = None):
    """An ``HFPolicy`` from a model, a trainer checkpoint (``.../step-000010``), a saved model
    directory, or a LoRA adapter directory (its base model: ``model``, else the one recorded
    in the checkpoint or adapter config), prompting with ``system_prompt``
    (:class:`agents.chat.ChatEncoder`)."""
    from agents.hf_policy import HFPolicy
    from training.infra.model_config import is_adapter_dir

    if checkpoint is None:
        if model is None:
            raise ValueError("give --model or --checkpoint")
        return HFPolicy(model, device=device, seed=seed, system_prompt=system_prompt)
    from training.infra.checkpoint import check_safetensors, verify_checkpoint

    path = Path(checkpoint)
    if (path / "model").is_dir():
        if (path / "state.json").is_file():  # a trainer checkpoint: check every file first
            state = verify_checkpoint(path, hashes=False)  # the model's load checks its sha256
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
        return HFPolicy(model, adapter=path, device=device, seed=seed,
                        system_prompt=system_prompt)
    return HFPolicy(path, tokenizer=path if (path / "tokenizer_config.json").is_file() else model,
                    device=device, seed=seed, system_prompt=system_prompt)


def default_temperature(env_id: str) -> float:
    """The paper's validation temperature: 0.0 for search QA, 0.4 otherwise."""
    return 0.0 if "SearchQA" in env_id else 0.4


def held_out_split(env_id: str) -> str | None:
    """The ``split`` that holds ``env_id``'s held-out tasks (``TextEnv.held_out_split``), read
    from the registered class without building the env; None for an env without splits."""
    from paw_gym.registration import env_creator

    return getattr(env_creator(env_id), "held_out_split", None)


@dataclass(frozen=True)
class EvalPlan:
    """Which episodes an evaluation plays (see the module docstring)."""

    split: str | None
    """The env's ``split`` argument (None: the env has no splits)."""
    task_seeds: list[int]
    """Per task, the reset seed."""
    task_options: list[dict[str, Any] | None]
    """Per task, the reset options (None for a generated task)."""
    repeats: int
    """Episodes per task."""
    split_size: int | None
    """Tasks in the split's list; None when the env generates tasks from the seed."""

    @property
    def episodes(self) -> int:
        return len(self.task_seeds) * self.repeats

    def describe(self) -> dict[str, Any]:
        return {"split": self.split, "tasks": len(self.task_seeds), "split_size": self.split_size,
                "repeats": self.repeats, "episodes": self.episodes,
                "task_seeds": self.task_seeds, "task_options": self.task_options}


def stratified_subset(task_types: Sequence[str], limit: int) -> list[int]:
    """``limit`` task indices: every (n / limit)-th task of the list sorted by (type, index).

    Systematic sampling over the type-sorted list keeps each type's share to within one task,
    spreads the picks evenly inside a type, and needs no random state.
    """
    n = len(task_types)
    if limit >= n:
        return list(range(n))
    ordered = sorted(range(n), key=lambda i: (task_types[i], i))
    return sorted(ordered[int((k + 0.5) * n / limit)] for k in range(limit))


def plan_evaluation(env_id: str, *, split: str | None = HELD_OUT, limit: int | None = None,
                    repeats: int = 1, seed: int = 0,
                    env_kwargs: dict[str, Any] | None = None) -> EvalPlan:
    """The episodes that evaluate ``env_id`` on ``split`` (default: its held-out split).

    Raises ``ValueError`` for a bad ``limit``/``repeats`` and for a split the env rejects.
    """
    import gymnasium as gym

    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit must be a positive integer or None, got {limit!r}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be a positive integer, got {repeats!r}")
    if split == HELD_OUT:
        split = held_out_split(env_id)
    kwargs = dict(env_kwargs or {})
    if split is not None:
        kwargs["split"] = split
    env = gym.make(env_id, **kwargs)
    try:
        tasks = getattr(env.unwrapped, "tasks", lambda: None)()
    finally:
        env.close()
    if tasks is None:
        count = PROCEDURAL_EPISODES if limit is None else limit
        return EvalPlan(split, list(range(seed, seed + count)), [None] * count, repeats, None)
    chosen = range(len(tasks)) if limit is None else \
        stratified_subset([tasks[i].task_type for i in range(len(tasks))], limit)
    return EvalPlan(split, [seed + i for i in chosen], [dict(tasks[i].options) for i in chosen],
                    repeats, len(tasks))


def evaluate(agent, env_id: str, task_seeds: Sequence[int] | EvalPlan, *,
             temperature: float | None = None, max_new_tokens: int = 512,
             max_steps: int | None = None, seed: int = 0, trials: int = 1,
             progress: Progress = False, meta: dict[str, Any] | None = None,
             env_kwargs: dict[str, Any] | None = None, num_env_workers: int = 0,
             **env_settings: Any) -> EvalResult:
    """Play the episodes of ``task_seeds`` with ``agent`` (a policy or an ``agents`` Agent).

    ``task_seeds``: an :class:`EvalPlan` (see :func:`plan_evaluation`; its split is passed to
    the env), or plain reset seeds, one episode each. ``trials > 1`` replays the same tasks
    (Reflexion learns between trials); the table is that of the last trial. ``env_settings``
    (template, split ...) and ``env_kwargs`` go to ``agents.envs.make_agent_env``; use
    ``env_kwargs`` for an env argument whose name is also a parameter here (e.g. ALFWorld's
    ``progress``). ``num_env_workers`` steps the envs in worker processes (see
    ``agents.rollout``). The episodes are kept on the result (``result.trajectories``).
    """
    from agents.envs import env_factory
    from agents.rollout import rollout
    from training.infra.numerics import machine

    plan = task_seeds if isinstance(task_seeds, EvalPlan) else \
        EvalPlan(env_settings.get("split"), list(task_seeds), [None] * len(task_seeds), 1, None)
    if not plan.task_seeds:
        raise ValueError("evaluate needs at least one task seed")
    temperature = default_temperature(env_id) if temperature is None else temperature
    clashing = sorted(set(env_settings) & set(env_kwargs or {}))
    if clashing:
        raise ValueError(f"{clashing} given both as keyword arguments and in env_kwargs")
    env_settings = {**env_settings, **(env_kwargs or {})}
    if plan.split is not None:
        env_settings["split"] = plan.split
    trajectories: list[Trajectory] = []
    for _ in range(max(1, trials)):
        trajectories = rollout(agent, env_factory(env_id, **env_settings), len(plan.task_seeds),
                               plan.repeats, temperature=temperature,
                               max_new_tokens=max_new_tokens, seed=seed,
                               task_seeds=plan.task_seeds, task_options=plan.task_options,
                               max_steps=max_steps, progress=progress,
                               num_env_workers=num_env_workers)
    info = {"env_id": env_id, "temperature": temperature, "trials": trials,
            "max_new_tokens": max_new_tokens, "max_steps": max_steps, "sampling_seed": seed,
            **plan.describe(), "machine": machine(), **(meta or {})}
    return summarize(trajectories, info)
