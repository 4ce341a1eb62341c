"""``paw-gym serve-retriever``: a Search-R1 compatible ``/retrieve`` server over a corpus.

Examples::

    paw-gym serve-retriever                                  # embedded knowledge base, BM25
    paw-gym serve-retriever --corpus wiki.jsonl --retriever dense --index wiki_minilm/ --port 8000
    paw-gym serve-retriever --corpus wiki-18.jsonl --faiss-index e5_Flat.index \\
        --model intfloat/e5-base-v2                          # Search-R1's own E5 index
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from training.infra.checked_config import CheckedConfig, bounded


@dataclass
class ServeRetrieverArguments(CheckedConfig):
    """What ``paw-gym serve-retriever`` indexes and where it listens."""

    corpus: str = "embedded"
    """Passages .jsonl with 'id' and 'contents', or 'embedded' for the procedural knowledge
    base."""
    kb_seed: int = 0
    """Embedded knowledge base seed."""
    kb_scale: float = 1.0
    """Embedded knowledge base size multiplier."""
    retriever: Literal["bm25", "dense"] = "bm25"
    """Retrieval method."""
    index: str | None = None
    """Index directory: loaded if it holds a saved index, else built and saved there."""
    faiss_index: str | None = None
    """A raw faiss index file built elsewhere (rows = corpus order); needs --model."""
    model: str | None = None
    """sentence-transformers model for dense retrieval (none: offline all-MiniLM-L6-v2)."""
    index_type: Literal["flat", "hnsw"] = "flat"
    """faiss index type."""
    device: str | None = None
    """Torch device of the dense encoder."""
    host: str = "127.0.0.1"
    """Interface to bind (default: loopback only)."""
    port: int = bounded(8000, 0, 65535, what="a TCP port", note="0 picks a free one")
    """TCP port (0 picks a free one)."""
    topk: int = bounded(3, 1)
    """topk when a request leaves it out."""
    max_body_bytes: int = bounded(1 << 20, 1)
    """Largest request body."""
    export_corpus: str | None = None
    """Also write the served passages to this .jsonl (e.g. the embedded corpus)."""
    overwrite: bool = False
    """Replace an existing --export_corpus file (refused otherwise)."""


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
        if not Path(arguments.corpus).is_file():
            raise UserError(f"--corpus {arguments.corpus!r} is not a file (expected passages "
                            ".jsonl)")
        try:
            documents = load_corpus(arguments.corpus)
        except ValueError as error:
            raise UserError(str(error)) from error
    if arguments.export_corpus:
        save_corpus(documents, arguments.export_corpus)
    print(f"indexing {len(documents)} passages with {arguments.retriever} ...", flush=True)
    try:
        if arguments.faiss_index:
            if not arguments.model:
                raise UserError("--faiss-index needs --model (the encoder the index was built "
                                "with)")
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
