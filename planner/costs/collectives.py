"""Collectives priced as NCCL's tuner prices them: every algorithm and protocol NCCL would consider
for the group, latency plus bytes over bandwidth, and the fastest taken.

Source: NCCL's tuning model, src/graph/tuning.cc (NVIDIA/nccl master, 2026-06, commit 5067397c):
`ncclTopoTuneModel` sets a latency and a bandwidth per (collective, algorithm, protocol) and
`ncclTopoGetAlgoTime` prices a call as latency + bytes / (1000 x bandwidth) [us, GB/s], the tuner
taking the cheapest. Bytes are the whole buffer S (for all-gather and reduce-scatter, the gathered
one: `ncclFuncMaxSendRecvCount`, src/include/enqueue.h). Bus bandwidth as nccl-tests defines it
(doc/PERFORMANCE.md): all-reduce moves 2 (n - 1) / n of S per rank, all-gather and reduce-scatter
(n - 1) / n, so busbw = algbw x those factors; the planner's link model gives the bus bandwidth of a
group's links (planner/costs/comm.py), this module turns it into each algorithm's time.

- ring (LL, LL128, Simple): 2 (n - 1) steps for all-reduce, n - 1 for all-gather / reduce-scatter;
  2 (nodes - 1) or nodes - 1 of them between nodes at the network's step latency, the rest at
  NVLink's (at least NCCL's per-step network overhead once the ring leaves the node);
- tree (all-reduce only): a chain inside the node and floor(log2 nodes) levels between, up and down,
  at half the bus bandwidth (algbw = busbw / 2: the reduce and the broadcast);
- NVLS (NVLink SHARP, nodes whose NVSwitches reduce and multicast: H100, B200, GB200 NVL72): one
  switch round trip inside one node; across nodes NCCL runs NVLS tree (all-reduce only: NVLS
  all-gather / reduce-scatter across nodes needs CollNet, off by default);
- PAT (all-gather / reduce-scatter with one GPU per node, NCCL >= 2.23): log2 latency between nodes
  plus a linear 2.8 us a rank, at 3/4 of the bus bandwidth.

"nodes" is NCCL's: hosts, i.e. the NVLink domains a group spans (a multi-node NVLink domain is one
clique to NCCL). Left out, as second order: the tree's correction factors for medium sizes, the
per-channel caps, LL's cap inside one node (87.7-282 GB/s), and the ring plateau's size condition
(the 1.4 x of a multi-node Simple ring all-reduce is always applied: it is the protocol of large
messages, and a condition on the size per rank would make more ranks cheaper).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from planner.units import GB, MB, US

LL, LL128, SIMPLE = 0, 1, 2
PROTOCOLS = (LL, LL128, SIMPLE)

# tuning.cc ncclTunerConstantsDefaults [us], per protocol (LL, LL128, Simple)
BASE_US = {"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4), "pat": (8.0, 8.0, 8.0)}  # baseLatencies
NVLINK_US = {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4), "nvls": 25.0, "pat": 4.0}  # hwLatencies NVLINK
NET_US = {"tree": (5.0, 8.5, 14.0), "ring": (2.7, 4.0, 14.0), "nvls_tree": 20.9, "pat": 14.0}  # hwLatencies NET
NET_OVERHEAD_US = 1.0  # getNetOverhead(): x86 Intel and the default; x3 for Simple
LL_MAX_GBPS = {2: 39.0, 3: 20.4}  # llMaxBws, x86 Intel row: 2 nodes, more than 2
RING_PLATEAU = 1.4  # "plateau effect of ring": multi-node Simple ring all-reduce on SM 80+
LL_BW, LL128_BW, TREE_BW, PAT_BW = 0.5, 0.92, 0.92, 0.75  # the busBw refinements of ncclTopoTuneModel
TREE_LL_BW = 1.0 / 3.8
TREE_LL128_BW = (7.0 / 9.0, 120.0 / 128.0)  # one node, several


@dataclass(frozen=True)
class Links:
    """A group's links, as its collectives see them (arrays over layouts, or scalars).

    bus_gbps: bus bandwidth of a ring over the group's links [GB/s]; inter_gbps: what its members'
    NICs carry between nodes (NVLS tree's inter-node bound) [GB/s]; nvls_gbps: NVLink SHARP's bus
    bandwidth (0: the node has none) [GB/s]; nodes: NVLink domains spanned (NCCL's nNodes);
    hop_s: switch hops a network step crosses (NCCL's latencyInter) [s]; p2p_s: one point-to-point
    step between members (the GPU preset's latency) [s]."""

    bus_gbps: np.ndarray | float
    nodes: np.ndarray | float = 1
    inter_gbps: np.ndarray | float = 0.0
    nvls_gbps: np.ndarray | float = 0.0
    hop_s: np.ndarray | float = 0.0
    p2p_s: np.ndarray | float = 0.0

    def sized(self, nbytes, half_mb: float) -> "Links":
        """Bandwidths reached by messages of `nbytes`: b S / (S + S_half) (Hockney 1991), the fitted
        shortfall of NCCL's pipelined protocols on small buffers beyond what the latencies hold."""
        if half_mb <= 0:
            return self
        f = nbytes / (nbytes + half_mb * MB)
        return replace(self, bus_gbps=self.bus_gbps * f, inter_gbps=self.inter_gbps * f, nvls_gbps=self.nvls_gbps * f)


def _log2i(x) -> np.ndarray:
    """NCCL's log2i: floor(log2 x)."""
    return np.floor(np.log2(np.maximum(x, 1)))


def _ll_cap(nodes) -> np.ndarray:
    return np.where(nodes <= 1, np.inf, np.where(nodes <= 2, LL_MAX_GBPS[2], LL_MAX_GBPS[3]))


def _net_step_us(algo: str, p: int, n, nodes, hop_us) -> np.ndarray:
    """A step between nodes: the network's hardware latency (the tree's with one rank a node), the
    switch hops once, twice for Simple (its flush)."""
    own = NET_US[algo][p] if isinstance(NET_US[algo], tuple) else NET_US[algo]
    lat = np.where(n == nodes, NET_US["tree"][p], own)
    return lat + hop_us * (2 if p == SIMPLE else 1)


def ring_latency_s(coll: str, p: int, n, nodes, hop_s=0.0) -> np.ndarray:
    """Latency of a ring [s]: base + (steps - network steps) x NVLink step + network steps x
    network step (tuning.cc, NCCL_ALGO_RING)."""
    f = 2 if coll == "all_reduce" else 1
    n, nodes = np.asarray(n, dtype=float), np.asarray(nodes, dtype=float)
    steps, inter = f * (n - 1), np.where(nodes > 1, f * (nodes - 1), 0)
    overhead = NET_OVERHEAD_US * (3 if p == SIMPLE else 1)
    intra = np.where(nodes > 1, max(NVLINK_US["ring"][p], overhead), NVLINK_US["ring"][p])
    lat = BASE_US["ring"][p] + (steps - inter) * intra + inter * _net_step_us("ring", p, n, nodes, hop_s / US)
    if coll == "all_reduce" and p == SIMPLE:
        lat = np.where(nodes > 1, RING_PLATEAU * lat, lat)
    return lat * US


def tree_latency_s(p: int, n, nodes, hop_s=0.0) -> np.ndarray:
    """All-reduce on the tree [s]: base + 2 ((n / nodes - 1) NVLink steps + floor(log2 nodes)
    network steps)."""
    n, nodes = np.asarray(n, dtype=float), np.asarray(nodes, dtype=float)
    net = _net_step_us("tree", p, n, nodes, hop_s / US)
    return (BASE_US["tree"][p] + 2 * ((n / nodes - 1) * NVLINK_US["tree"][p] + _log2i(nodes) * net)) * US


def pat_latency_s(n, nodes, hop_s=0.0) -> np.ndarray:
    """PAT all-gather / reduce-scatter [s]: base + floor(log2 nodes) x network step / 3.5 + 2.8 us a rank."""
    n, nodes = np.asarray(n, dtype=float), np.asarray(nodes, dtype=float)
    net = NET_US["pat"] + 2 * hop_s / US
    return (BASE_US["pat"][SIMPLE] + _log2i(nodes) * net / 3.5 + 2.8 * n) * US


def nvls_latency_s(n, nodes, hop_s=0.0) -> np.ndarray:
    """NVLS inside a node: one switch round trip; NVLS tree across nodes: that plus 2 floor(log2
    nodes) network steps [s]."""
    nodes = np.asarray(nodes, dtype=float)
    net = NET_US["nvls_tree"] + 2 * hop_s / US
    return (NVLINK_US["nvls"] + np.where(nodes > 1, 2 * _log2i(nodes) * net, 0.0)) * US


def _ring_bus(p: int, bus, nodes) -> np.ndarray:
    return {LL: np.minimum(LL_BW * bus, _ll_cap(nodes)), LL128: LL128_BW * bus, SIMPLE: bus}[p]


def _tree_bus(p: int, bus, nodes) -> np.ndarray:
    tree = TREE_BW * bus
    if p == LL:
        return np.minimum(tree * TREE_LL_BW, _ll_cap(nodes))
    if p == LL128:
        return tree * np.where(nodes <= 1, *TREE_LL128_BW)
    return tree


def _wire_s(nbytes, gbps) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.where(gbps > 0, nbytes / (np.maximum(gbps, 1e-300) * GB), np.inf)


def all_reduce_s(nbytes, n, links: Links) -> np.ndarray:
    """All-reduce of a buffer of `nbytes` over n ranks [s]: ring, tree, NVLS or NVLS tree, LL /
    LL128 / Simple, whichever NCCL's model finds fastest."""
    n = np.asarray(n, dtype=float)
    nodes = np.minimum(np.asarray(links.nodes, dtype=float), n)
    share = 2 * (n - 1) / np.maximum(n, 1)  # busbw / algbw of a ring (nccl-tests)
    times = []
    for p in PROTOCOLS:
        times.append(ring_latency_s("all_reduce", p, n, nodes, links.hop_s) + _wire_s(share * nbytes, _ring_bus(p, links.bus_gbps, nodes)))
        times.append(tree_latency_s(p, n, nodes, links.hop_s) + _wire_s(2 * nbytes, _tree_bus(p, links.bus_gbps, nodes)))
    nvls = np.asarray(links.nvls_gbps, dtype=float)
    # NVLS pipelines the reduce and the multicast (tuning.cc: intraBw x 2); NVLS tree is bounded by
    # the NICs too, which carry twice as much when there are only two nodes.
    inter = np.where(nodes > 1, links.inter_gbps * np.where(nodes <= 2, 2.0, 1.0), np.inf)
    nvls_bus = np.where(nvls > 0, np.minimum(2 * nvls, inter), 0.0)
    times.append(nvls_latency_s(n, nodes, links.hop_s) + _wire_s(share * nbytes, nvls_bus))
    return np.where(n > 1, np.min(np.broadcast_arrays(*times), axis=0), 0.0)


def reduce_scatter_s(nbytes, n, links: Links) -> np.ndarray:
    """Reduce-scatter (or all-gather: the same model) of a buffer of `nbytes` over n ranks [s]:
    ring (LL / LL128 / Simple), NVLS inside one node, PAT with one rank a node."""
    n = np.asarray(n, dtype=float)
    nodes = np.minimum(np.asarray(links.nodes, dtype=float), n)
    share = (n - 1) / np.maximum(n, 1)
    times = [ring_latency_s("reduce_scatter", p, n, nodes, links.hop_s) + _wire_s(share * nbytes, _ring_bus(p, links.bus_gbps, nodes))
             for p in PROTOCOLS]
    # NVLS all-gather / reduce-scatter: one node only; priced at NVLS's bus bandwidth with the
    # nccl-tests factor (n - 1) / n (tuning.cc writes it as a bandwidth x (ppn - 1) / ppn).
    nvls = np.where(nodes <= 1, np.asarray(links.nvls_gbps, dtype=float), 0.0)
    times.append(nvls_latency_s(n, nodes) + _wire_s(share * nbytes, nvls))
    pat = np.where((n == nodes) & (n > 1), PAT_BW * np.asarray(links.bus_gbps, dtype=float), 0.0)
    times.append(pat_latency_s(n, nodes, links.hop_s) + _wire_s(nbytes, pat))
    return np.where(n > 1, np.min(np.broadcast_arrays(*times), axis=0), 0.0)


all_gather_s = reduce_scatter_s
