"""Step time (planner/costs/pipeline.py): schedules, bubbles, exposed communication.

The per-layer times come from planner.costs.compute (checked by hand in test_compute.py); here they
are the unit of the schedule arithmetic (Narayanan et al. 2021 Sec. 2.2): with p identical stages
of time t_stage, m micro-batches and v chunks per rank, 1F1B / interleaved take
(m + (p - 1)/v) t_stage; the last stage also computes the logits (t_logits per micro-batch), so
step = m t_max + (sum_r t_r - t_max)/v with t_max = t_stage + t_logits.
Toy cluster (conftest): NVLink 100 GB/s achieved, network 8 GB/s per NIC, 10 us latency; toy
GPU: Adam step at 1000 GB/s x 0.5, 0.5 s fixed per step.
"""
from __future__ import annotations

import numpy as np
from pytest import approx

from planner.costs.compute import LayerCompute
from planner.costs.layer_times import ep_exposed_s
from planner.costs.pipeline import step_time
from planner.specs.precision import BF16
from planner.layout.space import single_layout
from .conftest import TOY_STACK, layer_compute_on
from planner.costs.context import job_context

ADAM_BYTES_PER_PARAM = BF16.adam_step_bytes  # 30 B: planner/specs/precision.py
LAT = 10e-6
REL = 1e-9
H, S, V = 1024, 512, 8192
LAYER_PARAMS = 12 * H**2 + 13 * H  # 12,596,224 (biases and layer norms included)


def lay(**kw):
    kw.setdefault("dp", 1)
    kw.setdefault("tp", 1)
    kw.setdefault("pp", 1)
    kw.setdefault("micro_batch", 1)
    return single_layout(**kw)


def unit_times(model, gpu, layout):
    lc = layer_compute_on(model, gpu, layout)
    return float(lc.fwd_s[0] + lc.bwd_s[0]), float(lc.logits_fwd_bwd_s[0])


def test_one_f_one_b_step_by_hand(make_model, make_cluster):
    model = make_model()  # 8 layers, global batch 8
    cluster = make_cluster()
    layout = lay(pp=4, num_microbatches=8)
    t_layer, t_logits = unit_times(model, cluster.gpu, layout)
    m, p, v = 8, 4, 1
    t_stage = 2 * t_layer  # 8 layers / 4 stages
    times = step_time(job_context(model, cluster, layout))
    # (m + (p-1)/v) t_stage, plus the logits on the critical path once per micro-batch
    pipeline = (m + (p - 1) / v) * t_stage + m * t_logits
    assert times.compute[0] + times.recompute[0] + times.tp_comm[0] + times.bubble[0] == approx(pipeline, rel=REL)
    # averaged over the 4 ranks: each does 2 layers of work, and a quarter of the logits
    assert times.compute[0] == approx(m * (t_stage + t_logits / p), rel=REL)
    # bubble = (p-1)/v fills of one stage + the 3/4 of the logit time the other ranks wait for
    assert times.bubble[0] == approx((p - 1) * t_stage + m * t_logits * (p - 1) / p, rel=REL)
    assert times.recompute[0] == 0.0 and times.tp_comm[0] == 0.0 and times.dp_comm[0] == 0.0
    # p2p: 2 s b h = 1,048,576 B over NVLink (100 GB/s, all 4 stages in one node) + latency;
    # 2 sends per micro-batch per chunk plus the fill: 2 (m v + p - 1) = 22 sends
    p2p = 2 * S * H / 100e9 + LAT
    assert times.pp_comm[0] == approx(2 * (m * v + p - 1) * p2p, rel=REL)
    # Adam: 30 B per parameter of the heaviest rank (first: 2 layers + word and position embeddings)
    params = 2 * LAYER_PARAMS + V * H + S * H  # 25,192,448 + 8,388,608 + 524,288 = 34,105,344
    assert times.optimizer[0] == approx(ADAM_BYTES_PER_PARAM * params / 500e9, rel=REL)
    assert times.optimizer[0] == approx(2.04632064e-3, rel=1e-9)  # 30 B x 34,105,344 / 500e9
    assert times.overhead[0] == 0.5
    parts = (times.compute + times.recompute + times.tp_comm + times.pp_comm + times.dp_comm + times.bubble
             + times.optimizer + times.overhead)
    assert times.total[0] == approx(parts[0], rel=1e-12)


