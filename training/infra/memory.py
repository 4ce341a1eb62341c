"""Per-process memory of a training config, estimated from the model's ``config.json`` before
any weight is loaded (``paw-gym train`` prints it, and refuses a config that cannot fit).

With P parameters, P_t of them trained (all, or LoRA's adapters), b bytes per weight (the
config's ``dtype``) and N processes, one process holds

* weights          ``P·b`` (DDP), ``P·b / N`` (FSDP)
* gradients        ``P_t·b``, ``/ N`` under FSDP
* AdamW states     ``2·P_t·b`` (``exp_avg`` and ``exp_avg_sq``, in the weights' dtype),
  ``/ N`` under FSDP
* sampler          FSDP with HF rollouts only (one process included): ``P·b``, the unsharded
  weights that sample the rollouts (a vLLM engine's memory is vLLM's ``gpu_memory_utilization``)
* KL reference     full fine-tuning with ``kl_coef > 0``: ``P·b`` (a frozen copy; LoRA disables
  its adapters instead)

(with FSDP's ``mixed_precision: bf16`` the sampler, the reference and the activations take 2
bytes per value over the float32 weights)
* PPO critic       the decoder again (``P_d``: P without an untied LM head), with its
  gradients and states, ``4·P_d·b``, ``/ N`` under FSDP
* activations      of one micro-batch of ``T = token_budget`` tokens through L layers of width H
  (MLP width I): with gradient checkpointing the layer inputs ``L·T·H·b`` plus one layer's
  intermediates ``T·(10·H + 4·I)·b``; without, ``L·T·(10·H + 4·I)·b``; plus the chunked LM
  head's ``3·logits_chunk·V·4`` bytes (float32).

The intermediates' ``10·H + 4·I`` per token and layer (attention inputs and outputs, q/k/v,
the norms and residuals; the MLP's gate, up, activation and product) is a rule of thumb, not
read from the code (autograd's saved tensors of SmolLM2 with LoRA, counted by a hook: ``8·H +
4·I``); ``benchmarks/README.md`` compares the estimate with measured peaks.

On a CPU the number that decides whether runs fit is the process's peak resident set, and it
differs in two ways:

* runtime          the resident set of the process when the estimate is made: the
  interpreter, torch, transformers and the other libraries already loaded (measured, not
  estimated)
* activations      glibc's allocator keeps the temporaries a forward pass frees in its heap, so
  the resident set holds one whole forward's intermediates, ``L·T·(10·H + 4·I)·b``, even with
  gradient checkpointing; without it autograd keeps as much again beside them:
  ``2·L·T·(10·H + 4·I)·b``. The LM head's chunk is counted once. Measured with SmolLM2-135M
  and LoRA on 2,000 tokens: a forward + backward grew the resident set by 88.9 KiB per token and
  layer against the rule's 46.5; with checkpointing the forward alone left 2,069 MiB resident
  where autograd kept the 138 MiB of layer inputs (``MALLOC_MMAP_THRESHOLD_=65536``, which
  returns freed blocks to the system, cut the first to 54.4 KiB at 1.1-1.3x the time).

(``python -m benchmarks.memory_peak`` measures a run's peak against this estimate.)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

GiB = 2**30
_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "float64": 8}


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per process, by part."""

    parts: dict[str, float]
    parameters: int
    processes: int
    sharding: str

    @property
    def total(self) -> float:
        return sum(self.parts.values())

    def line(self) -> str:
        """One line: the total and its parts, in GiB."""
        parts = ", ".join(f"{name} {value / GiB:.2f}" for name, value in self.parts.items()
                          if value)
        how = (f"{self.sharding}, {self.processes} processes" if self.processes > 1
               else "fsdp, 1 process" if self.sharding == "fsdp" else "1 process")
        count = (f"{self.parameters / 1e9:.2f} B" if self.parameters >= 1e9
                 else f"{self.parameters / 1e6:.1f} M")
        return (f"estimated memory per process ({how}, {count} parameters): "
                f"{self.total / GiB:.1f} GiB = {parts} GiB")


