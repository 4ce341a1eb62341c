"""Batched rollouts: ``num_groups`` tasks x ``group_size`` samples, one ``act`` call per step."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from agents.base import Agent, Policy, Sampling, as_agent
from agents.envs import EnvSource, env_factory
from agents.sampling import DEFAULT_STOP
from agents.types import PolicyOutput, Trajectory, Transition


def rollout(
    agent: Agent | Policy,
    env: EnvSource,
    num_groups: int,
    group_size: int,
    *,
    temperature: float = 1.0,
    max_new_tokens: int = 256,
    stop: Sequence[str] | None = DEFAULT_STOP,
    seed: int = 0,
    task_seeds: Sequence[int] | None = None,
    task_options: Sequence[Mapping[str, Any] | None] | None = None,
    max_steps: int | None = None,
    progress: bool = False,
    **env_settings: Any,
) -> list[Trajectory]:
    """Run ``num_groups * group_size`` episodes in lockstep and return their trajectories.

    All copies of a group reset with the same seed and options, so they play the same task;
    they differ only by sampling. At every step the prompts of all live envs go to the agent in
    **one** call (one batched ``generate``), then each env steps with its response. An env that
    finishes leaves the batch.

    Args:
        agent: an :class:`~agents.base.Agent` or a policy backend (``HFPolicy``, ``VLLMPolicy``).
        env: an env id (wrapped by :func:`agents.envs.make_agent_env` with ``env_settings``)
            or a factory returning an env whose observation is the prompt and whose action is
            the raw model output (``HistoryPrompt`` + ``ParseAction`` inside).
        num_groups: tasks per rollout.
        group_size: episodes per task.
        temperature, max_new_tokens, stop: generation settings.
        seed: seeds the task draw (when ``task_seeds`` is None) and the sampling.
        task_seeds: per group, the ``reset(seed=...)`` that picks its task.
        task_options: per group, ``reset(options=...)`` (e.g. a task index), or None.
        max_steps: stop episodes after this many steps (marked truncated) in addition to the
            env's own time limit.
        progress: show a progress bar over steps.
    Returns:
        ``num_groups * group_size`` trajectories, group by group (``group_index`` set).
    """
    if num_groups < 1 or group_size < 1:
        raise ValueError(f"num_groups and group_size must be >= 1, got {num_groups}, {group_size}")
    rng = np.random.default_rng(seed)
    seeds = list(task_seeds) if task_seeds is not None else \
        rng.integers(0, 2**31 - 1, size=num_groups).tolist()
    options = list(task_options) if task_options is not None else [None] * num_groups
    if len(seeds) != num_groups or len(options) != num_groups:
        raise ValueError(f"task_seeds/task_options need one entry per group ({num_groups}), got "
                         f"{len(seeds)} and {len(options)}")
    agent = as_agent(agent)
    sampling = Sampling(temperature, max_new_tokens, tuple(stop) if stop else None)
    make = env_factory(env, **env_settings)
    envs = [make() for _ in range(num_groups * group_size)]
    try:
        trajectories = _run(agent, envs, group_size, seeds, options, sampling, rng, max_steps,
                            progress)
    finally:
        for e in envs:
            e.close()
    agent.end_episodes(trajectories)
    return trajectories


def _run(agent: Agent, envs, group_size, seeds, options, sampling, rng, max_steps, progress):
    from paw_gym.progress import progress_bar

    prompts, infos, trajectories = [], [], []
    for index, env in enumerate(envs):
        group = index // group_size
        prompt, info = env.reset(seed=int(seeds[group]), options=options[group])
        prompts.append(prompt)
        infos.append(info)
        trajectories.append(Trajectory(task_id=str(info.get("task_id", "")),
                                       task_type=str(info.get("task_type", "")),
                                       group_index=group,
                                       initial_observation=str(info.get("raw_observation",
                                                                        prompt))))
    live = list(range(len(envs)))
    bar = progress_bar(desc="rollout steps", unit="step", disable=not progress)
    step = 0
    while live:
        outputs = agent.decide([prompts[i] for i in live], [infos[i] for i in live],
                               [envs[i] for i in live], sampling,
                               int(rng.integers(0, 2**31 - 1)))
        if len(outputs) != len(live):
            raise RuntimeError(f"{type(agent).__name__}.decide returned {len(outputs)} outputs "
                               f"for {len(live)} prompts")
        step += 1
        still_live = []
        for i, output in zip(live, outputs):
            transition, prompts[i] = _step(envs[i], prompts[i], output)
            if max_steps is not None and step >= max_steps and not transition.terminated:
                transition.truncated = True
            trajectories[i].transitions.append(transition)
            infos[i] = transition.info
            if transition.terminated or transition.truncated:
                trajectories[i].won = bool(transition.info.get("won", False))
            else:
                still_live.append(i)
        live = still_live
        bar.update(1)
        bar.set_postfix(live=len(live))
    bar.close()
    return trajectories


def _step(env, prompt: str, output: PolicyOutput) -> tuple[Transition, str]:
    """Step ``env`` with the response; return the transition and the next prompt."""
    from wrappers import PolicyAction

    action = PolicyAction(output.text, action_entropy=output.mean_entropy,
                          prompt_ids=output.prompt_ids, response_ids=output.response_ids)
    next_prompt, reward, terminated, truncated, info = env.step(action)
    info = dict(info)
    next_observation = info.pop("raw_observation", next_prompt)
    transition = Transition(
        prompt=prompt, output=output, action=str(info.get("parsed_action") or ""),
        next_observation=str(next_observation), reward=float(reward),
        terminated=bool(terminated), truncated=bool(truncated),
        invalid_action=bool(info.get("invalid_action", False)), info=info)
    return transition, next_prompt
