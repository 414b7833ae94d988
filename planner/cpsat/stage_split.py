"""Uneven pipeline stages chosen with CP-SAT: transformer layers per virtual stage.

Why: the default split (planner/costs/pipeline_ranks.py: L // (p v) per virtual stage, the extra layers
first) leaves the first rank with the embedding and the last with the logits and the loss on top
of full stages. Llama 3 405B trained 126 layers on 16 ranks with an interleaved schedule and one
layer fewer on the first and the last stage (Dubey et al. 2024 Sec. 3.3.2); 128k-256k vocabularies
need lighter last stages still. Megatron-LM states such splits with --decoder-first/last-pipeline-
num-layers or --pipeline-model-parallel-layout.

Schema -> variables -> constraints -> solve -> validate (shared CP-SAT notes):
- schema: `SplitInstance`, the layout's costs as linear coefficients, in floats. Per micro-batch,
  rank r runs its chunks' layers (virtual stages j p + r), the last rank also the logits:
    T_r = sum_j (t_dense dense_{jp+r} + t_moe moe_{jp+r}) + [r = p - 1] t_logits.
  The step is m T_max + (sum_r T_r - T_max) / v (planner/costs/pipeline.py) and sum_r T_r does not
  depend on the split, so the split minimises T_max. Memory of rank r at each of its peaks k
  (planner/costs/pipeline_ranks.py inflight_chunks: c_{k,j} micro-batches of chunk j in flight) is
    M_r,k = const + [r = 0] first + [r = p - 1] last
            + sum_j (w_dense + c_{k,j} a_dense) dense_{jp+r} + (w_moe + c_{k,j} a_moe) moe_{jp+r},
  with w the states of a held layer and a its stored activations (planner/costs/memory.py, probed
  so that both models agree). The embedding and the logits are these constants: the pseudo-layers.
- variables: n_s >= 1 layers per virtual stage (n_s >= 0 only when there are fewer layers than
  stages; an empty stage, holding only the embedding or the loss as in Megatron's layout "E|t...|L",
  is the user's to ask for with --stage-layers); with MoE, the MoE layers of stage s follow from the
  cumulative count: moe_before(x) = max(x - dense_layers, 0) // layer_every.
- constraints: sum n_s = L, M_r,k <= usable memory, T_max >= T_r.
- objective, lexicographic (two solves): T_max (integers: the lightest layer's time / 1000, one
  named function), then the lowest memory peak among the fastest splits.
- interleaving: a rank's chunks differ by at most one layer (the bubble stays (p - 1)/v of a
  rank's time, as planner/costs/pipeline.py counts it), except the first and the last virtual
  stage, which may be lighter (the embedding's and the loss's).
- validate: the chosen split re-scored by the cost models (`split_ranks` + planner/score.py).

V schedules (zb-v, dualpipev): chunk 1 of rank r is stage 2p - 1 - r of the micro-batch's path, so the
layers' order (MoE layers, a pattern's kinds) follows the path (`path_order`), and rank 0 holds the last
stage: the logits and the loss are rank 0's (planner/costs/pipeline_ranks.py).

Hybrid models (a layer_pattern, planner/specs/hybrid.py): a stage's cost depends on which layers it holds,
so the split is a set of cut points x_s (cumulative layers along the path) and the layers of kind k in
stage s are B_k(x_s) - B_k(x_{s-1}), B_k the pattern's cumulative count of kind k, a table read with
`add_element` (L + 1 entries). Per rank:
    T_r = sum_k t_k held_k,r + [r holds the loss] t_logits,
    M_r = const_r + [r = 0] first + [r holds the loss] last + sum_k mem_k,r held_k,r,
mem_k,r the states of a layer of kind k and its activations in flight at rank r's peak: memory.py counts a
hybrid rank's in-flight layers as the default schedule's count of the rank's layers shared out by kind
(`layers_in_flight`, linear in them), so one peak a rank.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np
from ortools.sat.python import cp_model

from planner.costs.context import JobContext, job_context
from planner.costs.memory import memory_per_rank
from planner.costs.pipeline_ranks import (PipelineRanks, inflight_chunks, is_v, layout_default_split, path_order,
                                          split_counts)
from planner.specs.hybrid import pattern_layers_before
from planner.specs.layers import layer_kinds
from planner.cpsat.solve import solve_model
from planner.specs import ClusterSpec, ModelSpec
from planner.units import GIB

TIME_STEPS_PER_LAYER = 1000  # integer time unit: the lightest layer's time / 1000
KIB = 1024  # integer memory unit


@dataclass(frozen=True)
class SplitInstance:
    """One layout's split problem in floats (seconds per micro-batch, bytes)."""

    layers: int
    pp: int
    vpp: int
    t_dense_s: float  # one dense layer per micro-batch, all passes and exposed TP/CP communication
    t_moe_s: float  # one MoE layer (0 without MoE)
    t_logits_s: float  # the output layer and the loss on the last rank
    held_bytes: tuple[float, float]  # states of a held (dense, MoE) layer
    act_bytes: tuple[float, float]  # stored activations of a (dense, MoE) layer per micro-batch
    const_bytes: float  # what every rank holds whatever its layers
    first_bytes: float  # the embedding on rank 0
    last_bytes: float  # the output layer and the logits on the last rank
    usable_bytes: float
    peaks: tuple[np.ndarray, ...]  # per rank: (k, v) micro-batches in flight per chunk at each peak
    dense_layers: int = 0  # MoE: the first k layers are dense
    layer_every: int = 0  # MoE: then every n-th layer is MoE (0: no MoE)
    v_shape: bool = False  # a V schedule: the path runs back through the ranks, the loss on rank 0
    # A hybrid model (module docstring), else empty: the pattern, each kind's characters (layer_kinds
    # order), one layer of each kind per micro-batch [s], per rank (held states + activations in flight
    # of a layer of each kind, what the rank holds whatever its layers) [bytes].
    pattern: str = ""
    kind_chars: tuple[str, ...] = ()
    t_kind_s: tuple[float, ...] = ()
    kind_bytes: tuple[tuple[float, ...], ...] = ()
    rank_const_bytes: tuple[float, ...] = ()

    @property
    def stages(self) -> int:
        return self.pp * self.vpp

    @property
    def loss_rank(self) -> int:
        """The rank holding the last stage (the logits and the loss)."""
        return 0 if self.v_shape else self.pp - 1

    @property
    def end_stages(self) -> tuple[int, int]:
        """The first and the last stage of the path, in schedule order (the embedding's, the loss's)."""
        return 0, self.pp if self.v_shape else self.stages - 1

    def path(self, split) -> list:
        """Per-stage values from schedule order to the path's order and back (`path_order`)."""
        return path_order(split, self.pp, self.v_shape)

    def moe_of(self, split: np.ndarray) -> np.ndarray:
        """MoE layers per virtual stage of a split (ModelSpec.moe_layers_before), schedule order."""
        if not self.layer_every:
            return np.zeros_like(split)
        path = np.asarray(self.path(split))
        ends = np.cumsum(path)

        def before(x):
            return np.maximum(x - self.dense_layers, 0) // self.layer_every

        return np.asarray(self.path(before(ends) - before(ends - path)))

    def kind_counts(self, split) -> np.ndarray:
        """(kinds, stages): a hybrid split's layers of each kind per virtual stage, schedule order."""
        path = np.asarray(self.path(split))
        ends = np.cumsum(path)
        hits = [np.concatenate([[0], np.cumsum([c in chars for c in self.pattern])]) for chars in self.kind_chars]
        return np.array([self.path(h[ends] - h[ends - path]) for h in hits], dtype=np.int64)

    def coefficients(self) -> dict:
        """The float coefficients under the names integer_coefficients gives their integers."""
        return dict(t_dense=self.t_dense_s, t_moe=self.t_moe_s, t_logits=self.t_logits_s, held=self.held_bytes,
                    act=self.act_bytes, const=self.const_bytes, first=self.first_bytes, last=self.last_bytes,
                    usable=self.usable_bytes, t_kind=self.t_kind_s, kind_mem=self.kind_bytes,
                    rank_const=self.rank_const_bytes)

    def rank_time_s(self, split) -> np.ndarray:
        """T_r per micro-batch of each rank (module docstring)."""
        return _rank_times(self, self.coefficients(), split)

    def rank_memory_bytes(self, split) -> np.ndarray:
        """max_k M_r,k of each rank (module docstring)."""
        c = self.coefficients()
        return np.array([_peak_memory(self, c, split, r).max() for r in range(self.pp)])


