"""A policy on Hugging Face transformers that returns the token-level data RL and PaW need."""

from __future__ import annotations

import functools
import inspect
import re
from pathlib import Path
from typing import Any, Sequence

import torch

from agents.chat import ChatEncoder, check_sampling_args
from agents.sampling import DEFAULT_STOP, SamplingBatch, token_statistics
from agents.types import PolicyOutput
from paw_gym.progress import count_generated
from run_files.outputs import verify_output


#: A hub id: ``name`` or ``namespace/name`` of letters, digits, ``-``, ``_`` and ``.``.
_HUB_ID = re.compile(r"[\w.-]+(/[\w.-]+)?")


def check_model_source(model: str | Path) -> str:
    """What to load for ``model``: an offline model's name or a ``.gguf`` file becomes its
    converted folder (:func:`agents.model_sources.resolve_model`, fetched or converted the
    first time); a model folder (with a ``config.json``) or a hub id that is in the local
    Hugging Face cache or on a reachable hub is returned as given; anything else is one clear
    error, before transformers tries (and retries) the hub.

    A name that does not exist locally but looks like a path (absolute, ``./``, ``~``, more than
    one ``/``, or under a folder that exists here, such as ``runs/x``) is a missing folder.
    """
    from agents.model_sources import resolve_model

    source = resolve_model(model)
    path = Path(source).expanduser()
    if not source.strip():
        raise ValueError("model is empty; give a hub name such as Qwen/Qwen2.5-1.5B-Instruct or "
                         "a model folder")
    if path.exists():
        verify_output(path, hashes=False)  # an interrupted save (the load checks the hashes)
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"model folder {source!r} has no config.json (is it a "
                                    "saved Hugging Face model?)")
        check_model_folder(path)
        return source
    first = Path(source).parts[0] if Path(source).parts else ""
    looks_local = (source.startswith((".", "/", "~")) or source.count("/") > 1
                   or (first and Path(first).is_dir()))
    if looks_local:
        raise FileNotFoundError(f"model folder {source!r} does not exist")
    if not _HUB_ID.fullmatch(source):
        from agents.model_sources import OFFLINE_MODELS

        raise ValueError(f"model {source!r} is neither a folder, a .gguf file, a hub id "
                         f"(namespace/name, e.g. Qwen/Qwen2.5-1.5B-Instruct) nor an offline "
                         f"model ({', '.join(OFFLINE_MODELS)})")
    _check_hub_model(source)
    return source


#: Weight files that are Python pickles: loading one can run code.
_PICKLED_WEIGHTS = ("*.bin", "*.pt", "*.pth", "*.ckpt")


def check_model_folder(path: Path) -> None:
    """Refuse, in one line, a model folder that would run code from its files: Python code
    named by an ``auto_map`` (config or tokenizer), pickled weights without safetensors, or a
    chat template that tries what transformers' sandbox forbids."""
    import json

    for name in ("config.json", "tokenizer_config.json"):
        file = path / name
        try:
            settings = json.loads(file.read_text(encoding="utf-8")) if file.is_file() else {}
        except (OSError, ValueError) as error:
            raise ValueError(f"{file} is not readable JSON ({error})") from None
        if isinstance(settings, dict) and settings.get("auto_map"):
            raise ValueError(f"{file} has an auto_map ({', '.join(settings['auto_map'])}): it "
                             f"asks to run the folder's own Python code, which paw-gym does not "
                             f"do; use a model transformers implements (Qwen2, Llama, ...)")
    if not any(path.glob("*.safetensors")):
        pickled = sorted(p.name for pattern in _PICKLED_WEIGHTS for p in path.glob(pattern))
        if pickled:
            raise ValueError(f"model folder {str(path)!r} has only pickled weights "
                             f"({', '.join(pickled[:3])}), which can run code when loaded; "
                             f"paw-gym loads safetensors: convert them where you trust the file "
                             f"(model.save_pretrained(folder, safe_serialization=True))")
    if (path / "tokenizer_config.json").is_file() or (path / "chat_template.jinja").is_file():
        from transformers import AutoTokenizer

        from agents.chat import render_chat

        render_chat(AutoTokenizer.from_pretrained(path),
                    [{"role": "user", "content": "hello"}], add_generation_prompt=True)


