"""Memory model (planner/costs/memory.py) against Korthikanti et al. 2022 Fig. 1 / Eq. 2-6 and
hand counts of parameters, ZeRO sharding and recomputation."""
from __future__ import annotations

import pytest
from pytest import approx

from planner.costs.memory import (
    activation_bytes_per_layer,
    layers_in_flight,
    memory_breakdown,
    parameters_per_gpu,
)
from planner.costs.pipeline_ranks import bounding_ranks, rank_layers
from planner.layout.space import single_layout
from planner.specs import GpuSpec
from .conftest import job_on

GIB = 2**30
# Korthikanti et al. 2022 Table 3 models; fp16 and the standard (non-fused) softmax attention of
# the paper, so the 5as/h score term is stored when nothing is recomputed.
PAPER_TRAINING = dict(precision="fp16", attention="standard")
M22B = dict(layers=48, hidden=6144, heads=64, vocab=51200, seq_len=2048, training=dict(global_batch=4, **PAPER_TRAINING))
M175B = dict(layers=96, hidden=12288, heads=96, vocab=51200, seq_len=2048, training=dict(global_batch=64, **PAPER_TRAINING))
M530B = dict(layers=105, hidden=20480, heads=128, vocab=51200, seq_len=2048, training=dict(global_batch=280, **PAPER_TRAINING))
M1T = dict(layers=128, hidden=25600, heads=160, vocab=51200, seq_len=2048, training=dict(global_batch=512, **PAPER_TRAINING))


def lay(**kw):
    kw.setdefault("dp", 1)
    kw.setdefault("micro_batch", 1)
    return single_layout(**kw)


@pytest.fixture
def a100(preset) -> GpuSpec:
    return GpuSpec.model_validate(preset("a100-sxm-80gb"))


# --- Korthikanti et al. 2022 Fig. 1 (activation memory per GPU) -------------------------------


def test_fig1_22b_no_recompute_no_sp(make_model, a100):
    model = make_model(**M22B)
    layout = lay(tp=8, pp=1, micro_batch=4, num_microbatches=1)
    s, b, h, a, t = 2048, 4, 6144, 64, 8
    sbh = s * b * h  # 50,331,648
    # Eq. 4: s b h (10 + 24/t + 5 a s/(h t)) = sbh (10 + 3 + 655360/49152 = 13.333) = sbh * 26.333
    per_layer = sbh * (10 + 24 / t + 5 * a * s / (h * t))
    assert activation_bytes_per_layer(model, layout)[0][0] == approx(per_layer, rel=1e-12)
    # pp = 1: all 48 layers of one micro-batch are in flight
    assert layers_in_flight(model, layout)[0] == 48
    # 48 * 1,325,400,064 B = 63,619,203,072 B = 59.25 GiB (Fig. 1)
    assert memory_breakdown(job_on(model, a100, layout)).activations[0] == approx(59.25, rel=1e-9)


def test_fig1_22b_selective_plus_sp(make_model, a100):
    model = make_model(**M22B)
    layout = lay(tp=8, pp=1, micro_batch=4, num_microbatches=1, recompute="selective", sequence_parallel=True)
    sbh = 2048 * 4 * 6144
    # Eq. 6: 34 s b h / t per layer; 48 layers: 48 * 4.25 * 50,331,648 B = 9.5625 GiB (Fig. 1)
    assert activation_bytes_per_layer(model, layout)[0][0] == approx(34 * sbh / 8, rel=1e-12)
    assert memory_breakdown(job_on(model, a100, layout)).activations[0] == approx(9.5625, rel=1e-9)


def test_fig1_175b_interleaved(make_model, a100):
    model = make_model(**M175B)
    layout = lay(tp=8, pp=8, vpp=3, num_microbatches=64)
    # Sec. 4.2.3: the first stage of the interleaved schedule holds L (1 + (p-1)/(p v)) layers:
    # 96 * (1 + 7/24) = 96 + 28 = 124 (= 4-layer chunks x min(m v, v p + p - 1) = 4 x 31)
    assert layers_in_flight(model, layout)[0] == approx(124)
    sbh = 2048 * 1 * 12288  # 25,165,824
    # 10 + 24/8 + 5 * 96 * 2048 / (12288 * 8) = 10 + 3 + 10 = 23 -> 124 * 23 * sbh = 66.84375 GiB
    assert memory_breakdown(job_on(model, a100, layout)).activations[0] == approx(124 * 23 * sbh / GIB, rel=1e-12)
    assert memory_breakdown(job_on(model, a100, layout)).activations[0] == approx(66.84375, rel=1e-9)
    sel = lay(tp=8, pp=8, vpp=3, num_microbatches=64, recompute="selective", sequence_parallel=True)
    # 124 * 34/8 * sbh = 12.3515625 GiB
    assert memory_breakdown(job_on(model, a100, sel)).activations[0] == approx(12.3515625, rel=1e-9)


