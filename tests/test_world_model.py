"""World models from a replay (training/world_model/, paw-gym train-wm / eval-wm): rewards,
GRPO advantages, the easy filter, the episode split, the three methods end to end on the tiny
model, eval-wm and its recomputation from a predictions file, and the CLI's one-line refusals."""

from __future__ import annotations

import json
import random

import pytest

from training.cli import main
from training.world_model import (EmbeddingReward, WMExample, episode_keys, exact_match,
                                  is_validation, keep_not_too_easy, load_examples, make_reward,
                                  parse_prediction, rouge_l_binned, split_examples, wm_prompt)

GUESS = "Test/GuessNumber-v0"


@pytest.fixture(scope="module")
def minilm():
    pytest.importorskip("sentence_transformers")
    return EmbeddingReward()


@pytest.fixture(scope="module")
def guess_replay(tmp_path_factory):
    """40 random-agent episodes of the GuessNumber test env (next observations: Go higher.,
    Go lower., Correct!)."""
    from training.world_model import record_replay

    return record_replay(GUESS, "random", 40, tmp_path_factory.mktemp("wm") / "replay")


@pytest.fixture(scope="module")
def torch_one_thread():
    torch = pytest.importorskip("torch")
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield torch
    torch.set_num_threads(previous)


def weights(path):
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


# -- prompt format and rewards -----------------------------------------------------------------

def test_parse_prediction_reads_the_last_observation_tag():
    assert parse_prediction("<think>hm</think><observation> Go higher. </observation>") == \
        "Go higher."
    assert parse_prediction("<think>no <observation>x</observation></think>"
                            "<observation>y</observation>") == "y"
    assert parse_prediction("<think>cut by the budget</think><observation>You hold") == "You hold"
    assert parse_prediction("<think>forgot the tag</think>Go higher.") == ""
    prompt = wm_prompt("PROMPT-TEXT", "<action>guess 3</action>")
    assert "PROMPT-TEXT" in prompt and "<action>guess 3</action>" in prompt
    assert "<observation>" in prompt


def test_embedding_reward_is_one_exactly_from_tau(minilm):
    target = "You hold the pink shirt. Pay for it or put it back."
    near = "You hold the green mug. Pay for it or put it back."
    cosine = minilm.similarities([near], [target])[0]
    assert 0.3 < cosine < 0.999
    assert EmbeddingReward(tau=cosine - 1e-4)(near, target) == 1.0
    assert EmbeddingReward(tau=cosine + 1e-4)(near, target) == 0.0
    assert minilm(target, target) == 1.0
    assert minilm("The capital of France is Paris.", target) == 0.0
    assert minilm("", target) == 0.0  # an answer without the tag never scores
    assert minilm.batch([target, near, ""], [target] * 3) == \
        [minilm(p, target) for p in (target, near, "")]


def test_a_binary_group_gets_the_grpo_advantages(minilm):
    from training.rl.advantages import grpo

    target, wrong = "Go higher.", "You bought the pink shirt. Task complete."
    rewards = minilm.batch([target, wrong, wrong, target], [target] * 4)
    assert rewards == [1.0, 0.0, 0.0, 1.0]
    # mean 0.5, unbiased std sqrt(1/3): ±0.5 / 0.5774 = ±0.866
    advantages = grpo(rewards, [0, 0, 0, 0]).tolist()
    assert advantages == pytest.approx([0.8660, -0.8660, -0.8660, 0.8660], abs=1e-3)
    assert grpo([1.0, 1.0, 1.0, 1.0], [0] * 4).abs().max() < 1e-5  # a uniform group: no signal


def test_rouge_and_exact_rewards():
    target = "you hold the pink shirt"
    assert rouge_l_binned(target, target) == 1.0
    assert rouge_l_binned("you hold the green mug", target) == 0.6  # F1 0.6
    assert rouge_l_binned("you hold the pink", target) == 0.8  # F1 0.889, rounded down
    assert rouge_l_binned("", target) == 0.0
    assert exact_match("  Go   higher. ", "Go higher.") == 1.0
    assert exact_match("Go lower.", "Go higher.") == 0.0
    assert exact_match("", "") == 0.0


def test_rewards_by_name():
    assert make_reward("rouge") is rouge_l_binned
    assert make_reward("exact") is exact_match
    assert make_reward("training.world_model:exact_match") is exact_match
    assert isinstance(make_reward("embedding", tau=0.9), EmbeddingReward)
    for bad in ("cosine", "training.world_model:nothing_here", "no_such_module:f"):
        with pytest.raises(ValueError, match="embedding, rouge, exact"):
            make_reward(bad)


