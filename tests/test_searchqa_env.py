"""PaW/SearchQA-v0: the embedded knowledge base, the env contract, and the scripted oracle."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import paw_gym  # noqa: F401 - registers PaW/SearchQA-v0
from paw_gym.searchqa import oracle
from paw_gym.searchqa.bm25 import BM25Retriever
from paw_gym.searchqa.env import INVALID_ACTION_MESSAGE, SearchQAEnv, parse_action
from paw_gym.searchqa.kb import KBConfig, build_kb
from paw_gym.searchqa.retriever import information_block
from paw_gym.searchqa.scoring import normalize_answer


def run_oracle(env: SearchQAEnv, **reset_kwargs) -> list[tuple[str, str, float, bool, dict]]:
    """(action, observation, reward, terminated, info) of one oracle episode (<= 4 turns)."""
    env.reset(**reset_kwargs)
    steps = []
    for _ in range(4):
        action = env.expert_action()
        observation, reward, terminated, _, info = env.step(action)
        steps.append((action, observation, reward, terminated, info))
        if terminated:
            break
    return steps


# -- knowledge base ------------------------------------------------------------------------------
def test_kb_is_a_pure_function_of_its_config():
    a, b = build_kb.__wrapped__(KBConfig(seed=3)), build_kb.__wrapped__(KBConfig(seed=3))
    assert a.documents == b.documents and a.splits == b.splits
    other = build_kb.__wrapped__(KBConfig(seed=4))
    assert other.documents != a.documents


def test_kb_passages_questions_and_splits():
    kb = build_kb(KBConfig())
    lengths = [len(d.contents.split()) for d in kb.documents]
    assert 80 <= sum(lengths) / len(lengths) <= 130
    assert all(d.contents.startswith('"') and '"\n' in d.contents for d in kb.documents)
    assert len({d.title for d in kb.documents}) == len(kb.documents)
    train, test = kb.questions("train"), kb.questions("test")
    assert not {q.id for q in train} & {q.id for q in test}
    assert len(train) + len(test) == len(kb.questions("all"))
    assert Counter(len(q.plan) for q in test).keys() == {1, 2}
    with pytest.raises(ValueError, match="split 'dev'"):
        kb.questions("dev")


def test_kb_has_near_name_distractors():
    """Most people share their first name and surname root with another person."""
    kb = build_kb(KBConfig())
    people = [q.plan[0][0] for q in kb.questions("all") if q.plan[0][1] == "born_in" and len(q.plan) == 1]
    roots = Counter((name.split()[0], name.split()[1][:3]) for name in people)
    assert sum(count for count in roots.values() if count > 1) / len(people) > 0.5


def test_two_hop_answers_need_a_second_search():
    """Searching the 2-hop question itself almost never surfaces the answer; 1-hop always does."""
    kb = build_kb(KBConfig())
    retriever = BM25Retriever(kb.documents)
    for hops, low, high in ((1, 0.95, 1.0), (2, 0.0, 0.10)):
        questions = [q for q in kb.questions("all") if len(q.plan) == hops]
        results = retriever.search([q.question for q in questions], 3)
        found = sum(any(normalize_answer(a) in normalize_answer(information_block(hits))
                        for a in q.golden_answers) for q, hits in zip(questions, results))
        assert low <= found / len(questions) <= high, (hops, found / len(questions))


# -- env contract --------------------------------------------------------------------------------
def test_check_env_passes():
    check_env(SearchQAEnv(split="test"), skip_render_check=True)


def test_reset_is_deterministic_and_info_contract():
    env, twin = SearchQAEnv(), SearchQAEnv()
    question, info = env.reset(seed=11)
    assert (question, info) == twin.reset(seed=11)
    assert info["task_description"] == question and info["admissible_actions"] == []
    assert info["task_type"] == "paw-kb" and info["task_id"].startswith("paw-kb-s0-")
    assert not info["won"] and not info["invalid_action"]
    assert run_oracle(env, seed=11) == run_oracle(twin, seed=11)
    seen = {env.reset(seed=s)[1]["task_id"] for s in range(20)}
    assert len(seen) > 15
    assert SearchQAEnv(seed=5).reset()[0] == env.reset(seed=5)[0]


@pytest.mark.parametrize("action", [
    "", "just some text", "<search></search>", "<answer>   </answer>", "<search>unclosed",
    "<search>a</search><search>b</search>", "<search>a</search> then <answer>b</answer>",
    "<search>a</answer>", "<SEARCH>a</SEARCH>", "<information>x</information>",
    "<search>a<search>b</search>", "</search>a<search>", "<answer>a</answer></answer>",
])
def test_invalid_turns_get_the_correction_message_and_change_nothing(action):
    env = SearchQAEnv()
    question, _ = env.reset(seed=2)
    observation, reward, terminated, truncated, info = env.step(action)
    assert observation == INVALID_ACTION_MESSAGE
    assert (reward, terminated, truncated, info["invalid_action"]) == (0.0, False, False, True)
    assert env.history == [] and info["task_description"] == question


def test_non_string_action_gets_the_invalid_action_correction():
    env = SearchQAEnv()
    env.reset(seed=2)
    observation, reward, terminated, _, info = env.step(None)  # type: ignore[arg-type]
    assert (observation, reward, terminated, info["invalid_action"]) == (
        INVALID_ACTION_MESSAGE, 0.0, False, True)


def test_search_then_answer():
    env = SearchQAEnv()
    env.reset(seed=0)
    example = env.example
    entity, relation = example.plan[0]
    observation, reward, terminated, _, info = env.step(f"I think.<search> {entity} </search>")
    assert observation.startswith('<information>Doc 1(Title: "') and observation.endswith("</information>")
    assert observation.count("\nDoc ") == 2 and f'(Title: "{entity}")' in observation
    assert (reward, terminated, info["invalid_action"], info["search_query"]) == (0.0, False, False, entity)
    assert env.history == [(entity, observation)]
    observation, reward, terminated, _, info = env.step(f"<answer>{example.golden_answers[-1].upper()}</answer>")
    assert (observation, reward, terminated, info["won"], info["em"], info["f1"]) == ("", 1.0, True, True, True, 1.0)
    # after the answer nothing more happens
    observation, reward, terminated, _, info = env.step("<answer>x</answer>")
    assert (reward, terminated, info["invalid_action"]) == (0.0, True, True)


def test_wrong_answer_scores_zero_with_partial_f1():
    env = SearchQAEnv()
    env.reset(seed=0)
    gold = env.example.golden_answers[0]
    _, reward, terminated, _, info = env.step(f"<answer>{gold} and more words</answer>")
    assert (reward, terminated, info["won"], info["em"], info["sub_em"]) == (0.0, True, False, False, True)
    assert 0.0 < info["f1"] < 1.0


def test_parse_action():
    assert parse_action("<think>x</think><search> who </search>") == ("search", "who")
    assert parse_action("<answer>a\nb</answer>") == ("answer", "a\nb")
    assert parse_action("<answer>a</answer><answer>a</answer>") is None


def test_full_wrapper_stack_with_penalty_and_history():
    """HistoryPrompt (search template, full history) + ParseAction (-0.01) around the env."""
    wrappers = pytest.importorskip("wrappers")
    env = wrappers.ParseAction(
        wrappers.HistoryPrompt(gym.make("PaW/SearchQA-v0"), template="search", history_length=None),
        action_format="search", invalid_penalty=-0.01)
    prompt, info = env.reset(seed=4)
    assert info["task_description"] in prompt
    _, reward, *_ = env.step("I am not sure what to do")
    assert reward == pytest.approx(-0.01)
    rewards, prompt = [], ""
    for _ in range(3):
        action = f"<think>follow the plan</think>{env.unwrapped.expert_action()}"
        prompt, reward, terminated, truncated, info = env.step(action)
        rewards.append(reward)
        if terminated or truncated:
            break
    assert rewards[-1] == 1.0 and info["won"]
    assert all(r == 0.0 for r in rewards[:-1])


def test_gym_make_caps_episodes_at_four_turns():
    env = gym.make("PaW/SearchQA-v0")
    env.reset(seed=0)
    for turn in range(4):
        _, _, terminated, truncated, _ = env.step("<search>Harbor</search>")
    assert (terminated, truncated) == (False, True)


def test_env_does_not_import_torch():
    code = ("import sys, gymnasium as gym, paw_gym; env = gym.make('PaW/SearchQA-v0'); env.reset(seed=0); "
            "env.step(env.unwrapped.expert_action()); assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# -- oracle --------------------------------------------------------------------------------------
def test_oracle_solves_at_least_95_percent_of_embedded_questions():
    env = SearchQAEnv(split="all")
    wins, turns = Counter(), Counter()
    for index in range(len(env.examples)):
        steps = run_oracle(env, options={"index": index})
        hops = len(env.example.plan)
        wins[hops] += steps[-1][4]["won"]
        turns[hops] += len(steps)
    n1, n2 = (sum(1 for e in env.examples if len(e.plan) == h) for h in (1, 2))
    assert (wins[1] + wins[2]) / len(env.examples) >= 0.95
    assert wins[2] / n2 >= 0.95
    # 1-hop: search + answer; 2-hop: two searches + answer (rarely the second passage came along)
    assert turns[1] / n1 == 2 and turns[2] / n2 > 2.9


def test_oracle_reads_answers_from_retrieval_not_from_gold():
    """With a retriever that returns unrelated passages the oracle cannot answer."""
    kb = build_kb(KBConfig())

    class Useless(BM25Retriever):
        def search(self, queries, topk=3):
            return super().search(["zzz unrelated"] * len(queries), topk)

    env = SearchQAEnv(retriever=Useless(kb.documents[:50]), split="all")
    results = [run_oracle(env, options={"index": i})[-1] for i in range(0, len(env.examples), 50)]
    assert all(action == oracle.answer(oracle.UNKNOWN) and not info["won"]
               for action, _, _, _, info in results)


def test_oracle_on_questions_without_plan_is_a_gold_teacher(tmp_path):
    path = tmp_path / "nq_mini.jsonl"
    path.write_text('{"question": "who wrote it", "golden_answers": ["Ann Lee", "A. Lee"]}\n')
    kb = build_kb(KBConfig())
    env = SearchQAEnv(dataset=str(path), retriever=BM25Retriever(kb.documents))
    question, info = env.reset(seed=0)
    assert (info["task_type"], info["task_id"]) == ("nq", "nq-0")
    steps = run_oracle(env, seed=0)
    assert [s[0] for s in steps] == ["<search>who wrote it</search>", "<answer>Ann Lee</answer>"]
    assert steps[-1][2] == 1.0


def test_vector_env_call_expert_action():
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("PaW/SearchQA-v0") for _ in range(3)])
    envs.reset(seed=[0, 1, 2])
    actions = envs.call("expert_action")
    assert len(actions) == 3 and all(a.startswith("<search>") and a.endswith("</search>") for a in actions)
    envs.close()


def test_question_file_without_corpus_names_the_fix(tmp_path):
    path = tmp_path / "q.json"
    path.write_text('[{"question": "q", "answer": "a"}]')
    with pytest.raises(ValueError, match="corpus="):
        SearchQAEnv(dataset=str(path))
