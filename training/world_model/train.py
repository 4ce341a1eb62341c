"""Training a world model from a replay (``paw-gym train-wm``): recording the replay, then the
run of the configured method (:mod:`training.world_model.methods`) with its logs and model."""

from __future__ import annotations

import json
import random
from dataclasses import asdict
from pathlib import Path
from typing import Any

from training.infra.checked_config import check_config
from training.world_model.config import SPLIT_KEY, WorldModelConfig
from training.world_model.data import load_examples, split_examples
from training.world_model.methods import (load_trainable_policy, make_optimizer, rwml_step,
                                          target_loss_step)
from training.world_model.rewards import make_reward
from training.world_model.too_easy import filter_too_easy


def record_replay(env_id: str, agent_name: str, episodes: int, out_dir: str | Path, *,
                  model: str | None = None, seed: int = 0, temperature: float = 1.0,
                  max_new_tokens: int = 256, device: str | None = None,
                  progress: bool = False, **env_kwargs: Any) -> Path:
    """Play ``episodes`` episodes (task seeds ``seed ..``) with ``agent_name`` (expert, random,
    or policy: ``model`` sampled at ``temperature``, as RWML's own rollouts) and record every
    transition into the WMReplay at ``out_dir``."""
    from agents.baselines import ExpertAgent, RandomAgent
    from agents.envs import make_agent_env
    from agents.rollout import rollout
    from wrappers import RecordTransitions, WMReplay

    if agent_name == "policy":
        from agents.hf_policy import HFPolicy

        agent = HFPolicy(model, device=device, seed=seed)
    else:
        agent = ExpertAgent() if agent_name == "expert" else RandomAgent()
    with WMReplay(out_dir) as replay:
        rollout(agent, lambda: RecordTransitions(make_agent_env(env_id, **env_kwargs), replay),
                episodes, 1, temperature=temperature, max_new_tokens=max_new_tokens, seed=seed,
                task_seeds=list(range(seed, seed + episodes)), progress=progress)
    return Path(out_dir)


#: Where ``train-wm`` writes in its output_dir (the output guard refuses a user's entry there,
#: :mod:`run_files.outputs`): all in place but model/ (staged).
WM_WRITES = ("wm_config.json", "metrics.jsonl", "curves.png", "model/**", "replay/**")


def train_world_model(config: WorldModelConfig) -> tuple[Path, list[dict[str, Any]]]:
    """Train ``config.method`` on the training part of ``config.replay``; save the model (or
    adapter) and tokenizer to ``<output_dir>/model``, the config to ``wm_config.json``, the
    metrics to ``metrics.jsonl`` and ``curves.png``, in the folder claimed through the output
    guard (``run_files.outputs``). Returns the model folder and the metrics."""
    from run_files.outputs import claim_folder

    with claim_folder(config.output_dir, "train-wm", config.overwrite, writes=WM_WRITES):
        return _train_world_model(config)


def _train_world_model(config: WorldModelConfig) -> tuple[Path, list[dict[str, Any]]]:
    import torch

    from run_files.outputs import staged, write_text_atomically
    from paw_gym.progress import progress_bar
    from training.infra.metrics_log import MetricsLogger
    from training.infra.plots import plot_curves
    from training.models import Reference

    check_config(config)  # a config changed after it was made
    out = Path(config.output_dir)
    replay = config.replay or str(out / "replay")
    train, validation = split_examples(load_examples(replay), config.seed, config.val_fraction)
    if not train:
        raise ValueError(f"replay {replay!r} has no training episode (all {len(validation)} "
                         "transitions fell in validation); record more episodes")
    random.seed(config.seed)
    torch.manual_seed(config.seed)
    reward = make_reward(config.reward, config.tau, config.embedding_model)
    setup: dict[str, Any] = {"train_examples": len(train), "val_examples": len(validation)}
    if config.method == "rwml" and config.easy_filter:
        train, filter_stats = filter_too_easy(config, train, reward)
        setup.update(filter_stats)
        print(f"easy filter: {100 * filter_stats['easy_fraction']:.1f} % of "
              f"{filter_stats['examples']} training examples were easy; kept {len(train)}")
    policy = load_trainable_policy(config)
    optimizer = make_optimizer(policy.model, config.lr)
    reference = Reference(policy.model, config.lora) \
        if config.method == "rwml" and config.kl_coef > 0 else None
    write_text_atomically(out / "wm_config.json", json.dumps(
        {"config": asdict(config), "replay": replay, "split_key": SPLIT_KEY, **setup}, indent=2))
    logger = MetricsLogger(out, config={**asdict(config), **setup})
    order_rng = random.Random(config.seed)
    order: list[int] = []
    history = []
    for step in progress_bar(range(1, config.steps + 1), desc=f"train-wm ({config.method})",
                             unit="step", disable=not config.progress):
        if len(order) < config.batch_size:  # a fresh shuffled pass when this one runs out
            order = order_rng.sample(range(len(train)), len(train)) + order
        batch = [train[order.pop()] for _ in range(min(config.batch_size, len(train)))]
        if config.method == "rwml":
            metrics = rwml_step(policy, optimizer, reference, batch, reward, config,
                                seed=config.seed + 1000 * step)
        else:
            metrics = target_loss_step(policy, optimizer, batch, config)
        logger.log(step, metrics)
        history.append({"step": step, **metrics})
        if step % config.log_every == 0 or step == config.steps:
            print(f"step {step}: " + ", ".join(f"{k} {v:.4g}" for k, v in metrics.items()))
    logger.close()
    model_dir = out / "model"
    with staged(model_dir) as folder:
        policy.model.save_pretrained(str(folder), safe_serialization=True)
        policy.tokenizer.save_pretrained(str(folder))
    plot_curves(out / "metrics.jsonl", out / "curves.png",
                keys=("reward", "nonuniform_groups", "wm_loss", "wm_clipped_frac",
                      "policy_loss", "kl", "clip_frac", "tag_frac", "answer_tokens"),
                title=f"train-wm {config.method}")
    return model_dir, history
