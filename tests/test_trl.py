"""TRL integration (training.integrations.trl) and the transcript agent it plays episodes with:
real TRL GRPOTrainer, real env, the tiny model."""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch

pytest.importorskip("trl")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is experimental in TRL

from agents import HFPolicy, TranscriptAgent, rollout  # noqa: E402
from agents.transcript import TRANSCRIPT_TEMPLATE  # noqa: E402
from training.infra.model_config import ModelConfig  # noqa: E402
from training.integrations.trl import (EnvRollout, PaWGRPOConfig, PaWGRPOTrainer,  # noqa: E402
                                       task_dataset, task_seed, transcript_wm_loss)

SHELF = dict(template=TRANSCRIPT_TEMPLATE, history_length=0, split="train")


def test_a_transcript_agent_acts_on_its_own_ids_and_the_transcript_holds_every_observation(
        tiny_model_dir, one_torch_thread):
    """Each step is sampled from the previous context plus the generated ids plus the env's
    turn; the rebuilt transcript marks generated tokens, and o_{t+1} (the final one included)
    sits at its span, tokenised on its own right after the chat template's turn separator."""
    policy = HFPolicy(tiny_model_dir, device="cpu")
    agent = TranscriptAgent(policy)
    episodes = rollout(agent, "PaW/Shelf-v0", 2, 2, max_new_tokens=12, max_steps=3, seed=3,
                       **SHELF)
    separator = agent.turns.serializer.separator
    assert policy.tokenizer.decode(separator) == "<|im_end|>\n<|im_start|>user\n"
    for episode in episodes:
        row = agent.turns.episode(episode)  # raises unless each step saw its transcript
        steps = episode.transitions
        assert len(row.obs_spans) == len(steps)
        assert sum(row.action_mask) == sum(len(s.output.response_ids) for s in steps)
        assert [p for p, m in zip(row.logprobs, row.action_mask) if m] == pytest.approx(
            [p for s in steps for p in s.output.logprobs])
        for step, (start, length) in zip(steps, row.obs_spans):
            assert row.completion_ids[start:start + length] == policy.tokenizer(
                step.next_observation, add_special_tokens=False)["input_ids"]
            assert row.action_mask[start:start + length] == [0] * length
        start, length = row.obs_spans[-1]  # the final observation, then the end of its turn
        assert policy.tokenizer.decode(row.completion_ids[start + length:]) == "<|im_end|>"
        for t in range(1, len(steps)):
            context = steps[t].output.prompt_ids
            previous = steps[t - 1].output
            assert context[:len(previous.prompt_ids) + len(previous.response_ids)] == \
                previous.prompt_ids + previous.response_ids


def test_act_ids_samples_what_act_samples_and_refuses_a_prompt_past_the_context(
        tiny_model_dir, one_torch_thread):
    """The same ids and seed through act and act_ids give the same response; a transcript that
    leaves no room for max_new_tokens in the context is one clear error."""
    policy = HFPolicy(tiny_model_dir, device="cpu")
    [by_text] = policy.act(["Go higher."], max_new_tokens=8, seed=4)
    [by_ids] = policy.act_ids([by_text.prompt_ids], max_new_tokens=8, seed=4)
    assert by_ids.response_ids == by_text.response_ids and by_ids.logprobs == by_text.logprobs
    with pytest.raises(ValueError, match=r"exceeds the model's context of \d+ tokens"):
        policy.act_ids([[1] * policy.max_context], max_new_tokens=8)


def test_a_trajectory_not_played_from_its_transcript_is_refused(tiny_model_dir,
                                                                one_torch_thread):
    policy = HFPolicy(tiny_model_dir, device="cpu")
    [episode] = rollout(policy, "PaW/Shelf-v0", 1, 1, max_new_tokens=12, max_steps=2, seed=0,
                        **SHELF)
    if len(episode.transitions) < 2:
        pytest.skip("the episode ended after one step")
    with pytest.raises(ValueError, match="not sampled from its transcript"):
        TranscriptAgent(policy).turns.episode(episode)


