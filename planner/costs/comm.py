"""Communication of a step: which groups a layout forms, where they sit, and what each collective,
send and all-to-all costs.

Collectives are priced as NCCL prices them (planner/costs/collectives.py: ring, tree, NVLS, PAT with
their latencies, src/graph/tuning.cc) over the links computed here; the bus bandwidth of a ring
follows nccl-tests PERFORMANCE.md (all-reduce moves 2(n-1)/n of the buffer per rank, reduce-scatter
and all-gather (n-1)/n; Thakur, Rabenseifner & Gropp 2005), scaled by a measured bus efficiency.
Between nodes, a step crosses 2 x levels - 1 switches of a fat tree (Leiserson 1985), and traffic
that leaves a leaf switch shares its uplinks (`network.oversubscription`). ZeRO-3 / FSDP issue
their collectives one per gathering unit and reduce bucket (`zero3_layer_comm_s`), each paying its
latency.

Groups follow Megatron-LM's rank order (planner.layout.space.process_group: tp innermost, then cp, ep,
dp, pp), so a group is given by its size and the rank stride between members. A group inside one NVLink domain runs at NVLink speed;
a group that leaves it is bounded by the network links of the members it has in each domain
(hierarchical: k members per node share the node's k NICs).
"""
from __future__ import annotations

import numpy as np

from planner.costs.collectives import Links, all_gather_s, all_reduce_s, reduce_scatter_s
from planner.specs.layers import LayerKind, attention_dims, layer_kinds, windowed_layers
from planner.specs.precision import BF16, Precision
from planner.layout.space import RECOMPUTE_FULL, RECOMPUTE_SELECTIVE, process_group
from planner.specs import ClusterSpec, ModelSpec, StackConstants
from planner.units import GB, MB, US


