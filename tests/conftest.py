"""Shared fixtures: the custom test env registration and the location of ../shared/data."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest

import paw_gym

#: Real datasets beside the repository (absent on a user's fresh checkout: tests skip).
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

GUESS_ID = "Test/GuessNumber-v0"
if GUESS_ID not in gym.registry:
    paw_gym.register_text_env(GUESS_ID, "tests.envs:GuessNumberEnv", max_episode_steps=6,
                              description="guess a hidden number (test env)")


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not present at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A float32 ``nano`` tiny model (agents.tiny_model) whose tokenizer saw the paper's
    templates and GuessNumber text; built once per test session (~1 s)."""
    from agents.tiny_model import build_tiny_model
    from wrappers import TEMPLATES

    texts = [text for pair in TEMPLATES.values() for text in pair]
    texts += [f"<think>go {word}</think><action>guess {n}</action> Go higher. Go lower. Correct!"
              for n in range(1, 9) for word in ("up", "down")]
    return build_tiny_model(texts * 20, tmp_path_factory.mktemp("tiny") / "nano", size="nano")


@pytest.fixture
def one_torch_thread():
    """Run a test on one torch thread (tiny models are fastest so, and the machine is shared)."""
    torch = pytest.importorskip("torch")
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
