""":class:`PaWSettings`: the world-model term's settings (the paper's §3: which transitions get
L_WM, its token loss, and the reward-adaptive λ_g), declared once. The native trainer's
``TrainConfig`` and the TRL integration's ``PaWGRPOConfig`` inherit these fields (TRL's as
argparse-ready copies, :func:`training.integrations.trl.trl_arguments`), and the objective's
``ObjectiveSettings.world_model`` holds them (a run's config itself), so a value means the same
everywhere and is checked by the same declaration."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from training.infra.checked_config import MAX_TOKENS, CheckedConfig, bounded, only_with

#: The world-model token losses (``training.rl.losses.wm_token_loss``).
WMLoss = Literal["cmae", "mae", "ce"]

_WITH_PAW = only_with("paw is true", lambda c: c.paw)


@dataclass
class PaWSettings(CheckedConfig):
    """PaW's world-model term. Defaults are the paper's (α = 0.75, ρ = 0.2, λ_g = 1 − R̄_g /
    r_max)."""

    paw: bool = True
    """World-model co-training on (False: the vanilla RL baseline)."""
    wm_loss: WMLoss = field(default="cmae", metadata=_WITH_PAW)
    """WM token loss: cmae (PaW's confidence-masked absolute error), mae or ce."""
    alpha: float = bounded(0.75, 0, 1, low_open=True, **_WITH_PAW)
    """Fraction of transitions (by action entropy) that get the WM loss."""
    entropy_score: Literal["full", "sampled"] = field(default="full", metadata=_WITH_PAW)
    """The action entropy that ranks transitions for the WM loss: ``full`` (mean entropy of the
    full next-token distribution at the action tokens; the paper's prose, "action-token
    entropy") or ``sampled`` (−mean q_i log q_i over the sampled tokens' probabilities q_i, the
    paper's §3.1 formula read literally). See docs/training.md."""
    rho: float = bounded(0.2, 0, 1, **_WITH_PAW)
    """CMAE confidence threshold."""
    adaptive_coef: bool = field(default=True, metadata=_WITH_PAW)
    """Reward-adaptive λ_g = max(0, 1 − R̄_g / r_max) (False: λ_g ≡ 1)."""
    r_max: float = bounded(10.0, 0, 1e9, low_open=True)
    """Largest attainable episode return (λ_g = 1 − R̄_g / r_max)."""
    lambda_return: Literal["task", "total"] = field(default="task", metadata=_WITH_PAW)
    """The return whose group mean R̄_g sets λ_g = max(0, 1 − R̄_g / r_max): ``task`` (the env's
    own reward, without invalid-action penalties: R̄_g ∈ [0, r_max], so λ_g ∈ [0, 1], as Eq. 10
    means it) or ``total`` (with the penalties, which push λ_g above 1 in groups without a win;
    the behaviour before issue 25)."""
    lambda_clamp: bool = field(default=False, metadata=_WITH_PAW)
    """Cap λ_g at 1 (matters only with ``lambda_return: total``, where penalties can make
    R̄_g < 0)."""
    max_obs_tokens: int | None = bounded(512, 1, MAX_TOKENS)
    """Observation tokens kept as the WM target (the first ones); None keeps all, as the paper
    (it states no cap; ``benchmarks/wm_target_lengths.py`` measures how often 512 cuts)."""

    @classmethod
    def values_of(cls, config: Any) -> dict[str, Any]:
        """The values of this class's fields that ``config`` (any object with them: a
        ``TrainConfig``, a ``PaWGRPOConfig``) holds, by name."""
        return {item.name: getattr(config, item.name) for item in dataclasses.fields(cls)}
