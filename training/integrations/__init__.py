"""PaW inside other trainers: :mod:`training.integrations.trl` (the ``[trl]`` extra) puts paw-gym's
envs and PaW's world-model term in TRL's ``GRPOTrainer``."""
