"""Shape-aware GEMM time, the launch floor, per-micro-batch overheads and ZeRO-3 by gathering
granularity, worked out by hand on the toy GPU and toy stack (conftest)."""
from __future__ import annotations

import numpy as np
from pytest import approx

from planner.costs.comm import zero3_layer_comm_s
from planner.costs.compute import gemm_s
from planner.costs.memory import memory_breakdown, zero3_transient_params
from planner.costs.pipeline import step_time
from planner.specs.precision import precision
from planner.layout.space import single_layout
from planner.specs import GpuSpec
from planner.specs.loading import load_stack
from .conftest import job_on, layer_compute_on
from planner.costs.context import job_context

from .conftest import TOY_STACK


def lay(**kw):
    kw.setdefault("pp", 1)
    kw.setdefault("num_microbatches", 1)
    return single_layout(**kw)


def test_wave_quantisation_charges_the_last_partial_wave(toy_gpu_data):
    # 4 SMs, 128 x 128 tiles: a 256 x 1024 x 384 GEMM has 2 x 3 = 6 tiles -> 2 waves of 4 tiles, so it
    # is charged 2 * 1024 * 128 * 128 * 4 * 2 = 268,435,456 FLOPs instead of 2 * 256 * 1024 * 384 = 201,326,592
    gpu = GpuSpec.model_validate(toy_gpu_data(sms=4, gemm_tiles=[[128, 128]]))
    plain = GpuSpec.model_validate(toy_gpu_data())
    memory = 2 * (256 * 1024 + 1024 * 384 + 256 * 384) / 500e9  # the HBM term is unchanged
    assert gemm_s(256, 1024, 384, 100e12, 1000e9, gpu) == approx(268_435_456 / 50e12 + memory, rel=1e-12)
    assert gemm_s(256, 1024, 384, 100e12, 1000e9, plain) == approx(201_326_592 / 50e12 + memory, rel=1e-12)
    # exactly one full wave (4 tiles: 256 x 256) loses nothing
    full = gemm_s(256, 1024, 256, 100e12, 1000e9, gpu) - 2 * (256 * 1024 + 1024 * 256 + 256 * 256) / 500e9
    assert full == approx(2 * 256 * 1024 * 256 / 50e12, rel=1e-12)
    # offered 64 x 128 tiles too, the library takes them: 4 x 3 = 12 tiles = exactly 3 waves, no waste
    both = GpuSpec.model_validate(toy_gpu_data(sms=4, gemm_tiles=[[128, 128], [64, 128]]))
    assert gemm_s(256, 1024, 384, 100e12, 1000e9, both) == approx(201_326_592 / 50e12 + memory, rel=1e-12)


def test_small_gemms_saturate(toy_gpu_data):
    # W_half = 1 GFLOP: a GEMM of 1 GFLOP runs at half of `gemm`, one of 99 GFLOP at 99 %
    gpu = GpuSpec.model_validate(toy_gpu_data(efficiency=dict(gemm_half_gflop=1.0, hbm=1.0)))
    m, k, n = 1000, 500, 1000  # 2 * 1000 * 500 * 1000 = 1e9 FLOPs
    hbm = 2 * (m * k + k * n + m * n) / 1000e9
    assert gemm_s(m, k, n, 100e12, 1000e9, gpu) == approx(1e9 / (50e12 * 0.5) + hbm, rel=1e-12)
    big = gemm_s(99 * m, k, n, 100e12, 1000e9, gpu) - 2 * (99 * m * k + k * n + 99 * m * n) / 1000e9
    assert big == approx(99e9 / (50e12 * 0.99), rel=1e-12)


def test_launch_floor_bounds_small_layers(make_model, toy_gpu):
    stack = dict(TOY_STACK, layer_launch_us=10_000.0)  # 10 ms: far above this toy layer's GPU time
    model = make_model(training=dict(global_batch=8, stack=stack))
    lc = layer_compute_on(model, toy_gpu, lay(dp=1, tp=1, micro_batch=1))
    # forward: max(GPU time, 10 ms) + 100 us overhead; backward launches twice as many kernels
    assert lc.fwd_s[0] == approx(10e-3 + 100e-6, rel=1e-6)
    assert lc.bwd_s[0] == approx(20e-3 + 200e-6, rel=1e-6)


