"""Pipeline stages placed on mixed GPU pools with CP-SAT: which pool each pipeline rank runs on,
and how many layers it holds.

Why: a cluster of H100 and A100 nodes can train one job across both when each pipeline stage's
tp·cp·dp GPUs are of one type and the layers per stage balance the stage times (Metis, Um et al.,
ATC'24; AMP, Li et al., NeurIPS'22). The slow link between pools is priced at each stage boundary
that crosses it.

Schema -> variables -> constraints -> solve -> validate (as planner/cpsat/stage_split.py):
- schema: `PoolInstance`, one layout (vpp = 1) fixed in all but placement and layers, with per
  pool q the linear coefficients of planner/cpsat/stage_split.py `instance` on that pool's view of the
  cluster: t_q per layer and micro-batch, the logits l_q, and memory; pool capacities in GPUs;
  the p2p time of one activation send within pool q (comm.pp_p2p_s) and across pools.
- variables: x[r,q] Boolean (rank r on pool q), n[r,q] in 0..L layers of rank r if on pool q,
  s[r,q] Boolean (ranks r and r+1 both on pool q), c_r = 1 - sum_q s[r,q] (the boundary crosses).
- constraints: sum_q x[r,q] = 1; n[r,q] <= L x[r,q]; sum n = L; sum_r g x[r,q] <= GPUs of q
  (g = tp cp dp); memory of rank r at its 1F1B peak, k_r = min(m, p - r) micro-batches in flight:
    sum_q (const_q x[r,q] + [r=0] first_q x[r,q] + [r=p-1] last_q x[r,q] + (held_q + k_r act_q) n[r,q])
      <= sum_q usable_q x[r,q];
  rank time per micro-batch, with one activation forward and one gradient backward per boundary
  charged to the sending rank:
    T_r = sum_q t_q n[r,q] + [r=p-1] sum_q l_q x[r,q] + [r<p-1] 2 (cross c_r + sum_q within_q s[r,q]).
- objective, lexicographic (two solves): the 1F1B step (m - 1) T_max + sum_r T_r (Narayanan et al.
  2021 Sec. 2.2: m micro-batches on the slowest rank plus the fill and drain through the others),
  integers in one function; then fewer crossings, then lower pool indices.
- validate: the answer re-evaluated in floats and in integers, independently of the model.

MoE models: per-layer coefficients are the count-weighted mean of the dense and MoE layers (the
MoE layers of a rank are not tracked per position as planner/cpsat/stage_split.py does).

Hybrid models (a layer_pattern): a rank's layers are a range of the pattern, each kind priced on its own
(planner/cpsat/stage_split.py's cut points: B_k(x_r) read from the pattern's cumulative count of kind k
by add_element), held_k,r = B_k(x_r) - B_k(x_{r-1}) shared over the pools by h[r,q,k] <= N_k x[r,q],
sum_q h[r,q,k] = held_k,r; then T_r = sum_q sum_k t_k,q h[r,q,k] + ..., and rank r's memory on pool q
const_r,q + sum_k mem_k,r,q h[r,q,k] (stage_split's per-rank coefficients, probed on the pool's GPU).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from planner.costs import comm
from planner.costs.offload import count_headroom
from planner.costs.context import job_context
from planner.cpsat.solve import solve_model
from planner.specs import ClusterSpec, ModelSpec
from planner.specs.layers import layer_kinds
from planner.cpsat.stage_split import HYBRID_PARAMS, instance as split_instance
from planner.units import GB

TIME_STEPS_PER_LAYER = 1000  # integer time unit: the fastest pool's layer time / 1000
KIB = 1024  # integer memory unit


@dataclass(frozen=True)
class PoolTerms:
    """One pool's coefficients for a fixed layout, in floats (seconds per micro-batch, bytes)."""

    name: str
    gpus: int  # capacity of the pool
    t_layer_s: float  # one layer, all passes, per micro-batch
    t_logits_s: float  # the output layer and the loss (last rank)
    held_bytes: float  # states of a held layer
    act_bytes: float  # stored activations of a layer per micro-batch in flight
    const_bytes: float  # held whatever the layers
    first_bytes: float  # the embedding (rank 0)
    last_bytes: float  # the output layer and the logits (last rank)
    usable_bytes: float
    p2p_s: float  # one activation send between two stages of this pool
    # A hybrid model (module docstring), else empty: one layer of each kind [s]; per rank, each kind's
    # states and activations in flight [bytes], and what the rank holds whatever its layers [bytes].
    t_kind_s: tuple[float, ...] = ()
    kind_bytes: tuple[tuple[float, ...], ...] = ()
    rank_const_bytes: tuple[float, ...] = ()


