"""``paw-gym serve-retriever``: a Search-R1 compatible ``/retrieve`` server over a corpus.

Examples::

    paw-gym serve-retriever                                  # embedded knowledge base, BM25
    paw-gym serve-retriever --corpus wiki.jsonl --retriever dense --index wiki_minilm/ --port 8000
    paw-gym serve-retriever --corpus wiki-18.jsonl --faiss-index e5_Flat.index \\
        --model intfloat/e5-base-v2                          # Search-R1's own E5 index
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from training.infra.checked_config import (CheckedConfig, bounded, input_file, only_with,
                                           output_file, output_folder, port, text)

_WITH_EMBEDDED = only_with("corpus is embedded", lambda c: c.corpus == "embedded")
_WITH_DENSE = only_with("retriever is dense", lambda c: c.retriever == "dense")


@dataclass
class ServeRetrieverArguments(CheckedConfig):
    """What ``paw-gym serve-retriever`` indexes and where it listens."""

    corpus: str = input_file("embedded", special=("embedded",))
    """Passages .jsonl with 'id' and 'contents', or 'embedded' for the procedural knowledge
    base."""
    kb_seed: int = field(default=0, metadata=_WITH_EMBEDDED)
    """Embedded knowledge base seed."""
    kb_scale: float = bounded(1.0, 0, 100, low_open=True, **_WITH_EMBEDDED)
    """Embedded knowledge base size multiplier (100: about 100 times the default's passages)."""
    retriever: Literal["bm25", "dense"] = "bm25"
    """Retrieval method."""
    index: str | None = output_folder(None)
    """Index directory: loaded if it holds a saved index, else built and saved there."""
    faiss_index: str | None = input_file(None)
    """A raw faiss index file built elsewhere (rows = corpus order); needs --model."""
    model: str | None = text(None)
    """sentence-transformers model for dense retrieval (none: offline all-MiniLM-L6-v2)."""
    index_type: Literal["flat", "hnsw"] = field(default="flat", metadata=_WITH_DENSE)
    """faiss index type."""
    device: str | None = text(None)
    """Torch device of the dense encoder."""
    host: str = text("127.0.0.1")
    """Interface to bind (default: loopback only)."""
    port: int = port(8000)
    """TCP port (0 picks a free one)."""
    topk: int = bounded(3, 1, 1000)
    """topk when a request leaves it out."""
    max_body_bytes: int = bounded(1 << 20, 1, 1 << 30)
    """Largest request body."""
    export_corpus: str | None = output_file(None)
    """Also write the served passages to this .jsonl (e.g. the embedded corpus)."""
    overwrite: bool = False
    """Replace an existing --export_corpus file (refused otherwise)."""

    def _check_relations(self) -> None:
        if self.faiss_index and not self.model:
            raise ValueError("faiss_index needs model (the encoder the index was built with)")


def add_parser(subparsers) -> None:
    from training.commands.flags import add_command

    add_command(subparsers, "serve-retriever", ServeRetrieverArguments,
                help="serve passage retrieval over HTTP (Search-R1 /retrieve API)",
                description="Serve BM25 or dense retrieval over HTTP with Search-R1's POST "
                            "/retrieve API.").set_defaults(func=run)


def run(args) -> int:
    from pathlib import Path

    from paw_gym.searchqa.data import load_corpus, save_corpus
    from paw_gym.searchqa.kb import KBConfig, build_kb
    from paw_gym.searchqa.retriever_factory import make_retriever
    from paw_gym.searchqa.server import RetrievalServer, ServerLimits
    from training.commands.common import UserError, claim_output_files
    from training.commands.flags import arguments_from

    arguments = arguments_from(args, ServeRetrieverArguments)
    if arguments.export_corpus:
        claim_output_files([Path(arguments.export_corpus)], arguments.overwrite,
                           "--export_corpus", "--export_corpus")
    if arguments.corpus == "embedded":
        documents = build_kb(KBConfig(seed=arguments.kb_seed,
                                      scale=arguments.kb_scale)).documents
    else:
        try:
            documents = load_corpus(arguments.corpus)
        except ValueError as error:
            raise UserError(str(error)) from error
    if arguments.export_corpus:
        save_corpus(documents, arguments.export_corpus)
    print(f"indexing {len(documents)} passages with {arguments.retriever} ...", flush=True)
    try:
        if arguments.faiss_index:
            from paw_gym.searchqa.dense import DenseRetriever

            retriever = DenseRetriever.from_faiss_file(arguments.faiss_index, documents,
                                                       model=arguments.model,
                                                       device=arguments.device)
        else:
            options = ({"model": arguments.model, "index_type": arguments.index_type,
                        "device": arguments.device, "show_progress": True}
                       if arguments.retriever == "dense" else {"show_progress": True})
            retriever = make_retriever(arguments.retriever, documents, index=arguments.index,
                                       **options)
    except (ValueError, FileNotFoundError, OSError) as error:
        raise UserError(str(error)) from error
    try:
        server = RetrievalServer(retriever, host=arguments.host, port=arguments.port,
                                 limits=ServerLimits(default_topk=arguments.topk,
                                                     max_body_bytes=arguments.max_body_bytes))
    except OSError as error:  # port in use, no permission, a host that is not this machine's
        raise UserError(f"cannot serve on --host {arguments.host} --port {arguments.port}: "
                        f"{error.strerror or error}") from error
    print(f"serving {len(documents)} passages at {server.url} (Ctrl-C to stop)", flush=True)
    try:
        server.serve_forever()
    finally:
        server.close()
    return 0