def test_fig1_530b_interleaved(make_model, a100):
    model = make_model(**M530B)
    layout = lay(tp=8, pp=35, vpp=3, num_microbatches=280)
    # 105 / (35 * 3) = 1 layer per chunk; in flight min(280 * 3, 3 * 35 + 34) = 139 chunks = 139 layers
    assert layers_in_flight(model, layout)[0] == approx(139)
    # 10 + 3 + 5 * 128 * 2048 / (20480 * 8) = 21; sbh = 2048 * 20480 -> 139 * 21 * 0.0390625 GiB
    assert memory_breakdown(job_on(model, a100, layout)).activations[0] == approx(114.0234375, rel=1e-9)


def test_fig1_1t_one_f_one_b(make_model, a100):
    model = make_model(**M1T)
    layout = lay(tp=8, pp=64, num_microbatches=512)
    # 1F1B: the first stage (128/64 = 2 layers) holds p = 64 micro-batches -> 128 layers' worth
    assert layers_in_flight(model, layout)[0] == 128
    # 10 + 3 + 5 * 160 * 2048 / (25600 * 8) = 21; sbh = 2048 * 25600 = 52,428,800
    # 128 * 21 * 52,428,800 B = 131.25 GiB (Fig. 1)
    assert memory_breakdown(job_on(model, a100, layout)).activations[0] == approx(131.25, rel=1e-9)


def test_one_f_one_b_with_fewer_microbatches_than_stages(make_model, a100):
    model = make_model(**M1T)
    layout = lay(tp=8, pp=64, num_microbatches=16)
    # only m = 16 micro-batches exist: 2 layers x 16 = 32 layers' worth
    assert layers_in_flight(model, layout)[0] == 32


# --- parameters, optimizer states and ZeRO ---------------------------------------------------

# Tiny GPT: h 64, 8 heads, ffn 256, 2 layers, vocab 100, seq 16, learned positions, untied.
# One layer (biases and layer norms included): 12 h^2 + 13 h = 49152 + 832 = 49,984.
# Word embedding 100 x 64 = 6400, positions 16 x 64 = 1024; output projection 6400.
TINY = dict(layers=2, hidden=64, heads=8, vocab=100, seq_len=16)
TINY_LAYER = 12 * 64**2 + 13 * 64
TINY_P = 2 * TINY_LAYER + 6400 + 1024 + 6400  # 113,792


def test_tiny_layer_params_by_hand(make_model):
    model = make_model(**TINY)
    # attention 64 x 192 + 64 x 64 + biases 192 + 64 = 16,640; MLP 2 x 64 x 256 + 256 + 64 = 33,088;
    # two layer norms 4 x 64 = 256 -> 49,984
    assert model.layer_params() == 16640 + 33088 + 256 == TINY_LAYER


@pytest.mark.parametrize(
    "zero, w_div, g_div, o_div",
    [(0, 1, 1, 1), (1, 1, 1, 4), (2, 1, 4, 4), (3, 4, 4, 4)],
)
def test_zero_stages_shard_exactly_what_they_say(make_model, toy_gpu, zero, w_div, g_div, o_div):
    # Rajbhandari et al. 2020 Sec. 5: stage 1 shards optimizer states, 2 adds gradients, 3 adds weights.
    model = make_model(**TINY, training=dict(global_batch=4))
    layout = lay(dp=4, tp=1, pp=1, zero=zero, num_microbatches=1)
    assert parameters_per_gpu(model, layout)[0] == TINY_P
    mem = memory_breakdown(job_on(model, toy_gpu, layout))
    # 2 B bf16 weights, 4 B fp32 gradients, 12 B fp32 master + Adam m, v per parameter
    # ZeRO-3 also holds two gathered layers (2 x 2 B x 49,984) and one layer's fp32 gradients
    # (4 B x 49,984) at a time (FSDP's two all-gathers in flight).
    gathered_w = 2 * 2 * TINY_LAYER if zero == 3 else 0
    gathered_g = 4 * TINY_LAYER if zero == 3 else 0
    assert mem.weights[0] * GIB == approx(2 * TINY_P / w_div + gathered_w, rel=1e-12)
    assert mem.gradients[0] * GIB == approx(4 * TINY_P / g_div + gathered_g, rel=1e-12)
    assert mem.optimizer[0] * GIB == approx(12 * TINY_P / o_div, rel=1e-12)


