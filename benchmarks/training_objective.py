"""Time and peak memory of the PaW training pass: the chunked LM head with the fused log-prob
function (ours) against the straightforward full-logits forward
(``model(...).logits.log_softmax(-1)``).

Both compute the same loss (checked) on the same rows; runs alternate A/B and the medians are
printed with their ratio. Peak memory is the growth of the process's peak RSS over one
forward + backward, each variant in its own fresh process.

    python -m benchmarks.training_objective --vocab 32000 --rows 8 --len 512
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def build(vocab: int, hidden: int, layers: int):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 3,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=4096, tie_word_embeddings=True)
    return Qwen2ForCausalLM(config).eval()


def rows(n: int, length: int, vocab: int, obs: int, action: int):
    from training.rl.batch import Sample, collate

    g = torch.Generator().manual_seed(1)
    samples = []
    for i in range(n):
        ids = torch.randint(1, vocab, (length,), generator=g).tolist()
        p = length - action - obs
        samples.append(Sample(ids, p, action, obs, old_logprobs=[-5.0] * action,
                              advantage=1.0 if i % 2 else -1.0, group=i % 2))
    return samples, collate(samples, list(range(n)), pad_id=0)


CHUNK = 512


def ours(model, samples, batch):
    from training.rl.objective import ObjectiveSettings, micro_batch_loss, objective_weights

    settings = ObjectiveSettings()
    sel = torch.ones(len(samples), dtype=torch.bool)
    w_rl, w_wm = objective_weights(samples, sel, {0: 1.0, 1: 1.0}, settings)
    loss, _ = micro_batch_loss(model, batch, w_rl, w_wm, settings, chunk_size=CHUNK)
    loss.backward()
    return loss.item()


def naive(model, samples, batch):
    from training.rl.losses import ppo_clip_token_loss, wm_token_loss
    from training.rl.objective import ObjectiveSettings, objective_weights

    settings = ObjectiveSettings()
    sel = torch.ones(len(samples), dtype=torch.bool)
    w_rl, w_wm = objective_weights(samples, sel, {0: 1.0, 1: 1.0}, settings)
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits.float()
    logp = logits[:, :-1].log_softmax(-1).gather(-1, batch.input_ids[:, 1:, None])[..., 0]
    logp = torch.cat([torch.zeros_like(logp[:, :1]), logp], dim=1)
    tok, _ = ppo_clip_token_loss(logp, batch.old_logprobs, batch.advantages[:, None])
    loss = (w_rl * (tok * batch.action_mask).sum(-1)).sum()
    loss = loss + (w_wm * wm_token_loss(logp, batch.obs_mask, "cmae", 0.2)).sum()
    loss.backward()
    return loss.item()


def _peak_child(name: str, args: argparse.Namespace, queue) -> None:
    """In a fresh process: build, then one forward + backward; report the RSS growth."""
    import resource

    global CHUNK
    CHUNK = args.chunk
    torch.set_num_threads(args.threads)
    model = build(args.vocab, args.hidden, args.layers)
    samples, batch = rows(args.rows, args.len, args.vocab, args.obs, args.action)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    value = (ours if name == "ours" else naive)(model, samples, batch)
    queue.put((value, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024))


def peak_mb(name: str, args: argparse.Namespace) -> tuple[float, float]:
    """(loss, peak RSS growth in MiB) of one training pass, measured in its own process."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    child = ctx.Process(target=_peak_child, args=(name, args, queue))
    child.start()
    result = queue.get()
    child.join()
    return result


def timed(fn, *args) -> tuple[float, float]:
    start = time.perf_counter()
    value = fn(*args)
    return value, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--len", type=int, default=512)
    parser.add_argument("--obs", type=int, default=128)
    parser.add_argument("--action", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--chunk", type=int, default=512, help="LM-head positions per chunk")
    args = parser.parse_args()
    global CHUNK
    CHUNK = args.chunk
    torch.set_num_threads(args.threads)
    model = build(args.vocab, args.hidden, args.layers)
    samples, batch = rows(args.rows, args.len, args.vocab, args.obs, args.action)
    a, mem_a = peak_mb("ours", args)
    b, mem_b = peak_mb("full logits", args)
    assert abs(a - b) <= 1e-4 * max(1.0, abs(b)), (a, b)
    times = {"ours": [], "full logits": []}
    for _ in range(args.repeats):  # alternate A/B
        for name, fn in (("ours", ours), ("full logits", naive)):
            times[name].append(timed(fn, model, samples, batch)[1])
            model.zero_grad()
    t_a, t_b = statistics.median(times["ours"]), statistics.median(times["full logits"])
    print(f"rows={args.rows} len={args.len} vocab={args.vocab} scored/row={args.obs + args.action}"
          f" threads={args.threads} chunk={args.chunk}; loss ours={a:.6f} full={b:.6f}")
    print(f"peak RSS growth of one fwd+bwd (own process each): ours {mem_a:.1f} MiB, full logits {mem_b:.1f} MiB, "
          f"ratio {mem_b / max(mem_a, 1e-9):.2f}x")
    print(f"median time (fwd+bwd, {args.repeats} alternating runs): ours {t_a * 1e3:.0f} ms, "
          f"full logits {t_b * 1e3:.0f} ms, ratio {t_b / t_a:.2f}x")


if __name__ == "__main__":
    main()
