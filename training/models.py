"""Loading the policy for training: dtype/device, LoRA or full fine-tuning, the KL reference,
and the PPO critic (a value head on its own copy of the backbone)."""

from __future__ import annotations

import contextlib
import copy
import functools

import torch

from training.config import TrainConfig
from training.infra.model_config import ModelConfig, is_adapter_dir


def torch_dtype(name: str):
    if name == "auto":
        return "auto"
    try:
        return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
                "float64": torch.float64}[name]
    except KeyError:
        raise ValueError(f"dtype={name!r} is not one of auto, float32, bfloat16, float16, "
                         f"float64") from None


#: Layer types peft's LoRA can wrap (by class name: transformers' GPT-2 ``Conv1D`` included).
LORA_LAYER_TYPES = ("Linear", "Embedding", "Conv1d", "Conv2d", "Conv3d", "Conv1D")


def layer_names(model: torch.nn.Module) -> set[str]:
    """The full names of ``model``'s layers LoRA can wrap (:data:`LORA_LAYER_TYPES`)."""
    return {name for name, module in model.named_modules()
            if name and type(module).__name__ in LORA_LAYER_TYPES}


@functools.lru_cache(maxsize=8)
def lora_layer_names(source: str) -> frozenset[str] | None:
    """:func:`layer_names` of the model at ``source`` (a folder or a cached hub id), built from
    its config on the meta device (no weight is read, milliseconds for a small model), or None
    when its config cannot be read here."""
    import logging

    from transformers import AutoConfig, AutoModelForCausalLM

    from agents.model_sources import resolve_model

    try:
        config = AutoConfig.from_pretrained(resolve_model(source))
        transformers_logger = logging.getLogger("transformers")
        level = transformers_logger.level
        transformers_logger.setLevel(logging.ERROR)
        try:
            with torch.device("meta"):
                model = AutoModelForCausalLM.from_config(config)
        finally:
            transformers_logger.setLevel(level)
    except Exception:  # noqa: BLE001 - any config this cannot read is checked when it loads
        return None
    return frozenset(layer_names(model))


def check_lora_targets(targets, names) -> None:
    """Every LoRA target in ``targets`` names a layer in ``names`` (full module names), as peft
    matches them: the whole name or its last dotted parts (``q_proj``, ``self_attn.q_proj``);
    else one ``ValueError`` naming the mistyped ones, the nearest names and the model's
    (:func:`training.preflight.check_lora_targets` runs it before any weight loads)."""
    import difflib

    suffixes = sorted({name.split(".")[-1] for name in names})
    missing = [t for t in targets if not any(n == t or n.endswith("." + t) for n in names)]
    if missing:
        hints = [f"{t!r}" + (f" (did you mean {near[0]}?)" if (near := difflib.get_close_matches(
            t.split(".")[-1], suffixes, n=1)) else "") for t in missing]
        raise ValueError(f"lora_target_modules {', '.join(hints)} name no layer of the "
                             f"model; its layers LoRA can wrap: {', '.join(suffixes)}")


def build_policy(config: TrainConfig, device: str | None = None):
    """An ``agents.HFPolicy`` on the configured model, wrapped for training (LoRA or full), on
    ``device`` (default: ``config.device``)."""
    policy = trainable_policy(config, device=device or config.device, seed=config.seed,
                              max_context=rollout_context(config),
                              system_prompt=config.system_prompt)
    if config.gradient_checkpointing:
        policy.model.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": False})
        if config.lora:
            policy.model.enable_input_require_grads()
    # Dropout would make the training pass disagree with the rollout's log-probs, so the model
    # stays in eval mode; transformers only checkpoints layers in train mode, so with gradient
    # checkpointing it is put in train mode (Qwen2's attention dropout is 0, and TrainConfig
    # refuses a lora_dropout).
    policy.model.train(config.gradient_checkpointing)
    return policy