def test_tensor_parallel_linears_add_host_work_where_the_stack_counts_it(make_model, toy_gpu):
    # nanotron's async TP adds ~42 calls and 4 collectives to a layer's forward at tp > 1: 42 x 8 + 4 x 30 =
    # 456 us (configs/stacks/nanotron.yaml). A toy layer far below a 10 ms floor: forward = floor (+ 100 us
    # overhead) at tp 1, floor + 456 us at tp 2; the backward launches twice as much.
    stack = dict(TOY_STACK, layer_launch_us=10_000.0, tp_layer_launch_us=42 * 8 + 4 * 30)
    model = make_model(training=dict(global_batch=8, stack=stack))
    one = layer_compute_on(model, toy_gpu, lay(dp=1, tp=1, micro_batch=1))
    two = layer_compute_on(model, toy_gpu, lay(dp=1, tp=2, micro_batch=1))
    assert one.fwd_s[0] == approx(10e-3 + 100e-6, rel=1e-6)
    assert two.fwd_s[0] == approx(10.456e-3 + 100e-6, rel=1e-6)
    assert two.bwd_s[0] == approx(2 * 10.456e-3 + 200e-6, rel=1e-6)
    assert load_stack("nanotron").tp_layer_launch_us == 456 and load_stack("megatron-core").tp_layer_launch_us == 0


def test_megatron_deepspeed_launch_prior_counts_every_host_call(make_model, toy_gpu):
    # On a GPU no Megatron-DeepSpeed run was fitted on, the floor is the profile's prior: 43 PyTorch
    # calls in a layer's forward (configs/stacks/megatron-deepspeed.yaml lists them), not only the ~25
    # kernels, x 8 us a call = 344 us; plus the profile's 83 us a layer forward, twice in the backward.
    prior = load_stack("megatron-deepspeed").for_gpu(toy_gpu.name)
    assert prior.layer_launch_us == approx(43 * 8.0)
    stack = dict(TOY_STACK, layer_launch_us=prior.layer_launch_us, layer_overhead_us=prior.layer_overhead_us)
    model = make_model(hidden=256, heads=4, ffn_hidden=1024, seq_len=128, training=dict(global_batch=8, stack=stack))
    lc = layer_compute_on(model, toy_gpu, lay(dp=1, tp=1, micro_batch=1))
    assert lc.gpu_fwd_s[0] < 344e-6 and lc.gpu_bwd_s[0] < 688e-6  # the toy layer is host-bound
    assert lc.fwd_s[0] == approx(344e-6 + 83e-6, rel=1e-6)
    assert lc.bwd_s[0] == approx(688e-6 + 166e-6, rel=1e-6)


def test_megatron_deepspeed_microbatch_and_step_priors_are_counted():
    # configs/stacks/megatron-deepspeed.yaml counts a micro-batch's host work outside the layers:
    # 110 eager calls x 8 us + 5 c10d collectives x 30 us + 3 host syncs x 25 us = 880 + 150 + 75 us;
    # a step: the fp16 optimizer's 20 calls x 8 us + 4 collectives x 30 us + 4 syncs x 25 us and the
    # ThroughputTimer's stop (a sync): 160 + 120 + 100 + 25 = 405 us (not the uncounted 60 ms it had).
    prior = load_stack("megatron-deepspeed").for_gpu("h100-sxm-80gb")  # no run of it fitted on the H100
    assert prior.microbatch_overhead_us == approx(110 * 8 + 5 * 30 + 3 * 25)
    assert prior.step_overhead_s == approx((20 * 8 + 4 * 30 + 4 * 25 + 25) * 1e-6)


def test_microbatch_overhead_per_chunk(make_model, make_cluster):
    cluster = make_cluster()
    base = make_model()
    slow = make_model(training=dict(global_batch=8, stack=dict(TOY_STACK, microbatch_overhead_us=1000.0)))
    layout = lay(dp=1, tp=1, pp=2, vpp=2, micro_batch=1, num_microbatches=8)
    a, b = step_time(job_context(base, cluster, layout)), step_time(job_context(slow, cluster, layout))
    # 8 micro-batches x 2 chunks x 1 ms on every rank: the overhead grows by 16 ms; the pipeline term
    # m t_max + (sum - t_max)/v grows by 8 x 2 ms + (2 x 2 ms - 2 ms) / 2 = 17 ms (one more in the bubble)
    assert b.overhead[0] - a.overhead[0] == approx(16e-3, rel=1e-9)
    assert b.total[0] - a.total[0] == approx(17e-3, rel=1e-9)


