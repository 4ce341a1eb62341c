"""The configuration of a world-model run (``paw-gym train-wm``): :class:`WorldModelConfig`, and
the constants its checks and the other modules share.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from agents.serialization import WMContext
from training.infra.checked_config import (MAX_TOKENS, bounded, input_folder, model_name,
                                           only_with, output_folder, text)
from training.infra.model_config import ModelConfig
from training.world_model.rewards import DEFAULT_TAU, make_reward


RECORD_AGENTS = ("expert", "random", "policy")
# What some settings need to do anything (``only_with``: another value is warned about).
_WITH_RWML = only_with("method is rwml", lambda c: c.method == "rwml")
_WITH_EASY_FILTER = only_with("method is rwml and easy_filter is true",
                              lambda c: c.method == "rwml" and c.easy_filter)
_WITH_CMAE = only_with("method is cmae", lambda c: c.method == "cmae")
#: How the train/validation split keys episodes (written to wm_config.json, checked by eval-wm).
SPLIT_KEY = "episode-transitions-sha256"


@dataclass
class WorldModelConfig(ModelConfig):
    """Training a world model on a WM replay (``paw-gym train-wm``). The model, its dtype and
    its LoRA adapter are :class:`~training.infra.model_config.ModelConfig`'s fields, as
    ``train``'s."""

    method: Literal["rwml", "sft", "cmae"] = "rwml"
    """rwml (GRPO on next-state prediction), sft (cross-entropy on the next state: the WM SFT
    baseline) or cmae (PaW's clipped-MAE world-model loss, offline)."""
    # ModelConfig's, with this command's defaults: the tiny model, every weight trained
    model: str = model_name("runs/tiny-model")
    lora: bool = False
    replay: str | None = input_folder(None)
    """WMReplay directory of the transitions (default: <output_dir>/replay, recorded first with
    --record_env)."""
    output_dir: str = output_folder("runs/world-model")
    """Where the model (<output_dir>/model), metrics.jsonl and curves.png are written."""
    overwrite: bool = False
    """Replace what an earlier paw-gym command wrote in ``output_dir`` (refused otherwise;
    ``paw-gym train-wm`` checks it before recording or loading anything)."""
    val_fraction: float = bounded(0.1, 0, 1, high_open=True)
    """Share of the episodes held out for validation (by a seeded hash of the episode's
    transitions)."""
    seed: int = bounded(0, 0, 2**32, high_open=True)
    """Seed of the split, the shuffling, the sampling and the easy filter."""
    steps: int = bounded(100, 1, 10**7)
    """Optimizer steps."""
    batch_size: int = bounded(8, 1, 10**5)
    """Examples (prompts) per optimizer step."""
    lr: float = bounded(1e-5, 0, 1, low_open=True)
    """AdamW learning rate (the paper: 1e-6 for a 7B model; a tiny model needs ~1e-3)."""
    max_grad_norm: float = bounded(1.0, 0, 10**6, low_open=True)
    """Gradient clipping norm."""
    max_seq_len: int = bounded(2048, 1, MAX_TOKENS)
    """Longest prompt + answer in tokens (the prompt is cut from the left)."""
    reward: str = text("embedding", **_WITH_RWML)
    """rwml reward: embedding, rouge, exact or module:function (a callable
    f(prediction, target) -> float)."""
    tau: float = bounded(DEFAULT_TAU, -1, 1, what="a cosine", **only_with(
        "method is rwml with reward embedding",
        lambda c: c.method == "rwml" and c.reward == "embedding"))
    """Cosine threshold of the embedding reward (1 if cos >= tau, else 0)."""
    embedding_model: str = text("all-MiniLM-L6-v2", **only_with(
        "method is rwml with reward embedding",
        lambda c: c.method == "rwml" and c.reward == "embedding"))
    """sentence-transformers model of the embedding reward (a name or a folder)."""
    group_size: int = bounded(8, 1, 10**4, **_WITH_RWML)
    """rwml: answers sampled per prompt (K)."""
    temperature: float = bounded(1.0, 0, 100, **_WITH_RWML)
    """rwml: sampling temperature."""
    max_new_tokens: int = bounded(256, 1, MAX_TOKENS, **_WITH_RWML)
    """rwml: token budget of an answer."""
    clip_eps: float = bounded(0.2, 0, 100, low_open=True, **_WITH_RWML)
    """rwml: PPO clip range."""
    kl_coef: float = bounded(0.001, 0, 1000, **_WITH_RWML)
    """rwml: weight of the k3 KL to the reference model (0: no reference pass)."""
    rho: float = bounded(0.2, 0, 1, what="a probability", **_WITH_CMAE)
    """cmae: confidence threshold (tokens with p > rho get no loss)."""
    wm_context: WMContext = field(default="next_turn", metadata=_WITH_CMAE)
    """cmae: where o_next follows the action (the PaW term's ``wm_context``)."""
    easy_filter: bool = field(default=True, metadata=_WITH_RWML)
    """rwml: drop most "too easy" training examples before RL (see the module docstring)."""
    easy_sft_fraction: float = bounded(0.1, 0, 1, low_open=True, **_WITH_EASY_FILTER)
    """Share of the training examples the filter's SFT predictor is trained on."""
    easy_sft_steps: int = bounded(50, 0, 10**7, **_WITH_EASY_FILTER)
    """Optimizer steps of the filter's SFT predictor."""
    easy_sft_lr: float = bounded(1e-5, 0, 1, **_WITH_EASY_FILTER)
    """Learning rate of the filter's SFT predictor."""
    easy_samples: int = bounded(10, 1, 10**4, **_WITH_EASY_FILTER)
    """Answers the predictor samples per training example."""
    easy_threshold: float = bounded(1.0, -1e9, 1e9, **_WITH_EASY_FILTER)
    """An example whose mean reward over the samples is >= this is easy."""
    easy_keep_prob: float = bounded(0.1, 0, 1, what="a probability", **_WITH_EASY_FILTER)
    """Probability of keeping an easy example."""
    token_budget: int = bounded(8192, 1, MAX_TOKENS)
    """Padded tokens per micro-batch (gradient accumulation beyond it)."""
    device: str | None = text(None)
    """cpu, cuda ... (None: CUDA when available)."""
    log_every: int = bounded(1, 1, 10**7)
    """Print a metrics line every this many steps."""
    progress: bool = True
    """Show a progress bar."""

    def _check_relations(self) -> None:
        """What goes with ``method``, and a usable ``reward``
        (:func:`training.config.check_config` calls this after the fields' types and bounds)."""
        super()._check_relations()
        if self.lora and self.lora_dropout > 0:
            raise ValueError(f"lora_dropout={self.lora_dropout} is invalid; expected 0 for "
                             f"train-wm (it trains in eval mode: rwml's training pass must "
                             f"score each answer as it was sampled); sft takes it")
        if self.method == "rwml" and self.group_size < 2:
            raise ValueError(f"group_size={self.group_size} is invalid; expected an integer >= 2 "
                             f"for rwml (GRPO compares the answers of a group)")
        if self.temperature <= 0 and self.method == "rwml":
            raise ValueError(f"temperature={self.temperature} is invalid; expected a number > 0 "
                             f"for rwml (GRPO samples)")
        make_reward(self.reward, self.tau, self.embedding_model)  # raises for a bad name