def count_layer_passes(model) -> None:
    """Hooks on each decoder layer of ``model`` (through a peft wrapper) that add the layer's
    share of the tokens it passes, forward and, when a gradient flows back through it,
    backward, to :func:`paw_gym.progress.count_passed`, so that a progress line moves during
    a pass that takes minutes (SFT's batches, the RL update's micro-batches on a real model).
    The hooks only count (the values and gradients are untouched); once per model."""
    from paw_gym.progress import count_passed

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    layers = list(base.get_decoder().layers)
    if not layers or getattr(base, "_paw_gym_counted", False):
        return
    base._paw_gym_counted = True
    share = 1.0 / len(layers)

    def counted(module, inputs, output):
        hidden = output[0] if isinstance(output, tuple) else output
        tokens = hidden.shape[0] * hidden.shape[1] * share
        count_passed("forward", tokens)
        if hidden.requires_grad:
            hidden.register_hook(lambda grad: count_passed("backward", tokens))

    for layer in layers:
        layer.register_forward_hook(counted)


def lora_config(model, config: ModelConfig):
    """peft's ``LoraConfig`` of ``config`` for ``model``: rank ``lora_r``, scale ``lora_alpha /
    lora_r``, ``lora_dropout``, on the layers ``lora_target_modules`` names (checked first: a
    name that matches no layer of ``model`` is one ``ValueError`` naming the layers there
    are)."""
    from peft import LoraConfig

    check_lora_targets(config.lora_target_modules, layer_names(model))
    return LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha,
                      lora_dropout=config.lora_dropout,
                      target_modules=list(config.lora_target_modules), task_type="CAUSAL_LM")


def add_lora(model, config: ModelConfig):
    """``model`` wrapped in a fresh LoRA adapter of :func:`lora_config` (peft's
    ``get_peft_model``): the one LoRA wrapping of ``train``, ``sft`` and ``train-wm``; the TRL
    integration hands the same ``LoraConfig`` to TRL, which wraps it."""
    from peft import get_peft_model

    return get_peft_model(model, lora_config(model, config))


def weights_source(config: ModelConfig) -> str:
    """Where the weights load from: ``init_checkpoint`` when it is a whole model folder, else
    ``model`` (an adapter start loads on ``model``: :func:`start_weights`)."""
    if config.init_checkpoint and not is_adapter_dir(config.init_checkpoint):
        return config.init_checkpoint
    return config.model


def start_weights(model, config: ModelConfig):
    """``model`` (loaded from :func:`weights_source`) as training starts it: the
    ``init_checkpoint`` adapter, trainable; else with ``lora`` a fresh adapter
    (:func:`add_lora`); else every weight. The one start of ``train``, ``sft``, ``train-wm`` and
    the TRL integration (which hands TRL the fresh adapter's ``LoraConfig`` instead)."""
    if is_adapter_dir(config.init_checkpoint):
        from peft import PeftModel

        return PeftModel.from_pretrained(model, config.init_checkpoint, is_trainable=True)
    return add_lora(model, config) if config.lora else model


def trainable_policy(config: ModelConfig, **policy_kwargs):
    """An ``agents.HFPolicy`` on :func:`weights_source` (its tokenizer from ``model`` when the
    weights come from elsewhere), started by :func:`start_weights`, its layer passes counted
    (:func:`count_layer_passes`): the one load of ``train``, ``sft`` and ``train-wm``.
    ``policy_kwargs``: the policy's device, seed, context and system prompt."""
    from agents.hf_policy import HFPolicy

    source = weights_source(config)
    policy = HFPolicy(source, tokenizer=config.model if source != config.model else None,
                      dtype=torch_dtype(config.dtype), **policy_kwargs)
    policy.model = start_weights(policy.model, config).to(policy.device)
    count_layer_passes(policy.model)
    return policy


def check_vllm_installed(name: str = "rollout_backend") -> None:
    """A ``ValueError`` unless vLLM is importable by this Python (``importlib.util.find_spec``,
    without importing it); it may live in its own venv (``python -m agents.vllm_venv``), which
    the error names."""
    import importlib.util
    import sys

    if importlib.util.find_spec("vllm") is not None:
        return
    from agents.vllm_venv import DEFAULT_DIR, venv_python

    venv = venv_python(DEFAULT_DIR)
    where = (f"run paw-gym with the vLLM venv's python: {venv} -m training.cli ..."
             if venv.is_file() else
             "on a CPU machine, build vLLM's own venv with `python -m agents.vllm_venv` and run "
             "paw-gym with its python")
    raise ValueError(f"{name}='vllm' needs vLLM, which this Python ({sys.executable}) cannot "
                     f"import: pip install -e '.[vllm]' on a GPU machine; {where}")