def test_zero3_memory_by_gathering_granularity(make_model):
    # toy model: h 1024, ffn 4096 (gelu). layer params = attention 4h^2 + 4h + MLP 8h^2 + 5h + norms 4h
    h, f = 1024, 4096
    layer = 4 * h * h + 4 * h + 2 * h * f + f + h + 4 * h
    fsdp = make_model(training=dict(global_batch=8, stack=dict(TOY_STACK, zero3_gather="layer", zero3_units_in_flight=2)))
    gathered, grads = zero3_transient_params(fsdp, lay(dp=8, tp=2, micro_batch=1), fsdp.training.stack)
    assert gathered[0] == approx(2 * layer / 2) and grads[0] == approx(layer / 2)
    # DeepSpeed: the largest matrix (MLP up: h x f = 4,194,304 / tp 2) in flight + 1e6 prefetched;
    # gradients: a reduce bucket of 5e5 elements
    ds = make_model(training=dict(global_batch=8, stack=dict(
        TOY_STACK, zero3_gather="module", zero3_units_in_flight=1, zero3_prefetch_params=1e6,
        zero3_reduce_bucket_params=5e5)))
    gathered, grads = zero3_transient_params(ds, lay(dp=8, tp=2, micro_batch=1), ds.training.stack)
    assert gathered[0] == approx(h * f / 2 + 1e6) and grads[0] == approx(5e5)


def test_zero3_gathers_per_module_pay_latency_per_unit(make_model, make_cluster):
    cluster = make_cluster(gpus_per_node=1, nodes=8, network_gbps=1.0)
    layout = lay(dp=8, tp=1, micro_batch=1, zero=3)
    fsdp = make_model(training=dict(global_batch=8, stack=dict(TOY_STACK, zero3_gather="layer")))
    ds = make_model(training=dict(global_batch=8, stack=dict(TOY_STACK, zero3_gather="module")))
    prec = precision("bf16")
    g1, r1 = zero3_layer_comm_s(cluster, fsdp, layout, prec, fsdp.training.stack)
    g4, r4 = zero3_layer_comm_s(cluster, ds, layout, prec, ds.training.stack)
    # same bytes, but 4 all-gathers (QKV, out, MLP up, MLP down), each NCCL's ring Simple over 8 nodes
    # of one rank: 8.4 + 7 network steps x 14 us (tuning.cc) = 106.4 us
    assert g4[0] - g1[0] == approx(3 * 106.4e-6, rel=1e-9)
    assert r4[0] - r1[0] == approx(3 * 106.4e-6, rel=1e-9)


def test_zero3_exposes_the_gather_a_layer_cannot_hide(make_model, make_cluster):
    # a slow network (0.01 GB/s): gathers far outlast compute, so most of them stay exposed
    cluster = make_cluster(gpus_per_node=1, nodes=2, network_gbps=0.01)
    model = make_model()
    layout = lay(dp=2, tp=1, micro_batch=1, num_microbatches=4, zero=3)
    lc = layer_compute_on(model, cluster.gpu, layout)
    gather, reduce = zero3_layer_comm_s(cluster, model, layout, precision("bf16"), model.training.stack)
    per_layer = max(gather[0] - lc.fwd_s[0], 0) + max(gather[0] + reduce[0] - lc.bwd_s[0], 0)
    assert step_time(job_context(model, cluster, layout)).dp_comm[0] == approx(4 * 8 * per_layer, rel=1e-9)


def test_memory_uses_the_stack_granularity(make_model, toy_gpu):
    layout = lay(dp=8, tp=1, micro_batch=1, zero=3)
    two = make_model(training=dict(global_batch=8, stack=dict(TOY_STACK, zero3_units_in_flight=2)))
    one = make_model(training=dict(global_batch=8, stack=dict(TOY_STACK, zero3_units_in_flight=1)))
    # one layer's bf16 weights less: layer params x 2 bytes
    layer = two.layer_params()
    diff = memory_breakdown(job_on(two, toy_gpu, layout)).weights - memory_breakdown(job_on(one, toy_gpu, layout)).weights
    assert diff[0] * 2**30 == approx(layer * 2, rel=1e-9)
    assert np.all(diff > 0)


