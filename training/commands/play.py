"""``paw-gym play``: run scripted episodes on any registered env through the agent loop.

The agent sees the paper's prompt (HistoryPrompt, with each env's preset from
``agents.envs.PRESETS``) and answers in the model format (``<think>…</think><action>…</action>``),
parsed by ParseAction; every transition can be recorded into a WM replay. ``--agent expert``
follows the env's scripted expert (``expert_action()``), ``--agent random`` picks uniformly
among the admissible actions.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Literal

from training.infra.checked_config import CheckedConfig, bounded, env_id, output_folder


#: More episodes than this would run for days and print a table nobody reads.
MAX_EPISODES = 1_000_000


@dataclass
class PlayArguments(CheckedConfig):
    """What ``paw-gym play`` plays and records."""

    env: str = env_id()
    """Registered env id (see `paw-gym envs`)."""
    agent: Literal["expert", "random"] = "expert"
    """expert (the env's scripted expert) or random (uniform over the admissible actions)."""
    episodes: int = bounded(3, 1, MAX_EPISODES, note="a scripted episode takes milliseconds to seconds")
    """Episodes to play (task seeds seed .. seed+episodes-1)."""
    seed: int = 0
    """Seed of the first episode's task."""
    replay: str | None = output_folder(None)
    """Directory to record the WM replay into."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Env constructor arguments: key=value[,key=value] or a YAML mapping, e.g. split=test or
    '{split: test, num_products: 500}'."""
    show: bool = False
    """Print every observation and action."""


def add_parser(subparsers) -> None:
    from training.commands.flags import add_command

    add_command(subparsers, "play", PlayArguments,
                help="run scripted (expert/random) episodes on an env and record them",
                description=__doc__).set_defaults(func=run)


def run(args) -> int:
    import numpy as np
    from tqdm import tqdm

    from agents.base import Sampling
    from agents.baselines import ExpertAgent, RandomAgent
    from agents.envs import make_agent_env
    from training.commands.common import UserError
    from training.preflight import check_env, check_expert, check_writable
    from training.commands.flags import arguments_from
    from wrappers import RecordTransitions, WMReplay

    arguments = arguments_from(args, PlayArguments)
    if arguments.agent == "expert":
        check_expert(arguments.env, "--agent expert")
    check_env(arguments.env, arguments.env_kwargs)
    try:
        env = make_agent_env(arguments.env, **arguments.env_kwargs)
    except (TypeError, ValueError, FileNotFoundError) as error:  # bad kwargs or missing data
        raise UserError(f"cannot create {arguments.env}: {error}") from error
    if arguments.replay:
        check_writable(arguments.replay, "--replay")
    replay = WMReplay(arguments.replay)
    env = RecordTransitions(env, replay)
    agent = ExpertAgent() if arguments.agent == "expert" else RandomAgent()
    results: dict[str, list[float]] = defaultdict(list)
    returns = []
    for episode in tqdm(range(arguments.episodes), desc=f"{arguments.agent} on {arguments.env}",
                        disable=arguments.show):
        prompt, info = env.reset(seed=arguments.seed + episode)
        if arguments.show:
            print(f"\n=== episode {episode} · task {info['task_id']} ({info['task_type']})\n"
                  f"{info.get('raw_observation', prompt)}")
        total, done, step = 0.0, False, 0
        while not done:
            output = agent.decide([prompt], [info], [env], Sampling(),
                                  seed=arguments.seed + 1000 * episode + step)[0]
            prompt, reward, terminated, truncated, info = env.step(output.text)
            total, done, step = total + reward, terminated or truncated, step + 1
            if arguments.show:
                print(f"> {info.get('parsed_action')}   (reward {reward:+.2f})\n"
                      f"{info.get('raw_observation', prompt)}")
        results[info["task_type"]].append(float(info["won"]))
        returns.append(total)
    env.close()
    print(f"\n{arguments.agent} agent on {arguments.env}: {arguments.episodes} episode(s), "
          f"mean return {np.mean(returns):.3f}")
    print("| task type | episodes | success |\n|---|---|---|")
    for task_type, wins in sorted(results.items()):
        print(f"| {task_type} | {len(wins)} | {100 * np.mean(wins):.1f} % |")
    if arguments.replay:
        print(f"recorded {len(replay)} transitions to {arguments.replay}")
    return 0
