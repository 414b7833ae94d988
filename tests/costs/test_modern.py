"""FP8, context parallelism and mixture-of-experts cost terms, each against numbers derived by hand
here (toy GPU of conftest.py: 100 TFLOP/s BF16 at 50 %, HBM 1,000 GB/s at 50 %, NVLink 200 GB/s
at 50 %, network 10 GB/s at 80 %, 10 us per step, flash attention at 25 % of peak)."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from pytest import approx

from planner.costs.comm import cp_comm_per_layer_s, ep_comm_per_layer_s
from planner.costs.compute import _gemm_set
from planner.specs.layers import expert_rows
from planner.costs.flops import model_flops_per_seq
from planner.costs.memory import activation_bytes_per_layer, memory_breakdown
from planner.costs.pipeline_ranks import rank_moe_layers
from planner.specs.layers import Matrix, gemm_flops_per_token, layer_kinds
from planner.specs.precision import precision
from planner.score import score
from planner.search import search
from planner.layout.space import single_layout
from planner.layout.space import Layouts
from planner.specs import GpuSpec
from planner.specs.loading import load_cluster, load_model
from .conftest import layer_compute_on
from planner.costs.context import job_context
from planner.costs.pipeline_ranks import pipeline_ranks, rank_param_split

REL = 1e-9

# 3 layers (the first dense), hidden 64, 4 heads, SwiGLU; 4 experts of width 32, top 2; one shared
# expert of width 16; vocab 100, 64 tokens, learned positions.
TINY_MOE = dict(layers=3, hidden=64, heads=4, ffn_act="swiglu", vocab=100, seq_len=64,
                moe=dict(experts=4, top_k=2, expert_ffn_hidden=32, shared_experts=1, shared_expert_ffn_hidden=16,
                         dense_layers=1))


def _st(model, cluster):
    """The job's stack constants on this GPU, as planner/costs/context.py hands them to the cost models."""
    return model.training.stack.for_gpu(cluster.gpu.name)


def lay(**kw):
    kw.setdefault("dp", 1)
    kw.setdefault("tp", 1)
    kw.setdefault("pp", 1)
    kw.setdefault("micro_batch", 1)
    kw.setdefault("num_microbatches", 1)
    return single_layout(**kw)


# --- layer structure and parameters ---------------------------------------------------------------

def test_moe_parameters_by_hand(make_model):
    model = make_model(**TINY_MOE)
    dense, moe = layer_kinds(model)
    # dense: QKV 64x192 + 192 bias, out 64x64 + 64, MLP (ffn 4h = 256) up 64x512 + down 256x64, norms 4h
    assert dense.params == 12480 + 4160 + 32768 + 16384 + 256 == 66048
    # MoE: attention 16,640; shared expert up 64x32 + down 16x64 = 3,072; router 64x4; norms 256
    assert moe.tp_params == 16640 + 3072 + 256 + 256 == 20224
    # routed: 4 experts of up 64x64 + down 32x64 = 6,144
    assert moe.expert_params == 4 * 6144
    assert moe.active_params == 20224 + 2 * 6144 == 32512
    # model: 1 dense + 2 MoE layers, word embedding 100x64, positions 64x64, output 100x64, final norm 2h
    assert model.total_params() == 66048 + 2 * 44800 + 6400 + 4096 + 6400 + 128
    # FLOPs per token count the active weights without biases and norms: 2 x (32,512 - 256 - 256)
    assert gemm_flops_per_token(moe) == 2 * 32000


def test_moe_layers_on_each_rank(make_model):
    # 8 layers, the first 2 dense, then every second MoE: layers 3, 5, 7 (0-based) are MoE
    model = make_model(layers=8, moe=dict(experts=4, top_k=1, expert_ffn_hidden=32, dense_layers=2, layer_every=2))
    assert model.moe_layers == 3
    # pp 2 (layers 0-3 and 4-7): rank 0 holds layer 3, rank 1 layers 5 and 7
    assert rank_moe_layers(model, lay(pp=2), np.array([[0], [1]])).ravel().tolist() == [1, 2]
    # pp 2, vpp 2 (chunks of 2: rank 0 layers 0-1 and 4-5, rank 1 layers 2-3 and 6-7)
    assert rank_moe_layers(model, lay(pp=2, vpp=2, num_microbatches=2), np.array([[0], [1]])).ravel().tolist() == [1, 2]


def test_mla_projections_and_flops(make_model):
    model = make_model(layers=1, hidden=64, heads=4, vocab=100, seq_len=32,
                       mla=dict(q_lora_rank=16, kv_lora_rank=8, qk_nope_head_dim=12, qk_rope_head_dim=4, v_head_dim=10))
    (kind,) = layer_kinds(model)
    shapes = {m.name: (m.k, m.n, m.split) for m in kind.tp_matrices}
    # q: 64 -> 16 (replicated) -> 4 heads x (12 + 4); kv: 64 -> 8 + 4 (replicated), 8 -> 4 x (12 + 10); out 4 x 10 -> 64
    assert shapes["q_down"] == (64, 16, "none") and shapes["q_up"] == (16, 64, "col")
    assert shapes["kv_down"] == (64, 12, "none") and shapes["kv_up"] == (8, 88, "col")
    assert shapes["attn_out"] == (40, 64, "row")
    # attention core per sequence: 2 s^2 heads (qk + v) = 2 x 32^2 x 4 x (16 + 10)
    projections = 64 * 16 + 16 * 64 + 64 * 12 + 8 * 88 + 40 * 64
    mlp = 64 * 256 + 256 * 64  # GeLU, ffn 4h
    # (model FLOPs: its causal half, 32^2 x 4 x 26)
    expected = 3 * (32 * 2 * (projections + mlp) + 32**2 * 4 * 26 + 32 * 2 * 64 * 100)
    assert model_flops_per_seq(model) == approx(expected, rel=REL)
    # stored per token (BF16, tp 1, flash): LN inputs 4 h, GEMM inputs 2 x 2 h, masks 2 h, the latents
    # 2 x (16 + 8 + 4), Q, K, V 2 x (64 + 64 + 40), attention-out input 2 x 40, MLP 4 x 256
    per_token = 10 * 64 + 2 * 28 + 2 * (64 + 64 + 40) + 2 * 40 + 4 * 256
    assert activation_bytes_per_layer(model, lay())[0][0] == 32 * per_token


