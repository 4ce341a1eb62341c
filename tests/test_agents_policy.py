"""HFPolicy: log-probs / entropies against teacher forcing; padding and stopping edge cases."""

from __future__ import annotations

import pytest
import torch

from agents import HFPolicy
from agents.types import PolicyOutput

PROMPTS = ["", "Your task is to: find the hidden number between 1 and 8.",
           "Go higher. " * 30, "guess 4"]


@pytest.fixture(scope="module", params=["per_row", "padded"])
def policy(tiny_model_dir, request) -> HFPolicy:
    """Both prefill paths: prompts one by one into the batch cache, or one left-padded pass."""
    torch.set_num_threads(1)
    return HFPolicy(tiny_model_dir, attn_implementation="eager", dtype=torch.float32,
                    prefill=request.param)


def teacher_forced(policy: HFPolicy, out: PolicyOutput, temperature: float):
    """Log-probs and entropies of the response from one unpadded forward pass."""
    ids = torch.tensor([out.prompt_ids + out.response_ids])
    with torch.no_grad():
        logits = policy.model(ids).logits[0, len(out.prompt_ids) - 1:-1].float()
    logp = (logits / (temperature or 1.0)).log_softmax(-1)
    chosen = logp.gather(-1, torch.tensor(out.response_ids)[:, None])[:, 0]
    return chosen, -(logp.exp() * logp).sum(-1), logits


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_logprobs_and_entropies_match_teacher_forcing(policy, temperature):
    # " " as a stop string makes rows finish at different steps, so the rows that leave the
    # batch (and the KV cache rows that are dropped) are exercised too.
    for seed in range(10):
        outs = policy.act(PROMPTS, temperature=temperature, max_new_tokens=24, stop=[" "],
                          seed=seed)
        if len({len(o.response_ids) for o in outs}) > 2:
            break
    else:
        pytest.fail("no seed made the rows stop at different steps")
    for out in outs:
        assert len(out.response_ids) == len(out.logprobs) == len(out.entropies) >= 1
        logprobs, entropies, _ = teacher_forced(policy, out, temperature)
        torch.testing.assert_close(torch.tensor(out.logprobs), logprobs, atol=1e-4, rtol=0)
        torch.testing.assert_close(torch.tensor(out.entropies), entropies, atol=1e-4, rtol=0)
        assert out.prompt_ids == policy.encode_prompt(PROMPTS[outs.index(out)], 24)[0]


def test_greedy_takes_argmax_and_reports_untempered_distribution(policy):
    out = policy.act(PROMPTS[1:2], temperature=0.0, max_new_tokens=12, stop=None)[0]
    logprobs, entropies, logits = teacher_forced(policy, out, 0.0)
    assert out.response_ids == logits.argmax(-1).tolist()
    torch.testing.assert_close(torch.tensor(out.logprobs), logprobs, atol=1e-4, rtol=0)
    torch.testing.assert_close(torch.tensor(out.entropies), entropies, atol=1e-4, rtol=0)


def test_left_padding_and_chunking_do_not_change_greedy_outputs(policy):
    alone = [policy.act([p], temperature=0.0, max_new_tokens=10, stop=None)[0] for p in PROMPTS]
    batched = policy.act(PROMPTS, temperature=0.0, max_new_tokens=10, stop=None)
    policy.max_batch_size = 3
    try:
        chunked = policy.act(PROMPTS, temperature=0.0, max_new_tokens=10, stop=None)
    finally:
        policy.max_batch_size = None
    for a, b, c in zip(alone, batched, chunked):
        assert a.response_ids == b.response_ids == c.response_ids
        assert a.prompt_ids == b.prompt_ids == c.prompt_ids
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4,
                                   rtol=0)


