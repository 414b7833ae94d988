"""Per-layer compute time (planner/costs/compute.py), worked out by hand on the toy GPU.

Toy GPU (conftest): GEMMs at 100e12 x 0.5 = 50e12 FLOP/s, memory-bound traffic at 1000e9 x 0.5 =
500e9 B/s, flash attention at 100e12 x 0.25 = 25e12 FLOP/s, backward memory traffic 2 x forward,
100 us fixed per layer forward.
Model (conftest default): h 1024, 16 heads, ffn 4096 (GeLU), s 512, vocab 8192.
"""
from __future__ import annotations

import numpy as np
import pytest
from pytest import approx

from planner.costs.compute import gemm_s, peak_flops
from planner.layout.space import single_layout
from .conftest import layer_compute_on

GEMM_FLOPS, HBM_BPS, FLASH_FLOPS = 50e12, 500e9, 25e12
OVERHEAD = 100e-6
REL = 1e-9


def roofline(m, k, n):
    """Module docstring: FLOPs / (peak x eff_gemm) + bytes / (HBM x eff_hbm), 2-byte operands."""
    return 2 * m * k * n / GEMM_FLOPS + 2 * (m * k + k * n + m * n) / HBM_BPS


def lay(**kw):
    kw.setdefault("dp", 1)
    kw.setdefault("pp", 1)
    kw.setdefault("num_microbatches", 1)
    return single_layout(**kw)


def test_gemm_soft_roofline_one_shape(toy_gpu):
    # 4096 x 1024 x 2048: 2 * 4096 * 1024 * 2048 = 17,179,869,184 FLOPs / 50e12 = 343.597 us
    # bytes 2 * (4,194,304 + 2,097,152 + 8,388,608) = 29,360,128 / 500e9 = 58.720 us -> 402.318 us
    t = gemm_s(4096, 1024, 2048, 100e12, 1000e9, toy_gpu)
    assert t == approx(17_179_869_184 / 50e12 + 29_360_128 / 500e9, rel=1e-12)
    assert t == approx(402.31763968e-6, rel=1e-9)


def test_peak_follows_precision(toy_gpu_data):
    from planner.specs import GpuSpec

    gpu = GpuSpec.model_validate(toy_gpu_data(peak_tflops=dict(bf16=100.0, fp16=80.0)))
    assert peak_flops(gpu, "bf16") == 100e12
    assert peak_flops(gpu, "fp16") == 80e12


def test_layer_forward_and_backward_by_hand(make_model, toy_gpu):
    model = make_model()
    lc = layer_compute_on(model, toy_gpu, lay(tp=2, micro_batch=2))
    b, t, s, h, f = 2, 2, 512, 1024, 4096
    tokens = b * s  # 1024 GEMM rows
    # QKV 1024x1024x1536, out-proj 1024x512x1024, MLP up 1024x1024x2048, down 1024x2048x1024
    dense = roofline(1024, 1024, 1536) + roofline(1024, 512, 1024) + roofline(1024, 1024, 2048) + roofline(1024, 2048, 1024)
    # flash: 4 b s^2 h / t = 1,073,741,824 FLOPs, half skipped by the causal mask, at 25e12 -> 21.475 us
    core = 0.5 * 4 * b * s * s * h / t / FLASH_FLOPS
    assert core == approx(21.47483648e-6, rel=1e-12)
    # GeLU reads + writes s b f / t at 2 B: 8,388,608 B; LN + bias-dropout-add 22 s b h = 23,068,672 B
    elem = (4 * tokens * f / t + 22 * tokens * h) / HBM_BPS  # 62.915 us
    assert lc.fwd_s[0] == approx(dense + core + elem + OVERHEAD, rel=REL)
    # backward: GEMMs twice, flash backward 2.5 x forward, memory-bound x 2, overhead x 2
    assert lc.bwd_s[0] == approx(2 * dense + 2.5 * core + 2 * elem + 2 * OVERHEAD, rel=REL)
    assert lc.recompute_s[0] == 0.0


def test_logits_by_hand(make_model, toy_gpu):
    model = make_model()
    lc = layer_compute_on(model, toy_gpu, lay(tp=2, micro_batch=2))
    # output GEMM 1024 x 1024 x 8192/2, forward + 2 backward; fp32 cross-entropy 12 B over s b V / t
    # = 12 * 1024 * 4096 = 50,331,648 B, read once forward and (factor 2) backward
    expected = 3 * roofline(1024, 1024, 4096) + (1 + 2) * 12 * 1024 * 4096 / HBM_BPS
    assert lc.logits_fwd_bwd_s[0] == approx(expected, rel=REL)


