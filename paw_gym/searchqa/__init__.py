"""Search-augmented question answering (``PaW/SearchQA-v0``), Search-R1 style.

The agent alternates ``<search>query</search>`` and reads ``<information>…</information>``
until it answers with ``<answer>…</answer>``. Parts: a procedural knowledge base (``kb``),
question and corpus loaders (``data``), Search-R1 scoring (``scoring``), retrievers behind one
interface (``bm25``, ``dense``, ``client``), a ``/retrieve`` HTTP server (``server``), the
env (``env``) and a scripted oracle (``oracle``). Nothing here imports torch at import time.
"""

from paw_gym.searchqa.data import Document, QAExample, load_corpus, load_qa
from paw_gym.searchqa.scoring import exact_match, normalize_answer, substring_exact_match, token_f1

__all__ = ["Document", "QAExample", "exact_match", "load_corpus", "load_qa", "normalize_answer",
           "substring_exact_match", "token_f1"]
