"""training.warmstart.pretrain: the transcript rows, the loss going down, the probe, the build cache."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from agents.hf_policy import HFPolicy  # noqa: E402
from training.warmstart.pretrain import (PretrainConfig, cached_build,  # noqa: E402
                               episode_transcripts, next_observation_accuracy, reading_probe,
                               run_pretrain, trained_part, transcript_parts)
from training.warmstart.sft import record_expert_demos  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    return record_expert_demos("Test/GuessNumber-v0", 12, tmp_path_factory.mktemp("demos"),
                               epsilon=0.5, max_steps=6)


def test_rows_are_prompt_action_next_turn_and_next_observation(tiny_model_dir, demos):
    from wrappers import WMReplay

    policy = HFPolicy(str(tiny_model_dir), device="cpu")
    rows = transcript_parts(policy, demos, max_seq_len=4096)
    records = [r for r in WMReplay.load(demos) if r["a"]]
    assert len(rows) == len(records)
    first = records[0]
    prompt, _ = policy.encode_prompt(first["h"], max_new_tokens=1)
    encode = lambda text: policy.tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa
    assert rows[0].ids == prompt + encode(first["a"]) + \
        encode("<|im_end|>\n<|im_start|>user\n") + encode(first["o_next"])


def test_episode_rows_are_the_transcripts_a_transcript_agent_plays(tiny_model_dir, demos):
    """rows='episode': one row per episode, chat(h_1) ⊕ a_1 ⊕ s ⊕ h_2 ⊕ g ⊕ a_2 … ⊕ s ⊕ o_{T+1}
    ⊕ e (s: the template's turn separator; g: its generation prompt; e: its end of turn)."""
    from wrappers import WMReplay

    policy = HFPolicy(str(tiny_model_dir), device="cpu")
    rows = episode_transcripts(policy, demos, max_seq_len=4096)
    records = [r for r in WMReplay.load(demos) if r["a"]]
    episodes = list(dict.fromkeys(r["episode_id"] for r in records))  # rows: in replay order
    assert len(rows) == len(episodes)
    first = sorted((r for r in records if r["episode_id"] == episodes[0]), key=lambda r: r["step"])
    encode = lambda text: policy.tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa
    expected, _ = policy.encode_prompt(first[0]["h"], max_new_tokens=1)
    turn, generation = encode("<|im_end|>\n<|im_start|>user\n"), \
        encode("<|im_end|>\n<|im_start|>assistant\n")
    for step, record in enumerate(first):
        expected = expected + encode(record["a"])
        if step + 1 < len(first):  # o_{t+1} tokenised on its own inside the next prompt
            h, o = first[step + 1]["h"], record["o_next"]
            at = h.index(o)
            expected += turn + encode(h[:at]) + encode(o) + encode(h[at + len(o):]) + generation
    expected += turn + encode(first[-1]["o_next"]) + encode("<|im_end|>")
    assert rows[episodes.index(first[0]["episode_id"])] == expected
    assert max(map(len, episode_transcripts(policy, demos, max_seq_len=50))) == 50
    with pytest.raises(ValueError, match="rows='episode'"):
        run_pretrain(PretrainConfig(model=str(tiny_model_dir), replay=str(demos),
                                    rows="episode", wm_context="end_of_turn"))


@pytest.mark.heavy
def test_pretraining_lowers_the_loss_and_saves_a_loadable_model(tiny_model_dir, demos, tmp_path):
    out, history = run_pretrain(PretrainConfig(model=str(tiny_model_dir), replay=str(demos),
                                               output_dir=str(tmp_path / "base"), steps=40,
                                               batch_size=4, device="cpu", progress=False))
    assert [h["step"] for h in history] == list(range(2, 41, 2))
    assert history[-1]["loss"] < 0.5 * history[0]["loss"]
    policy = HFPolicy(str(out), device="cpu")
    score = reading_probe(policy, "Test/GuessNumber-v0", range(8))
    assert 0.0 <= score <= 1.0
    with pytest.raises(ValueError, match="steps"):
        run_pretrain(PretrainConfig(model=str(tiny_model_dir), replay=str(demos), steps=0))


@pytest.mark.heavy
def test_next_observation_accuracy_is_greedy_decoding_of_the_next_observation(
        tiny_model_dir, demos, tmp_path):
    out, _ = run_pretrain(PretrainConfig(model=str(tiny_model_dir), replay=str(demos),
                                         output_dir=str(tmp_path / "base"), steps=100,
                                         batch_size=4, device="cpu", progress=False))
    scores = {}
    for name, model in (("random", tiny_model_dir), ("pretrained", out)):
        policy = HFPolicy(str(model), device="cpu")
        result = next_observation_accuracy(policy, demos)
        # Literal reference: greedy generation after h ⊕ a ⊕ the next turn's header, compared
        # token by token with the real next observation.
        matches = 0
        parts = [row for row in transcript_parts(policy, demos, 1024) if row.obs_len]
        for row in parts:
            context = torch.tensor([row.ids[:row.obs_start]])
            generated = policy.model.generate(context, max_new_tokens=row.obs_len,
                                              do_sample=False, min_new_tokens=row.obs_len,
                                              pad_token_id=0)
            matches += generated[0, context.shape[1]:].tolist() == row.ids[row.obs_start:]
        assert result["transitions"] == len(parts)
        assert result["exact"] == pytest.approx(100.0 * matches / len(parts))
        scores[name] = result
    assert scores["pretrained"]["token"] > scores["random"]["token"] + 20
    assert scores["pretrained"]["exact"] > 0


def test_loss_on_picks_the_trained_tokens_of_a_row():
    from agents.serialization import Serialized

    row = Serialized(ids=[1, 2, 3, 4, 5, 6, 7, 8], prompt_len=3, action_len=2, separator_len=1,
                     obs_len=2)
    assert trained_part(row, "all") == ([1, 2, 3, 4, 5, 6, 7, 8], 1)
    assert trained_part(row, "no_next_observation") == ([1, 2, 3, 4, 5], 1)
    assert trained_part(row, "action") == ([1, 2, 3, 4, 5], 3)


@pytest.mark.heavy
def test_a_start_pretrained_without_next_observations_knows_less_of_the_world(
        tiny_model_dir, demos, tmp_path):
    """The same demos and steps: the all-token start predicts next observations far better
    than a start trained on h ⊕ a or on the actions alone, which still learned to act (its
    action tokens' loss fell)."""
    scores, histories = {}, {}
    for loss_on in ("all", "no_next_observation", "action"):
        out, histories[loss_on] = run_pretrain(PretrainConfig(
            model=str(tiny_model_dir), replay=str(demos), output_dir=str(tmp_path / loss_on),
            steps=100, batch_size=4, device="cpu", progress=False, loss_on=loss_on))
        scores[loss_on] = next_observation_accuracy(HFPolicy(str(out), device="cpu"), demos)
    for blind in ("no_next_observation", "action"):
        assert scores[blind]["token"] < scores["all"]["token"] - 20, (blind, scores)
        assert scores[blind]["exact"] < scores["all"]["exact"]
    assert histories["action"][-1]["loss"] < 0.5 * histories["action"][0]["loss"]
    with pytest.raises(ValueError, match="loss_on='action' needs rows='transition'"):
        PretrainConfig(rows="episode", loss_on="action")


def test_next_observation_tokens_split_into_kept_and_changed(tiny_model_dir, demos):
    policy = HFPolicy(str(tiny_model_dir), device="cpu")
    scores = next_observation_accuracy(policy, demos)
    share = scores["changed_share"] / 100
    assert 0 < share < 1
    assert scores["token"] == pytest.approx(
        (1 - share) * scores["token_kept"] + share * scores["token_changed"])
    # An observation that repeats the prompt's text has no changed token.
    echo = [{"h": "Guess a number. Go higher.", "a": "<action>guess 3</action>",
             "o_next": "Guess a number. Go higher."}]
    assert next_observation_accuracy(policy, echo)["changed_share"] == 0.0


def test_cached_build_builds_once_and_never_keeps_a_failed_build(tmp_path, monkeypatch):
    monkeypatch.setenv("PAW_GYM_CACHE", str(tmp_path))
    calls = []

    def build(folder):
        calls.append(folder)
        (folder / "weights").write_text("w")

    said = []
    first, built = cached_build({"a": 1}, build, log=said.append)
    again, built_again = cached_build({"a": 1}, build, log=said.append)
    assert (built, built_again, first, len(calls)) == (True, False, again, 1)
    assert said == [f"building the base model (once: it is cached in {first}, and every later "
                    "run with the same recipe and library versions reuses it)",
                    f"reusing the base model cached in {first}"]
    assert json.loads((first / "recipe.json").read_text()) == {"a": 1}
    assert first.parent == tmp_path / "tiny-base"

    def broken(folder):
        (folder / "half").write_text("x")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        cached_build({"a": 2}, broken)
    assert sorted(p.name for p in (tmp_path / "tiny-base").iterdir()) == [first.name]