@dataclass(frozen=True)
class PoolInstance:
    layers: int
    pp: int
    microbatches: int
    stage_gpus: int  # tp cp dp
    pools: tuple[PoolTerms, ...]
    cross_p2p_s: float  # one activation send between two pools
    pattern: str = ""  # a hybrid model's layer pattern, and each kind's characters (layer_kinds order)
    kind_chars: tuple[str, ...] = ()

    def inflight(self, r: int) -> int:
        """Micro-batches whose activations rank r holds at its 1F1B peak."""
        return min(self.microbatches, self.pp - r)

    def kind_counts(self, layers) -> np.ndarray:
        """(rank, kind): a hybrid model's layers of each kind per rank, the ranks holding consecutive ranges."""
        ends = np.cumsum(np.asarray(layers, dtype=np.int64))
        hits = [np.concatenate([[0], np.cumsum([c in chars for c in self.pattern])]) for chars in self.kind_chars]
        return np.array([h[ends] - h[ends - np.asarray(layers)] for h in hits], dtype=np.int64).T

    def rank_times_s(self, placement, layers) -> np.ndarray:
        """T_r in floats (module docstring)."""
        P, out = self.pools, np.zeros(self.pp)
        held = self.kind_counts(layers) if self.pattern else None
        for r, (q, n) in enumerate(zip(placement, layers)):
            out[r] = P[q].t_layer_s * n if held is None else float(np.dot(P[q].t_kind_s, held[r]))
            if r == self.pp - 1:
                out[r] += P[q].t_logits_s
            else:
                nxt = placement[r + 1]
                out[r] += 2 * (P[q].p2p_s if nxt == q else self.cross_p2p_s)
        return out

    def step_s(self, placement, layers) -> float:
        t = self.rank_times_s(placement, layers)
        return float((self.microbatches - 1) * t.max() + t.sum())

    def rank_memory_bytes(self, placement, layers) -> np.ndarray:
        out = np.zeros(self.pp)
        held = self.kind_counts(layers) if self.pattern else None
        for r, (q, n) in enumerate(zip(placement, layers)):
            P = self.pools[q]
            if held is not None:
                out[r] = (P.rank_const_bytes[r] + (P.first_bytes if r == 0 else 0) + (P.last_bytes if r == self.pp - 1 else 0)
                          + float(np.dot(P.kind_bytes[r], held[r])))
                continue
            out[r] = (P.const_bytes + (P.first_bytes if r == 0 else 0) + (P.last_bytes if r == self.pp - 1 else 0)
                      + (P.held_bytes + self.inflight(r) * P.act_bytes) * n)
        return out


@dataclass(frozen=True)
class PoolResult:
    status: str  # OPTIMAL | FEASIBLE | INFEASIBLE | MODEL_INVALID | UNKNOWN
    stage_pools: tuple[str, ...] | None  # pool name per pipeline rank
    stage_layers: tuple[int, ...] | None  # layers per pipeline rank
    step_s: float | None  # (m - 1) T_max + sum T_r in floats
    objective: int | None  # the integer step (integer_coefficients' unit)
    tiebreak: int | None  # the second objective: crossings, then pool indices
    bound: float | None
    wall_s: float


def integer_coefficients(inst: PoolInstance) -> dict:
    """The one place floats become integers: times in units of the fastest pool's layer / 1000
    (rounded), memory in KiB (coefficients rounded up, the limits down: never looser than floats)."""
    unit = min(t for P in inst.pools for t in (P.t_layer_s, *P.t_kind_s) if t > 0) / TIME_STEPS_PER_LAYER
    assert unit > 0

    def t(x):
        return int(round(x / unit))

    def up(x):
        return int(np.ceil(x / KIB))

    return dict(
        time_unit_s=unit, t=[t(P.t_layer_s) for P in inst.pools], logits=[t(P.t_logits_s) for P in inst.pools],
        within=[t(2 * P.p2p_s) for P in inst.pools], cross=t(2 * inst.cross_p2p_s),
        held=[up(P.held_bytes) for P in inst.pools], act=[up(P.act_bytes) for P in inst.pools],
        const=[up(P.const_bytes) for P in inst.pools], first=[up(P.first_bytes) for P in inst.pools],
        last=[up(P.last_bytes) for P in inst.pools], usable=[int(np.floor(P.usable_bytes / KIB)) for P in inst.pools],
        t_kind=[[t(x) for x in P.t_kind_s] for P in inst.pools],
        kind_mem=[[[up(x) for x in row] for row in P.kind_bytes] for P in inst.pools],
        rank_const=[[up(x) for x in P.rank_const_bytes] for P in inst.pools])


