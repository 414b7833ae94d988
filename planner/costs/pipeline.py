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

from ..space import Layouts
from ..specs import ClusterSpec, ModelSpec
from . import comm
from .compute import layer_compute
from .memory import layers_per_rank, parameters_per_gpu

ADAM_BYTES_PER_PARAM = 30.0  # reads fp32 master, m, v, grad; writes master, m, v and bf16 weights


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


def step_time(model: ModelSpec, cluster: ClusterSpec, layouts: Layouts) -> TimeBreakdown:
    gpu = cluster.gpu
    eff = gpu.efficiency
    m = layouts.num_microbatches.astype(float)
    p = layouts.pp.astype(float)
    v = layouts.vpp.astype(float)
    lc = layer_compute(model, gpu, layouts)

    tp_fwd = comm.tp_comm_per_layer_s(cluster, model.hidden, model.seq_len, layouts)
    full = layouts.recompute == 2
    tp_layer = tp_fwd * (2.0 + full)  # forward, backward, and the recomputed forward
    if model.training.tp_comm_overlap:
        tp_layer = tp_layer * eff.tp_overlap_exposed

    work_layer = lc.fwd_s + lc.bwd_s
    t_layer = work_layer + lc.recompute_s + tp_layer
    first, last = layers_per_rank(model, layouts)
    t_max = np.maximum(first * t_layer, last * t_layer + lc.logits_fwd_bwd_s)
    t_sum = model.layers * t_layer + lc.logits_fwd_bwd_s
    pipeline = m * t_max + (t_sum - t_max) / v

    # Averages over ranks: what each GPU does; the rest of `pipeline` is bubble and imbalance.
    per_rank = model.layers / p
    compute = m * (per_rank * work_layer + lc.logits_fwd_bwd_s / p)
    recompute = m * per_rank * lc.recompute_s
    tp_comm = m * per_rank * tp_layer
    bubble = np.maximum(pipeline - compute - recompute - tp_comm, 0.0)

    p2p = comm.pp_p2p_s(cluster, model.hidden, model.seq_len, layouts)
    pp_comm = np.where(layouts.pp > 1, 2.0 * (m * v + p - 1) * p2p, 0.0)

    params = parameters_per_gpu(model, layouts)
    dp_raw = comm.dp_comm_s(cluster, params, layouts)
    if model.training.dp_comm_overlap:
        # Gradient buckets reduce during the last micro-batch's backward, parameters gather during
        # the first forward (Megatron overlap_grad_reduce / overlap_param_gather); ZeRO-2/3 move
        # data every micro-batch and overlap it with all of compute.
        # A plain all-reduce of gradients can only hide behind backward.
        stage_fb = first * work_layer
        stage_b = first * lc.bwd_s
        window = np.select([layouts.zero == 0, layouts.zero == 1], [stage_b, stage_fb], m * stage_fb)
        dp_comm = np.maximum(dp_raw - window, eff.dp_overlap_exposed * dp_raw)
    else:
        dp_comm = dp_raw

    sharded = np.where(layouts.zero >= 1, layouts.dp, 1)
    optimizer = ADAM_BYTES_PER_PARAM * params / sharded / (gpu.hbm_gbps * 1e9 * eff.hbm)
    overhead = np.full_like(optimizer, eff.step_overhead_s)
    return TimeBreakdown(compute, recompute, tp_comm, pp_comm, dp_comm, bubble, optimizer, overhead)