@pytest.mark.parametrize("zero, g_div", [(0, 1), (1, 1), (2, 4), (3, 4)])
def test_bf16_grad_reduce_keeps_two_byte_gradients(make_model, toy_gpu, zero, g_div):
    # grad_reduce_dtype bf16 (Megatron-Core grad_reduce_in_fp32=False): main_grad is 2 B, not 4; ZeRO-2/3
    # shard it over dp 4, and ZeRO-3's one layer of unsharded gradients is 2 B x 49,984 too
    model = make_model(**TINY, training=dict(global_batch=4, grad_reduce_dtype="bf16"))
    layout = lay(dp=4, tp=1, pp=1, zero=zero, num_microbatches=1)
    mem = memory_breakdown(job_on(model, toy_gpu, layout))
    gathered_g = 2 * TINY_LAYER if zero == 3 else 0
    assert mem.gradients[0] * GIB == approx(2 * TINY_P / g_div + gathered_g, rel=1e-12)
    assert mem.optimizer[0] * GIB == approx(12 * TINY_P / (1 if zero == 0 else 4), rel=1e-12)


def test_fig1_22b_parameter_state(make_model, a100):
    # Fig. 1 counts 18 B per transformer-layer weight (12 h^2, no biases): 48 * 12 * 6144^2 * 18 / 8
    # = 48,922,361,856 B = 45.5625 GiB. The planner also counts biases/LNs (13 h per layer) and, at
    # pp = 1, the word embedding and the untied output layer split over tp = 8 (vocab-parallel),
    # and the learned position embedding, which every tp rank holds whole.
    model = make_model(**M22B)
    layout = lay(tp=8, pp=1, micro_batch=4, num_microbatches=1)
    h, V, s = 6144, 51200, 2048
    assert 48 * 12 * h**2 * 18 / 8 / GIB == 45.5625
    params = (48 * (12 * h**2 + 13 * h) + V * h + V * h) / 8 + s * h  # 2,797,031,424 + 12,582,912
    assert params == 2_809_614_336
    assert parameters_per_gpu(model, layout)[0] == approx(params, rel=1e-12)
    mem = memory_breakdown(job_on(model, a100, layout))
    # 18 * 2,809,614,336 B = 50,573,058,048 B = 47.0998 GiB
    assert mem.weights[0] + mem.gradients[0] + mem.optimizer[0] == approx(18 * params / GIB, rel=1e-12)
    assert mem.weights[0] + mem.gradients[0] + mem.optimizer[0] == approx(47.0998, abs=1e-4)


def test_pipeline_ranks_hold_their_layers_and_embeddings(make_model):
    untied = make_model(**TINY)
    two = lay(tp=1, pp=2, num_microbatches=2)
    # first rank: 1 layer + word and position embeddings = 49,984 + 7,424 = 57,408;
    # last rank: 1 layer + output projection = 49,984 + 6,400 = 56,384 -> the first is heavier
    assert parameters_per_gpu(untied, two)[0] == 57408
    tied = make_model(**TINY, tied_embeddings=True)
    # tied: pp = 1 counts the shared matrix once (2 layers + 7,424); pp = 2 keeps a copy on the last
    assert parameters_per_gpu(tied, lay(tp=1, pp=1, num_microbatches=1))[0] == 2 * TINY_LAYER + 7424
    assert parameters_per_gpu(tied, two)[0] == 57408
    # tp = 2 splits the layer and the word embedding (49,984 + 6,400) in half; the position
    # embedding (7,424 - 6,400 = 1,024) stays whole: 28,192 + 1,024
    assert parameters_per_gpu(untied, lay(tp=2, pp=2, num_microbatches=2))[0] == 28192 + 1024