def _trainer(model, tmp_path, **settings) -> PaWGRPOTrainer:
    env = EnvRollout("PaW/Shelf-v0", max_steps=3, max_new_tokens=12,
                     env_kwargs={"split": "train"})
    args = PaWGRPOConfig(**{**dict(
        output_dir=str(tmp_path / "trl"), num_generations=2, per_device_train_batch_size=4,
        max_steps=1, learning_rate=1e-3, report_to=[], save_strategy="no", use_cpu=True,
        seed=0, logging_steps=1, alpha=0.5, r_max=10.0, disable_tqdm=True), **settings})
    return PaWGRPOTrainer(model=model if isinstance(model, ModelConfig) else str(model),
                          env=env, args=args,
                          train_dataset=task_dataset("PaW/Shelf-v0", range(4), split="train"))


def test_the_world_model_term_equals_the_native_trainers_on_the_same_transitions(
        tiny_model_dir, tmp_path, one_torch_thread):
    """One generation batch (2 tasks × 2 episodes) through PaWGRPOTrainer's own path (TRL's
    forward pass, its rows split and shuffled): its L_WM equals the native trainer's
    Σ w_wm · ℓ_WM over the same trajectories, serialised by training.rl.rollout_batch (with each
    step's transcript as h_t), selected, weighted and scored by the native functions."""
    from training.config import TrainConfig
    from training.rl.losses import wm_token_loss
    from training.rl.objective import ObjectiveSettings, objective_weights
    from training.rl.rollout_batch import build_batch
    from agents.serialization import TransitionSerializer

    trainer = _trainer(tiny_model_dir, tmp_path)
    trainer.model.train()
    rows = list(trainer.train_dataset)[:2]
    batch = trainer._generate_and_score_completions([rows[0], rows[0], rows[1], rows[1]])
    trainer.current_gradient_accumulation_steps = 1  # what trainer.train() sets per step
    trainer._compute_loss(trainer.model, batch)
    trl_term = trainer._metrics["train"]["paw/wm_loss"][-1]

    trajectories = trainer.env.last.trajectories
    for index, trajectory in enumerate(trajectories):
        trajectory.group_index = index // 2  # TRL's groups: blocks of num_generations rows
    policy = HFPolicy(trainer.model, trainer.processing_class, device="cpu")
    config = TrainConfig(model=str(tiny_model_dir), env_id="PaW/Shelf-v0", alpha=0.5,
                         r_max=10.0, max_seq_len=4096, algo="grpo")
    native = build_batch(trajectories, TransitionSerializer.for_policy(policy, "next_turn"),
                         config)
    _, w_wm = objective_weights(native.samples, native.selected, native.group_lambda,
                                ObjectiveSettings())
    assert int(native.selected.sum()) > 0
    terms = []
    with torch.no_grad():
        for sample, weight in zip(native.samples, w_wm):
            if weight == 0:
                continue
            ids = torch.tensor([sample.input_ids])
            logits = trainer.model(input_ids=ids).logits[0].float().log_softmax(-1)
            start = len(sample.input_ids) - sample.obs_len
            logprobs = logits[start - 1:-1].gather(-1, ids[0, start:, None])[:, 0]
            terms.append(weight * wm_token_loss(logprobs[None], torch.ones_like(logprobs)[None]))
    assert trl_term > 0 and trl_term == pytest.approx(float(sum(terms)), rel=1e-5)


def test_trl_trains_the_tiny_model_with_paw(tiny_model_dir, tmp_path, one_torch_thread):
    """Two GRPO + PaW steps through trainer.train(): the weights move, and TRL's log has the
    env's success and the WM term."""
    trainer = _trainer(tiny_model_dir, tmp_path, max_steps=2)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    assert any(not torch.equal(b, p) for b, p in zip(before, trainer.model.parameters()))
    logged = [h for h in trainer.state.log_history if "paw/wm_loss" in h]
    assert len(logged) == 2
    assert all(0 <= h["env/success"] <= 1 and h["paw/wm_loss"] > 0 and h["paw/lambda"] > 0
               for h in logged)


