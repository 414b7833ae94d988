"""Per-layer times: what one layer of each kind (dense, MoE) costs per micro-batch, its compute
and its exposed TP, CP and EP communication (arrays over layouts). The step time
(planner/costs/pipeline.py), the stage split (planner/cpsat/stage_split.py) and the timeline
(planner/timeline.py) all read these, through the job context (planner/costs/context.py).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from planner.costs import comm, recompute
from planner.costs.compute import LayerCompute, layer_compute, moe_syncs_host, op_level_sac
from planner.costs.scan import scan_cp_s
from planner.layout.arrays import take, unique_rows
from planner.layout.space import RECOMPUTE_FULL, RECOMPUTE_SELECTIVE
from planner.specs import ClusterSpec, ModelSpec, StackConstants
from planner.specs.layers import layer_kinds


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


# The axes a layer's compute and its TP, CP and EP communication depend on (not dp, pp, vpp, ZeRO; layer_rows adds
# whether TP overlap is lost at ZeRO-2/3 where a stack's FSDP blocks it, and pp and vpp for recompute by method).
LAYER_AXES = ("tp", "cp", "micro_batch", "sequence_parallel", "recompute", "ep", "etp")


def kind_times(model: ModelSpec, cluster: ClusterSpec, st: StackConstants, layouts) -> list[KindTimes]:
    """Per-layer times of each kind, computed once per distinct combination of LAYER_AXES (a full
    space repeats each many times over dp, pp, vpp and ZeRO) and spread back over the rows."""
    few, inverse = _distinct_kind_times(model, cluster, st, layouts)
    kinds = few if inverse is None else [KindTimes(k.count, k.moe, take(k.lc, inverse), k.tp[inverse], k.cp[inverse],
                                                   k.ep[inverse]) for k in few]
    if not model.training.moe_a2a_overlap:
        return kinds
    # The overlap depends on the schedule (pp, vpp, micro-batches), not only on LAYER_AXES.
    again = recompute.recomputes_moe(model, layouts)
    # The host sync of a dropless MoE layer holds back what the host issues for the other micro-batch
    # (measured: 0.37 hidden, megatron-core.yaml); sync-free, static shapes hide all they can.
    hidden = st.moe_a2a_overlap_hidden if moe_syncs_host(model) else 1.0
    return [KindTimes(k.count, k.moe, k.lc, k.tp, k.cp, ep_exposed_s(layouts, k.lc, k.ep, again, hidden))
            if k.moe else k for k in kinds]


def layer_rows(layouts, model: ModelSpec, gpu) -> tuple[np.ndarray, np.ndarray]:
    """unique_rows of LAYER_AXES: what a layer costs, in time and in stored activations, follows them;
    and pp and vpp, when full recomputation goes by method and layers (planner/costs/recompute.py:
    the layers of a model chunk then count); and ZeRO >= 2 where the stack's FSDP costs TP overlap on
    `gpu` (comm.fsdp_blocks_tp_overlap)."""
    extra = ("pp", "vpp") if recompute.by_method(model) else ()
    columns = [getattr(layouts, a) for a in (*LAYER_AXES, *extra)]
    if comm.fsdp_blocks_tp_overlap(model, gpu):  # TP overlap lost at ZeRO-2/3
        columns.append((layouts.zero >= 2).astype(np.int64))
    return unique_rows(columns)


def _distinct_kind_times(model: ModelSpec, cluster: ClusterSpec, st: StackConstants, layouts, rows: tuple | None = None) -> tuple:
    """(kind times of each distinct combination of LAYER_AXES, which combination each row has; None
    when every row is one). `rows`: layer_rows(layouts, model, cluster.gpu), when already known."""
    first, inverse = rows or layer_rows(layouts, model, cluster.gpu)
    if first.size == len(layouts):
        return _kind_times(model, cluster, st, layouts), None
    return _kind_times(model, cluster, st, layouts.take(first)), inverse


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
    # of `layer`: what the MoE routing imbalance adds (moe.imbalance, moe.load_imbalance), the busiest
    # rank's longer expert GEMMs and all-to-alls against a balanced routing's
    imbalance: np.ndarray | float = 0.0


def kind_sums(model: ModelSpec, cluster: ClusterSpec, st: StackConstants, layouts, rows: tuple | None = None) -> tuple[KindSums, tuple]:
    """(KindSums, whether each kind is MoE). They follow layer_rows' axes alone (without moe_a2a_overlap),
    so they are summed once per distinct combination and only the sums spread back over the rows.
    `rows`: layer_rows(layouts, model, cluster.gpu), when already known."""
    if model.training.moe_a2a_overlap:
        kinds, inverse = kind_times(model, cluster, st, layouts), None
    else:
        kinds, inverse = _distinct_kind_times(model, cluster, st, layouts, rows)

    def total(part):
        return sum(k.count * part(k) for k in kinds)

    sums = KindSums(tuple(k.layer for k in kinds), total(lambda k: k.layer), total(lambda k: k.work),
                    total(lambda k: k.lc.recompute_s), total(lambda k: k.tp), total(lambda k: k.cp),
                    total(lambda k: k.ep), kinds[0].lc.logits_fwd_bwd_s, mean_layer(kinds))
    if inverse is not None:
        sums = replace(take(sums, inverse), layers=tuple(x[inverse] for x in sums.layers))
    if imbalanced(model):
        even, _ = kind_sums(balanced(model), cluster, st, layouts, rows)
        sums = replace(sums, imbalance=sums.layer - even.layer)
    return sums, tuple(k.moe for k in kinds)


def imbalanced(model: ModelSpec) -> bool:
    """Whether the model states a routing imbalance (moe.imbalance or moe.load_imbalance above 1)."""
    return model.moe is not None and (model.moe.imbalance != 1.0 or model.moe.load_imbalance != 1.0)


def balanced(model: ModelSpec) -> ModelSpec:
    """The same model with its experts' tokens force-balanced (Megatron moe_router_force_load_balancing)."""
    return model.model_copy(update=dict(moe=model.moe.model_copy(update=dict(imbalance=1.0, load_imbalance=1.0))))


