"""Where paw-gym keeps what it builds once and reuses (generated games, translations, tiny
base models): ``$PAW_GYM_CACHE``, or ``~/.cache/paw-gym``."""

from __future__ import annotations

import os
from pathlib import Path


def cache_home() -> Path:
    """The cache root, read from the environment at each call."""
    base = os.environ.get("PAW_GYM_CACHE")
    return Path(base) if base else Path.home() / ".cache" / "paw-gym"


def alfworld_cache() -> Path:
    """ALFWorld's part of the cache: generated game sets and translated tasks."""
    return cache_home() / "alfworld"
