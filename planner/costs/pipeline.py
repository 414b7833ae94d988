"""Step time of a pipelined, data- and tensor-parallel step, and its breakdown.

Schedules (Narayanan et al. 2021, Sec. 2.2): 1F1B takes (m + p - 1) stage-times; the interleaved
schedule with v chunks per rank shrinks the bubble to (p - 1)/v. With unequal stages (the last one
also computes the logits) the slowest rank sets the steady state:
step = m * t_max + (sum_r t_r - t_max) / v, which gives both formulas when all t_r are equal.
Pipeline sends: two per micro-batch per chunk on the critical path, plus the fill.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..axes import AXES, degrees
from ..space import RECOMPUTE_FULL
from ..units import US
from ..specs import ClusterSpec, ModelSpec
from . import comm
from .compute import LayerCompute, layer_compute
from ..arrays import take, unique_rows
from ..layers import layer_kinds
from .memory import rank_param_split
from .stages import PipelineRanks, pipeline_ranks


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

    @property
    def total(self) -> np.ndarray:
        return (
            self.compute + self.recompute + self.tp_comm + self.cp_comm + self.ep_comm + self.pp_comm + self.dp_comm
            + self.bubble + self.optimizer + self.overhead
        )


@dataclass(frozen=True)
class KindTimes:
    """Per-layer times of one kind of layer (dense or MoE) per micro-batch [s] (arrays over layouts)."""

    count: int  # layers of this kind in the model
    moe: bool
    lc: LayerCompute
    tp: np.ndarray  # exposed TP communication, all passes
    cp: np.ndarray  # exposed context-parallel exchange
    ep: np.ndarray  # token dispatch and combine

    @property
    def work(self) -> np.ndarray:
        return self.lc.fwd_s + self.lc.bwd_s

    @property
    def layer(self) -> np.ndarray:
        """Everything one layer costs per micro-batch."""
        return self.work + self.lc.recompute_s + self.tp + self.cp + self.ep


# The axes a layer's compute and its TP, CP and EP communication depend on (not dp, pp, vpp, ZeRO).
LAYER_AXES = ("tp", "cp", "micro_batch", "sequence_parallel", "recompute", "ep", "etp")


def kind_times(model: ModelSpec, cluster: ClusterSpec, layouts) -> list[KindTimes]:
    """Per-layer times of each kind, computed once per distinct combination of LAYER_AXES (a full
    space repeats each many times over dp, pp, vpp and ZeRO) and spread back over the rows."""
    few, inverse = _distinct_kind_times(model, cluster, layouts)
    kinds = few if inverse is None else [KindTimes(k.count, k.moe, take(k.lc, inverse), k.tp[inverse], k.cp[inverse],
                                                   k.ep[inverse]) for k in few]
    if not model.training.moe_a2a_overlap:
        return kinds
    # The overlap depends on the schedule (pp, vpp, micro-batches), not only on LAYER_AXES.
    return [KindTimes(k.count, k.moe, k.lc, k.tp, k.cp, ep_exposed_s(layouts, k.lc, k.ep)) if k.moe else k
            for k in kinds]


def layer_rows(layouts) -> tuple[np.ndarray, np.ndarray]:
    """unique_rows of LAYER_AXES: what a layer costs, in time and in stored activations, follows them."""
    return unique_rows([getattr(layouts, a) for a in LAYER_AXES])


def _distinct_kind_times(model: ModelSpec, cluster: ClusterSpec, layouts, rows: tuple | None = None) -> tuple:
    """(kind times of each distinct combination of LAYER_AXES, which combination each row has; None
    when every row is one). `rows`: layer_rows(layouts), when already known."""
    first, inverse = rows or layer_rows(layouts)
    if first.size == len(layouts):
        return _kind_times(model, cluster, layouts), None
    return _kind_times(model, cluster, layouts.take(first)), inverse


@dataclass(frozen=True)
class KindSums:
    """What a step reads of the kinds of layer (arrays over layouts): each kind's `layer`, the sums
    over the model's layers of `layer`, `work`, recomputation and exposed TP, CP and EP
    communication, the logits, and mean_layer."""

    layers: tuple
    layer: np.ndarray
    work: np.ndarray
    recompute: np.ndarray
    tp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    logits: np.ndarray
    mean: LayerCompute


def kind_sums(model: ModelSpec, cluster: ClusterSpec, layouts, rows: tuple | None = None) -> tuple[KindSums, tuple]:
    """(KindSums, whether each kind is MoE). They follow LAYER_AXES alone (without moe_a2a_overlap),
    so they are summed once per distinct combination and only the sums spread back over the rows.
    `rows`: layer_rows(layouts), when already known."""
    if model.training.moe_a2a_overlap:
        kinds, inverse = kind_times(model, cluster, layouts), None
    else:
        kinds, inverse = _distinct_kind_times(model, cluster, layouts, rows)

    def total(part):
        return sum(k.count * part(k) for k in kinds)

    sums = KindSums(tuple(k.layer for k in kinds), total(lambda k: k.layer), total(lambda k: k.work),
                    total(lambda k: k.lc.recompute_s), total(lambda k: k.tp), total(lambda k: k.cp),
                    total(lambda k: k.ep), kinds[0].lc.logits_fwd_bwd_s, mean_layer(kinds))
    if inverse is not None:
        sums = replace(take(sums, inverse), layers=tuple(x[inverse] for x in sums.layers))
    return sums, tuple(k.moe for k in kinds)


def ep_exposed_s(layouts, lc: LayerCompute, ep) -> np.ndarray:
    """Token dispatch and combine of one MoE layer per micro-batch left exposed by the combined-1F1B
    schedule of training.moe_a2a_overlap (Megatron-Core --overlap-moe-expert-parallel-comm with
    --delay-wgrad-compute; megatron/core/pipeline_parallel/combined_1f1b.py): a forward runs beside
    another micro-batch's backward, so the forward's all-to-alls (half of `ep`, no full recompute)
    hide behind that layer's backward and recomputation, the backward's behind its forward; only
    what outlasts them shows. Unpaired units expose all: Megatron runs 2 (p - r - 1) + (v - 1) p + 1
    warm-up forwards on rank r (schedules.py, one more with the overlap) and as many lone backwards,
    on average v p of a rank's m v units, so p / m of every layer's all-to-alls (1 / m without a
    pipeline: the first forward and the last backward; all of them with one micro-batch).
    Megatron refuses the overlap with full recomputation and with pp > 1 without vpp (arguments.py):
    there nothing hides."""
    m = layouts.num_microbatches.astype(float)
    paired = np.maximum(ep / 2 - lc.bwd_s - lc.recompute_s, 0.0) + np.maximum(ep / 2 - lc.fwd_s, 0.0)
    lone = np.minimum(layouts.pp / m, 1.0)
    allowed = (layouts.recompute != RECOMPUTE_FULL) & ((layouts.pp == 1) | (layouts.vpp > 1))
    return np.where(allowed, lone * ep + (1.0 - lone) * paired, ep)


def _kind_times(model: ModelSpec, cluster: ClusterSpec, layouts) -> list[KindTimes]:
    act = model.training.numerics.activation_bytes
    out = []
    for kind in layer_kinds(model):
        lc = layer_compute(model, cluster.gpu, layouts, kind)
        pairs = 2.0 if not kind.is_moe else 1.0 + (1.0 if any(m.name == "shared_up" for m in kind.tp_matrices) else 0.0)
        tp = comm.tp_comm_per_layer_s(cluster, model.hidden, model.seq_len, layouts, act, pairs)
        tp = tp * comm.tp_passes(layouts) * comm.tp_exposed(model, cluster)
        cp = comm.cp_comm_per_layer_s(cluster, model, layouts, lc)
        ep = comm.ep_comm_per_layer_s(cluster, model, layouts, kind) if kind.is_moe else np.zeros(len(layouts))
        out.append(KindTimes(kind.count, kind.is_moe, lc, tp, cp, ep))
    return out


def mean_layer(kinds: list[KindTimes]) -> LayerCompute:
    """The model's average layer as the data-parallel overlap windows see it: its wall time,
    with the exposed CP and EP exchange (a third forward, two thirds backward), so that time
    hidden behind attention is not hidden again behind the gradient reduction."""
    total = sum(k.count for k in kinds)

    def avg(part):
        return sum(k.count * part(k) for k in kinds) / total

    return LayerCompute(avg(lambda k: k.lc.fwd_s + (k.cp + k.ep) / 3), avg(lambda k: k.lc.bwd_s + 2 * (k.cp + k.ep) / 3),
                        avg(lambda k: k.lc.recompute_s), kinds[0].lc.logits_fwd_bwd_s)


def rank_time_s(kinds: list[KindTimes], ranks: PipelineRanks) -> np.ndarray:
    """Time of each rank of `ranks` per micro-batch [s] ((k, n)): its layers' work, recomputation
    and exposed TP/CP/EP communication, and the logits on the last rank."""
    return _rank_time_s([k.layer for k in kinds], [k.moe for k in kinds], kinds[0].lc.logits_fwd_bwd_s, ranks)


def _rank_time_s(layers, moe, logits, ranks: PipelineRanks) -> np.ndarray:
    """rank_time_s from each kind's `layer` and whether it is MoE."""
    out = ranks.last * logits
    for layer, is_moe in zip(layers, moe):
        held = ranks.moe_layers if is_moe else ranks.layers - ranks.moe_layers
        out = out + held * layer
    return out


