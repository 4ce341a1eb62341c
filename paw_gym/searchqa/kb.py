"""The embedded knowledge base: a procedural world of typed entities, passages and questions.

Entities (countries, cities, universities, companies, people, films, books) get invented names
in *near-name groups* ("Velmora Kastrin", "Velmora Kastrel"; "Aldford", "Aldmouth"), so a vague
query surfaces look-alike distractors. Each entity has one ~100-word passage ``"Title"\\ntext``
stating its outgoing relations (a film names its director; the director's passage never names
the film), padded with neutral filler. Questions are 1-hop ("Where was X born?") or 2-hop
("Where was the director of the film F born?"), so a 2-hop answer needs a second search for the
intermediate entity. Answers carry alias lists. Everything is a pure function of
:class:`KBConfig`: same config, same passages, same questions.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

import numpy as np

from paw_gym.searchqa import kb_vocab as V
from paw_gym.searchqa.data import Document, QAExample

#: Entities of each type at ``scale=1`` (about 600 passages and 3,000 questions).
BASE_COUNTS = {"country": 12, "city": 48, "university": 24, "company": 60, "person": 240,
               "film": 120, "book": 90}
#: ``info["task_type"]`` of the embedded questions.
EMBEDDED_DATASET = "paw-kb"
_ARTICLE_BEFORE_WORD = re.compile(r"\b([Aa])n? (\w)")


def _fix_article(match: re.Match) -> str:
    """``a`` or ``an`` by the next word's first letter (filler adjectives vary)."""
    article = match.group(1) + ("n" if match.group(2).lower() in "aeiou" else "")
    return f"{article} {match.group(2)}"


@dataclass(frozen=True)
class KBConfig:
    """What determines the embedded knowledge base."""

    seed: int = 0
    """Seed of the generator (names, relations, filler, question split)."""
    scale: float = 1.0
    """Multiplier on :data:`BASE_COUNTS` (1 -> ~600 passages; 17 -> ~10k; 170 -> ~100k)."""
    test_fraction: float = 0.2
    """Share of the questions in the ``test`` split; the rest are ``train``."""


@dataclass
class Entity:
    kind: str
    name: str
    aliases: tuple[str, ...]
    relations: dict[str, str] = field(default_factory=dict)


@dataclass
class KnowledgeBase:
    """Passages and questions of one generated world."""

    config: KBConfig
    documents: list[Document]
    splits: dict[str, list[QAExample]]

    def questions(self, split: str = "train") -> list[QAExample]:
        if split not in self.splits:
            raise ValueError(f"split {split!r} is not one of {sorted(self.splits)}")
        return self.splits[split]


@functools.lru_cache(maxsize=8)
def build_kb(config: KBConfig = KBConfig()) -> KnowledgeBase:
    """Generate (once per process and config) the knowledge base for ``config``."""
    if config.scale <= 0:
        raise ValueError(f"KBConfig.scale must be positive, got {config.scale}")
    if not 0.0 <= config.test_fraction <= 1.0:
        raise ValueError(f"KBConfig.test_fraction must be in [0, 1], got {config.test_fraction}")
    return _Generator(config).build()


