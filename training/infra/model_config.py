""":class:`ModelConfig`: the model a command trains, its weights' dtype and its LoRA adapter,
declared once for ``train`` (``TrainConfig``), ``sft`` (``SFTConfig``) and ``train-wm``
(``WorldModelConfig``), which inherit these fields (flat: ``model:``, ``lora_r:`` ... in a YAML
file, ``--lora_r`` on the command line), and wrapped by one function,
:func:`training.models.add_lora` (the target-module check, the rank, scale and dropout)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from training.infra.checked_config import (MAX_LORA_RANK, CheckedConfig, bounded, input_folder,
                                           model_name, only_with, text)

#: Every linear layer of a Qwen2 (or Llama) block: where LoRA adapters go unless a config says.
LORA_TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                       "down_proj")
#: The dtypes a model's weights can be loaded in.
WeightDtype = Literal["auto", "float32", "bfloat16", "float16", "float64"]

_WITH_LORA = only_with("lora is true", lambda c: c.lora)


def is_adapter_dir(path: str | Path | None) -> bool:
    """Whether the folder ``path`` holds a peft (LoRA) adapter rather than a whole model (a
    checkpoint's ``model/``, a saved adapter)."""
    return path is not None and Path(path, "adapter_config.json").is_file()


@dataclass
class ModelConfig(CheckedConfig):
    """The model a command trains and how: its weights' dtype, and a LoRA adapter or every
    weight. A command whose default differs (``sft`` and ``train-wm`` train the tiny model in
    full) redeclares that field's default only."""

    model: str = model_name("Qwen/Qwen2.5-1.5B-Instruct")
    """The model: a hub name, a local model folder, a .gguf file, or an offline model's name
    (``smollm2-135m-instruct``, ``qwen2.5-coder-0.5b-instruct``: ``agents.model_sources``); any
    AutoModelForCausalLM with a chat template."""
    init_checkpoint: str | None = input_folder(None)
    """Start from these weights instead: a whole model folder (``model`` then gives only the
    tokenizer), or a LoRA adapter folder, e.g. ``sft``'s output or a checkpoint's ``model/``
    (loaded on ``model`` and trained further: it needs ``lora: true``)."""
    dtype: WeightDtype = "auto"
    """Weights dtype: auto, float32, bfloat16, float16, or float64 (CPU exactness checks); one
    the device cannot run (bfloat16 on a GPU without it) is refused before the model loads."""
    lora: bool = True
    """Train LoRA adapters (peft) instead of all weights."""
    lora_r: int = bounded(16, 1, MAX_LORA_RANK, **_WITH_LORA)
    """LoRA rank."""
    lora_alpha: int = bounded(32, 1, 10**6, **_WITH_LORA)
    """LoRA scaling numerator (scale = alpha / r)."""
    lora_dropout: float = bounded(0.0, 0, 1, high_open=True, what="a probability", **_WITH_LORA)
    """Dropout on the LoRA branch: ``sft`` only (it then trains in train mode); ``train`` and
    ``train-wm`` refuse a value above 0, since their training pass must score each token as it
    was sampled."""
    lora_target_modules: list[str] = text(factory=lambda: list(LORA_TARGET_MODULES),
                                          **_WITH_LORA)
    """Module names that get adapters (each must name a layer of the model: checked when the
    adapter is added)."""

    def _check_relations(self) -> None:
        """An adapter start goes with ``lora`` (a subclass's own check calls this first)."""
        if is_adapter_dir(self.init_checkpoint) and not self.lora:
            raise ValueError(f"init_checkpoint={self.init_checkpoint!r} is a LoRA adapter; "
                             "expected lora: true with it (the adapter is trained further) or a "
                             "whole model folder")
