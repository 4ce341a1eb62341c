"""``paw-gym envs``: list the registered text environments, one line each."""

from __future__ import annotations


def add_parser(subparsers) -> None:
    from training.commands.flags import add_command

    add_command(subparsers, "envs", help="list registered text environments").set_defaults(
        func=run)


def run(args) -> int:
    import gymnasium as gym

    import paw_gym

    envs = paw_gym.list_text_envs()
    if not envs:
        print("no text environments are registered")
        return 0
    width = max(len(env_id) for env_id in envs)
    for env_id, description in envs.items():
        limit = gym.spec(env_id).max_episode_steps
        steps = f"max {limit} steps" if limit else "no step limit"
        print(f"{env_id:<{width}}  {steps:<14}  {description}")
    return 0