# --- FP8 -----------------------------------------------------------------------------------------

def _fp8_gpu(toy_gpu_data):
    return GpuSpec.model_validate(toy_gpu_data(peak_tflops=dict(bf16=100.0, fp16=100.0, fp8=200.0),
                                               efficiency=dict(gemm_fp8=0.4)))


def test_fp8_gemm_runs_at_the_fp8_peak_and_casts_its_inputs(toy_gpu_data):
    gpu = _fp8_gpu(toy_gpu_data)
    t, cast_in, cast_out = _gemm_set((Matrix("w", 1024, 1024, "col"),), 512.0, 1, gpu, precision("fp8"))
    flops = 2 * 512 * 1024 * 1024
    operands = 1 * (512 * 1024 + 1024 * 1024 + 512 * 1024)  # 1-byte FP8 operands
    assert t == approx(flops / (200e12 * 0.4) + operands / (1000e9 * 0.5), rel=REL)
    # casting reads 2 bytes and writes two 1-byte copies: 4 bytes per input (and per output gradient)
    assert cast_in == 4 * 512 * 1024 and cast_out == 4 * 512 * 1024


def test_fp8_activations_keep_gemm_inputs_in_one_byte(make_model):
    # 512 tokens, h 1024, 16 heads, GeLU ffn 4096, tp 1, flash: BF16 stores 34 s b h (Korthikanti)
    bf16 = make_model()
    sbh = 512 * 1024
    assert activation_bytes_per_layer(bf16, lay())[0][0] == 34 * sbh
    # FP8: the QKV and MLP inputs (2 x 2 -> 2 x 1 byte), the out-projection input (2 -> 1) and the
    # MLP down input (2 x 4h -> 1 x 4h) shrink: 34 - 2 - 1 - 4 = 27 s b h
    fp8 = make_model(training=dict(precision="fp8"))
    assert activation_bytes_per_layer(fp8, lay())[0][0] == 27 * sbh


def test_fp8_weights_keep_two_more_bytes_and_mfu_is_quoted_against_bf16(make_model, make_cluster, toy_gpu_data):
    fp8 = make_model(training=dict(precision="fp8"))
    bf16 = make_model()
    cluster = make_cluster(gpu=toy_gpu_data(peak_tflops=dict(bf16=100.0, fp16=100.0, fp8=200.0)))
    one = lay()
    params = rank_param_split(bf16, one, pipeline_ranks(bf16, one, 0))[0][0]
    # 2-byte weights + the 1-byte FP8 copy cached for the step
    assert memory_breakdown(job_context(fp8, cluster, one)).weights[0] == approx(3 * params / 2**30, rel=REL)
    assert memory_breakdown(job_context(bf16, cluster, one)).weights[0] == approx(2 * params / 2**30, rel=REL)
    s = score(fp8, cluster, one)
    assert s.mfu[0] == approx(2 * s.mfu_fp8_peak[0], rel=REL)  # the FP8 peak is twice the BF16 one
    # --fp8-param-gather: the parameters are the FP8 copy, 1 byte each, and ZeRO gathers them in 1 byte
    gathered = make_model(training=dict(precision="fp8", fp8_param_gather=True))
    assert memory_breakdown(job_context(gathered, cluster, one)).weights[0] == approx(1 * params / 2**30, rel=REL)
    assert gathered.training.numerics.weight_bytes == 1 and fp8.training.numerics.weight_bytes == 2


# --- context parallelism ---------------------------------------------------------------------------

def test_cp_ring_exposes_what_outlasts_attention(make_model, make_cluster):
    model = make_model()  # seq 512, h 1024, 16 heads of 64 (K and V 1,024 wide each), flash
    cluster = make_cluster()
    layout = lay(cp=4)
    lc = layer_compute_on(model, cluster.gpu, layout)
    # a K/V chunk: 2 bytes x 512/4 tokens x (1024 + 1024) = 524,288 B at 100 GB/s, + 10 us per step
    step = 524288 / 100e9 + 10e-6
    ring = 3 * step  # cp - 1 = 3 steps
    # attention on 1/cp of the work: 2 s^2 heads (64 + 64) / 4 = 268,435,456 FLOPs, causal half, at 25e12 FLOP/s
    core_fwd = 0.5 * 2 * 512**2 * 16 * 128 / 4 / 25e12
    assert lc.attention_fwd_s[0] == approx(core_fwd, rel=REL)
    # forward shows ring - attention; backward sends K/V and their gradients (2 x ring) behind 2.5 x attention
    expected = (ring - core_fwd) + (2 * ring - 2.5 * core_fwd)
    assert cp_comm_per_layer_s(cluster, model, layout, lc, _st(model, cluster))[0] == approx(expected, rel=REL)
    # cp 2: one step of a chunk twice as long
    two = lay(cp=2)
    step2 = 2 * 524288 / 100e9 + 10e-6
    core2 = 2 * core_fwd
    assert cp_comm_per_layer_s(cluster, model, two, layer_compute_on(model, cluster.gpu, two), _st(model, cluster))[0] == approx(
        max(step2 - core2, 0) + max(2 * step2 - 2.5 * core2, 0), rel=REL)


