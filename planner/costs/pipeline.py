"""Step time of a pipelined, data- and tensor-parallel step, and its breakdown.

Schedules (Narayanan et al. 2021, Sec. 2.2): 1F1B takes (m + p - 1) stage-times; the interleaved
schedule with v chunks per rank shrinks the bubble to (p - 1)/v. With unequal stages (the last one
also computes the logits) the slowest rank sets the steady state:
step = m * t_max + (sum_r t_r - t_max) / v, which gives both formulas when all t_r are equal.
Pipeline sends: two per micro-batch per chunk on the critical path, plus the fill.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.costs import comm, offload
from planner.costs.compute import LayerCompute
from planner.costs.context import JobContext
from planner.costs.layer_times import KindTimes, kind_sums
from planner.costs.memory import activation_bytes_per_layer, offload_layers_of
from planner.costs.pipeline_ranks import PipelineRanks, held_layers
from planner.costs.schedules import bubble_factor
from planner.layout.arrays import unique_rows
from planner.layout.axes import AXES, degrees
from planner.layout.space import RECOMPUTE_FULL
from planner.specs import ClusterSpec, ModelSpec
from planner.specs.layers import layer_kinds
from planner.units import US


# TimeBreakdown fields that are parts of its other terms (`total` leaves them out; JSON prints them apart).
PARTS_OF_TERMS = ("moe_imbalance",)


@dataclass(frozen=True)
class TimeBreakdown:
    """Seconds per step, averaged over the GPUs of a pipeline (arrays over layouts)."""

    compute: np.ndarray
    recompute: np.ndarray
    tp_comm: np.ndarray
    pp_comm: np.ndarray
    dp_comm: np.ndarray
    bubble: np.ndarray
    optimizer: np.ndarray
    overhead: np.ndarray
    cp_comm: np.ndarray | float = 0.0  # exposed context-parallel K/V exchange
    ep_comm: np.ndarray | float = 0.0  # expert-parallel token dispatch and combine
    offload: np.ndarray | float = 0.0  # activation copies to and from the host not hidden by compute
    # A part of compute and ep_comm, not a term of its own (total leaves it out): what the MoE routing
    # imbalance (moe.imbalance, moe.load_imbalance) adds to them, the busiest expert rank's longer GEMMs
    # and all-to-alls against a force-balanced routing's, averaged over the pipeline's GPUs as they are.
    moe_imbalance: np.ndarray | float = 0.0

    @property
    def total(self) -> np.ndarray:
        return (
            self.compute + self.recompute + self.tp_comm + self.cp_comm + self.ep_comm + self.pp_comm + self.dp_comm
            + self.bubble + self.optimizer + self.overhead
        ) + self.offload


def rank_time_s(kinds: list[KindTimes], ranks: PipelineRanks) -> np.ndarray:
    """Time of each rank of `ranks` per micro-batch [s] ((k, n)): its layers' work, recomputation
    and exposed TP/CP/EP communication, and the logits on the last rank."""
    return _rank_time_s([k.layer for k in kinds], [k.moe for k in kinds], kinds[0].lc.logits_fwd_bwd_s, ranks)


def _rank_time_s(layers, moe, logits, ranks: PipelineRanks) -> np.ndarray:
    """rank_time_s from each kind's `layer` and whether it is MoE."""
    out = ranks.last * logits
    for layer, held in zip(layers, held_layers(ranks, moe)):
        out = out + held * layer
    return out