def ep_comm_s(cluster: ClusterSpec, model: ModelSpec, layouts, kind) -> np.ndarray:
    """comm.ep_comm_per_layer_s of the busiest expert-parallel rank: the tokens it receives in the
    dispatch and sends in the combine are MoeSpec.busiest_rank_load(ep) x the mean rank's. comm reads
    a rank's load as moe.load_imbalance, so each distinct load is priced with a model stating it."""
    load = model.moe.busiest_rank_load(layouts.ep)
    if np.all(load == 1.0):
        return comm.ep_comm_per_layer_s(cluster, model, layouts, kind)
    out = np.empty(len(layouts))
    for value in np.unique(load):
        rows = np.flatnonzero(load == value)
        moe = model.moe.model_copy(update=dict(load_imbalance=model.moe.load_imbalance * float(value)))
        out[rows] = comm.ep_comm_per_layer_s(cluster, model.model_copy(update=dict(moe=moe)), layouts.take(rows), kind)
    return out


def ep_exposed_s(layouts, lc: LayerCompute, ep, moe_again=False, hidden: float = 1.0) -> np.ndarray:
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
    there nothing hides. Of what could hide behind the other micro-batch's compute, `hidden` does (the
    stack's moe_a2a_overlap_hidden)."""
    m = layouts.num_microbatches.astype(float)
    paired = (ep - hidden * (np.minimum(ep / 2, lc.bwd_s + lc.recompute_s) + np.minimum(ep / 2, lc.fwd_s)))
    lone = np.minimum(layouts.pp / m, 1.0)
    allowed = (layouts.recompute != RECOMPUTE_FULL) & ((layouts.pp == 1) | (layouts.vpp > 1))
    # Megatron refuses it with the moe module recomputed too (transformer_config.py): nothing hides there
    allowed = allowed & ~np.asarray(moe_again, dtype=bool)
    return np.where(allowed, lone * ep + (1.0 - lone) * paired, ep)


def _kind_times(model: ModelSpec, cluster: ClusterSpec, st: StackConstants, layouts) -> list[KindTimes]:
    """Per-layer times of each kind; block recomputation (planner/costs/recompute.py) mixes a chunk's
    fully recomputed layers with those run as without recomputation."""
    full = _kind_times_as_given(model, cluster, st, layouts)
    if model.training.recompute_method != "block" or not np.any(layouts.recompute == RECOMPUTE_FULL):
        return full
    f = recompute.full_fraction(model, layouts)
    none = _kind_times_as_given(model, cluster, st, recompute.without_full(layouts))
    return [KindTimes(a.count, a.moe, replace(a.lc, recompute_s=f * a.lc.recompute_s + (1 - f) * b.lc.recompute_s),
                      f * a.tp + (1 - f) * b.tp, f * a.cp + (1 - f) * b.cp, f * a.ep + (1 - f) * b.ep)
            for a, b in zip(full, none)]


def _kind_times_as_given(model: ModelSpec, cluster: ClusterSpec, st: StackConstants, layouts) -> list[KindTimes]:
    act = model.training.numerics.activation_bytes
    out = []
    moe_again = recompute.recomputes_moe(model, layouts)
    for kind in layer_kinds(model):
        lc = layer_compute(model, cluster.gpu, st, layouts, kind)
        shared = any(m.name == "shared_up" for m in kind.tp_matrices)
        pairs = 2.0 if not kind.is_moe else 1.0 + (1.0 if shared else 0.0)
        if kind.sublayer:  # a hybrid layer: one row-parallel output, one collective pair (a MoE one: its shared experts')
            pairs = (1.0 if shared else 0.0) if kind.is_moe else 1.0
        per_pair = comm.tp_comm_per_layer_s(cluster, model.hidden, model.seq_len, layouts, act, 1.0)
        passes = comm.tp_passes(layouts)
        if op_level_sac(model, kind):
            # torchtitan's op-level policy keeps the reduce-scatters' outputs, not the all-gathers' nor (without
            # sequence parallelism) the all-reduces': its recomputation runs those again (_save_list, @9dec370)
            again = np.where(layouts.sequence_parallel == 1, 0.5, 1.0)
            passes = passes + np.where(layouts.recompute == RECOMPUTE_SELECTIVE, again, 0.0)
        tp = pairs * per_pair * passes
        if kind.is_moe and np.any(moe_again):
            # the recomputed MoE layer runs its forward again: its shared experts' TP collectives once more
            tp = tp + np.where(moe_again, per_pair if shared else 0.0, 0.0)
            lc = replace(lc, recompute_s=lc.recompute_s + np.where(
                moe_again, recompute.moe_forward_s(model, cluster.gpu, st, layouts, kind), 0.0))
        tp = tp * comm.tp_exposed(model, cluster.gpu, st, layouts)
        if kind.mixer == "attention":
            cp = comm.cp_comm_per_layer_s(cluster, model, layouts, lc, st)
        elif kind.mixer in ("mamba", "deltanet"):
            cp = scan_cp_s(model, layouts, kind, lambda nbytes: comm.process_links(cluster, layouts, "cp", nbytes))
        else:
            cp = np.zeros(len(layouts))
        ep = ep_comm_s(cluster, model, layouts, kind) if kind.is_moe else np.zeros(len(layouts))
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