def test_cp_with_kv_repeated_to_every_query_head_moves_heads_over_kv_heads_times_the_bytes(make_model, make_cluster):
    cluster = make_cluster()
    layout = lay(cp=4)
    gqa = make_model(kv_heads=4)  # 16 query heads, 4 K/V heads of 64: K and V 256 wide each
    stack = gqa.training.stack.model_copy(update={"cp_kv_expanded": True})
    expanded = gqa.model_copy(update={"training": gqa.training.model_copy(update={"stack": stack})})
    lc = layer_compute_on(gqa, cluster.gpu, layout)
    # the attention core counts query heads: 2 s^2 x 16 heads x (64 + 64) / cp 4, causal half, at 25e12 FLOP/s
    core_fwd = 0.5 * 2 * 512**2 * 16 * 128 / 4 / 25e12
    assert lc.attention_fwd_s[0] == approx(core_fwd, rel=REL)
    # grouped: 2 bytes x 128 tokens x (256 + 256) = 131,072 B a step; repeated to 16 heads: x 16/4 = 524,288 B
    for model, chunk in ((gqa, 131072), (expanded, 524288)):
        ring = 3 * (chunk / 100e9 + 10e-6)  # cp - 1 = 3 steps at 100 GB/s + 10 us
        expected = max(ring - core_fwd, 0) + max(2 * ring - 2.5 * core_fwd, 0)
        assert cp_comm_per_layer_s(cluster, model, layout, lc, _st(model, cluster))[0] == approx(expected, rel=REL)
    # all-gather (torchtitan's cp_comm): the expanded K/V of all 4 ranks gathered before attention,
    # nothing overlapped; the gather's time is 4x the grouped one's bandwidth term
    gathered = [m.model_copy(update={"training": m.training.model_copy(update={"stack": m.training.stack.model_copy(
        update={"cp_comm": "all_gather"})})}) for m in (gqa, expanded)]
    small, big = (cp_comm_per_layer_s(cluster, m, layout, lc, _st(m, cluster))[0] for m in gathered)
    # ring all-gather of 4 chunks, 3/4 of them on the wire, as NCCL's tuner picks (tuning.cc): LL
    # 6.6 + 3 x 0.6 = 8.4 us at half of 100 GB/s; LL128 14 + 3 x 1.9 = 19.7 us at 0.92 x; Simple
    # 8.4 + 3 x 3.4 = 18.6 us at 100 GB/s. 524 kB: LL (8.4 + 7.86 us); 2.1 MB: Simple (18.6 + 15.73 us).
    # Forward once, backward twice.
    for chunk, got in ((131072, small), (524288, big)):
        wire = 3 / 4 * (4 * chunk) / 100e9
        gather = min(8.4e-6 + wire / 0.5, 19.7e-6 + wire / 0.92, 18.6e-6 + wire)
        assert got == approx(3 * gather, rel=REL)


def test_cp_divides_every_per_token_tensor(make_model, make_cluster):
    model = make_model()
    sbh = 512 * 1024
    # 34 s b h / cp (flash, tp 1)
    assert activation_bytes_per_layer(model, lay(cp=4))[0][0] == 34 * sbh / 4


# --- mixture-of-experts ----------------------------------------------------------------------------

def test_expert_rows_per_gpu(make_model):
    model = make_model(**{**TINY_MOE, "moe": {**TINY_MOE["moe"], "load_imbalance": 1.5}})
    # b 2, s 64, top 2, ep 2, etp 1, 4 experts, tp 1, cp 1, dp 2: 2 x 64 x 2 x 2 / 4 = 128 rows per
    # expert, x 1.5 for the busiest rank; 4 / 2 = 2 local experts
    rows, local = expert_rows(model, lay(dp=2, ep=2, micro_batch=2))
    assert rows[0] == 192 and local[0] == 2


def test_all_to_all_inside_and_across_nodes(make_model, make_cluster):
    model = make_model(**TINY_MOE)
    (_, moe) = layer_kinds(model)
    cluster = make_cluster()  # 8 GPUs per node, NVLink 100 GB/s achieved, network 8 GB/s achieved
    # ep 4 inside a node: 2 x 64 x 2 routed copies of 64 BF16 values = 32,768 B, 3/4 of it leaves the GPU
    a2a = 32768 * 3 / 4 / 100e9 + 10e-6
    # two all-to-alls (dispatch, combine) forward and two backward
    assert ep_comm_per_layer_s(cluster, model, lay(dp=4, ep=4, micro_batch=2), moe)[0] == approx(2 * 2 * a2a, rel=REL)
    # ep 16 over two nodes: 7/16 over NVLink and 8/16 over the network at once; the network bounds it
    network = 32768 * 8 / 16 / 8e9
    assert network > 32768 * 7 / 16 / 100e9
    assert ep_comm_per_layer_s(cluster, model, lay(dp=16, ep=4 * 4, micro_batch=2), moe)[0] == approx(
        4 * (network + 10e-6), rel=REL)