def test_negligible_logits_gives_the_textbook_formula(make_model, make_cluster):
    # vocab 16: the output layer is ~16/(12 h) of a layer's GEMMs, so the step is (m + p - 1) t_stage
    # to within 1 %.
    model = make_model(vocab=16)
    cluster = make_cluster()
    layout = lay(pp=4, num_microbatches=8)
    t_layer, t_logits = unit_times(model, cluster.gpu, layout)
    assert t_logits < 0.01 * t_layer
    times = step_time(job_context(model, cluster, layout))
    busy = times.compute[0] + times.bubble[0]
    assert busy == approx((8 + 3) * 2 * t_layer, rel=1e-2)


def test_interleaving_shrinks_the_bubble(make_model, make_cluster):
    model = make_model()
    cluster = make_cluster()
    plain, inter = lay(pp=4, num_microbatches=8), lay(pp=4, vpp=2, num_microbatches=8)
    t_layer, t_logits = unit_times(model, cluster.gpu, plain)
    a, b = step_time(job_context(model, cluster, plain)), step_time(job_context(model, cluster, inter))
    t_stage = 2 * t_layer
    # bubble (p-1) t_stage / v: 3 t_stage -> 1.5 t_stage; the logit imbalance is unchanged
    assert b.bubble[0] == approx(3 * t_stage / 2 + 8 * t_logits * 3 / 4, rel=REL)
    assert a.bubble[0] - b.bubble[0] == approx(1.5 * t_stage, rel=REL)
    assert b.compute[0] == a.compute[0]
    # but twice the sends: 2 (m v + p - 1) = 38 instead of 22
    p2p = 2 * S * H / 100e9 + LAT
    assert b.pp_comm[0] == approx(38 * p2p, rel=REL)


def test_uneven_split_waits_for_the_heaviest_rank(make_model, make_cluster):
    model = make_model(layers=10, training=dict(global_batch=8))
    cluster = make_cluster()
    layout = lay(pp=4, num_microbatches=8)
    t_layer, t_logits = unit_times(model, cluster.gpu, layout)
    # ranks hold 3, 3, 2, 2 layers (the heaviest rank holds ceil(10/4) = 3); the last also the logits
    t_max = max(3 * t_layer, 2 * t_layer + t_logits)
    t_sum = 10 * t_layer + t_logits
    times = step_time(job_context(model, cluster, layout))
    assert times.compute[0] + times.bubble[0] == approx(8 * t_max + (t_sum - t_max), rel=REL)
    assert times.compute[0] == approx(8 * (10 / 4 * t_layer + t_logits / 4), rel=REL)


def test_tp_communication_and_full_recompute(make_model, make_cluster):
    model = make_model(training=dict(global_batch=8))
    cluster = make_cluster()
    layout = lay(tp=2, pp=2, num_microbatches=8, recompute="full")
    lc = layer_compute_on(model, cluster.gpu, layout)
    # per layer forward: two all-reduces of 2 s b h = 1,048,576 B over 2 ranks on NVLink, NCCL's
    # ring Simple (8.4 + 2 x 3.4 us; LL: 7.8 us + 20.97 us on its half bandwidth):
    # 2 x (2 * 1/2 * 1,048,576 / 100e9 + 15.2 us) = 2 x 25.686 us
    tp_fwd = 2 * (1_048_576 / 100e9 + 15.2e-6)
    times = step_time(job_context(model, cluster, layout))
    # forward, backward and the recomputed forward: 3 x; m = 8 micro-batches x 4 layers per rank
    assert times.tp_comm[0] == approx(8 * 4 * 3 * tp_fwd, rel=REL)
    assert times.recompute[0] == approx(8 * 4 * lc.fwd_s[0], rel=REL)  # full: the whole forward again
    overlapped = make_model(training=dict(global_batch=8, tp_comm_overlap=True))
    # tp_overlap_exposed = 0.5 on the toy GPU
    assert step_time(job_context(overlapped, cluster, layout)).tp_comm[0] == approx(0.5 * 8 * 4 * 3 * tp_fwd, rel=REL)


def _dp_model(make_model, overlap):
    return make_model(training=dict(global_batch=8, dp_comm_overlap=overlap))


# pp = 1: the rank holds 8 layers, the embeddings and the untied output layer (tp = 1)
DP_PARAMS = 8 * LAYER_PARAMS + V * H + S * H + V * H  # 118,071,296


