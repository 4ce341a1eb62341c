"""Optimal plans for tabular envs: value iteration on a Gymnasium toy-text model ``P``.

Gymnasium's FrozenLake, CliffWalking and Taxi expose their exact model as
``P[s][a] = [(probability, next_state, reward, terminated), ...]``. Value iteration solves

    V(s) = max_a Σ_{(p, s', r, d) ∈ P[s][a]} p · (r + γ · (1 − d) · V(s'))

to a fixed point (γ < 1 makes the shortest of equally rewarding plans the best, and keeps the
iteration a contraction on models with reward-free loops). The greedy action
argmax_a Q(s, a) is optimal for the model's own rewards: the shortest path to the goal on a
deterministic map, the most likely way there on a slippery one.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

Model = Mapping[int, Mapping[int, Sequence[tuple[float, Any, float, bool]]]]


def action_values(model: Model, gamma: float = 0.99, tolerance: float = 1e-9,
                  max_iterations: int = 100_000) -> np.ndarray:
    """Q(s, a) of the optimal policy for ``model`` (shape ``[n_states, n_actions]``)."""
    if not 0.0 <= gamma < 1.0:
        raise ValueError(f"gamma={gamma!r} must be in [0, 1)")
    n_states = len(model)
    n_actions = len(model[0])
    rows, probabilities, next_states, rewards, continues = [], [], [], [], []
    for state in range(n_states):
        for action in range(n_actions):
            for probability, next_state, reward, terminated in model[state][action]:
                rows.append(state * n_actions + action)
                probabilities.append(probability)
                next_states.append(int(next_state))
                rewards.append(reward)
                continues.append(0.0 if terminated else 1.0)
    rows, next_states = np.asarray(rows), np.asarray(next_states)
    probabilities, rewards, continues = (np.asarray(x, dtype=np.float64)
                                         for x in (probabilities, rewards, continues))
    values = np.zeros(n_states)
    for _ in range(max_iterations):
        backup = probabilities * (rewards + gamma * continues * values[next_states])
        q = np.bincount(rows, weights=backup, minlength=n_states * n_actions)
        q = q.reshape(n_states, n_actions)
        new_values = q.max(axis=1)
        if np.max(np.abs(new_values - values)) < tolerance:
            return q
        values = new_values
    return q


def greedy_policy(model: Model, gamma: float = 0.99) -> np.ndarray:
    """The optimal action per state (ties go to the lowest action index)."""
    q = action_values(model, gamma)
    # Values equal up to float noise count as ties, so the plan does not depend on rounding.
    best = q.max(axis=1, keepdims=True)
    return np.argmax(q >= best - 1e-9, axis=1)


def plan_length(model: Model, policy: np.ndarray, state: int, limit: int = 1_000) -> int | None:
    """Steps the policy takes from ``state`` to a terminal state on a deterministic model."""
    for steps in range(1, limit + 1):
        outcomes = model[state][int(policy[state])]
        if len(outcomes) != 1:
            raise ValueError("plan_length needs a deterministic model (one outcome per action)")
        _, state, _, terminated = outcomes[0]
        if terminated:
            return steps
    return None
