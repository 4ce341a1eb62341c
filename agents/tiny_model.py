"""A tiny, randomly initialised Qwen2-architecture model with a locally trained tokenizer.

It stands in for Qwen2.5 on machines without hub access: a real ``Qwen2ForCausalLM`` and a
byte-level BPE tokenizer with a ChatML chat template and the agent tags, saved in HF format
(safetensors), so ``AutoModelForCausalLM.from_pretrained(DIR)`` and
``AutoTokenizer.from_pretrained(DIR)`` load it like any hub model.

    >>> from agents.tiny_model import build_tiny_model
    >>> build_tiny_model(["some environment text ..."], "tiny-nano", size="nano")  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable

#: Tags the prompt templates ask the model to write; each is one token.
AGENT_TAGS = ("<think>", "</think>", "<action>", "</action>", "<search>", "</search>",
              "<answer>", "</answer>", "<information>", "</information>")
#: ChatML control tokens (as in Qwen2.5): end of text / padding, message start, message end.
END_OF_TEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
#: ChatML, as Qwen2.5 writes it (without its default system prompt).
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
#: Qwen2's pre-tokenization pattern (contractions, letters, single digits, punctuation, spaces).
QWEN2_PRETOKENIZE_REGEX = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"""
                           r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")


@dataclass(frozen=True)
class TinyModelSize:
    """Shape of one tiny model size."""

    vocab_size: int
    """Target BPE vocabulary (the trained tokenizer may stop short on a small corpus)."""
    hidden_size: int
    """Width of the residual stream."""
    num_hidden_layers: int
    """Transformer blocks."""
    num_attention_heads: int
    """Query heads."""
    num_key_value_heads: int
    """Key/value heads (grouped-query attention, as in Qwen2)."""
    intermediate_size: int
    """Width of the SwiGLU MLP."""
    max_position_embeddings: int = 4096
    """Context length in tokens (RoPE: costs no parameters)."""


#: nano ~1M, micro ~5M, mini ~20M parameters (with the full vocabulary, tied embeddings).
SIZES: dict[str, TinyModelSize] = {
    "nano": TinyModelSize(4096, 128, 2, 4, 2, 384),
    "micro": TinyModelSize(8192, 256, 4, 4, 2, 768),
    "mini": TinyModelSize(16384, 384, 8, 6, 2, 1152),
}


def train_tokenizer(texts: Iterable[str], vocab_size: int):
    """Train a byte-level BPE tokenizer on ``texts``; return a ``PreTrainedTokenizerFast``.

    The control tokens are special (dropped by ``decode(skip_special_tokens=True)``); the agent
    tags are ordinary added tokens, so they stay in decoded text.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    # Qwen2's normalizer and pre-tokenizer: transformers' Qwen2Tokenizer (what AutoTokenizer
    # picks for a qwen2 config) rebuilds exactly these, so every loader gives the same ids.
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    control = [END_OF_TEXT, IM_START, IM_END]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=control,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train_from_iterator(texts, trainer=trainer)
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=IM_END,
                                      pad_token=END_OF_TEXT, bos_token=None,
                                      clean_up_tokenization_spaces=False)
    wrapped.add_tokens(list(AGENT_TAGS))
    wrapped.chat_template = CHAT_TEMPLATE
    return wrapped


def build_tiny_model(texts: Iterable[str], out_dir: str | Path, size: str = "nano",
                     seed: int = 0) -> Path:
    """Train the tokenizer on ``texts``, initialise the model, and save both to ``out_dir``.

    Args:
        texts: tokenizer training text (env observations, actions, prompt templates).
        out_dir: directory to write (created; files of the same names are replaced).
        size: one of :data:`SIZES`.
        seed: seeds the random initialisation.
    Returns:
        ``out_dir`` as a Path.
    """
    if size not in SIZES:
        raise ValueError(f"unknown tiny model size {size!r}; choose one of {sorted(SIZES)}")
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    shape = SIZES[size]
    tokenizer = train_tokenizer(texts, shape.vocab_size)
    vocab = -(-len(tokenizer) // 64) * 64  # rounded up: friendlier matmul shapes
    fields = {k: v for k, v in asdict(shape).items() if k != "vocab_size"}
    config = Qwen2Config(vocab_size=vocab, tie_word_embeddings=True,
                         eos_token_id=tokenizer.convert_tokens_to_ids(IM_END),
                         pad_token_id=tokenizer.pad_token_id, bos_token_id=None,
                         **fields)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=[config.eos_token_id, tokenizer.convert_tokens_to_ids(END_OF_TEXT)],
        pad_token_id=config.pad_token_id, do_sample=True, temperature=1.0, top_k=0, top_p=1.0)
    from run_files.outputs import staged

    out = Path(out_dir)
    with staged(out) as folder:  # a kill leaves no half-written model at out_dir
        model.save_pretrained(folder, safe_serialization=True)
        tokenizer.save_pretrained(folder)
    return out


def count_parameters(model) -> int:
    """Distinct parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