@dataclass(frozen=True)
class SplitResult:
    status: str  # OPTIMAL | FEASIBLE | INFEASIBLE | MODEL_INVALID | UNKNOWN
    stage_layers: tuple[int, ...] | None  # layers per virtual stage, schedule order (stage j p + r)
    t_max_s: float | None  # the slowest rank per micro-batch under the chosen split
    default_t_max_s: float  # ... under the default split
    objective: int | None  # the slowest rank's integer time (integer_coefficients' unit)
    bound: float | None
    wall_s: float
    peak_memory_gib: float | None = None  # the second objective: the highest rank's peak


def instance(job: JobContext, usable_gib: float) -> SplitInstance:
    """The split problem of a one-row layout (`job.layouts`), its coefficients read off the cost
    models: the per-layer times of the job context, memory probed from memory_per_rank."""
    model, layout, kinds = job.model, job.layouts, job.kinds
    assert len(layout) == 1
    p, v, m = int(layout.pp[0]), int(layout.vpp[0]), int(layout.num_microbatches[0])
    v_shape = bool(is_v(layout)[0])
    logits = float(kinds[0].lc.logits_fwd_bwd_s[0])
    if model.layer_pattern is not None:
        kind_bytes, rank_const, first, last = _hybrid_memory_terms(job)
        t_kind = tuple(float(k.layer[0]) for k in kinds)  # job.kinds follow layer_kinds
        return SplitInstance(model.layers, p, v, 0.0, 0.0, logits, (0.0, 0.0), (0.0, 0.0), 0.0, first, last,
                             usable_gib * GIB, tuple(np.zeros((1, v), dtype=np.int64) for _ in range(p)),
                             v_shape=v_shape, pattern=model.layer_pattern,
                             kind_chars=tuple(k.chars for k in layer_kinds(model)), t_kind_s=t_kind,
                             kind_bytes=kind_bytes, rank_const_bytes=rank_const)
    t = {k.moe: float(k.layer[0]) for k in kinds}
    held, act, const, first, last = _memory_terms(job)
    moe = model.moe
    return SplitInstance(model.layers, p, v, t.get(False, t.get(True)), t.get(True, 0.0),
                         logits, held, act, const, first, last, usable_gib * GIB,
                         tuple(inflight_chunks(p, v, m, r) for r in range(p)),
                         moe.dense_layers if moe else 0, moe.layer_every if moe else 0, v_shape)


