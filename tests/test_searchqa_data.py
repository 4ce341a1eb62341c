"""Scoring (Search-R1 normalisation, EM, sub-EM, F1) and the question / corpus loaders."""

from __future__ import annotations

import json

import pytest

from paw_gym.searchqa.data import (DataFormatError, Document, dataset_name_from_path, load_corpus,
                                   load_qa, save_corpus)
from paw_gym.searchqa.scoring import exact_match, normalize_answer, substring_exact_match, token_f1


@pytest.mark.parametrize("raw, normalised", [
    ("The  Eiffel Tower!", "eiffel tower"),
    ("an apple, a pear", "apple pear"),
    ("Theodore", "theodore"),             # articles only as whole words
    ("  U.S.A. ", "usa"),
    ("Málaga", "málaga"),                  # non-ASCII letters are kept
])
def test_normalize_answer_matches_search_r1(raw, normalised):
    assert normalize_answer(raw) == normalised


def test_em_against_any_alias_and_sub_em_and_f1():
    gold = ["Bobby Scott", "Bob Russell"]
    assert exact_match("bob russell.", gold)
    assert not exact_match("Bob Russell and Bobby Scott", gold)
    assert substring_exact_match("Bob Russell and Bobby Scott", gold)
    assert not substring_exact_match("Russell", gold)
    assert exact_match("The Beatles", "beatles")
    assert token_f1("Bob Russell", gold) == 1.0
    # "bob" vs "bobby scott": no common token; vs "bob russell": precision 1/2... best is 2/3
    assert token_f1("Bob Dylan", gold) == pytest.approx(0.5)
    assert token_f1("", gold) == 0.0


def test_dataset_name_from_path():
    assert dataset_name_from_path("x/nq_test_questions_and_answers.json") == "nq"
    assert dataset_name_from_path("2wikimultihop_test.jsonl") == "2wiki"
    assert dataset_name_from_path("hotpotqa-dev.parquet") == "hotpotqa"
    assert dataset_name_from_path("my_questions.jsonl") == "my_questions"


def test_load_flashrag_jsonl(tmp_path):
    path = tmp_path / "triviaqa_dev.jsonl"
    rows = [{"id": "dev_0", "question": "Who wrote X? ", "golden_answers": ["A", "B"]},
            {"id": "dev_1", "question": "Where is Y?", "golden_answers": ["C"]}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    qa = load_qa(path)
    assert qa.name == "triviaqa" and len(qa) == 2
    first = qa.examples[0]
    assert (first.id, first.question, first.golden_answers, first.dataset) == \
        ("dev_0", "Who wrote X?", ("A", "B"), "triviaqa")


def test_load_search_r1_parquet(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    def prompt(question):
        return [{"role": "user", "content": f"Answer the given question. ... Question: {question}"}]

    # Search-R1's processed parquet: the question sits in the prompt, answers in reward_model;
    # the first row also keeps FlashRAG's own columns.
    table = pa.Table.from_pylist([
        {"data_source": "nq", "question": "q one", "golden_answers": ["a1", "a2"],
         "prompt": prompt("q one"), "reward_model": {"style": "rule", "ground_truth": {"target": ["a1", "a2"]}}},
        {"data_source": "hotpotqa", "question": None, "golden_answers": None,
         "prompt": prompt("q two"), "reward_model": {"style": "rule", "ground_truth": {"target": ["a3"]}}},
    ])
    path = tmp_path / "train.parquet"
    pq.write_table(table, path)
    qa = load_qa(path)
    assert [e.dataset for e in qa.examples] == ["nq", "hotpotqa"]
    assert qa.examples[1].question == "q two" and qa.examples[1].golden_answers == ("a3",)
    assert qa.examples[0].golden_answers == ("a1", "a2")


@pytest.mark.parametrize("content, message", [
    ("{not json", "not valid JSON"),
    ('[{"question": "q"}]', "no answers"),
    ('[{"answer": "a"}]', "missing 'question'"),
    ("[]", "no questions"),
    # Once read as silently wrong answers (issue 17): a mapping's keys, the text "None".
    ('[{"question": "q", "answer": {"text": "a"}}]', "'answer' is dict; expected a string"),
    ('[{"question": "q", "answer": [null]}]', "'answer' has an answer None"),
    ('[{"question": "q", "golden_answers": ["a", ["b"]]}]', "has an answer \\['b'\\]"),
])
def test_load_qa_errors_name_the_problem(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(DataFormatError, match=message):
        load_qa(path)


def test_corpus_rows_must_be_objects(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text('{"id": "1", "contents": "ok"}\n["2", "a list"]\n')
    with pytest.raises(DataFormatError, match="row 1: a corpus row must be an object with 'id' "
                                              "and 'contents', got list"):
        load_corpus(path)


def test_numeric_answers_are_read_as_text(tmp_path):
    path = tmp_path / "years.json"
    path.write_text('[{"question": "When?", "answer": [1945, "in 1945"]}]')
    assert load_qa(path).examples[0].golden_answers == ("1945", "in 1945")


def test_load_qa_missing_file_and_bad_suffix(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.json"):
        load_qa(tmp_path / "nope.json")
    (tmp_path / "q.csv").write_text("question,answer\n")
    with pytest.raises(DataFormatError, match="unsupported"):
        load_qa(tmp_path / "q.csv")


def test_corpus_round_trip_and_title_text_layout(tmp_path):
    documents = [Document("1", '"Paris"\nParis is the capital of France.'),
                 Document("2", '"Lyon"\nLyon is a city.')]
    save_corpus(documents, tmp_path / "c.jsonl")
    assert load_corpus(tmp_path / "c.jsonl") == documents
    assert documents[0].title == '"Paris"' and documents[0].text == "Paris is the capital of France."
    (tmp_path / "t.jsonl").write_text(json.dumps({"id": 7, "title": "Nice", "text": "A city."}) + "\n")
    assert load_corpus(tmp_path / "t.jsonl") == [Document("7", '"Nice"\nA city.')]
    (tmp_path / "bad.jsonl").write_text(json.dumps({"id": 1}) + "\n")
    with pytest.raises(DataFormatError, match="contents"):
        load_corpus(tmp_path / "bad.jsonl")


@pytest.mark.parametrize("file_name, name, count, multi_alias", [
    ("nq_test_questions_and_answers.json", "nq", 3610, True),
    ("hotpotqa_test_questions_and_answers.json", "hotpotqa", 7405, False),
    ("2wikimultihop_test_questions_and_answers.json", "2wiki", 12576, False),
    ("musique_test_questions_and_answers.json", "musique", 2417, False),
])
def test_loaders_read_the_real_qa_sets(shared_data, file_name, name, count, multi_alias):
    path = shared_data / "qa" / file_name
    if not path.is_file():
        pytest.skip(f"{path} not present")
    qa = load_qa(path)
    assert qa.name == name and len(qa) == count
    assert all(e.question and e.golden_answers and e.dataset == name for e in qa.examples)
    assert len({e.id for e in qa.examples}) == count
    assert any(len(e.golden_answers) > 1 for e in qa.examples) == multi_alias
    first = json.loads(path.read_text())[0]
    gold = first["answer"] if isinstance(first["answer"], list) else [first["answer"]]
    assert qa.examples[0].question == first["question"].strip()
    assert exact_match(gold[0], qa.examples[0].golden_answers)