def step_time(job: JobContext) -> TimeBreakdown:
    """The step of each row of `job.layouts`, on the slowest of the pipeline ranks `job.ranks`
    (the bounding ranks of the default split bound the others)."""
    model, cluster, layouts, ranks, st = job.model, job.cluster, job.layouts, job.ranks, job.stack
    gpu = cluster.gpu
    eff = gpu.efficiency
    m = layouts.num_microbatches.astype(float)
    p = layouts.pp.astype(float)
    v = layouts.vpp.astype(float)
    sums, moe = kind_sums(model, cluster, st, layouts, job.rows)
    logits = sums.logits

    # The slowest rank sets the steady state; every layer and the logits run once per micro-batch
    # somewhere, whatever the split, so the sum over ranks needs no per-rank arrays.
    # Per micro-batch and model chunk, every rank pays the stack's fixed scheduling cost.
    micro = st.microbatch_overhead_s * v
    t_max = _rank_time_s(sums.layers, moe, logits, ranks).max(axis=0) + micro
    t_sum = sums.layer + logits + p * micro
    # Schedules other than (interleaved) 1F1B shrink the fill and drain (planner/costs/schedules.py).
    pipeline = m * t_max + (t_sum - t_max) / v * bubble_factor(layouts.schedule, layouts.pp, layouts.vpp)

    # Averages over ranks: what each GPU does; the rest of `pipeline` is bubble and imbalance.
    def per_gpu(total):
        return m * total / p

    compute = per_gpu(sums.work) + m * logits / p
    recompute = per_gpu(sums.recompute)
    tp_comm, cp_comm, ep_comm = per_gpu(sums.tp), per_gpu(sums.cp), per_gpu(sums.ep)
    bubble = np.maximum(pipeline - compute - recompute - tp_comm - cp_comm - ep_comm, 0.0)

    prec = job.numerics
    pp_comm = np.where(layouts.pp > 1, 2.0 * (m * v + p - 1) * _p2p_s(model, cluster, layouts), 0.0)

    dense, experts = job.params_most
    raw_dense, raw_experts, gather, reduce = _dp_traffic(job, dense, experts)
    most, fewest = ranks.layers.max(axis=0), ranks.layers.min(axis=0)
    mean = sums.mean
    dp_comm = _dp_exposed_s(job, mean, raw_dense, gather, reduce, most, fewest)
    if model.moe is not None:
        dp_comm = dp_comm + _dp_exposed_s(job, mean, raw_experts, 0.0, 0.0, most, fewest)

    sharded = np.where(layouts.zero >= 1, layouts.dp * layouts.cp, 1)
    expert_sharded = np.where(layouts.zero >= 1, comm.expert_data_group(layouts)[0], 1)
    # Adam over this GPU's shard, and (FP8) casting its weights once per step (planner/specs/precision.py).
    step_bytes = st.optimizer_step_factor * prec.adam_step_bytes + prec.quantize_bytes / 2
    optimizer = step_bytes * (dense / sharded + experts / expert_sharded) / (gpu.hbm_bytes_per_s * eff.hbm)
    off_optim = offload.optimizer_offloaded(layouts)
    if off_optim.any():  # Adam on the CPU, its copies over the host link (planner/costs/offload.py)
        cpu = offload.optimizer_step_s(dense / sharded + experts / expert_sharded, cluster.node, layouts.gpus, prec)
        optimizer = np.where(off_optim, cpu, optimizer)
    overhead = st.step_overhead_s + m * micro
    # no pipeline, no bubble: at pp 1 what is left is the float residue of summing the terms two ways
    bubble = np.where(layouts.pp > 1, np.maximum(bubble - m * micro, 0.0), 0.0)
    copies = _activation_offload_s(job, sums.mean, m, ranks.layers.max(axis=0))
    return TimeBreakdown(compute, recompute, tp_comm, pp_comm, dp_comm, bubble, optimizer, overhead, cp_comm, ep_comm,
                         offload=copies, moe_imbalance=per_gpu(sums.imbalance))


def _activation_offload_s(job: JobContext, lc: LayerCompute, m, most) -> np.ndarray:
    """Activation copies the layers' compute does not hide, per step: every micro-batch crosses each
    offloaded layer of the rank holding the most (planner/costs/offload.py activation_exposed_s)."""
    out = np.zeros(len(job.layouts))
    rows = np.flatnonzero(offload.activations_offloaded(job.layouts))
    if rows.size:
        sub = job.layouts.take(rows)
        layer_bytes = np.max([activation_bytes_per_layer(job.model, sub, k)[0] for k in layer_kinds(job.model)], axis=0)
        per_layer = offload.activation_exposed_s(layer_bytes, np.broadcast_to(lc.fwd_s, out.shape)[rows],
                                                 np.broadcast_to(lc.bwd_s, out.shape)[rows], job.cluster.node, sub.gpus)
        layers = offload.offloaded_layers(offload_layers_of(job), np.broadcast_to(most, out.shape))
        out[rows] = (m * layers)[rows] * per_layer
    return out


# The axes a pipeline send depends on: the degrees (group placement) and the tensor's size.
P2P_AXES = (*(a.name for a in degrees(AXES)), "micro_batch", "sequence_parallel")


def _p2p_s(model: ModelSpec, cluster: ClusterSpec, layouts) -> np.ndarray:
    """comm.pp_p2p_s once per distinct combination of P2P_AXES, spread back over the rows."""
    act = model.training.numerics.activation_bytes
    first, inverse = unique_rows([getattr(layouts, a) for a in P2P_AXES])
    if first.size == len(layouts):
        return comm.pp_p2p_s(cluster, model.hidden, model.seq_len, layouts, act)
    return comm.pp_p2p_s(cluster, model.hidden, model.seq_len, layouts.take(first), act)[inverse]


# The axes dense data-parallel traffic depends on (the dense parameters per GPU follow tp, pp and vpp); the routed
# experts' follow their own group (below), ZeRO-3's per-layer traffic ZERO3_AXES.
DP_AXES = ("tp", "cp", "dp", "pp", "vpp", "micro_batch", "zero")
# One ZeRO-3 layer's gather and reduce-scatter: the groups (and, for a MoE layer, ep and etp) and the job's
# GPUs (its NVLink-domain placement).
ZERO3_AXES = ("tp", "cp", "dp", "pp")