def step_time(model: ModelSpec, cluster: ClusterSpec, layouts, ranks: PipelineRanks | None = None,
              params: tuple | None = None, rows: tuple | None = None) -> TimeBreakdown:
    """`ranks`: the pipeline ranks to evaluate (default: the bounding ranks, which bound the others);
    `params`: rank_param_split of those ranks, `rows`: layer_rows(layouts), when already known
    (planner/score.py)."""
    gpu = cluster.gpu
    eff = gpu.efficiency
    st = model.training.stack.for_gpu(gpu.name)
    ranks = ranks or pipeline_ranks(model, layouts)
    m = layouts.num_microbatches.astype(float)
    p = layouts.pp.astype(float)
    v = layouts.vpp.astype(float)
    sums, moe = kind_sums(model, cluster, layouts, rows)
    logits = sums.logits

    # The slowest rank sets the steady state; every layer and the logits run once per micro-batch
    # somewhere, whatever the split, so the sum over ranks needs no per-rank arrays.
    # Per micro-batch and model chunk, every rank pays the stack's fixed scheduling cost.
    micro = st.microbatch_overhead_s * v
    t_max = _rank_time_s(sums.layers, moe, logits, ranks).max(axis=0) + micro
    t_sum = sums.layer + logits + p * micro
    pipeline = m * t_max + (t_sum - t_max) / v

    # Averages over ranks: what each GPU does; the rest of `pipeline` is bubble and imbalance.
    def per_gpu(total):
        return m * total / p

    compute = per_gpu(sums.work) + m * logits / p
    recompute = per_gpu(sums.recompute)
    tp_comm, cp_comm, ep_comm = per_gpu(sums.tp), per_gpu(sums.cp), per_gpu(sums.ep)
    bubble = np.maximum(pipeline - compute - recompute - tp_comm - cp_comm - ep_comm, 0.0)

    prec = model.training.numerics
    pp_comm = np.where(layouts.pp > 1, 2.0 * (m * v + p - 1) * _p2p_s(model, cluster, layouts), 0.0)

    params = params or rank_param_split(model, layouts, ranks=ranks)
    dense, experts = (x.max(axis=0) for x in np.broadcast_arrays(*params))
    raw_dense, raw_experts, gather, reduce = _dp_traffic(model, cluster, layouts, dense, experts)
    most, fewest = ranks.layers.max(axis=0), ranks.layers.min(axis=0)
    mean = sums.mean
    dp_comm = _dp_exposed_s(model, layouts, mean, raw_dense, gather, reduce, st, most, fewest)
    if model.moe is not None:
        dp_comm = dp_comm + _dp_exposed_s(model, layouts, mean, raw_experts, 0.0, 0.0, st, most, fewest)

    sharded = np.where(layouts.zero >= 1, layouts.dp * layouts.cp, 1)
    expert_sharded = np.where(layouts.zero >= 1, comm.expert_data_group(layouts)[0], 1)
    # Adam over this GPU's shard, and (FP8) casting its weights once per step (planner/precision.py).
    step_bytes = st.optimizer_step_factor * prec.adam_step_bytes + prec.quantize_bytes / 2
    optimizer = step_bytes * (dense / sharded + experts / expert_sharded) / (gpu.hbm_bytes_per_s * eff.hbm)
    overhead = st.step_overhead_s + m * micro
    bubble = np.maximum(bubble - m * micro, 0.0)
    return TimeBreakdown(compute, recompute, tp_comm, pp_comm, dp_comm, bubble, optimizer, overhead, cp_comm, ep_comm)