def _memory_terms(job: JobContext):
    """Linear memory coefficients probed from memory_per_rank with made-up ranks: the difference
    of two probes is one held layer, one layer in flight, the embedding or the logits. Every probe
    holds a layer of each kind, so the one layer rebuilt by full recomputation stays constant."""
    model = job.model
    kinds = 2 if model.moe is not None and model.moe.layer_every and model.layers > model.moe.dense_layers else 1
    base = np.array([1, kinds == 2])  # (dense, MoE) layers held by every probe
    probes = [  # dense held, MoE held, dense in flight, MoE in flight, first, last
        (*base, 0, 0, 0, 0), (base[0] + 1, base[1], 0, 0, 0, 0), (base[0], base[1] + 1, 0, 0, 0, 0),
        (*base, 1, 0, 0, 0), (*base, 0, 1, 0, 0), (*base, 0, 0, 1, 0), (*base, 0, 0, 0, 1)]
    a = np.array(probes, dtype=np.int64).T[:, :, None]  # (field, probe, 1)
    ranks = PipelineRanks(np.zeros((len(probes), 1), dtype=np.int64), a[0] + a[1], a[1], a[4] == 1, a[5] == 1,
                          (a[2] + a[3]).astype(float), a[3].astype(float))
    total = memory_per_rank(replace(job, ranks=ranks)).total[:, 0] * GIB
    d = total - total[0]
    held = (float(d[1]), float(d[2]) if kinds == 2 else 0.0)
    act = (float(d[3]), float(d[4]) if kinds == 2 else 0.0)
    const = float(total[0] - held[0] * base[0] - held[1] * base[1])
    return held, act, const, float(d[5]), float(d[6])


