"""Pretraining a model on env transcripts, and a probe of whether it reads its prompt.

A hub model arrives having read the web; the tiny model built here has read nothing, and after
format-only SFT its actions barely depend on the prompt. Pretraining gives it what a hub model
would have: next-token prediction on *every* token of recorded transitions ``h ⊕ a ⊕ s ⊕ o_next``
(the PaW term's serialisation, :mod:`agents.serialization`; ``s``, by default, ends the
policy's turn and opens the environment's), from a ``WMReplay``:

    L = − (1 / N) Σ_rows Σ_t log p(x_t | x_<t)        (N: all non-padding target tokens)

Env text repeats itself (the task in every prompt, the shelf in the admissible actions, the
action in the next observation), so this objective is full of copy events, which is how a
small transformer learns to attend back and copy; it is also world-model pretraining
(o_next follows h and a). ``loss_on`` can leave the world out: ``no_next_observation`` drops
o_next from every row, ``action`` trains only the action tokens (the sum and N run over them).
Such a start reads its prompt and acts but was never trained to predict what the environment
answers, the regime in which the PaW term has something to teach (issue 38).

The **reading probe** scores held-out prompts: it ranks each prompt's admissible actions by
log p(response | prompt) (teacher-forced, the response formatted as the demos write it) and
reports how often the env's expert action ranks first. A model that ignores its prompt scores
about 1 / (number of admissible actions).

    >>> from training.warmstart.pretrain import PretrainConfig, run_pretrain           # doctest: +SKIP
    >>> run_pretrain(PretrainConfig(model="tiny", replay="runs/demos", output_dir="base"))
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal, Sequence

from training.infra.checked_config import CheckedConfig, bounded, check_config
from agents.serialization import Serialized, WMContext


@dataclass
class PretrainConfig(CheckedConfig):
    """Next-token pretraining on the transcripts of a WM replay."""

    model: str = "runs/tiny-model"
    """Hub name or directory of the model to pretrain."""
    replay: str = "runs/expert-demos"
    """WMReplay directory whose (h, a, o_next) records are the corpus."""
    output_dir: str = "runs/base-model"
    """Where the pretrained model and its tokenizer are saved."""
    steps: int = bounded(600, 1)
    """Optimizer steps."""
    batch_size: int = bounded(16, 1)
    """Transcripts per optimizer step."""
    lr: float = bounded(3e-3, 0, low_open=True)
    """AdamW learning rate (a tiny random model needs a large one)."""
    max_seq_len: int = bounded(1024, 1)
    """Longest transcript row; the observation is cut first, then the prompt from the left."""
    wm_context: WMContext = "next_turn"
    """Where o_next follows the action in the transcripts (``agents.serialization``; the
    same as the PaW term's ``wm_context``, so the base learns the world in the form PaW
    trains)."""
    loss_on: Literal["all", "no_next_observation", "action"] = "all"
    """Which tokens the loss trains. ``all``: every token of chat(h) ⊕ a ⊕ s ⊕ o_next (the
    start learns what each action does: world-model pretraining). ``no_next_observation``:
    chat(h) ⊕ a, with o_next left out of the row (the start learns how observations look, from
    the prompts, but never sees one after an action; prompts with history still show earlier
    a → o pairs). ``action``: the action tokens only (imitation; the prompt is read, never
    predicted, so no observation text is trained, history included). The last two build a
    start without the environment's dynamics (issue 38)."""
    rows: Literal["transition", "episode"] = "transition"
    """``transition``: one row per transition, chat(h) ⊕ a ⊕ s ⊕ o_next; ``episode``: one row
    per episode, its whole chat transcript as :class:`agents.TranscriptAgent` plays it (for
    trainers that train on transcripts, e.g. :mod:`training.integrations.trl`; needs
    ``wm_context: next_turn``, rows longer than ``max_seq_len`` keep their beginning)."""
    seed: int = bounded(0, 0, 2**32, high_open=True)
    """Shuffling seed."""
    device: str | None = None
    """cpu, cuda ... (None: CUDA when available)."""
    progress: bool = True
    """Show a progress bar."""

    def _check_relations(self) -> None:
        if self.rows == "episode" and self.loss_on != "all":
            raise ValueError(f"rows='episode' trains whole transcripts; loss_on="
                             f"{self.loss_on!r} needs rows='transition'")
        if self.rows == "episode" and self.wm_context != "next_turn":
            raise ValueError(f"rows='episode' writes environment turns as the next chat turn; "
                             f"wm_context={self.wm_context!r} needs rows='transition'")