# The axes a pipeline send depends on: the degrees (group placement) and the tensor's size.
P2P_AXES = (*(a.name for a in degrees(AXES)), "micro_batch", "sequence_parallel")


def _p2p_s(model: ModelSpec, cluster: ClusterSpec, layouts) -> np.ndarray:
    """comm.pp_p2p_s once per distinct combination of P2P_AXES, spread back over the rows."""
    act = model.training.numerics.activation_bytes
    first, inverse = unique_rows([getattr(layouts, a) for a in P2P_AXES])
    if first.size == len(layouts):
        return comm.pp_p2p_s(cluster, model.hidden, model.seq_len, layouts, act)
    return comm.pp_p2p_s(cluster, model.hidden, model.seq_len, layouts.take(first), act)[inverse]


# The axes dense data-parallel traffic and ZeRO-3's per-layer traffic depend on (the dense
# parameters per GPU follow tp, pp and vpp); the routed experts' follow their own group (below).
DP_AXES = ("tp", "cp", "dp", "pp", "vpp", "micro_batch", "zero")


def _dp_traffic(model: ModelSpec, cluster: ClusterSpec, layouts, dense, experts) -> tuple:
    """(dense gradient/parameter traffic per step, the routed experts', one ZeRO-3 layer gather,
    its reduce-scatter) [s] before overlap, once per distinct combination of the axes each reads."""
    first, inverse = unique_rows([getattr(layouts, a) for a in DP_AXES])
    sub = layouts.take(first)
    prec = model.training.numerics
    raw_dense = comm.dp_comm_s(cluster, dense[first], sub, prec)
    gather, reduce = comm.zero3_layer_comm_s(cluster, model, sub, prec, model.training.stack)
    raw_experts = _expert_dp_traffic(model, cluster, layouts, experts) if model.moe else 0 * raw_dense[inverse]
    return raw_dense[inverse], raw_experts, gather[inverse], reduce[inverse]