def tiebreak_value(inst: PoolInstance, placement) -> int:
    """Crossings first (each outweighs any pool-index sum), then the pool indices."""
    Q, p = len(inst.pools), inst.pp
    crossings = sum(placement[r] != placement[r + 1] for r in range(p - 1))
    return p * Q * crossings + sum(placement)


@dataclass
class _Model:
    model: cp_model.CpModel
    x: list  # x[r][q]
    n: list  # n[r][q]
    step: cp_model.LinearExpr
    tiebreak: cp_model.LinearExpr
    coefficients: dict


def build_model(inst: PoolInstance) -> _Model:
    """Variables and constraints (module docstring), without objective."""
    c = integer_coefficients(inst)
    L, p, m, Q = inst.layers, inst.pp, inst.microbatches, len(inst.pools)
    model = cp_model.CpModel()
    names = [P.name for P in inst.pools]
    x = [[model.new_bool_var(f"rank_{r}_on_{names[q]}") for q in range(Q)] for r in range(p)]
    n = [[model.new_int_var(0, L, f"layers_rank_{r}_on_{names[q]}") for q in range(Q)] for r in range(p)]
    for r in range(p):
        model.add_exactly_one(x[r])
        for q in range(Q):
            model.add(n[r][q] <= L * x[r][q])
    model.add(sum(n[r][q] for r in range(p) for q in range(Q)) == L)
    if L >= p:  # every rank holds a layer (as stage_split.py): an empty rank is a bubble, not a saving
        for r in range(p):
            model.add(sum(n[r]) >= 1)
    for q in range(Q):
        model.add(sum(inst.stage_gpus * x[r][q] for r in range(p)) <= inst.pools[q].gpus)
    h = _hybrid_layers(model, inst, x, n) if inst.pattern else None

    crossings = []
    horizon = L * max(c["t"] + [t for row in c["t_kind"] for t in row]) + max(c["logits"]) + max(c["cross"], *c["within"])
    times = []
    for r in range(p):
        k = inst.inflight(r)
        ends = [(c["first"][q] if r == 0 else 0) + (c["last"][q] if r == p - 1 else 0) for q in range(Q)]
        if h is None:
            memory = sum((c["const"][q] + ends[q]) * x[r][q] + (c["held"][q] + k * c["act"][q]) * n[r][q] for q in range(Q))
            time_r = sum(c["t"][q] * n[r][q] for q in range(Q))
        else:
            memory = sum((c["rank_const"][q][r] + ends[q]) * x[r][q]
                         + sum(w * hk for w, hk in zip(c["kind_mem"][q][r], h[r][q])) for q in range(Q))
            time_r = sum(t * hk for q in range(Q) for t, hk in zip(c["t_kind"][q], h[r][q]))
        model.add(memory <= sum(c["usable"][q] * x[r][q] for q in range(Q)))
        if r == p - 1:
            time_r += sum(c["logits"][q] * x[r][q] for q in range(Q))
        else:
            same = []
            for q in range(Q):
                s = model.new_bool_var(f"ranks_{r}_{r + 1}_both_on_{names[q]}")
                model.add(s <= x[r][q])
                model.add(s <= x[r + 1][q])
                model.add(s >= x[r][q] + x[r + 1][q] - 1)
                same.append(s)
            cross = 1 - sum(same)
            crossings.append(cross)
            time_r += c["cross"] * cross + sum(c["within"][q] * same[q] for q in range(Q))
        t = model.new_int_var(0, horizon, f"time_rank_{r}")
        model.add(t == time_r)
        times.append(t)
    t_max = model.new_int_var(0, horizon, "t_max")
    model.add_max_equality(t_max, times)
    step = (m - 1) * t_max + sum(times)
    tiebreak = p * Q * sum(crossings) + sum(q * x[r][q] for r in range(p) for q in range(Q))
    return _Model(model, x, n, step, tiebreak, c)


