"""Where a real model's update goes on CPU, against what the model itself costs.

SmolLM2-135M-Instruct with a LoRA adapter (r 16 on every projection, as the real-model recipes
train it), one torch thread, on Shelf-shaped rows (the paper's prompt with history: ~180 prompt
tokens, ~20 action tokens, ~15 observation tokens). Each phase of an update is timed beside the
ceiling of the same work done by the bare model in the same run:

* **generation** (``HFPolicy.act``: R prompts, up to T new tokens) against its ceiling: the
  prompts' forward passes alone (one row each, no padding, ``inference_mode``) plus T batched
  one-token forward passes on a KV cache;
* **scoring** (a no-grad pass over the rollout's rows, as the KL reference and the rollout
  correction run it: ``PaWTrainer._action_logprobs``' ``gather_logprobs``) against a plain
  forward pass over the same rows;
* **update** (the objective's forward and backward, ``micro_batch_loss``, over h ⊕ a ⊕ o rows)
  against a plain forward + backward of the summed log-probs of the same rows (the model's
  logits, ``log_softmax``, ``gather``).

A ratio near 1 means the phase costs what the model costs; the phases alternate over repeats
and the medians are reported (CPU capacity here moves between about one and two cores). Each
phase is also set against what the core can compute: its decoder FLOPs (:func:`decoder_flops`)
per second as a share of the core's float32 matmul rate at the model's shapes
(:func:`matmul_rate`).

``--compile`` also times scoring and the update with the decoder under ``torch.compile``
(inductor, dynamic shapes), alternating with the eager passes: the compile time (the first
calls: one graph with gradients, one without) and the ratio of each phase after it.

    python -m benchmarks.real_model_speed               # ~10 min on one core
    python -m benchmarks.real_model_speed --repeats 1   # ~4 min
    python -m benchmarks.real_model_speed --compile --out benchmarks/results/real_model_compile.json

``--profile`` also runs each phase once under ``torch.profiler`` and splits its time
(:func:`time_shares`): matrix products, attention, the LM head's log-softmax and gather,
copies and layout ops, other elementwise ops (norms, activations, LoRA's scale), the autograd
engine's own bookkeeping, and the time outside every op (Python, hooks, the dispatcher above
the ops); and it counts the padding of the rows as the trainer splits them into micro-batches
(``token_budget_batches`` at ``--token_budget``, the recipes' 2048).

    python -m benchmarks.real_model_speed --rows 6 --repeats 1 --profile --out benchmarks/results/real_model_profile.json

``--threads 1 2`` also times each phase at each of those torch thread counts, alternating in
the same repeats (the first count is the one every other row uses): whether a run alone on the
machine gains from more threads (``thread_speedup``: the first count's median over each
other's).

    python -m benchmarks.real_model_speed --rows 6 --repeats 3 --threads 1 2 --out benchmarks/results/real_model_threads.json
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path
from typing import Callable

from benchmarks.common import RESULTS, machine, set_threads, write_json

MODEL = "smollm2-135m-instruct"


def shelf_rows(policy, count: int, seed: int = 0):
    """``count`` Shelf transitions as the trainer sees them: prompt ids (the paper's template,
    2 steps of history), an expert action and the next observation."""
    from agents.baselines import ExpertAgent
    from agents.envs import env_factory
    from agents.rollout import rollout

    episodes = rollout(ExpertAgent(0.5), env_factory("PaW/Shelf-v0", split="train"),
                       count, 1, seed=seed, max_steps=6)
    rows = []
    for step in (s for e in episodes for s in e.transitions):
        prompt, _ = policy.encode_prompt(step.prompt, 48)
        action = policy.tokenizer(step.output.text, add_special_tokens=False)["input_ids"]
        observation = policy.tokenizer(step.next_observation,
                                       add_special_tokens=False)["input_ids"]
        rows.append((prompt, action + [policy.eos_ids[0]], observation))
    return rows[:count]


def decoder_flops(config, lengths: list[int], context: int = 0) -> float:
    """Forward FLOPs of the decoder over rows of ``lengths`` new positions each, after
    ``context`` cached positions: its linear layers, ``2·N_lin`` per position (``N_lin`` the
    projections' weights; the embedding and the LM head are left out, as every phase computes
    the head differently), and causal attention, ``4·d_attn`` per attended pair
    (``QKᵀ`` and ``AV``, with ``d_attn`` = heads × head dim). Counted the same way for every
    phase and its ceiling; LoRA's rank-16 side paths (under 3 % here) are left out."""
    hidden, inter = config.hidden_size, config.intermediate_size
    head_dim = getattr(config, "head_dim", None) or hidden // config.num_attention_heads
    attn = config.num_attention_heads * head_dim
    kv = config.num_key_value_heads * head_dim
    linear = hidden * (attn + 2 * kv) + attn * hidden + 3 * hidden * inter
    flops = 0.0
    for n in lengths:
        pairs = n * context + n * (n + 1) / 2   # each new position attends the cache and itself
        flops += config.num_hidden_layers * (2 * linear * n + 4 * attn * pairs)
    return flops


