"""The one serialisation of a transition (agents.serialization) and the paths that use it."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from agents.hf_policy import HFPolicy  # noqa: E402
from agents.types import PolicyOutput, Trajectory, Transition  # noqa: E402
from training.config import TrainConfig  # noqa: E402
from training.warmstart.pretrain import transcript_parts  # noqa: E402
from training.rl.rollout_batch import build_batch  # noqa: E402
from agents.serialization import (TransitionSerializer, chat_separator_text,  # noqa: E402
                                    observation_separator)
from training.world_model import WMExample, transition_rows  # noqa: E402

H, A, O = "Your task is to: find the hidden number.", \
    "<think>go up</think><action>guess 3</action>", "Go higher."


@pytest.fixture(scope="module")
def policy(tiny_model_dir):
    return HFPolicy(str(tiny_model_dir), device="cpu")


def _ids(policy, text):
    return policy.tokenizer(text, add_special_tokens=False)["input_ids"]


def test_next_turn_is_the_chat_templates_next_user_message(policy):
    """Literal reference: the template rendering [user h, assistant a, user o] starts with the
    serialised row's text, so o_{t+1} sits exactly where the template puts the next turn."""
    row = TransitionSerializer.for_policy(policy, "next_turn").encode(policy, H, A, O, 4096)
    rendered = policy.tokenizer.apply_chat_template(
        [{"role": "user", "content": H}, {"role": "assistant", "content": A},
         {"role": "user", "content": O}], tokenize=False)
    assert rendered.startswith(policy.tokenizer.decode(row.ids))
    assert policy.tokenizer.decode(row.ids[row.prompt_len + row.action_len:row.obs_start]) == \
        "<|im_end|>\n<|im_start|>user\n"
    assert row.ids[row.obs_start:] == _ids(policy, O)


def test_each_context_puts_its_separator_and_targets_stay_the_observation(policy):
    prompt, _ = policy.encode_prompt(H, max_new_tokens=1)
    action, obs = _ids(policy, A), _ids(policy, O)
    im_end = policy.tokenizer.convert_tokens_to_ids("<|im_end|>")
    separators = {"none": [], "end_of_turn": [im_end],
                  "next_turn": _ids(policy, "<|im_end|>\n<|im_start|>user\n")}
    for context, separator in separators.items():
        serializer = TransitionSerializer.for_policy(policy, context)
        row = serializer(prompt, action, obs, 4096)
        assert row.ids == prompt + action + separator + obs
        assert (row.prompt_len, row.action_len, row.separator_len, row.obs_len) == \
            (len(prompt), len(action), len(separator), len(obs))
        # a response that already ended its turn gets no second end-of-turn token
        ended = serializer(prompt, action + [im_end], obs, 4096)
        assert ended.ids == prompt + action + [im_end] + separator[1:] + obs
        # no observation: no separator, the same h ⊕ a row in every context
        assert serializer(prompt, action, [], 4096).ids == prompt + action


def test_separator_of_other_templates_and_clear_errors(policy):
    tokenizer = copy.deepcopy(policy.tokenizer)
    tokenizer.chat_template = (
        "{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
        "{{ m['content'] }}<|eot_id|>{% endfor %}")
    assert chat_separator_text(tokenizer) == "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
    tokenizer.chat_template = None
    with pytest.raises(ValueError, match="needs a chat template"):
        observation_separator(tokenizer, "next_turn", [0])
    assert observation_separator(tokenizer, "end_of_turn", [7, 8]) == [7]  # the EOS ends a turn
    with pytest.raises(ValueError, match="wm_context='after' is invalid; expected next_turn"):
        observation_separator(tokenizer, "after", [0])
    with pytest.raises(ValueError, match="wm_context"):
        TrainConfig(wm_context="after")