def _hybrid_memory_terms(job: JobContext):
    """A hybrid model's linear memory coefficients, probed as _memory_terms: per rank, a probe holding
    one layer of each kind and one probe a kind with one layer more; the first and the last flags at
    rank 0. Returns (per rank per kind bytes, per rank constant, first, last)."""
    model, p = job.model, int(job.layouts.pp[0])
    K = len(layer_kinds(model))
    moe_kind = [k.is_moe for k in layer_kinds(model)]
    rows = []  # (rank, counts by kind, first, last)
    for r in range(p):
        rows.append((r, [1] * K, False, False))
        rows += [(r, [1 + (i == k) for i in range(K)], False, False) for k in range(K)]
    rows += [(0, [1] * K, True, False), (0, [1] * K, False, True)]
    counts = np.array([c for _, c, _, _ in rows], dtype=np.int64)  # (probe, kind)
    col = lambda x: np.asarray(x)[:, None]  # noqa: E731  (probe, 1 layout)
    ranks = PipelineRanks(col([r for r, *_ in rows]).astype(np.int64), col(counts.sum(axis=1)),
                          col(counts[:, moe_kind].sum(axis=1)), col([f for *_, f, _ in rows]),
                          col([last for *_, last in rows]), by_kind=tuple(col(counts[:, k]) for k in range(K)))
    total = memory_per_rank(replace(job, ranks=ranks)).total[:, 0] * GIB
    kind_bytes, rank_const = [], []
    for r in range(p):
        base = total[r * (K + 1)]
        per = tuple(float(total[r * (K + 1) + 1 + k] - base) for k in range(K))
        kind_bytes.append(per)
        rank_const.append(float(base - sum(per)))
    base0 = total[0]
    return tuple(kind_bytes), tuple(rank_const), float(total[-2] - base0), float(total[-1] - base0)


def integer_coefficients(inst: SplitInstance) -> dict:
    """The one place floats become integers: times in units of the lightest layer / 1000 (rounded),
    memory in KiB (coefficients rounded up, the limit down: never looser than the floats)."""
    unit = min(x for x in (inst.t_dense_s, inst.t_moe_s, *inst.t_kind_s) if x > 0) / TIME_STEPS_PER_LAYER
    return dict(
        t_dense=int(round(inst.t_dense_s / unit)), t_moe=int(round(inst.t_moe_s / unit)),
        t_logits=int(round(inst.t_logits_s / unit)), time_unit_s=unit,
        held=tuple(int(np.ceil(x / KIB)) for x in inst.held_bytes), act=tuple(int(np.ceil(x / KIB)) for x in inst.act_bytes),
        const=int(np.ceil(inst.const_bytes / KIB)), first=int(np.ceil(inst.first_bytes / KIB)),
        last=int(np.ceil(inst.last_bytes / KIB)), usable=int(np.floor(inst.usable_bytes / KIB)),
        t_kind=tuple(int(round(x / unit)) for x in inst.t_kind_s),
        kind_mem=tuple(tuple(int(np.ceil(x / KIB)) for x in row) for row in inst.kind_bytes),
        rank_const=tuple(int(np.ceil(x / KIB)) for x in inst.rank_const_bytes))


@dataclass
class _Model:
    model: cp_model.CpModel
    n: list  # layers per virtual stage
    t_max: cp_model.IntVar
    rank_memory: list  # per rank: {peak row: linear expression}
    coefficients: dict
    cuts: list = ()  # a hybrid split's cut points along the path and, per kind, B_k at each (`_kind_layers`)
    seen: list = ()

    def hint(self, inst: SplitInstance, split) -> None:
        """Hint a split (schedule order) and what follows from it: the cut points and the kinds before
        each (without them a hybrid model's short solve may find no solution at all)."""
        for var, value in zip(self.n, split):
            self.model.add_hint(var, int(value))
        ends = np.cumsum(inst.path(split))
        for var, x in zip(self.cuts, ends[:-1].tolist()):
            self.model.add_hint(var, int(x))
        for chars, row in zip(inst.kind_chars, self.seen):
            for var, x in zip(row, ends[:-1].tolist()):
                self.model.add_hint(var, sum(ch in chars for ch in inst.pattern[:x]))


