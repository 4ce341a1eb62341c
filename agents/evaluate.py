"""Per-task success tables, and a command line to run any agent on any env.

    python -m agents.evaluate --env PaW/WebShop-v0 --agent react --model tiny-micro \\
        --groups 16 --group-size 1 --temperature 0.4
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from typing import Sequence

from agents.types import Trajectory

AGENTS = ("policy", "react", "reflexion", "random", "expert")


def success_table(trajectories: Sequence[Trajectory]) -> list[dict]:
    """One row per ``task_type`` plus an ``"all"`` row: episodes, success rate, mean return,
    mean steps, and the fraction of invalid steps."""
    by_type: dict[str, list[Trajectory]] = defaultdict(list)
    for trajectory in trajectories:
        by_type[trajectory.task_type or "default"].append(trajectory)
    rows = [_row(name, group) for name, group in sorted(by_type.items())]
    if len(by_type) != 1:
        rows.append(_row("all", list(trajectories)))
    return rows


def _row(name: str, group: list[Trajectory]) -> dict:
    steps = [t for trajectory in group for t in trajectory.transitions]
    n = max(len(group), 1)
    return {
        "task_type": name,
        "episodes": len(group),
        "success": sum(t.won for t in group) / n,
        "return": sum(t.total_reward for t in group) / n,
        "steps": len(steps) / n,
        "invalid": sum(t.invalid_action for t in steps) / max(len(steps), 1),
    }


def format_table(rows: Sequence[dict]) -> str:
    """The table as aligned text."""
    header = (f"{'task_type':<28}{'episodes':>9}{'success':>9}{'return':>9}{'steps':>8}"
              f"{'invalid':>9}")
    lines = [header, "-" * len(header)]
    for r in rows:
        lines.append(f"{r['task_type']:<28}{r['episodes']:>9}{r['success']:>9.3f}"
                     f"{r['return']:>9.2f}{r['steps']:>8.1f}{r['invalid']:>9.3f}")
    return "\n".join(lines)


def build_agent(kind: str, model: str | None = None, adapter: str | None = None,
                max_batch_size: int | None = None, env: str | None = None):
    """An agent by name (:data:`AGENTS`); the model-based ones load ``HFPolicy(model)``."""
    from agents.baselines import ExpertAgent, RandomAgent

    if kind not in AGENTS:
        raise ValueError(f"unknown agent {kind!r}; choose one of {AGENTS}")
    if kind == "random":
        return RandomAgent()
    if kind == "expert":
        return ExpertAgent()
    if not model:
        raise ValueError(f"agent {kind!r} needs --model (a hub name or a tiny-model directory)")
    from agents.hf_policy import HFPolicy
    from agents.prompting import ReActAgent, ReflexionAgent

    policy = HFPolicy(model, adapter=adapter, max_batch_size=max_batch_size)
    return {"policy": lambda: policy, "react": lambda: ReActAgent(policy),
            "reflexion": lambda: ReflexionAgent(policy)}[kind]()


def main(argv: Sequence[str] | None = None) -> int:
    import paw_gym  # noqa: F401
    from agents.rollout import rollout

    parser = argparse.ArgumentParser(prog="python -m agents.evaluate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", required=True, help="env id, e.g. PaW/WebShop-v0")
    parser.add_argument("--agent", choices=AGENTS, default="react")
    parser.add_argument("--model", help="hub name or local directory (tiny model)")
    parser.add_argument("--adapter", help="LoRA adapter directory")
    parser.add_argument("--groups", type=int, default=8, help="tasks")
    parser.add_argument("--group-size", type=int, default=1, help="episodes per task")
    parser.add_argument("--trials", type=int, default=1, help="repeat the same tasks (Reflexion)")
    parser.add_argument("--temperature", type=float, default=0.4)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--max-steps", type=int, default=None)
    parser.add_argument("--max-batch-size", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        agent = build_agent(args.agent, args.model, args.adapter, args.max_batch_size)
    except ValueError as error:
        parser.error(str(error))
    for trial in range(args.trials):
        trajectories = rollout(agent, args.env, args.groups, args.group_size,
                               temperature=args.temperature, max_new_tokens=args.max_new_tokens,
                               max_steps=args.max_steps, seed=args.seed, progress=True)
        print(f"\n{args.env} · {args.agent} · trial {trial + 1}/{args.trials}")
        print(format_table(success_table(trajectories)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
