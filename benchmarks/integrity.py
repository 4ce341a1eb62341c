"""What the weight-file check costs (issue 41): the sha256 that a save records and that every
load verifies (``run_files.outputs.file_digest``), against the save and the load it guards.

Two model folders: the ``nano`` tiny model, and one of the Qwen2.5-1.5B architecture in
bfloat16 (1.54 B parameters, a 3.1 GB weight file: every tensor of the real model, random
values). Each is saved through the output guard (``claim_folder`` + ``staged``, which records
the sha256), hashed, verified as a load verifies it, and loaded with ``from_pretrained``,
alternating ``--repeats`` times; medians are reported, with the check's share of a load and
the hash's share of a save. The file stays in the page cache between steps (the machine's
memory holds it); from a cold disk the load and the check each read it once more.

    python -m benchmarks.integrity                       # ~2 min here (2 cores)
    python -m benchmarks.integrity --device cuda --out benchmarks/results/integrity_h200.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks import common as C
from paw_gym.progress import quiet_libraries


def qwen2_1p5b_shapes() -> dict[str, tuple[int, ...]]:
    """Every weight of Qwen2.5-1.5B (tied embeddings), by name: 1,543,714,304 parameters."""
    hidden, inter, layers, vocab, kv = 1536, 8960, 28, 151936, 256
    shapes = {"model.embed_tokens.weight": (vocab, hidden), "model.norm.weight": (hidden,)}
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes |= {p + "self_attn.q_proj.weight": (hidden, hidden),
                   p + "self_attn.q_proj.bias": (hidden,),
                   p + "self_attn.k_proj.weight": (kv, hidden), p + "self_attn.k_proj.bias": (kv,),
                   p + "self_attn.v_proj.weight": (kv, hidden), p + "self_attn.v_proj.bias": (kv,),
                   p + "self_attn.o_proj.weight": (hidden, hidden),
                   p + "mlp.gate_proj.weight": (inter, hidden),
                   p + "mlp.up_proj.weight": (inter, hidden),
                   p + "mlp.down_proj.weight": (hidden, inter),
                   p + "input_layernorm.weight": (hidden,),
                   p + "post_attention_layernorm.weight": (hidden,)}
    return shapes


def save_model(weights, folder: Path) -> None:
    """Save ``weights`` (a transformers model, or the 1.5 B tensors) as a model folder."""
    from safetensors.torch import save_file
    from transformers import Qwen2Config

    if not isinstance(weights, dict):
        weights.save_pretrained(folder)
        return
    Qwen2Config(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                num_attention_heads=12, num_key_value_heads=2, vocab_size=151936,
                tie_word_embeddings=True, torch_dtype="bfloat16").save_pretrained(folder)
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})


def measure(size: str, repeats: int, device: str, folder: Path) -> dict:
    """Alternating, ``repeats`` times: the save through the output guard (which hashes), the
    hash alone, the check a load runs (:func:`run_files.outputs.verify_output`), and the load
    (``from_pretrained`` onto ``device``)."""
    import torch
    from transformers import AutoModelForCausalLM

    from run_files.outputs import MODEL_FILES, claim_folder, file_digest, verify_output

    if size == "nano":
        from agents.tiny_model import build_tiny_model

        built = build_tiny_model(["a tiny corpus for a tiny tokenizer"] * 20, folder / "built",
                                 size="nano")
        weights = AutoModelForCausalLM.from_pretrained(built)
    else:
        generator = torch.Generator().manual_seed(0)
        weights = {name: torch.randn(shape, generator=generator).to(torch.bfloat16)
                   for name, shape in qwen2_1p5b_shapes().items()}
    out = folder / size
    times: dict[str, list[float]] = {"save": [], "hash": [], "verify": [], "load": []}
    for _ in range(repeats):
        start = time.perf_counter()
        with claim_folder(out, "benchmark", True, writes=MODEL_FILES) as output:
            with output.staged(".") as staging:
                save_model(weights, staging)
        times["save"].append(time.perf_counter() - start)
        weight_file = next(out.glob("*.safetensors"))
        start = time.perf_counter()
        digest = file_digest(weight_file)
        times["hash"].append(time.perf_counter() - start)
        start = time.perf_counter()
        verify_output(out)
        times["verify"].append(time.perf_counter() - start)
        start = time.perf_counter()
        model = AutoModelForCausalLM.from_pretrained(out, dtype="auto").to(device)
        # On the CPU the weights are memory-mapped: a first forward pass reads them. One
        # element per 4 KiB page reads every page as that pass would.
        for parameter in model.parameters():
            parameter.detach().view(-1)[::2048].float().sum().item()
        times["load"].append(time.perf_counter() - start)
        parameters = sum(p.numel() for p in model.parameters())
        del model
    median = {k: statistics.median(v) for k, v in times.items()}
    return {"size": size, "bytes": digest["size"], "parameters": parameters,
            **{f"{k}_s": round(v, 4) for k, v in median.items()},
            "hash_gb_per_s": round(digest["size"] / median["hash"] / 1e9, 2),
            "verify_over_load": round(median["verify"] / median["load"], 3),
            "hash_share_of_save": round(median["hash"] / median["save"], 3)}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="nano,1.5b")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu", help="where the load puts the tensors")
    parser.add_argument("--out", default=str(C.RESULTS / "integrity.json"))
    args = parser.parse_args(argv)
    C.set_threads(1)
    quiet_libraries()
    rows = []
    with tempfile.TemporaryDirectory(dir=C.REPO / "runs" if (C.REPO / "runs").is_dir()
                                     else None) as folder:
        for size in args.sizes.split(","):
            rows.append(measure(size, args.repeats, args.device, Path(folder)))
            r = rows[-1]
            print(f"{size}: {r['bytes'] / 1e6:.1f} MB of weights; save (with its sha256) "
                  f"{r['save_s']} s, of which the sha256 {r['hash_s']} s "
                  f"({r['hash_gb_per_s']} GB/s); verify {r['verify_s']} s, load onto "
                  f"{args.device} {r['load_s']} s: the check adds "
                  f"{100 * r['verify_over_load']:.1f} % to a load", flush=True)
    import torch

    result = {"machine": C.machine(), "device": args.device,
              "device_name": torch.cuda.get_device_name() if args.device.startswith("cuda")
              else "cpu", "repeats": args.repeats,
              "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
