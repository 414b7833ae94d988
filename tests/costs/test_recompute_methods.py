"""Recomputation as Megatron-Core offers it (issue 37 item 2): the moe module (the whole MoE layer
recomputed: its forward and its dispatch/combine all-to-alls again) and --recompute-method uniform|block
with --recompute-num-layers N, priced in time and memory; every number derived here by hand."""
from __future__ import annotations

import numpy as np
import pytest
from pytest import approx

from planner.costs.layer_times import kind_times
from planner.costs.memory import activation_bytes_per_layer
from planner.costs.recompute import moe_forward_s
from planner.estimate import estimate_layout
from planner.export import export_settings
from planner.layout.space import single_layout
from planner.specs.layers import layer_kinds

# 3 layers (the first dense), hidden 64, 4 heads, SwiGLU, FFN 256; 4 experts of width 32, top 2;
# one shared expert of width 16; 64 tokens; capacity factor 1 (static shapes: no host sync).
TINY_MOE = dict(layers=3, hidden=64, heads=4, ffn_act="swiglu", ffn_hidden=256, vocab=100, seq_len=64,
                moe=dict(experts=4, top_k=2, expert_ffn_hidden=32, shared_experts=1, shared_expert_ffn_hidden=16,
                         dense_layers=1, capacity_factor=1.0))
SELECTIVE = single_layout(dp=1, tp=1, pp=1, micro_batch=1, num_microbatches=1, recompute="selective")
# One GPU (tp 1, cp 1, ep 1): s b = 64 rows; each of the 4 local experts gets 64 x 2 / 4 = 32 rows.
ROWS, LOCAL, G, SB, H = 32, 4, 2, 64, 64


def _moe(make_model, modules=None, **training):
    if modules is not None:
        training["recompute_modules"] = modules
    return make_model(**TINY_MOE, training=training)


def _kinds(model):
    return {k.name: k for k in layer_kinds(model)}


def test_the_moe_module_drops_the_moe_layers_activations(make_model):
    # Routed experts, per row: dispatched input (2 B) and output (2 B) of h = 64 values, the SwiGLU
    # intermediates 6 B per unit of width 32: 32 rows x 4 experts x (4 x 64 + 6 x 32) = 57,344 B;
    # the shared expert's intermediates: 6 B x 16 x 64 rows = 6,144 B. Together 63,488 B.
    default, moe = _moe(make_model), _moe(make_model, ["moe"])
    k = _kinds(default)["moe"]
    before = activation_bytes_per_layer(default, SELECTIVE, k)[0][0]
    after = activation_bytes_per_layer(moe, SELECTIVE, k)[0][0]
    assert before - after == approx(ROWS * LOCAL * (4 * H + 6 * 32) + 6 * 16 * SB, rel=1e-12)
    assert before - after == approx(63_488, rel=1e-12)
    # the dense layer keeps everything (no MoE in it); moe_act and shared_experts within moe count once
    d = _kinds(default)["dense"]
    assert activation_bytes_per_layer(moe, SELECTIVE, d)[0][0] == activation_bytes_per_layer(default, SELECTIVE, d)[0][0]
    both = _moe(make_model, ["moe", "moe_act", "shared_experts"])
    assert activation_bytes_per_layer(both, SELECTIVE, k)[0][0] == approx(after, rel=1e-12)


