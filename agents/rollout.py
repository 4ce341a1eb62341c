"""Batched rollouts: ``num_groups`` tasks x ``group_size`` samples, one ``act`` call per step."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from agents.base import Agent, Policy, Sampling, as_agent
from agents.env_workers import EnvWorkers, InProcessEnvs
from agents.envs import EnvSource, env_factory
from agents.sampling import DEFAULT_STOP
from agents.types import PolicyOutput, Trajectory, Transition
from paw_gym.progress import Progress


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
    progress: Progress = False,
    num_env_workers: int = 0,
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
        progress: show a progress bar over episodes (``"heartbeat"``: outside a terminal, only a
            line after each 15 s without one; see :mod:`paw_gym.progress`).
        num_env_workers: build, reset and step the envs in this many worker processes (each
            owning a share of the envs, capped at their number), so a step's env work runs in
            parallel; pays off for slow envs (ALFWorld), costs a little on fast ones (see
            ``benchmarks/env_workers.py``). 0 keeps them in this process. Trajectories are the
            same either way; agents get :class:`~agents.env_workers.WorkerEnv` handles that
            forward attribute reads and method calls (``expert_action``) to the worker.
    Returns:
        ``num_groups * group_size`` trajectories, group by group (``group_index`` set).
    """
    if num_groups < 1 or group_size < 1:
        raise ValueError(f"num_groups and group_size must be >= 1, got {num_groups}, {group_size}")
    if isinstance(num_env_workers, bool) or not isinstance(num_env_workers, int) \
            or num_env_workers < 0:
        raise ValueError(f"num_env_workers must be an integer >= 0 (0: envs in this process), got "
                         f"{num_env_workers!r}")
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
    num_envs = num_groups * group_size
    envs = EnvWorkers(make, num_envs, min(num_env_workers, num_envs)) if num_env_workers else \
        InProcessEnvs(make, num_envs)
    try:
        trajectories = _run(agent, envs, group_size, seeds, options, sampling, rng, max_steps,
                            progress)
    finally:
        envs.close()
    agent.end_episodes(trajectories)
    return trajectories


def _run(agent: Agent, envs: InProcessEnvs | EnvWorkers, group_size, seeds, options, sampling,
         rng, max_steps, progress):
    from paw_gym.progress import progress_bar

    num_envs = len(envs.handles)
    groups = [index // group_size for index in range(num_envs)]
    resets = envs.reset([(index, int(seeds[group]), options[group])
                         for index, group in enumerate(groups)])
    prompts, infos, trajectories = [], [], []
    for group, (prompt, info) in zip(groups, resets):
        prompts.append(prompt)
        infos.append(info)
        trajectories.append(Trajectory(task_id=str(info.get("task_id", "")),
                                       task_type=str(info.get("task_type", "")),
                                       group_index=group,
                                       initial_observation=str(info.get("raw_observation",
                                                                        prompt))))
    live = list(range(num_envs))
    bar = progress_bar(total=num_envs, desc="rollout", unit="episode", progress=progress)
    step = 0
    while live:
        outputs = agent.decide([prompts[i] for i in live], [infos[i] for i in live],
                               [envs.handles[i] for i in live], sampling,
                               int(rng.integers(0, 2**31 - 1)))
        if len(outputs) != len(live):
            raise RuntimeError(f"{type(agent).__name__}.decide returned {len(outputs)} outputs "
                               f"for {len(live)} prompts")
        step += 1
        results = envs.step([(i, _policy_action(output)) for i, output in zip(live, outputs)])
        still_live = []
        for i, output, result in zip(live, outputs, results):
            transition, prompts[i] = _transition(prompts[i], output, result)
            if max_steps is not None and step >= max_steps and not transition.terminated:
                transition.truncated = True
            trajectories[i].transitions.append(transition)
            infos[i] = transition.info
            if transition.terminated or transition.truncated:
                trajectories[i].won = bool(transition.info.get("won", False))
            else:
                still_live.append(i)
        bar.set_postfix(step=step)
        bar.update(len(live) - len(still_live))  # the episodes that ended at this step
        live = still_live
    bar.close()
    return trajectories


def _policy_action(output: PolicyOutput):
    """The response as the env's action, carrying the policy's metadata (for recorders)."""
    from wrappers import PolicyAction

    return PolicyAction(output.text, action_entropy=output.mean_entropy,
                        prompt_ids=output.prompt_ids, response_ids=output.response_ids)


def _transition(prompt: str, output: PolicyOutput, step_result: tuple) -> tuple[Transition, str]:
    """The transition of one env step (``step_result``: what ``env.step`` returned) and the
    next prompt."""
    next_prompt, reward, terminated, truncated, info = step_result
    info = dict(info)
    next_observation = info.pop("raw_observation", next_prompt)
    transition = Transition(
        prompt=prompt, output=output, action=str(info.get("parsed_action") or ""),
        next_observation=str(next_observation), reward=float(reward),
        terminated=bool(terminated), truncated=bool(truncated),
        invalid_action=bool(info.get("invalid_action", False)), info=info,
        format_penalty=float(info.get("format_penalty", 0.0)))
    return transition, next_prompt
