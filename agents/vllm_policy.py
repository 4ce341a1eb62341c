"""The policy interface on vLLM (extra ``[vllm]``): same prompts, same token data as HFPolicy.

vLLM starts an engine process, so a script using it needs an ``if __name__ == "__main__":``
guard. On a CPU machine, vLLM runs from its own venv (``python -m agents.vllm_venv``).

This module is also a small command line that samples with vLLM and writes the token data as
JSON (used by the test that compares vLLM with HFPolicy)::

    python -m agents.vllm_policy --model DIR --prompts prompts.json --out outputs.json
"""

from __future__ import annotations

import argparse
import json
import math
import random
from dataclasses import asdict
from pathlib import Path
from typing import Any, Iterable, Sequence

from agents.chat import ChatEncoder, check_sampling_args
from agents.sampling import DEFAULT_STOP, cut_at_stop
from agents.types import PolicyOutput

#: The bytes of weights sent to the engine per call of :meth:`VLLMPolicy.load_weights`.
WEIGHT_CHUNK_BYTES = 256 * 2**20


class WeightLoader:
    """Mixed into vLLM's workers (the engine's ``worker_extension_cls``): loads named tensors
    into the engine's model, for :meth:`VLLMPolicy.load_weights`.

    Tensors travel as ``(name, dtype, shape, bytes)``: vLLM's RPC decodes a tensor argument only
    where the method's signature types it, which an extension's method cannot declare."""

    def paw_load_weights(self, chunk: list) -> int:
        import torch

        weights = [(name, torch.frombuffer(bytearray(data), dtype=torch.uint8)
                    .view(getattr(torch, dtype)).reshape(shape))
                   for name, dtype, shape, data in chunk]
        self.model_runner.model.load_weights(weights=weights)
        return len(weights)


