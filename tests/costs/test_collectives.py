"""Collectives as NCCL's tuner prices them (planner/costs/collectives.py; NCCL src/graph/tuning.cc).

Latencies [us] from tuning.cc's tables: base ring (LL 6.6, LL128 14, Simple 8.4), tree (6.8, 14, 8.4),
PAT 8; a NVLink step ring (0.6, 1.9, 3.4), tree (0.6, 1.25, 4.0), NVLS 25; a network step ring
(2.7, 4.0, 14), tree (5.0, 8.5, 14), NVLS tree 20.9, PAT 14; at least 1 us (Simple: 3 us) an
NVLink step once the ring leaves the node. Bandwidths: LL 0.5 x the bus (at most 39 GB/s on 2
nodes, 20.4 on more), LL128 0.92 x, the tree 0.92 x (LL / 3.8, LL128 x 7/9 on one node), PAT 0.75 x.
"""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from pytest import approx

from planner.costs.collectives import (
    LL,
    Links,
    all_gather_s,
    all_reduce_s,
    nvls_latency_s,
    reduce_scatter_s,
    ring_latency_s,
    tree_latency_s,
)
from planner.costs.comm import group_links
from planner.layout.space import single_layout
from planner.specs.loading import load_cluster

US = 1e-6


def test_ring_all_reduce_in_one_node_takes_simple():
    # 1 GB over 8 ranks at 100 GB/s. Ring Simple: 8.4 + 2 x 7 steps x 3.4 = 56 us + 2 x 7/8 x 10 ms
    # = 17.556 ms. LL128: 14 + 14 x 1.9 = 40.6 us + 17.5 / 0.92 ms = 19.06 ms; tree Simple: 8.4 +
    # 2 x 7 x 4.0 = 64.4 us + 2 x 10 ms / 0.92 = 21.8 ms; LL: 35 ms on the wire.
    got = all_reduce_s(1e9, 8, Links(bus_gbps=100.0))
    assert got == approx(56 * US + 0.0175, rel=1e-12)


def test_tiny_all_reduce_over_many_nodes_takes_the_tree_with_ll():
    # 1 kB over 1,024 ranks, 8 in each of 128 nodes, bus 64 GB/s.
    # tree LL: 6.8 + 2 x (7 NVLink steps x 0.6 + log2 128 = 7 network steps x 5.0) = 85.2 us, and
    # 2 x 1 kB at 0.92 x 64 / 3.8 = 15.49 GB/s (under LL's 20.4 cap): 0.129 us.
    # ring LL: 6.6 + (2046 - 254) x 1.0 + 254 x 2.7 = 2,484.4 us: the ring's latency grows with n.
    links = Links(bus_gbps=64.0, nodes=128)
    tree = (6.8 + 2 * (7 * 0.6 + 7 * 5.0)) * US + 2e3 / (0.92 * 64 / 3.8 * 1e9)
    assert all_reduce_s(1e3, 1024, links) == approx(tree, rel=1e-9)
    assert ring_latency_s("all_reduce", LL, 1024, 128) == approx((6.6 + 1792 * 1.0 + 254 * 2.7) * US)


def test_ring_reduce_scatter_over_two_nodes():
    # 1 GB over 16 ranks in 2 nodes at 10 GB/s. Simple: 8.4 + 14 NVLink steps x max(3.4, 3 x 1.0) +
    # 1 network step x 14 = 70 us, + 15/16 x 100 ms. LL128 is 0.92 x slower on the wire.
    got = reduce_scatter_s(1e9, 16, Links(bus_gbps=10.0, nodes=2))
    assert got == approx(70 * US + 15 / 16 * 0.1, rel=1e-12)
    assert all_gather_s(1e9, 16, Links(bus_gbps=10.0, nodes=2)) == got


def test_pat_gathers_over_one_rank_a_node_in_log_steps():
    # 64 kB over 64 ranks, one a node (64 nodes), bus 8 GB/s.
    # PAT: 8 + log2 64 = 6 x 14 / 3.5 + 64 x 2.8 = 211.2 us, + 64 kB / (0.75 x 8 GB/s) = 10.667 us.
    # ring LL (one rank a node: the tree's network step, 5.0): 6.6 + 63 x 5.0 = 321.6 us + 15.75 us.
    got = all_gather_s(64e3, 64, Links(bus_gbps=8.0, nodes=64))
    assert got == approx(211.2 * US + 64e3 / 6e9, rel=1e-12)
    assert got < (6.6 + 63 * 5.0) * US + 63 / 64 * 64e3 / 4e9
    # with two ranks a node PAT is off (tuning.cc: nNodes != nRanks) and the ring's own network step
    # (LL 2.7 us) applies: 6.6 + 32 NVLink steps x 1.0 + 31 x 2.7 = 122.3 us, + 15.75 us on the wire
    two = all_gather_s(64e3, 64, Links(bus_gbps=8.0, nodes=32))
    assert two == approx(122.3 * US + 63 / 64 * 64e3 / 4e9, rel=1e-12)


