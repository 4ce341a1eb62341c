"""The env's reset observation reaches the first prompt the policy sees, on every rollout path.

An asynchronous trainer elsewhere trained on bare prompts for months because its worker dropped
the reset observation. Here an env whose reset text alone holds a unique word
(``tests.envs.ResetTokenEnv``, registered as ``Test/ResetToken-v0``) is played with the tiny
model on each path, and the word is looked for in the first prompt of every episode as the
policy received it (its prompt token ids, decoded) and as it was recorded (the replay's ``h``):

* sync: ``agents.rollout`` in process and in env worker processes, and ``PaWTrainer``;
* async: ``PaWTrainer`` with ``async_rollouts`` (a spawned worker process samples);
* sharded: ``paw-gym train`` under torchrun, 2 processes, DDP and FSDP (each rank its share);
* vLLM: ``VLLMPolicy`` and the trainer's ``rollout_backend: vllm``, here on a stand-in engine
  that records the token ids it is given (everything up to the engine's ``generate`` is the
  real code; vLLM runs only in its own venv, minutes to build), and on the real engine in
  tests/test_training_vllm.py (``pytest -m slow``), which checks the prompts it echoes back;
* replay: ``RecordTransitions`` (``WMReplay``) and the expert demos SFT records;
* TRL: ``EnvRollout`` through ``PaWGRPOTrainer.train()``, and ``task_dataset``'s rows (the first
  prompt of TRL's tool route).

Then: an unknown env id in a run config, its YAML, or a TRL dataset row is refused before any
work, in one line.
"""

from __future__ import annotations

import importlib.machinery
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from tests.common import RESET_TOKEN_ID
from tests.envs import RESET_TOKEN

torch = pytest.importorskip("torch")

from agents import HFPolicy, rollout  # noqa: E402
from training.config import TrainConfig  # noqa: E402
from wrappers import WMReplay  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def check_first_prompts(trajectories, tokenizer) -> None:
    """Every episode's first prompt holds the reset word, as text and as the ids the policy
    got."""
    assert trajectories
    for trajectory in trajectories:
        first = trajectory.transitions[0]
        assert RESET_TOKEN in trajectory.initial_observation
        assert RESET_TOKEN in first.prompt, first.prompt
        assert RESET_TOKEN in tokenizer.decode(first.output.prompt_ids)


def check_first_records(records: list[dict], tokenizer) -> int:
    """Every recorded episode's first ``h`` and prompt ids hold the reset word; returns how
    many episodes."""
    first = [record for record in records if record["step"] == 0]
    assert first
    for record in first:
        assert RESET_TOKEN in record["h"], record["h"]
        assert RESET_TOKEN in tokenizer.decode(record["prompt_ids"])
    return len(first)


def train_config(model_dir, tmp_path, **overrides) -> TrainConfig:
    return TrainConfig(**{**dict(
        model=str(model_dir), env_id=RESET_TOKEN_ID, n_groups=2, group_size=2,
        max_new_tokens=8, max_episode_steps=2, total_steps=1, lr=1e-3, lora=False,
        token_budget=2048, progress=False, device="cpu", save_every=0, algo="grpo",
        output_dir=str(tmp_path / "run")), **overrides})


# -- sync -----------------------------------------------------------------------------------

@pytest.mark.parametrize("workers", [0, 1], ids=["in-process", "env-worker"])
def test_sync_rollouts(tiny_model_dir, workers):
    policy = HFPolicy(tiny_model_dir, device="cpu")
    trajectories = rollout(policy, RESET_TOKEN_ID, 2, 2, max_new_tokens=8, max_steps=2, seed=0,
                           num_env_workers=workers)
    check_first_prompts(trajectories, policy.tokenizer)


def test_the_trainers_rollouts_and_its_replay(tiny_model_dir, tmp_path):
    """The synchronous trainer: what it trained on (the update's trajectories) and what it
    recorded (``replay/``, ``h`` and the prompt ids)."""
    from training.trainer import PaWTrainer

    trainer = PaWTrainer(train_config(tiny_model_dir, tmp_path))
    trainer.train()
    check_first_prompts(trainer.updater.last_batch.trajectories, trainer.tokenizer)
    records = WMReplay.load(tmp_path / "run" / "replay").records
    assert check_first_records(records, trainer.tokenizer) == 4


