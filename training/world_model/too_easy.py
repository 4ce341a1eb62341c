"""**"Too easy" filter** (rwml only, as the paper): a predictor fine-tuned by ``sft`` on a seeded
``easy_sft_fraction`` (10 %) of the training examples samples ``easy_samples`` (K = 10) answers
per training example; an example whose mean reward is ≥ ``easy_threshold`` (1.0: all K right)
is "easy" and kept with probability ``easy_keep_prob`` (0.1, seeded): :func:`keep_not_too_easy`
on the per-example rewards, :func:`filter_too_easy` end to end.
"""

from __future__ import annotations

import random
from dataclasses import asdict
from typing import Sequence

from training.world_model.config import WorldModelConfig
from training.world_model.data import WMExample, parse_prediction
from training.world_model.methods import (load_trainable_policy, make_optimizer,
                                          sample_predictions, target_loss_step)
from training.world_model.rewards import Reward, score


def keep_not_too_easy(sample_rewards: Sequence[Sequence[float]], keep_prob: float = 0.1,
                      threshold: float = 1.0, seed: int = 0) -> list[bool]:
    """Per example, whether to keep it: an example whose mean sample reward is ≥ ``threshold``
    is easy and kept with probability ``keep_prob`` (one seeded draw per easy example, in
    order); every other example is kept."""
    rng = random.Random(seed)
    keep = []
    for rewards in sample_rewards:
        easy = bool(rewards) and sum(rewards) / len(rewards) >= threshold
        keep.append(not easy or rng.random() < keep_prob)
    return keep


def filter_too_easy(config: WorldModelConfig, train: Sequence[WMExample], reward: Reward
                    ) -> tuple[list[WMExample], dict[str, float]]:
    """The paper's filter end to end: fine-tune a predictor (``sft``) on a seeded
    ``easy_sft_fraction`` of ``train``, sample ``easy_samples`` answers per example, and keep
    the examples :func:`keep_not_too_easy` keeps. Returns them and the filter's statistics."""
    rng = random.Random(config.seed)
    subset = rng.sample(list(train), max(1, round(config.easy_sft_fraction * len(train))))
    predictor_config = WorldModelConfig(**{**asdict(config), "method": "sft", "lora": False,
                                           "steps": config.easy_sft_steps,
                                           "lr": config.easy_sft_lr})
    predictor = load_trainable_policy(predictor_config)
    optimizer = make_optimizer(predictor.model, predictor_config.lr)
    for step in range(config.easy_sft_steps):
        batch = rng.sample(subset, min(config.batch_size, len(subset)))
        target_loss_step(predictor, optimizer, batch, predictor_config)
    outputs = sample_predictions(predictor, train, config.easy_samples,
                                 temperature=config.temperature,
                                 max_new_tokens=config.max_new_tokens, seed=config.seed)
    rewards = [score(reward, [parse_prediction(o.text) for o in group],
                     [example.o_next] * len(group)) for example, group in zip(train, outputs)]
    keep = keep_not_too_easy(rewards, config.easy_keep_prob, config.easy_threshold, config.seed)
    easy = sum(1 for r in rewards if sum(r) / len(r) >= config.easy_threshold)
    kept = [example for example, k in zip(train, keep) if k]
    return kept, {"easy_fraction": easy / len(train), "kept": len(kept), "examples": len(train)}
