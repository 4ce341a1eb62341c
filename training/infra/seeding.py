"""One seed for every random number generator a run draws from (Python's, NumPy's, torch's):
the trainer seeds them from (seed, update) before each rollout and update, and the
asynchronous rollout worker from the same numbers, so both sample alike."""

from __future__ import annotations

import random

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    """Seed Python's ``random``, NumPy's global generator and torch's (CPU and CUDA)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