# -- the easy filter and the split -------------------------------------------------------------

def test_easy_items_are_kept_with_probability_p():
    easy, hard, almost = [[1.0] * 10] * 1000, [[0.0] * 10] * 500, [[1.0] * 9 + [0.0]] * 500
    keep = keep_not_too_easy(easy + hard + almost, keep_prob=0.1, seed=3)
    assert all(keep[1000:])  # not easy (mean < 1): always kept
    kept_easy = sum(keep[:1000])
    assert 70 <= kept_easy <= 130
    assert keep == keep_not_too_easy(easy + hard + almost, keep_prob=0.1, seed=3)
    assert keep != keep_not_too_easy(easy + hard + almost, keep_prob=0.1, seed=4)
    # the seeded draws: one per easy item, in order
    rng = random.Random(3)
    assert keep[:1000] == [rng.random() < 0.1 for _ in range(1000)]
    # a lower threshold flags the 9-of-10 items too
    assert sum(keep_not_too_easy(almost, keep_prob=0.0, threshold=0.9)) == 0


def test_split_is_by_episode_and_deterministic(guess_replay):
    examples = load_examples(guess_replay)
    train, validation = split_examples(examples, seed=0, val_fraction=0.1)
    assert len(train) + len(validation) == len(examples)
    train_episodes = {e.episode_id for e in train}
    validation_episodes = {e.episode_id for e in validation}
    assert validation_episodes and not train_episodes & validation_episodes
    assert 1 <= len(validation_episodes) <= 10  # ~10 % of 40 episodes
    shuffled = random.Random(1).sample(examples, len(examples))
    assert {e.episode_id for e in split_examples(shuffled, 0, 0.1)[1]} == validation_episodes
    assert split_examples(examples, 0, 0.1) == (train, validation)
    other = {e.episode_id for e in split_examples(examples, 7, 0.1)[1]}
    assert other != validation_episodes
    keys = episode_keys(examples)
    assert all(is_validation(keys[e], 0, 0.1) for e in validation_episodes)
    assert split_examples(examples, 0, 0.0)[1] == []
    assert all(isinstance(e, WMExample) and e.o_next for e in examples)


def test_a_replay_recorded_again_is_split_the_same_way(guess_replay, tmp_path):
    """Episode ids are random uuids; the split (and so train-wm) must not depend on them."""
    from training.world_model import record_replay

    again = load_examples(record_replay(GUESS, "random", 40, tmp_path / "again"))
    first = load_examples(guess_replay)
    assert {e.episode_id for e in again}.isdisjoint(e.episode_id for e in first)
    without_ids = [[(e.h, e.a, e.o_next) for e in part] for part in split_examples(first, 0, 0.1)]
    assert [[(e.h, e.a, e.o_next) for e in part] for part in split_examples(again, 0, 0.1)] == \
        without_ids


# -- train-wm and eval-wm end to end -----------------------------------------------------------

@pytest.fixture(scope="module")
def sft_model(tiny_model_dir, guess_replay, tmp_path_factory, torch_one_thread):
    """The tiny model fine-tuned by train-wm --method sft until it writes the answer format."""
    out = tmp_path_factory.mktemp("wm") / "sft"
    assert main(["train-wm", "--method", "sft", "--model", str(tiny_model_dir), "--replay",
                 str(guess_replay), "--output_dir", str(out), "--steps", "60", "--batch_size",
                 "8", "--lr", "3e-3", "--progress", "false", "--log_every", "60"]) == 0
    return out


@pytest.mark.heavy
def test_sft_output_loads_and_changed_the_weights(sft_model, tiny_model_dir):
    from training.evaluate import load_policy
    from training.infra.metrics_log import read_metrics

    before, after = weights(tiny_model_dir), weights(sft_model / "model")
    assert any(not (before[k] == after[k]).all() for k in before)
    losses = [r["wm_loss"] for r in read_metrics(sft_model / "metrics.jsonl")]
    assert len(losses) == 60 and losses[-1] < 0.5 * losses[0]
    assert (sft_model / "curves.png").is_file()
    policy = load_policy(checkpoint=sft_model / "model")
    answer = policy.act([wm_prompt("Your task is to: guess the number.", "<action>guess 3"
                                   "</action>")], temperature=0.0, max_new_tokens=40,
                        stop=("</observation>",))[0].text
    assert answer.startswith("<think></think><observation>")  # it learned the answer format