def model_shape(model: str) -> dict[str, Any]:
    """Parameter counts and sizes from a model's config (a folder or a cached hub name), built
    on the meta device: no weight is read or allocated."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from agents.model_sources import resolve_model

    config = AutoConfig.from_pretrained(resolve_model(model))
    with torch.device("meta"):
        network = AutoModelForCausalLM.from_config(config)
    total = sum(p.numel() for p in network.parameters())
    decoder = sum(p.numel() for p in network.get_decoder().parameters())  # embeddings included
    lora_targets = {}
    for name, module in network.named_modules():
        if isinstance(module, torch.nn.Linear):
            lora_targets.setdefault(name.rsplit(".", 1)[-1], []).append(
                (module.in_features, module.out_features))
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    dtype = str(getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
                or "float32").replace("torch.", "")
    return {"parameters": total, "decoder_parameters": decoder,
            "layers": text.num_hidden_layers, "hidden": text.hidden_size,
            "intermediate": getattr(text, "intermediate_size", 4 * text.hidden_size),
            "vocab": text.vocab_size, "dtype": dtype, "linear": lora_targets}


def estimate(config, shape: dict[str, Any], processes: int,
             cpu_runtime: float | None = None) -> MemoryEstimate:
    """The per-process memory of ``config`` (a ``TrainConfig``) for a model of ``shape``
    (:func:`model_shape`) on ``processes`` processes: on a GPU (``cpu_runtime`` None), or the
    peak resident set on a CPU, where ``cpu_runtime`` is the process's resident bytes before
    the model loads (module docstring)."""
    width = _BYTES.get(config.dtype if config.dtype != "auto" else shape["dtype"], 4)
    total = shape["parameters"]
    if config.lora:
        trained = sum(config.lora_r * (fan_in + fan_out)
                      for name in config.lora_target_modules
                      for fan_in, fan_out in shape["linear"].get(name, []))
    else:
        trained = total
    # FSDP in one process is a world of one: the same sampler copy as with N.
    sharded = config.sharding == "fsdp"
    share = processes if sharded else 1
    # FSDP mixed precision: copies and activations in bfloat16 over float32 weights.
    copies = 2 if sharded and config.mixed_precision == "bf16" else width
    layers, hidden, tokens = shape["layers"], shape["hidden"], config.token_budget
    per_layer = tokens * (10 * hidden + 4 * shape["intermediate"]) * copies
    if cpu_runtime is not None:  # resident: one whole forward's temporaries, + autograd's
        activations = layers * per_layer * (1 if config.gradient_checkpointing else 2)
    elif config.gradient_checkpointing:
        activations = layers * tokens * hidden * copies + per_layer
    else:
        activations = layers * per_layer
    parts = {
        "weights": total * width / share,
        "gradients": trained * width / share,
        "optimizer": 2 * trained * width / share,
        "sampler": total * copies if sharded and config.rollout_backend == "hf" else 0.0,
        "reference": total * copies if config.kl_coef > 0 and not config.lora else 0.0,
        "critic": (4 * shape["decoder_parameters"] * width / share if config.algo == "ppo"
                   else 0.0),
        "activations": activations + 3 * config.logits_chunk * shape["vocab"] * 4,
    }
    if cpu_runtime is not None:
        parts = {"runtime": float(cpu_runtime), **parts}
    return MemoryEstimate(parts, total, processes, "fsdp" if sharded else "ddp")


def resident_bytes() -> int:
    """This process's resident set now."""
    import psutil

    return psutil.Process().memory_info().rss


def check_fits(config, processes: int, device_bytes: float | None) -> MemoryEstimate | None:
    """The estimate of ``config`` on ``processes`` processes, or None where the model's config
    cannot be read offline; a ValueError naming what to change when it exceeds
    ``device_bytes`` (one GPU's memory; None: a CPU run, estimated as its peak resident set
    and not checked)."""
    try:
        shape = model_shape(config.init_checkpoint if config.init_checkpoint and not config.lora
                            else config.model)
    except (OSError, ValueError):
        return None
    found = estimate(config, shape, processes,
                     cpu_runtime=resident_bytes() if device_bytes is None else None)
    if device_bytes is not None and found.total > device_bytes:
        advice = []
        if not config.lora:
            eight = estimate(replace(config, sharding="fsdp"), shape, 8).total
            advice += ["lora: true", f"sharding: fsdp over more GPUs (8 GPUs: {eight / GiB:.1f} "
                       f"GiB per process)"]
        if not config.gradient_checkpointing:
            advice.append("gradient_checkpointing: true")
        advice.append("a smaller token_budget")
        raise ValueError(f"this config does not fit one GPU of {device_bytes / GiB:.1f} GiB: "
                         f"{found.line()}; change: {'; '.join(advice)}")
    return found

