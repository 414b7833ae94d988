"""Communication model (planner/costs/comm.py): alpha-beta collectives and group bandwidths.

Toy cluster (conftest): 8 GPUs per node, NVLink 200 GB/s x 0.5 = 100 GB/s achieved, network
10 GB/s per GPU x 0.8 = 8 GB/s achieved per NIC, 10 us latency per step.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from pytest import approx

from planner.costs.comm import (
    all_gather_s,
    all_reduce_s,
    dp_comm_s,
    group_bus_gbps,
    p2p_s,
    pp_p2p_s,
    reduce_scatter_s,
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


def test_ring_all_reduce():
    # ring: 2 (n-1)/n S / B + 2 (n-1) steps: 2 * 7/8 * 1e9 / 100e9 = 17.5 ms, + 14 x 10 us = 17.64 ms;
    # tree: 2 S / B + 2 ceil(log2 8) steps = 20 ms + 60 us: the ring wins
    assert all_reduce_s(1e9, 8, 100.0, LAT) == approx(0.0175 + 140e-6, rel=1e-12)
    # n = 6: 2 * 5/6 * 10 ms = 16.667 ms + 10 x 10 us
    assert all_reduce_s(1e9, 6, 100.0, LAT) == approx(2 * 5 / 6 * 0.01 + 100e-6, rel=1e-12)
    assert all_reduce_s(1e9, 1, 100.0, LAT) == 0.0  # nothing to reduce on one rank
    # vectorised over group sizes
    assert all_reduce_s(1e9, np.array([2, 4]), 100.0, LAT) == approx([0.01 + 20e-6, 0.015 + 60e-6], rel=1e-12)


def test_small_all_reduce_takes_the_tree_and_latency_grows_with_the_group():
    # 1 kB over 1024 ranks in 128 nodes at 100 GB/s: wire 1e3 / 1e11 = 10 ns.
    # ring: 2 * 1023/1024 * 10 ns + 2 * 1023 steps * 10 us = 20.46 ms;
    # tree: 2 * 10 ns + 2 * (7 chain steps + log2 128 = 7 tree steps) * 10 us = 280.02 us
    assert all_reduce_s(1e3, 1024, 100.0, LAT, LAT, 128) == approx(2e-8 + 280e-6, rel=1e-9)
    assert all_reduce_s(1e3, 1024, 100.0, LAT) == approx(2 * 1023 / 1024 * 1e-8 + 2 * 1023 * LAT, rel=1e-9)
    # reduce-scatter has only the ring: 1023/1024 * 10 ns + 1023 x 10 us
    assert reduce_scatter_s(1e3, 1024, 100.0, LAT) == approx(1023 / 1024 * 1e-8 + 1023e-5, rel=1e-9)


def test_ring_steps_between_domains_take_the_network_latency():
    # 16 ranks over 2 nodes: 14 NVLink steps of 1 us and 1 network step of 20 us per ring pass;
    # reduce-scatter of 1e9 B at 10 GB/s: 15/16 * 0.1 s + 14 us + 20 us
    got = reduce_scatter_s(1e9, 16, 10.0, 1e-6, 20e-6, 2)
    assert got == approx(15 / 16 * 0.1 + 34e-6, rel=1e-12)


def test_reduce_scatter_and_all_gather_move_half_an_all_reduce():
    # (n-1)/n S / B + (n-1) steps: 7/8 * 10 ms + 7 x 10 us = 8.82 ms
    assert reduce_scatter_s(1e9, 8, 100.0, LAT) == approx(0.00875 + 70e-6, rel=1e-12)
    assert all_gather_s(1e9, 8, 100.0, LAT) == approx(0.00875 + 70e-6, rel=1e-12)
    assert reduce_scatter_s(1e9, 1, 100.0, LAT) == 0.0
    # an all-reduce (on the ring) is a reduce-scatter plus an all-gather
    assert all_reduce_s(1e9, 8, 100.0, LAT) == approx(2 * reduce_scatter_s(1e9, 8, 100.0, LAT), rel=1e-12)


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
    # ring: 2 (n-1) = 6 steps (inside a node NCCL's tree is a chain of as many, with 2 S on the wire)
    ar = 2 * 3 / 4 * S / 100e9 + 2 * 3 * LAT  # 31.457 us + 60 us
    got = tp_comm_per_layer_s(cluster, h, s, lay(dp=1, tp=4, micro_batch=2))[0]
    assert got == approx(2 * ar, rel=1e-12)  # two all-reduces per layer forward (f and g)
    assert got == approx(182.91456e-6, rel=1e-9)
    # sequence parallelism: 2 x (all-gather + reduce-scatter): same bytes and the same latency
    sp = tp_comm_per_layer_s(cluster, h, s, lay(dp=1, tp=4, micro_batch=2, sequence_parallel=True))[0]
    assert sp == approx(2 * 2 * (3 / 4 * S / 100e9 + 3 * LAT), rel=1e-12)
    assert sp == approx(got, rel=1e-12)
    # tp 1: nothing
    assert tp_comm_per_layer_s(cluster, h, s, lay(dp=1, tp=1, micro_batch=2))[0] == 0.0


def test_tp16_leaves_nvlink(make_cluster):
    cluster = make_cluster()
    h, s = 1024, 512
    S = 2 * 1 * s * h
    # 16 ranks over 2 nodes: 8 NICs x 8 GB/s = 64 GB/s. Ring: 2 x 15 steps: 30.72 us + 300 us;
    # tree: 2 S / B + 2 x (7 chain steps + log2 2 = 1 step between nodes) = 32.77 us + 160 us: the tree
    expected = 2 * (2 * S / 64e9 + 2 * 8 * LAT)
    assert tp_comm_per_layer_s(cluster, h, s, lay(dp=1, tp=16, micro_batch=1))[0] == approx(expected, rel=1e-12)


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
    # (2-1)/2 * 1,048,576 / 100e9 + 1 step latency
    base = dict(dp=4, tp=2, pp=2, micro_batch=1, num_microbatches=4)
    send = 524_288 / 8e9 + LAT
    regather = 0.5 * 1_048_576 / 100e9 + LAT
    assert pp_p2p_s(cluster, h, s, lay(**base))[0] == approx(send + regather, rel=1e-12)
    # with sequence parallelism the tensor is already split: no re-gather
    assert pp_p2p_s(cluster, h, s, lay(**base, sequence_parallel=True))[0] == approx(send, rel=1e-12)


def test_pp_p2p_charges_the_cross_node_hop(make_cluster):
    cluster = make_cluster()
    h, s = 1024, 512
    got = pp_p2p_s(cluster, h, s, lay(dp=4, tp=1, pp=4, micro_batch=1, num_microbatches=4))[0]
    # every micro-batch crosses every boundary, so the slowest hop (network, 8 GB/s) bounds it
    assert got == approx(2 * s * h / 8e9 + LAT, rel=1e-12)


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_dp_comm_by_zero_stage(make_cluster, zero):
    cluster = make_cluster()
    P = 1e8  # parameters per GPU
    # dp 4 with stride tp = 2: ranks 0, 2, 4, 6 of one node -> NVLink, 100 GB/s
    layout = lay(dp=4, tp=2, micro_batch=1, num_microbatches=3, zero=zero)
    ar_grads = 2 * 3 / 4 * 4 * P / 100e9 + 2 * 3 * LAT  # fp32 gradients: 6 ms + 60 us (ring: 2 x 3 steps)
    rs_grads = 3 / 4 * 4 * P / 100e9 + 3 * LAT  # 3 ms + 30 us
    ag_weights = 3 / 4 * 2 * P / 100e9 + 3 * LAT  # bf16 weights: 1.5 ms + 30 us
    expected = {
        0: ar_grads,  # 6.06 ms
        1: rs_grads + ag_weights,  # distributed optimizer: 4.56 ms
        2: 3 * rs_grads + ag_weights,  # only gradient shards kept: a reduce-scatter per micro-batch
        3: 3 * (2 * ag_weights + rs_grads),  # per micro-batch: 3 x 6.09 ms
    }[zero]
    assert dp_comm_s(cluster, np.array([P]), layout)[0] == approx(expected, rel=1e-12)


def test_dp_comm_across_nodes(make_cluster):
    cluster = make_cluster()
    P = 1e8
    # dp 4 with stride tp = 8: one member per node -> one NIC at 8 GB/s
    layout = lay(dp=4, tp=8, micro_batch=1, num_microbatches=1)
    # ring: 2 x 3 network steps (75 ms + 60 us) beats the tree (2 x 4e8 / 8e9 = 100 ms + 2 x 2 steps)
    assert dp_comm_s(cluster, np.array([P]), layout)[0] == approx(2 * 3 / 4 * 4e8 / 8e9 + 6 * LAT, rel=1e-12)
    # dp 1: no data-parallel traffic
    assert dp_comm_s(cluster, np.array([P]), lay(dp=1, tp=8, micro_batch=1))[0] == 0.0


def test_bf16_grad_reduce_halves_the_gradient_bytes(make_cluster):
    cluster = make_cluster()
    P = 1e8
    # dp 4 over NVLink (100 GB/s), ZeRO 1: reduce-scatter of gradients + all-gather of 16-bit parameters
    layout = lay(dp=4, tp=2, micro_batch=1, num_microbatches=3, zero=1)
    ag_weights = 3 / 4 * 2 * P / 100e9 + 3 * LAT
    rs_fp32 = 3 / 4 * 4 * P / 100e9 + 3 * LAT  # 3 ms + 30 us
    rs_bf16 = 3 / 4 * 2 * P / 100e9 + 3 * LAT  # half the bytes: 1.5 ms + 30 us
    assert rs_bf16 - 3 * LAT == (rs_fp32 - 3 * LAT) / 2
    bf16 = precision("bf16", grad_reduce_dtype="bf16")
    assert dp_comm_s(cluster, np.array([P]), layout, bf16)[0] == approx(rs_bf16 + ag_weights, rel=1e-12)
    assert dp_comm_s(cluster, np.array([P]), layout)[0] == approx(rs_fp32 + ag_weights, rel=1e-12)
    # ZeRO 0: a 2-byte all-reduce, 2 x 3/4 x 2 P / 100 GB/s + 2 x 3 steps
    plain = lay(dp=4, tp=2, micro_batch=1, num_microbatches=3, zero=0)
    assert dp_comm_s(cluster, np.array([P]), plain, bf16)[0] == approx(2 * 3 / 4 * 2 * P / 100e9 + 6 * LAT, rel=1e-12)


def test_fp8_param_gather_moves_one_byte_and_mxfp8_two(make_cluster):
    cluster = make_cluster()
    P = 1e8
    layout = lay(dp=4, tp=2, micro_batch=1, num_microbatches=1, zero=1)
    rs = 3 / 4 * 4 * P / 100e9 + 3 * LAT
    fp8 = precision("fp8", fp8_param_gather=True)
    mx = precision("mxfp8", fp8_param_gather=True)
    # per-tensor FP8 gathers 1 byte per parameter; MXFP8 is gathered in BF16, 2 bytes (Megatron-Core)
    assert dp_comm_s(cluster, np.array([P]), layout, fp8)[0] == approx(rs + 3 / 4 * 1 * P / 100e9 + 3 * LAT, rel=1e-12)
    assert dp_comm_s(cluster, np.array([P]), layout, mx)[0] == approx(rs + 3 / 4 * 2 * P / 100e9 + 3 * LAT, rel=1e-12)


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
    31 other GPUs of the group over NVLink at 900 GB/s x the preset's NVLink efficiency (0.7 as
    fitted); none over the network. Each
    all-to-all also pays the NVLink step latency (2 us); dispatch and combine, forward and backward."""
    from planner.costs.comm import ep_comm_per_layer_s
    from planner.specs.layers import layer_kinds
    from planner.specs.loading import load_cluster, load_model

    model, rack = load_model("deepseek-v3"), load_cluster("dgx-gb200-nvl72-1152")
    moe = layer_kinds(model)[-1]
    lay = single_layout(dp=32, tp=1, pp=8, ep=32, micro_batch=1, num_microbatches=480)
    assert rack.node.nvlink_gbps == 900
    a2a = 469_762_048 * 31 / 32 / (900e9 * rack.gpu.efficiency.nvlink) + 2e-6
    assert ep_comm_per_layer_s(rack, model, lay, moe)[0] == approx(2 * 2 * a2a, rel=1e-12)
    whole = rack.model_copy(update={"node": rack.node.model_copy(update={"nvlink_segment_gpus": None})})
    assert ep_comm_per_layer_s(whole, model, lay, moe)[0] > 2 * ep_comm_per_layer_s(rack, model, lay, moe)[0]