def job_domain(cluster: ClusterSpec, layouts=None):
    """GPUs of an NVLink domain a job's consecutive ranks fill: the whole domain for a job that fits
    one; else the cluster's segment (NVIDIA recommends Slurm --segment 16 trays, 64 of an NVL72
    rack's 72 GPUs, for jobs of 128 GPUs and more: "Unlock exascale performance on NVIDIA GB200
    NVL72 with Slurm topology-aware job scheduling", NVIDIA technical blog). A rack-scale domain
    without a stated segment is filled as that advice would for each layout: the most whole trays
    that hold whole tp x cp and ep x etp groups (groups of 32 on 72-GPU racks: 64), when the job
    still fits the cluster's racks so; otherwise all of it, and the groups that straddle two racks
    bound the step (the slowest group sets every step: `_placement`)."""
    node = cluster.node
    domain = node.nvlink_domain
    if layouts is None:
        return domain
    job = np.asarray(layouts.gpus)
    if node.nvlink_segment_gpus is not None:
        segment = node.nvlink_segment
    elif domain > node.gpus:
        span = np.lcm(np.lcm(layouts.tp * layouts.cp, layouts.ep * layouts.etp), node.gpus)
        segment = np.where(span <= domain, domain // span * span, domain)
        racks = max(cluster.total_gpus // domain, 1)
        segment = np.where(np.ceil(job / segment) <= racks, segment, domain)
    else:
        return domain
    return np.where(job <= domain, domain, segment)


def _placement(cluster: ClusterSpec, size, stride, layouts=None):
    """(inside one NVLink domain, members per domain, domains spanned) of a group; `layouts`: the
    job's (a job that fits one domain keeps every group inside it)."""
    domain = job_domain(cluster, layouts)
    size, stride = np.asarray(size), np.asarray(stride)
    span = size * stride
    job = np.asarray(layouts.gpus) if layouts is not None else np.inf
    # A group fits one domain only if groups tile domains exactly (tp 6 on 8-GPU nodes straddles two)
    # or the whole job does (64 GPUs of an NVL72 rack). Groups of consecutive ranks that do not tile
    # the domain straddle two at some boundary, the smallest piece gcd(span, domain) ranks (groups
    # start at multiples of the span, so a boundary falls gcd apart from one): that group's
    # members with the fewest peers on NVLink bound it, and the slowest group bounds the step.
    inside = (span <= domain) & ((domain % span == 0) | (job <= cluster.node.nvlink_domain))
    per_domain = np.clip(np.gcd(span, domain) // np.maximum(stride, 1), 1, size)
    domains = np.where(inside, 1, np.maximum(size // per_domain, 1))
    return inside, per_domain, domains


def placement(cluster: ClusterSpec, layouts) -> dict | None:
    """How consecutive ranks of row 0 of `layouts` fill a rack-scale NVLink domain (larger than a node),
    as `job_domain` and `_placement` price them: None on clusters whose domain is a node. `gpus_per_domain`
    is what the job fills of each domain (`stated`: the cluster's nvlink_segment_gpus, else the planner's
    default), `split_groups` the process groups whose members span more than one domain (their traffic
    partly over the network)."""
    node = cluster.node
    if node.nvlink_domain <= node.gpus:
        return None
    groups = {"tp": process_group(layouts, "tp"), "cp": process_group(layouts, "cp"),
              "ep": (layouts.ep, layouts.etp), "dp": data_group(layouts), "pp": process_group(layouts, "pp")}
    split = [name for name, (size, stride) in groups.items()
             if int(size[0]) > 1 and int(_placement(cluster, size, stride, layouts)[2][0]) > 1]
    return {"nvlink_domain_gpus": int(node.nvlink_domain), "gpus_per_domain": int(np.asarray(job_domain(cluster, layouts)).ravel()[0]),
            "stated": node.nvlink_segment_gpus is not None, "split_groups": split}


def _leaf_nodes(cluster: ClusterSpec) -> int:
    """Nodes under one leaf switch: half its ports face down; rail-optimised, each GPU's NIC of a
    node goes to its own rail leaf, so a leaf reaches radix/2 nodes (NVIDIA DGX SuperPOD RA)."""
    net = cluster.network
    down = net.switch_radix // 2
    return down if net.rail_optimized else max(down // cluster.node.gpus, 1)


def _fat_tree_levels(cluster: ClusterSpec, nodes) -> np.ndarray:
    leaf = _leaf_nodes(cluster)
    down = cluster.network.switch_radix // 2
    return np.where(nodes <= leaf, 1, np.where(nodes <= leaf * down, 2, 3))


def group_links(cluster: ClusterSpec, size: np.ndarray, stride: np.ndarray, layouts=None) -> Links:
    """The links of a group of `size` ranks `stride` apart, placed once (planner/costs/collectives.py
    prices its collectives over them)."""
    eff, node = cluster.gpu.efficiency, cluster.node
    inside, per_domain, domains = _placement(cluster, size, stride, layouts)
    nvlink = node.nvlink_gbps * eff.nvlink
    nodes = domains * np.maximum(node.nvlink_domain // node.gpus, 1)
    network = node.network_gbps * eff.network
    network = np.where(nodes > _leaf_nodes(cluster), network / cluster.network.oversubscription, network)
    # hierarchical: the k members a group has in a domain share their k NICs (NCCL runs a ring or
    # tree per NIC); never faster than NVLink
    inter = per_domain * network
    bus = np.where(inside, nvlink, np.minimum(nvlink, inter))
    hop_s = (2 * _fat_tree_levels(cluster, nodes) - 1) * cluster.network.switch_latency_us * US
    nvls = nvlink * eff.nvls
    p2p = np.where(domains > 1, eff.network_latency_s + hop_s, eff.latency_s)
    return Links(bus_gbps=bus, nodes=domains, inter_gbps=np.where(inside, 0.0, inter), nvls_gbps=nvls,
                 hop_s=hop_s, p2p_s=p2p)


def group_bus_gbps(cluster: ClusterSpec, size: np.ndarray, stride: np.ndarray) -> np.ndarray:
    """Achieved bus bandwidth [GB/s] of a ring over a group of `size` ranks spaced `stride` apart."""
    return group_links(cluster, size, stride).bus_gbps


def sized_bus_gbps(bus_gbps, nbytes, half_mb: float) -> np.ndarray:
    """Bus bandwidth reached by a message of `nbytes`: b * S / (S + S_half) (Hockney's n_1/2 model,
    Hockney 1991), since NCCL's pipelined rings only approach their peak on large buffers."""
    if half_mb <= 0:
        return bus_gbps
    return bus_gbps * nbytes / (nbytes + half_mb * MB)


def p2p_s(nbytes, gbps, latency_s) -> np.ndarray:
    return nbytes / (gbps * GB) + latency_s


def tp_comm_per_layer_s(cluster: ClusterSpec, hidden: int, seq_len: int, layouts,
                        activation_bytes: int = BF16.activation_bytes, pairs: float = 2.0) -> np.ndarray:
    """TP communication of one layer, forward, one micro-batch [s]: two all-reduces of the
    s b h activations (Shoeybi et al. 2019, Sec. 3, the f/g operators); with sequence parallelism
    two all-gathers and two reduce-scatters of the same tensors, the same volume (Korthikanti et
    al. 2022 Sec. 4.2.2). The backward pass does the same again. `pairs`: tp regions of the layer
    (attention and MLP; an MoE layer's routed experts have none). A GPU holds s / cp tokens."""
    eff = cluster.gpu.efficiency
    size, stride = process_group(layouts, "tp")
    nbytes = activation_bytes * layouts.micro_batch * seq_len * hidden / layouts.cp
    links = group_links(cluster, size, stride, layouts).sized(nbytes, eff.message_half_mb)
    ar = all_reduce_s(nbytes, size, links)
    sp = 2.0 * reduce_scatter_s(nbytes, size, links)  # AG + RS, per all-reduce replaced
    return pairs * np.where(layouts.sequence_parallel == 1, sp, ar)


def tp_passes(layouts) -> np.ndarray:
    """Forward passes' worth of TP collectives per layer and micro-batch: forward, backward, and
    the recomputed forward under full recomputation."""
    return 2.0 + (layouts.recompute == RECOMPUTE_FULL)


def tp_exposed(model: ModelSpec, gpu, st: StackConstants, layouts) -> np.ndarray | float:
    """Fraction of TP communication left on the critical path (overlap with GEMMs, when on); all of it
    where the stack's FSDP and TP overlap cannot share a GPU before Blackwell (fsdp_serializes_tp_overlap)."""
    if not model.training.tp_comm_overlap:
        return 1.0
    if fsdp_blocks_tp_overlap(model, gpu):
        return np.where(layouts.zero >= 2, 1.0, st.tp_overlap_exposed)
    return st.tp_overlap_exposed


def fsdp_blocks_tp_overlap(model: ModelSpec, gpu) -> bool:
    """Whether ZeRO-2/3 rows lose TP overlap: the stack's FSDP wants CUDA_DEVICE_MAX_CONNECTIONS > 1 where TP
    overlap wants 1 (GPUs before sm_version 100; StackSpec.fsdp_serializes_tp_overlap)."""
    return (model.training.tp_comm_overlap and model.training.stack.fsdp_serializes_tp_overlap
            and gpu.sm_version is not None and gpu.sm_version < 100)


def tp_time_per_layer_s(cluster: ClusterSpec, model: ModelSpec, st: StackConstants, layouts) -> np.ndarray:
    """Exposed TP communication of one layer per micro-batch, all passes [s]."""
    act = model.training.numerics.activation_bytes
    tp_fwd = tp_comm_per_layer_s(cluster, model.hidden, model.seq_len, layouts, act)
    return tp_fwd * tp_passes(layouts) * tp_exposed(model, cluster.gpu, st, layouts)


def pp_p2p_s(cluster: ClusterSpec, hidden: int, seq_len: int, layouts,
             activation_bytes: int = BF16.activation_bytes) -> np.ndarray:
    """One activation (or gradient) send between adjacent pipeline stages [s]. Megatron sends 1/tp
    of the tensor per GPU: split by sequence parallelism, or scattered and re-gathered over NVLink
    (Narayanan et al. 2021 Sec. 4.1, scatter/gather optimisation)."""
    eff = cluster.gpu.efficiency
    tp, tp_stride = process_group(layouts, "tp")
    pp, pp_stride = process_group(layouts, "pp")
    nbytes = activation_bytes * layouts.micro_batch * seq_len * hidden / (tp * layouts.cp)
    # Some stage boundary leaves the NVLink domain whenever the pipeline spans more than one domain.
    crosses = pp * pp_stride > job_domain(cluster, layouts)
    gbps = np.where(crosses, cluster.node.network_gbps * eff.network, cluster.node.nvlink_gbps * eff.nvlink)
    gbps = sized_bus_gbps(gbps, nbytes, eff.message_half_mb)
    lat = np.where(crosses, eff.network_latency_s + group_links(cluster, 2, pp_stride, layouts).hop_s, eff.latency_s)
    regather = np.where(
        (tp > 1) & (layouts.sequence_parallel == 0),
        all_gather_s(nbytes * tp, tp, group_links(cluster, tp, tp_stride, layouts)),
        0.0,
    )
    return p2p_s(nbytes, gbps, lat) + regather


def data_group(layouts) -> tuple[np.ndarray, np.ndarray]:
    """(size, stride) of the group gradients are reduced over: dp x cp, contiguous after tp
    (Megatron's data-parallel group with context parallelism)."""
    return layouts.dp * layouts.cp, layouts.tp


def expert_data_group(layouts) -> tuple[np.ndarray, np.ndarray]:
    """(size, stride) of the expert-data-parallel group: edp replicas etp*ep ranks apart (Megatron-Core's
    expert grid, etp-ep-edp-pp)."""
    return layouts.tp * layouts.cp * layouts.dp // (layouts.ep * layouts.etp), layouts.ep * layouts.etp


def dp_comm_s(cluster: ClusterSpec, params_per_gpu: np.ndarray, layouts, prec: Precision = BF16,
              group: tuple | None = None) -> np.ndarray:
    """Data-parallel communication per step before overlap [s].
    zero 0: all-reduce of fp32 gradients; zero 1: reduce-scatter of gradients + all-gather of
    16-bit parameters (Megatron distributed optimizer, same volume); zero 2: gradients are only kept
    as shards, so they are reduce-scattered after every micro-batch (Rajbhandari et al. 2020
    Sec. 5.2), then one parameter all-gather; zero 3: per micro-batch two
    parameter all-gathers (forward, backward) and a gradient reduce-scatter (Rajbhandari et al.
    2020 Sec. 7.2.2: 3x the parameter size against 2x for plain data parallelism, here every
    micro-batch; with 16-bit gathers and fp32 gradients the bytes equal one fp32 all-reduce).
    `group`: (size, stride) of the reducing group (default dp x cp; routed experts: edp)."""
    dp, stride = group if group is not None else data_group(layouts)
    links = group_links(cluster, dp, stride, layouts)
    # grad_bytes: 4 (fp32 main_grad) or 2 (grad_reduce_dtype bf16); the parameter gather moves
    # param_gather_bytes (1 for per-tensor FP8 with fp8_param_gather, else 2; planner/specs/precision.py).
    # Priced as one collective each: Megatron-Core's gradient buckets grow with the group
    # (max(40M, 1M x dp) parameters, distributed_data_parallel.py), so that their number times a
    # ring's latency stays about flat; counting them would let more ranks mean fewer buckets.
    grads, weights = prec.grad_bytes * params_per_gpu, prec.param_gather_bytes * params_per_gpu
    ar, rs, ag = all_reduce_s(grads, dp, links), reduce_scatter_s(grads, dp, links), all_gather_s(weights, dp, links)
    plain = ar
    sharded = rs + ag
    zero3 = layouts.num_microbatches * (2 * ag + rs)
    zero2 = layouts.num_microbatches * rs + ag
    z = layouts.zero
    return np.select([z == 0, z == 1, z == 2], [plain, sharded, zero2], zero3)


def zero3_units_per_layer(model: ModelSpec) -> int:
    """Gathering units of one layer for a stack that gathers per weight matrix: QKV, attention
    output, and the MLP's matrices (DeepSpeed stage-3 hooks fire per submodule)."""
    return 4 if model.ffn_act != "swiglu" else 5


def zero3_layer_comm_s(cluster: ClusterSpec, model: ModelSpec, layouts, prec: Precision, stack) -> tuple:
    """ZeRO-3/FSDP traffic of one layer per micro-batch [s]: (one parameter all-gather pass,
    the gradient reduce-scatter). Per unit (a layer, or a weight matrix with `zero3_gather:
    module`), so small units pay the group's latency many times (Rajbhandari et al. 2020 Sec. 7;
    Zhao et al. 2023 Sec. 3.2). A MoE layer's routed experts are a unit of their own: this rank's
    E / (ep x etp) of them, sharded over the expert-data-parallel group (Megatron-FSDP and torchtitan's
    FSDP2 shard experts over the expert-data mesh), gathered and reduced after the dense part."""
    kind = max(layer_kinds(model), key=lambda k: k.params)
    dense = kind.tp_params / layouts.tp.astype(float)
    gather, reduce = _zero3_unit_s(cluster, layouts, prec, stack, dense, data_group(layouts),
                                   zero3_units_per_layer(model))
    if kind.is_moe:
        experts = kind.expert_params / (layouts.ep * layouts.etp).astype(float)
        g, r = _zero3_unit_s(cluster, layouts, prec, stack, experts, expert_data_group(layouts), 1)
        gather, reduce = gather + g, reduce + r
    return gather, reduce


def _zero3_unit_s(cluster: ClusterSpec, layouts, prec: Precision, stack, params_per_gpu, group, module_units) -> tuple:
    """(all-gather, reduce-scatter) [s] of a layer's `params_per_gpu` over `group` (size, stride)."""
    layer = params_per_gpu
    dp, stride = group
    links = group_links(cluster, dp, stride, layouts)
    units = module_units if stack.zero3_gather == "module" else 1
    # DeepSpeed coalesces prefetched units up to its prefetch bucket; FSDP gathers one unit a call.
    if stack.zero3_prefetch_params > 0:
        units = np.maximum(np.minimum(units, np.ceil(layer / stack.zero3_prefetch_params)), 1)
    # A stack that gathers into one view per rank pays host time per rank and unit (`zero3_gather_rank_us`).
    host_s = units * dp * stack.zero3_gather_rank_us * US
    # and HBM passes over the gathered bytes outside the collective (`zero3_gather_copy_passes`)
    hbm = cluster.gpu.hbm_bytes_per_s * cluster.gpu.efficiency.hbm
    copies_s = stack.zero3_gather_copy_passes * prec.param_gather_bytes * layer / hbm
    gather = units * all_gather_s(prec.param_gather_bytes * layer / units, dp, links) + host_s + copies_s
    buckets = np.ceil(layer / stack.zero3_reduce_bucket_params) if stack.zero3_reduce_bucket_params > 0 else units
    if stack.zero3_grad_reduce == "all_reduce":  # the 16-bit gradients, all-reduced, then each keeps its part
        reduce = buckets * all_reduce_s(prec.weight_bytes * layer / buckets, dp, links)
    else:
        reduce = buckets * reduce_scatter_s(prec.grad_bytes * layer / buckets, dp, links)
    # HBM passes over the bucket's 16-bit gradients outside the collective (`zero3_reduce_copy_passes`)
    reduce = reduce + stack.zero3_reduce_copy_passes * prec.weight_bytes * layer / hbm
    return gather, reduce


def cp_comm_per_layer_s(cluster: ClusterSpec, model: ModelSpec, layouts, lc, st) -> np.ndarray:
    """Exposed context-parallel K/V exchange of one layer per micro-batch, all passes [s].
    p2p (Megatron-Core's default --cp-comm-type): a ring of cp - 1 steps, each passing a K/V chunk of
    s/cp tokens (K and V of kv_heads / tp heads) while attention runs on the one at hand, so only
    what outlasts the attention shows; backward sends K/V and their gradients, twice the bytes
    (Liu et al. 2023, Ring Attention; Megatron-Core context_parallel.md). all_gather: K/V gathered
    before attention, their gradients reduce-scattered after it, nothing overlapped. A model with
    sliding-window layers gathers too: Transformer Engine refuses p2p with a window (attn_forward_func_
    with_cp: "cannot support sliding window attention" unless cp_comm_type is a2a or all_gather). It
    gathers all of K/V though a window w <= s / (2 cp) needs only the previous chunk's: conservative."""
    d = attention_dims(model)
    cp, stride = process_group(layouts, "cp")
    chunk = BF16.activation_bytes * layouts.micro_batch * model.seq_len / cp * (d.k_width + d.v_width) / layouts.tp
    if st.cp_kv_expanded:  # grouped K/V repeated to every query head before the exchange
        chunk = chunk * d.heads / d.kv_heads
    links = group_links(cluster, cp, stride, layouts).sized(chunk, cluster.gpu.efficiency.message_half_mb)
    passes = 1.0 + (layouts.recompute == RECOMPUTE_FULL)
    if st.cp_comm == "all_gather" or windowed_layers(model):
        gather = all_gather_s(chunk * cp, cp, links)
        # torch's ring attention passes the K/V gradients round in fp32 (_templated_ring_attention_backward
        # accumulates in fp32 and rotates what it accumulates): twice a 16-bit reduction's bytes
        grads = 2.0 if model.training.stack.cp_ring_buffers else 1.0
        fwd_wait, bwd_wait = gather, (1.0 + grads) * gather
    else:
        step = chunk / (links.bus_gbps * GB) + links.p2p_s
        ring = (cp - 1) * step
        fwd_wait, bwd_wait = np.maximum(ring - lc.attention_fwd_s, 0.0), np.maximum(2 * ring - lc.attention_bwd_s, 0.0)
    fwd, bwd = lc.waiting_s(fwd_wait, bwd_wait)
    return np.where(cp > 1, passes * fwd + bwd, 0.0)


def process_links(cluster: ClusterSpec, layouts, name: str, nbytes) -> Links:
    """The links of process group `name` (cp, tp, ...) for messages of `nbytes`."""
    size, stride = process_group(layouts, name)
    return group_links(cluster, size, stride, layouts).sized(nbytes, cluster.gpu.efficiency.message_half_mb)


def remote_domains_per_token(experts: int, top_k: int, ep, per_domain) -> np.ndarray:
    """Expected NVLink domains other than the token's own that its top_k experts touch, under
    uniform routing, with the ep group spanning D = ep / per_domain domains of E/D = experts / ep x
    per_domain experts each (arrays over layouts). A domain holds none of the token's top_k distinct
    experts with probability C(E - E/D, top_k) / C(E, top_k), so D (1 - that) domains are hit on
    average; the token's own is one of the D alike, so (D - 1) / D of them are remote (linearity of
    expectation; DeepSeek-V3 Sec. 3.2.2 bounds this by node-limited routing, here it is not bounded).
    The ratio of binomials is the product over i < top_k of (E - E/D - i) / (E - i), 0 once a factor is."""
    ep, per_domain = np.asarray(ep, dtype=float), np.asarray(per_domain, dtype=float)
    domains = ep / per_domain
    outside = experts - experts / ep * per_domain  # experts of the other domains
    i = np.arange(top_k, dtype=float).reshape((-1,) + (1,) * outside.ndim)
    none_here = np.prod(np.maximum((outside - i) / (experts - i), 0.0), axis=0)
    return (domains - 1) * (1.0 - none_here)


def _ep_bytes(model: ModelSpec, kind: LayerKind, nbytes, ep, k) -> tuple:
    """(NVLink, network) bytes of one all-to-all moving this GPU's `nbytes` of routed copies, with k of
    the ep ranks in its NVLink domain. alltoall: a copy for another GPU of the domain goes over
    NVLink, every copy for a GPU outside it over the network. flex (Megatron-Core's flex dispatcher
    with DeepEP / HybridEP; DeepEP README, DeepSeek-V3 Sec. 3.2.2): a token crosses the network once
    per remote domain its experts touch (`remote_domains_per_token` of its top_k copies), and the
    receiving GPU forwards it over NVLink to the domain's other GPUs holding its experts: of the
    (ep - k) / ep copies for remote domains, the (k - 1) / k not for the receiving GPU itself."""
    if model.training.moe_dispatcher != "flex":
        return nbytes * (k - 1) / ep, nbytes * (ep - k) / ep
    network = nbytes * remote_domains_per_token(kind.experts, kind.top_k, ep, k) / kind.top_k
    return nbytes * ((k - 1) / ep + (ep - k) / ep * (k - 1) / k), network


def ep_comm_per_layer_s(cluster: ClusterSpec, model: ModelSpec, layouts, kind: LayerKind) -> np.ndarray:
    """Token dispatch and combine of one MoE layer per micro-batch, all passes [s]: two all-to-alls
    forward (dispatch, combine) and two backward, each moving this GPU's s b top_k / (cp tp) routed
    copies of h values (Megatron-Core's alltoall dispatcher; DeepSeek-V3 Sec. 3.2.2). Copies for the
    GPU's own experts stay; those for its NVLink domain go over NVLink, the rest over the network
    (`_ep_bytes`; the flex dispatcher sends a token once per remote domain), concurrently: the
    slower link bounds it. The busiest rank receives load_imbalance x the mean.
    With etp > 1 the routed tokens are also all-gathered and reduce-scattered over the etp group."""
    ep, stride = layouts.ep, layouts.etp
    eff = cluster.gpu.efficiency
    slots = layouts.micro_batch * model.seq_len * kind.top_k / (layouts.cp * layouts.tp)
    nbytes = BF16.activation_bytes * slots * model.hidden * model.moe.load_imbalance
    inside, per_domain, domains = _placement(cluster, ep, stride, layouts)
    k = np.where(inside, ep, per_domain)
    nvlink_bytes, network_bytes = _ep_bytes(model, kind, nbytes, ep, k)
    # at the dispatch kernels' measured rate where the preset states one (HybridEP: ~0.5 of the link)
    nvlink = nvlink_bytes / (cluster.node.nvlink_gbps * (eff.a2a_nvlink or eff.nvlink) * GB)
    network = network_bytes / (cluster.node.network_gbps * (eff.a2a_network or eff.network) * GB)
    latency = np.where(domains > 1, eff.network_latency_s, eff.latency_s)
    a2a = np.where(ep > 1, np.maximum(nvlink, network) + latency, 0.0)
    # forward and backward, and the forward again under full recomputation or a recomputed MoE layer
    # (selective with the moe module: its dispatch and combine rerun before its backward)
    passes = 2.0 + (layouts.recompute == RECOMPUTE_FULL)
    if "moe" in model.training.recomputed:
        passes = passes + (layouts.recompute == RECOMPUTE_SELECTIVE)
    etp_bytes = nbytes * layouts.etp
    etp_links = group_links(cluster, layouts.etp, np.ones_like(layouts.etp), layouts)
    etp = 2.0 * reduce_scatter_s(etp_bytes, layouts.etp, etp_links)
    return passes * (2.0 * a2a + etp)