def _hybrid_layers(model: cp_model.CpModel, inst: PoolInstance, x: list, n: list) -> list:
    """h[r][q][k]: a hybrid model's layers of kind k on rank r when on pool q (module docstring); ties
    n[r][q] to them (the layers of rank r, the cuts' differences)."""
    L, p, Q = inst.layers, inst.pp, len(inst.pools)
    tables = []
    for chars in inst.kind_chars:
        table = [0]
        for ch in inst.pattern:
            table.append(table[-1] + (ch in chars))
        tables.append(table)
    cuts, cum = [], 0
    for r in range(p - 1):
        cum = cum + sum(n[r])
        cut = model.new_int_var(0, L, f"cut_after_rank_{r}")
        model.add(cut == cum)
        cuts.append(cut)
    seen = []  # per kind, B_k at each cut, then the total
    for k, table in enumerate(tables):
        row = []
        for r, cut in enumerate(cuts):
            b = model.new_int_var(0, table[-1], f"kind_{k}_before_cut_{r}")
            model.add_element(cut, table, b)
            row.append(b)
        seen.append(row + [table[-1]])
    h = []
    for r in range(p):
        per_pool = [[model.new_int_var(0, table[-1], f"kind_{k}_rank_{r}_on_{q}") for k, table in enumerate(tables)]
                    for q in range(Q)]
        for k, table in enumerate(tables):
            held = seen[k][r] - (seen[k][r - 1] if r else 0)
            model.add(sum(per_pool[q][k] for q in range(Q)) == held)
            for q in range(Q):
                model.add(per_pool[q][k] <= table[-1] * x[r][q])
        for q in range(Q):
            model.add(n[r][q] == sum(per_pool[q]))
        h.append(per_pool)
    return h


def integer_step(inst: PoolInstance, placement, layers) -> int:
    """The integer step of a placement and split (validation and tests)."""
    c = integer_coefficients(inst)
    p = inst.pp
    held = inst.kind_counts(layers) if inst.pattern else None
    t = []
    for r in range(p):
        q = placement[r]
        v = c["t"][q] * layers[r] if held is None else int(np.dot(c["t_kind"][q], held[r]))
        if r == p - 1:
            v += c["logits"][q]
        else:
            v += c["within"][q] if placement[r + 1] == q else c["cross"]
        t.append(v)
    return (inst.microbatches - 1) * max(t) + sum(t)


def solve(inst: PoolInstance, *, time_limit_s: float = 10.0, seed: int = 0) -> PoolResult:
    """The fastest step, then (same step) the fewest crossings and lowest pool indices."""
    started = time.perf_counter()
    m = build_model(inst)
    m.model.minimize(m.step)
    params = HYBRID_PARAMS if inst.pattern else None  # element constraints: no probing (stage_split.py)
    solver, status, name = solve_model(m.model, time_limit_s, seed, params)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return PoolResult(name, None, None, None, None, None, None, time.perf_counter() - started)
    objective, bound = int(solver.objective_value), float(solver.best_objective_bound)
    m.model.add(m.step <= objective)
    m.model.minimize(m.tiebreak)
    for row in m.x:
        for var in row:
            m.model.add_hint(var, solver.value(var))
    second, status, _ = solve_model(m.model, time_limit_s, seed, params)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        solver = second
    Q = len(inst.pools)
    placement = [next(q for q in range(Q) if solver.boolean_value(m.x[r][q])) for r in range(inst.pp)]
    layers = [int(sum(solver.value(v) for v in m.n[r])) for r in range(inst.pp)]
    _validate(inst, placement, layers, objective)
    return PoolResult(name, tuple(inst.pools[q].name for q in placement), tuple(layers), inst.step_s(placement, layers),
                      objective, tiebreak_value(inst, placement), bound, time.perf_counter() - started)