# -- async ----------------------------------------------------------------------------------

@pytest.mark.heavy  # 30 s here: the worker process imports torch and builds its policy
def test_async_rollouts(tiny_model_dir, tmp_path):
    """The worker process builds its own env and policy from the config: every update's
    episodes, sampled there, start from the reset observation."""
    from training.trainer import PaWTrainer

    trainer = PaWTrainer(train_config(tiny_model_dir, tmp_path, async_rollouts=True,
                                      max_staleness=1, total_steps=2))
    history = trainer.train()
    # Sampled by the worker: update 1's rollout by the weights before update 0 (staleness 1).
    assert [(row["policy_version"], row["staleness"]) for row in history] == [(0, 0), (0, 1)]
    records = WMReplay.load(tmp_path / "run" / "replay").records
    assert check_first_records(records, trainer.tokenizer) == 8
    assert {record["update"] for record in records} == {1, 2}


# -- sharded --------------------------------------------------------------------------------

#: ``paw-gym train`` with the test env registered (a launched process starts with the built-in
#: ids only).
REGISTERED_TRAIN = textwrap.dedent("""
    import sys
    import tests.common  # registers Test/ResetToken-v0
    from training.cli import main
    sys.exit(main(sys.argv[1:]))
""")


@pytest.mark.heavy
@pytest.mark.parametrize("sharding", ["ddp", "fsdp"])
def test_sharded_rollouts_of_two_processes(tiny_model_dir, tmp_path, sharding):
    """torchrun, 2 gloo processes: each rank rolls out its share of the groups (under FSDP by
    the gathered copy of the weights) and writes its own replay shard."""
    from transformers import AutoTokenizer

    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(dict(
        model=str(tiny_model_dir), env_id=RESET_TOKEN_ID, n_groups=2, group_size=2,
        max_new_tokens=8, max_episode_steps=2, total_steps=1, lr=1e-3, lora=False,
        token_budget=2048, progress=False, device="cpu", save_every=0, algo="grpo",
        sharding=sharding)))
    script = tmp_path / "registered_train.py"
    script.write_text(REGISTERED_TRAIN)
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         str(script), "train", "--config", str(config), "--output_dir", str(tmp_path / "run")],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-4000:]
    replay = tmp_path / "run" / "replay"
    assert sorted(p.name for p in replay.glob("*.jsonl")) == [
        "update-000001-rank0.jsonl", "update-000001-rank1.jsonl"]
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    for rank in (0, 1):
        shard = WMReplay.load(replay / f"update-000001-rank{rank}.jsonl").records
        assert check_first_records(shard, tokenizer) == 2  # one group of 2 episodes a rank


# -- vLLM -----------------------------------------------------------------------------------

class FakeEngine:
    """Stands in for ``vllm.LLM``: takes the constructor's arguments, answers every request with
    ``<action>open door</action>`` and made-up log-probs, and keeps the prompt token ids it was
    given (:attr:`received`, across instances)."""

    received: list[list[int]] = []

    def __init__(self, model, tokenizer=None, max_model_len=None, **kwargs):
        from transformers import AutoConfig, AutoTokenizer

        self._tokenizer = AutoTokenizer.from_pretrained(tokenizer or model)
        context = max_model_len or AutoConfig.from_pretrained(model).max_position_embeddings
        self.llm_engine = SimpleNamespace(model_config=SimpleNamespace(
            max_model_len=context, dtype=torch.float32))

    def get_tokenizer(self):
        return self._tokenizer

    def generate(self, requests, params, lora_request=None, use_tqdm=False):
        text = "<action>open door</action>"
        ids = self._tokenizer(text, add_special_tokens=False)["input_ids"]
        other = self._tokenizer.eos_token_id
        results = []
        for request in requests:
            FakeEngine.received.append(list(request.prompt_token_ids))
            logprobs = [{token: SimpleNamespace(logprob=-0.1),
                         other: SimpleNamespace(logprob=-2.5)} for token in ids]
            results.append(SimpleNamespace(outputs=[SimpleNamespace(
                token_ids=ids, logprobs=logprobs, text=text, finish_reason="stop")]))
        return results

    def collective_rpc(self, method, args=()):
        return [0]

    def reset_prefix_cache(self):
        return True


