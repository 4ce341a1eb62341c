"""``PaW/SearchQA-v0``: answer a question by searching a passage corpus, Search-R1 style.

Each turn the agent's text must hold exactly one ``<search>query</search>`` (observation: the
top-k passages as ``<information>Doc 1(Title: "T") text\\nDoc 2(...) ...</information>``) or
``<answer>text</answer>`` (ends the episode; reward 1.0 on exact match with a gold alias).
Anything else is an invalid turn: Search-R1's correction message, reward 0, nothing changes
(the -0.01 penalty is the ParseAction wrapper's job). ``gym.make`` caps episodes at 4 turns.
A copy of the env (``pickle``, ``copy.deepcopy``: a process-based vector env, a search agent)
holds how its retriever was built, not the index: the copy gets the process's shared one,
built once there from the same settings::

    import gymnasium as gym, paw_gym
    env = gym.make("PaW/SearchQA-v0")                     # embedded knowledge base, BM25
    question, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(env.unwrapped.expert_action())
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Mapping

from paw_gym.core import Task, TaskList, TextEnv
from paw_gym.searchqa import oracle
from paw_gym.searchqa.data import Document, QAExample, load_corpus, load_qa
from paw_gym.searchqa.kb import EMBEDDED_DATASET, KBConfig, build_kb
from paw_gym.searchqa.retriever import Retriever, check_topk, information_block
from paw_gym.searchqa.retriever_factory import make_retriever
from paw_gym.searchqa.scoring import exact_match, substring_exact_match, token_f1

#: Search-R1's observation after a turn with neither a search nor an answer.
INVALID_ACTION_MESSAGE = (
    "My previous action is invalid. If I want to search, I should put the query between "
    "<search> and </search>. If I want to give the final answer, I should put the answer "
    "between <answer> and </answer>. Let me try again.")
#: Names of the embedded dataset accepted for ``dataset``.
EMBEDDED_NAMES = (None, "embedded", EMBEDDED_DATASET)
_TAGS = ("search", "answer")

# Retrievers are shared by every env of a process that asks for the same one (a vector env of
# 80 copies builds one index, not 80).
_RETRIEVERS: dict[tuple, Retriever] = {}
_RETRIEVERS_LOCK = threading.Lock()


def _documents(source: tuple) -> list[Document] | None:
    """The passages a retriever was built over, again: the embedded knowledge base of
    ``("kb", seed, scale)``, the corpus file of ``("corpus", path)``, none for ``("none",)``."""
    if source[0] == "kb":
        return build_kb(KBConfig(seed=source[1], scale=source[2])).documents
    return load_corpus(source[1]) if source[0] == "corpus" else None


def parse_action(text: str) -> tuple[str, str] | None:
    """``("search" | "answer", content)`` when ``text`` holds exactly one non-empty, well-formed
    ``<search>…</search>`` or ``<answer>…</answer>`` (no other such tag at all), else None."""
    counts = {tag: (text.count(f"<{tag}>"), text.count(f"</{tag}>")) for tag in _TAGS}
    present = [tag for tag, pair in counts.items() if pair != (0, 0)]
    if len(present) != 1 or counts[present[0]] != (1, 1):
        return None
    tag = present[0]
    start, end = text.find(f"<{tag}>") + len(tag) + 2, text.find(f"</{tag}>")
    content = text[start:end].strip() if end >= start else ""
    return (tag, content) if content else None


class SearchQAEnv(TextEnv):
    """Search-augmented QA over the embedded knowledge base or a real QA set + corpus.

    Args:
        dataset: ``None``/``"embedded"`` for the procedural knowledge base, or a question file
            (Search-R1/FlashRAG ``.jsonl``/``.parquet``, or a ``[{"question", "answer"}]`` JSON).
        split: embedded set only: ``"train"``, ``"test"`` or ``"all"``.
        retriever: ``"bm25"``, ``"dense"``, an ``http(s)://`` URL of a ``/retrieve`` server, or a
            :class:`~paw_gym.searchqa.retriever.Retriever` instance.
        topk: passages per search (Search-R1: 3).
        seed: seed of the first ``reset()`` when that call passes none.
        corpus: ``.jsonl`` passages (``id``, ``contents``) for an in-process retriever over a
            question file; the embedded set brings its own.
        index: saved index directory (loaded if present, else written after building).
        kb_seed, kb_scale: the embedded knowledge base (see :class:`~paw_gym.searchqa.kb.KBConfig`).
        dense_model, dense_index_type: dense retriever model (default offline MiniLM) and
            ``"flat"``/``"hnsw"``.
        render_mode: ``"ansi"`` or ``"human"``.
    """

    task_type = EMBEDDED_DATASET

    held_out_split = "test"

    def __init__(self, dataset: str | Path | None = None, split: str = "train",
                 retriever: str | Retriever = "bm25", topk: int = 3, seed: int | None = None,
                 corpus: str | Path | None = None, index: str | Path | None = None,
                 kb_seed: int = 0, kb_scale: float = 1.0, dense_model: str | None = None,
                 dense_index_type: str = "flat", render_mode: str | None = None):
        super().__init__(render_mode=render_mode)
        self.topk = check_topk(topk)
        self._first_seed = seed
        documents: list[Document] | None = None
        if dataset in EMBEDDED_NAMES:
            kb = build_kb(KBConfig(seed=kb_seed, scale=kb_scale))
            self.examples = kb.questions(split)
            self.dataset_name = f"{EMBEDDED_DATASET}-s{kb_seed}" + (f"x{kb_scale:g}" if kb_scale != 1 else "")
            documents, source = kb.documents, ("kb", kb_seed, kb_scale)
        else:
            qa = load_qa(dataset)
            self.examples, self.dataset_name = qa.examples, qa.name
            source = ("corpus", str(Path(corpus).resolve())) if corpus else ("none",)
            if corpus is not None:
                documents = load_corpus(corpus)
        if not self.examples:
            raise ValueError(f"dataset {dataset!r} split {split!r} has no questions")
        #: How the retriever is built (None: a Retriever given as is), for a copy to rebuild it.
        self._retriever_settings = None if isinstance(retriever, Retriever) else \
            (retriever, source, index, dense_model, dense_index_type)
        self.retriever = self._shared_retriever(retriever, lambda: documents, source, index,
                                                dense_model, dense_index_type)
        self.example: QAExample = self.examples[0]
        self.history: list[tuple[str, str]] = []
        self.done = False

    @staticmethod
    def _shared_retriever(spec, documents, source, index, dense_model, dense_index_type) -> Retriever:
        """The process's retriever of these settings, built the first time (``documents``: a
        function giving the passages, called only then)."""
        if isinstance(spec, Retriever):
            return spec
        if not isinstance(spec, str):
            raise ValueError(f"retriever must be 'bm25', 'dense', a URL or a Retriever, got {spec!r}")
        if source == ("none",) and not spec.startswith(("http://", "https://")):
            raise ValueError(f"retriever {spec!r} over a question file needs corpus=<passages.jsonl>; "
                             "or pass retriever='http://host:port/retrieve' of a running server")
        key = (spec, source, str(index), dense_model, dense_index_type)
        with _RETRIEVERS_LOCK:
            if key not in _RETRIEVERS:
                options = {"model": dense_model, "index_type": dense_index_type} if spec == "dense" else {}
                _RETRIEVERS[key] = make_retriever(spec, documents(), index=index, **options)
            return _RETRIEVERS[key]

    def __getstate__(self) -> dict[str, Any]:
        """The env without its retriever (a C index is no Python object to copy), which
        :meth:`__setstate__` takes again from how it was built."""
        state = dict(self.__dict__)
        if self._retriever_settings is not None:
            state["retriever"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self._retriever_settings is not None:
            spec, source, index, dense_model, dense_index_type = self._retriever_settings
            self.retriever = self._shared_retriever(
                spec, lambda: _documents(source), source, index, dense_model, dense_index_type)

    # -- Gymnasium ------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if seed is None and self._first_seed is not None:
            seed, self._first_seed = self._first_seed, None
        return super().reset(seed=seed, options=options)

    def tasks(self) -> TaskList:
        """Every question of the set, by ``index``; the task type is the source dataset."""
        return TaskList(len(self.examples), lambda i: Task({"index": i}, self.examples[i].dataset))

    def _reset(self, options: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        index = options.get("index")
        if index is None:
            index = int(self.np_random.integers(len(self.examples)))
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(self.examples):
            raise ValueError(f"options['index'] must be an int in [0, {len(self.examples)}), got {index!r}")
        self.example = self.examples[index]
        self.history, self.done = [], False
        return self.example.question, self.make_info(
            task_description=self.example.question, task_type=self.example.dataset,
            task_id=f"{self.dataset_name}-{self.example.id}", admissible_actions=[])

    def _step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        parsed = None if self.done else parse_action(action)
        if parsed is None:
            observation = "" if self.done else INVALID_ACTION_MESSAGE
            return observation, 0.0, self.done, {"invalid_action": True}
        kind, content = parsed
        if kind == "search":
            hits = self.retriever.search([content], self.topk)[0]
            observation = information_block(hits)
            self.history.append((content, observation))
            return observation, 0.0, False, {"search_query": content}
        self.done = True
        gold = self.example.golden_answers
        em = exact_match(content, gold)
        return "", float(em), True, {
            "won": em, "em": em, "sub_em": substring_exact_match(content, gold),
            "f1": token_f1(content, gold), "prediction": content, "golden_answers": list(gold),
            "num_searches": len(self.history)}

    # -- oracle ---------------------------------------------------------------------------------
    def _expert_action(self) -> str:
        """The scripted oracle's next action (``<search>…</search>`` or ``<answer>…</answer>``)."""
        return oracle.expert_action(self.example, self.history)