def test_standard_attention_core_by_hand(make_model, toy_gpu):
    model = make_model(training=dict(attention="standard"))
    flash = make_model()
    layout = lay(tp=2, micro_batch=2)
    b, t, s, h, a = 2, 2, 512, 1024, 16
    scores = 2 * a * s * s * b / t  # 8,388,608 B of fp16 scores on 8 heads
    # QK^T + AV at GEMM speed: 1,073,741,824 / 50e12 = 21.475 us; their traffic: scores written and
    # read (2x) and Q, K, V, context 4 s b h / t = 4,194,304 B -> 20,971,520 / 500e9 = 41.943 us
    gemm_part = 4 * b * s * s * h / t / GEMM_FLOPS + (2 * scores + 2 * 4 * b * s * h / t) / HBM_BPS
    # softmax (read + write) and dropout (read, write, 1-byte mask): 4.5 x scores = 75.497 us
    softmax_dropout = 4.5 * scores / HBM_BPS
    core_std = gemm_part + softmax_dropout  # 138.915 us
    assert core_std == approx(138.91534848e-6, rel=1e-9)
    core_flash = 0.5 * 4 * b * s * s * h / t / FLASH_FLOPS
    std, fl = layer_compute_on(model, toy_gpu, layout), layer_compute_on(flash, toy_gpu, layout)
    assert std.fwd_s[0] - fl.fwd_s[0] == approx(core_std - core_flash, rel=1e-6)
    # backward: GEMM part twice, softmax/dropout x the backward factor 2; flash: 2.5 x its forward
    assert std.bwd_s[0] - fl.bwd_s[0] == approx(2 * gemm_part + 2 * softmax_dropout - 2.5 * core_flash, rel=1e-6)


def test_doubling_the_micro_batch_doubles_all_but_weight_traffic(make_model, toy_gpu):
    # Every FLOP and every activation byte is linear in b; the weight bytes (k x n of each GEMM)
    # and the fixed per-layer overhead are not. So fwd(2b) = 2 fwd(b) - overhead - weight traffic.
    model = make_model()
    one, two = (layer_compute_on(model, toy_gpu, lay(tp=2, micro_batch=b)) for b in (2, 4))
    # weights per GPU at tp 2: 1024x1536 + 512x1024 + 1024x2048 + 2048x1024 = 6,291,456 x 2 B
    weights_s = 2 * 6_291_456 / HBM_BPS  # 25.166 us
    assert two.fwd_s[0] == approx(2 * one.fwd_s[0] - OVERHEAD - weights_s, rel=REL)
    # backward: GEMMs twice (weight traffic x 2), overhead x 2
    assert two.bwd_s[0] == approx(2 * one.bwd_s[0] - 2 * OVERHEAD - 2 * weights_s, rel=REL)


def test_sequence_parallel_lowers_forward_time(make_model, toy_gpu):
    model = make_model()
    plain = layer_compute_on(model, toy_gpu, lay(tp=2, micro_batch=2))
    sp = layer_compute_on(model, toy_gpu, lay(tp=2, micro_batch=2, sequence_parallel=True))
    # LN / bias-dropout-add traffic 22 s b h drops to 22 s b h / t:
    # 22 * 1,048,576 * (1 - 1/2) / 500e9 = 23.069 us forward, x 2 backward
    saved = 22 * 1024 * 1024 * (1 - 1 / 2) / HBM_BPS
    assert saved == approx(23.068672e-6, rel=1e-9)
    assert plain.fwd_s[0] - sp.fwd_s[0] == approx(saved, rel=1e-6)
    assert plain.bwd_s[0] - sp.bwd_s[0] == approx(2 * saved, rel=1e-6)
    assert sp.fwd_s[0] < plain.fwd_s[0]