def test_a_prompt_repeated_in_a_batch_is_prefilled_once_and_samples_as_if_alone(policy):
    """A rollout group's episodes share their first prompt: it runs once, and every copy
    samples exactly what a batch of distinct prompts would have given it."""
    repeated = [PROMPTS[1], PROMPTS[2], PROMPTS[1], PROMPTS[1], PROMPTS[3]]
    prefills = []
    hook = policy.model.register_forward_pre_hook(
        lambda module, args, kwargs: prefills.append(kwargs["input_ids"].shape[1])
        if kwargs["input_ids"].shape[1] > 1 else None, with_kwargs=True)
    try:
        outputs = policy.act(repeated, temperature=1.0, max_new_tokens=8, stop=None, seed=5)
    finally:
        hook.remove()
    # one per distinct prompt (the padded path runs the whole batch in one pass)
    assert len(prefills) == (3 if policy.prefill == "per_row" else 1)
    greedy = policy.act(repeated, temperature=0.0, max_new_tokens=8, stop=None)
    assert greedy[0].response_ids == greedy[2].response_ids == greedy[3].response_ids == \
        policy.act([PROMPTS[1]], temperature=0.0, max_new_tokens=8, stop=None)[0].response_ids
    for out in outputs:  # each sample's log-probs are its own, from its own copy of the cache
        logprobs = teacher_forced(policy, out, 1.0)[0]
        torch.testing.assert_close(torch.tensor(out.logprobs), logprobs, atol=1e-4, rtol=0)


def test_empty_prompt_gets_the_chat_template_and_generates(policy):
    out = policy.act([""], max_new_tokens=5, seed=0)[0]
    expected = policy.tokenizer(policy.tokenizer.apply_chat_template(
        [{"role": "user", "content": ""}], tokenize=False, add_generation_prompt=True),
        add_special_tokens=False)["input_ids"]
    assert out.prompt_ids == expected and len(out.prompt_ids) > 0
    assert 1 <= len(out.response_ids) <= 5


def test_prompt_longer_than_context_is_cut_from_the_left(tiny_model_dir):
    short = HFPolicy(tiny_model_dir, attn_implementation="eager", dtype=torch.float32,
                     max_context=64)
    long_prompt = "Go lower. " * 100
    full = short.tokenizer(short.chat_text(long_prompt), add_special_tokens=False)["input_ids"]
    with pytest.warns(UserWarning, match="cut from the left"):
        outs = short.act([long_prompt, "guess 1"], temperature=1.0, max_new_tokens=16, seed=1)
    assert outs[0].prompt_truncated and not outs[1].prompt_truncated
    assert outs[0].prompt_ids == full[-(64 - 16):]
    assert short.truncated_prompts == 1
    logprobs, _, _ = teacher_forced(short, outs[0], 1.0)
    torch.testing.assert_close(torch.tensor(outs[0].logprobs), logprobs, atol=1e-4, rtol=0)
    with pytest.raises(ValueError, match="leaves no room"):
        short.act(["x"], max_new_tokens=64)


def test_all_samples_stopping_at_once(policy):
    # Identical prompts under greedy decoding produce identical texts; stopping on the text of
    # the first three tokens makes every row stop at the same step.
    probe = policy.act(["guess 4"], temperature=0.0, max_new_tokens=3, stop=None)[0]
    stop = probe.text
    assert stop, "the probe must produce some text to stop on"
    outs = policy.act(["guess 4"] * 4, temperature=0.0, max_new_tokens=20, stop=[stop])
    for out in outs:
        assert out.finish_reason == "stop"
        assert out.text.endswith(stop) and out.text.count(stop) == 1
        assert out.response_ids == probe.response_ids
    # and at the length limit
    outs = policy.act(PROMPTS, temperature=1.0, max_new_tokens=1, stop=None, seed=5)
    assert all(len(o.response_ids) == 1 for o in outs)


def test_stop_string_ends_the_text(policy):
    outs = policy.act(PROMPTS * 2, temperature=1.0, max_new_tokens=40, stop=["e"], seed=11)
    stopped = [o for o in outs if o.finish_reason == "stop" and "e" in o.text]
    assert stopped, "no row hit the stop string"
    for out in stopped:
        assert out.text.endswith("e") and out.text.count("e") == 1
        assert "e" in policy.tokenizer.decode(out.response_ids, skip_special_tokens=True)