def test_uneven_split_puts_the_extra_layers_first(make_model):
    model = make_model(layers=10, hidden=64, heads=8, vocab=100, seq_len=16)
    layout = lay(tp=1, pp=4, num_microbatches=8)
    first, last = rank_layers(model, layout, bounding_ranks(layout))[:, 0]
    assert (first, last) == (3, 2)  # ceil(10/4), floor(10/4)
    # 1F1B: 3 layers x min(8, 4) micro-batches
    assert layers_in_flight(model, layout)[0] == 12


# --- recomputation, GQA / SwiGLU and the rest --------------------------------------------------


def test_full_recompute_stores_layer_inputs_plus_one_full_layer(make_model, a100):
    # Flash attention (no s^2 scores), so the full layer is s b h (10 + 24/t) without ambiguity.
    model = make_model(**{**M22B, "training": dict(global_batch=4, attention="flash")})
    sbh = 2048 * 4 * 6144
    full = lay(tp=8, pp=1, micro_batch=4, num_microbatches=1, recompute="full")
    # 48 layer inputs of 2 s b h + one rebuilt layer of (10 + 3) s b h = 109 s b h = 5.109375 GiB
    assert memory_breakdown(job_on(model, a100, full)).activations[0] == approx(109 * sbh / GIB, rel=1e-12)
    assert memory_breakdown(job_on(model, a100, full)).activations[0] == approx(5.109375, rel=1e-9)
    full_sp = lay(tp=8, pp=1, micro_batch=4, num_microbatches=1, recompute="full", sequence_parallel=True)
    # with sp both parts split over tp: 48 * 2/8 + 34/8 = 12 + 4.25 = 16.25 s b h = 0.76171875 GiB
    assert memory_breakdown(job_on(model, a100, full_sp)).activations[0] == approx(0.76171875, rel=1e-9)


def test_full_recompute_with_standard_attention_rebuilds_the_scores_too(make_model, a100):
    model = make_model(**M22B)  # standard attention
    sbh = 2048 * 4 * 6144
    full = lay(tp=8, pp=1, micro_batch=4, num_microbatches=1, recompute="full")
    # 48 * 2 sbh + sbh (10 + 3 + 13.333): the recomputed forward of one layer stores everything a
    # normal forward does, scores included -> 122.333 sbh = 5.734375 GiB (the code gives 5.109375)
    expected = (96 + 10 + 3 + 5 * 64 * 2048 / (6144 * 8)) * sbh / GIB
    assert memory_breakdown(job_on(model, a100, full)).activations[0] == approx(expected, rel=1e-9)


def test_gqa_swiglu_activations_by_hand(make_model):
    # h 64, 2 KV heads of 8 (K, V 16 wide), SwiGLU ffn 128, s 16, b 2, tp 2, flash attention.
    model = make_model(layers=2, hidden=64, heads=8, kv_heads=2, ffn_hidden=128, ffn_act="swiglu",
                       vocab=100, seq_len=16, position_embedding="rope")
    layout = lay(tp=2, pp=1, micro_batch=2, num_microbatches=1)
    sb = 16 * 2
    # replicated: 2 LN inputs + QKV and MLP inputs (2 B each) + 2 dropout masks (1 B) = 10 sbh = 20,480
    # tp region: Q and attention-output input 4 sbh = 8,192; K and V 4 sb kv = 2,048;
    #            SwiGLU gate, up and their product 6 sbf = 24,576 -> (8,192 + 2,048 + 24,576)/2 = 17,408
    assert activation_bytes_per_layer(model, layout)[0][0] == 10 * sb * 64 + (4 * sb * 64 + 4 * sb * 16 + 6 * sb * 128) / 2
    assert activation_bytes_per_layer(model, layout)[0][0] == 37888


def test_reserve_and_logits_buffer(make_model, a100):
    model = make_model(**M22B)
    layout = lay(tp=8, pp=1, micro_batch=4, num_microbatches=1)
    # 2 B bf16 logits + 4 B fp32 copy over s b V / t: 6 * 2048 * 4 * 51200 / 8 = 314,572,800 B
    # = 0.29296875 GiB, plus the preset's 2.0 GiB reserve
    assert memory_breakdown(job_on(model, a100, layout)).other[0] == approx(2.0 + 0.29296875, rel=1e-12)


def test_total_is_the_sum(make_model, a100):
    model = make_model(**M175B)
    mem = memory_breakdown(job_on(model, a100, lay(tp=8, pp=8, vpp=3, num_microbatches=64)))
    parts = mem.weights + mem.gradients + mem.optimizer + mem.activations + mem.other
    assert mem.total[0] == approx(parts[0], rel=1e-12)
