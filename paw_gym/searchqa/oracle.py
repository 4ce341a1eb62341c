"""The scripted oracle: a search agent that reads its answers out of what it retrieved.

For an embedded question the oracle follows the question's plan hop by hop: it searches the
hop's entity by name, finds that entity's passage among the retrieved documents, cuts the
relation's object out of the passage text (with the knowledge base's own sentence templates)
and uses it as the next hop's entity, or as the answer after the last hop. If a search misses
the passage it retries once with the relation's keywords added. It never looks at the gold
answer, so its success rate is a real solvability check of the retriever + knowledge base.

For questions from other datasets (no plan) it is a privileged teacher for SFT demos: it
searches the question once, then answers the first gold alias.
"""

from __future__ import annotations

import re
from typing import Sequence

from paw_gym.searchqa.data import QAExample
from paw_gym.searchqa.kb_vocab import RELATIONS

#: Answer given when the oracle could not find what it needed.
UNKNOWN = "unknown"
#: Words added to the entity name on the retry search.
RELATION_KEYWORDS = {
    "born_in": "born city", "birth_year": "year world", "works_for": "employed",
    "educated_at": "studied", "occupation": "profession", "country": "city country",
    "located_in": "campus city", "founded_year": "established year", "founded_by": "founded",
    "headquartered_in": "headquarters city", "directed_by": "film directed",
    "release_year": "released year", "author": "book written", "publication_year": "published year",
}
_DOC_START = re.compile(r"(?:^|\n)Doc \d+\(Title: ")


def search(query: str) -> str:
    return f"<search>{query}</search>"


def answer(text: str) -> str:
    return f"<answer>{text}</answer>"


def parse_information(information: str) -> list[tuple[str, str]]:
    """``(title, text)`` of each document in an ``<information>`` block (titles unquoted)."""
    body = information.strip()
    body = body.removeprefix("<information>").removesuffix("</information>")
    docs = []
    for chunk in _DOC_START.split(body)[1:]:
        title, _, text = chunk.partition(") ")
        docs.append((title.strip().strip('"'), text.strip()))
    return docs


def read_relation(information: str, subject: str, relation: str) -> str | None:
    """The object of ``subject``'s ``relation`` stated in a retrieved passage, if any."""
    template = RELATIONS[relation][2]
    head, tail = template.split("{o}")
    pattern = re.compile(re.escape(head.format(s=subject)) + r"([^.]+?)" + re.escape(tail))
    for title, text in parse_information(information):
        if title == subject:
            match = pattern.search(text)
            if match:
                return match.group(1).strip()
    return None


def expert_action(example: QAExample, history: Sequence[tuple[str, str]], *,
                  max_searches: int = 3) -> str:
    """The oracle's next action given the ``(query, information)`` pairs of the episode so far."""
    if not example.plan:
        if not history:
            return search(example.question)
        return answer(example.golden_answers[0])
    queries_done = [query for query, _ in history]
    entity = ""
    for hop, (hop_entity, relation) in enumerate(example.plan):
        entity = hop_entity or entity
        value = next((v for _, info in history
                      if (v := read_relation(info, entity, relation)) is not None), None)
        if value is None:
            hops_left = len(example.plan) - hop
            for query in (entity, f"{entity} {RELATION_KEYWORDS[relation]}"):
                if query not in queries_done and len(queries_done) + hops_left <= max_searches:
                    return search(query)
            return answer(UNKNOWN)
        entity = value
    return answer(entity)