def matmul_rate(tokens: int, hidden: int, inter: int, repeats: int = 5) -> float:
    """The core's float32 matmul rate (FLOP/s, one thread) at the model's MLP shapes:
    ``[tokens, hidden] @ [hidden, inter]`` and ``[tokens, inter] @ [inter, hidden]``, best of
    ``repeats``."""
    import torch

    a, w_up = torch.randn(tokens, hidden), torch.randn(hidden, inter)
    b, w_down = torch.randn(tokens, inter), torch.randn(inter, hidden)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, w_up)
        torch.mm(b, w_down)
        best = min(best, time.perf_counter() - start)
    return 2 * 2 * tokens * hidden * inter / best


#: Each category of :func:`time_shares`: the ops it holds by exact name, and name parts that
#: also put an op in it; checked in this order (the first match names the op's category). An
#: ``aten::`` op that matches none is "elementwise" (norms, activations, LoRA's scale, adds).
OP_CATEGORIES = (
    ("autograd engine", (), ("autograd::", "Backward0", "Backward1")),
    ("matmul", ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul",
                "aten::linear"), ()),
    ("attention", (), ("scaled_dot_product", "flash_attention")),
    ("head (log-softmax, gather)", (), ("log_softmax", "logsumexp", "aten::gather",
                                        "aten::scatter")),
    ("copies and layout", (
        "aten::copy_", "aten::cat", "aten::clone", "aten::contiguous", "aten::_to_copy",
        "aten::to", "aten::index", "aten::index_select", "aten::fill_", "aten::zero_",
        "aten::zeros", "aten::zeros_like", "aten::empty", "aten::empty_like",
        "aten::empty_strided", "aten::as_strided", "aten::view", "aten::_unsafe_view",
        "aten::reshape", "aten::transpose", "aten::expand", "aten::slice", "aten::select",
        "aten::t", "aten::unsqueeze", "aten::squeeze", "aten::permute", "aten::stack",
        "aten::pad", "aten::constant_pad_nd", "aten::split", "aten::split_with_sizes",
        "aten::chunk", "aten::narrow", "aten::detach", "aten::detach_", "aten::alias",
        "aten::new_zeros", "aten::new_empty", "aten::new_ones", "aten::resize_",
        "aten::lift_fresh", "aten::flatten", "aten::unbind", "aten::ones", "aten::ones_like",
        "aten::arange", "aten::full", "aten::full_like"), ()),
)


def op_category(name: str) -> str:
    for category, names, parts in OP_CATEGORIES:
        if name in names or any(part in name for part in parts):
            return category
    return "elementwise" if name.startswith("aten::") else "other ops"


def time_shares(self_seconds: dict[str, float], wall_s: float) -> dict[str, float]:
    """Shares of ``wall_s`` by :func:`op_category` of each op's self time (``self_seconds``:
    op name → seconds spent in the op itself, not in the ops it called), and ``outside ops``:
    the wall time no op accounts for (Python, hooks, the dispatcher above the ops). The self
    times of nested ops add up to the top-level ops' totals, so the shares sum to 1."""
    shares: dict[str, float] = {}
    for name, seconds in self_seconds.items():
        category = op_category(name)
        shares[category] = shares.get(category, 0.0) + seconds / wall_s
    shares["outside ops"] = 1.0 - sum(shares.values())
    return shares