def _dp_traffic(job: JobContext, dense, experts) -> tuple:
    """(dense gradient/parameter traffic per step, the routed experts', one ZeRO-3 layer gather,
    its reduce-scatter) [s] before overlap, once per distinct combination of the axes each reads;
    the ZeRO-3 layer traffic only for the rows at ZeRO-3 (0 elsewhere: unread)."""
    model, cluster, layouts, prec = job.model, job.cluster, job.layouts, job.numerics
    first, inverse = unique_rows([getattr(layouts, a) for a in DP_AXES])
    raw_dense = comm.dp_comm_s(cluster, dense[first], layouts.take(first), prec)[inverse]
    gather, reduce = np.zeros(len(layouts)), np.zeros(len(layouts))
    z3 = np.flatnonzero(layouts.zero >= 3)
    if z3.size:
        on = layouts.take(z3)
        first3, inverse3 = unique_rows([getattr(on, a) for a in ZERO3_AXES + (("ep", "etp") if model.moe else ())])
        g, r = comm.zero3_layer_comm_s(cluster, model, on.take(first3), prec, job.profile)
        gather[z3], reduce[z3] = g[inverse3], r[inverse3]
    raw_experts = _expert_dp_traffic(model, cluster, layouts, experts) if model.moe else 0 * raw_dense
    return raw_dense, raw_experts, gather, reduce


def _expert_dp_traffic(model: ModelSpec, cluster: ClusterSpec, layouts, experts) -> np.ndarray:
    """The routed experts' data-parallel traffic, once per distinct expert-data group (size,
    stride), pp, vpp (their parameters per GPU follow pp, vpp and ep*etp, the stride), micro-batches
    and ZeRO stage: a twelfth of the rows of DeepSeek-V3's space."""
    size, stride = comm.expert_data_group(layouts)
    first, inverse = unique_rows([size, stride, layouts.pp, layouts.vpp, layouts.num_microbatches, layouts.zero])
    sub = layouts.take(first)
    raw = comm.dp_comm_s(cluster, experts[first], sub, model.training.numerics, comm.expert_data_group(sub))
    return raw[inverse]


def _dp_exposed_s(job: JobContext, lc: LayerCompute, raw, gather, reduce, most, fewest) -> np.ndarray:
    """Data-parallel communication left on the critical path [s].
    Overlapped: gradient buckets reduce during the last micro-batch's backward, parameters gather
    during the first forward (Megatron overlap_grad_reduce / overlap_param_gather); a plain
    all-reduce of gradients can only hide behind backward. The stage holding the most layers
    (`most`; `fewest`: the least, over the ranks evaluated) bounds the window. ZeRO-2 moves gradients every micro-batch and overlaps them
    with all of compute. ZeRO-3 overlaps layer by layer: the next unit's gather runs while this
    layer computes, so a layer whose gather outlasts its compute exposes the difference
    (Zhao et al. 2023 Sec. 3.3, FSDP prefetching), and every unit pays the stack's hook cost."""
    model, layouts, st, stack = job.model, job.layouts, job.stack, job.profile
    m = layouts.num_microbatches.astype(float)
    first = most
    units = comm.zero3_units_per_layer(model) if stack.zero3_gather == "module" else 1
    hooks_s = 3 * units * st.zero3_unit_overhead_us * US  # forward gather, backward gather, reduce
    # Forward and backward gather; a stack whose hooks fire in the recomputed forward gathers a third time.
    gathers = 2.0 + ((layouts.recompute == RECOMPUTE_FULL) & stack.zero3_recompute_gathers)
    # A stack that copies each reduced gradient to the host synchronously when the optimizer is offloaded
    # (zero3_offload_sync_reduce) waits out every reduce-scatter: none of it hides.
    sync = stack.zero3_offload_sync_reduce & offload.optimizer_offloaded(layouts)
    hidden_reduce = np.where(sync, 0.0, reduce)
    per_layer = (np.maximum(gather - lc.fwd_s, 0.0) + (reduce - hidden_reduce)
                 + np.maximum((gathers - 1.0) * gather + hidden_reduce - lc.bwd_s - lc.recompute_s, 0.0))
    # Not overlapped, every unit's gathers and reduce-scatter wait in turn.
    zero3_raw = m * first * (gathers * gather + reduce + hooks_s)
    # Counted over the rank with the fewest layers (as ZeRO-2's window below): an uneven pipeline's
    # pace is not the first rank's, and a slower GPU must not hide more than it adds.
    zero3 = np.minimum(m * fewest * (per_layer + hooks_s), zero3_raw)
    if not model.training.dp_comm_overlap:
        return np.where(layouts.zero >= 3, zero3_raw, raw)
    work_layer = lc.fwd_s + lc.bwd_s
    stage_fb = first * work_layer
    # ZeRO-2 hides each micro-batch's reduce-scatter behind the stage's compute; the rank with the
    # fewest layers (L // p) bounds it, so that a slower GPU never hides more than it adds.
    window = np.select([layouts.zero == 0, layouts.zero == 1], [first * lc.bwd_s, stage_fb], m * fewest * work_layer)
    hidden = np.maximum(raw - window, st.dp_overlap_exposed * raw)
    if not stack.zero1_dp_overlap:  # ZeRO-1 reduces in one collective after the backward: nothing hides it
        hidden = np.where(layouts.zero == 1, raw, hidden)
    return np.where(layouts.zero >= 3, np.maximum(zero3, st.dp_overlap_exposed * zero3_raw), hidden)