def test_flex_dispatch_crosses_the_network_once_per_remote_domain(make_model, make_cluster):
    wide = {**TINY_MOE, "moe": {**TINY_MOE["moe"], "experts": 128, "top_k": 8}}
    flex = make_model(**wide, training=dict(moe_dispatcher="flex"))
    alltoall = make_model(**wide)
    (_, moe) = layer_kinds(flex)
    cluster = make_cluster()  # 8 GPUs per node, NVLink 100 GB/s achieved, network 8 GB/s achieved
    layout = lay(dp=16, ep=16, micro_batch=2)  # ep 16 over D = 2 nodes of 8 ranks, 64 experts each
    # 2 x 64 tokens x 8 routed copies of 64 BF16 values = 131,072 B per all-to-all
    nbytes = 2 * 64 * 8 * 64 * 2
    # alltoall: 8/16 of the copies cross the network
    a2a = nbytes * 8 / 16 / 8e9 + 10e-6
    assert ep_comm_per_layer_s(cluster, alltoall, layout, moe)[0] == approx(4 * a2a, rel=REL)
    # flex: a token crosses once if the other node holds any of its 8 experts, 1 - C(64,8)/C(128,8),
    # of its 8 copies; NVLink carries the 7/16 for the own node and forwards 7/8 of the 8/16 remote
    remote = 1 - math.comb(64, 8) / math.comb(128, 8)  # 0.9969
    network = nbytes * remote / 8 / 8e9
    nvlink = nbytes * (7 / 16 + 8 / 16 * 7 / 8) / 100e9
    assert network > nvlink  # 2.04 us against 1.15 us: the network still bounds it, a quarter of alltoall's
    assert ep_comm_per_layer_s(cluster, flex, layout, moe)[0] == approx(4 * (network + 10e-6), rel=REL)
    # inside one node the two dispatchers move the same bytes
    inside = lay(dp=8, ep=8, micro_batch=2)
    assert ep_comm_per_layer_s(cluster, flex, inside, moe)[0] == approx(
        ep_comm_per_layer_s(cluster, alltoall, inside, moe)[0], rel=REL)


def test_moe_training_fields_need_a_moe_model(make_model):
    with pytest.raises(ValueError, match="need a moe: section"):
        make_model(training=dict(moe_dispatcher="flex"))
    with pytest.raises(ValueError, match="need a moe: section"):
        make_model(training=dict(moe_a2a_overlap=True))


def test_expert_states_shard_over_ep_and_edp(make_model, make_cluster):
    model = make_model(**TINY_MOE)
    cluster = make_cluster()
    # dp 4, ep 2: each GPU holds 2 of 4 experts of both MoE layers: 2 x 24,576 / 2 expert parameters
    layout = lay(dp=4, ep=2, zero=1)
    dense, experts = rank_param_split(model, layout, pipeline_ranks(model, layout, 0))
    assert experts[0] == 2 * 24576 / 2
    # dense: 66,048 + 2 x 20,224 + embeddings 6,400 + 4,096 + output 6,400 (pp 1: one rank holds all)
    assert dense[0] == 66048 + 2 * 20224 + 6400 + 4096 + 6400
    # ZeRO 1: optimizer states (12 B) of dense parameters over dp*cp = 4, of experts over edp = 4 / 2 = 2
    mem = memory_breakdown(job_context(model, cluster, layout))
    assert mem.optimizer[0] == approx(12 * (dense[0] / 4 + experts[0] / 2) / 2**30, rel=REL)


def test_search_equals_brute_force_on_a_small_moe_instance(make_model, make_cluster):
    """Every layout the rules allow, built here by plain loops and scored one at a time: the search
    finds the same best step time among those that fit, and enumerates the same set."""
    model = make_model(**{**TINY_MOE, "layers": 4, "heads": 4, "seq_len": 1024, "training": dict(global_batch=8)})
    cluster = make_cluster(nodes=1)
    result = search(model, cluster, gpus=8, top_k=1)
    seen = set()
    lay_ = result.scores.layouts
    for i in range(len(lay_)):
        seen.add(tuple(lay_.row(i)[k] for k in ("dp", "tp", "pp", "cp", "micro_batch", "ep", "etp", "zero", "recompute",
                                                 "sequence_parallel", "vpp")))
    brute = set()
    rows = []
    for tp, pp, cp in itertools.product((1, 2, 4), (1, 2, 4), (1, 2)):
        if 8 % (tp * pp * cp):
            continue
        dp = 8 // (tp * pp * cp)
        for mb, ep, etp, zero, rc, sp, vpp in itertools.product((1, 2, 4, 8), (1, 2, 4), sorted({1, tp}), range(4),
                                                                ("none", "selective", "full"), (False, True), (1, 2, 4)):
            m = 8 // (dp * mb) if 8 % (dp * mb) == 0 else 0
            ok = (m > 0 and (tp * cp * dp) % (ep * etp) == 0 and (zero == 0 or dp * cp > 1) and (not sp or tp > 1)
                  and (tp == 1 or sp) and (vpp == 1 or (pp >= 2 and m % pp == 0 and 4 % (pp * vpp) == 0)))
            if not ok:
                continue
            brute.add((dp, tp, pp, cp, mb, ep, etp, zero, rc, sp, vpp))
            rows.append(single_layout(dp=dp, tp=tp, pp=pp, cp=cp, micro_batch=mb, ep=ep, etp=etp, zero=zero,
                                      recompute=rc, sequence_parallel=sp, vpp=vpp, num_microbatches=m))
    # scored together: every figure of a row depends on that row alone, as when scored one at a time
    s = score(model, cluster, Layouts.concat(rows))
    best = s.step_time_s[s.memory_gib.total <= cluster.gpu.memory_gib * 0.95].min()
    assert seen == brute
    assert result.best.step_time_s == approx(best, rel=1e-12)


# --- sliding-window attention ----------------------------------------------------------------------

