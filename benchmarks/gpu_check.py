"""GPU check: the CUDA paths that no CPU machine of the project can run, measured in one go.

Parts (each writes its section of the results file, and a part that fails is recorded with its
error while the others still run):

* ``environment`` - device, driver-side versions (torch, CUDA, NCCL, transformers, peft).
* ``tiny_update`` - the real trainer (``PaWTrainer.train_step``: HF rollouts on PaW/Shelf-v0,
  then one GRPO + PaW update) of the nano tiny model in bfloat16 on the device; checks the
  loss is finite and the weights moved; rollout and training tokens/s, peak memory.
* ``qwen_shapes`` - a model of the real Qwen2.5-1.5B architecture (random weights, its 151,936-token
  vocabulary, tied embeddings) fully fine-tuned for two optimizer steps on the paper's row shape
  (prompt 2048 + response 512 + world-model target 512 tokens, ``configs/paper``) at its token
  budget (32,768 tokens per micro-batch), gradient checkpointing on, through the project's
  chunked training objective (``training.rl.objective.micro_batch_loss``). Reports training tokens/s
  and peak memory, the peak of the same pass with the full ``[tokens, vocab]`` logits instead
  (what the chunking saves at this vocabulary), and HF ``generate`` tokens/s at the paper's
  rollout shape.
* ``paw_overhead`` - the PaW term's cost in a GRPO step at the same shapes (the paper's
  Figure 5): 24 rows as plain GRPO, as GRPO + PaW with the paper's α = 0.75 of rows carrying
  the next observation, and with every row carrying it; packed as the trainer packs them,
  alternated, median step time and peak memory as ratios to GRPO.
* ``fsdp`` - FSDP2 (``torch.distributed.fsdp.fully_shard``) over every visible GPU (NCCL; on a
  CPU: 2 gloo processes), launched with torchrun: each decoder layer and the scorer sharded, the
  ranks splitting the rows of one micro-batch (``training.infra.distributed.shard_module``, which
  ``sharding: fsdp`` uses). Checks the sharded gradients against one unsharded process on the
  same rows (float32 on a GPU, float64 on a CPU), then times a bfloat16 mixed-precision step of
  the 1.5B-architecture model (GPU only). The trainer around it (rollouts on the gathered copy,
  equal pass counts, checkpoints) is not part of this check.

    bash scripts/gpu_check.sh                    # a CUDA machine: all parts, a few minutes
    python -m benchmarks.gpu_check --quick       # a CPU: the parts a CPU can run, cut down

Results: ``benchmarks/results/gpu_check_<device>.json`` (``--out`` to change).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
import torch  # noqa: E402

#: Qwen/Qwen2.5-1.5B-Instruct's config.json (the architecture; weights are random here).
QWEN25_1_5B = dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960,
                   num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                   max_position_embeddings=32768, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
                   tie_word_embeddings=True)
#: The paper configs' row: max_prompt_len 2048, max_new_tokens 512, and the rest of
#: max_seq_len 3072 for the world-model target; token_budget 32768 per micro-batch.
PAPER_ROW = dict(prompt=2048, action=512, obs=512)
PAPER_TOKEN_BUDGET = 32768


def environment() -> dict:
    import accelerate
    import peft
    import transformers

    info = {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "peft": peft.__version__,
            "accelerate": accelerate.__version__, "cuda_available": torch.cuda.is_available()}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(device=torch.cuda.get_device_name(0), gpus=torch.cuda.device_count(),
                    capability=f"{props.major}.{props.minor}",
                    memory_gib=round(props.total_memory / 2**30, 1), cuda=torch.version.cuda,
                    nccl=".".join(map(str, torch.cuda.nccl.version())),
                    bf16=torch.cuda.is_bf16_supported())
    else:
        info.update(device=f"CPU ({platform.processor() or platform.machine()}, "
                    f"{os.cpu_count()} cores)", gpus=0)
    return info


def tiny_texts() -> list[str]:
    """Text for the nano model's tokenizer: the prompt templates and Shelf's expert episodes."""
    import gymnasium as gym

    import paw_gym  # noqa: F401  (registers the envs)
    from wrappers import TEMPLATES

    texts = [text for pair in TEMPLATES.values() for text in pair]
    env = gym.make("PaW/Shelf-v0")
    for seed in range(40):
        obs, info = env.reset(seed=seed)
        texts.append(obs)
        for _ in range(6):
            action = env.unwrapped.expert_action()
            obs, _, done, truncated, info = env.step(action)
            texts += [action, obs]
            if done or truncated:
                break
    return texts * 5


def tiny_update(device: str, dtype: str, work: Path, updates: int = 2) -> dict:
    """``updates`` real train steps (rollout + GRPO + PaW update) of the nano model."""
    from agents.tiny_model import build_tiny_model
    from training.config import TrainConfig
    from training.trainer import PaWTrainer

    model = build_tiny_model(tiny_texts(), work / "nano", size="nano")
    config = TrainConfig(model=str(model), env_id="PaW/Shelf-v0", algo="grpo", paw=True,
                         lora=False, lr=1e-4, n_groups=4, group_size=4, max_new_tokens=24,
                         max_episode_steps=4, total_steps=updates, device=device, dtype=dtype,
                         save_every=0, log_every=0, progress=False, record_replay=False,
                         seed=0, output_dir=str(work / "tiny-run"))
    trainer = PaWTrainer(config)
    before = [p.detach().float().clone() for p in trainer.model.parameters()]
    steps = [trainer.train_step() for _ in range(updates)]
    moved = max(float((p.detach().float() - b).abs().max())
                for p, b in zip(trainer.model.parameters(), before))
    last = steps[-1]
    finite = all(torch.isfinite(p).all() for p in trainer.model.parameters())
    assert finite and moved > 0, f"weights finite={finite}, largest change {moved}"
    keys = ("policy_loss", "wm_loss", "wm_selected", "rollout_logprob_gap", "gen_tokens_per_s",
            "tokens_per_s", "rollout_time", "update_time", "peak_mem_mb")
    return {"device": str(trainer.device), "dtype": str(next(trainer.model.parameters()).dtype),
            "updates": updates, "max_weight_change": moved,
            **{k: last[k] for k in keys if k in last}}


def qwen_model(layers: int, device: str, dtype: torch.dtype, vocab: int | None = None):
    """The Qwen2.5-1.5B architecture (``layers`` decoder layers) with random weights."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    shape = {**QWEN25_1_5B, "num_hidden_layers": layers}
    if vocab:
        shape["vocab_size"] = vocab
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM(Qwen2Config(**shape))
    return model.to(dtype)


