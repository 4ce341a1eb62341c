"""``benchmarks/real_model_speed.py``'s FLOP count, against a literal reference (issue 56)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from benchmarks.real_model_speed import decoder_flops

# A one-layer decoder small enough to count by hand: hidden 4, MLP 8, 2 query heads and 1 key /
# value head of width 2.
TOY = SimpleNamespace(hidden_size=4, intermediate_size=8, num_attention_heads=2,
                      num_key_value_heads=1, head_dim=2, num_hidden_layers=1)
# Linear weights: q 4x4, k and v 4x2 each, o 4x4, gate, up and down 4x8 each = 144.
LINEAR = 4 * 4 + 2 * (4 * 2) + 4 * 4 + 3 * 4 * 8


def test_the_count_is_the_linear_layers_and_the_causal_attention_pairs():
    # Two new positions without a cache: 2 products per weight per position, and the causal
    # pairs (1 + 2 = 3) at 4 x d_attn (QK^T and AV, d_attn = 4).
    assert LINEAR == 144
    assert decoder_flops(TOY, [2]) == 2 * LINEAR * 2 + 4 * 4 * 3
    # One new position on a cache of 5: it attends 5 cached positions and itself.
    assert decoder_flops(TOY, [1], context=5) == 2 * LINEAR + 4 * 4 * 6
    # Rows add up; layers multiply.
    assert decoder_flops(TOY, [2, 1]) == decoder_flops(TOY, [2]) + decoder_flops(TOY, [1])
    two_layers = SimpleNamespace(**{**vars(TOY), "num_hidden_layers": 2})
    assert decoder_flops(two_layers, [3]) == pytest.approx(2 * decoder_flops(TOY, [3]))


def test_smollm2_costs_212_mflop_per_position_in_its_linear_layers():
    """SmolLM2-135M-Instruct's shapes (config.json): 30 layers of width 576, MLP 1536, 9 query
    and 3 key / value heads of 64: 2 x 106.2 M weights outside the embedding."""
    smollm2 = SimpleNamespace(hidden_size=576, intermediate_size=1536, num_attention_heads=9,
                              num_key_value_heads=3, head_dim=64, num_hidden_layers=30)
    one = decoder_flops(smollm2, [1])
    assert one == 30 * (2 * (576 * (576 + 2 * 192) + 576 * 576 + 3 * 576 * 1536) + 4 * 576)
    assert 2.12e8 < one < 2.13e8


@pytest.mark.heavy
def test_compile_times_the_compiled_passes_beside_the_eager_ones(tiny_model_dir, tmp_path):
    """``--compile`` (here on the tiny model): the first compiled calls are timed apart, and
    scoring and the update each get a compiled row of the same work as their eager one."""
    import json

    from benchmarks.real_model_speed import main

    out = tmp_path / "speed.json"
    assert main(["--model", str(tiny_model_dir), "--rows", "2", "--new_tokens", "2",
                 "--repeats", "1", "--compile", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert set(result["compile_s"]) == set(result["compiled_over_eager"]) == {"scoring",
                                                                                "update"}
    for name in ("scoring", "update"):
        assert result["compile_s"][name] > 0 and len(result["seconds"][f"{name}_compiled"]) == 1
        assert result["compiled_over_eager"][name] == pytest.approx(
            result["median_s"][f"{name}_compiled"] / result["median_s"][name])
        assert result["share_of_matmul_rate"][f"{name}_compiled"] > 0
