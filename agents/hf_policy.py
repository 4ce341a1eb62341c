"""A policy on Hugging Face transformers that returns the token-level data RL and PaW need."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any, Sequence

import torch

from agents.sampling import SamplingBatch, token_statistics
from agents.types import PolicyOutput

logger = logging.getLogger(__name__)

#: Stop strings of the paper's prompt templates: an action, a search query, an answer.
DEFAULT_STOP = ("</action>", "</search>", "</answer>")


class HFPolicy:
    """Batched sampling from any ``AutoModelForCausalLM`` with per-token log-probs and entropies.

    Each prompt is a *user message*: the tokenizer's chat template is applied with
    ``add_generation_prompt=True``, the ids are cut from the left to leave room for
    ``max_new_tokens`` inside the context, and the batch is left-padded and decoded with a KV
    cache (one forward pass per new token for the whole batch; finished rows leave the batch).

    **Which distribution.** ``logprobs[i]`` and ``entropies[i]`` belong to the distribution the
    token was actually drawn from: ``softmax(logits / temperature)`` (no top-k / top-p). For
    ``temperature=0`` (greedy) they are those of the untempered distribution
    ``softmax(logits)``. A teacher-forced forward pass over ``prompt_ids + response_ids`` with
    the logits divided by the same temperature reproduces them (in float32, to ~1e-5).

    **Stopping.** A row stops at an EOS id of the tokenizer / generation config (the EOS token is
    kept in ``response_ids`` so RL can learn to stop, but not in ``text``), or when its text
    contains one of ``stop``; ``text`` then ends right after the stop string, while
    ``response_ids`` end with the token that completed it (that token may carry a few more
    characters, e.g. a newline).

    For the trainer:
        - ``policy.model`` / ``policy.tokenizer``: the model and tokenizer (a ``peft`` model
          when an adapter is loaded). The trainer may wrap ``policy.model`` with peft
          (``policy.model = peft.get_peft_model(policy.model, config)``) and train it in place:
          ``act`` samples from whatever ``policy.model`` is, in eval mode, and restores its
          train/eval mode afterwards.
        - ``policy.encode_prompt(prompt, max_new_tokens)`` -> ``(ids, truncated)``: the exact
          prompt ids ``act`` would use (also in every ``PolicyOutput.prompt_ids``).
        - ``policy.load_adapter(path)``: load (or replace) a LoRA adapter saved by peft.
        - ``policy.truncated_prompts``: how many prompts were cut so far.

    Example:
        >>> policy = HFPolicy("Qwen/Qwen2.5-1.5B-Instruct")                  # doctest: +SKIP
        >>> out = policy.act(["Your task is to ..."], temperature=1.0, max_new_tokens=256)
        >>> out[0].text, out[0].logprobs[:3], out[0].mean_entropy             # doctest: +SKIP
    """

    def __init__(
        self,
        model: str | Path | Any,
        tokenizer: str | Path | Any | None = None,
        *,
        adapter: str | Path | None = None,
        device: str | torch.device | None = None,
        dtype: torch.dtype | str = "auto",
        attn_implementation: str | None = None,
        max_context: int | None = None,
        max_batch_size: int | None = None,
        system_prompt: str | None = None,
        seed: int = 0,
    ):
        """
        Args:
            model: hub name or local directory, or an already loaded model.
            tokenizer: hub name, directory or tokenizer; defaults to the model's.
            adapter: optional directory of a peft (LoRA) adapter to load on top of the model.
            device: where to run; defaults to CUDA when available, else CPU.
            dtype: weights dtype when loading (``"auto"`` keeps the checkpoint's dtype).
            attn_implementation: e.g. ``"eager"`` or ``"sdpa"`` (transformers' default if None).
            max_context: context length in tokens; defaults to the model's
                ``max_position_embeddings``.
            max_batch_size: split ``act`` batches into chunks of at most this many prompts
                (prompts of similar length go together); None means one batch.
            system_prompt: optional system message placed before every prompt.
            seed: seeds the sampler used when ``act`` gets no ``seed``.
        """
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if isinstance(model, (str, Path)):
            kwargs: dict[str, Any] = {"dtype": dtype}
            if attn_implementation:
                kwargs["attn_implementation"] = attn_implementation
            source = str(model)
            model = AutoModelForCausalLM.from_pretrained(source, **kwargs)
            tokenizer = tokenizer if tokenizer is not None else source
        elif tokenizer is None:
            raise ValueError("pass `tokenizer` when `model` is an already loaded model")
        if isinstance(tokenizer, (str, Path)):
            tokenizer = AutoTokenizer.from_pretrained(str(tokenizer))
        self.model = model.to(self.device)
        self.tokenizer = tokenizer
        if adapter is not None:
            self.load_adapter(adapter)
        self.max_context = int(max_context or getattr(model.config, "max_position_embeddings", 0)
                               or 0) or None
        if max_batch_size is not None and max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1 or None, got {max_batch_size}")
        self.max_batch_size = max_batch_size
        self.system_prompt = system_prompt
        self.eos_ids = _eos_ids(model, tokenizer)
        self.pad_id = _pad_id(tokenizer, self.eos_ids)
        self.truncated_prompts = 0
        self._rng = torch.Generator().manual_seed(seed)

    # -- prompts ----------------------------------------------------------------------------
    def chat_text(self, prompt: str) -> str:
        """The prompt as the model sees it: chat template with the generation prompt."""
        messages = [{"role": "user", "content": prompt}]
        if self.system_prompt is not None:
            messages.insert(0, {"role": "system", "content": self.system_prompt})
        if not getattr(self.tokenizer, "chat_template", None):
            raise ValueError(f"tokenizer {type(self.tokenizer).__name__} has no chat template; "
                             "use an instruct model or set tokenizer.chat_template")
        return self.tokenizer.apply_chat_template(messages, tokenize=False,
                                                  add_generation_prompt=True)

    def encode_prompt(self, prompt: str, max_new_tokens: int) -> tuple[list[int], bool]:
        """Prompt ids exactly as ``act`` uses them, and whether they were cut from the left."""
        ids = self.tokenizer(self.chat_text(prompt), add_special_tokens=False)["input_ids"]
        if not ids:  # a template that renders an empty prompt to nothing: give the model a start
            ids = [self.tokenizer.bos_token_id if self.tokenizer.bos_token_id is not None
                   else self.eos_ids[0]]
        budget = self._prompt_budget(max_new_tokens)
        if budget is not None and len(ids) > budget:
            return list(ids[len(ids) - budget:]), True
        return list(ids), False

    def _prompt_budget(self, max_new_tokens: int) -> int | None:
        if self.max_context is None:
            return None
        budget = self.max_context - max_new_tokens
        if budget < 1:
            raise ValueError(f"max_new_tokens={max_new_tokens} leaves no room for the prompt in "
                             f"a context of {self.max_context} tokens")
        return budget

    # -- adapters ---------------------------------------------------------------------------
    def load_adapter(self, path: str | Path, name: str = "default") -> None:
        """Load a peft (LoRA) adapter from ``path`` and make it active (replacing ``name``)."""
        from peft import PeftModel

        path = str(path)
        if not Path(path, "adapter_config.json").is_file():
            raise FileNotFoundError(f"no peft adapter at {path!r} (adapter_config.json missing)")
        if isinstance(self.model, PeftModel) and name in self.model.peft_config:
            # Same adapter name again (e.g. the trainer saved new weights): swap weights in place.
            from peft.utils import set_peft_model_state_dict
            from peft.utils.save_and_load import load_peft_weights

            set_peft_model_state_dict(self.model, load_peft_weights(path), adapter_name=name)
            self.model.set_adapter(name)
        elif isinstance(self.model, PeftModel):
            self.model.load_adapter(path, adapter_name=name)
            self.model.set_adapter(name)
        else:
            self.model = PeftModel.from_pretrained(self.model, path, adapter_name=name)
        self.model.to(self.device)

    # -- sampling ---------------------------------------------------------------------------
    def act(
        self,
        prompts: Sequence[str],
        temperature: float = 1.0,
        max_new_tokens: int = 256,
        stop: Sequence[str] | None = DEFAULT_STOP,
        seed: int | None = None,
    ) -> list[PolicyOutput]:
        """Sample one response per prompt (see the class docstring for what is returned).

        Args:
            prompts: user messages (e.g. ``HistoryPrompt`` observations).
            temperature: sampling temperature; 0 means greedy.
            max_new_tokens: most tokens generated per response.
            stop: stop strings (kept at the end of the text); None or () for EOS only.
            seed: seed for this call's sampling; None draws one from the policy's own sampler.
        """
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if isinstance(prompts, str):
            raise TypeError("act() takes a list of prompts, got a single str")
        if not prompts:
            return []
        if seed is None:
            seed = int(torch.randint(0, 2**31 - 1, (1,), generator=self._rng))
        generator = torch.Generator(device=self.device).manual_seed(seed)
        encoded = [self.encode_prompt(p, max_new_tokens) for p in prompts]
        self._count_truncations(sum(cut for _, cut in encoded))
        order = sorted(range(len(prompts)), key=lambda i: len(encoded[i][0]))
        chunk = self.max_batch_size or len(prompts)
        outputs: list[PolicyOutput | None] = [None] * len(prompts)
        was_training = self.model.training
        self.model.eval()
        try:
            for start in range(0, len(order), chunk):
                rows = order[start:start + chunk]
                batch = SamplingBatch([encoded[i][0] for i in rows], self.tokenizer,
                                      self.eos_ids, tuple(stop or ()), max_new_tokens)
                self._generate(batch, temperature, generator)
                for row, index in enumerate(rows):
                    outputs[index] = batch.output(row, prompt_truncated=encoded[index][1])
        finally:
            self.model.train(was_training)
        return outputs  # type: ignore[return-value]

    @torch.inference_mode()
    def _generate(self, batch: SamplingBatch, temperature: float,
                  generator: torch.Generator) -> None:
        from transformers import DynamicCache

        lengths = [len(ids) for ids in batch.prompt_ids]
        width = max(lengths)
        input_ids = torch.full((len(lengths), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(lengths), width), dtype=torch.long)
        for row, ids in enumerate(batch.prompt_ids):
            input_ids[row, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
            mask[row, width - len(ids):] = 1
        input_ids, mask = input_ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache()
        active = torch.arange(len(lengths), device=self.device)  # batch rows still generating
        for _ in range(batch.max_new_tokens):
            logits = self.model(input_ids=input_ids, attention_mask=mask, position_ids=positions,
                                past_key_values=cache, use_cache=True,
                                logits_to_keep=1).logits[:, -1, :]
            tokens, logprobs, entropies = token_statistics(logits, temperature, generator)
            finished = batch.append(active.tolist(), tokens.tolist(), logprobs.tolist(),
                                    entropies.tolist())
            if all(finished):
                return
            if any(finished):
                keep = torch.tensor([i for i, done in enumerate(finished) if not done],
                                    device=self.device)
                cache.batch_select_indices(keep)
                active, tokens, mask = active[keep], tokens[keep], mask[keep]
                positions = positions[keep]
            input_ids = tokens.unsqueeze(-1)
            mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=-1)
            positions = positions[:, -1:] + 1

    def _count_truncations(self, count: int) -> None:
        if not count:
            return
        if self.truncated_prompts == 0:
            warnings.warn(f"{count} prompt(s) longer than the context ({self.max_context} tokens "
                          "minus max_new_tokens) were cut from the left; see "
                          "HFPolicy.truncated_prompts for the running count", stacklevel=3)
        self.truncated_prompts += count
        logger.info("HFPolicy: %d prompt(s) truncated so far", self.truncated_prompts)


def _eos_ids(model: Any, tokenizer: Any) -> tuple[int, ...]:
    ids: list[int] = []
    config = getattr(model, "generation_config", None)
    configured = getattr(config, "eos_token_id", None) if config is not None else None
    for value in ([configured] if isinstance(configured, int) else list(configured or [])):
        ids.append(int(value))
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    if not ids:
        raise ValueError("neither the tokenizer nor the generation config defines an EOS token")
    return tuple(dict.fromkeys(ids))


def _pad_id(tokenizer: Any, eos_ids: tuple[int, ...]) -> int:
    return int(tokenizer.pad_token_id) if tokenizer.pad_token_id is not None else eos_ids[0]
