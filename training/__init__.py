"""Rollouts, advantages, RL + world-model losses, the PaW trainer, evaluation and the CLI.

Importing this package does not import torch; the submodules that need it do.
"""

__all__ = ["PaWTrainer", "TrainConfig", "load_config"]


def __getattr__(name: str):
    # Lazy: ``training.PaWTrainer`` imports torch only when it is first asked for.
    if name == "PaWTrainer":
        from training.trainer import PaWTrainer

        return PaWTrainer
    if name in ("TrainConfig", "load_config"):
        from training import config

        return getattr(config, name)
    raise AttributeError(f"module 'training' has no attribute {name!r}")