def profiled(work: Callable[[], None]) -> dict[str, object]:
    """``work`` run once under ``torch.profiler`` (CPU): its wall seconds, :func:`time_shares`
    and the 12 ops with the most self time."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as trace:
        start = time.perf_counter()
        work()
        wall = time.perf_counter() - start
    self_seconds = {event.key: event.self_cpu_time_total / 1e6
                    for event in trace.key_averages()}
    top = sorted(self_seconds.items(), key=lambda item: -item[1])[:12]
    return {"wall_s": wall, "shares": time_shares(self_seconds, wall),
            "top_ops": [{"op": name, "self_s": seconds, "share": seconds / wall,
                         "category": op_category(name)} for name, seconds in top]}


def padding(lengths: list[int], token_budget: int) -> dict[str, float]:
    """The rows of ``lengths`` split as the trainer splits them (``token_budget_batches``):
    micro-batches, real and padded tokens, and the padded share."""
    from training.rl.batch import token_budget_batches

    parts = token_budget_batches(lengths, token_budget)
    padded = sum(len(part) * max(lengths[i] for i in part) for part in parts)
    return {"token_budget": token_budget, "micro_batches": len(parts),
            "real_tokens": sum(lengths), "padded_tokens": padded,
            "padding_share": 1 - sum(lengths) / padded}


def timed(work: Callable[[], float | None]) -> float:
    """Seconds ``work`` took, or the seconds it reports (a ceiling that times only its part)."""
    start = time.perf_counter()
    reported = work()
    return reported if isinstance(reported, float) else time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=16, help="prompts per rollout batch")
    parser.add_argument("--new_tokens", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(RESULTS / "real_model_speed.json"))
    parser.add_argument("--model", default=MODEL, help="an offline model's name or a folder")
    parser.add_argument("--compile", action="store_true",
                        help="also time scoring and the update with the decoder compiled")
    parser.add_argument("--profile", action="store_true",
                        help="also split each phase's time by op category (torch.profiler) "
                             "and count the rows' padding")
    parser.add_argument("--threads", type=int, nargs="+", default=[1],
                        help="torch thread counts, each phase timed at each (the first: "
                             "every other row's)")
    parser.add_argument("--token_budget", type=int, default=2048,
                        help="--profile's micro-batch split (the recipes' token_budget)")
    args = parser.parse_args(argv)
    if any(n < 1 for n in args.threads) or len(set(args.threads)) != len(args.threads):
        parser.error(f"--threads {' '.join(map(str, args.threads))}: expected distinct counts "
                     ">= 1")
    set_threads(args.threads[0])
    import torch
    from peft import LoraConfig, get_peft_model

    from agents.hf_policy import HFPolicy
    from agents.kv_cache import preallocated_cache
    from training.rl.batch import Sample, collate
    from training.rl.objective import (ObjectiveSettings, gather_logprobs, micro_batch_loss,
                                       split_causal_lm)
    from agents.serialization import TransitionSerializer

    policy = HFPolicy(args.model, device="cpu", seed=0)
    policy.model = get_peft_model(policy.model, LoraConfig(r=16, lora_alpha=32, task_type=
                                                           "CAUSAL_LM", target_modules=[
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))
    model = policy.model.eval()
    rows = shelf_rows(policy, args.rows)
    serializer = TransitionSerializer.for_policy(policy, "next_turn")
    samples = []
    for prompt, action, observation in rows:
        row = serializer(prompt, action, observation, 1024)
        samples.append(Sample(row.ids, row.prompt_len, row.action_len, row.obs_len,
                              old_logprobs=[0.0] * row.action_len,
                              separator_len=row.separator_len, advantage=random.Random(
                                  len(samples)).choice([-1.0, 1.0]), group=len(samples) % 4))
    everything = list(range(len(samples)))
    micro = collate(samples, everything, pad_id=policy.pad_id)
    prompts = [prompt for prompt, _, _ in rows]
    prompt_tokens = sum(map(len, prompts))
    row_tokens = sum(len(s) for s in samples)

    def generation():
        policy.act_ids(prompts, 1.0, args.new_tokens, stop=(), seed=0)

    def generation_ceiling():
        """The prompts' forward passes (one row each) and T batched one-token steps on a KV
        cache that holds the left-padded prompts (filled outside the timing)."""
        with torch.inference_mode():
            start = time.perf_counter()
            for ids in prompts:
                model(input_ids=torch.tensor([ids]), use_cache=False, logits_to_keep=1)
            prefill = time.perf_counter() - start
            width = max(map(len, prompts))
            cache = preallocated_cache(model.config.num_hidden_layers, width + args.new_tokens)
            padded = torch.tensor([[policy.pad_id] * (width - len(p)) + p for p in prompts])
            mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
            model(input_ids=padded, attention_mask=mask, use_cache=True,
                  **policy.cache_argument(cache))
            token = padded[:, -1:]
            positions = torch.tensor([[len(p)] for p in prompts])
            start = time.perf_counter()
            for _ in range(args.new_tokens):
                mask = torch.cat([mask, mask.new_ones((len(prompts), 1))], dim=-1)
                model(input_ids=token, attention_mask=mask, position_ids=positions,
                      use_cache=True, logits_to_keep=1, **policy.cache_argument(cache))
                positions = positions + 1
            return prefill + time.perf_counter() - start

    def scoring():
        with torch.no_grad():
            gather_logprobs(model, micro, score_obs=False)

    def scoring_ceiling():
        with torch.no_grad():
            model(input_ids=micro.input_ids, attention_mask=micro.attention_mask,
                  use_cache=False)

    settings = ObjectiveSettings()
    w_rl = torch.full((len(samples),), 1.0 / sum(s.action_len for s in samples))
    w_wm = torch.full((len(samples),), 1.0 / len(samples))

    def update():
        loss, _ = micro_batch_loss(model, micro, w_rl, w_wm, settings)
        loss.backward()
        model.zero_grad(set_to_none=True)

    def update_ceiling():
        logits = model(input_ids=micro.input_ids, attention_mask=micro.attention_mask,
                       use_cache=False).logits.float()
        targets = micro.input_ids[:, 1:]
        logprobs = logits[:, :-1].log_softmax(-1).gather(-1, targets[..., None])[..., 0]
        (logprobs * micro.attention_mask[:, 1:]).sum().backward()
        model.zero_grad(set_to_none=True)

    phases = {"generation": (generation, generation_ceiling),
              "scoring": (scoring, scoring_ceiling), "update": (update, update_ceiling)}
    times: dict[str, list[float]] = {f"{name}{suffix}": [] for name in phases
                                     for suffix in ("", "_ceiling")}
    update()  # first calls allocate
    compiled: dict[str, Callable[[], None]] = {}
    compile_s: dict[str, float] = {}
    if args.compile:
        decoder, _ = split_causal_lm(model)
        eager_forward = decoder.forward
        compiled_forward = torch.compile(eager_forward, dynamic=True)

        def with_compiled(phase: Callable[[], None]) -> Callable[[], None]:
            def run() -> None:
                decoder.forward = compiled_forward
                try:
                    phase()
                finally:
                    decoder.forward = eager_forward
            return run

        compiled = {"scoring": with_compiled(scoring), "update": with_compiled(update)}
        for name in ("update", "scoring"):  # the first call compiles (each its own graph)
            compile_s[name] = timed(compiled[name])
            times[f"{name}_compiled"] = []
    others = args.threads[1:]
    for _ in range(args.repeats):
        for name, (phase, ceiling) in phases.items():
            times[name].append(timed(phase))
            times[f"{name}_ceiling"].append(timed(ceiling))
            if name in compiled:
                times[f"{name}_compiled"].append(timed(compiled[name]))
            for count in others:
                torch.set_num_threads(count)
                times.setdefault(f"{name}_threads{count}", []).append(timed(phase))
                torch.set_num_threads(args.threads[0])
    medians = {key: statistics.median(values) for key, values in times.items()}
    shape = model.config
    rate = matmul_rate(row_tokens, shape.hidden_size, shape.intermediate_size)
    forward_rows = decoder_flops(shape, [len(s) for s in samples])
    # Generation: each prompt's prefill, then every new token of every row on its cache.
    generated = decoder_flops(shape, list(map(len, prompts))) + sum(
        decoder_flops(shape, [1], context=len(p) + k) for p in prompts
        for k in range(args.new_tokens))
    # Training with frozen base weights: the backward repeats each product once (the input
    # gradient), so forward + backward is counted as twice the forward.
    flops = {"generation": generated, "scoring": forward_rows, "update": 2 * forward_rows}
    result = {"machine": machine(), "rows": len(samples), "prompt_tokens": prompt_tokens,
              "row_tokens": row_tokens, "new_tokens": args.new_tokens,
              "repeats": args.repeats, "seconds": times, "median_s": medians,
              "ratio_to_ceiling": {name: medians[name] / medians[f"{name}_ceiling"]
                                   for name in phases},
              "ceiling_tokens_per_s": {
                  "forward": row_tokens / medians["scoring_ceiling"],
                  "forward_backward": row_tokens / medians["update_ceiling"]},
              "matmul_gflops": rate / 1e9, "phase_gflop": {k: v / 1e9 for k, v in flops.items()},
              "share_of_matmul_rate": {  # a phase, its ceiling and its compiled run: one work
                  key: flops[key.split("_")[0]] / medians[key] / rate for key in medians}}
    if others:
        result["threads"] = args.threads
        result["thread_speedup"] = {f"{name}_threads{count}": medians[name]
                                    / medians[f"{name}_threads{count}"]
                                    for name in phases for count in others}
    if args.profile:
        result["profile"] = {name: profiled(phase) for name, (phase, _) in phases.items()}
        result["padding"] = padding([len(s) for s in samples], args.token_budget)
    if compiled:
        result["compile_s"] = compile_s
        result["compiled_over_eager"] = {name: medians[f"{name}_compiled"] / medians[name]
                                         for name in compiled}
    write_json(Path(args.out), result)
    print(f"{len(samples)} Shelf rows: {prompt_tokens} prompt tokens, {row_tokens} row tokens; "
          f"{args.new_tokens} new tokens per prompt; medians of {args.repeats}")
    for name in phases:
        print(f"  {name:<10} {medians[name]:7.2f} s   ceiling {medians[name + '_ceiling']:7.2f} s"
              f"   ratio {result['ratio_to_ceiling'][name]:.2f}")
    print(f"  ceiling: forward {result['ceiling_tokens_per_s']['forward']:.0f} tokens/s, forward"
          f" + backward {result['ceiling_tokens_per_s']['forward_backward']:.0f} tokens/s")
    for name in compiled:
        print(f"  {name} compiled: {medians[name + '_compiled']:.2f} s against "
              f"{medians[name]:.2f} s eager (x{result['compiled_over_eager'][name]:.2f}), after "
              f"{compile_s[name]:.0f} s for its first call")
    for key, speedup in result.get("thread_speedup", {}).items():
        name, count = key.split("_threads")
        print(f"  {name} at {count} threads: {medians[key]:.2f} s, x{speedup:.2f} against "
              f"{args.threads[0]}")
    for name, entry in result.get("profile", {}).items():
        print(f"  {name} profiled ({entry['wall_s']:.2f} s): " + ", ".join(
            f"{category} {share:.2f}" for category, share in
            sorted(entry["shares"].items(), key=lambda item: -item[1])))
    if "padding" in result:
        pad = result["padding"]
        print(f"  padding: {pad['micro_batches']} micro-batches at {pad['token_budget']} tokens, "
              f"{pad['padded_tokens']} padded for {pad['real_tokens']} real tokens "
              f"({100 * pad['padding_share']:.1f} % padding)")
    print(f"  the core's float32 matmul rate at the model's shapes: {rate / 1e9:.0f} GFLOP/s; "
          "share of it each phase achieves: " + ", ".join(
              f"{key} {share:.2f}" for key, share in result["share_of_matmul_rate"].items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