def test_sliding_window_flash_time_model_flops_and_cp_by_hand(make_model, make_cluster):
    # seq 512, 16 heads of 64, flash; a window of 128 on 4 of the 8 layers (full_attention_every 2)
    full = make_model()
    windowed = make_model(sliding_window=128, full_attention_every=2)
    cluster = make_cluster()
    one = lay()
    # flash tiles of 128: 4 query blocks; causal 1 + 2 + 3 + 4 = 10 tiles, windowed 1 + 2 + 2 + 2 = 7
    tiles = (4 + 4 * 7 / 10) / 8  # 0.85 of full causal attention's blocks on the mean layer
    core_full = 0.5 * 2 * 512**2 * 16 * 128 / 25e12  # 2.684 us, as in the CP test above with cp 1
    lc_full, lc_win = layer_compute_on(full, cluster.gpu, one), layer_compute_on(windowed, cluster.gpu, one)
    assert lc_full.attention_fwd_s[0] == approx(core_full, rel=REL)
    assert lc_win.attention_fwd_s[0] == approx(tiles * core_full, rel=REL)
    assert lc_win.fwd_s[0] - lc_full.fwd_s[0] == approx((tiles - 1) * core_full, rel=REL)
    assert lc_win.bwd_s[0] - lc_full.bwd_s[0] == approx(2.5 * (tiles - 1) * core_full, rel=REL)
    # model FLOPs: causal pairs 512 x 128 - 128 x 127 / 2 = 57,408 of 512 x 513 / 2 = 131,328 on 4 layers
    pairs = (4 + 4 * 57_408 / 131_328) / 8
    attention = 2 * 512**2 * 16 * 128  # forward, per layer, per sequence, no window
    # (model FLOPs count the causal half of the square: attention / 2)
    assert model_flops_per_seq(full) - model_flops_per_seq(windowed) == approx(3 * 8 * attention / 2 * (1 - pairs), rel=1e-9)
    # the unfused path computes and stores every score, window or not
    std = dict(training=dict(attention="standard"))
    assert layer_compute_on(make_model(sliding_window=128, **std), cluster.gpu, one).fwd_s[0] == approx(
        layer_compute_on(make_model(**std), cluster.gpu, one).fwd_s[0], rel=REL)
    assert activation_bytes_per_layer(make_model(sliding_window=128, **std), one)[0][0] == approx(
        activation_bytes_per_layer(make_model(**std), one)[0][0], rel=REL)
    # context parallelism: Transformer Engine needs all_gather with a window; K/V of all 512 tokens
    # gathered over the 4 GPUs (3 x a 524,288 B chunk at 100 GB/s on NCCL's ring Simple, 8.4 + 3 x 3.4
    # us), twice backward
    cp = lay(cp=4)
    gather = 3 * 524288 / 100e9 + 18.6e-6
    lc = layer_compute_on(windowed, cluster.gpu, cp)
    assert cp_comm_per_layer_s(cluster, windowed, cp, lc, _st(windowed, cluster))[0] == approx(gather + 2 * gather, rel=1e-6)


def test_windowed_tiles_cost_what_the_gpu_says_never_more_than_full(make_model, make_cluster):
    # the toy layer above (seq 512: windowed 7 of 10 tiles) on a GPU whose windowed tile costs 1.4 a full
    # one: 0.98 of the full layer on the 4 windowed layers, the mean (4 + 4 x 0.98) / 8 = 0.99 of full
    # causal; at 3 a windowed layer would cost 2.1 x a full one: it costs the full layer's (1.0)
    full, windowed, cluster, one = make_model(), make_model(sliding_window=128, full_attention_every=2), make_cluster(), lay()
    core_full = layer_compute_on(full, cluster.gpu, one).attention_fwd_s[0]
    for cost, mean in ((1.4, (4 + 4 * 0.98) / 8), (3.0, 1.0)):
        gpu = cluster.gpu.model_copy(update={"efficiency": cluster.gpu.efficiency.model_copy(
            update={"flash_window_tile_cost": cost})})
        assert layer_compute_on(windowed, gpu, one).attention_fwd_s[0] == approx(mean * core_full, rel=REL)


def test_gpt_oss_window_layer_on_gb200_as_cudnn_measured_it():
    # cudnn-frontend's training benchmark (results/gpt_oss/gb200, cuDNN 9.22): b 2, 128 heads of 64, s 4,096,
    # window 128, BF16: 0.210 ms forward, 0.465 ms backward. GPT-OSS-120B at micro-batch 4 has as many
    # (sequence, head) pairs (4 x 64 = 2 x 128): its windowed layer is the mean layer's attention x 2 less
    # its full layer's: the forward within 10 % of what cuDNN measured; the backward within 25 %, as every
    # attention backward is priced at 2.5 forwards where cuDNN's windowed one took 2.2 (its full causal
    # head-dim-128 one 3.3: results/llama3.1/gb200, 21.7 and 71.8 ms)
    model, gpu = load_model("gpt-oss-120b"), load_cluster("dgx-gb200-nvl72-1152").gpu
    no_window = model.model_copy(update={"sliding_window": None})
    four = lay(micro_batch=4)
    mean, full = layer_compute_on(model, gpu, four), layer_compute_on(no_window, gpu, four)
    assert model.seq_len == 4096 and model.sliding_window == 128 and model.full_attention_every == 2
    assert 2 * mean.attention_fwd_s[0] - full.attention_fwd_s[0] == approx(0.210e-3, rel=0.10)
    assert 2 * mean.attention_bwd_s[0] - full.attention_bwd_s[0] == approx(0.465e-3, rel=0.25)