def test_dp_overlap_hides_up_to_one_stage_of_work(make_model, make_cluster):
    # One GPU per node and 1 GB/s links: the gradient all-reduce (0.59 s) dwarfs the work.
    cluster = make_cluster(gpus_per_node=1, nodes=2, network_gbps=1.0)
    layout = lay(dp=2, num_microbatches=4)
    t_bwd = float(layer_compute_on(_dp_model(make_model, True), cluster.gpu, layout).bwd_s[0])
    # all-reduce of 4 B fp32 gradients over 2 ranks at 1 x 0.8 GB/s: 2 * 1/2 * 4P / 0.8e9, NCCL's ring
    # Simple over 2 nodes of one rank: 1.4 x (8.4 + 2 x 14) = 50.96 us (tuning.cc)
    raw = 4 * DP_PARAMS / 0.8e9 + 50.96e-6
    assert raw == approx(0.59040744, rel=1e-9)
    exposed_off = step_time(job_context(_dp_model(make_model, False), cluster, layout)).dp_comm[0]
    exposed_on = step_time(job_context(_dp_model(make_model, True), cluster, layout)).dp_comm[0]
    assert exposed_off == approx(raw, rel=REL)
    # overlap window (zero 0): a gradient all-reduce can only hide behind the backward of the last
    # micro-batch, on the 8 layers of the rank
    assert exposed_on == approx(raw - 8 * t_bwd, rel=REL)
    assert exposed_on < exposed_off


def test_dp_overlap_keeps_a_floor(make_model, make_cluster):
    # Inside one node (100 GB/s) the all-reduce (4.7 ms) is shorter than the window: 10 % stays exposed.
    cluster = make_cluster()
    layout = lay(dp=2, num_microbatches=4)
    t_bwd = float(layer_compute_on(_dp_model(make_model, True), cluster.gpu, layout).bwd_s[0])
    raw = 4 * DP_PARAMS / 100e9 + 15.2e-6  # ring Simple in one node: 8.4 + 2 x 3.4 us
    assert raw < 8 * t_bwd
    assert step_time(job_context(_dp_model(make_model, True), cluster, layout)).dp_comm[0] == approx(0.1 * raw, rel=REL)


def test_zero2_overlaps_with_every_micro_batch(make_model, make_cluster):
    cluster = make_cluster(gpus_per_node=1, nodes=2, network_gbps=1.0)
    layout = lay(dp=2, num_microbatches=4, zero=2)
    t_layer, _ = unit_times(_dp_model(make_model, True), cluster.gpu, layout)
    # a gradient reduce-scatter per micro-batch (4 x) + one bf16 parameter all-gather, 0.8 GB/s, each
    # a ring Simple over 2 nodes: 8.4 + 14 us
    rs = 1 / 2 * 4 * DP_PARAMS / 0.8e9 + 22.4e-6
    ag = 1 / 2 * 2 * DP_PARAMS / 0.8e9 + 22.4e-6
    raw = 4 * rs + ag
    times = step_time(job_context(_dp_model(make_model, True), cluster, layout))
    # window: all 4 micro-batches' forward + backward
    assert times.dp_comm[0] == approx(max(raw - 4 * 8 * t_layer, 0.1 * raw), rel=REL)
    # optimizer states sharded over dp = 2: Adam touches half the parameters
    assert times.optimizer[0] == approx(ADAM_BYTES_PER_PARAM * DP_PARAMS / 2 / 500e9, rel=REL)


