"""Shared ALFWorld test data (no tests here): a generated cache with one game per task type.

Built once per test session in a temporary ``PAW_GYM_CACHE`` so the same folder is both the
env's generated cache and, passed as ``data_dir``, data in ALFWorld's official layout.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

import pytest

PER_TYPE = 1
SEED = 0


@contextmanager
def cache_env(cache: Path):
    """Point ``PAW_GYM_CACHE`` at ``cache`` for the duration of the block."""
    saved = os.environ.get("PAW_GYM_CACHE")
    os.environ["PAW_GYM_CACHE"] = str(cache)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("PAW_GYM_CACHE", None)
        else:
            os.environ["PAW_GYM_CACHE"] = saved


@lru_cache(maxsize=None)
def shared_cache() -> tuple[Path, Path]:
    """``(PAW_GYM_CACHE root, generated data root)`` with a complete ``train`` split."""
    pytest.importorskip("alfworld")
    pytest.importorskip("textworld")
    from paw_gym.alfworld.data import ensure_generated

    cache = Path(tempfile.mkdtemp(prefix="paw_gym_alfworld_"))
    atexit.register(shutil.rmtree, cache, True)
    with cache_env(cache):
        root = ensure_generated("train", per_type=PER_TYPE, seed=SEED, progress=False)
    return cache, root