def build_model(inst: SplitInstance, peaks: list[np.ndarray] | None = None) -> _Model:
    """Variables and constraints (module docstring), without objective. `peaks`: per rank, the
    rows of inst.peaks to constrain (default: all; `solve` adds them lazily: a rank has up to p v
    peaks and few bind)."""
    c = integer_coefficients(inst)
    L, p, v, S = inst.layers, inst.pp, inst.vpp, inst.stages
    model = cp_model.CpModel()
    # Every virtual stage holds a layer when there are enough (an empty stage, Megatron's "E|" or
    # "|L", only by the user's own --stage-layers): an idle rank is a bubble, not a saving.
    least = 1 if L >= S else 0
    n = [model.new_int_var(least, L, f"layers_stage_{s}") for s in range(S)]
    model.add(sum(n) == L)
    moe = inst.path(_moe_layers(model, inst, inst.path(n))) if inst.layer_every else [0] * S
    dense = [n[s] - moe[s] for s in range(S)]
    kinds, cuts, seen = _kind_layers(model, inst, inst.path(n)) if inst.pattern else ([], [], [])
    kinds = [inst.path(k) for k in kinds]

    horizon = L * max(c["t_dense"], c["t_moe"], *c["t_kind"]) + c["t_logits"]
    t_max = model.new_int_var(0, horizon, "t_max")
    memory = []
    for r in range(p):
        chunks = [j * p + r for j in range(v)]
        logits = c["t_logits"] if r == inst.loss_rank else 0
        if kinds:
            held = [sum(k[s] for s in chunks) for k in kinds]
            time_r = sum(t * h for t, h in zip(c["t_kind"], held)) + logits
        else:
            time_r = sum(c["t_dense"] * dense[s] + c["t_moe"] * moe[s] for s in chunks) + logits
        model.add(time_r <= t_max)
        if v > 1:
            # The chunks of a rank differ by at most one layer, so that the interleaved bubble
            # stays (p - 1)/v of a rank's time; only the first and the last virtual stage (the
            # embedding's and the loss's) may be lighter still (Llama 3 405B).
            low = model.new_int_var(0, L, f"chunk_layers_rank_{r}")
            for s in chunks:
                model.add(n[s] <= low + 1)
                if s not in inst.end_stages:
                    model.add(n[s] >= low)
        fixed = (c["first"] if r == 0 else 0) + (c["last"] if r == inst.loss_rank else 0)
        if kinds:  # one peak a rank (module docstring)
            exprs = {0: c["rank_const"][r] + fixed + sum(w * h for w, h in zip(c["kind_mem"][r], held))}
            model.add(exprs[0] <= c["usable"])
            memory.append(exprs)
            continue
        fixed += c["const"]
        exprs = {}
        for k in range(len(inst.peaks[r])) if peaks is None else peaks[r]:
            peak = inst.peaks[r][int(k)]
            exprs[int(k)] = fixed + sum((c["held"][0] + int(peak[j]) * c["act"][0]) * dense[s]
                                        + (c["held"][1] + int(peak[j]) * c["act"][1]) * moe[s]
                                        for j, s in enumerate(chunks))
            model.add(exprs[int(k)] <= c["usable"])
        memory.append(exprs)
    return _Model(model, n, t_max, memory, c, cuts, seen)


def _kind_layers(model: cp_model.CpModel, inst: SplitInstance, n: list) -> tuple[list, list, list]:
    """A hybrid split's layers of each kind per stage, `n` and the result along the path: cut points
    x_s = n_0 + .. + n_s, and B_k(x_s) read from the pattern's cumulative count of kind k (add_element).
    Returns (per kind the layers of each stage, the cut variables, per kind the B_k variables)."""
    L, S = inst.layers, inst.stages
    cuts, cum = [], 0
    for s in range(S - 1):
        cum = cum + n[s]
        x = model.new_int_var(0, L, f"cut_{s}")
        model.add(x == cum)
        cuts.append(x)
    out, all_seen = [], []
    for i, chars in enumerate(inst.kind_chars):
        table = [0]
        for ch in inst.pattern:
            table.append(table[-1] + (ch in chars))
        seen = []
        for s, x in enumerate(cuts):
            b = model.new_int_var(0, table[-1], f"kind_{i}_before_cut_{s}")
            model.add_element(x, table, b)
            seen.append(b)
        all_seen.append(list(seen))
        seen.append(table[-1])
        out.append([seen[s] - (seen[s - 1] if s else 0) for s in range(S)])
    return out, cuts, all_seen