def test_cmae_trains_on_the_target_tokens(tiny_model_dir, guess_replay, tmp_path,
                                          torch_one_thread):
    from training.evaluate import load_policy
    from training.infra.metrics_log import read_metrics

    out = tmp_path / "cmae"
    assert main(["train-wm", "--method", "cmae", "--model", str(tiny_model_dir), "--replay",
                 str(guess_replay), "--output_dir", str(out), "--steps", "3", "--batch_size",
                 "4", "--lr", "1e-3", "--rho", "0.2", "--progress", "false"]) == 0
    before, after = weights(tiny_model_dir), weights(out / "model")
    assert any(not (before[k] == after[k]).all() for k in before)
    records = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2, 3]
    # an untrained model is unsure of almost every token: CMAE keeps (does not clip) them
    assert all(0.0 < r["wm_loss"] <= 1.0 and r["wm_clipped_frac"] < 0.5 for r in records)
    policy = load_policy(checkpoint=out / "model")

    # eval-wm reads a cmae output in the form it trained: o_next after h ⊕ a ⊕ the next turn
    from training.warmstart.pretrain import next_observation_accuracy
    from training.world_model import load_examples, select_split

    assert main(["eval-wm", "--checkpoint", str(out), "--output_dir", str(tmp_path / "eval"),
                 "--name", "cmae"]) == 0
    table = json.loads((tmp_path / "eval" / "cmae.json").read_text())
    assert table["meta"]["format"] == "transition" and table["meta"]["wm_context"] == "next_turn"
    held_out = select_split(load_examples(guess_replay), "validation", 0, 0.1)
    expected = next_observation_accuracy(
        policy, [{"h": e.h, "a": e.a, "o_next": e.o_next} for e in held_out], 4096, "next_turn")
    overall = table["rows"][-1]
    assert overall["transitions"] == expected["transitions"] == len(held_out)
    assert (overall["exact"], overall["token"]) == pytest.approx((expected["exact"],
                                                                  expected["token"]))
    assert not (tmp_path / "eval" / "cmae.predictions.jsonl").exists()


@pytest.mark.heavy
def test_rwml_grpo_from_the_sft_model(sft_model, guess_replay, tmp_path):
    """RWML with LoRA (reference = adapters disabled), the exact-match reward and the easy
    filter: sampled groups with different rewards give the adapter a gradient."""
    from safetensors.torch import load_file

    from training.evaluate import load_policy
    from training.infra.metrics_log import read_metrics

    out = tmp_path / "rwml"
    assert main(["train-wm", "--method", "rwml", "--model", str(sft_model / "model"),
                 "--replay", str(guess_replay), "--output_dir", str(out), "--steps", "2",
                 "--batch_size", "4", "--group_size", "4", "--lr", "1e-3", "--reward",
                 "exact", "--max_new_tokens", "24", "--kl_coef", "0.01", "--lora", "true",
                 "--lora_r", "4", "--easy_sft_steps", "2", "--easy_samples", "2",
                 "--easy_sft_fraction", "0.2", "--progress", "false"]) == 0
    records = read_metrics(out / "metrics.jsonl")
    assert len(records) == 2
    assert all(r["tag_frac"] > 0.5 for r in records)
    assert any(r["nonuniform_groups"] > 0 for r in records)
    assert records[1]["kl"] > 0  # the adapter moved away from the reference after step 1
    adapter = load_file(str(out / "model" / "adapter_model.safetensors"))
    lora_b = [v for k, v in adapter.items() if "lora_B" in k]
    assert lora_b and any(v.abs().max() > 0 for v in lora_b)  # B starts at zero
    setup = json.loads((out / "wm_config.json").read_text())
    assert setup["examples"] == setup["train_examples"] and 0 < setup["kept"] <= setup["examples"]
    policy = load_policy(checkpoint=out / "model")
    assert type(policy.model).__name__ == "PeftModelForCausalLM"


