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

from ..precision import precision
from ..units import US
from ..specs import ClusterSpec, ModelSpec
from . import comm
from .compute import LayerCompute, layer_compute
from .memory import parameters_per_gpu
from .stages import PipelineRanks, pipeline_ranks, rank_layers


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

    @property
    def total(self) -> np.ndarray:
        return (
            self.compute + self.recompute + self.tp_comm + self.pp_comm + self.dp_comm + self.bubble
            + self.optimizer + self.overhead
        )


def rank_time_s(lc: LayerCompute, tp_layer: np.ndarray, ranks: PipelineRanks) -> np.ndarray:
    """Time of each rank of `ranks` per micro-batch [s] ((k, n)): its layers' work, recomputation
    and exposed TP communication, and the logits on the last rank."""
    t_layer = lc.fwd_s + lc.bwd_s + lc.recompute_s + tp_layer
    return ranks.layers * t_layer + ranks.last * lc.logits_fwd_bwd_s


def step_time(model: ModelSpec, cluster: ClusterSpec, layouts, ranks: PipelineRanks | None = None) -> TimeBreakdown:
    """`ranks`: the pipeline ranks to evaluate (default: the first and the last, which bound the others)."""
    gpu = cluster.gpu
    eff = gpu.efficiency
    st = model.training.stack.for_gpu(gpu.name)
    ranks = ranks or pipeline_ranks(model, layouts)
    m = layouts.num_microbatches.astype(float)
    p = layouts.pp.astype(float)
    v = layouts.vpp.astype(float)
    lc = layer_compute(model, gpu, layouts)
    tp_layer = comm.tp_time_per_layer_s(cluster, model, layouts)

    work_layer = lc.fwd_s + lc.bwd_s
    # The slowest rank sets the steady state; every layer and the logits run once per micro-batch
    # somewhere, whatever the split, so the sum over ranks needs no per-rank arrays.
    # Per micro-batch and model chunk, every rank pays the stack's fixed scheduling cost.
    micro = st.microbatch_overhead_s * v
    t_max = rank_time_s(lc, tp_layer, ranks).max(axis=0) + micro
    t_sum = model.layers * (work_layer + lc.recompute_s + tp_layer) + lc.logits_fwd_bwd_s + p * micro
    pipeline = m * t_max + (t_sum - t_max) / v

    # Averages over ranks: what each GPU does; the rest of `pipeline` is bubble and imbalance.
    per_rank = model.layers / p
    compute = m * (per_rank * work_layer + lc.logits_fwd_bwd_s / p)
    recompute = m * per_rank * lc.recompute_s
    tp_comm = m * per_rank * tp_layer
    bubble = np.maximum(pipeline - compute - recompute - tp_comm, 0.0)

    act = precision(model.training.precision).activation_bytes
    p2p = comm.pp_p2p_s(cluster, model.hidden, model.seq_len, layouts, act)
    pp_comm = np.where(layouts.pp > 1, 2.0 * (m * v + p - 1) * p2p, 0.0)

    params = parameters_per_gpu(model, layouts, ranks)
    prec = precision(model.training.precision)
    dp_comm = _dp_exposed_s(model, cluster, layouts, lc, params, st)

    sharded = np.where(layouts.zero >= 1, layouts.dp, 1)
    optimizer = st.optimizer_step_factor * prec.adam_step_bytes * params / sharded / (gpu.hbm_bytes_per_s * eff.hbm)
    overhead = st.step_overhead_s + m * micro
    bubble = np.maximum(bubble - m * micro, 0.0)
    return TimeBreakdown(compute, recompute, tp_comm, pp_comm, dp_comm, bubble, optimizer, overhead)


def _dp_exposed_s(model: ModelSpec, cluster: ClusterSpec, layouts, lc: LayerCompute, params, st) -> np.ndarray:
    """Data-parallel communication left on the critical path [s].
    Overlapped: gradient buckets reduce during the last micro-batch's backward, parameters gather
    during the first forward (Megatron overlap_grad_reduce / overlap_param_gather); a plain
    all-reduce of gradients can only hide behind backward. The first rank's stage (the one holding
    the most layers) bounds the window. ZeRO-2 moves gradients every micro-batch and overlaps them
    with all of compute. ZeRO-3 overlaps layer by layer: the next unit's gather runs while this
    layer computes, so a layer whose gather outlasts its compute exposes the difference
    (Zhao et al. 2023 Sec. 3.3, FSDP prefetching), and every unit pays the stack's hook cost."""
    prec = precision(model.training.precision)
    raw = comm.dp_comm_s(cluster, params, layouts, prec)
    m = layouts.num_microbatches.astype(float)
    first = rank_layers(model, layouts, 0)
    stack = model.training.stack
    gather, reduce = comm.zero3_layer_comm_s(cluster, model, layouts, prec, stack)
    units = comm.zero3_units_per_layer(model) if stack.zero3_gather == "module" else 1
    hooks_s = 3 * units * st.zero3_unit_overhead_us * US  # forward gather, backward gather, reduce
    per_layer = (np.maximum(gather - lc.fwd_s, 0.0) + np.maximum(gather + reduce - lc.bwd_s - lc.recompute_s, 0.0))
    # Not overlapped, every unit's gathers and reduce-scatter wait in turn.
    zero3_raw = m * first * (2 * gather + reduce + hooks_s)
    zero3 = np.minimum(m * first * (per_layer + hooks_s), zero3_raw)
    if not model.training.dp_comm_overlap:
        return np.where(layouts.zero >= 3, zero3_raw, raw)
    work_layer = lc.fwd_s + lc.bwd_s
    stage_fb = first * work_layer
    window = np.select([layouts.zero == 0, layouts.zero == 1], [first * lc.bwd_s, stage_fb], m * stage_fb)
    hidden = np.maximum(raw - window, st.dp_overlap_exposed * raw)
    return np.where(layouts.zero >= 3, np.maximum(zero3, st.dp_overlap_exposed * zero3_raw), hidden)
