"""``benchmarks/real_model_speed.py``'s FLOP count, profile split and padding count, against
literal references (issue 56)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from benchmarks.real_model_speed import decoder_flops, op_category, padding, profiled, time_shares

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


def test_a_profile_splits_the_wall_time_by_op_category_and_leaves_the_rest_outside_ops():
    self_seconds = {"aten::mm": 2.0, "aten::copy_": 1.0, "aten::tanh": 0.25, "aten::mul": 0.25,
                    "autograd::engine::evaluate_function: MmBackward0": 0.5}
    assert time_shares(self_seconds, 5.0) == pytest.approx(
        {"matmul": 0.4, "copies and layout": 0.2, "elementwise": 0.1, "autograd engine": 0.1,
         "outside ops": 0.2})
    # Exact names for short ones: aten::t is a layout op, aten::tanh is not.
    assert (op_category("aten::t"), op_category("aten::tanh")) == ("copies and layout",
                                                                   "elementwise")
    assert op_category("aten::_scaled_dot_product_flash_attention_for_cpu") == "attention"
    assert op_category("aten::_log_softmax") == "head (log-softmax, gather)"


def test_a_profiled_matmul_loop_is_mostly_matmul(one_torch_thread):
    """A real profile: 20 products of 256 x 256 matrices spend most of their time in aten::mm,
    and the shares add up to 1."""
    import torch

    a = torch.randn(256, 256)

    def work():
        for _ in range(20):
            torch.mm(a, a)

    entry = profiled(work)
    assert sum(entry["shares"].values()) == pytest.approx(1.0)
    assert entry["shares"]["matmul"] > 0.5
    assert entry["top_ops"][0]["op"] == "aten::mm"


def test_padding_counts_the_trainers_micro_batches():
    # Longest first at a budget of 20: [10, 8] (2 x 10 = 20), then [3] alone.
    assert padding([10, 8, 3], 20) == {"token_budget": 20, "micro_batches": 2,
                                       "real_tokens": 21, "padded_tokens": 23,
                                       "padding_share": pytest.approx(2 / 23)}


@pytest.mark.parametrize("threads", [["0"], ["1", "1"]])
def test_bad_thread_counts_are_refused_before_the_model_loads(threads, capsys):
    from benchmarks.real_model_speed import main

    with pytest.raises(SystemExit) as stop:
        main(["--threads", *threads, "--model", "/nowhere"])
    assert stop.value.code == 2
    assert f"--threads {' '.join(threads)}: expected distinct counts >= 1" in capsys.readouterr().err
