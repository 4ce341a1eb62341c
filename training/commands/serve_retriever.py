"""``paw-gym serve-retriever``: a Search-R1 compatible ``/retrieve`` server over a corpus.

Examples::

    paw-gym serve-retriever                                  # embedded knowledge base, BM25
    paw-gym serve-retriever --corpus wiki.jsonl --retriever dense --index wiki_minilm/ --port 8000
    paw-gym serve-retriever --corpus wiki-18.jsonl --faiss-index e5_Flat.index \\
        --model intfloat/e5-base-v2                          # Search-R1's own E5 index
"""

from __future__ import annotations


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "serve-retriever", help="serve passage retrieval over HTTP (Search-R1 /retrieve API)",
        description="Serve BM25 or dense retrieval over HTTP with Search-R1's POST /retrieve API.")
    parser.add_argument("--corpus", default="embedded",
                        help="passages .jsonl with 'id' and 'contents', or 'embedded' (default) "
                             "for the procedural knowledge base")
    parser.add_argument("--kb-seed", type=int, default=0, help="embedded knowledge base seed")
    parser.add_argument("--kb-scale", type=float, default=1.0, help="embedded knowledge base size multiplier")
    parser.add_argument("--retriever", choices=("bm25", "dense"), default="bm25")
    parser.add_argument("--index", default=None,
                        help="index directory: loaded if it holds a saved index, else built and saved there")
    parser.add_argument("--faiss-index", default=None,
                        help="a raw faiss index file built elsewhere (rows = corpus order); needs --model")
    parser.add_argument("--model", default=None,
                        help="sentence-transformers model for dense retrieval (default: offline all-MiniLM-L6-v2)")
    parser.add_argument("--index-type", choices=("flat", "hnsw"), default="flat", help="faiss index type")
    parser.add_argument("--device", default=None, help="torch device of the dense encoder")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default loopback only)")
    parser.add_argument("--port", type=int, default=8000, help="TCP port (0 picks a free one)")
    parser.add_argument("--topk", type=int, default=3, help="topk when a request leaves it out")
    parser.add_argument("--max-body-bytes", type=int, default=1 << 20, help="largest request body")
    parser.add_argument("--export-corpus", default=None,
                        help="also write the served passages to this .jsonl (e.g. the embedded corpus)")
    parser.set_defaults(func=run)


def run(args) -> int:
    from pathlib import Path

    from paw_gym.searchqa.data import load_corpus, save_corpus
    from paw_gym.searchqa.kb import KBConfig, build_kb
    from paw_gym.searchqa.retriever import make_retriever
    from paw_gym.searchqa.server import RetrievalServer, ServerLimits
    from training.cli import UserError

    if args.corpus == "embedded":
        documents = build_kb(KBConfig(seed=args.kb_seed, scale=args.kb_scale)).documents
    else:
        if not Path(args.corpus).is_file():
            raise UserError(f"--corpus {args.corpus!r} is not a file (expected passages .jsonl)")
        try:
            documents = load_corpus(args.corpus)
        except ValueError as error:
            raise UserError(str(error)) from error
    if args.export_corpus:
        save_corpus(documents, args.export_corpus)
    print(f"indexing {len(documents)} passages with {args.retriever} ...", flush=True)
    try:
        if args.faiss_index:
            if not args.model:
                raise UserError("--faiss-index needs --model (the encoder the index was built with)")
            from paw_gym.searchqa.dense import DenseRetriever

            retriever = DenseRetriever.from_faiss_file(args.faiss_index, documents, model=args.model,
                                                       device=args.device)
        else:
            options = ({"model": args.model, "index_type": args.index_type, "device": args.device,
                        "show_progress": True} if args.retriever == "dense" else {"show_progress": True})
            retriever = make_retriever(args.retriever, documents, index=args.index, **options)
        server = RetrievalServer(retriever, host=args.host, port=args.port,
                                 limits=ServerLimits(default_topk=args.topk,
                                                     max_body_bytes=args.max_body_bytes))
    except (ValueError, FileNotFoundError, OSError) as error:
        raise UserError(str(error)) from error
    print(f"serving {len(documents)} passages at {server.url} (Ctrl-C to stop)", flush=True)
    try:
        server.serve_forever()
    finally:
        server.close()
    return 0