def test_zero3_without_overlap_by_hand(make_model, make_cluster):
    # 2 nodes of 1 GPU, 1 GB/s x 0.8 = 0.8 GB/s; dp 2; 8 layers; 4 micro-batches; no overlap.
    # layer params: 4h^2 + 4h (attention) + 2hf + f + h (MLP) + 4h (norms), h 1024, f 4096 = 12,596,224
    layer = 12_596_224
    # all-gather of bf16 weights: 1/2 x 2 B x layer / 0.8e9 + NCCL's ring Simple of one network step
    # (8.4 + 14 us) = 15.768 ms; reduce-scatter of fp32 gradients: 1/2 x 4 B x layer / 0.8e9 + 22.4 us
    gather = 0.5 * 2 * layer / 0.8e9 + 22.4e-6
    reduce = 0.5 * 4 * layer / 0.8e9 + 22.4e-6
    cluster = make_cluster(gpus_per_node=1, nodes=2, network_gbps=1.0)
    model = make_model(training=dict(global_batch=8, stack=dict(TOY_STACK, dp_comm_overlap=False)))
    layout = lay(dp=2, tp=1, micro_batch=1, num_microbatches=4, zero=3)
    # forward gather, backward gather and reduce-scatter per layer, 8 layers, 4 micro-batches: 2.0175 s
    assert step_time(job_context(model, cluster, layout)).dp_comm[0] == approx(4 * 8 * (2 * gather + reduce), rel=1e-9)
    assert 4 * 8 * (2 * gather + reduce) == approx(2.01755, rel=1e-4)


def test_zero3_offloaded_reduce_waits_for_the_host_copy(make_model, make_cluster):
    # Inside one node (NVLink 200 GB/s x 0.5 = 100 GB/s), dp 2, zero 3, the optimizer offloaded: the layer's
    # gathers and its reduce-scatter are shorter than its compute, so with overlap they hide (10 % of the
    # unhidden stays: dp_overlap_exposed). DeepSpeed 0.6.2 copies each reduced partition to the host with a
    # blocking copy (zero3_offload_sync_reduce): the reduce-scatter, 1/2 x 4 B x 12,596,224 / 100e9 + NCCL's
    # ring Simple in one node (8.4 + 3.4 us), is exposed for each of 8 layers x 4 micro-batches.
    layer = 12_596_224
    reduce = 0.5 * 4 * layer / 100e9 + 11.8e-6
    host = dict(host_memory_gib=1024, host_link_gbps=50, host_memory_gbps=200)
    cluster = make_cluster(gpus_per_node=2, nodes=1, node=dict(gpus=2, nvlink_gbps=200.0, network_gbps=10.0, **host))
    layout = lay(dp=2, tp=1, micro_batch=1, num_microbatches=4, zero=3, offload="optimizer")

    def dp_comm(sync: bool) -> float:
        model = make_model(training=dict(global_batch=8, stack=dict(TOY_STACK, zero3_offload_sync_reduce=sync)))
        return float(step_time(job_context(model, cluster, layout)).dp_comm[0])

    lc = layer_compute_on(make_model(), cluster.gpu, layout)
    assert reduce < float(lc.bwd_s[0])  # hidden when asynchronous
    assert dp_comm(True) == approx(4 * 8 * reduce, rel=1e-9)
    # asynchronous: everything hides, 10 % of the unhidden gathers and reduce stays (the toy stack's
    # dp_overlap_exposed), gather = 1/2 x 2 B x layer / 100e9 + 11.8 us
    gather = 0.5 * 2 * layer / 100e9 + 11.8e-6
    assert dp_comm(False) == approx(0.1 * 4 * 8 * (2 * gather + reduce), rel=1e-9)
    # the optimizer on the GPU: the copy is not made, nothing changes
    on_gpu = lay(dp=2, tp=1, micro_batch=1, num_microbatches=4, zero=3)
    sync = make_model(training=dict(global_batch=8, stack=dict(TOY_STACK, zero3_offload_sync_reduce=True)))
    assert step_time(job_context(sync, cluster, on_gpu)).dp_comm[0] == approx(
        step_time(job_context(make_model(), cluster, on_gpu)).dp_comm[0], rel=1e-12)