def test_llama_attention_on_gb200_as_cudnn_measured_it():
    # cudnn-frontend's training benchmark (results/llama3.1/gb200, cuDNN 9.22): b 2, 64 query and 8 KV heads of
    # 128, causal, s 32,768, BF16: 21.692 ms forward + 71.756 ms backward = 93.448 ms. The shipped GB200 preset
    # (flash_attention fitted on Megatron-Bridge and NeMo runs, not on this) prices Llama 3.1 70B's attention
    # core at that shape within 10 % of it (H200 and GB300 are 24-29 % slower than cuDNN there: docs/fidelity.md)
    model = load_model("llama3.1-70b").model_copy(update={"seq_len": 32768})
    lc = layer_compute_on(model, load_cluster("dgx-gb200-nvl72-1152").gpu, lay(micro_batch=2))
    assert (model.heads, model.kv_heads, model.hidden // model.heads) == (64, 8, 128)
    assert lc.attention_fwd_s[0] + lc.attention_bwd_s[0] == approx(93.448e-3, rel=0.10)


# --- host syncs, CUDA graphs and the ops PyTorch runs one by one ----------------------------------------

def _moe_lc(make_model, gpu, layout=None, stack=None, training=None, **fields):
    """(dense, MoE) layer of TINY_MOE on the toy GPU, the toy stack changed by `stack`."""
    toy_stack = make_model().training.stack.model_dump()
    model = make_model(**{**TINY_MOE, **fields}, training={"stack": {**toy_stack, **(stack or {})}, **(training or {})})
    dense, moe = layer_kinds(model)
    layout = layout or lay()
    return layer_compute_on(model, gpu, layout, dense), layer_compute_on(model, gpu, layout, moe)


def test_dropless_moe_layer_waits_for_the_host_once_per_forward(make_model, toy_gpu):
    base_dense, base = _moe_lc(make_model, toy_gpu)
    dense, synced = _moe_lc(make_model, toy_gpu, stack=dict(moe_sync_us=300.0))
    # 300 us more in the MoE layer's forward, nothing in its backward or in the dense layer
    assert synced.fwd_s[0] - base.fwd_s[0] == approx(300e-6, rel=1e-9)
    assert synced.bwd_s[0] == base.bwd_s[0] and dense.fwd_s[0] == base_dense.fwd_s[0]
    # full recomputation runs the forward, and its sync, again
    _, full = _moe_lc(make_model, toy_gpu, layout=lay(recompute=2), stack=dict(moe_sync_us=300.0))
    assert full.recompute_s[0] == full.fwd_s[0] == synced.fwd_s[0]
    # drop-and-pad (static shapes) and a full-iteration CUDA graph do not sync
    _, padded = _moe_lc(make_model, toy_gpu, stack=dict(moe_sync_us=300.0), moe={**TINY_MOE["moe"], "capacity_factor": 1.0})
    _, padded0 = _moe_lc(make_model, toy_gpu, moe={**TINY_MOE["moe"], "capacity_factor": 1.0})
    assert padded.fwd_s[0] == padded0.fwd_s[0]
    _, graphed = _moe_lc(make_model, toy_gpu, stack=dict(moe_sync_us=300.0), training=dict(cuda_graph_impl="full_iteration"))
    assert graphed.fwd_s[0] == base.fwd_s[0]
    # graphs of parts of a layer leave the dispatch outside them: it still syncs
    _, scoped = _moe_lc(make_model, toy_gpu, stack=dict(moe_sync_us=300.0), training=dict(cuda_graph_impl="transformer_engine"))
    assert scoped.fwd_s[0] == synced.fwd_s[0]


def test_full_iteration_graph_removes_the_launch_floor(make_model, toy_gpu):
    # a 5 ms launch floor dwarfs the tiny layer's GPU time: the forward costs the floor plus 100 us
    _, eager = _moe_lc(make_model, toy_gpu, stack=dict(layer_launch_us=5000.0))
    assert eager.gpu_fwd_s[0] < 1e-4
    assert eager.fwd_s[0] == approx(5000e-6 + 100e-6, rel=1e-6)
    # replayed by a graph: only the GPU time and the fixed 100 us
    _, graphed = _moe_lc(make_model, toy_gpu, stack=dict(layer_launch_us=5000.0), training=dict(cuda_graph_impl="full_iteration"))
    assert graphed.fwd_s[0] == approx(eager.gpu_fwd_s[0] + 100e-6, rel=1e-12)


def test_eager_clamp_and_expert_bias_bytes_by_hand(make_model, toy_gpu):
    # b 1, s 64, top 2, 4 experts on one GPU: 64 x 2 = 128 routed rows; expert width 32, hidden 64.
    # clamp: 4 passes over the 128 x 64 fc1 output in 2 B: 16 x 128 x 32 = 65,536 B;
    # fc2 bias per expert and cat: 6 passes over the 128 x 64 output: 12 x 128 x 64 = 98,304 B;
    # 163,840 B / 500e9 B/s = 327.68 ns forward, twice that backward (the toy stack's factor 2)
    _, plain = _moe_lc(make_model, toy_gpu)
    _, eager = _moe_lc(make_model, toy_gpu, swiglu_limit=7.0, linear_bias=True)
    assert eager.fwd_s[0] - plain.fwd_s[0] == approx(163_840 / 500e9, rel=1e-6)
    assert eager.bwd_s[0] - plain.bwd_s[0] == approx(2 * 163_840 / 500e9, rel=1e-6)
    # Transformer Engine's op fuser folds both into the grouped GEMMs
    _, fused = _moe_lc(make_model, toy_gpu, swiglu_limit=7.0, linear_bias=True, training=dict(te_op_fuser=True))
    assert fused.fwd_s[0] == plain.fwd_s[0]
    with pytest.raises(ValueError, match="swiglu_limit clamps a SwiGLU"):
        make_model(**{**TINY_MOE, "ffn_act": "gelu"}, swiglu_limit=7.0)
    with pytest.raises(ValueError, match="swiglu_limit needs a moe: section"):
        make_model(ffn_act="swiglu", swiglu_limit=7.0)  # Megatron clamps expert GLUs only
    # the flex dispatcher's fp32 probabilities make the bias loop 28 B per value, not 12:
    # 28 x 128 x 64 = 229,376 B / 500e9 more forward than without the bias
    _, flex = _moe_lc(make_model, toy_gpu, training=dict(moe_dispatcher="flex"))
    _, flex_bias = _moe_lc(make_model, toy_gpu, linear_bias=True, training=dict(moe_dispatcher="flex"))
    assert flex_bias.fwd_s[0] - flex.fwd_s[0] == approx(229_376 / 500e9, rel=1e-6)


def test_eager_clamp_keeps_the_fc1_output_for_its_backward(make_model):
    # 128 routed rows on the GPU (b 1, s 64, top 2, 4 local experts) x expert width 32: the clamps
    # keep the 16-bit fc1 output (128 x 64 values) beside the clamped copy: 2 x 128 x 64 = 16,384 B
    plain = make_model(**TINY_MOE)
    clamped = make_model(**TINY_MOE, swiglu_limit=7.0)
    fused = make_model(**TINY_MOE, swiglu_limit=7.0, training=dict(te_op_fuser=True))
    moe = layer_kinds(plain)[1]
    stored = [activation_bytes_per_layer(m, lay(), moe)[0][0] for m in (plain, clamped, fused)]
    assert stored[1] - stored[0] == approx(16_384, rel=1e-12)
    assert stored[2] == stored[0]
    # full recomputation keeps only the layer's input either way
    full = [activation_bytes_per_layer(m, lay(recompute=2), moe)[0][0] for m in (plain, clamped)]
    assert full[0] == full[1]


def test_eager_rope_when_yarn_scales_cos_and_sin(make_model, toy_gpu):
    # h 1024, 16 heads of 64 (K as wide as Q), s 512, b 1: q and k hold 512 x 2,048 values;
    # the eager path moves 20 B more per value than the fused kernel: 20,971,520 B / 500e9 = 41.943 us
    fused = layer_compute_on(make_model(position_embedding="rope"), toy_gpu, lay())
    eager = layer_compute_on(make_model(position_embedding="rope", rope_mscale=1.347), toy_gpu, lay())
    assert eager.fwd_s[0] - fused.fwd_s[0] == approx(20_971_520 / 500e9, rel=1e-6)
    # tp 2 halves the heads on each GPU
    fused2 = layer_compute_on(make_model(position_embedding="rope"), toy_gpu, lay(tp=2))
    eager2 = layer_compute_on(make_model(position_embedding="rope", rope_mscale=1.347), toy_gpu, lay(tp=2))
    assert eager2.fwd_s[0] - fused2.fwd_s[0] == approx(20_971_520 / 2 / 500e9, rel=1e-6)
    # MLA (DeepSeek-V3 shape, 128 heads with a 64-wide rope part, rope_mscale 1.347 for the test):
    # the rope part of each query head over tp 2 plus the one shared rope key on every rank:
    # 20 B x 512 x (128 x 64 / 2 + 64) = 42,598,400 B / 500e9 = 85.197 us
    mla = dict(heads=128, head_dim=None, position_embedding="rope",
               mla=dict(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128))
    mla_fused = layer_compute_on(make_model(**mla), toy_gpu, lay(tp=2))
    mla_eager = layer_compute_on(make_model(**mla, rope_mscale=1.347), toy_gpu, lay(tp=2))
    assert mla_eager.fwd_s[0] - mla_fused.fwd_s[0] == approx(42_598_400 / 500e9, rel=1e-6)
    # learned positions have no RoPE to run
    assert layer_compute_on(make_model(rope_mscale=1.347), toy_gpu, lay()).fwd_s[0] == layer_compute_on(make_model(), toy_gpu, lay()).fwd_s[0]


def test_dispatch_runs_at_the_presets_all_to_all_rate(make_model, make_cluster, toy_gpu_data):
    model = make_model(**TINY_MOE)
    (_, moe) = layer_kinds(model)
    # the toy network: 10 GB/s a GPU; at a2a_network 0.5 the dispatch gets 5 GB/s, not the all-reduce's 8
    cluster = make_cluster(toy_gpu_data(efficiency=dict(a2a_network=0.5, a2a_nvlink=0.25)))
    # ep 16 over two nodes, as in test_all_to_all_inside_and_across_nodes: 32,768 B, 8/16 over the network
    network = 32768 * 8 / 16 / 5e9
    assert network > 32768 * 7 / 16 / 50e9  # NVLink at 0.25 of 200 GB/s: still the faster
    assert ep_comm_per_layer_s(cluster, model, lay(dp=16, ep=16, micro_batch=2), moe)[0] == approx(
        4 * (network + 10e-6), rel=REL)
    # ep 4 inside a node: 3/4 of 32,768 B at 0.25 x 200 = 50 GB/s
    assert ep_comm_per_layer_s(cluster, model, lay(dp=4, ep=4, micro_batch=2), moe)[0] == approx(
        4 * (32768 * 3 / 4 / 50e9 + 10e-6), rel=REL)


def test_torch_ring_attention_reduces_kv_gradients_in_fp32(make_model, make_cluster):
    # all-gather CP as in test_cp_with_kv_repeated_...: forward one gather, backward the gather again and
    # the gradients' reduction, which torch's ring attention runs in fp32: twice the bytes, 3 gathers in all
    cluster = make_cluster()
    layout = lay(cp=4)
    gqa = make_model(kv_heads=4)

    def with_stack(**fields):
        stack = gqa.training.stack.model_copy(update={"cp_comm": "all_gather", **fields})
        return gqa.model_copy(update={"training": gqa.training.model_copy(update={"stack": stack})})

    lc = layer_compute_on(gqa, cluster.gpu, layout)
    plain, ring = (cp_comm_per_layer_s(cluster, m, layout, lc, _st(m, cluster))[0]
                   for m in (with_stack(), with_stack(cp_ring_buffers=True)))
    assert ring == approx(plain / 3 * 4, rel=REL)  # gather x (1 + 2) -> gather x (1 + 1 + 2)


def test_torch_ring_attention_merges_partial_outputs_in_fp32(make_model, toy_gpu):
    # 16 heads of 64: the output 1,024 wide; cp 4 of 512 tokens: 128 a rank, 131,072 output elements.
    # Compiled (fused merge): forward 3 merges x 10 B, backward 4 steps x 30 B; eager: 38 B and 54 B; at 500e9 B/s
    for compiled, fwd_b, bwd_b in ((True, 10, 30), (False, 38, 54)):
        model = make_model(training=dict(torch_compile=compiled))
        stack = model.training.stack.model_copy(update={"cp_ring_buffers": True})
        ring = model.model_copy(update={"training": model.training.model_copy(update={"stack": stack})})
        base, merged = (layer_compute_on(m, toy_gpu, lay(cp=4)) for m in (model, ring))
        assert merged.gpu_fwd_s[0] - base.gpu_fwd_s[0] == approx(fwd_b * 3 * 131072 / 500e9, rel=1e-9)
        assert merged.gpu_bwd_s[0] - base.gpu_bwd_s[0] == approx(bwd_b * 4 * 131072 / 500e9, rel=1e-9)
    # without context parallelism there is no ring
    assert layer_compute_on(ring, toy_gpu, lay()).gpu_bwd_s[0] == layer_compute_on(model, toy_gpu, lay()).gpu_bwd_s[0]
    # op-level checkpointing saves SDPA's output, the merge inside it: its recomputation adds no merge
    op = {**model.training.stack.model_dump(), "selective_ac": "op"}
    rec = [layer_compute_on(make_model(training=dict(stack={**op, "cp_ring_buffers": r})), toy_gpu,
                            lay(cp=4, recompute="selective")).recompute_s[0] for r in (False, True)]
    assert rec[0] == rec[1]


def test_the_checkpoint_functions_host_work_floors_the_recomputed_forward(make_model, toy_gpu):
    # a 5 ms launch floor and 1 ms of checkpoint machinery: the forward costs 5 ms + the 100 us overhead, its
    # recomputation under full recomputation 6 ms + 100 us (the host issues the checkpoint's calls, then the layer's)
    _, lc = _moe_lc(make_model, toy_gpu, layout=lay(recompute=2), stack=dict(layer_launch_us=5000.0, checkpoint_host_us=1000.0))
    assert lc.fwd_s[0] == approx(5000e-6 + 100e-6, rel=1e-6)
    assert lc.recompute_s[0] == approx(6000e-6 + 100e-6, rel=1e-6)
    # none without full recomputation, and none under a full-iteration graph (no host at all)
    _, sel = _moe_lc(make_model, toy_gpu, layout=lay(recompute=1), stack=dict(layer_launch_us=5000.0, checkpoint_host_us=1000.0))
    assert sel.recompute_s[0] < 1e-3
    _, graphed = _moe_lc(make_model, toy_gpu, layout=lay(recompute=2), stack=dict(checkpoint_host_us=1000.0),
                         training=dict(cuda_graph_impl="full_iteration"))
    assert graphed.recompute_s[0] == graphed.fwd_s[0]


def test_current_scaling_reads_each_fp8_input_once_more(toy_gpu_data):
    # per-tensor FP8 casts read 2 B and write a row- and a column-wise byte: 4 B an element (delayed, blockwise);
    # current scaling (tensorwise) reads it first for its amax: 6 B (Transformer Engine fp8_current_scaling.rst)
    assert precision("fp8").quantize_bytes == 4
    assert precision("fp8", fp8_recipe="tensorwise").quantize_bytes == 6
    assert precision("fp8", fp8_recipe="blockwise").quantize_bytes == 4
    assert precision("mxfp8", fp8_recipe="tensorwise") == precision("mxfp8")  # its own recipe
    # the amax read fused into the cast (torch.compile over torchao): one read, 2 + 1 + 1 = 4 B
    assert precision("fp8", fp8_recipe="tensorwise", amax_fused=True).quantize_bytes == 4
    gpu = GpuSpec.model_validate(toy_gpu_data(peak_tflops=dict(bf16=100.0, fp16=100.0, fp8=200.0)))
    mats = (Matrix("a", 64, 32, "none"),)
    # a 128 x 64 input: 8,192 elements cast, 4 B each delayed, 6 B current scaling
    assert _gemm_set(mats, 128, 1, gpu, precision("fp8"))[1] == 4 * 8192
    assert _gemm_set(mats, 128, 1, gpu, precision("fp8", fp8_recipe="tensorwise"))[1] == 6 * 8192


def test_torch_compile_fuses_torchaos_amax_into_the_cast(make_model):
    # torchtitan's Float8 (torchao tensorwise, current scaling) compiled: Inductor fuses the amax with the cast, one
    # read (4 B); eager, or Transformer Engine's current scaling compiled or not: 6 B
    titan = {**make_model().training.stack.model_dump(), "eager_block_ops": True}
    te = make_model().training.stack.model_dump()
    bytes_ = {(eager, compiled): make_model(training=dict(stack={**titan, "eager_block_ops": eager}, precision="fp8",
                                                          fp8_recipe="tensorwise", torch_compile=compiled)
                                            ).training.numerics.quantize_bytes
              for eager in (True, False) for compiled in (True, False)}
    assert bytes_ == {(True, True): 4, (True, False): 6, (False, True): 6, (False, False): 6}
    assert te["eager_block_ops"] is False
