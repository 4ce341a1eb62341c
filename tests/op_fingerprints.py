"""One hash per float op of a small transformer's training step, so that two CPUs can be
compared op by op: the first op whose hash differs is where their numerics part (issue 59).

The ops are those a step of the demo and of SmolLM2 runs: matrix products at the tiny model's
and SmolLM2's shapes (hidden 576, MLP 1536, vocabulary 49152), sums, the element-wise maths
(exp, log, tanh, sigmoid, SiLU, GELU, a square root), RMS and layer norm, softmax, attention,
cross-entropy, sampling, a backward pass and an AdamW step; each on fixed inputs drawn from one
seeded generator, on one torch thread, hashed as the first 16 hex digits of the sha256 of its
output's bytes. The inputs and their order are those of the file made on an Intel Xeon that
``tests/test_numerics.py`` compares with (``tests/data/numerics/``), so a hash means the same
op on the same inputs on every CPU with the same library versions.

Run it under the numerics mode to check (applied here before torch loads), on two CPUs, and
compare the files::

    PAW_GYM_NUMERICS=portable python -m tests.op_fingerprints > mine.json
    python -m tests.op_fingerprints --compare theirs.json mine.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

#: (rows, inner, columns) of the matrix products: the tiny model's, then SmolLM2's projections,
#: MLP and output layer.
SHAPES = ((64, 128, 128), (64, 128, 512), (257, 576, 576), (257, 576, 1536), (8, 576, 49152))


def _digest(tensor) -> str:
    return hashlib.sha256(tensor.detach().contiguous().numpy().tobytes()).hexdigest()[:16]


def fingerprints() -> dict[str, str]:
    """Each op's name and the hash of its output, in a fixed order (torch on one thread; call
    it with the numerics mode already in the environment)."""
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(0)

    def draw(*shape: int, scale: float = 1.0):
        return torch.randn(*shape, generator=generator) * scale

    ops: dict[str, str] = {}
    for n, k, m in SHAPES:
        a, b = draw(n, k), draw(k, m, scale=k ** -0.5)
        ops[f"matmul {n}x{k}x{m}"] = _digest(a @ b)
        ops[f"linear+bias {n}x{k}x{m}"] = _digest(F.linear(a, b.t().contiguous(), draw(m)))
        ops[f"bmm 4x{n}x{k}x{m}"] = _digest(torch.bmm(a.expand(4, n, k), b.expand(4, k, m)))
    x = draw(64, 4096)
    elementwise = {
        "sum dim -1": lambda: x.sum(-1), "sum all": lambda: x.sum(),
        "mean dim -1": lambda: x.mean(-1), "exp": lambda: x.exp(),
        "log(abs+1)": lambda: (x.abs() + 1).log(), "tanh": lambda: x.tanh(),
        "sigmoid": lambda: torch.sigmoid(x), "silu": lambda: F.silu(x),
        "gelu": lambda: F.gelu(x),
        "rsqrt(var)": lambda: torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6),
        "softmax": lambda: torch.softmax(x, -1), "log_softmax": lambda: torch.log_softmax(x, -1),
        "layer_norm": lambda: F.layer_norm(x, (4096,)), "pow 0.5": lambda: x.abs().pow(0.5),
    }
    ops.update((name, _digest(op())) for name, op in elementwise.items())
    positions = torch.arange(4096.0)
    cos = positions.outer(draw(32).abs()).cos()  # rotary embedding's angles
    ops["cos/sin (rope)"] = _digest(torch.cat([cos, positions.outer(draw(32).abs()).sin()]))
    q, k, v = draw(1, 4, 128, 64), draw(1, 4, 128, 64), draw(1, 4, 128, 64)
    ops["sdpa causal"] = _digest(F.scaled_dot_product_attention(q, k, v, is_causal=True))
    logits, target = draw(256, 8192), torch.randint(0, 8192, (256,), generator=generator)
    ops["cross_entropy"] = _digest(F.cross_entropy(logits, target))
    probabilities = torch.softmax(logits[:8], -1)
    ops["multinomial"] = _digest(torch.multinomial(probabilities, 4, generator=generator).float())
    # A backward pass through an embedding and an MLP block, then one AdamW step.
    torch.manual_seed(0)
    block = torch.nn.Sequential(torch.nn.Linear(128, 512), torch.nn.SiLU(),
                                torch.nn.Linear(512, 128))
    embedding = torch.nn.Embedding(1000, 128)
    ids = torch.randint(0, 1000, (4, 64), generator=generator)
    block(embedding(ids)).pow(2).mean().backward()
    ops["backward: first linear grad"] = _digest(block[0].weight.grad)
    ops["backward: embedding grad"] = _digest(embedding.weight.grad)
    torch.optim.AdamW([*block.parameters(), *embedding.parameters()], lr=1e-3).step()
    ops["adamw step"] = _digest(block[0].weight)
    return ops


def differing(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The ops of file ``a`` whose hash in file ``b`` differs (or is missing), in ``a``'s
    order."""
    return [name for name, digest in a["ops"].items() if b["ops"].get(name) != digest]


def record() -> dict[str, Any]:
    """A file's content: the machine (:func:`training.infra.numerics.machine`: the CPU's name
    and kind, torch's kernels, the mode and its settings, the library versions) and the
    ops."""
    from training.infra.numerics import machine

    ops = fingerprints()
    return {"machine": machine(), "ops": ops}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.op_fingerprints",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--compare", nargs=2, metavar=("A", "B"), type=Path,
                        help="say which ops of file A differ in file B, instead of hashing")
    args = parser.parse_args(argv)
    if args.compare:
        a, b = (json.loads(path.read_text(encoding="utf-8")) for path in args.compare)
        names = differing(a, b)
        print(f"{len(names)} of {len(a['ops'])} ops differ" + (f": {', '.join(names)}"
                                                                if names else ""))
        return 0
    from training.infra.numerics import apply

    apply()  # PAW_GYM_NUMERICS, before torch loads
    print(json.dumps(record(), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