def test_overlap_never_makes_zero3_slower(make_model, make_cluster):
    for net in (0.01, 1.0, 100.0):
        cluster = make_cluster(gpus_per_node=1, nodes=4, network_gbps=net)
        layout = lay(dp=4, tp=1, micro_batch=1, num_microbatches=2, zero=3)
        on = make_model(training=dict(global_batch=8, stack=dict(TOY_STACK, dp_comm_overlap=True)))
        off = make_model(training=dict(global_batch=8, stack=dict(TOY_STACK, dp_comm_overlap=False)))
        assert step_time(job_context(on, cluster, layout)).dp_comm[0] <= step_time(job_context(off, cluster, layout)).dp_comm[0]


def test_fat_tree_hops_add_switch_latency(make_cluster, toy_gpu_data):
    from planner.costs.collectives import SIMPLE, ring_latency_s
    from planner.costs.comm import group_links

    # radix 4: a rail-optimised leaf reaches 2 nodes, a second level 2 x 2 = 4, beyond that 3 levels.
    # 1 us a hop: 1 level = 1 hop, 2 levels = 3 hops, 3 levels = 5 hops; a send pays them on top of the
    # 10 us network step, a collective's network step on top of NCCL's (twice for Simple: its flush)
    cluster = make_cluster(nodes=16, network=dict(switch_radix=4, switch_latency_us=1.0))
    links = group_links(cluster, np.array([2, 4, 16]), np.array([8, 8, 8]))
    assert list(links.nodes) == [2, 4, 16]
    assert links.hop_s == approx([1e-6, 3e-6, 5e-6])
    assert links.p2p_s == approx([11e-6, 13e-6, 15e-6])
    # reduce-scatter, Simple, one rank a node: 8.4 + 3 network steps x (14 + 2 x 3 hops) us
    assert ring_latency_s("reduce_scatter", SIMPLE, 4, 4, 3e-6) == approx((8.4 + 3 * 20) * 1e-6)


def test_flash_attention_efficiency_saturates_with_sequence():
    from planner.costs.compute import flash_sequence_factor

    # s / (s + 230), relative to 2,048: 2048 / 2278 = 0.8990; at 512: 512 / 742 = 0.6900 -> 0.7675;
    # at 16,384: 16384 / 16614 = 0.9862 -> 1.0969
    assert flash_sequence_factor(2048, 230.0) == approx(1.0)
    assert flash_sequence_factor(512, 230.0) == approx(0.6900 / 0.8990, rel=1e-3)
    assert flash_sequence_factor(16384, 230.0) == approx(0.9862 / 0.8990, rel=1e-3)
    assert flash_sequence_factor(512, 0.0) == 1.0  # off


def test_flash_attention_efficiency_saturates_with_head_dim(make_model, toy_gpu_data):
    from planner.costs.compute import flash_head_dim_factor

    # d / (d + 36), relative to head dim 128: 128 / 164 = 0.7805; at 64: 64 / 100 = 0.64 -> 0.8200,
    # FA3's head-dim-64 / 128 rate on H100 forward and backward together (Shah et al. 2024: 0.77 and
    # 0.84, the backward 2.5x the forward's FLOPs: 3.5 / (1 / 0.77 + 2.5 / 0.84) = 0.82)
    assert flash_head_dim_factor(128, 36.0) == approx(1.0)
    assert flash_head_dim_factor(64, 36.0) == approx(0.64 / 0.7805, rel=1e-3)
    assert 3.5 / (1 / 0.77 + 2.5 / 0.84) == approx(0.82, abs=0.002)
    assert flash_head_dim_factor(64, 0.0) == 1.0  # off

    # Same attention FLOPs (4 s^2 h, hidden 1024): 16 heads of 64 take 1 / 0.82 of 8 heads of 128.
    gpu = GpuSpec.model_validate(toy_gpu_data(efficiency=dict(flash_half_head_dim=36.0)))
    layout = single_layout(dp=1, tp=1, pp=1, micro_batch=1, num_microbatches=8)
    narrow = layer_compute_on(make_model(heads=16), gpu, layout)
    wide = layer_compute_on(make_model(heads=8), gpu, layout)
    assert narrow.attention_fwd_s[0] / wide.attention_fwd_s[0] == approx(0.7805 / 0.64, rel=1e-3)
    assert narrow.attention_bwd_s[0] / wide.attention_bwd_s[0] == approx(0.7805 / 0.64, rel=1e-3)