def paper_rows(n: int, vocab: int, row: dict = PAPER_ROW, seed: int = 1,
               with_obs: int | None = None):
    """``n`` random transitions of the paper's shape, as training samples (advantages ±1, one
    rollout group per pair of rows so the world-model weights are those of two groups).

    Only the first ``with_obs`` rows (all by default) carry the next observation, as the trainer
    builds them: a row the world-model term does not select has no observation tokens. The other
    rows are the same tokens cut after the response."""
    from training.rl.batch import Sample

    g = torch.Generator().manual_seed(seed)
    length = row["prompt"] + row["action"] + row["obs"]
    with_obs = n if with_obs is None else with_obs
    samples = []
    for i in range(n):
        ids = torch.randint(1, vocab, (length,), generator=g).tolist()
        obs = row["obs"] if i < with_obs else 0
        samples.append(Sample(ids[:row["prompt"] + row["action"] + obs], row["prompt"],
                              row["action"], obs, old_logprobs=[-12.0] * row["action"],
                              advantage=1.0 if i % 2 else -1.0, group=i % 2))
    return samples


def objective_loss(model, samples, rows, chunk: int = 512, full_logits: bool = False,
                   scale: float = 1.0, paw: bool = True):
    """GRPO + PaW (CMAE) loss of ``samples[rows]``, the world-model term on every row that carries
    an observation (``paw=False``: plain GRPO), the weights taken over all ``samples`` (so the
    rows of several processes or micro-batches add up); backward."""
    from training.rl.batch import collate
    from training.rl.losses import ppo_clip_token_loss, wm_token_loss
    from training.infra.paw_settings import PaWSettings
    from training.rl.objective import ObjectiveSettings, micro_batch_loss, objective_weights

    settings = ObjectiveSettings(PaWSettings(paw=paw))
    selected = torch.tensor([s.obs_len > 0 for s in samples], dtype=torch.bool)
    w_rl, w_wm = objective_weights(samples, selected, {0: 1.0, 1: 1.0}, settings)
    device = next(model.parameters()).device
    batch = collate(samples, rows, pad_id=0, device=device)
    w_rl, w_wm = w_rl[rows].to(device), w_wm[rows].to(device)
    if full_logits:  # the straightforward pass: [rows, length, vocab] logits at once
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
        logp = logits[:, :-1].float().log_softmax(-1).gather(
            -1, batch.input_ids[:, 1:, None])[..., 0]
        logp = torch.cat([torch.zeros_like(logp[:, :1]), logp], dim=1)
        token, _ = ppo_clip_token_loss(logp, batch.old_logprobs, batch.advantages[:, None])
        loss = (w_rl * (token * batch.action_mask).sum(-1)).sum()
        loss = loss + (w_wm * wm_token_loss(logp, batch.obs_mask, "cmae", 0.2)).sum()
    else:
        loss, _ = micro_batch_loss(model, batch, w_rl, w_wm, settings, chunk_size=chunk)
    (loss * scale).backward()
    return float(loss.detach())


