"""From rollout trajectories to training samples: advantages, entropy selection, λ_g, and the
``h ⊕ a ⊕ s ⊕ o_next`` serialisation of each transition (:mod:`agents.serialization`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from agents.serialization import TransitionSerializer
from agents.types import Trajectory
from training.config import TrainConfig
from training.rl import advantages as adv
from training.rl.batch import Sample
from training.rl.losses import adaptive_wm_coef, sampled_token_entropy, select_by_entropy

#: Anchor key of the first step when the trajectory does not carry its reset observation
#: (every trajectory of a group starts from the same reset state anyway).
INITIAL_STATE = "\x00<initial state>"


@dataclass
class RolloutBatch:
    """One update's worth of samples plus what the objective needs about them."""

    samples: list[Sample]
    selected: torch.Tensor
    """``[N]`` bool: transitions that get the WM loss (top-α action entropy)."""
    group_lambda: dict[int, float]
    """λ_g per group index."""
    trajectories: list[Trajectory]
    cut_prompts: int = 0
    """Transitions whose prompt was cut from the left to fit ``max_seq_len``: their PPO ratio
    compares the policy on a shorter context than the one that sampled the action."""
    zero_advantage_groups: float = 0.0
    """Share of the rollout's groups whose every advantage is 0 (every episode scored the same):
    the RL term learns nothing from them, and after a collapse every group is one."""


def anchor_keys(trajectory: Trajectory) -> list[str]:
    """The state each step acted on: o_0 for the first step, then the previous step's raw next
    observation (GiGPO's anchor states)."""
    keys = []
    previous = trajectory.initial_observation or INITIAL_STATE
    for transition in trajectory.transitions:
        keys.append(str(transition.info.get("anchor_observation", previous)))
        previous = transition.next_observation
    return keys


def entropy_score(output, config: TrainConfig) -> float:
    """H(a_t | h_t) as ``config.entropy_score`` defines it (full distribution or sampled
    tokens)."""
    if config.entropy_score == "sampled":
        return sampled_token_entropy(output.logprobs)
    return output.mean_entropy


def step_advantages(trajectories: list[Trajectory], config: TrainConfig,
                    values: list[list[float]] | None = None) -> list[list[float]]:
    """Advantage of every step of every trajectory (per-trajectory lists)."""
    groups = [t.group_index for t in trajectories]
    returns = torch.tensor([t.total_reward for t in trajectories], dtype=torch.float64)
    if config.algo in ("grpo", "rloo"):
        episode = (adv.grpo(returns, groups, normalize=config.norm_adv_by_std)
                   if config.algo == "grpo" else adv.rloo(returns, groups))
        return [[float(episode[i])] * len(t) for i, t in enumerate(trajectories)]
    if config.algo == "gigpo":
        per_step = config.gigpo_penalty == "step"
        if per_step:  # verl-agent: penalty-free returns, each step charged its own penalty
            returns = torch.tensor([t.task_return for t in trajectories], dtype=torch.float64)
        rewards = [torch.tensor([s.task_reward if per_step else s.reward for s in t.transitions],
                                dtype=torch.float64)
                   for t in trajectories]
        penalties = [torch.tensor([s.format_penalty for s in t.transitions], dtype=torch.float64)
                     for t in trajectories] if per_step else None
        steps = adv.gigpo(returns, groups, rewards, [anchor_keys(t) for t in trajectories],
                          gamma=config.gamma, omega=config.omega,
                          normalize=config.norm_adv_by_std, similarity=config.gigpo_similarity,
                          step_penalties=penalties, episode_norm=config.gigpo_episode_norm)
        return [s.tolist() for s in steps]
    if values is None:
        raise ValueError("algo='ppo' needs critic values for every step")
    raw = [adv.gae(torch.tensor([s.reward for s in t.transitions]), torch.tensor(v),
                   config.gae_gamma, config.gae_lambda)[0] for t, v in zip(trajectories, values)]
    flat = adv.whiten(torch.cat(raw)) if raw else torch.zeros(0)
    return [part.tolist() for part in flat.split([len(t) for t in trajectories])]


def value_targets(trajectories: list[Trajectory], values: list[list[float]],
                  config: TrainConfig) -> list[list[float]]:
    """PPO critic targets (GAE returns), per trajectory."""
    return [adv.gae(torch.tensor([s.reward for s in t.transitions]), torch.tensor(v),
                    config.gae_gamma, config.gae_lambda)[1].tolist()
            for t, v in zip(trajectories, values)]