def test_zero1_reduced_after_the_backward_hides_nothing(make_model, make_cluster):
    # nanotron's ZeRO-1 (zero1_dp_overlap false): no DDP hooks, one reduction after the backward. The
    # 1 GB/s case above at zero 1: a reduce-scatter of fp32 gradients and an all-gather of bf16 weights,
    # each a ring Simple over 2 nodes (8.4 + 14 us), all of it exposed; with the overlap (the default)
    # it hides behind one stage's forward and backward (8 layers, Megatron's distributed optimizer).
    cluster = make_cluster(gpus_per_node=1, nodes=2, network_gbps=1.0)
    layout = lay(dp=2, num_microbatches=4, zero=1)
    rs = 1 / 2 * 4 * DP_PARAMS / 0.8e9 + 22.4e-6
    ag = 1 / 2 * 2 * DP_PARAMS / 0.8e9 + 22.4e-6
    after = make_model(training=dict(global_batch=8, dp_comm_overlap=True, stack=dict(TOY_STACK, zero1_dp_overlap=False)))
    assert step_time(job_context(after, cluster, layout)).dp_comm[0] == approx(rs + ag, rel=REL)
    t_layer, _ = unit_times(_dp_model(make_model, True), cluster.gpu, layout)
    hooked = step_time(job_context(_dp_model(make_model, True), cluster, layout)).dp_comm[0]
    assert hooked == approx(rs + ag - 8 * t_layer, rel=REL)
    # ZeRO-0 rows of the same stack keep their overlap: the setting is ZeRO-1's
    zero0 = lay(dp=2, num_microbatches=4)
    assert step_time(job_context(after, cluster, zero0)).dp_comm[0] == approx(
        step_time(job_context(_dp_model(make_model, True), cluster, zero0)).dp_comm[0], rel=REL)


# --- MoE all-to-all overlap (training.moe_a2a_overlap, combined 1F1B) ------------------------------

def _lc(fwd, bwd, rec=0.0):
    return LayerCompute(np.array([fwd]), np.array([bwd]), np.array([rec]), np.array([0.0]))


def test_a2a_overlap_hides_behind_the_other_micro_batchs_compute():
    lc = _lc(1e-3, 2e-3)  # forward 1 ms, backward 2 ms
    raw = np.array([1e-3])  # dispatch + combine, forward 0.5 ms and backward 0.5 ms
    # both halves shorter than the compute they hide behind: only the unpaired units show, the first
    # forward and the last backward of m = 4 micro-batches: 1 ms / 4
    assert ep_exposed_s(lay(num_microbatches=4), lc, raw)[0] == approx(1e-3 / 4, rel=REL)
    # one micro-batch: nothing to pair with, all of it shows
    assert ep_exposed_s(lay(num_microbatches=1), lc, raw)[0] == approx(1e-3, rel=REL)
    # many micro-batches: the exposed part goes to 0
    assert ep_exposed_s(lay(num_microbatches=1_000_000), lc, raw)[0] == approx(0.0, abs=1e-9)
    # a2a 4 ms: the forward's 2 ms hide behind the 2 ms backward, the backward's 2 ms show 1 ms past the
    # 1 ms forward; m = 4: 4 ms / 4 + 3/4 x 1 ms = 1.75 ms
    long = np.array([4e-3])
    assert ep_exposed_s(lay(num_microbatches=4), lc, long)[0] == approx(4e-3 / 4 + 3 / 4 * 1e-3, rel=REL)
    # selective recompute runs in the backward: the forward's a2a hides behind it too (2 ms - 1.5 ms - 1 ms < 0)
    assert ep_exposed_s(lay(num_microbatches=4), _lc(1e-3, 1.5e-3, 1e-3), long)[0] == approx(
        4e-3 / 4 + 3 / 4 * (0 + 1e-3), rel=REL)


def test_a2a_overlap_hides_only_its_stated_share():
    # hidden 0.37 (megatron-core's moe_a2a_overlap_hidden): a2a 1 ms, halves of 0.5 ms behind a 2 ms backward
    # and a 1 ms forward, each could hide whole; 0.37 of them does: paired 1 - 0.37 x (0.5 + 0.5) = 0.63 ms;
    # m = 4: 1 ms / 4 + 3/4 x 0.63 ms = 0.7225 ms
    lc, raw = _lc(1e-3, 2e-3), np.array([1e-3])
    assert ep_exposed_s(lay(num_microbatches=4), lc, raw, hidden=0.37)[0] == approx(0.25e-3 + 0.75 * 0.63e-3, rel=REL)
    # a2a 4 ms: the forward's 2 ms could hide behind 2 ms, the backward's 2 ms behind 1 ms of forward:
    # paired 4 - 0.37 x (2 + 1) = 2.89 ms; m = 4: 1 ms + 3/4 x 2.89 ms = 3.1675 ms
    assert ep_exposed_s(lay(num_microbatches=4), lc, np.array([4e-3]), hidden=0.37)[0] == approx(
        1e-3 + 0.75 * 2.89e-3, rel=REL)
    # nothing hidden: all of it shows, as without the overlap
    assert ep_exposed_s(lay(num_microbatches=4), lc, raw, hidden=0.0)[0] == approx(1e-3, rel=REL)