def _peak(device: torch.device, fn) -> tuple[float, float, float]:
    """(value, seconds, peak MiB) of ``fn()``; peak memory only on CUDA (else NaN)."""
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    value = fn()
    if cuda:
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated(device) / 2**20 if cuda else float("nan")
    return value, seconds, peak


def qwen_shapes(device: str, layers: int, row: dict, token_budget: int, generate_batch: int,
                compare_full_logits: bool) -> dict:
    """Full fine-tuning steps of the 1.5B architecture at the paper's row shape."""
    dev = torch.device(device)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    model = qwen_model(layers, device, dtype)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()  # transformers checkpoints layers only in train mode; Qwen2 has no dropout
    params = sum(p.numel() for p in model.parameters())
    length = sum(row.values())
    n_rows = max(2, token_budget // length)
    samples = paper_rows(n_rows, QWEN25_1_5B["vocab_size"], row)
    rows = list(range(n_rows))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)

    def step():
        loss = objective_loss(model, samples, rows)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    result = {"parameters": params, "layers": layers, "dtype": str(dtype), "rows": n_rows,
              "row_tokens": row, "tokens_per_micro_batch": n_rows * length}
    step()  # the first step allocates the optimizer states
    losses, seconds, peak = [], [], []
    for _ in range(2):
        loss, s, p = _peak(dev, step)
        losses.append(loss), seconds.append(s), peak.append(p)
    assert all(map(torch.isfinite, map(torch.tensor, losses))), losses
    result.update(losses=losses, step_s=min(seconds),
                  train_tokens_per_s=n_rows * length / min(seconds), peak_mem_mib=max(peak))
    if compare_full_logits:
        chunked, _, peak_chunked = _peak(dev, lambda: objective_loss(model, samples, rows))
        model.zero_grad(set_to_none=True)
        result.update(fwd_bwd_peak_mib_chunked=peak_chunked, loss_chunked=chunked,
                      full_logits_gib=n_rows * length * QWEN25_1_5B["vocab_size"] * 4 / 2**30)
        try:
            full, _, peak_full = _peak(dev, lambda: objective_loss(model, samples, rows,
                                                                   full_logits=True))
            result.update(fwd_bwd_peak_mib_full_logits=peak_full, loss_full_logits=full)
        except torch.cuda.OutOfMemoryError:  # what the chunking avoids
            result.update(fwd_bwd_peak_mib_full_logits="out of memory")
        model.zero_grad(set_to_none=True)
        torch.cuda.empty_cache()
    if generate_batch:
        model.eval()
        prompt = torch.randint(1, QWEN25_1_5B["vocab_size"], (generate_batch, row["prompt"]),
                               generator=torch.Generator().manual_seed(2)).to(dev)
        with torch.no_grad():
            out, s, p = _peak(dev, lambda: model.generate(
                prompt, attention_mask=torch.ones_like(prompt), do_sample=True,
                max_new_tokens=row["action"], min_new_tokens=row["action"], pad_token_id=0))
        new = (out.shape[1] - row["prompt"]) * generate_batch
        result.update(generate={"batch": generate_batch, "prompt": row["prompt"],
                                "new_tokens": new, "seconds": s, "tokens_per_s": new / s,
                                "peak_mem_mib": p})
    del model, optimizer
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return result


