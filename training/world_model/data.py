"""World-model examples from a WM replay, their train/validation split, the prompt and the
answer format.

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
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence


OBSERVATION_STOP = "</observation>"

PROMPT_TEMPLATE = (
    "You are the world model of a text environment. An agent was shown the prompt below and "
    "answered with the action below. Predict the environment's next observation, exactly as "
    "the environment would print it.\n\n"
    "## The agent's prompt\n{h}\n\n"
    "## The agent's answer\n{a}\n\n"
    "First reason about what the action does inside <think> </think>, then write the next "
    "observation inside <observation> </observation>.")



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

    replay = WMReplay.load(replay_dir)  # bad records skipped with a warning naming them
    examples = [WMExample(r["h"], r["a"], r["o_next"], r["task_type"], r["episode_id"])
                for r in replay if r["a"] and r["o_next"]]
    if not examples:
        skipped = f" ({len(replay.errors)} malformed record(s) skipped, the first at " \
            f"{replay.errors[0].file}:{replay.errors[0].line}: {replay.errors[0].reason})" \
            if replay.errors else ""
        raise ValueError(f"replay {str(replay_dir)!r} has no transition with an action and a "
                         f"next observation{skipped}")
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


OBSERVATION_OPEN = re.compile(r"<observation>", re.IGNORECASE)
OBSERVATION_CLOSE = re.compile(r"</observation>", re.IGNORECASE)


def parse_prediction(answer: str) -> str:
    """The predicted observation in ``answer`` (see the module docstring); "" without the tag."""
    opens = list(OBSERVATION_OPEN.finditer(answer))
    if not opens:
        return ""
    rest = answer[opens[-1].end():]
    close = OBSERVATION_CLOSE.search(rest)
    return (rest[:close.start()] if close else rest).strip()