class _Generator:
    def __init__(self, config: KBConfig):
        self.config = config
        self.rng = np.random.default_rng(config.seed)
        self.taken: set[str] = set()
        self.entities: dict[str, list[Entity]] = {}

    def pick(self, options):
        return options[int(self.rng.integers(len(options)))]

    def count(self, kind: str) -> int:
        return max(2, int(round(BASE_COUNTS[kind] * self.config.scale)))

    def stem(self, syllables: int = 2) -> str:
        return "".join(self.pick(V.SYLLABLES) for _ in range(syllables)).capitalize()

    # -- names in near-name groups ------------------------------------------------------------
    def grouped_names(self, kind: str, make_group) -> list[tuple[str, tuple[str, ...]]]:
        """``make_group()`` returns candidate ``(name, aliases)`` sharing a root; keep 1-3."""
        names: list[tuple[str, tuple[str, ...]]] = []
        target = self.count(kind)
        while len(names) < target:
            group = [c for c in make_group() if c[0].lower() not in self.taken]
            size = min(len(group), int(self.rng.integers(1, 4)), target - len(names))
            for name, aliases in group[:size]:
                if name.lower() not in self.taken:
                    self.taken.add(name.lower())
                    names.append((name, aliases))
        return names

    def person_group(self):
        first, root = self.stem(), self.stem(1)
        endings = self.rng.permutation(len(V.SURNAME_ENDINGS))[:3]
        out = []
        for index in endings:
            name = f"{first} {root.capitalize()}{V.SURNAME_ENDINGS[index]}"
            out.append((name, (name, f"{first[0]}. {name.split()[1]}")))
        return out

    def suffixed_group(self, suffixes, extra_aliases=lambda name: ()):
        root = self.stem()
        chosen = self.rng.permutation(len(suffixes))[:3]
        return [(f"{root}{suffixes[i]}", (f"{root}{suffixes[i]}", *extra_aliases(root + suffixes[i])))
                for i in chosen]

    def company_group(self):
        root = self.stem()
        return [(f"{root} {industry}", (f"{root} {industry}", f"{root} {industry} Inc",
                                        f"{root} {industry} Corporation"))
                for industry in (self.pick(V.INDUSTRIES) for _ in range(3))]

    def university_group(self):
        root = self.stem()
        out = []
        for kind in (self.pick(V.SCHOOL_KINDS) for _ in range(3)):
            name = f"{root} {kind}"
            aliases = (name, f"University of {root}") if kind == "University" else (name,)
            out.append((name, aliases))
        return out

    def film_group(self):
        base = f"{self.pick(V.FILM_ADJECTIVES)} {self.pick(V.FILM_NOUNS)}"
        return [(title, (title, f"The {title}")) for title in (f"{base} of {self.stem()}" for _ in range(3))]

    def book_group(self):
        root = self.stem()
        return [(title, (title, f"The {title}"))
                for title in (f"{self.pick(V.BOOK_NOUNS)} of {root}" for _ in range(3))]

    # -- world ----------------------------------------------------------------------------------
    def build(self) -> KnowledgeBase:
        makers = {
            "country": lambda: self.suffixed_group(V.COUNTRY_SUFFIXES),
            "city": lambda: self.suffixed_group(V.CITY_SUFFIXES),
            "university": self.university_group,
            "company": self.company_group,
            "person": self.person_group,
            "film": self.film_group,
            "book": self.book_group,
        }
        for kind, maker in makers.items():
            self.entities[kind] = [Entity(kind, name, aliases)
                                   for name, aliases in self.grouped_names(kind, maker)]
        self.link()
        documents = [self.passage(entity, index)
                     for index, entity in enumerate(e for kind in makers for e in self.entities[kind])]
        return KnowledgeBase(self.config, documents, self.split(self.questions()))

    def link(self) -> None:
        E = self.entities
        pick = lambda kind: self.pick(E[kind]).name  # noqa: E731 - local shorthand
        year = lambda low, high: str(int(self.rng.integers(low, high)))  # noqa: E731
        for city in E["city"]:
            city.relations["country"] = pick("country")
        for school in E["university"]:
            school.relations |= {"located_in": pick("city"), "founded_year": year(1700, 1990)}
        for company in E["company"]:
            company.relations |= {"headquartered_in": pick("city"), "founded_year": year(1850, 2020)}
        for person in E["person"]:
            person.relations |= {"born_in": pick("city"), "birth_year": year(1900, 2000),
                                 "works_for": pick("company"), "educated_at": pick("university"),
                                 "occupation": self.pick(V.OCCUPATIONS)}
        for company in E["company"]:
            company.relations["founded_by"] = pick("person")
        for film in E["film"]:
            film.relations |= {"directed_by": pick("person"), "release_year": year(1930, 2024)}
        for book in E["book"]:
            book.relations |= {"author": pick("person"), "publication_year": year(1800, 2024)}

    def passage(self, entity: Entity, index: int) -> Document:
        facts = [V.RELATIONS[rel][2].format(s=entity.name, o=obj) for rel, obj in entity.relations.items()]
        order = self.rng.permutation(len(facts))
        sentences = [facts[i] for i in order]
        fillers = self.rng.permutation(len(V.FILLER_SENTENCES))
        for filler_index in fillers:
            if sum(len(s.split()) for s in sentences) >= 95:
                break
            adj, adj2 = self.rng.choice(V.FILLER_ADJECTIVES, size=2, replace=False)
            sentences.insert(int(self.rng.integers(min(1, len(sentences)), len(sentences) + 1)),
                             V.FILLER_SENTENCES[filler_index].format(
                                 s=entity.name, adj=adj, adj2=adj2, noun=self.pick(V.FILLER_NOUNS)))
        text = _ARTICLE_BEFORE_WORD.sub(_fix_article, " ".join(sentences))
        return Document(id=str(index), contents=f"\"{entity.name}\"\n{text}")

    def questions(self) -> list[QAExample]:
        by_name = {e.name: e for kind in self.entities.values() for e in kind}
        answers = lambda rel, obj: (by_name[obj].aliases if obj in by_name else (obj,))  # noqa: E731
        out: list[QAExample] = []
        for kind in self.entities.values():
            for entity in kind:
                for rel, obj in entity.relations.items():
                    out.append(QAExample(
                        id=f"{len(out)}", question=V.ONE_HOP_QUESTIONS[rel].format(s=entity.name),
                        golden_answers=answers(rel, obj), dataset=EMBEDDED_DATASET,
                        plan=((entity.name, rel),)))
                    middle = by_name.get(obj)
                    for (first, second), template in V.TWO_HOP_QUESTIONS.items():
                        if first == rel and middle is not None and second in middle.relations:
                            out.append(QAExample(
                                id=f"{len(out)}", question=template.format(s=entity.name),
                                golden_answers=answers(second, middle.relations[second]),
                                dataset=EMBEDDED_DATASET, plan=((entity.name, rel), ("", second))))
        return out

    def split(self, questions: list[QAExample]) -> dict[str, list[QAExample]]:
        order = self.rng.permutation(len(questions))
        n_test = int(round(len(questions) * self.config.test_fraction))
        test_ids = set(order[:n_test].tolist())
        return {"train": [q for i, q in enumerate(questions) if i not in test_ids],
                "test": [q for i, q in enumerate(questions) if i in test_ids],
                "all": list(questions)}