def test_nvls_all_reduce_inside_an_nvswitch_node():
    # 64 MB over 8 ranks, bus 100 GB/s, NVLS at 0.85 x 100 = 85 GB/s, doubled (reduce and multicast
    # pipelined): 25 us + 2 x 7/8 x 64 MB / 170 GB/s = 658.8 us -> 683.8 us. Ring Simple: 56 us +
    # 1,120 us. Without NVLink SHARP the ring.
    links = Links(bus_gbps=100.0, nvls_gbps=85.0)
    assert all_reduce_s(64e6, 8, links) == approx(25 * US + 112e6 / 170e9, rel=1e-12)
    assert all_reduce_s(64e6, 8, Links(bus_gbps=100.0)) == approx(56 * US + 112e6 / 100e9, rel=1e-12)


def test_nvls_tree_across_nodes_has_log_latency():
    # 64 MB over 32 ranks, 8 in each of 4 nodes; ring bus and NICs 64 GB/s, NVLS 85 GB/s.
    # NVLS tree: min(2 x 85, 64) = 64 GB/s, 25 + 2 x log2 4 x 20.9 = 108.6 us: 1.9375 ms + 108.6 us.
    # Ring Simple: 1.4 x (8.4 + 56 x 3.4 + 6 x 14) = 395.92 us on the same wire time.
    links = Links(bus_gbps=64.0, nodes=4, inter_gbps=64.0, nvls_gbps=85.0)
    wire = 2 * 31 / 32 * 64e6 / 64e9
    assert all_reduce_s(64e6, 32, links) == approx(wire + 108.6 * US, rel=1e-12)
    assert ring_latency_s("all_reduce", 2, 32, 4) == approx(1.4 * (8.4 + 56 * 3.4 + 6 * 14) * US)
    assert nvls_latency_s(32, 4) == approx(108.6 * US)


def test_one_rank_costs_nothing():
    assert all_reduce_s(1e9, 1, Links(bus_gbps=1.0)) == 0.0
    assert reduce_scatter_s(1e9, 1, Links(bus_gbps=1.0)) == 0.0


CLUSTERS = {name: load_cluster(name) for name in ("dgx-a100-1024", "dgx-h100-1024", "dgx-gb200-nvl72-1152")}


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(CLUSTERS)), st.sampled_from([1, 2, 8, 64]),
       st.integers(1, 9), st.integers(1, 9), st.floats(1.0, 1e10),
       st.sampled_from(["all_reduce", "reduce_scatter"]))
def test_more_ranks_never_make_a_collective_of_the_same_bytes_faster(name, stride, a, b, nbytes, coll):
    cluster = CLUSTERS[name]
    small, large = 2 ** min(a, b), 2 ** max(a, b)
    job = single_layout(dp=1024, tp=1, pp=1, micro_batch=1, num_microbatches=1)

    def time(n):
        links = group_links(cluster, np.array([n]), np.array([stride]), job)
        f = all_reduce_s if coll == "all_reduce" else reduce_scatter_s
        return f(nbytes, n, links)[0]

    assert time(large) >= time(small) * (1 - 1e-12)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(sorted(CLUSTERS)), st.sampled_from([1, 8]), st.integers(1, 10))
def test_a_tiny_collective_costs_at_least_its_algorithms_latency(name, stride, k):
    cluster, n = CLUSTERS[name], 2 ** k
    job = single_layout(dp=1024, tp=1, pp=1, micro_batch=1, num_microbatches=1)
    links = group_links(cluster, np.array([n]), np.array([stride]), job)
    nodes, hop = links.nodes[0], links.hop_s[0]  # hop: the fat tree's switches a network step crosses
    # the cheapest latency NCCL's table offers an all-reduce of this group: ring or tree with LL
    # or NVLS on NVLink SHARP (25 us in one domain), never below the LL ring's base
    floor = min(ring_latency_s("all_reduce", LL, n, nodes, hop), tree_latency_s(LL, n, nodes, hop),
                nvls_latency_s(n, nodes, hop) if cluster.gpu.efficiency.nvls > 0 else np.inf)
    got = all_reduce_s(1.0, n, links)[0]
    assert got >= floor * (1 - 1e-12)
    assert got >= 6.6 * US
    assert got == approx(floor, rel=1e-3)  # a byte adds next to nothing