def transcript_parts(policy, transitions, max_seq_len: int,
                     wm_context: str = "next_turn") -> list[Serialized]:
    """Every transition with an action serialised as chat(h) ⊕ a ⊕ s ⊕ o_next in
    ``wm_context`` (:class:`agents.serialization.TransitionSerializer`, the PaW term's
    serialisation). ``transitions``: a WMReplay directory, or records with ``h``, ``a`` and
    ``o_next``."""
    from agents.serialization import TransitionSerializer
    from wrappers import WMReplay

    serializer = TransitionSerializer.for_policy(policy, wm_context)
    records = WMReplay.load(transitions) if isinstance(transitions, (str, Path)) else transitions
    rows = [serializer.encode(policy, str(record["h"]), str(record["a"]),
                              str(record.get("o_next") or ""), max_seq_len)
            for record in records if record.get("a")]
    if not rows:
        raise ValueError(f"{_describe(transitions)} has no transition with an action")
    return rows


def trained_part(row: Serialized, loss_on: str) -> tuple[list[int], int]:
    """``(ids, first)``: the part of ``row`` that pretraining with ``loss_on`` reads, and the
    index of its first trained token (every token from ``first`` on is a target; 1 when all
    are, since the first token has no context)."""
    if loss_on == "all":
        return row.ids, 1
    acted = row.ids[:row.prompt_len + row.action_len]
    if loss_on == "no_next_observation":
        return acted, 1
    if loss_on == "action":
        return acted, row.prompt_len
    raise ValueError(f"loss_on={loss_on!r} is invalid; expected all | no_next_observation | "
                     "action")


def episode_transcripts(policy, replay, max_seq_len: int) -> list[list[int]]:
    """Each episode of a WMReplay directory (records ``h``, ``a``, ``o_next``, grouped by
    ``episode_id`` in ``step`` order) as the transcript ids a TranscriptAgent would have
    played: chat(h_1) ⊕ a_1 ⊕ turn(h_2) ⊕ … ⊕ s ⊕ o_{T+1} ⊕ e (:mod:`agents.transcript`), cut to
    ``max_seq_len`` tokens from the end."""
    from agents.transcript import TurnFormat
    from wrappers import WMReplay

    turns = TurnFormat(policy.tokenizer, policy.eos_ids)
    episodes: dict[str, list[dict]] = {}
    for record in WMReplay.load(replay):
        if record.get("a"):
            episodes.setdefault(str(record["episode_id"]), []).append(record)
    rows = []
    for records in episodes.values():
        records.sort(key=lambda r: int(r["step"]))
        first, _ = policy.encode_prompt(str(records[0]["h"]), max_new_tokens=1)
        sequence, _ = turns.assemble(first, [(str(r["h"]), turns.encode(str(r["a"])), [],
                                              str(r.get("o_next") or "")) for r in records])
        rows.append((sequence.prompt_ids + sequence.completion_ids)[:max_seq_len])
    if not rows:
        raise ValueError(f"{_describe(replay)} has no transition with an action")
    return rows


def _describe(transitions) -> str:
    return f"replay {str(transitions)!r}" if isinstance(transitions, (str, Path)) else \
        "the transition list"