#: How to get a model without the hub, for the errors below.
_GET_A_MODEL = ("give a local model folder, the offline instruct model "
                "smollm2-135m-instruct (`paw-gym get-model smollm2-135m-instruct`), build the "
                "tiny one with `paw-gym build-tiny-model --output_dir runs/tiny-micro`, or go "
                "online")


# Only a name that passed is remembered: `paw-gym train`, its trainer and its policy each
# check the model, and a hub id found once needs no second call to the hub.
@functools.lru_cache(maxsize=None)
def _check_hub_model(name: str) -> None:
    """A hub id that is neither in the local Hugging Face cache nor on a reachable hub is one
    error within seconds (transformers would retry for about a minute, then print a long
    chained traceback)."""
    import huggingface_hub
    from huggingface_hub import constants
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError

    if isinstance(huggingface_hub.try_to_load_from_cache(name, "config.json"), str):
        return
    if constants.HF_HUB_OFFLINE:
        raise FileNotFoundError(f"model {name!r} is not a local folder and not in the Hugging "
                                f"Face cache, and HF_HUB_OFFLINE is set; {_GET_A_MODEL}")
    try:
        huggingface_hub.HfApi().model_info(name, timeout=10)
    except RepositoryNotFoundError:
        raise FileNotFoundError(f"model {name!r} is not a local folder and the Hugging Face "
                                "hub has no such model (or it is private: log in with `hf "
                                "auth login`)") from None
    # No connection, DNS, timeout, a server error: whatever the hub client raises (its HTTP
    # library has changed between versions), the run cannot download the model.
    except Exception as error:  # noqa: BLE001
        if isinstance(error, HfHubHTTPError) and error.response is not None and \
                error.response.status_code in (401, 403):
            return  # gated: transformers says what the token needs
        raise FileNotFoundError(f"model {name!r} is not a local folder and not in the Hugging "
                                f"Face cache, and the hub is unreachable "
                                f"({type(error).__name__}: {error}); {_GET_A_MODEL}") from None


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
        prefill: str = "auto",
        system_prompt: str | None = None,
        seed: int = 0,
    ):
        """
        Args:
            model: hub name, local directory, .gguf file or offline model name
                (:mod:`agents.model_sources`), or an already loaded model.
            tokenizer: hub name, directory or tokenizer; defaults to the model's.
            adapter: optional directory of a peft (LoRA) adapter to load on top of the model.
            device: where to run; defaults to CUDA when available, else CPU.
            dtype: weights dtype when loading (``"auto"`` keeps the checkpoint's dtype).
            attn_implementation: e.g. ``"eager"`` or ``"sdpa"`` (transformers' default if None).
            max_context: context length in tokens; defaults to the model's
                ``max_position_embeddings``.
            max_batch_size: split ``act`` batches into chunks of at most this many prompts
                (prompts of similar length go together); None means one batch.
            prefill: ``"per_row"`` runs each prompt alone (no padding, so attention takes the
                fast causal path; best on CPU), ``"padded"`` runs the left-padded batch in one
                pass (best on GPU); ``"auto"`` picks by device.
            system_prompt: optional system message placed before every prompt.
            seed: seeds the sampler used when ``act`` gets no ``seed``.
        """
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from paw_gym.progress import quiet_outside_terminal

        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if isinstance(model, (str, Path)):
            kwargs: dict[str, Any] = {"dtype": dtype}
            if attn_implementation:
                kwargs["attn_implementation"] = attn_implementation
            source = check_model_source(model)
            if Path(source).expanduser().exists():
                verify_output(Path(source).expanduser())  # a damaged weight file: named
            quiet_outside_terminal()
            model = AutoModelForCausalLM.from_pretrained(source, **kwargs)
            tokenizer = tokenizer if tokenizer is not None else source
        elif tokenizer is None:
            raise ValueError("pass `tokenizer` when `model` is an already loaded model")
        if isinstance(tokenizer, (str, Path)):
            from agents.model_sources import resolve_model

            tokenizer = AutoTokenizer.from_pretrained(resolve_model(tokenizer))
        self.model = model.to(self.device)
        self.tokenizer = tokenizer
        self._cache_name: str | None = None  # see cache_argument
        if adapter is not None:
            self.load_adapter(adapter)
        max_context = int(max_context or getattr(model.config, "max_position_embeddings", 0)
                          or 0) or None
        if max_batch_size is not None and max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1 or None, got {max_batch_size}")
        self.max_batch_size = max_batch_size
        if prefill not in ("auto", "per_row", "padded"):
            raise ValueError(f"prefill must be 'auto', 'per_row' or 'padded', got {prefill!r}")
        self.prefill = prefill
        self.eos_ids = _eos_ids(model, tokenizer)
        self.pad_id = _pad_id(tokenizer, self.eos_ids)
        self.chat = ChatEncoder(tokenizer, max_context, system_prompt, self.eos_ids[0])
        self._rng = torch.Generator().manual_seed(seed)

    # -- prompts ----------------------------------------------------------------------------
    @property
    def max_context(self) -> int | None:
        return self.chat.max_context

    @property
    def truncated_prompts(self) -> int:
        return self.chat.truncated_prompts

    def chat_text(self, prompt: str) -> str:
        """The prompt as the model sees it: chat template with the generation prompt."""
        return self.chat.chat_text(prompt)

    def encode_prompt(self, prompt: str, max_new_tokens: int) -> tuple[list[int], bool]:
        """Prompt ids exactly as ``act`` uses them, and whether they were cut from the left."""
        return self.chat.encode(prompt, max_new_tokens)

    # -- adapters ---------------------------------------------------------------------------
    def load_adapter(self, path: str | Path, name: str = "default") -> None:
        """Load a peft (LoRA) adapter from ``path`` and make it active (replacing ``name``)."""
        from peft import PeftModel

        path = str(path)
        verify_output(path)
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
        check_sampling_args(temperature, max_new_tokens)
        encoded = self.chat.encode_batch(prompts, max_new_tokens)
        return self._sample(encoded, temperature, max_new_tokens, stop, seed)

    def act_ids(
        self,
        prompt_ids: Sequence[Sequence[int]],
        temperature: float = 1.0,
        max_new_tokens: int = 256,
        stop: Sequence[str] | None = DEFAULT_STOP,
        seed: int | None = None,
    ) -> list[PolicyOutput]:
        """:meth:`act` on prompts given as token ids, used as they are (no chat template, no
        truncation): a multi-turn transcript whose earlier responses must keep the exact ids
        the model generated (:class:`agents.transcript.TranscriptAgent`)."""
        check_sampling_args(temperature, max_new_tokens)
        if any(not ids for ids in prompt_ids):
            raise ValueError("act_ids needs at least one prompt token per prompt")
        longest = max((len(ids) for ids in prompt_ids), default=0)
        if self.max_context is not None and longest + max_new_tokens > self.max_context:
            raise ValueError(f"a prompt of {longest} tokens plus max_new_tokens={max_new_tokens} "
                             f"exceeds the model's context of {self.max_context} tokens; "
                             f"shorten the episodes (max_steps) or the prompt template")
        return self._sample([(list(ids), False) for ids in prompt_ids], temperature,
                            max_new_tokens, stop, seed)

    def _sample(self, encoded: list[tuple[list[int], bool]], temperature: float,
                max_new_tokens: int, stop: Sequence[str] | None, seed: int | None
                ) -> list[PolicyOutput]:
        """One response per ``(prompt ids, was cut)`` pair."""
        if not encoded:
            return []
        if seed is None:
            seed = int(torch.randint(0, 2**31 - 1, (1,), generator=self._rng))
        generator = torch.Generator(device=self.device).manual_seed(seed)
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i][0]))
        chunk = self.max_batch_size or len(encoded)
        outputs: list[PolicyOutput | None] = [None] * len(encoded)
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
        lengths = torch.tensor([len(ids) for ids in batch.prompt_ids], device=self.device)
        width = int(lengths.max())
        # Left padding: row r's prompt fills columns width - len(r) .. width - 1.
        mask = (torch.arange(width, device=self.device) >= width - lengths[:, None]).long()
        cache = self._new_cache(width + batch.max_new_tokens)
        if self._prefill_per_row(cache):
            logits = self._prefill_rows(batch.prompt_ids, cache, width)
        else:
            logits = self._prefill_padded(batch.prompt_ids, mask, cache, width)
        positions = (lengths - 1)[:, None]  # position id of each row's last token
        # rows[i]: the batch row that cache row i generates for; None once it has finished.
        rows: list[int | None] = list(range(len(lengths)))
        for _ in range(batch.max_new_tokens):
            tokens, logprobs, entropies = token_statistics(logits, temperature, generator)
            values = tokens.tolist(), logprobs.tolist(), entropies.tolist()
            live = [i for i, row in enumerate(rows) if row is not None]
            count_generated(len(live))
            finished = batch.append([rows[i] for i in live], *([v[i] for i in live]
                                                               for v in values))
            for i, done in zip(live, finished):
                if done:
                    rows[i] = None
            dead = rows.count(None)
            if dead == len(rows):
                return
            # Dropping finished rows copies the whole cache: do it once a quarter are finished
            # (until then they keep decoding, and their tokens are ignored).
            if dead and 4 * dead >= len(rows):
                keep = [i for i, row in enumerate(rows) if row is not None]
                index = torch.tensor(keep, device=self.device)
                cache.batch_select_indices(index)
                tokens, mask, positions = tokens[index], mask[index], positions[index]
                rows = [rows[i] for i in keep]
            mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=-1)
            positions = positions + 1
            logits = self.model(input_ids=tokens[:, None], attention_mask=mask,
                                position_ids=positions, **self.cache_argument(cache),
                                use_cache=True, logits_to_keep=1).logits[:, -1, :]

    def cache_argument(self, cache) -> dict[str, Any]:
        """The KV cache as the model's forward takes it: ``cache`` since transformers 5.x
        renamed it (the old ``past_key_values`` warns on every call), else
        ``past_key_values``."""
        if self._cache_name is None:
            model = self.model.get_base_model() if hasattr(self.model, "get_base_model") \
                else self.model  # a peft model hands the argument on to its base
            parameters = inspect.signature(model.forward).parameters
            self._cache_name = "cache" if "cache" in parameters else "past_key_values"
        return {self._cache_name: cache}

    def _new_cache(self, capacity: int):
        from transformers import DynamicCache

        from agents.kv_cache import preallocated_cache

        layer_types = getattr(self.model.config, "layer_types", None) or ["full_attention"]
        if any(kind != "full_attention" for kind in layer_types):
            return DynamicCache(config=self.model.config)  # sliding windows etc.: HF's own cache
        return preallocated_cache(self.model.config.num_hidden_layers, capacity)

    def _prefill_per_row(self, cache) -> bool:
        from agents.kv_cache import PreallocatedLayer

        mode = self.prefill
        if mode == "auto":
            mode = "padded" if self.device.type == "cuda" else "per_row"
        return mode == "per_row" and isinstance(cache.layers[0], PreallocatedLayer)

    def _prefill_padded(self, prompt_ids, mask, cache, width) -> torch.Tensor:
        input_ids = torch.full(mask.shape, self.pad_id, dtype=torch.long, device=self.device)
        for row, ids in enumerate(prompt_ids):
            input_ids[row, width - len(ids):] = torch.tensor(ids, device=self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        return self.model(input_ids=input_ids, attention_mask=mask, position_ids=positions,
                          **self.cache_argument(cache), use_cache=True,
                          logits_to_keep=1).logits[:, -1, :]

    def _prefill_rows(self, prompt_ids, cache, width) -> torch.Tensor:
        """Each distinct prompt alone (no padding: the fast causal attention path), then its
        keys and values copied into the batch cache, right-aligned at ``width``.

        A prompt seen earlier in the batch is not run again: its row gets a copy of the first
        one's keys, values and logits. A rollout group's episodes all start from the same
        prompt, so the first turn's prefill costs one pass per task instead of one per episode,
        and the copy is the pass's own output, bit for bit."""
        from transformers import DynamicCache

        last_logits = []
        first_row: dict[tuple[int, ...], int] = {}
        for row, ids in enumerate(prompt_ids):
            earlier = first_row.setdefault(tuple(ids), row)
            if earlier != row:
                for layer in cache.layers:
                    layer.copy_row(earlier, row)
                last_logits.append(last_logits[earlier])
                continue
            row_cache = DynamicCache(config=self.model.config)
            out = self.model(input_ids=torch.tensor([ids], device=self.device),
                             **self.cache_argument(row_cache), use_cache=True, logits_to_keep=1)
            last_logits.append(out.logits[0, -1, :])
            for layer, row_layer in zip(cache.layers, row_cache.layers):
                if row == 0:
                    layer.allocate(row_layer.keys, len(prompt_ids))
                layer.write_row(row, row_layer.keys, row_layer.values, width)
        for layer in cache.layers:
            layer.set_length(width)
        return torch.stack(last_logits)


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