def test_the_wm_loss_of_a_transcript_row_is_the_native_per_transition_loss():
    """transcript_wm_loss over a row holding two transitions = Σ_k w_k ℓ_WM(k), with ℓ_WM
    over the tokens of transition k only (CMAE, ρ = 0.5)."""
    logprobs = torch.log(torch.tensor([[0.9, 0.1, 0.3, 0.6, 0.2, 0.05]]))
    index = torch.tensor([[-1, 0, 0, -1, 1, 1]])
    weights = torch.tensor([[0.5, 2.0]])
    # transition 0: tokens p = 0.1, 0.3 (both ≤ ρ): (0.9 + 0.7) / 2; transition 1: 0.2, 0.05.
    expected = 0.5 * (0.9 + 0.7) / 2 + 2.0 * (0.8 + 0.95) / 2
    assert float(transcript_wm_loss(logprobs, index, weights, "cmae", 0.5)) == \
        pytest.approx(expected)


@pytest.mark.parametrize("settings, message", [
    (dict(alpha=0.0), r"alpha=0\.0 is invalid; expected a number in \(0, 1\]"),
    (dict(wm_loss="l2"), r"wm_loss='l2' is invalid; expected cmae \| mae \| ce"),
    (dict(r_max=float("nan")), r"r_max=nan is invalid"),
    (dict(temperature=0.7), r"temperature=0\.7 with paw"),
    # Types checked as TrainConfig checks them: 'no' is not false, a string is not a number.
    (dict(paw="no"), r"^paw='no' is invalid; expected true or false$"),
    (dict(alpha="0.5"), r"^alpha='0\.5' is invalid; expected a number"),
    (dict(max_obs_tokens=1.5), r"^max_obs_tokens=1\.5 is invalid; expected an integer or none$"),
    (dict(adaptive_coef=1), r"^adaptive_coef=1 is invalid; expected true or false$"),
])
def test_a_wrong_paw_setting_is_one_clear_error(tmp_path, settings, message):
    with pytest.raises(ValueError, match=message):
        PaWGRPOConfig(output_dir=str(tmp_path), use_cpu=True, **settings)


def test_a_prompt_without_its_task_seed_is_refused():
    assert task_seed([{"role": "user", "content": "x", "task_seed": 7}]) == 7
    with pytest.raises(ValueError, match="prompts made by task_dataset"):
        task_seed([{"role": "user", "content": "Task: buy the red lamp."}])


def test_env_tools_play_a_task_through_its_tool(tmp_path):
    """EnvTools, as TRL's environment_factory drives it: reset with a task_dataset row, the
    expert's actions through the take_action tool, the env's return from get_reward."""
    from training.integrations.trl import env_tools

    make = env_tools("PaW/Shelf-v0", max_steps=6, env_kwargs={"split": "train"})
    row = task_dataset("PaW/Shelf-v0", [5], split="train")[0]
    tools = make()
    tools.reset(**row)
    assert row["prompt"][0]["content"].startswith("Task: buy the")
    answer = ""
    while not tools.done:
        answer = tools.take_action(tools.env.unwrapped.expert_action())
    assert answer.endswith("The episode has ended (won).") and tools.get_reward() == 10.0
    assert tools.take_action("pay") == "The episode has ended."
    with pytest.raises(ValueError, match="rows made by task_dataset"):
        tools.reset(prompt=row["prompt"])
    with pytest.raises(ValueError, match="PaW/Nope-v0"):
        env_tools("PaW/Nope-v0", max_steps=6)