def test_the_moe_module_runs_the_moe_forward_again(make_model, toy_gpu):
    # Toy GPU: GEMMs at 50e12 FLOP/s and 500e9 B/s (operands 2 B), memory-bound ops at 500e9 B/s.
    #   experts up+gate 32x64 @ 64x64, x4: 2*32*64*64*4 = 1,048,576 FLOP, 2*(2048+4096+2048)*4 = 65,536 B
    #   experts down    32x32 @ 32x64, x4: 2*32*32*64*4 =   524,288 FLOP, 2*(1024+2048+2048)*4 = 40,960 B
    #   router          64x64 @ 64x4:      2*64*64*4    =    32,768 FLOP, 2*(4096+256+256)    =  9,216 B
    #   shared up+gate  64x64 @ 64x32:     2*64*64*32   =   262,144 FLOP, 2*(4096+2048+2048)  = 16,384 B
    #   shared down     64x16 @ 16x64:     2*64*16*64   =   131,072 FLOP, 2*(1024+1024+4096)  = 12,288 B
    #   SwiGLU traffic 6 B x (32*4 rows x 32 + 64 rows x 16) = 30,720 B; permute/unpermute 4 x 2 B x 128 copies x 64 = 65,536 B
    flops = 1_048_576 + 524_288 + 32_768 + 262_144 + 131_072
    gemm_bytes = 65_536 + 40_960 + 9_216 + 16_384 + 12_288
    traffic = 6 * (ROWS * LOCAL * 32 + SB * 16) + 4 * 2 * SB * 2 * H
    expected = flops / 50e12 + (gemm_bytes + traffic) / 500e9
    model = _moe(make_model, ["moe"])
    st = model.training.stack.for_gpu(toy_gpu.name)
    assert moe_forward_s(model, toy_gpu, st, SELECTIVE, _kinds(model)["moe"])[0] == approx(expected, rel=1e-12)


def test_the_moe_module_repeats_the_all_to_alls_and_the_shared_experts_tp(make_cluster, make_model):
    # Per micro-batch a MoE layer moves 2 all-to-alls forward and 2 backward; recomputed, 2 more
    # forward: 6 of 4, 1.5x. With tp 2 its TP pairs (attention, shared expert) run forward and
    # backward, 4 pair-passes; the shared expert's pair again: 5 of 4, 1.25x. Its recompute: the
    # MoE forward (no core attention: moe alone was asked for).
    cluster = make_cluster()
    lay = single_layout(dp=4, tp=2, pp=1, micro_batch=1, num_microbatches=1, recompute="selective",
                        sequence_parallel=True, ep=4)
    default, moe = _moe(make_model, ["core_attn"]), _moe(make_model, ["moe"])
    st = default.training.stack.for_gpu(cluster.gpu.name)
    a, b = (next(k for k in kind_times(m, cluster, st, lay) if k.moe) for m in (default, moe))
    assert a.ep[0] > 0 and b.ep[0] == approx(1.5 * a.ep[0], rel=1e-12)
    assert b.tp[0] == approx(1.25 * a.tp[0], rel=1e-12)
    assert b.lc.recompute_s[0] == approx(moe_forward_s(moe, cluster.gpu, st, lay, _kinds(moe)["moe"])[0], rel=1e-12)


def _full(make_model, **training):
    return make_model(layers=8, training=training)  # hidden 1024, seq 512, flash attention


FULL = single_layout(dp=1, tp=1, pp=1, micro_batch=1, num_microbatches=1, recompute="full")
NONE = single_layout(dp=1, tp=1, pp=1, micro_batch=1, num_microbatches=1, recompute="none")


def test_uniform_groups_store_a_checkpoint_per_group_and_rebuild_a_group(make_model):
    # 8 layers in one chunk, groups of 4: 2 checkpoints of s b h x 2 B = 512 x 1024 x 2 = 1,048,576 B
    # each, 2 x 1,048,576 / 8 = 262,144 B per layer; a group of 4 layers rebuilt at once.
    one, four = _full(make_model), _full(make_model, recompute_num_layers=4)
    stored1, rebuilt1 = (x[0] for x in activation_bytes_per_layer(one, FULL))
    stored4, rebuilt4 = (x[0] for x in activation_bytes_per_layer(four, FULL))
    assert stored1 == approx(2 * 512 * 1024, rel=1e-12)
    assert stored4 == approx(2 * 2 * 512 * 1024 / 8, rel=1e-12)
    assert rebuilt4 == approx(4 * rebuilt1, rel=1e-12)