def group_lambdas(trajectories: list[Trajectory], config: TrainConfig) -> dict[int, float]:
    """λ_g of each rollout group: max(0, 1 − R̄_g / r_max) over the group's mean task return
    (``lambda_return: task``) or total return with penalties (``total``); 1 without
    ``adaptive_coef``."""
    group_returns: dict[int, list[float]] = {}
    for t in trajectories:
        group_returns.setdefault(t.group_index, []).append(lambda_return(t, config))
    return lambdas_of_returns(group_returns, config)


def lambda_return(trajectory: Trajectory, config) -> float:
    """The episode return that λ_g averages (``config.lambda_return``)."""
    return trajectory.task_return if config.lambda_return == "task" else trajectory.total_reward


def lambdas_of_returns(group_returns: dict[int, list[float]], config) -> dict[int, float]:
    """λ_g from each group's :func:`lambda_return` values (``config``: ``adaptive_coef``,
    ``r_max``, ``lambda_clamp``)."""
    return {g: (adaptive_wm_coef(sum(r) / len(r), config.r_max, config.lambda_clamp)
                if config.adaptive_coef else 1.0) for g, r in group_returns.items()}


def build_batch(trajectories: list[Trajectory], serializer: TransitionSerializer,
                config: TrainConfig, values: list[list[float]] | None = None) -> RolloutBatch:
    """Serialise every transition with a non-empty response into a :class:`Sample`, in
    ``serializer``'s ``wm_context``."""
    tokenizer = serializer.tokenizer
    per_step = step_advantages(trajectories, config, values)
    targets = value_targets(trajectories, values, config) if values is not None else None
    signal: dict[int, bool] = {}  # group -> has a non-zero advantage
    for trajectory, advantages in zip(trajectories, per_step):
        signal[trajectory.group_index] = (signal.get(trajectory.group_index, False)
                                          or any(a != 0 for a in advantages))
    flat = [(ti, si) for ti, t in enumerate(trajectories) for si, s in enumerate(t.transitions)
            if s.output.response_ids]
    entropies = torch.tensor([entropy_score(trajectories[ti].transitions[si].output, config)
                              for ti, si in flat], dtype=torch.float64)
    # A transition without a next observation has no WM target: not selectable, not in |S_g|;
    # nor, when the config says so, one of a group without advantage signal or an invalid action.
    def wm_eligible(ti: int, si: int) -> bool:
        transition = trajectories[ti].transitions[si]
        return (bool(transition.next_observation)
                and (config.wm_zero_signal_groups or signal[trajectories[ti].group_index])
                and (config.wm_invalid_actions or not transition.invalid_action))

    eligible = torch.tensor([wm_eligible(ti, si) for ti, si in flat], dtype=torch.bool)
    selected = (select_by_entropy(entropies, config.alpha, eligible=eligible)
                if config.paw and flat else torch.zeros(len(flat), dtype=torch.bool))
    group_lambda = group_lambdas(trajectories, config)
    samples = []
    cut_prompts = 0
    for row, (ti, si) in enumerate(flat):
        trajectory, transition = trajectories[ti], trajectories[ti].transitions[si]
        out = transition.output
        obs_ids = (tokenizer(transition.next_observation, add_special_tokens=False)["input_ids"]
                   [:config.max_obs_tokens] if transition.next_observation else [])
        # Only rows whose WM term can be non-zero carry observation tokens (saves compute).
        wants_obs = bool(selected[row]) and group_lambda[trajectory.group_index] > 0
        serialized = serializer(out.prompt_ids, out.response_ids, obs_ids if wants_obs else [],
                                config.max_seq_len)
        cut_prompts += serialized.prompt_len < len(out.prompt_ids)
        samples.append(Sample(
            serialized.ids, serialized.prompt_len, serialized.action_len, serialized.obs_len,
            old_logprobs=list(out.logprobs), advantage=per_step[ti][si],
            group=trajectory.group_index, entropy=float(entropies[row]),
            value_target=targets[ti][si] if targets else 0.0,
            old_value=values[ti][si] if values else 0.0,
            separator_len=serialized.separator_len,
            leak_target=obs_ids[0] if obs_ids else None,
            extra={"task_type": trajectory.task_type}))
    zero_groups = sum(not has for has in signal.values()) / len(signal) if signal else 0.0
    return RolloutBatch(samples, selected, group_lambda, trajectories, cut_prompts, zero_groups)