def paw_overhead(device: str, layers: int, row: dict, n_rows: int, token_budget: int,
                 alpha: float, repeats: int, vocab: int = QWEN25_1_5B["vocab_size"]) -> dict:
    """The PaW term's cost in one GRPO optimizer step at the 1.5B shapes (the paper's Figure 5).

    The same ``n_rows`` transitions three ways, packed into micro-batches as the trainer packs
    them (``token_budget_batches``, longest first) and accumulated into one AdamW step:

    * ``grpo`` - the plain RL objective (``paw`` off): rows of prompt + response only;
    * ``paw`` - GRPO + PaW as the trainer builds it: the ``alpha`` share of rows (its entropy
      selection; the paper configs' 0.75) carries the next observation and its CMAE term;
    * ``paw_every_row`` - every row carries it (the bound when every step is selected).

    The variants alternate (their order rotates each repeat); step time is the median of
    ``repeats``, peak memory the largest. Rows are at the configured maxima (every response and
    observation as long as the limits allow), so this bounds what real, shorter rows cost.
    """
    from training.rl.batch import token_budget_batches

    dev = torch.device(device)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    model = qwen_model(layers, device, dtype, vocab)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    variants = {"grpo": (0, False), "paw": (round(alpha * n_rows), True),
                "paw_every_row": (n_rows, True)}
    rows = {name: paper_rows(n_rows, vocab, row, with_obs=k) for name, (k, _) in variants.items()}
    packs = {name: token_budget_batches([len(s) for s in samples], token_budget)
             for name, samples in rows.items()}

    def step(name):
        loss = sum(objective_loss(model, rows[name], pack, paw=variants[name][1])
                   for pack in packs[name])
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    step("grpo")  # allocates the optimizer states, so no variant pays for them
    seconds = {name: [] for name in variants}
    peaks = {name: [] for name in variants}
    losses = {name: [] for name in variants}
    names = list(variants)
    for r in range(repeats):
        for name in names[r % 3:] + names[:r % 3]:
            loss, s, p = _peak(dev, lambda: step(name))
            losses[name].append(loss), seconds[name].append(s), peaks[name].append(p)
    result = {"layers": layers, "vocab": vocab, "dtype": str(dtype), "rows": n_rows,
              "row_tokens": row,
              "alpha": alpha, "token_budget": token_budget, "repeats": repeats}
    for name in variants:
        step_s = sorted(seconds[name])[len(seconds[name]) // 2]
        result[name] = {"rows_with_observation": variants[name][0],
                        "tokens": sum(len(s) for s in rows[name]),
                        "micro_batches": len(packs[name]), "step_s_median": step_s,
                        "step_s_all": seconds[name], "peak_mem_mib": max(peaks[name]),
                        "losses": losses[name]}
    for name in ("paw", "paw_every_row"):
        result[f"{name}_vs_grpo"] = {
            "step_time_ratio": result[name]["step_s_median"] / result["grpo"]["step_s_median"],
            "peak_mem_ratio": result[name]["peak_mem_mib"] / result["grpo"]["peak_mem_mib"],
            "token_ratio": result[name]["tokens"] / result["grpo"]["tokens"]}
    assert all(map(torch.isfinite, map(torch.tensor, sum(losses.values(), [])))), losses
    del model, optimizer
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return result


# -- FSDP2 --------------------------------------------------------------------------------------

def fsdp_worker(out: Path, quick: bool) -> None:
    """One torchrun rank: the exactness check, then (GPU) the bf16 1.5B step."""
    import torch.distributed as dist

    from training.infra.distributed import shard_module
    from training.rl.objective import PolicyScorer

    cuda = torch.cuda.is_available() and not quick
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device(f"cuda:{int(os.environ['LOCAL_RANK'])}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    result: dict = {"world_size": world, "backend": dist.get_backend()}

    # exactness: sharded gradients == one unsharded process's, same rows, same loss weights
    dtype = torch.float32 if cuda else torch.float64
    layers, vocab = (4, None) if cuda else (2, 512)
    row = dict(prompt=96, action=32, obs=32)
    samples = paper_rows(4 * world, vocab or QWEN25_1_5B["vocab_size"], row)
    # On a CPU the 1536-wide layers would take minutes: a 64-wide model of the same kind.
    reference = (qwen_model(layers, str(device), dtype) if cuda
                 else qwen_model_small(vocab, dtype))
    sharded = PolicyScorer(qwen_model_like(reference))
    expected_loss = objective_loss(reference, samples, list(range(len(samples))))
    shard_module(sharded)
    mine = list(range(rank, len(samples), world))
    # FSDP averages gradients over the ranks; each rank's loss is its rows' share of the sum.
    loss = objective_loss(sharded, samples, mine, scale=world)
    total = torch.tensor([loss], dtype=torch.float64, device=device)
    dist.all_reduce(total)
    ref_params = dict(reference.named_parameters())
    worst = 0.0
    for name, param in sharded.model.named_parameters():
        grad = param.grad.full_tensor().to(torch.float64)
        expected = ref_params[name].grad.to(torch.float64)
        worst = max(worst, float((grad - expected).abs().max() / expected.abs().max().clamp_min(
            1e-30)))
    result["exactness"] = {"dtype": str(dtype), "layers": layers, "rows": len(samples),
                           "max_rel_grad_diff": worst, "loss_sharded": float(total),
                           "loss_one_process": expected_loss}
    del reference, sharded

    if cuda:  # the 1.5B architecture, bf16 parameters with fp32 reductions
        samples = paper_rows(8 * world, QWEN25_1_5B["vocab_size"])
        model = qwen_model(QWEN25_1_5B["num_hidden_layers"], str(device), torch.float32)
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.train()
        scorer = shard_module(PolicyScorer(model), torch.bfloat16)
        optimizer = torch.optim.AdamW(scorer.parameters(), lr=1e-6)
        mine = list(range(rank, len(samples), world))

        def step():
            value = objective_loss(scorer, samples, mine, scale=world)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return value

        step()
        _, seconds, peak = _peak(device, step)
        tokens = len(mine) * sum(PAPER_ROW.values())
        result["bf16_step"] = {"parameters": sum(p.numel() for p in model.parameters()),
                               "rows_per_rank": len(mine), "step_s": seconds,
                               "train_tokens_per_s_per_rank": tokens / seconds,
                               "peak_mem_mib": peak}
    gathered = [None] * world
    dist.all_gather_object(gathered, result)
    if rank == 0:
        out.write_text(json.dumps(gathered, indent=1), encoding="utf-8")
    dist.destroy_process_group()


def qwen_model_small(vocab: int, dtype: torch.dtype):
    """A 2-layer, 64-wide model of the Qwen2 architecture (for the CPU's exactness check)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    return Qwen2ForCausalLM(Qwen2Config(
        vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)).to(dtype)


def qwen_model_like(model):
    """A second model with ``model``'s configuration and weights."""
    import copy

    twin = copy.deepcopy(model)
    twin.zero_grad(set_to_none=True)
    return twin


def worker_env(parent: dict) -> dict:
    """The torchrun workers' environment: one thread each, this checkout first on the path, and
    the caller's PYTHONPATH after it (``WHEELS=... scripts/gpu_check.sh`` installs gymnasium
    there; dropping it failed the FSDP part on an H200 whose image lacks gymnasium)."""
    path = os.pathsep.join([str(REPO), *filter(None, [parent.get("PYTHONPATH")])])
    return {**parent, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}


def fsdp(quick: bool) -> dict:
    """torchrun this file's FSDP worker over every GPU (or 2 CPU processes)."""
    processes = torch.cuda.device_count() if torch.cuda.is_available() and not quick else 2
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder, "fsdp.json")
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   f"--nproc_per_node={processes}", str(Path(__file__).resolve()),
                   "--fsdp-worker", str(out)] + (["--quick"] if quick else [])
        done = subprocess.run(command, cwd=REPO, env=worker_env(os.environ), capture_output=True,
                              text=True, timeout=900)
        if done.returncode != 0:
            raise RuntimeError(f"torchrun ({processes} processes) failed: {done.stderr[-3000:]}")
        ranks = json.loads(out.read_text(encoding="utf-8"))
    return {"processes": processes, "ranks": ranks}