@pytest.mark.parametrize("context", ["next_turn", "end_of_turn", "none"])
def test_every_world_model_path_serialises_a_transition_the_same_way(policy, context):
    """The trainer's PaW rows, the pretraining transcripts (and so next_observation_accuracy
    and the noise-gradient benchmark) and train-wm's offline cmae give the same row."""
    prompt, _ = policy.encode_prompt(H, max_new_tokens=1)
    action = _ids(policy, A)
    output = PolicyOutput(A, prompt, action, [-1.0] * len(action), [1.0] * len(action))
    trajectory = Trajectory("guess-3", "guess", 0, [Transition(
        H, output, "guess 3", O, 0.0, False, False, False)])
    config = TrainConfig(wm_context=context, alpha=1.0, max_obs_tokens=None, max_seq_len=4096)
    sample = build_batch([trajectory], TransitionSerializer.for_policy(policy, context),
                         config).samples[0]
    pretraining = transcript_parts(policy, [{"h": H, "a": A, "o_next": O}], 4096, context)[0]
    offline = transition_rows(policy, [WMExample(H, A, O, "guess", "e")], 4096, context)[0]
    assert sample.input_ids == pretraining.ids == offline.input_ids
    assert sample.obs_start == pretraining.obs_start == offline.obs_start
    assert sample.obs_len == pretraining.obs_len == offline.obs_len == len(_ids(policy, O))
    assert sample.leak_target == _ids(policy, O)[0]


#: Three transitions of the guessing game, as fixed rollouts and as pretraining transcripts.
_STEPS = [(f"Your task is to: find the hidden number. Last guess {n}.",
           f"<think>go up</think><action>guess {n}</action>", obs)
          for n, obs in ((2, "Go higher."), (5, "Go lower."), (3, "Correct!"))]


def _fixed_rollouts(policy, seeds, group_size, temperature, seed):
    """The same transitions in every group, all with reward 0: advantages are 0, so only the
    world-model term can move the weights."""
    trajectories = []
    for group, task in enumerate(seeds):
        for _ in range(group_size):
            steps = []
            for h, a, o in _STEPS:
                prompt, _ = policy.encode_prompt(h, max_new_tokens=1)
                response = _ids(policy, a)
                output = PolicyOutput(a, prompt, response, [-1.0] * len(response),
                                      [1.0] * len(response))
                steps.append(Transition(h, output, "guess", o, 0.0, False, False, False))
            trajectories.append(Trajectory(f"t{task}", "guess", group, steps))
    return trajectories


@pytest.mark.usefixtures("one_torch_thread")
def test_paw_in_the_next_turn_keeps_the_leak_at_the_vanilla_level(tiny_model_dir, tmp_path):
    """A base that knows the world in the next-turn form (pretrained on these transcripts):
    PaW's CMAE term in that form leaves the leak metric where vanilla RL leaves it, while the
    old serialisation (o_{t+1} in the policy's own turn) raises it at once."""
    from training.warmstart.pretrain import PretrainConfig, run_pretrain
    from training.trainer import PaWTrainer
    from wrappers import WMReplay

    with WMReplay(tmp_path / "transcripts") as replay:
        for i, (h, a, o) in enumerate(_STEPS):
            replay.append({"h": h, "a": a, "o_next": o, "reward": 0.0, "terminated": False,
                           "truncated": False, "task_id": "t", "task_type": "guess",
                           "episode_id": f"e{i}", "step": 0})
    base, _ = run_pretrain(PretrainConfig(
        model=str(tiny_model_dir), replay=str(tmp_path / "transcripts"),
        output_dir=str(tmp_path / "base"), steps=40, batch_size=3, lr=3e-3, device="cpu",
        progress=False))
    leaks = {}
    for name, settings in (("vanilla", {"paw": False}), ("next_turn", {}),
                           ("none", {"wm_context": "none"})):
        config = TrainConfig(model=str(base), env_id="Test/GuessNumber-v0", lora=False,
                             n_groups=2, group_size=2, total_steps=4, lr=3e-3, alpha=1.0,
                             output_dir=str(tmp_path / name), progress=False, log_every=0,
                             save_every=0, device="cpu", record_replay=False, **settings)
        policy = HFPolicy(str(base), device="cpu")
        history = PaWTrainer(config, policy=policy, collect=_fixed_rollouts).train()
        leaks[name] = [h["wm_leak"] for h in history]
    assert max(leaks["vanilla"]) < 0.05  # the base ends its turn after </action>
    assert max(leaks["next_turn"]) <= max(leaks["vanilla"]) + 0.01
    assert max(leaks["none"]) > max(leaks["vanilla"]) + 0.1
