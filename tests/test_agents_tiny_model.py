"""The tiny offline model: sizes, HF loading, tokenizer round trips, and the CLI command."""

from __future__ import annotations

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

from agents.corpus import env_texts, template_texts
from agents.tiny_model import AGENT_TAGS, IM_END, SIZES, count_parameters
from tests.common import GUESS_ID
from training.cli import main

TEXT = ("You are in the middle of a room. On the countertop 1, you see a mug 2 - 12.5 € ™ › "
        "<think>the mug first</think>\n\n  <action>take mug 2 from countertop 1</action> Café")


@pytest.mark.parametrize("size, low, high", [("nano", 0.7e6, 1.5e6), ("micro", 3.5e6, 7e6),
                                             ("mini", 15e6, 25e6)])
def test_sizes_have_the_advertised_parameter_counts(size, low, high):
    shape = SIZES[size]
    fields = {k: v for k, v in vars(shape).items()}
    config = Qwen2Config(tie_word_embeddings=True, **fields)
    assert low <= count_parameters(Qwen2ForCausalLM(config)) <= high


def test_model_and_tokenizer_load_like_a_hub_model(tiny_model_dir):
    from tokenizers import Tokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert isinstance(model, Qwen2ForCausalLM)
    assert (tiny_model_dir / "model.safetensors").is_file()
    assert model.config.vocab_size >= len(tokenizer)
    # Every loader gives the same ids as the trained tokenizer file itself.
    raw = Tokenizer.from_file(str(tiny_model_dir / "tokenizer.json"))
    ids = tokenizer(TEXT, add_special_tokens=False)["input_ids"]
    assert ids == raw.encode(TEXT).ids
    assert tokenizer.decode(ids) == TEXT
    for tag in AGENT_TAGS:  # one token each, and kept in decoded text
        tag_ids = tokenizer(tag, add_special_tokens=False)["input_ids"]
        assert len(tag_ids) == 1 and tokenizer.decode(tag_ids, skip_special_tokens=True) == tag
    chat = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                         add_generation_prompt=True)
    assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tokenizer.eos_token == IM_END
    assert tokenizer.convert_tokens_to_ids(IM_END) in model.generation_config.eos_token_id


def test_corpus_comes_from_the_agent_loop():
    texts = list(env_texts([GUESS_ID], episodes=2, max_steps=3))
    assert any(t.startswith("You are an expert agent. Your task is to: find the hidden number")
               for t in texts)
    assert any(t.startswith("<think>I follow the expert plan.</think><action>guess") for t in texts)
    assert "Correct!" in texts
    assert any("ALFRED embodied Environment" in t for t in template_texts())


def test_cli_builds_a_loadable_model(tmp_path, capsys):
    out = tmp_path / "tiny"
    assert main(["build-tiny-model", "--env", GUESS_ID, "--size", "nano", "--episodes", "2",
                 "--output_dir", str(out)]) == 0
    assert "wrote nano model" in capsys.readouterr().out
    tokenizer = AutoTokenizer.from_pretrained(out)
    # env text was in the training data: its words are single tokens
    assert len(tokenizer(" hidden", add_special_tokens=False)["input_ids"]) == 1
    assert AutoModelForCausalLM.from_pretrained(out).config.model_type == "qwen2"
    # A second build into the same folder is refused (it held a user's model files) unless
    # --overwrite, which replaces only what the first build wrote.
    weights = next(out.glob("*.safetensors")).read_bytes()
    command = ["build-tiny-model", "--env", GUESS_ID, "--episodes", "2", "--seed", "1", "--output_dir",
               str(out)]
    assert main(command) == 2
    assert "already holds the output of an earlier `paw-gym build-tiny-model`; pass " \
           "--overwrite true" in capsys.readouterr().err
    assert next(out.glob("*.safetensors")).read_bytes() == weights
    assert main([*command, "--overwrite", "true"]) == 0
    assert next(out.glob("*.safetensors")).read_bytes() != weights


def test_cli_names_bad_input(tmp_path, capsys):
    assert main(["build-tiny-model", "--env", "Nope/Missing-v0", "--output_dir", str(tmp_path)]) == 2
    assert "Nope/Missing-v0" in capsys.readouterr().err
    assert main(["build-tiny-model", "--import", "no_such_module_xyz", "--output_dir",
                 str(tmp_path)]) == 2
    assert "no_such_module_xyz" in capsys.readouterr().err


@pytest.mark.heavy
@pytest.mark.parametrize("loss_on", ["all", "action"])
def test_cli_pretrains_on_noisy_expert_episodes(tmp_path, capsys, loss_on):
    out = tmp_path / "tiny"
    assert main(["build-tiny-model", "--env", GUESS_ID, "--episodes", "2", "--output_dir", str(out),
                 "--pretrain-steps", "20", "--pretrain-episodes", "10", "--epsilon", "0.3",
                 "--pretrain-loss-on", loss_on]) == 0
    printed = capsys.readouterr().out
    assert f"pretrained {out} ({loss_on} tokens) for 20 steps on 10 episodes per env" in printed
    first, last = (float(x) for x in printed.split("loss ")[1].split(" in ")[0].split(" -> "))
    assert last < first
    assert AutoModelForCausalLM.from_pretrained(out).config.model_type == "qwen2"


@pytest.mark.parametrize("flags, named", [
    (["--pretrain-steps", "-1"],
     "pretrain_steps=-1 is invalid; expected an integer in [0, 10,000,000]"),
    (["--epsilon", "2"], "epsilon=2.0 is invalid; expected a probability in [0, 1]"),
    (["--pretrain-loss-on", "obs"], "--pretrain_loss_on"),
    (["--pretrain-steps", "5", "--env", "Test/GuessNumber-v0", "--pretrain-episodes", "0"],
     "pretrain_episodes=0 is invalid"),
])
def test_cli_names_bad_pretraining_flags_before_any_work(tmp_path, capsys, flags, named):
    out = tmp_path / "tiny"
    assert main(["build-tiny-model", "--output_dir", str(out), *flags]) == 2
    assert named in capsys.readouterr().err and not out.exists()
