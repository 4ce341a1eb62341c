"""Rollouts, advantages, RL + world-model losses, the PaW trainer, evaluation and the CLI.

Importing this package does not import torch; the submodules that need it do.
"""

from paw_gym.moved import moved_error, refuse_moved

__all__ = ["PaWTrainer", "TrainConfig", "load_config"]

# Moved when training/ was grouped by job (rl/, infra/, warmstart/): the old paths fail with
# one line naming the new one instead of re-exporting.
MOVED = {"training.losses": "training.rl.losses",
         "training.advantages": "training.rl.advantages",
         "training.metrics_log": "training.infra.metrics_log",
         "training.outputs": "run_files.outputs",
         "training.serialization": "agents.serialization",
         "training.pretrain": "training.warmstart.pretrain"}
refuse_moved(MOVED)


def __getattr__(name: str):
    # Lazy: ``training.PaWTrainer`` imports torch only when it is first asked for.
    if name == "PaWTrainer":
        from training.trainer import PaWTrainer

        return PaWTrainer
    if name in ("TrainConfig", "load_config"):
        from training import config

        return getattr(config, name)
    if f"training.{name}" in MOVED:  # `from training import losses`
        raise moved_error(f"training.{name}", MOVED[f"training.{name}"])
    raise AttributeError(f"module 'training' has no attribute {name!r}")
