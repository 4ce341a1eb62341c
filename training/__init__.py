"""Rollouts, advantages, RL + world-model losses, the PaW trainer, evaluation and the CLI.

Importing this package does not import torch; the submodules that need it do.
"""