class VLLMPolicy:
    """``act`` on a vLLM engine, returning the same :class:`PolicyOutput` as ``HFPolicy``.

    Prompts are encoded by the same :class:`~agents.chat.ChatEncoder` (chat template, left
    truncation) and sent as token ids, so ``prompt_ids`` are identical to HFPolicy's. The engine
    runs with ``logprobs_mode="processed_logprobs"``: log-probs are of the distribution sampled
    from, ``softmax(logits / temperature)``, as in HFPolicy. Entropies need the whole
    distribution: with ``entropy_top_k=None`` every token's log-prob is requested (exact, but
    costly for a 150k vocabulary); with ``entropy_top_k=k`` the entropy is computed from the top
    k tokens only (a lower bound).

    LoRA: with ``max_lora_rank`` set, :meth:`load_adapter` registers a new ``LoRARequest`` for
    each call (a new id, so vLLM loads the new weights): trainer updates reach the sampler
    without restarting the engine. Full weights: :meth:`load_weights` copies named tensors into
    the engine's model in chunks (``WeightLoader`` runs in vLLM's workers).

    Args:
        model: hub name or local directory.
        tokenizer: tokenizer name/directory (defaults to the model's).
        max_context: ``max_model_len`` (defaults to the model's context).
        system_prompt: optional system message before every prompt.
        entropy_top_k: see above.
        max_lora_rank: enables LoRA adapters up to this rank.
        seed: engine seed, and seeds the draw of ``act``'s seed when none is given;
            ``act(seed=s)`` gives prompt i the seed ``s + i``.
        **engine_kwargs: passed to ``vllm.LLM`` (e.g. ``dtype``, ``gpu_memory_utilization``).
    """

    def __init__(self, model: str | Path, tokenizer: str | Path | None = None, *,
                 max_context: int | None = None, system_prompt: str | None = None,
                 entropy_top_k: int | None = None, max_lora_rank: int | None = None,
                 seed: int = 0, **engine_kwargs: Any):
        from vllm import LLM

        from agents.model_sources import resolve_model

        model = resolve_model(model)
        tokenizer = resolve_model(tokenizer) if tokenizer is not None else None
        if entropy_top_k is not None and entropy_top_k < 1:
            raise ValueError(f"entropy_top_k must be >= 1 or None, got {entropy_top_k}")
        lora = {"enable_lora": True, "max_lora_rank": max_lora_rank} if max_lora_rank else {}
        self.llm = LLM(model=str(model), tokenizer=str(tokenizer or model), seed=seed,
                       max_model_len=max_context, logprobs_mode="processed_logprobs",
                       max_logprobs=-1 if entropy_top_k is None else entropy_top_k,
                       worker_extension_cls=f"{__name__}.{WeightLoader.__name__}",
                       **lora, **engine_kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        context = self.llm.llm_engine.model_config.max_model_len
        eos = self.tokenizer.eos_token_id
        self.chat = ChatEncoder(self.tokenizer, context, system_prompt,
                                eos if eos is not None else 0)
        self.entropy_top_k = entropy_top_k
        self.lora_request = None
        self._lora_ids = 0
        self._rng = random.Random(seed)

    @property
    def truncated_prompts(self) -> int:
        return self.chat.truncated_prompts

    def encode_prompt(self, prompt: str, max_new_tokens: int) -> tuple[list[int], bool]:
        """Prompt ids exactly as ``act`` uses them, and whether they were cut from the left."""
        return self.chat.encode(prompt, max_new_tokens)

    def load_adapter(self, path: str | Path, name: str = "policy") -> None:
        """Sample from now on with the LoRA adapter saved at ``path``."""
        from vllm.lora.request import LoRARequest

        if not Path(path, "adapter_config.json").is_file():
            raise FileNotFoundError(f"no peft adapter at {str(path)!r} "
                                    "(adapter_config.json missing)")
        self._lora_ids += 1
        self.lora_request = LoRARequest(f"{name}-{self._lora_ids}", self._lora_ids, str(path))

    def load_weights(self, weights: Iterable[tuple[str, Any]],
                     chunk_bytes: int = WEIGHT_CHUNK_BYTES) -> int:
        """Sample from now on with ``weights``: ``(name, tensor)`` pairs with the model's HF
        names (any subset, e.g. a training model's ``named_parameters()``), consumed one at a
        time and sent in chunks of about ``chunk_bytes`` in the engine's dtype, so no second
        whole copy of the weights is held here. The prefix cache is cleared (its KV came from
        the old weights). Returns the bytes sent."""
        import torch

        dtype = self.llm.llm_engine.model_config.dtype
        chunk, size, sent = [], 0, 0
        for name, tensor in weights:
            tensor = tensor.detach().to("cpu", dtype).contiguous()
            data = tensor.reshape(-1).view(torch.uint8).numpy().tobytes()
            chunk.append((name, str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape),
                          data))
            size += len(data)
            if size >= chunk_bytes:
                self.llm.collective_rpc("paw_load_weights", args=(chunk,))
                chunk, sent, size = [], sent + size, 0
        if chunk:
            self.llm.collective_rpc("paw_load_weights", args=(chunk,))
            sent += size
        self.llm.reset_prefix_cache()
        return sent

    def act(self, prompts: Sequence[str], temperature: float = 1.0, max_new_tokens: int = 256,
            stop: Sequence[str] | None = DEFAULT_STOP, seed: int | None = None
            ) -> list[PolicyOutput]:
        """Sample one response per prompt (see ``HFPolicy.act``)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        check_sampling_args(temperature, max_new_tokens)
        encoded = self.chat.encode_batch(prompts, max_new_tokens)
        if not encoded:
            return []
        if seed is None:
            seed = self._rng.randrange(2**31 - len(encoded))
        stop = [s for s in (stop or ()) if s]
        params = [SamplingParams(temperature=temperature, max_tokens=max_new_tokens,
                                 stop=stop or None, include_stop_str_in_output=True,
                                 logprobs=-1 if self.entropy_top_k is None else self.entropy_top_k,
                                 seed=seed + i)  # top-k / top-p stay off, as in HFPolicy
                  for i in range(len(encoded))]
        requests = [TokensPrompt(prompt_token_ids=ids) for ids, _ in encoded]
        results = self.llm.generate(requests, params, lora_request=self.lora_request,
                                    use_tqdm=False)
        return [self._output(result.outputs[0], ids, cut, stop)
                for result, (ids, cut) in zip(results, encoded)]

    def _output(self, completion: Any, prompt_ids: list[int], truncated: bool,
                stop: Sequence[str]) -> PolicyOutput:
        tokens = list(completion.token_ids)
        logprobs, entropies = [], []
        for token, distribution in zip(tokens, completion.logprobs or []):
            logprobs.append(float(distribution[token].logprob))
            values = [entry.logprob for entry in distribution.values()]
            entropies.append(-sum(math.exp(v) * v for v in values if v > -math.inf))
        reason = "length" if completion.finish_reason == "length" else "stop"
        return PolicyOutput(text=cut_at_stop(completion.text, stop), prompt_ids=list(prompt_ids),
                            response_ids=tokens, logprobs=logprobs, entropies=entropies,
                            finish_reason=reason, prompt_truncated=truncated)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agents.vllm_policy", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompts", required=True, help="JSON list of prompt strings")
    parser.add_argument("--out", required=True,
                        help="where to write {'base'|'adapter': {temperature: [outputs]}} (JSON)")
    parser.add_argument("--temperature", type=float, action="append", default=None,
                        help="sampling temperature (repeatable; default 1.0)")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--max-context", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stop", action="append", default=None, help="stop string (repeatable)")
    parser.add_argument("--adapter", default=None,
                        help="LoRA adapter directory: sample again with it (key 'adapter')")
    parser.add_argument("--max-lora-rank", type=int, default=None)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--memory-fraction", type=float, default=0.1,
                        help="vLLM's gpu_memory_utilization (on the CPU backend: the fraction of "
                             "RAM reserved for the KV cache)")
    args = parser.parse_args(argv)
    policy = VLLMPolicy(args.model, max_context=args.max_context, dtype=args.dtype,
                        max_lora_rank=args.max_lora_rank, seed=args.seed,
                        gpu_memory_utilization=args.memory_fraction)
    prompts = json.loads(Path(args.prompts).read_text())
    results: dict[str, dict[str, list]] = {}
    for name in ("base", "adapter") if args.adapter else ("base",):
        if name == "adapter":
            policy.load_adapter(args.adapter)
        results[name] = {}
        for temperature in args.temperature or [1.0]:
            outputs = policy.act(prompts, temperature=temperature,
                                 max_new_tokens=args.max_new_tokens, stop=args.stop,
                                 seed=args.seed)
            results[name][str(temperature)] = [asdict(o) for o in outputs]
    Path(args.out).write_text(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