@pytest.mark.parametrize("attention", ["flash", "standard"])
def test_recompute_modes(make_model, toy_gpu, attention):
    model = make_model(training=dict(attention=attention))
    modes = {m: layer_compute_on(model, toy_gpu, lay(tp=2, micro_batch=2, recompute=m)) for m in ("none", "selective", "full")}
    b, t, s, h, a = 2, 2, 512, 1024, 16
    if attention == "flash":
        core = 0.5 * 4 * b * s * s * h / t / FLASH_FLOPS  # 21.475 us
    else:
        scores = 2 * a * s * s * b / t
        core = 4 * b * s * s * h / t / GEMM_FLOPS + (2 * scores + 8 * b * s * h / t) / HBM_BPS + 4.5 * scores / HBM_BPS
    assert modes["none"].recompute_s[0] == 0.0
    # selective recomputes exactly the attention core (Korthikanti et al. 2022 Sec. 5)
    assert modes["selective"].recompute_s[0] == approx(core, rel=1e-9)
    # full recomputes the whole forward
    assert modes["full"].recompute_s[0] == approx(modes["none"].fwd_s[0], rel=1e-12)
    # the forward and backward passes themselves do not change
    for m in ("selective", "full"):
        assert modes[m].fwd_s[0] == modes["none"].fwd_s[0]
        assert modes[m].bwd_s[0] == modes["none"].bwd_s[0]


def test_gqa_swiglu_dense_shapes(make_model, toy_gpu):
    # 16 heads of 64, 4 KV heads -> K, V 256 wide; SwiGLU ffn 2048: up+gate 1024 x 4096/t
    model = make_model(kv_heads=4, ffn_hidden=2048, ffn_act="swiglu")
    lc = layer_compute_on(model, toy_gpu, lay(tp=2, micro_batch=2))
    b, t, s, h, f = 2, 2, 512, 1024, 2048
    tokens = b * s
    dense = (roofline(tokens, h, (h + 2 * 256) / t) + roofline(tokens, h / t, h)
             + roofline(tokens, h, 2 * f / t) + roofline(tokens, f / t, h))
    core = 0.5 * 4 * b * s * s * h / t / FLASH_FLOPS
    # SwiGLU reads gate and up, writes their product: 6 s b f / t bytes
    elem = (6 * tokens * f / t + 22 * tokens * h) / HBM_BPS
    assert lc.fwd_s[0] == approx(dense + core + elem + OVERHEAD, rel=REL)


def test_arrays_are_scored_row_by_row(make_model, toy_gpu):
    # Two layouts in one call give the same numbers as one layout at a time.
    from planner.layout.space import Layouts

    model = make_model()
    a, b = lay(tp=2, micro_batch=2), lay(tp=4, micro_batch=1, sequence_parallel=True)
    both = Layouts(**{k: np.concatenate([getattr(a, k), getattr(b, k)]) for k in a.__dataclass_fields__})
    lc = layer_compute_on(model, toy_gpu, both)
    assert lc.fwd_s[0] == layer_compute_on(model, toy_gpu, a).fwd_s[0]
    assert lc.fwd_s[1] == layer_compute_on(model, toy_gpu, b).fwd_s[0]


def test_flashattention2_runs_at_its_relative_rate_and_only_where_the_stack_uses_it(make_model, toy_gpu_data):
    from planner.specs import GpuSpec
    data = toy_gpu_data()
    data["efficiency"] = {**data["efficiency"], "flash_fa2_relative": 0.62}
    gpu = GpuSpec.model_validate(data)
    layout = lay(tp=2, micro_batch=2)
    fused = make_model()
    stack = fused.training.stack.model_copy(update={"attention_kernel": "fa2"})
    fa2 = fused.model_copy(update={"training": fused.training.model_copy(update={"stack": stack})})
    b, t, s, h = 2, 2, 512, 1024
    # causal flash core: half of 4 b s^2 h / t = 1,073,741,824 FLOP, 536,870,912 at 25 TFLOP/s = 21.475 us
    # forward; FlashAttention-2 at 0.62 of that rate: 21.475 / 0.62 = 34.637 us, 13.162 us more; backward 2.5x
    core = 0.5 * 4 * b * s * s * h / t / FLASH_FLOPS
    assert core == approx(21.47483648e-6, rel=1e-9)
    one, two = layer_compute_on(fused, gpu, layout), layer_compute_on(fa2, gpu, layout)
    assert two.fwd_s[0] - one.fwd_s[0] == approx(core / 0.62 - core, rel=1e-6)
    assert two.bwd_s[0] - one.bwd_s[0] == approx(2.5 * (core / 0.62 - core), rel=1e-6)
    # a GPU whose fused kernel is FlashAttention-2 itself (the default 1.0, as on A100): no change
    same = layer_compute_on(fa2, GpuSpec.model_validate(toy_gpu_data()), layout)
    assert same.fwd_s[0] == approx(layer_compute_on(fused, GpuSpec.model_validate(toy_gpu_data()), layout).fwd_s[0])
