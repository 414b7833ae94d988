"""planner.specs.layers: sliding-window attention work, against numbers worked out by hand."""
from __future__ import annotations

import numpy as np
import pytest
from pytest import approx

from planner.specs.layers import (attention_core_flops_per_seq, causal_pairs, flash_tiles, flash_work_fraction,
                            window_work_fraction, windowed_layers)
from planner.specs import ModelSpec


def _model(**fields) -> ModelSpec:
    data = dict(name="w", layers=36, hidden=2880, heads=64, kv_heads=8, head_dim=64, vocab=1000, seq_len=4096,
                training=dict(global_batch=8))
    return ModelSpec.model_validate({**data, **fields})


def test_causal_pairs_by_hand():
    # sum over i = 1..4096 of min(i, 128) = 4096 x 128 - 128 x 127 / 2 = 524,288 - 8,128
    assert causal_pairs(4096, 128) == 516_160
    assert causal_pairs(4096) == 4096 * 4097 / 2 == 8_390_656
    # a window as long as the sequence, or longer, is full causal attention
    assert causal_pairs(4096, 4096) == causal_pairs(4096, 10**6) == causal_pairs(4096)
    assert causal_pairs(5, 2) == 1 + 2 + 2 + 2 + 2


def test_flash_tiles_by_hand():
    # 32 query blocks of 128: block 0 reaches 1 key block, every later one its own and the one before
    assert flash_tiles(4096, 128) == 1 + 31 * 2 == 63
    assert flash_tiles(4096) == 32 * 33 / 2 == 528
    # a window of 1,024 = 8 blocks: block i reaches blocks i - 7 .. i (i - 8 + 1 = floor((128 i - 1023) / 128))
    assert flash_tiles(4096, 1024) == sum(min(i, 8) + 1 for i in range(32))


def test_window_fractions_mix_the_layers():
    ratio = 516_160 / 8_390_656  # 0.061516
    full = _model()
    assert window_work_fraction(full) == 1.0 and flash_work_fraction(full) == 1.0 and windowed_layers(full) == 0
    every = _model(sliding_window=128)
    assert windowed_layers(every) == 36 and window_work_fraction(every) == approx(ratio, rel=1e-12)
    alternate = _model(sliding_window=128, full_attention_every=2)  # GPT-OSS: 18 windowed, 18 full
    assert windowed_layers(alternate) == 18
    assert window_work_fraction(alternate) == approx((18 + 18 * ratio) / 36, rel=1e-12)  # 0.53076
    assert flash_work_fraction(alternate) == approx((18 + 18 * 63 / 528) / 36, rel=1e-12)  # 0.55966
    # a windowed tile at 3.06 a full one (Blackwell, cuDNN): 3.06 x 63 / 528 = 0.36511 of a full layer
    assert flash_work_fraction(alternate, 3.06) == approx((18 + 18 * 3.06 * 63 / 528) / 36, rel=1e-12)  # 0.68256
    assert flash_work_fraction(alternate, 9.0) == 1.0  # 9 x 63 / 528 = 1.07: never more than the full layer
    gemma3 = _model(sliding_window=1024, full_attention_every=6)  # 6 of 36 full, 30 windowed
    assert windowed_layers(gemma3) == 30
    # a window no shorter than the sequence changes nothing
    assert window_work_fraction(_model(sliding_window=4096, full_attention_every=2)) == 1.0


def test_attention_core_flops_follow_the_pairs():
    # 2 s^2 heads (qk + v) = 2 x 4096^2 x 64 x 128 = 2.7488e11 per layer without a window
    full = 2 * 4096**2 * 64 * 128
    assert attention_core_flops_per_seq(_model()) == full
    alternate = _model(sliding_window=128, full_attention_every=2)
    assert attention_core_flops_per_seq(alternate) == approx(full * (18 + 18 * 516_160 / 8_390_656) / 36, rel=1e-12)
    assert attention_core_flops_per_seq(alternate, windowed=False) == full


@pytest.mark.parametrize("fields, fragment", [
    (dict(sliding_window=0), "greater than 0"),
    (dict(sliding_window=-128), "greater than 0"),
    (dict(full_attention_every=2), "needs sliding_window"),
    (dict(sliding_window=128, full_attention_every=1), "greater than or equal to 2"),
    (dict(sliding_window=128, full_attention_every=37), "more than the 36 layers"),
])
def test_bad_windows_are_refused(fields, fragment):
    with pytest.raises(ValueError, match=fragment):
        _model(**fields)


def test_mlp_width_is_the_tp_split_mlps_down_projection_input():
    from planner.specs.layers import layer_kinds, micro_batch_tokens
    from planner.specs.loading import load_model

    # DeepSeek-V3's config.json: first_k_dense_replace 3 dense layers of intermediate_size 18,432; 58 MoE layers,
    # n_shared_experts 1 x moe_intermediate_size 2,048 split over tp (the routed experts are not: ep)
    assert [(k.name, k.count, k.mlp_width) for k in layer_kinds(load_model("deepseek-v3"))] == [
        ("dense", 3, 18432), ("moe", 58, 2048)]
    # Mixtral 8x7B: every layer MoE, no shared experts, so no tp-split MLP; GPT-3 175B: 4 x 12,288 = 49,152
    assert [k.mlp_width for k in layer_kinds(load_model("mixtral-8x7b"))] == [0]
    assert [k.mlp_width for k in layer_kinds(load_model("gpt3-175b"))] == [4 * 12288]

    class Rows:  # two layouts: b 2, cp 1 and b 1, cp 4
        micro_batch = np.array([2, 1])
        cp = np.array([1, 4])
    # b s / cp of a 4,096-token sequence: 8,192 and 1,024 tokens
    assert micro_batch_tokens(_model(), Rows).tolist() == [8192.0, 1024.0]