@pytest.mark.heavy
def test_eval_wm_reproduces_its_table_from_the_predictions(sft_model, guess_replay, tmp_path,
                                                           torch_one_thread, minilm):
    out = tmp_path / "eval"
    assert main(["eval-wm", "--checkpoint", str(sft_model), "--split", "all", "--limit", "8",
                 "--samples", "3", "--max_new_tokens", "24", "--output_dir", str(out), "--name",
                 "sft"]) == 0
    table = json.loads((out / "sft.json").read_text())
    predictions = [json.loads(line) for line in
                   (out / "sft.predictions.jsonl").read_text().splitlines()]
    assert len(predictions) == 8 and all(len(p["predictions"]) == 3 for p in predictions)
    assert {"h", "a", "target", "answers", "task_type"} <= set(predictions[0])
    overall = table["rows"][-1]
    assert overall["task_type"] == "overall" and overall["items"] == 8
    exact = [exact_match(p, r["target"]) for r in predictions for p in r["predictions"]]
    assert overall["exact"] == pytest.approx(100 * sum(exact) / len(exact))
    assert overall["exact"] > 0  # the SFT model gets some Go higher. / Go lower. right
    assert main(["eval-wm", "--from_predictions", str(out / "sft.predictions.jsonl"),
                 "--output_dir", str(out), "--name", "again"]) == 0
    assert json.loads((out / "again.json").read_text())["rows"] == table["rows"]
    assert table["meta"]["split"] == "all" and table["meta"]["transitions"] == 8


@pytest.mark.heavy
def test_eval_wm_refuses_the_split_of_an_output_of_the_earlier_id_keyed_train_wm(
        sft_model, tmp_path, capsys):
    saved = json.loads((sft_model / "wm_config.json").read_text())
    assert saved["split_key"] == "episode-transitions-sha256"
    del saved["split_key"]  # what train-wm wrote before the split was keyed by content
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / "wm_config.json").write_text(json.dumps(saved))
    assert main(["eval-wm", "--checkpoint", str(earlier), "--output_dir", str(tmp_path / "eval")]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "split episodes by their random ids" in error, error
    assert "--split all" in error and not (tmp_path / "eval").exists()


@pytest.mark.parametrize("argv, message", [
    (["train-wm", "--reward", "cosine", "--replay", "."], "reward 'cosine' is not one of"),
    (["train-wm", "--method", "ppo", "--replay", "."], "invalid choice: 'ppo'"),
    (["train-wm", "--tau", "1.5", "--replay", "."], "tau=1.5 is invalid; expected a cosine in [-1, 1]"),
    (["train-wm", "--group_size", "1", "--replay", "."], "group_size=1 is invalid; expected an integer >= 2 for rwml"),
    (["train-wm", "--steps", "0", "--replay", "."],
     "steps=0 is invalid; expected an integer in [1, 10,000,000]"),
    (["train-wm", "--rho", "-1", "--replay", "."], "rho=-1.0 is invalid; expected a probability in [0, 1]"),
    (["train-wm", "--lr", "nan", "--replay", "."], "lr=nan is invalid; expected a number (finite)"),
    (["train-wm", "--model", "TINY"], "give --replay DIR"),
    (["train-wm", "--replay", "/no/such/replay"], "replay='/no/such/replay' does not exist"),
    (["train-wm", "--record_env", "PaW/Shelf-v9"], "unknown env id 'PaW/Shelf-v9'"),
    (["eval-wm", "--replay", "."], "give --model or --checkpoint"),
    (["eval-wm", "--from_predictions", "/no/such.jsonl"],
     "from_predictions='/no/such.jsonl' does not exist"),
    (["eval-wm", "--split", "test", "--model", "m"], "invalid choice: 'test'"),
    (["eval-wm", "--tau", "-2", "--model", "m"], "tau=-2.0 is invalid; expected a cosine in [-1, 1]"),
])
def test_the_cli_refuses_bad_values_in_one_line(argv, message, capsys, tmp_path,
                                                tiny_model_dir):
    argv = [str(tiny_model_dir) if arg == "TINY" else arg for arg in argv]
    assert main([*argv, *(["--output_dir", str(tmp_path)] if argv[0] == "train-wm" else [])]) \
        == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and message in error, error


def test_train_wm_keeps_a_users_output_folder_unless_overwrite(tmp_path, capsys,
                                                               tiny_model_dir):
    out = tmp_path / "wm"
    out.mkdir()
    (out / "model.safetensors").write_text("a user's model")
    assert main(["train-wm", "--record_env", "PaW/Shelf-v0", "--model", str(tiny_model_dir),
                 "--output_dir", str(out)]) == 2
    assert "already holds 1 entries paw-gym did not write; pass --overwrite true" in \
        capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["model.safetensors"]
