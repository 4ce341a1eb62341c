"""Word lists and sentence templates of the procedural knowledge base (``kb.py``).

Relation templates are shared with the scripted oracle, which reads answers back out of the
retrieved passages with the same templates: ``{s}`` is the subject's name, ``{o}`` the object,
always followed by a full stop so the object can be cut out of the text.
"""

from __future__ import annotations

SYLLABLES = (
    "ka", "vel", "mor", "dra", "len", "sor", "tis", "bra", "quin", "zel", "har", "dun", "mal",
    "ri", "os", "ven", "tar", "lo", "ne", "gra", "fen", "cor", "ith", "pal", "rek", "sal", "um",
    "vo", "bel", "gan", "ist", "nar", "po", "thal", "wen", "yor", "ez", "kir", "ma", "dol",
)
SURNAME_ENDINGS = ("in", "el", "ov", "ar", "ik", "en", "us", "ane", "ard", "ley")
CITY_SUFFIXES = ("ford", "mouth", "heim", "grad", "haven", "wick", "dale", "stad")
COUNTRY_SUFFIXES = ("ia", "land", "stan", "ara", "ova", "eth")
INDUSTRIES = ("Dynamics", "Systems", "Foods", "Motors", "Pharmaceuticals", "Textiles", "Robotics",
              "Airlines", "Energy", "Software", "Shipping", "Optics")
SCHOOL_KINDS = ("University", "Institute of Technology", "College", "Polytechnic")
FILM_ADJECTIVES = ("Silent", "Crimson", "Hollow", "Distant", "Broken", "Golden", "Winter",
                   "Burning", "Hidden", "Restless", "Pale", "Endless", "Iron", "Velvet", "Last")
FILM_NOUNS = ("Harbor", "Garden", "Frontier", "Mirror", "Lantern", "Orchard", "Tide", "Signal",
              "Bridge", "Horizon", "Caravan", "Meridian", "Citadel", "Echo", "Compass")
BOOK_NOUNS = ("Chronicles", "Letters", "Songs", "Maps", "Ballads", "Notes", "Legends", "Tales",
              "Secrets", "Elegies")
OCCUPATIONS = ("architect", "chemist", "violinist", "cartographer", "economist", "sculptor",
               "journalist", "astronomer", "engineer", "historian", "novelist", "surgeon",
               "botanist", "diplomat", "photographer", "linguist")

#: Filler vocabulary: no word here may also occur in a relation template or question.
FILLER_ADJECTIVES = ("quiet", "remarkable", "modest", "celebrated", "unusual", "steady",
                     "ambitious", "careful", "lively", "enduring", "practical", "curious")
FILLER_NOUNS = ("archive", "collection", "festival", "workshop", "exhibition", "journal",
                "museum", "lecture", "library", "harbour", "market", "garden", "theatre")
FILLER_SENTENCES = (
    "{s} is frequently mentioned in {adj} accounts of the region.",
    "Archivists note that the {noun} associated with {s} remains {adj}.",
    "Several {adj} reviews have discussed the {noun} and its {adj2} character.",
    "A {adj} survey later described the {noun} connected to {s} as {adj2}.",
    "Observers have called the {noun} {adj}, although some regard it as {adj2}.",
    "The local {noun} keeps a {adj} record of events linked to {s}.",
    "Over the decades a {adj} {noun} grew up around the name {s}.",
    "Critics remain divided, yet most agree the {noun} is {adj} and {adj2}.",
    "An {adj2} {noun} dedicated to {s} opened to the public at a later date.",
    "Many visitors remember the {adj} {noun} more than anything else.",
)

#: relation -> (subject type, object type or "literal", passage sentence template).
RELATIONS: dict[str, tuple[str, str, str]] = {
    "born_in": ("person", "city", "{s} was born in the city of {o}."),
    "birth_year": ("person", "literal", "{s} came into the world in the year {o}."),
    "works_for": ("person", "company", "{s} is employed by {o}."),
    "educated_at": ("person", "university", "{s} studied at {o}."),
    "occupation": ("person", "literal", "The profession of {s} is {o}."),
    "country": ("city", "country", "{s} is a city in the country of {o}."),
    "located_in": ("university", "city", "{s} has its campus in the city of {o}."),
    "founded_year": ("organization", "literal", "{s} was established in the year {o}."),
    "founded_by": ("company", "person", "{s} was founded by {o}."),
    "headquartered_in": ("company", "city", "{s} has its headquarters in the city of {o}."),
    "directed_by": ("film", "person", "{s} is a film directed by {o}."),
    "release_year": ("film", "literal", "{s} was released in the year {o}."),
    "author": ("book", "person", "{s} is a book written by {o}."),
    "publication_year": ("book", "literal", "{s} was published in the year {o}."),
}

#: One-hop questions: relation -> template over the subject ``{s}``.
ONE_HOP_QUESTIONS: dict[str, str] = {
    "born_in": "Where was {s} born?",
    "birth_year": "In which year was {s} born?",
    "works_for": "Which company does {s} work for?",
    "educated_at": "Which university did {s} attend?",
    "occupation": "What is the occupation of {s}?",
    "country": "In which country is the city of {s}?",
    "located_in": "In which city is {s} located?",
    "founded_year": "In which year was {s} founded?",
    "founded_by": "Who founded {s}?",
    "headquartered_in": "Where is {s} headquartered?",
    "directed_by": "Who directed the film {s}?",
    "release_year": "When was the film {s} released?",
    "author": "Who wrote the book {s}?",
    "publication_year": "When was the book {s} published?",
}

#: Two-hop questions: (first relation, second relation) -> template over the first subject.
TWO_HOP_QUESTIONS: dict[tuple[str, str], str] = {
    ("directed_by", "born_in"): "Where was the director of the film {s} born?",
    ("directed_by", "birth_year"): "In which year was the director of the film {s} born?",
    ("directed_by", "educated_at"): "Which university did the director of the film {s} attend?",
    ("author", "born_in"): "Where was the author of the book {s} born?",
    ("author", "works_for"): "Which company does the author of the book {s} work for?",
    ("founded_by", "born_in"): "Where was the founder of {s} born?",
    ("founded_by", "occupation"): "What is the occupation of the founder of {s}?",
    ("headquartered_in", "country"): "In which country is {s} headquartered?",
    ("works_for", "headquartered_in"): "Where is the company that {s} works for headquartered?",
    ("born_in", "country"): "In which country was {s} born?",
    ("educated_at", "located_in"): "In which city is the university that {s} attended?",
    ("located_in", "country"): "In which country is {s} located?",
}