@pytest.fixture
def fake_vllm(monkeypatch):
    """A ``vllm`` package whose engine is :class:`FakeEngine` (importable, found by
    ``importlib.util.find_spec`` as the trainer's check looks for it)."""
    package = types.ModuleType("vllm")
    package.__spec__ = importlib.machinery.ModuleSpec("vllm", None, is_package=True)
    package.__path__ = []
    package.LLM = FakeEngine
    package.SamplingParams = lambda **settings: SimpleNamespace(**settings)
    inputs = types.ModuleType("vllm.inputs")
    inputs.TokensPrompt = lambda prompt_token_ids: SimpleNamespace(
        prompt_token_ids=prompt_token_ids)
    monkeypatch.setitem(sys.modules, "vllm", package)
    monkeypatch.setitem(sys.modules, "vllm.inputs", inputs)
    FakeEngine.received = []
    return FakeEngine


def test_vllm_policy_sends_the_engine_prompts_that_hold_the_reset_observation(tiny_model_dir,
                                                                              fake_vllm):
    from agents.vllm_policy import VLLMPolicy

    policy = VLLMPolicy(tiny_model_dir)
    trajectories = rollout(policy, RESET_TOKEN_ID, 2, 2, max_new_tokens=8, max_steps=2, seed=0)
    check_first_prompts(trajectories, policy.tokenizer)
    sent = [policy.tokenizer.decode(ids) for ids in fake_vllm.received[:4]]  # the first step's
    assert len(sent) == 4 and all(RESET_TOKEN in text for text in sent)
    assert all(t.won for t in trajectories)  # the engine's action reached the env


def test_the_trainers_vllm_rollouts(tiny_model_dir, tmp_path, fake_vllm):
    from training.trainer import PaWTrainer

    trainer = PaWTrainer(train_config(tiny_model_dir, tmp_path, rollout_backend="vllm"))
    trainer.train()
    assert len(fake_vllm.received) == 4  # one step: every episode opened the door
    assert all(RESET_TOKEN in trainer.tokenizer.decode(ids) for ids in fake_vllm.received)
    records = WMReplay.load(tmp_path / "run" / "replay").records
    assert check_first_records(records, trainer.tokenizer) == 4


# -- replay ---------------------------------------------------------------------------------

def test_record_transitions_stores_the_first_prompt(tiny_model_dir, tmp_path):
    from agents.envs import make_agent_env
    from wrappers import PolicyAction, RecordTransitions

    policy = HFPolicy(tiny_model_dir, device="cpu")
    env = RecordTransitions(make_agent_env(RESET_TOKEN_ID), tmp_path / "replay")
    for seed in (0, 1):
        prompt, _ = env.reset(seed=seed)
        [output] = policy.act([prompt], max_new_tokens=8, seed=seed)
        env.step(PolicyAction(output.text, prompt_ids=output.prompt_ids,
                              response_ids=output.response_ids))
    env.close()
    assert check_first_records(WMReplay.load(tmp_path / "replay").records,
                               policy.tokenizer) == 2


def test_expert_demos_record_the_first_prompt(tmp_path):
    from training.warmstart.sft import record_expert_episodes

    assert record_expert_episodes(RESET_TOKEN_ID, 2, tmp_path) == (2, 0)
    records = WMReplay.load(tmp_path).records
    assert [record["step"] for record in records] == [0, 0]  # the expert opens the door at once
    assert all(RESET_TOKEN in record["h"] and "open door" in record["a"] for record in records)


# -- TRL ------------------------------------------------------------------------------------

def test_trls_rollout_func_starts_from_the_reset_observation(tiny_model_dir, tmp_path):
    pytest.importorskip("trl")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from training.integrations.trl import (EnvRollout, PaWGRPOConfig, PaWGRPOTrainer,
                                           task_dataset)

    dataset = task_dataset(RESET_TOKEN_ID, range(4))
    assert all(RESET_TOKEN in row["prompt"][0]["content"] for row in dataset)  # the tool route's
    assert dataset[0]["prompt"][0]["env_id"] == dataset[0]["env_id"] == RESET_TOKEN_ID
    args = PaWGRPOConfig(output_dir=str(tmp_path / "trl"), num_generations=2,
                         per_device_train_batch_size=4, max_steps=1, learning_rate=1e-3,
                         report_to=[], save_strategy="no", use_cpu=True, seed=0,
                         logging_steps=1, alpha=0.5, disable_tqdm=True)
    trainer = PaWGRPOTrainer(model=str(tiny_model_dir), args=args, train_dataset=dataset,
                             env=EnvRollout(RESET_TOKEN_ID, max_steps=2, max_new_tokens=8))
    trainer.train()
    played = trainer.env.last
    check_first_prompts(played.trajectories, trainer.processing_class)
    for sequence in played.sequences:  # what TRL trains on: the prompt ids of the transcript
        assert RESET_TOKEN in trainer.processing_class.decode(sequence.prompt_ids)