def _validate(inst: PoolInstance, placement, layers, objective: int) -> None:
    """The answer, re-evaluated without the model: layers sum to L, capacities and memory hold
    (in floats), and its integer step is the solver's objective."""
    assert sum(layers) == inst.layers and min(layers) >= 0, layers
    for q, P in enumerate(inst.pools):
        assert placement.count(q) * inst.stage_gpus <= P.gpus, (placement, P.name)
    usable = np.array([inst.pools[q].usable_bytes for q in placement])
    assert np.all(inst.rank_memory_bytes(placement, layers) <= usable * (1 + 1e-9)), (placement, layers)
    if inst.pattern:  # the integer memory too: the kinds' coefficients are rounded per rank
        c, held = integer_coefficients(inst), inst.kind_counts(layers)
        for r, q in enumerate(placement):
            mem = (c["rank_const"][q][r] + (c["first"][q] if r == 0 else 0) + (c["last"][q] if r == inst.pp - 1 else 0)
                   + int(np.dot(c["kind_mem"][q][r], held[r])))
            assert mem <= c["usable"][q], (placement, layers)
    assert integer_step(inst, placement, layers) == objective, (placement, layers, objective)


def pool_instance(model: ModelSpec, cluster: ClusterSpec, layout, memory_headroom: float = 0.0) -> PoolInstance:
    """The placement problem of a one-row layout (vpp = 1) on the cluster's pools."""
    assert len(layout) == 1 and int(layout.vpp[0]) == 1
    act_bytes = model.training.numerics.activation_bytes
    terms = []
    for name in cluster.pool_names:
        view = cluster.pool_cluster(name)
        usable_gib = view.gpu.memory_gib * (1.0 - memory_headroom)
        s = split_instance(job_context(model, view, layout, memory_headroom=count_headroom(memory_headroom)), usable_gib)
        share = model.moe_layers / model.layers  # MoE: count-weighted mean layer (module docstring)

        def mean(dense, moe):
            return (1 - share) * dense + share * moe if share else dense

        p2p = float(comm.pp_p2p_s(view, model.hidden, model.seq_len, layout, act_bytes)[0])
        if s.pattern:  # each kind on its own (module docstring)
            terms.append(PoolTerms(name, view.total_gpus, 0.0, s.t_logits_s, 0.0, 0.0, 0.0, s.first_bytes, s.last_bytes,
                                   s.usable_bytes, p2p, s.t_kind_s, s.kind_bytes, s.rank_const_bytes))
            continue
        terms.append(PoolTerms(name, view.total_gpus, mean(s.t_dense_s, s.t_moe_s), s.t_logits_s,
                               mean(*s.held_bytes), mean(*s.act_bytes), s.const_bytes, s.first_bytes, s.last_bytes,
                               s.usable_bytes, p2p))
    tp, cp = int(layout.tp[0]), int(layout.cp[0])
    nbytes = act_bytes * int(layout.micro_batch[0]) * model.seq_len * model.hidden / (tp * cp)
    views = [cluster.pool_cluster(n) for n in cluster.pool_names]
    efficiency = min(v.gpu.efficiency.network for v in views)
    latency = max(v.gpu.efficiency.network_latency_s for v in views)
    cross = latency + nbytes / (cluster.inter_pool_bandwidth_gbps * GB * efficiency)
    kind_chars = tuple(k.chars for k in layer_kinds(model)) if model.layer_pattern else ()
    return PoolInstance(model.layers, int(layout.pp[0]), int(layout.num_microbatches[0]),
                        tp * cp * int(layout.dp[0]), tuple(terms), cross, model.layer_pattern or "", kind_chars)


@dataclass(frozen=True)
class MixedPlan:
    row: int | None  # index into the candidate layouts of the best one
    result: PoolResult | None  # its placement
    results: tuple[PoolResult, ...]  # every candidate's, in the order given


def plan_mixed(model: ModelSpec, cluster: ClusterSpec, layouts, *, memory_headroom: float = 0.0,
               time_limit_s: float = 10.0, seed: int = 0) -> MixedPlan:
    """The best placement over candidate layouts (vpp = 1 rows; the caller picks them, e.g. the best
    N of a vectorised search over the pools' total GPUs scored on the slowest pool)."""
    results = []
    for i in range(len(layouts)):
        row = layouts.take(np.array([i]))
        results.append(solve(pool_instance(model, cluster, row, memory_headroom), time_limit_s=time_limit_s, seed=seed))
    done = [i for i, r in enumerate(results) if r.step_s is not None]
    best = min(done, key=lambda i: (results[i].step_s, i)) if done else None
    return MixedPlan(best, None if best is None else results[best], tuple(results))