def build_vllm_policy(config: TrainConfig):
    """An ``agents.VLLMPolicy`` on the same base weights as :func:`build_policy`, ready to take
    the trained LoRA adapter or full weights (``rollout_backend: vllm``)."""

    from agents.vllm_policy import VLLMPolicy

    check_vllm_installed()  # its one line: what to install, or which venv to use
    source = weights_source(config)
    kwargs = dict(config.vllm_kwargs)
    if config.dtype != "auto":
        kwargs.setdefault("dtype", config.dtype)
    # vLLM accepts a few rank limits (8, 16, 32, ...): the smallest power of two >= 8 that fits
    max_rank = max(8, 1 << (config.lora_r - 1).bit_length()) if config.lora else None
    return VLLMPolicy(source, tokenizer=config.model if source != config.model else None,
                      max_lora_rank=max_rank, seed=config.seed,
                      max_context=rollout_context(config), system_prompt=config.system_prompt,
                      **kwargs)


def rollout_context(config: TrainConfig) -> int | None:
    """The sampler's context: ``max_prompt_len`` + ``max_new_tokens`` (prompts beyond the cap
    are cut from the left), or None for the model's own."""
    if config.max_prompt_len is None:
        return None
    return config.max_prompt_len + config.max_new_tokens


def trainable_parameters(model) -> list[torch.nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


class Reference:
    """The KL reference policy: the same model with adapters disabled (LoRA), or a frozen copy
    of the initial weights (full fine-tuning)."""

    def __init__(self, model, lora: bool, dtype: torch.dtype | None = None):
        """``dtype``: the frozen copy's, when the training passes run in another dtype than
        the weights' (FSDP mixed precision)."""
        self.frozen = None if lora else copy.deepcopy(model).requires_grad_(False).eval()
        if self.frozen is not None and dtype is not None:
            self.frozen.to(dtype)
        self.model = model

    @contextlib.contextmanager
    def active(self):
        """Yields the module to run the reference forward with."""
        if self.frozen is not None:
            yield self.frozen
        else:
            with self.model.disable_adapter():
                yield self.model


class ValueModel(torch.nn.Module):
    """PPO critic: a copy of the policy's decoder plus a scalar head; V(h) is read at the last
    prompt token."""

    def __init__(self, policy_model):
        super().__init__()
        base = policy_model.get_base_model() if hasattr(policy_model, "get_base_model") \
            else policy_model
        if hasattr(policy_model, "get_base_model"):
            with policy_model.disable_adapter():
                decoder = copy.deepcopy(base.get_decoder())
            # Drop the LoRA branches from the copy: the critic trains all its own weights.
            decoder = _strip_lora(decoder)
        else:
            decoder = copy.deepcopy(base.get_decoder())
        self.decoder = decoder.requires_grad_(True)
        hidden = base.config.hidden_size
        self.head = torch.nn.Linear(hidden, 1)
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                last_index: torch.Tensor) -> torch.Tensor:
        hidden = self.decoder(input_ids=input_ids, attention_mask=attention_mask,
                              use_cache=False).last_hidden_state
        rows = torch.arange(hidden.shape[0], device=hidden.device)
        # In the head's dtype: float32 over a bfloat16 decoder, or FSDP's compute dtype.
        last = hidden[rows, last_index].to(self.head.weight.dtype)
        return self.head(last).float().squeeze(-1)

    def fsdp_units(self) -> list[torch.nn.Module]:
        """The modules FSDP shards one by one (``training.infra.distributed.shard_module``): the
        decoder layers, and the head (float32 over a bfloat16 decoder: a unit of its own,
        since FSDP gathers each unit's parameters in one dtype)."""
        return [*self.decoder.layers, self.head]


def _strip_lora(module: torch.nn.Module) -> torch.nn.Module:
    """Replace peft LoRA layers in ``module`` by their base layers."""
    for name, child in list(module.named_children()):
        base_layer = getattr(child, "base_layer", None)
        if base_layer is not None and hasattr(child, "lora_A"):
            setattr(module, name, base_layer)
        else:
            _strip_lora(child)
    return module