def test_block_checkpoints_n_layers_of_a_chunk_and_stores_the_rest(make_model, make_cluster):
    # 8 layers on pp 2: chunks of 4; block 1: 1 of 4 layers checkpointed (1,048,576 B), 3 store what a
    # layer without recomputation stores: per layer 1/4 x 1,048,576 + 3/4 x that. Time: a quarter of
    # the layers recomputed, their TP collectives 2 + 1/4 passes of 3.
    model = _full(make_model, recompute_method="block", recompute_num_layers=1)
    full = single_layout(dp=1, tp=2, pp=2, micro_batch=1, num_microbatches=2, recompute="full")
    none = single_layout(dp=1, tp=2, pp=2, micro_batch=1, num_microbatches=2, recompute="none")
    plain = activation_bytes_per_layer(model, none)[0][0]
    checkpoint = 2 * 512 * 1024  # tp 2 without sequence parallelism: the input is whole on each GPU
    assert activation_bytes_per_layer(model, full)[0][0] == approx(checkpoint / 4 + 3 * plain / 4, rel=1e-12)
    cluster = make_cluster()
    st = model.training.stack.for_gpu(cluster.gpu.name)
    uniform = _full(make_model)
    (b,), (u,), (n,) = (kind_times(m, cluster, st, lay) for m, lay in ((model, full), (uniform, full), (uniform, none)))
    assert b.lc.recompute_s[0] == approx(u.lc.recompute_s[0] / 4, rel=1e-12)
    assert u.tp[0] == approx(1.5 * n.tp[0], rel=1e-12)  # 3 passes of 2
    assert b.tp[0] == approx((2 + 1 / 4) / 2 * n.tp[0], rel=1e-12)


def test_block_over_every_layer_is_uniform_over_one(make_model):
    # N >= the layers of a chunk: every layer checkpointed, as the default (uniform, 1)
    a = activation_bytes_per_layer(_full(make_model, recompute_method="block", recompute_num_layers=8), FULL)
    b = activation_bytes_per_layer(_full(make_model), FULL)
    assert a[0][0] == approx(b[0][0], rel=1e-12) and a[1][0] == approx(b[1][0], rel=1e-12)


def _export(make_model, framework, **training):
    """dp 2 x pp 2 with full recomputation of an 8-layer model, exported."""
    from planner.specs.loading import load_cluster

    model = make_model(layers=8, training=training)
    cluster = load_cluster("dgx-h100-1024")
    zero = 0 if framework.startswith("torchtitan") else 1  # torchtitan has no ZeRO-1 (DDP or FSDP): its export refuses it
    scored = estimate_layout(model, cluster, gpus=4, tp=1, pp=2, micro_batch=1, recompute="full", zero=zero)
    return export_settings(framework, scored, model, cluster)


@pytest.mark.parametrize("framework, words", [
    ("megatron", ["--recompute-method block", "--recompute-num-layers 2"]),
    ("megatron-bridge", ["model.recompute_method=block", "model.recompute_num_layers=2"]),
    ("nemo", ["model.config.recompute_method=block", "model.config.recompute_num_layers=2"]),
    # 8 layers on pp 2: chunks of 4, 2 of them checkpointed: every 2nd layer
    ("torchtitan@0.2", ["--activation_checkpoint.mode=selective", "--activation_checkpoint.selective_ac_option=2"]),
])
def test_block_is_exported_by_its_framework_names(make_model, framework, words):
    text = _export(make_model, framework, recompute_method="block", recompute_num_layers=2).text
    for w in words:
        assert w in text


@pytest.mark.parametrize("framework, training", [
    ("torchtitan@0.2", dict(recompute_method="uniform", recompute_num_layers=2)),  # no groups of layers
    ("torchtitan", dict(recompute_method="block", recompute_num_layers=2)),  # main: no layer frequency
    ("torchtitan@0.2", dict(recompute_method="block", recompute_num_layers=3)),  # 3 does not divide 4
])
def test_torchtitan_refuses_what_it_lacks(make_model, framework, training):
    from planner.errors import SpecError

    with pytest.raises(SpecError, match="torchtitan"):
        _export(make_model, framework, **training)


def test_the_default_exports_stay(make_model):
    text = _export(make_model, "megatron").text
    assert "--recompute-method uniform" in text and "--recompute-num-layers 1" in text