def _expert_dp_traffic(model: ModelSpec, cluster: ClusterSpec, layouts, experts) -> np.ndarray:
    """The routed experts' data-parallel traffic, once per distinct expert-data group (size,
    stride), pp, vpp (their parameters per GPU follow pp, vpp and ep*etp, the stride), micro-batches
    and ZeRO stage: a twelfth of the rows of DeepSeek-V3's space."""
    size, stride = comm.expert_data_group(layouts)
    first, inverse = unique_rows([size, stride, layouts.pp, layouts.vpp, layouts.num_microbatches, layouts.zero])
    sub = layouts.take(first)
    raw = comm.dp_comm_s(cluster, experts[first], sub, model.training.numerics, comm.expert_data_group(sub))
    return raw[inverse]


def _dp_exposed_s(model: ModelSpec, layouts, lc: LayerCompute, raw, gather, reduce, st, most, fewest) -> np.ndarray:
    """Data-parallel communication left on the critical path [s].
    Overlapped: gradient buckets reduce during the last micro-batch's backward, parameters gather
    during the first forward (Megatron overlap_grad_reduce / overlap_param_gather); a plain
    all-reduce of gradients can only hide behind backward. The stage holding the most layers
    (`most`; `fewest`: the least, over the ranks evaluated) bounds the window. ZeRO-2 moves gradients every micro-batch and overlaps them
    with all of compute. ZeRO-3 overlaps layer by layer: the next unit's gather runs while this
    layer computes, so a layer whose gather outlasts its compute exposes the difference
    (Zhao et al. 2023 Sec. 3.3, FSDP prefetching), and every unit pays the stack's hook cost."""
    m = layouts.num_microbatches.astype(float)
    first = most
    stack = model.training.stack
    units = comm.zero3_units_per_layer(model) if stack.zero3_gather == "module" else 1
    hooks_s = 3 * units * st.zero3_unit_overhead_us * US  # forward gather, backward gather, reduce
    per_layer = (np.maximum(gather - lc.fwd_s, 0.0) + np.maximum(gather + reduce - lc.bwd_s - lc.recompute_s, 0.0))
    # Not overlapped, every unit's gathers and reduce-scatter wait in turn.
    zero3_raw = m * first * (2 * gather + reduce + hooks_s)
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
    return np.where(layouts.zero >= 3, np.maximum(zero3, st.dp_overlap_exposed * zero3_raw), hidden)