def test_trls_tool_route_trains_on_env_tools(tiny_model_dir, tmp_path, one_torch_thread):
    """GRPOTrainer(environment_factory=env_tools(...)) with the tiny model given TRL's
    Qwen2.5 chat template (tool calling): TRL accepts the tools, resets one EnvTools per
    episode with its row's task, and logs the env's reward."""
    import shutil

    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen2_5_chat_template

    from training.integrations.trl import env_tools

    model = tmp_path / "tiny-tools"
    shutil.copytree(tiny_model_dir, model)
    tokenizer = AutoTokenizer.from_pretrained(model)
    tokenizer.chat_template = qwen2_5_chat_template
    tokenizer.save_pretrained(model)
    args = GRPOConfig(output_dir=str(tmp_path / "trl"), num_generations=2,
                      per_device_train_batch_size=4, max_steps=1, max_completion_length=32,
                      report_to=[], save_strategy="no", use_cpu=True, bf16=False, seed=0,
                      logging_steps=1, disable_tqdm=True)
    trainer = GRPOTrainer(model=str(model), args=args, reward_funcs=[],
                          environment_factory=env_tools("PaW/Shelf-v0", max_steps=6,
                                                        env_kwargs={"split": "train"}),
                          train_dataset=task_dataset("PaW/Shelf-v0", range(4), split="train"))
    trainer.train()
    assert trainer.state.global_step == 1
    [logged] = [h for h in trainer.state.log_history if "rewards/EnvTools/mean" in h]
    assert logged["rewards/EnvTools/mean"] == pytest.approx(logged["reward"])
    played = [e.task_seed for e in trainer.environments]  # this batch's rows: 2 tasks × 2
    assert len(played) == 4 and set(played) <= {0, 1, 2, 3} and len(set(played)) == 2



def test_the_trl_config_takes_paw_settings_fields_and_their_checks(tmp_path):
    """PaWGRPOConfig's PaW fields are PaWSettings' (names, defaults, docstrings as TRL help),
    read from the command line by TRL's own parser and checked by their one declaration."""
    from transformers import HfArgumentParser

    from training.config import field_docs
    from training.infra.paw_settings import PaWSettings

    ours = {f.name: f for f in dataclasses.fields(PaWGRPOConfig)}
    for item in dataclasses.fields(PaWSettings):
        assert ours[item.name].default == item.default
        assert ours[item.name].metadata["help"] == field_docs(PaWSettings)[item.name]
    parser = HfArgumentParser(PaWGRPOConfig)
    [args] = parser.parse_args_into_dataclasses(
        ["--output_dir", str(tmp_path), "--use_cpu", "true", "--alpha", "0.5", "--wm_loss", "ce"])
    assert (args.alpha, args.wm_loss) == (0.5, "ce")
    with pytest.raises(ValueError, match=r"^rho=1\.5 is invalid; expected a number in \[0, 1\]$"):
        parser.parse_args_into_dataclasses(["--output_dir", str(tmp_path), "--use_cpu", "true",
                                            "--rho", "1.5"])


def test_a_model_config_gives_trl_the_model_in_its_dtype_and_its_lora(tiny_model_dir, tmp_path):
    """PaWGRPOTrainer takes train's ModelConfig: the weights in its dtype, its LoRA settings
    as TRL's peft_config (TRL wraps the model), a mistyped target refused as train refuses
    it."""
    from training.infra.model_config import ModelConfig

    config = ModelConfig(model=str(tiny_model_dir), dtype="float64", lora=True, lora_r=2,
                         lora_alpha=4, lora_target_modules=["q_proj", "v_proj"])
    trainer = _trainer(config, tmp_path)
    adapter = trainer.model.peft_config["default"]
    assert (adapter.r, adapter.lora_alpha, adapter.target_modules) == (2, 4, {"q_proj", "v_proj"})
    assert {p.dtype for p in trainer.model.parameters()} == {torch.float64}
    trained = [name for name, p in trainer.model.named_parameters() if p.requires_grad]
    assert trained and all("lora_" in name for name in trained)
    with pytest.raises(ValueError, match=r"^lora_target_modules 'q_prj' \(did you mean q_proj"):
        _trainer(dataclasses.replace(config, lora_target_modules=["q_prj"]), tmp_path)