def next_observation_accuracy(policy, transitions, max_seq_len: int = 1024,
                              wm_context: str = "next_turn") -> dict[str, float]:
    """The policy read as a world model, on transitions (a WMReplay directory or records).

    ``exact``: % of transitions whose next observation greedy decoding after chat(h) ⊕ a ⊕ s
    reproduces token for token (equivalently: every o_next token is the argmax given the true
    prefix); ``token``: % of o_next tokens that are the argmax. ``wm_context`` picks the
    separator s (the same serialisation as the PaW term's). Transitions with an empty next
    observation are skipped (nothing to predict).

    The o_next tokens are also split in two, to tell knowing the observation's form from knowing
    what the action does: ``token_kept`` scores the tokens a copy of the prompt gives (those in
    difflib's matching blocks between the prompt's and o_next's tokens: the map around a
    FrozenLake move, Shelf's task line), ``token_changed`` the others (the cells the move
    changed, what Shelf's player now holds); ``changed_share`` is the changed tokens' share.
    """
    import difflib

    import torch

    model = policy.model
    device = next(model.parameters()).device
    exact = transitions_scored = 0
    hits_in = {"kept": 0, "changed": 0}
    tokens_in = {"kept": 0, "changed": 0}
    with torch.no_grad():
        for row in transcript_parts(policy, transitions, max_seq_len, wm_context):
            if not row.obs_len:
                continue
            logits = model(torch.tensor([row.ids], device=device)).logits[0]
            start = row.obs_start
            target = row.ids[start:]
            hits = (logits[start - 1:start - 1 + row.obs_len].argmax(-1)
                    == torch.tensor(target, device=device)).tolist()
            matcher = difflib.SequenceMatcher(None, row.ids[:row.prompt_len], target,
                                              autojunk=False)
            kept = [False] * len(target)
            for block in matcher.get_matching_blocks():
                kept[block.b:block.b + block.size] = [True] * block.size
            for hit, is_kept in zip(hits, kept):
                part = "kept" if is_kept else "changed"
                hits_in[part] += hit
                tokens_in[part] += 1
            exact += all(hits)
            transitions_scored += 1
    if not transitions_scored:
        raise ValueError(f"{_describe(transitions)} has no transition with a next observation")
    total = tokens_in["kept"] + tokens_in["changed"]
    share = lambda part: 100.0 * hits_in[part] / tokens_in[part] if tokens_in[part] else \
        float("nan")  # noqa: E731
    return {"exact": 100.0 * exact / transitions_scored,
            "token": 100.0 * (hits_in["kept"] + hits_in["changed"]) / total,
            "token_kept": share("kept"), "token_changed": share("changed"),
            "changed_share": 100.0 * tokens_in["changed"] / total,
            "transitions": transitions_scored}


def run_pretrain(config: PretrainConfig) -> tuple[Path, list[dict[str, Any]]]:
    """Pretrain and save to ``config.output_dir``; returns the path and the mean loss over
    each twentieth of the run."""
    import torch
    from paw_gym.progress import progress_bar

    from agents.hf_policy import HFPolicy

    check_config(config)  # a config changed after it was made
    torch.manual_seed(config.seed)
    policy = HFPolicy(config.model, device=config.device, dtype="auto", seed=config.seed)
    model = policy.model.eval()  # no dropout (the tiny models have none)
    if config.rows == "episode":
        rows = [(ids, 1) for ids in episode_transcripts(policy, config.replay,
                                                        config.max_seq_len)]
    else:
        rows = [trained_part(row, config.loss_on)
                for row in transcript_parts(policy, config.replay, config.max_seq_len,
                                            config.wm_context)]
    device = next(model.parameters()).device
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr)
    rng = random.Random(config.seed)
    order: list[int] = []
    history, loss_sum, since = [], 0.0, 0
    every = max(1, config.steps // 20)
    for step in progress_bar(range(1, config.steps + 1), desc="pretraining", unit="step",
                             disable=not config.progress):
        if len(order) < config.batch_size:  # a fresh shuffled pass when the current one runs out
            order = rng.sample(range(len(rows)), len(rows)) + order
        batch = [rows[order.pop()] for _ in range(min(config.batch_size, len(rows)))]
        width = max(len(r) for r, _ in batch)
        ids = torch.tensor([r + [policy.pad_id] * (width - len(r)) for r, _ in batch],
                           device=device)
        real = torch.tensor([[0.0] * first + [1.0] * (len(r) - first) + [0.0] * (width - len(r))
                             for r, first in batch], device=device)[:, 1:]
        logits = model(input_ids=ids, use_cache=False).logits[:, :-1].float()
        token_loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:],
                                                       reduction="none")
        loss = (token_loss * real).sum() / real.sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        loss_sum, since = loss_sum + loss.item(), since + 1
        if step % every == 0 or step == config.steps:
            history.append({"step": step, "loss": loss_sum / since})
            loss_sum, since = 0.0, 0
    from run_files.outputs import staged

    out = Path(config.output_dir)
    with staged(out) as folder:
        model.save_pretrained(str(folder), safe_serialization=True)
        policy.tokenizer.save_pretrained(str(folder))
    return out, history


