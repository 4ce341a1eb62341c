"""SFT warm start: supervised fine-tuning on expert transitions from a ``WMReplay``.

Each record ``(h, a)`` becomes the chat prompt of ``h`` (exactly as ``HFPolicy`` encodes it)
followed by the tokens of ``a`` and the end-of-turn token; the loss is the mean cross-entropy
of the action tokens only (the prompt is context, never a target). This gives a tiny model a
working policy to start RL from, as instruction tuning gives a hub model.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from training.infra.checked_config import (MAX_TOKENS, bounded, model_name, output_folder,
                                           text)
from training.infra.model_config import ModelConfig

# torch and the batching code are imported inside the functions: ``paw-gym`` imports this
# module (for SFTConfig) when it builds its parser, and must stay quick to start.


@dataclass
class SFTConfig(ModelConfig):
    """Supervised warm start on recorded expert transitions. The model, its dtype and its LoRA
    adapter are :class:`~training.infra.model_config.ModelConfig`'s fields, as ``train``'s."""

    # ModelConfig's, with this command's defaults: the tiny model, every weight trained
    model: str = model_name("runs/tiny-model")
    lora: bool = False
    system_prompt: str | None = text(None)
    """The system message before every prompt (train and eval the result with the same). None (default): the env's prompt alone; a chat
    template that would insert its own default system message (SmolLM2's "You are a helpful AI
    assistant named SmolLM…", Qwen2.5's "You are Qwen…") gets an empty one instead
    (``agents.chat.ChatEncoder``). A string: that message ("": an empty one)."""

    replay: str = output_folder("runs/expert-demos")
    """WMReplay directory with the expert transitions (RecordTransitions output)."""
    output_dir: str = output_folder("runs/sft")
    """Where the fine-tuned model (or adapter) is saved."""
    overwrite: bool = False
    """Replace what an earlier paw-gym command wrote in ``output_dir`` (refused otherwise,
    before the model loads)."""
    successful_only: bool = True
    """Train only on episodes that were won."""
    epochs: int = bounded(3, 1, 10**4)
    """Passes over the transitions."""
    lr: float = bounded(1e-3, 0, 1, what="a learning rate")
    """AdamW learning rate (a tiny random model needs a large one; use ~1e-5 for a hub model)."""
    weight_decay: float = bounded(0.0, 0, 10)
    """AdamW weight decay."""
    token_budget: int = bounded(8192, 1, MAX_TOKENS)
    """Padded tokens per optimizer step."""
    max_seq_len: int = bounded(2048, 1, MAX_TOKENS)
    """Longest prompt + action row (the prompt is cut from the left)."""
    max_grad_norm: float = bounded(1.0, 0, 10**6, low_open=True)
    """Gradient clipping norm."""
    seed: int = bounded(0, 0, 2**32, high_open=True)
    """Shuffling and initialisation seed."""
    device: str | None = text(None)
    """cpu, cuda ... (None: CUDA when available)."""
    progress: bool = True
    """Show a progress bar."""


def load_examples(policy, replay_dir: str | Path, successful_only: bool, max_seq_len: int):
    """Prompt + action rows (``training.rl.batch.Sample``) from a replay; records without an
    action are skipped."""
    from agents.serialization import serialize
    from training.rl.batch import Sample
    from wrappers import WMReplay

    loaded = WMReplay.load(replay_dir)  # malformed records skipped, with a warning
    replay = loaded.filter(success=True) if successful_only else loaded
    if not len(replay):
        skipped = (f" ({len(loaded.errors)} malformed records skipped, the first at "
                   f"{loaded.errors[0].file}:{loaded.errors[0].line}: {loaded.errors[0].reason})"
                   if loaded.errors else "")
        raise ValueError(f"no {'successful ' if successful_only else ''}transitions in replay "
                         f"{str(replay_dir)!r}{skipped}")
    eos = policy.eos_ids[0]
    samples = []
    for record in replay:
        action = str(record.get("a") or "")
        if not action:
            continue
        prompt_ids, _ = policy.encode_prompt(str(record["h"]), max_new_tokens=1)
        action_ids = policy.tokenizer(action, add_special_tokens=False)["input_ids"] + [eos]
        row = serialize(prompt_ids, action_ids, [], max_seq_len)
        samples.append(Sample(row.ids, row.prompt_len, row.action_len, 0,
                              old_logprobs=[0.0] * row.action_len))
    return samples


def run_sft(config: SFTConfig) -> tuple[Path, list[dict[str, Any]]]:
    """Fine-tune and save to ``config.output_dir`` (claimed through the output guard, written
    atomically); returns the path and per-epoch metrics."""
    from run_files.outputs import MODEL_FILES, claim_folder

    with claim_folder(config.output_dir, "sft", config.overwrite, writes=MODEL_FILES) as output:
        history = _fine_tune(config, output)
    return Path(config.output_dir), history


def _fine_tune(config: SFTConfig, output) -> list[dict[str, Any]]:
    """:func:`run_sft`'s training and save into its claimed ``output``."""
    import torch

    from paw_gym.progress import progress_bar
    from training.rl.batch import collate
    from training.models import trainable_policy
    from training.rl.objective import gather_logprobs

    random.seed(config.seed)
    torch.manual_seed(config.seed)
    # Its layer passes are counted: a batch's progress shows before it ends.
    policy = trainable_policy(config, device=config.device, seed=config.seed,
                              system_prompt=config.system_prompt)
    # eval mode (no dropout) unless the adapter asks for its own dropout: the tiny models have
    # none, hub models keep parity with how they score in RL
    model = policy.model.train(config.lora and config.lora_dropout > 0)
    samples = load_examples(policy, config.replay, config.successful_only, config.max_seq_len)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    device = next(model.parameters()).device
    order_rng = random.Random(config.seed)
    history = []
    total = config.epochs * len(samples)
    # A tqdm bar in a terminal, a line now and then in a log file.
    bar = progress_bar(total=total, desc="SFT", unit="row", disable=not config.progress)
    for epoch in range(config.epochs):
        order = list(range(len(samples)))
        order_rng.shuffle(order)
        loss_sum, tokens, confident = 0.0, 0, 0
        for batch_rows in _budget_chunks(order, samples, config.token_budget):
            mb = collate(samples, batch_rows, policy.pad_id, device)
            logprobs = gather_logprobs(model, mb, score_obs=False).logprobs
            n_tokens = int(mb.action_mask.sum())
            loss = -(logprobs * mb.action_mask).sum() / max(1, n_tokens)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
            optimizer.step()
            loss_sum += loss.item() * n_tokens
            tokens += n_tokens
            confident += int(((logprobs > -0.6931) & mb.action_mask).sum())  # p > 0.5
            bar.update(len(batch_rows))
        history.append({"epoch": epoch + 1, "loss": loss_sum / max(1, tokens),
                        "frac_p_over_half": confident / max(1, tokens)})
        bar.set_postfix(loss=f"{history[-1]['loss']:.3f}")
    bar.close()
    with output.staged(".") as folder:
        model.save_pretrained(str(folder), safe_serialization=True)
        policy.tokenizer.save_pretrained(str(folder))
    return history


def _budget_chunks(order: list[int], samples: list, budget: int) -> list[list[int]]:
    """Consecutive shuffled rows grouped so that rows × longest ≤ ``budget``."""
    chunks, current, widest = [], [], 0
    for i in order:
        width = max(widest, len(samples[i]))
        if current and (len(current) + 1) * width > budget:
            chunks.append(current)
            current, width = [], len(samples[i])
        current.append(i)
        widest = width
    if current:
        chunks.append(current)
    return chunks


def record_expert_demos(env_id: str, episodes: int, out_dir: str | Path, *, seed: int = 0,
                        max_steps: int | None = None, progress: bool = False,
                        epsilon: float = 0.0, **env_settings: Any) -> Path:
    """Record expert episodes into the WMReplay at ``out_dir`` (see
    :func:`record_expert_episodes`) and return ``out_dir``."""
    record_expert_episodes(env_id, episodes, out_dir, seed=seed, max_steps=max_steps,
                           progress=progress, epsilon=epsilon, **env_settings)
    return Path(out_dir)


def record_expert_episodes(env_id: str, episodes: int, out_dir: str | Path, *, seed: int = 0,
                           max_steps: int | None = None, progress: bool = False,
                           epsilon: float = 0.0, **env_settings: Any) -> tuple[int, int]:
    """Play ``episodes`` expert episodes on ``env_id`` through ``RecordTransitions`` (task seeds
    ``seed .. seed + episodes − 1``; ``epsilon``: the chance of a random admissible action at
    each step, see :class:`ExpertAgent`) and add them to the WMReplay at ``out_dir``.

    An episode whose trajectory (task, h, a, o_next: ``wrappers.replay.trajectory_key``) the
    replay already holds is not added again, so recording the same seeds twice (``paw-gym sft
    --record_env`` run twice) does not train on every episode twice. Returns ``(episodes added,
    episodes skipped as already recorded)``.
    """
    from agents.baselines import ExpertAgent
    from agents.envs import make_agent_env
    from agents.rollout import rollout
    from wrappers import RecordTransitions, WMReplay
    from wrappers.replay import trajectory_key

    out = Path(out_dir)
    recorded = {trajectory_key(steps) for steps in WMReplay.load(out).episodes().values()} \
        if out.is_dir() else set()
    # Played into memory first: only the episodes that are new reach the replay on disk.
    played = WMReplay()
    rollout(ExpertAgent(epsilon), lambda: RecordTransitions(make_agent_env(env_id, **env_settings),
                                                         played),
            episodes, 1, seed=seed, task_seeds=list(range(seed, seed + episodes)),
            max_steps=max_steps, progress=progress)
    new = [steps for steps in played.episodes().values() if trajectory_key(steps) not in recorded]
    with WMReplay(out) as replay:
        for steps in new:
            replay.extend(steps)
    return len(new), len(played.episodes()) - len(new)
