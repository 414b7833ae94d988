"""Communication model (planner/costs/comm.py): group bandwidths, placement, and the collectives
of each parallelism (each priced by planner/costs/collectives.py, NCCL's tuning model: see
tests/costs/test_collectives.py for its constants).

Toy cluster (conftest): 8 GPUs per node, NVLink 200 GB/s x 0.5 = 100 GB/s achieved, network
10 GB/s per GPU x 0.8 = 8 GB/s achieved per NIC, 10 us a point-to-point step, no NVLink SHARP.
NCCL's latencies [us]: a ring's base LL 6.6 / LL128 14 / Simple 8.4, an NVLink step 0.6 / 1.9 / 3.4;
the tree's base 6.8 / 14 / 8.4, NVLink step 0.6 / 1.25 / 4.0, network step 5.0 / 8.5 / 14.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from pytest import approx

from planner.costs.comm import (
    dp_comm_s,
    group_bus_gbps,
    job_domain,
    p2p_s,
    pp_p2p_s,
    remote_domains_per_token,
    sized_bus_gbps,
    tp_comm_per_layer_s,
)
from planner.specs.precision import precision
from planner.layout.space import single_layout

LAT = 10e-6


def lay(**kw):
    kw.setdefault("pp", 1)
    kw.setdefault("num_microbatches", 1)
    return single_layout(**kw)


def test_p2p():
    # 1e8 B at 50 GB/s = 2 ms, + one latency
    assert p2p_s(1e8, 50.0, LAT) == approx(0.002 + 10e-6, rel=1e-12)


def test_message_size_half_bandwidth():
    # Hockney: b S / (S + S_half); a 1 MB message at S_half = 1 MB gets half the bus bandwidth
    assert sized_bus_gbps(100.0, 1e6, 1.0) == approx(50.0)
    assert sized_bus_gbps(100.0, 3e6, 1.0) == approx(75.0)
    assert sized_bus_gbps(100.0, 1e6, 0.0) == 100.0  # off by default


@pytest.mark.parametrize(
    "size, stride, expected",
    [
        (8, 1, 100.0),  # tp 8 in an 8-GPU node: NVLink
        (4, 2, 100.0),  # 4 ranks 2 apart span ranks 0..7: still one node
        (2, 4, 100.0),
        (16, 1, 64.0),  # tp 16 leaves the node: 8 members per node share 8 NICs: 8 x 8 = 64 GB/s
        (32, 1, 64.0),  # four nodes, still 8 members (and NICs) per node
        (8, 2, 32.0),  # 4 members per node -> 4 NICs: 32 GB/s
        (4, 8, 8.0),  # dp group with stride 8: one member per node -> one NIC: 8 GB/s
        (64, 8, 8.0),
    ],
)
def test_group_bus_gbps(make_cluster, size, stride, expected):
    cluster = make_cluster()
    assert group_bus_gbps(cluster, np.array([size]), np.array([stride]))[0] == approx(expected)


def test_group_bus_gbps_is_capped_by_nvlink(make_cluster, toy_gpu_data):
    # NVLink efficiency 0.7, network 0.8: NVLink 300 x 0.7 = 210 GB/s; 8 x 25 GB/s NICs x 0.8 = 160 GB/s;
    # one member per node (stride 8): 25 x 0.8 = 20 GB/s
    gpu = toy_gpu_data(efficiency=dict(nvlink=0.7, network=0.8))
    cluster = make_cluster(gpu=gpu, nvlink_gbps=300.0, network_gbps=25.0)
    got = group_bus_gbps(cluster, np.array([8, 16, 64]), np.array([1, 1, 8]))
    assert got == approx([210.0, 160.0, 20.0])
    # a fast network never beats NVLink: 8 x 100 x 0.8 = 640 > 210
    fast = make_cluster(gpu=gpu, nvlink_gbps=300.0, network_gbps=100.0)
    assert group_bus_gbps(fast, np.array([16]), np.array([1]))[0] == approx(210.0)


def test_oversubscription_slows_groups_that_leave_a_leaf(make_cluster, toy_gpu_data):
    # radix 8: a rail-optimised leaf reaches 8/2 = 4 nodes. dp 8 with stride 8 spans 8 nodes, one
    # member each: 10 GB/s x 0.8 = 8 GB/s, / oversubscription 2 = 4 GB/s; dp 4 stays under one leaf.
    gpu = toy_gpu_data()
    cluster = make_cluster(gpu=gpu, nodes=8, network=dict(switch_radix=8, oversubscription=2.0, switch_latency_us=0.0))
    got = group_bus_gbps(cluster, np.array([8, 4]), np.array([8, 8]))
    assert got == approx([4.0, 8.0])


def test_misaligned_tp_group_leaves_the_node(make_cluster):
    cluster = make_cluster()
    # tp = 6 (possible e.g. for 96 heads on 3,072 GPUs): the second group holds ranks 6..11 ->
    # 2 members in node 0 and 4 in node 1; the ring is bounded by the 2 NICs: 2 x 8 = 16 GB/s
    assert group_bus_gbps(cluster, np.array([6]), np.array([1]))[0] == approx(16.0)


def test_tp_comm_per_layer_by_hand(make_cluster):
    cluster = make_cluster()
    h, s = 1024, 512
    # S = 2 b s h = 2 * 2 * 512 * 1024 = 2,097,152 B; tp 4 on NVLink (100 GB/s)
    S = 2 * 2 * s * h
    # all-reduce, ring LL128: 14 + 2 x 3 steps x 1.9 = 25.4 us, + 2 x 3/4 x S / (0.92 x 100 GB/s) =
    # 34.193 us -> 59.593 us; ring Simple 28.8 + 31.457 = 60.257 us; the tree (a chain in one node)
    # 32.4 + 45.6 us
    ar = 25.4e-6 + 2 * 3 / 4 * S / (0.92 * 100e9)
    got = tp_comm_per_layer_s(cluster, h, s, lay(dp=1, tp=4, micro_batch=2))[0]
    assert got == approx(2 * ar, rel=1e-12)  # two all-reduces per layer forward (f and g)
    assert got == approx(119.186e-6, rel=1e-4)
    # sequence parallelism: 2 x (all-gather + reduce-scatter) of the same bytes; each a ring Simple
    # 8.4 + 3 x 3.4 = 18.6 us + 3/4 S / 100 GB/s = 15.729 us: the two latencies exceed one all-reduce's
    rs = 18.6e-6 + 3 / 4 * S / 100e9
    sp = tp_comm_per_layer_s(cluster, h, s, lay(dp=1, tp=4, micro_batch=2, sequence_parallel=True))[0]
    assert sp == approx(2 * 2 * rs, rel=1e-12)
    assert sp > got
    # tp 1: nothing
    assert tp_comm_per_layer_s(cluster, h, s, lay(dp=1, tp=1, micro_batch=2))[0] == 0.0


def test_tp16_leaves_nvlink(make_cluster):
    cluster = make_cluster()
    h, s = 1024, 512
    S = 2 * 1 * s * h
    # 16 ranks over 2 nodes: 8 NICs x 8 GB/s = 64 GB/s. Tree LL128: 14 + 2 x (7 NVLink steps x 1.25
    # + log2 2 = 1 network step x 8.5) = 48.5 us, + 2 S / (0.92 x 64 x 120/128 GB/s) = 37.99 us;
    # ring LL: 6.6 + 28 x 1.0 + 2 x 2.7 = 40 us + 2 x 15/16 x S / 32 GB/s = 61.44 us; ring Simple
    # 1.4 x (8.4 + 28 x 3.4 + 2 x 14) = 184.24 us + 30.72 us
    tree = 48.5e-6 + 2 * S / (0.92 * 64e9 * 120 / 128)
    assert tp_comm_per_layer_s(cluster, h, s, lay(dp=1, tp=16, micro_batch=1))[0] == approx(2 * tree, rel=1e-12)


def test_pp_p2p_inside_a_node(make_cluster):
    cluster = make_cluster()
    h, s = 1024, 512
    # tp 1, dp 1: adjacent stages are adjacent ranks in one node: 2 b s h = 1,048,576 B at 100 GB/s
    got = pp_p2p_s(cluster, h, s, lay(dp=1, tp=1, pp=4, micro_batch=1, num_microbatches=4))[0]
    assert got == approx(2 * s * h / 100e9 + LAT, rel=1e-12)


def test_pp_p2p_across_nodes_with_scatter_gather(make_cluster):
    cluster = make_cluster()
    h, s = 1024, 512
    # tp 2 x dp 4 = 8 ranks per stage: the next stage is in the next node. Each GPU sends 1/tp of
    # the tensor: 2 * 512 * 1024 / 2 = 524,288 B at 8 GB/s, then all-gathers it over tp on NVLink:
    # (2-1)/2 * 1,048,576 / 100e9 on a ring Simple: 8.4 + 3.4 us (LL: 7.2 us + 10.49 us)
    base = dict(dp=4, tp=2, pp=2, micro_batch=1, num_microbatches=4)
    send = 524_288 / 8e9 + LAT
    regather = 0.5 * 1_048_576 / 100e9 + 11.8e-6
    assert pp_p2p_s(cluster, h, s, lay(**base))[0] == approx(send + regather, rel=1e-12)
    # with sequence parallelism the tensor is already split: no re-gather
    assert pp_p2p_s(cluster, h, s, lay(**base, sequence_parallel=True))[0] == approx(send, rel=1e-12)


def test_pp_p2p_charges_the_cross_node_hop(make_cluster):
    cluster = make_cluster()
    h, s = 1024, 512
    got = pp_p2p_s(cluster, h, s, lay(dp=4, tp=1, pp=4, micro_batch=1, num_microbatches=4))[0]
    # every micro-batch crosses every boundary, so the slowest hop (network, 8 GB/s) bounds it
    assert got == approx(2 * s * h / 8e9 + LAT, rel=1e-12)


# dp 4 on NVLink at 100 GB/s, rings Simple: all-reduce 8.4 + 6 x 3.4 = 28.8 us, reduce-scatter and
# all-gather 8.4 + 3 x 3.4 = 18.6 us of latency
AR_LAT, RS_LAT = 28.8e-6, 18.6e-6


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_dp_comm_by_zero_stage(make_cluster, zero):
    cluster = make_cluster()
    P = 1e8  # parameters per GPU
    # dp 4 with stride tp = 2: ranks 0, 2, 4, 6 of one node -> NVLink, 100 GB/s
    layout = lay(dp=4, tp=2, micro_batch=1, num_microbatches=3, zero=zero)
    ar_grads = 2 * 3 / 4 * 4 * P / 100e9 + AR_LAT  # fp32 gradients: 6 ms + 28.8 us
    rs_grads = 3 / 4 * 4 * P / 100e9 + RS_LAT  # 3 ms + 18.6 us
    ag_weights = 3 / 4 * 2 * P / 100e9 + RS_LAT  # bf16 weights: 1.5 ms + 18.6 us
    expected = {
        0: ar_grads,
        1: rs_grads + ag_weights,  # distributed optimizer
        2: 3 * rs_grads + ag_weights,  # only gradient shards kept: a reduce-scatter per micro-batch
        3: 3 * (2 * ag_weights + rs_grads),  # per micro-batch
    }[zero]
    assert dp_comm_s(cluster, np.array([P]), layout)[0] == approx(expected, rel=1e-12)


def test_dp_comm_across_nodes(make_cluster):
    cluster = make_cluster()
    P = 1e8
    # dp 4 with stride tp = 8: one member per node -> one NIC at 8 GB/s. Ring Simple, every step between
    # nodes at the tree's network step (one rank a node): 1.4 x (8.4 + 6 x 14) = 129.36 us + 75 ms;
    # the tree: 8.4 + 2 x 2 x 14 = 64.4 us + 2 x 4e8 / (0.92 x 8 GB/s) = 108.7 ms
    assert dp_comm_s(cluster, np.array([P]), layout := lay(dp=4, tp=8, micro_batch=1, num_microbatches=1))[0] == approx(
        2 * 3 / 4 * 4e8 / 8e9 + 129.36e-6, rel=1e-12)
    assert layout.dp[0] == 4
    # dp 1: no data-parallel traffic
    assert dp_comm_s(cluster, np.array([P]), lay(dp=1, tp=8, micro_batch=1))[0] == 0.0


def test_bf16_grad_reduce_halves_the_gradient_bytes(make_cluster):
    cluster = make_cluster()
    P = 1e8
    # dp 4 over NVLink (100 GB/s), ZeRO 1: reduce-scatter of gradients + all-gather of 16-bit parameters
    layout = lay(dp=4, tp=2, micro_batch=1, num_microbatches=3, zero=1)
    ag_weights = 3 / 4 * 2 * P / 100e9 + RS_LAT
    rs_fp32 = 3 / 4 * 4 * P / 100e9 + RS_LAT  # 3 ms + 18.6 us
    rs_bf16 = 3 / 4 * 2 * P / 100e9 + RS_LAT  # half the bytes: 1.5 ms + 18.6 us
    bf16 = precision("bf16", grad_reduce_dtype="bf16")
    assert dp_comm_s(cluster, np.array([P]), layout, bf16)[0] == approx(rs_bf16 + ag_weights, rel=1e-12)
    assert dp_comm_s(cluster, np.array([P]), layout)[0] == approx(rs_fp32 + ag_weights, rel=1e-12)
    # ZeRO 0: a 2-byte all-reduce, 2 x 3/4 x 2 P / 100 GB/s + 28.8 us
    plain = lay(dp=4, tp=2, micro_batch=1, num_microbatches=3, zero=0)
    assert dp_comm_s(cluster, np.array([P]), plain, bf16)[0] == approx(2 * 3 / 4 * 2 * P / 100e9 + AR_LAT, rel=1e-12)


def test_fp8_param_gather_moves_one_byte_and_mxfp8_two(make_cluster):
    cluster = make_cluster()
    P = 1e8
    layout = lay(dp=4, tp=2, micro_batch=1, num_microbatches=1, zero=1)
    rs = 3 / 4 * 4 * P / 100e9 + RS_LAT
    fp8 = precision("fp8", fp8_param_gather=True)
    mx = precision("mxfp8", fp8_param_gather=True)
    # per-tensor FP8 gathers 1 byte per parameter; MXFP8 is gathered in BF16, 2 bytes (Megatron-Core)
    assert dp_comm_s(cluster, np.array([P]), layout, fp8)[0] == approx(rs + 3 / 4 * 1 * P / 100e9 + RS_LAT, rel=1e-12)
    assert dp_comm_s(cluster, np.array([P]), layout, mx)[0] == approx(rs + 3 / 4 * 2 * P / 100e9 + RS_LAT, rel=1e-12)


def test_remote_domains_per_token_by_hand():
    # E = 128 experts, top 8, the ep group over D = 2 domains of 64 experts: a domain holds none of a
    # token's 8 experts with probability C(64, 8) / C(128, 8); the one other domain is hit with 1 - that
    expected = 1 - math.comb(64, 8) / math.comb(128, 8)
    assert remote_domains_per_token(128, 8, np.array([16]), np.array([8]))[0] == approx(expected, rel=1e-12)
    # D = 4 domains of 32: 3 remote domains, each hit with 1 - C(96, 8) / C(128, 8)
    four = 3 * (1 - math.comb(96, 8) / math.comb(128, 8))
    assert remote_domains_per_token(128, 8, np.array([32]), np.array([8]))[0] == approx(four, rel=1e-12)
    # one domain: nothing remote; top 1: a token goes to one expert, remote with probability (D - 1) / D
    assert remote_domains_per_token(128, 8, np.array([8]), np.array([8]))[0] == 0.0
    assert remote_domains_per_token(128, 1, np.array([32]), np.array([8]))[0] == approx(3 / 4, rel=1e-12)
    # never more than the top_k copies alltoall sends to remote domains: 8 x (D - 1) / D
    assert four <= 8 * 3 / 4


def test_a_large_job_fills_64_gpus_of_an_nvl72_rack_so_ep_32_stays_on_nvlink():
    """Issue 29: on GB200 NVL72, a job of 128 GPUs or more takes 16 trays (64 GPUs) of each rack
    (Slurm --segment 16, NVIDIA's recommendation), so an ep 32 group of consecutive ranks sits in one
    rack; placed over all 72, every other group straddled two racks and its all-to-all crossed the
    network. DeepSeek-V3 (h 7168, top 8), one 4,096-token micro-batch per GPU, tp 1, 256 GPUs:
    s b top_k = 32,768 routed copies of 7,168 values of 2 B = 469,762,048 B; 31/32 of them go to the
    31 other GPUs of the group over NVLink at 900 GB/s x the preset's all-to-all NVLink efficiency
    (0.52, HybridEP's measured rate on GB200); none over the network. Each
    all-to-all also pays the NVLink step latency (2 us); dispatch and combine, forward and backward."""
    from planner.costs.comm import ep_comm_per_layer_s
    from planner.specs.layers import layer_kinds
    from planner.specs.loading import load_cluster, load_model

    model, rack = load_model("deepseek-v3"), load_cluster("dgx-gb200-nvl72-1152")
    moe = layer_kinds(model)[-1]
    lay = single_layout(dp=32, tp=1, pp=8, ep=32, micro_batch=1, num_microbatches=480)
    assert rack.node.nvlink_gbps == 900
    assert rack.gpu.efficiency.a2a_nvlink == 0.52
    a2a = 469_762_048 * 31 / 32 / (900e9 * 0.52) + 2e-6
    assert ep_comm_per_layer_s(rack, model, lay, moe)[0] == approx(2 * 2 * a2a, rel=1e-12)
    # Issue 37 item 4: written without a segment, the rack is filled as that advice would for this
    # layout (16 trays: 64 GPUs hold two ep 32 groups), so the price is the same, not a cliff; told
    # to fill all 72, the group of ranks 64-95 has 8 ranks in one rack and 24 in the next, and its
    # members with 8 peers on NVLink send 24/32 of their copies over their NIC: that group bounds the step
    whole = rack.model_copy(update={"node": rack.node.model_copy(update={"nvlink_segment_gpus": None})})
    assert ep_comm_per_layer_s(whole, model, lay, moe)[0] == ep_comm_per_layer_s(rack, model, lay, moe)[0]
    all72 = rack.model_copy(update={"node": rack.node.model_copy(update={"nvlink_segment_gpus": 72})})
    assert ep_comm_per_layer_s(all72, model, lay, moe)[0] > 2 * ep_comm_per_layer_s(rack, model, lay, moe)[0]


def _rack(segment=None):
    from planner.specs.loading import load_cluster

    rack = load_cluster("dgx-gb200-nvl72-1152")  # 16 racks of 72 GPUs, trays of 4
    return rack.model_copy(update={"node": rack.node.model_copy(update={"nvlink_segment_gpus": segment})})


@pytest.mark.parametrize("axes, gpus, expected", [
    # groups of 32 (tp 1, ep 32): lcm(32, a tray of 4) = 32, 72 // 32 = 2 groups: 64 GPUs a rack;
    # 256 GPUs then take 4 of the 16 racks
    (dict(dp=256, tp=1, ep=32), 256, 64),
    (dict(dp=64, tp=4, ep=16), 256, 64),  # lcm(tp 4, ep 16, tray 4) = 16: 4 groups, 64 GPUs
    (dict(dp=240, tp=1, ep=24), 240, 72),  # groups of 24 tile 72: the whole rack
    (dict(dp=128, tp=2, cp=3, ep=1), 768, 72),  # tp x cp = 6, lcm with a tray = 12: 72
    (dict(dp=1152, tp=1, ep=32), 1152, 72),  # 1,152 / 64 = 18 racks > 16: the racks filled whole
    (dict(dp=64, tp=1, ep=32), 64, 72),  # the job fits one rack
])
def test_default_placement_of_a_rack_cluster_by_hand(axes, gpus, expected):
    layout = lay(pp=1, micro_batch=1, **axes)
    assert layout.gpus[0] == gpus
    assert job_domain(_rack(), layout)[0] == expected
    assert job_domain(_rack(48), layout)[0] == (48 if gpus > 72 else 72)  # a stated segment is kept


def test_a_group_straddling_two_racks_is_bounded_by_its_smallest_piece():
    from planner.costs.comm import _placement

    # filled 72 a rack, groups of 32 start at 0, 32, 64, 96, ...: the one at 64 has 8 ranks in rack
    # 0 and 24 in rack 1 (gcd(32, 72) = 8 from a boundary); its 8 bound it: priced as 4 pieces of 8
    layout = lay(dp=256, tp=1, ep=32, pp=1, micro_batch=1)
    inside, per_domain, domains = _placement(_rack(72), np.array([32]), np.array([1]), layout)
    assert (inside[0], per_domain[0], domains[0]) == (False, 8, 4)
    # placed 64 a rack (the default for this layout), every group sits in one rack
    inside, per_domain, domains = _placement(_rack(), np.array([32]), np.array([1]), layout)
    assert (inside[0], domains[0]) == (True, 1)


def test_qwen3_235b_on_256_gb200s_has_no_cliff_without_a_segment():
    # Issue 37: written without nvlink_segment_gpus, ep 16-64 groups were priced as straddling two
    # racks: 56-82 s a step against 24 s with the 64-GPU segment. Now within 1.5 x (equal here).
    from planner.constraints import Limits
    from planner.search import search
    from planner.specs.loading import load_model

    model = load_model("qwen3-235b-a22b")
    for ep in (16, 32):
        seg = search(model, _rack(64), gpus=256, top_k=1, limits=Limits(fixed=dict(ep=ep))).best.step_time_s
        none = search(model, _rack(), gpus=256, top_k=1, limits=Limits(fixed=dict(ep=ep))).best.step_time_s
        assert none <= 1.5 * seg, (ep, none, seg)


def test_placement_says_how_a_rack_is_filled_and_which_groups_span_racks():
    from planner.costs.comm import placement

    # tp 4 x ep 32 x pp 4 on 128 GPUs (dp 8): lcm(tp 4, ep 32, tray 4) = 32, 72 // 32 = 2 groups, 64 a
    # rack (not stated). Groups, consecutive ranks tp innermost: tp 4 (span 4), ep 32 (span 32) and dp 8
    # x stride 4 (span 32) divide 64 and sit in one rack; pp 4 x stride 32 spans 128 > 64: two racks
    layout = lay(dp=8, tp=4, pp=4, ep=32, micro_batch=1)
    assert placement(_rack(), layout) == {"nvlink_domain_gpus": 72, "gpus_per_domain": 64, "stated": False,
                                          "split_groups": ["pp"]}
    # a job of 32 GPUs fits one rack: the whole domain, no group split; a stated segment is said as such
    small = lay(dp=32, tp=1, pp=1, micro_batch=1)
    assert placement(_rack(48), small) == {"nvlink_domain_gpus": 72, "gpus_per_domain": 72, "stated": True,
                                           "split_groups": []}


def test_placement_is_not_said_where_the_nvlink_domain_is_a_node(make_cluster):
    from planner.costs.comm import placement

    assert placement(make_cluster(), lay(dp=4, tp=2, pp=1, micro_batch=1)) is None
