"""Question sets and passage corpora: the records the env and the retrievers work on.

Readers for the formats in use:

* Search-R1 / FlashRAG question files, ``.jsonl`` or ``.parquet`` with ``question`` and
  ``golden_answers`` (Search-R1's processed parquet also carries ``data_source`` and
  ``reward_model.ground_truth.target``, both understood);
* ``[{"question": ..., "answer": str | [str, ...]}]`` JSON lists (the ``*_questions_and_answers.json``
  evaluation splits);
* passage corpora as ``.jsonl`` with ``id`` and ``contents`` (``"Title"\\ntext``, the wiki-18 layout).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

#: Dataset names recognised in file names, in match order (``2wikimultihopqa`` -> ``2wiki``).
KNOWN_DATASETS = ("2wiki", "hotpotqa", "musique", "bamboogle", "triviaqa", "popqa", "nq")


@dataclass(frozen=True)
class QAExample:
    """One question with its gold answers."""

    id: str
    """Stable identifier within its dataset (the file's ``id`` or the row number)."""
    question: str
    """The question text shown to the agent."""
    golden_answers: tuple[str, ...]
    """Accepted answers (aliases); EM against any of them wins."""
    dataset: str
    """Dataset name, used as ``info["task_type"]``."""
    plan: tuple[tuple[str, str], ...] = ()
    """Embedded questions only: ``(entity, relation)`` of the first hop, then ``("", relation)``
    for each later hop whose entity is the previous hop's answer. Used by the scripted oracle."""


@dataclass(frozen=True)
class Document:
    """One retrievable passage."""

    id: str
    """Corpus identifier (string, as in wiki-18's ``id`` field)."""
    contents: str
    """``"Title"\\ntext``: the first line is the title, the rest the passage text."""

    @property
    def title(self) -> str:
        return self.contents.split("\n", 1)[0]

    @property
    def text(self) -> str:
        parts = self.contents.split("\n", 1)
        return parts[1] if len(parts) > 1 else ""

    def to_json(self) -> dict[str, str]:
        return {"id": self.id, "contents": self.contents}


@dataclass
class QADataset:
    """A list of questions plus the name they are evaluated under."""

    name: str
    """Dataset name (``info["task_type"]`` unless a row names its own source)."""
    examples: list[QAExample] = field(default_factory=list)
    """The questions, in file order."""

    def __len__(self) -> int:
        return len(self.examples)


class DataFormatError(ValueError):
    """A question or corpus file that cannot be read; the message names the file and the row."""


def dataset_name_from_path(path: str | Path) -> str:
    """Guess the dataset name from a file name (``nq_test.jsonl`` -> ``nq``), else the stem."""
    file_name = Path(path).name.lower()
    for name in KNOWN_DATASETS:
        if file_name.startswith(name) or f"_{name}" in file_name or f"-{name}" in file_name:
            return name
    return Path(path).stem.split(".")[0]


def load_qa(path: str | Path, name: str | None = None) -> QADataset:
    """Read a question file (``.json``, ``.jsonl`` or ``.parquet``) into a :class:`QADataset`."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"question file {str(path)!r} does not exist")
    name = name or dataset_name_from_path(path)
    rows = list(_read_rows(path))
    examples = [_example_from_row(row, index, name, path) for index, row in enumerate(rows)]
    if not examples:
        raise DataFormatError(f"{path}: no questions found")
    return QADataset(name=name, examples=examples)


def _read_rows(path: Path) -> Iterator[dict[str, Any]]:
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError as error:  # pragma: no cover - depends on the install
            raise ImportError("reading .parquet needs pyarrow: pip install 'paw-gym[parquet]'") from error
        yield from pq.read_table(path).to_pylist()
    elif suffix == ".jsonl":
        yield from _read_jsonl(path)
    elif suffix == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            raise DataFormatError(f"{path}: not valid JSON ({error})") from error
        if isinstance(data, dict):  # {"data": [...]} or {id: row}
            data = data.get("data", list(data.values()))
        if not isinstance(data, list):
            raise DataFormatError(f"{path}: expected a JSON list of question records")
        yield from data
    else:
        raise DataFormatError(f"{path}: unsupported question file type {suffix!r}; "
                              "use .json, .jsonl or .parquet")


def _read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as error:
                raise DataFormatError(f"{path}:{line_number}: not valid JSON ({error})") from error


def _example_from_row(row: Any, index: int, name: str, path: Path) -> QAExample:
    if not isinstance(row, dict):
        raise DataFormatError(f"{path} row {index}: expected an object, got {type(row).__name__}")
    question = row.get("question")
    if question is None:
        question = _question_from_prompt(row.get("prompt"))
    answers = _answers_from_row(row, f"{path} row {index}")
    if not isinstance(question, str) or not question.strip():
        raise DataFormatError(f"{path} row {index}: missing 'question'")
    if not answers:
        raise DataFormatError(f"{path} row {index}: no answers (looked for 'golden_answers', "
                              "'answer', 'answers', 'reward_model.ground_truth.target')")
    source = row.get("data_source")
    dataset = source if isinstance(source, str) and source else name
    row_id = row.get("id")
    return QAExample(id=str(row_id) if row_id is not None else str(index),
                     question=question.strip(), golden_answers=answers, dataset=dataset)


def _answers_from_row(row: dict[str, Any], where: str) -> tuple[str, ...]:
    for key in ("golden_answers", "answer", "answers"):
        if row.get(key) is not None:
            return _as_answers(row[key], f"{where}: {key!r}")
    target = (((row.get("reward_model") or {}).get("ground_truth")) or {})
    if isinstance(target, dict) and target.get("target") is not None:
        return _as_answers(target["target"], f"{where}: 'reward_model.ground_truth.target'")
    return ()


def _as_answers(value: Any, where: str) -> tuple[str, ...]:
    """A string, or a list of strings (numbers are read as their text); anything else — a
    mapping, a null item, a nested list — is a DataFormatError, not a silently wrong answer."""
    def text(item: Any) -> str:
        if isinstance(item, str):
            return item
        if isinstance(item, (int, float)) and not isinstance(item, bool):
            return str(item)
        raise DataFormatError(f"{where} has an answer {item!r} ({type(item).__name__}); "
                              "expected a string or a list of strings")

    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return (text(value),)
    if isinstance(value, dict) or not hasattr(value, "__iter__"):
        raise DataFormatError(f"{where} is {type(value).__name__}; expected a string or a list "
                              "of strings")
    return tuple(answer for answer in map(text, value) if answer.strip())


def _question_from_prompt(prompt: Any) -> str | None:
    """Search-R1 parquet rows keep the question inside the chat prompt after ``Question:``."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], dict):
        content = str(prompt[-1].get("content", ""))
        if "Question:" in content:
            return content.rsplit("Question:", 1)[1].strip()
    return None


def load_corpus(path: str | Path) -> list[Document]:
    """Read a ``.jsonl`` passage corpus with ``id`` and ``contents`` (or ``title`` + ``text``)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"corpus file {str(path)!r} does not exist")
    documents = []
    for index, row in enumerate(_read_jsonl(path)):
        if not isinstance(row, dict):
            raise DataFormatError(f"{path} row {index}: a corpus row must be an object with "
                                  f"'id' and 'contents', got {type(row).__name__}")
        contents = row.get("contents")
        if contents is None and "text" in row:
            contents = f"\"{row.get('title', '')}\"\n{row['text']}"
        if not isinstance(contents, str):
            raise DataFormatError(f"{path} row {index}: missing 'contents' (or 'title' + 'text')")
        documents.append(Document(id=str(row.get("id", index)), contents=contents))
    if not documents:
        raise DataFormatError(f"{path}: no passages found")
    return documents


def save_corpus(documents: list[Document], path: str | Path) -> None:
    """Write passages as ``.jsonl`` (``id``, ``contents``), the layout :func:`load_corpus` reads."""
    with Path(path).open("w", encoding="utf-8") as handle:
        for document in documents:
            handle.write(json.dumps(document.to_json(), ensure_ascii=False) + "\n")