def test_sampling_is_seeded(policy):
    a = policy.act(PROMPTS, max_new_tokens=8, stop=None, seed=7)
    b = policy.act(PROMPTS, max_new_tokens=8, stop=None, seed=7)
    c = policy.act(PROMPTS, max_new_tokens=8, stop=None, seed=8)
    assert [o.response_ids for o in a] == [o.response_ids for o in b]
    assert [o.response_ids for o in a] != [o.response_ids for o in c]


def test_bad_arguments_are_named(policy):
    with pytest.raises(TypeError, match="list of prompts"):
        policy.act("guess 1")
    with pytest.raises(ValueError, match="temperature"):
        policy.act(["x"], temperature=-1)
    assert policy.act([]) == []


def test_lora_adapter_loads_and_reloads_in_place(tiny_model_dir, tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = HFPolicy(tiny_model_dir, attn_implementation="eager", dtype=torch.float32)
    config = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    adapted = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir), config)
    adapted.save_pretrained(tmp_path / "lora")
    policy = HFPolicy(tiny_model_dir, adapter=tmp_path / "lora", attn_implementation="eager",
                      dtype=torch.float32)
    with_adapter = policy.act(PROMPTS[1:2], temperature=0.0, max_new_tokens=6, stop=None)[0]
    without = base.act(PROMPTS[1:2], temperature=0.0, max_new_tokens=6, stop=None)[0]
    assert with_adapter.logprobs != pytest.approx(without.logprobs, abs=1e-4)
    ids = torch.tensor([with_adapter.prompt_ids + with_adapter.response_ids])
    with torch.no_grad():
        expected = adapted.eval()(ids).logits[0, len(with_adapter.prompt_ids) - 1:-1]
    chosen = expected.log_softmax(-1).gather(-1, torch.tensor(with_adapter.response_ids)[:, None])
    torch.testing.assert_close(torch.tensor(with_adapter.logprobs), chosen[:, 0], atol=1e-4,
                               rtol=0)
    # New weights under the same adapter name replace the old ones in place.
    for name, param in adapted.named_parameters():
        if "lora_B" in name:
            param.data.zero_()
    adapted.save_pretrained(tmp_path / "lora2")
    policy.load_adapter(tmp_path / "lora2")
    zeroed = policy.act(PROMPTS[1:2], temperature=0.0, max_new_tokens=6, stop=None)[0]
    assert zeroed.response_ids == without.response_ids
    assert zeroed.logprobs == pytest.approx(without.logprobs, abs=1e-4)
    with pytest.raises(FileNotFoundError, match="adapter_config.json"):
        policy.load_adapter(tmp_path / "nowhere")


def test_sampler_follows_the_distribution():
    from agents.sampling import sample_categorical

    probs = torch.tensor([0.5, 0.0, 0.2, 0.3, 0.0]).repeat(20_000, 1)
    draws = sample_categorical(probs, torch.Generator().manual_seed(0))
    counts = torch.bincount(draws, minlength=5).float() / len(draws)
    assert counts[1] == 0 and counts[4] == 0
    torch.testing.assert_close(counts, probs[0], atol=0.015, rtol=0)


def test_trainer_can_wrap_the_model_in_place(tiny_model_dir):
    from peft import LoraConfig, get_peft_model

    policy = HFPolicy(tiny_model_dir, attn_implementation="eager", dtype=torch.float32)
    policy.model = get_peft_model(policy.model, LoraConfig(r=2, target_modules=["q_proj"]))
    policy.model.train()
    out = policy.act(PROMPTS[1:3], temperature=1.0, max_new_tokens=6, stop=None, seed=0)
    assert policy.model.training  # act samples in eval mode and restores the mode
    logprobs, _, _ = teacher_forced(policy, out[0], 1.0)
    torch.testing.assert_close(torch.tensor(out[0].logprobs), logprobs, atol=1e-4, rtol=0)