def _moe_layers(model: cp_model.CpModel, inst: SplitInstance, n: list) -> list:
    """MoE layers of each virtual stage, from the cumulative layer count past the dense prefix,
    every `layer_every`-th of them MoE."""
    L = inst.layers
    moe, cum, previous, prev_after = [], 0, 0, None
    for s in range(inst.stages):
        cum = cum + n[s]
        after = model.new_int_var(0, L, f"after_dense_prefix_{s}")
        model.add_max_equality(after, [cum - inst.dense_layers, 0])
        # valid cuts that tighten the relaxation of the max: the count grows by at most n_s
        model.add(after <= cum)
        if s:
            model.add(after >= prev_after)
            model.add(after - prev_after <= n[s])
        prev_after = after
        seen = model.new_int_var(0, L, f"moe_before_end_{s}")
        model.add_division_equality(seen, after, inst.layer_every)
        model.add(inst.layer_every * seen <= after)  # the division's bounds, as linear cuts
        model.add(inst.layer_every * seen >= after - inst.layer_every + 1)
        if s:
            model.add(seen - previous <= n[s])
        moe.append(seen - previous)
        previous = seen
    return moe


def _peak_memory(inst: SplitInstance, c: dict, split, r: int) -> np.ndarray:
    """Memory of rank r at each of its peaks under `split`, in the units of `c` (bytes or KiB)."""
    n = np.asarray(split)
    fixed = (c["first"] if r == 0 else 0) + (c["last"] if r == inst.loss_rank else 0)
    if inst.pattern:
        held = inst.kind_counts(n).reshape(len(inst.kind_chars), inst.vpp, inst.pp)[:, :, r].sum(axis=1)
        return np.array([c["rank_const"][r] + fixed + np.dot(c["kind_mem"][r], held)])
    moe = inst.moe_of(n)
    dense, moe = (n - moe).reshape(inst.vpp, inst.pp)[:, r], moe.reshape(inst.vpp, inst.pp)[:, r]
    fixed += c["const"]
    return (fixed + (c["held"][0] + inst.peaks[r] * c["act"][0]) @ dense
            + (c["held"][1] + inst.peaks[r] * c["act"][1]) @ moe)


def _rank_times(inst: SplitInstance, c: dict, split) -> np.ndarray:
    """T_r of each rank under `split`, in the units of `c` (seconds or integer steps)."""
    n = np.asarray(split)
    if inst.pattern:
        per_stage = np.asarray(c["t_kind"]) @ inst.kind_counts(n)
    else:
        moe = inst.moe_of(n)
        per_stage = (n - moe) * c["t_dense"] + moe * c["t_moe"]
    ranks = per_stage.reshape(inst.vpp, inst.pp).sum(axis=0)
    ranks[inst.loss_rank] += c["t_logits"]
    return ranks


def integer_times(inst: SplitInstance, split) -> np.ndarray:
    """Integer T_r of each rank under `split` (validation and tests)."""
    return _rank_times(inst, integer_coefficients(inst), split)


def integer_peak_kib(inst: SplitInstance, split) -> int:
    """The highest integer memory of any rank at any peak [KiB] (the second objective)."""
    c = integer_coefficients(inst)
    return int(max(_peak_memory(inst, c, split, r).max() for r in range(inst.pp)))


def balanced_chunks(inst: SplitInstance, split) -> bool:
    """The chunk rule of build_model: a rank's chunks differ by at most one layer, except that the
    first and the last virtual stage may be lighter (a V schedule's rank 0, holding both, is free)."""
    n = np.asarray(split).reshape(inst.vpp, inst.pp)
    for r in range(inst.pp):
        inner = [n[j, r] for j in range(inst.vpp) if j * inst.pp + r not in inst.end_stages]
        if not inner and inst.vpp > 1:  # a V's rank 0 holds both ends: either may be lighter (build_model)
            continue
        low = min(inner) if inner else min(n[:, r])
        if max(n[:, r]) > low + 1 or (inner and max(inner) - low > 1):
            return False
    return True


def fits_integer(inst: SplitInstance, split) -> bool:
    """Whether a split meets every memory constraint of the integer model."""
    c = integer_coefficients(inst)
    return all(np.all(_peak_memory(inst, c, split, r) <= c["usable"]) for r in range(inst.pp))


# A hybrid split's element constraints (S - 1 cuts x kinds, tables of L + 1): presolve's probing spent the
# search's whole budget (0.05 deterministic s) on Nemotron-H pp 4 and found nothing; without it the same
# model solves to optimality in 0.008 (pp 4) and 0.037 (pp 8) deterministic seconds.
HYBRID_PARAMS = {"cp_model_probing_level": 0}

