"""The former path of :mod:`training.rl.losses` (README and docs/training.md show it): kept so
that ``from training.losses import ...`` keeps working."""

from training.rl.losses import (WM_LOSS_KINDS, adaptive_wm_coef, clipped_token_fraction, kl_k3,
                                masked_mean, ppo_clip_token_loss, sampled_token_entropy,
                                select_by_entropy, wm_token_loss)

__all__ = ["WM_LOSS_KINDS", "adaptive_wm_coef", "clipped_token_fraction", "kl_k3", "masked_mean",
           "ppo_clip_token_loss", "sampled_token_entropy", "select_by_entropy", "wm_token_loss"]