# -- unknown env ids ------------------------------------------------------------------------

def test_an_unknown_env_id_in_a_run_yaml_is_one_line_before_any_work(tmp_path, capsys):
    from training.cli import main

    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(dict(model=str(tmp_path / "never-loaded"),
                                          env_id="PaW/Shelv-v0", total_steps=1)))
    assert main(["train", "--config", str(config), "--output_dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("paw-gym train: error: env_id: unknown env id 'PaW/Shelv-v0'; did "
                          "you mean PaW/Shelf-v0? registered text envs: ") and err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.yaml"]
    with pytest.raises(ValueError, match=r"^env_id: unknown env id 'PaW/Shelv-v0'; did you"):
        TrainConfig(model=str(tmp_path / "never-loaded"), env_id="PaW/Shelv-v0")


def test_an_unknown_or_other_env_in_a_trl_dataset_row_is_refused_before_any_work(tmp_path):
    pytest.importorskip("trl")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from datasets import Dataset

    from training.integrations.trl import (EnvRollout, PaWGRPOConfig, PaWGRPOTrainer,
                                           env_tools, task_dataset)

    with pytest.raises(ValueError, match=r"^env_id: unknown env id 'PaW/Shelv-v0'; did you "
                                         r"mean PaW/Shelf-v0\?"):
        task_dataset("PaW/Shelv-v0", range(2))
    with pytest.raises(ValueError, match=r"^env_id: unknown env id 'PaW/Shelv-v0'"):
        EnvRollout("PaW/Shelv-v0", max_steps=2)

    rows = task_dataset(RESET_TOKEN_ID, range(3)).to_list()
    rows[2]["prompt"][0]["env_id"] = "PaW/Shelv-v0"
    unknown = Dataset.from_list(rows)
    other = task_dataset("PaW/Shelf-v0", range(2), split="train")
    env = EnvRollout(RESET_TOKEN_ID, max_steps=2)
    args = PaWGRPOConfig(output_dir=str(tmp_path / "trl"), use_cpu=True, report_to=[],
                         num_generations=2, per_device_train_batch_size=2)
    never = str(tmp_path / "never-loaded")  # a model that would fail only after the rows
    for dataset, message in [
            (unknown, r"^train_dataset row 2: env_id: unknown env id 'PaW/Shelv-v0'; did you "
                      r"mean PaW/Shelf-v0\?"),
            (other, r"^train_dataset row 0 is a task of PaW/Shelf-v0 \(task_dataset\("
                    r"'PaW/Shelf-v0', \.\.\.\)\), but this rollout plays Test/ResetToken-v0")]:
        with pytest.raises(ValueError, match=message) as caught:
            PaWGRPOTrainer(model=never, env=env, args=args, train_dataset=dataset)
        assert "\n" not in str(caught.value)
    with pytest.raises(ValueError, match=r"^eval_dataset\['a'\] row 0 is a task of PaW/Shelf"):
        PaWGRPOTrainer(model=never, env=env, args=args,
                       train_dataset=task_dataset(RESET_TOKEN_ID, range(2)),
                       eval_dataset={"a": other})
    # TRL's rollout_func call and the tool route's reset: the same refusal, before any episode
    with pytest.raises(ValueError, match=r"^prompt 0: env_id: unknown env id 'PaW/Shelv-v0'"):
        env([rows[2]["prompt"]], trainer=None)
    tools = env_tools(RESET_TOKEN_ID, max_steps=2)()
    with pytest.raises(ValueError, match=r"^the row is a task of PaW/Shelf-v0"):
        tools.reset(**other[0])
    tools.reset(**task_dataset(RESET_TOKEN_ID, [0])[0])  # its own env's row plays