MAX_ROUNDS = 8  # lazy peak constraints: rounds of solve, check every peak, add the violated ones


@dataclass
class _Lazy:
    """What the rounds of one solve share: the peaks constrained so far, the hint, the time left."""

    active: list  # per rank, the rows of inst.peaks in the model
    hint: list[int]
    budget_s: float


def _solve_stage(inst: SplitInstance, c: dict, lazy: _Lazy, t_cap: int | None, seed: int):
    """Minimise the slowest rank (t_cap None), or the memory peak with the slowest rank <= t_cap,
    adding violated peaks round by round: (status, split, objective, bound)."""
    for _ in range(MAX_ROUNDS):
        m = build_model(inst, peaks=lazy.active)
        m.hint(inst, lazy.hint)
        if t_cap is None:
            m.model.minimize(m.t_max)
        else:
            m.model.add(m.t_max <= t_cap)
            peak = m.model.new_int_var(0, c["usable"], "peak_memory_kib")
            for exprs in m.rank_memory:
                for e in exprs.values():
                    m.model.add(e <= peak)
            m.model.minimize(peak)
        solver, status, name = solve_model(m.model, max(lazy.budget_s, 1e-3), seed, HYBRID_PARAMS if inst.pattern else None)
        lazy.budget_s -= solver.deterministic_time
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return name, None, None, None
        split = [int(solver.value(x)) for x in m.n]
        value = int(solver.objective_value)
        limit = c["usable"] if t_cap is None else value
        over = [np.flatnonzero(_peak_memory(inst, c, split, r) > limit) for r in range(inst.pp)]
        lazy.hint = split
        if not any(o.size for o in over):
            return name, split, value, float(solver.best_objective_bound)
        lazy.active = [np.union1d(a, o) for a, o in zip(lazy.active, over)]
    return "UNKNOWN", None, None, None


def solve(inst: SplitInstance, *, time_limit_s: float = 2.0, seed: int = 0, default: list[int] | None = None,
          memory_tiebreak: bool = True) -> SplitResult:
    """Lexicographic: the fastest slowest rank, then (`memory_tiebreak`) the lowest memory peak
    among those splits.
    Each rank starts with its highest peak under the default split; the peaks a solution violates
    (or, in the second stage, that exceed its memory objective) are added and the stage solved
    again. Every added constraint is one of the full model's, so the last answer is its optimum."""
    started = time.perf_counter()
    default = default or split_counts(inst.layers, inst.stages)
    default_t = float(inst.rank_time_s(default).max())
    c = integer_coefficients(inst)
    lazy = _Lazy([np.array([int(np.argmax(_peak_memory(inst, c, default, r)))]) for r in range(inst.pp)],
                 list(default), time_limit_s)
    name, split, objective, bound = _solve_stage(inst, c, lazy, None, seed)
    if split is None:
        return SplitResult(name, None, None, default_t, None, None, time.perf_counter() - started)
    if memory_tiebreak:
        split = _solve_stage(inst, c, lazy, objective, seed)[1] or split
    objective = _validate(inst, split, objective)
    return SplitResult(name, tuple(split), float(inst.rank_time_s(split).max()), default_t,
                       objective, bound, time.perf_counter() - started, integer_peak_kib(inst, split) * KIB / GIB)


def _validate(inst: SplitInstance, split, objective: int) -> int:
    """The split sums to L, keeps the chunk rule, meets every memory peak in the integer model and
    in floats, and its slowest rank is no slower than the solver reported; returns that rank's time
    (a FEASIBLE answer under the time limit may leave t_max above it)."""
    assert sum(split) == inst.layers and balanced_chunks(inst, split) and fits_integer(inst, split), split
    slowest = int(integer_times(inst, split).max())
    assert slowest <= objective, (integer_times(inst, split), objective)
    assert np.all(inst.rank_memory_bytes(split) <= inst.usable_bytes * (1 + 1e-9)), split
    return slowest


def split_layout(model: ModelSpec, cluster: ClusterSpec, layout, usable_gib: float, **kwargs) -> SplitResult:
    """The fastest split of a one-row layout that fits `usable_gib` per GPU."""
    inst = instance(job_context(model, cluster, layout), usable_gib)
    return solve(inst, default=layout_default_split(model, layout), **kwargs)
