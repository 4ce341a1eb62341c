"""The former path of :mod:`training.rl.advantages` (README and docs/training.md show it): kept
so that ``from training.advantages import ...`` keeps working."""

from training.rl.advantages import (EPS, cluster_similar_states, discounted_returns, gae, gigpo,
                                    grpo, rloo, whiten)

__all__ = ["EPS", "cluster_similar_states", "discounted_returns", "gae", "gigpo", "grpo", "rloo",
           "whiten"]