def reading_probe(policy, env_id: str, seeds: Sequence[int], *,
                  thought: str = "I follow the expert plan.", **env_settings: Any) -> float:
    """Share of the reset prompts of ``seeds`` whose expert action the policy ranks first among
    the admissible actions by log p(response | prompt); responses are formatted like
    :class:`agents.baselines.ExpertAgent`'s (``thought`` in ``<think>``)."""
    import torch

    from agents.baselines import format_action
    from agents.envs import action_format_of, make_agent_env

    env = make_agent_env(env_id, **env_settings)
    model, tokenizer = policy.model, policy.tokenizer
    device = next(model.parameters()).device
    hits = 0
    try:
        for seed in seeds:
            prompt, info = env.reset(seed=int(seed))
            actions = list(info["admissible_actions"])
            expert = env.unwrapped.expert_action()
            prompt_ids, _ = policy.encode_prompt(prompt, max_new_tokens=1)
            responses = [tokenizer(format_action(a, action_format_of(env), thought),
                                   add_special_tokens=False)["input_ids"] for a in actions]
            rows = [prompt_ids + r for r in responses]
            width = max(map(len, rows))  # right padding: no real token attends to it
            ids = torch.tensor([r + [policy.pad_id] * (width - len(r)) for r in rows],
                               device=device)
            with torch.no_grad():
                logprobs = model(input_ids=ids, use_cache=False).logits.float().log_softmax(-1)
            start = len(prompt_ids)
            scores = [sum(float(logprobs[i, start + j - 1, token]) for j, token in enumerate(r))
                      for i, r in enumerate(responses)]
            hits += actions[max(range(len(actions)), key=scores.__getitem__)] == expert
    finally:
        env.close()
    return hits / max(1, len(seeds))


def cached_build(recipe: dict[str, Any], build: Callable[[Path], None],
                 log: Callable[[str], None] = print) -> tuple[Path, bool]:
    """The folder ``build(folder)`` fills for ``recipe``, kept under
    ``$PAW_GYM_CACHE/tiny-base/<hash of recipe>`` and built only when absent.

    ``build`` writes into a private temporary folder that is renamed into place when complete
    (``recipe.json`` marks completion), so an interrupted build is never mistaken for a finished
    one and parallel builders never see half a folder. Returns ``(folder, built_now)``; ``log``
    says which, and where the cache is.
    """
    from paw_gym.cache import cache_home

    text = json.dumps(recipe, sort_keys=True)
    path = cache_home() / "tiny-base" / hashlib.sha256(text.encode()).hexdigest()[:20]
    if (path / "recipe.json").is_file():
        log(f"reusing the base model cached in {path}")
        return path, False
    log(f"building the base model (once: it is cached in {path}, and every later run with the "
        "same recipe and library versions reuses it)")
    scratch = path.with_name(f"{path.name}.building-{os.getpid()}")
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    try:
        build(scratch)
        (scratch / "recipe.json").write_text(text, encoding="utf-8")
        try:
            scratch.rename(path)
        except OSError:  # another process completed the same recipe first: keep theirs
            if not (path / "recipe.json").is_file():
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return path, True