def test_a2a_overlap_with_a_pipeline_and_where_megatron_refuses_it():
    lc, raw = _lc(1e-3, 2e-3), np.array([4e-3])
    paired = 1e-3  # as above
    # pp 2, vpp 2, m 4: on average v p = 4 of a rank's m v = 8 units are unpaired, p / m = 1/2
    assert ep_exposed_s(lay(pp=2, vpp=2, num_microbatches=4), lc, raw)[0] == approx(0.5 * 4e-3 + 0.5 * paired, rel=REL)
    # pp 2 without virtual stages, or full recomputation: Megatron asserts, nothing hides
    assert ep_exposed_s(lay(pp=2, num_microbatches=4), lc, raw)[0] == approx(4e-3, rel=REL)
    assert ep_exposed_s(lay(num_microbatches=4, recompute="full"), lc, raw)[0] == approx(4e-3, rel=REL)


def test_a2a_overlap_in_the_step(make_model, make_cluster):
    moe = dict(layers=2, hidden=64, heads=4, ffn_act="swiglu", vocab=100, seq_len=64,
               moe=dict(experts=8, top_k=2, expert_ffn_hidden=32))
    plain = make_model(**moe)
    hidden = make_model(**moe, training=dict(moe_a2a_overlap=True))
    cluster = make_cluster()
    one = lay(dp=8, ep=8, num_microbatches=1)
    # one micro-batch: the same step
    assert step_time(job_context(hidden, cluster, one)).total[0] == step_time(job_context(plain, cluster, one)).total[0]
    many = lay(dp=1, ep=1, num_microbatches=8)
    ep8 = lay(dp=8, ep=8, num_microbatches=8)
    # the exposed EP of the breakdown is what kind_times charges: 8 micro-batches x 2 MoE layers
    kinds = {k.moe: k for k in job_context(hidden, cluster, ep8).kinds}
    raw = {k.moe: k for k in job_context(plain, cluster, ep8).kinds}
    expected = ep_exposed_s(ep8, raw[True].lc, raw[True].ep)
    assert kinds[True].ep[0] == approx(expected[0], rel=REL) and kinds[True].ep[0] < raw[True].ep[0]
    assert step_time(job_context(hidden, cluster, ep8)).ep_comm[0] == approx(8 * 2 * expected[0], rel=REL)
    assert step_time(job_context(hidden, cluster, many)).ep_comm[0] == 0.0  # ep 1: no all-to-all to hide


def test_a2a_overlap_hides_its_share_only_where_the_moe_layer_syncs_the_host(make_model, make_cluster):
    from planner.costs.compute import moe_syncs_host
    from planner.costs.layer_times import kind_times

    moe = dict(layers=3, hidden=64, heads=4, ffn_act="swiglu", vocab=100, seq_len=64,
               moe=dict(experts=8, top_k=2, expert_ffn_hidden=32, dense_layers=1))
    stack = {**TOY_STACK, "moe_a2a_overlap_hidden": 0.37}
    cluster = make_cluster()
    layout = lay(dp=16, ep=16, num_microbatches=4)
    exposed = {}
    for graphs in ("none", "full_iteration"):
        model = make_model(**moe, training=dict(stack=stack, moe_a2a_overlap=True, cuda_graph_impl=graphs))
        # dropless without a full-iteration graph reads the tokens per expert on the host; with one, shapes are static
        assert moe_syncs_host(model) == (graphs == "none")
        plain = make_model(**moe, training=dict(stack=stack, cuda_graph_impl=graphs))
        raw = [k for k in kind_times(plain, cluster, plain.training.stack.for_gpu(cluster.gpu.name), layout) if k.moe][0]
        got = [k for k in kind_times(model, cluster, model.training.stack.for_gpu(cluster.gpu.name), layout) if k.moe][0]
        exposed[graphs] = (got.ep[0], ep_exposed_s(layout, raw.lc, raw.ep, hidden=0.37 if graphs == "none" else 1.0)[0])
    for got, expected in exposed.values():
        assert got == approx(expected, rel=REL)
    assert exposed["none"][0] > exposed["full_iteration"][0]
    # drop-and-pad is sync-free too
    assert not moe_syncs_host(make_model(**{**moe, "moe": {**moe["moe"], "capacity_factor": 1.0}}, training=dict(stack=stack)))
