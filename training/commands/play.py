"""``paw-gym play``: run scripted episodes on any registered env through the agent loop.

The agent sees the paper's prompt (HistoryPrompt, with each env's preset from
``agents.envs.PRESETS``) and answers in the model format (``<think>…</think><action>…</action>``),
parsed by ParseAction; every transition can be recorded into a WM replay. ``--agent expert``
follows the env's scripted expert (``expert_action()``), ``--agent random`` picks uniformly
among the admissible actions.
"""

from __future__ import annotations

import argparse
from collections import defaultdict


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "play", help="run scripted (expert/random) episodes on an env and record them",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", required=True, help="registered env id (see `paw-gym envs`)")
    parser.add_argument("--agent", choices=["expert", "random"], default="expert")
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--replay", default=None, help="directory to record the WM replay into")
    parser.add_argument("--env-kwargs", default="", help="comma-separated key=value pairs for gym.make")
    parser.add_argument("--show", action="store_true", help="print every observation and action")
    parser.set_defaults(func=run)


def parse_env_kwargs(text: str) -> dict:
    """``"split=test,num_products=500"`` -> ``{"split": "test", "num_products": 500}``."""
    import yaml

    from training.cli import UserError

    kwargs = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--env-kwargs item {item!r} is not key=value")
        kwargs[key.strip()] = yaml.safe_load(value)
    return kwargs


def run(args) -> int:
    import gymnasium as gym
    import numpy as np
    from tqdm import tqdm

    import paw_gym  # noqa: F401  (registers the built-in envs)
    from agents.base import Sampling
    from agents.baselines import ExpertAgent, RandomAgent
    from agents.envs import make_agent_env
    from training.cli import UserError
    from wrappers import RecordTransitions, WMReplay

    if args.env not in gym.registry:
        raise UserError(f"unknown env {args.env!r}; registered: {', '.join(paw_gym.list_text_envs())}")
    if args.episodes < 1:
        raise UserError(f"--episodes must be >= 1, got {args.episodes}")
    try:
        env = make_agent_env(args.env, **parse_env_kwargs(args.env_kwargs))
    except (TypeError, ValueError, FileNotFoundError) as error:  # bad kwargs or missing data
        raise UserError(f"cannot create {args.env}: {error}") from error
    replay = WMReplay(args.replay)
    env = RecordTransitions(env, replay)
    agent = ExpertAgent() if args.agent == "expert" else RandomAgent()
    results: dict[str, list[float]] = defaultdict(list)
    returns = []
    for episode in tqdm(range(args.episodes), desc=f"{args.agent} on {args.env}", disable=args.show):
        prompt, info = env.reset(seed=args.seed + episode)
        if args.show:
            print(f"\n=== episode {episode} · task {info['task_id']} ({info['task_type']})\n"
                  f"{info.get('raw_observation', prompt)}")
        total, done, step = 0.0, False, 0
        while not done:
            output = agent.decide([prompt], [info], [env], Sampling(), seed=args.seed + 1000 * episode + step)[0]
            prompt, reward, terminated, truncated, info = env.step(output.text)
            total, done, step = total + reward, terminated or truncated, step + 1
            if args.show:
                print(f"> {info.get('parsed_action')}   (reward {reward:+.2f})\n"
                      f"{info.get('raw_observation', prompt)}")
        results[info["task_type"]].append(float(info["won"]))
        returns.append(total)
    env.close()
    print(f"\n{args.agent} agent on {args.env}: {args.episodes} episode(s), mean return {np.mean(returns):.3f}")
    print("| task type | episodes | success |\n|---|---|---|")
    for task_type, wins in sorted(results.items()):
        print(f"| {task_type} | {len(wins)} | {100 * np.mean(wins):.1f} % |")
    if args.replay:
        print(f"recorded {len(replay)} transitions to {args.replay}")
    return 0