#: What a run measures, in order (``--parts`` picks some of them).
PARTS = ("tiny_update", "qwen_shapes", "paw_overhead", "fsdp")


def run_part(results: dict, name: str, fn, *args, **kwargs) -> None:
    """Run one part, recording its result or its error (the other parts still run)."""
    print(f"== {name}", flush=True)
    start = time.perf_counter()
    try:
        results[name] = fn(*args, **kwargs)
    except Exception as error:  # noqa: BLE001  (a part's failure is a result to report)
        results[name] = {"error": f"{type(error).__name__}: {error}",
                         "traceback": traceback.format_exc()[-4000:]}
    results[name]["wall_s"] = round(time.perf_counter() - start, 1)
    print(json.dumps({k: v for k, v in results[name].items() if k != "traceback"}, indent=1,
                     default=str), flush=True)


def default_out(info: dict) -> Path:
    slug = re.sub(r"[^a-z0-9]+", "-", info["device"].lower()).strip("-")[:40]
    return REPO / "benchmarks" / "results" / f"gpu_check_{slug}.json"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="CPU-sized: float32 tiny update, 2 layers of the 1.5B shapes at "
                        "short rows, FSDP on 2 gloo processes")
    parser.add_argument("--out", default=None, help="results file (default: "
                        "benchmarks/results/gpu_check_<device>.json)")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS),
                        help="the parts to run (default: all of them)")
    parser.add_argument("--fsdp-worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.fsdp_worker:
        fsdp_worker(Path(args.fsdp_worker), args.quick)
        # Leave without the interpreter's teardown: on CPU (gloo, FSDP2) about 1 exit in 12
        # aborted there with "terminate called without an active exception", after both ranks
        # had returned from destroy_process_group and rank 0 had written the results (traced
        # with markers on 30 runs); torchrun then reports the launch failed.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    cuda = torch.cuda.is_available() and not args.quick
    results = {"date": time.strftime("%Y-%m-%d"), "quick": args.quick,
               "environment": environment()}
    print(json.dumps(results["environment"], indent=1), flush=True)
    with tempfile.TemporaryDirectory() as work:
        # Each part as run on a GPU, or CPU-sized (2 layers, short rows, a small vocabulary).
        parts = {
            "tiny_update": (tiny_update, ("cuda", "bfloat16", Path(work)) if cuda
                            else ("cpu", "float32", Path(work)), {}),
            "qwen_shapes": (qwen_shapes, ("cuda", QWEN25_1_5B["num_hidden_layers"], PAPER_ROW,
                                          PAPER_TOKEN_BUDGET) if cuda
                            else ("cpu", 1, dict(prompt=64, action=32, obs=32), 256),
                            dict(generate_batch=16 if cuda else 0, compare_full_logits=cuda)),
            "paw_overhead": (paw_overhead, ("cuda", QWEN25_1_5B["num_hidden_layers"], PAPER_ROW)
                             if cuda else ("cpu", 1, dict(prompt=64, action=32, obs=32)),
                             dict(n_rows=24, token_budget=PAPER_TOKEN_BUDGET, alpha=0.75,
                                  repeats=5) if cuda
                             else dict(n_rows=8, token_budget=512, alpha=0.75, repeats=3,
                                       vocab=4096)),
            "fsdp": (fsdp, (args.quick or not torch.cuda.is_available(),), {}),
        }
        for name in PARTS:
            if name in args.parts:
                function, positional, keywords = parts[name]
                run_part(results, name, function, *positional, **keywords)
    out = Path(args.out) if args.out else default_out(results["environment"])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1, default=str) + "\n", encoding="utf-8")
    print("wrote", out)
    failed = [name for name, part in results.items()
              if isinstance(part, dict) and "error" in part]
    if failed:
        print("FAILED parts:", ", ".join(failed), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