def test_model_sources_are_checked_before_any_download(tmp_path, monkeypatch):
    from agents.hf_policy import check_model_source

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    (tmp_path / "empty").mkdir()
    for bad, message in [("", "model is empty"),
                         ("runs/no-model", "model folder 'runs/no-model' does not exist"),
                         (str(tmp_path / "nope"), "does not exist"),
                         ("./x", "does not exist"),
                         ("empty", "has no config.json"),
                         ("bad name!", "neither a folder, a .gguf file, a hub id"),
                         ("missing.gguf", "GGUF file 'missing.gguf' does not exist")]:
        with pytest.raises((ValueError, FileNotFoundError), match=message):
            check_model_source(bad)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        HFPolicy("runs/no-model", device="cpu")  # the loader checks first, no hub retries


def test_a_hub_name_offline_is_one_line_naming_how_to_get_a_model(tmp_path, monkeypatch,
                                                                  tiny_model_dir):
    import shutil

    from huggingface_hub import constants

    from agents.hf_policy import check_model_source

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    for load in (check_model_source, lambda name: HFPolicy(name, device="cpu")):
        with pytest.raises(FileNotFoundError) as raised:
            load("Qwen/Qwen2.5-0.5B-Instruct")
        message = str(raised.value)
        assert "'Qwen/Qwen2.5-0.5B-Instruct' is not a local folder and not in the Hugging Face " \
               "cache" in message and "paw-gym get-model smollm2-135m-instruct" in message
        assert "\n" not in message
    # A model in the Hugging Face cache (its real layout) is accepted offline.
    snapshot = tmp_path / "hub" / "models--Org--Tiny" / "snapshots" / "abc123"
    shutil.copytree(tiny_model_dir, snapshot)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("abc123")
    assert check_model_source("Org/Tiny") == "Org/Tiny"


def _hostile_copy(tiny_model_dir, folder):
    """A copy of the tiny model for one of the hostile variants below."""
    import shutil

    shutil.copytree(tiny_model_dir, folder)
    return folder


def test_a_model_folder_that_would_run_its_own_code_is_one_line(tiny_model_dir, tmp_path,
                                                                capsys):
    """auto_map (config or tokenizer), pickled weights only, and a chat template that reaches
    for Python internals: each refused by `paw-gym train` in one line before loading, and the
    template's planted file is never written."""
    import json

    from training.cli import main

    auto_map = _hostile_copy(tiny_model_dir, tmp_path / "auto_map")
    config = json.loads((auto_map / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_evil.EvilModel"}
    (auto_map / "config.json").write_text(json.dumps(config))

    pickled = _hostile_copy(tiny_model_dir, tmp_path / "pickled")
    for weights in pickled.glob("*.safetensors"):
        weights.rename(weights.with_name("pytorch_model.bin"))

    planted = tmp_path / "planted.txt"
    template = _hostile_copy(tiny_model_dir, tmp_path / "template")
    settings = json.loads((template / "tokenizer_config.json").read_text())
    settings["chat_template"] = ("{{ cycler.__init__.__globals__.os.popen('touch " + str(planted)
                                 + "').read() }}")
    (template / "tokenizer_config.json").write_text(json.dumps(settings))
    (template / "chat_template.jinja").unlink(missing_ok=True)

    for folder, message in [(auto_map, "has an auto_map (AutoModelForCausalLM): it asks to run "
                                       "the folder's own Python code"),
                            (pickled, "has only pickled weights (pytorch_model.bin), which can "
                                      "run code when loaded"),
                            (template, "failed to render (SecurityError")]:
        code = main(["train", "--model", str(folder), "--env_id", "PaW/Shelf-v0",
                     "--output_dir", str(tmp_path / "run"), "--progress", "false"])
        err = capsys.readouterr().err
        assert code != 0 and message in err and err.count("\n") == 1, err
        assert not (tmp_path / "run").exists()
    assert not planted.exists()
