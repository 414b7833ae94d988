"""The search: enumerate the layout space, score it, apply the constraints, let CP-SAT choose."""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .constraints import Limits, Mask, evaluate
from .errors import InfeasibleError, SpecError
from .score import Scores, score
from .solver import SolveResult, objective_terms, solve
from .space import Layouts, SpaceLimits, enumerate_layouts
from .specs import ClusterSpec, ModelSpec

OBJECTIVES = ("time", "energy", "cost")


@dataclass(frozen=True)
class SearchResult:
    model: ModelSpec
    cluster: ClusterSpec
    gpus: int
    objective: str
    scores: Scores
    masks: list[Mask]
    feasible: np.ndarray  # bool per row
    chosen: np.ndarray  # row indices, best first
    solver: SolveResult

    @property
    def rejected(self) -> dict[str, int]:
        return {m.name: int((~m.ok).sum()) for m in self.masks}

    def nearest_infeasible(self) -> int | None:
        """The row that fails the fewest constraints, and by the least."""
        if not len(self.scores):
            return None
        fails = np.zeros(len(self.scores))
        excess = np.zeros(len(self.scores))
        for m in self.masks:
            fails += ~m.ok
            if m.excess is not None:
                excess += np.where(m.ok, 0.0, m.excess)
        return int(np.lexsort((excess, fails))[0])

    def violations(self, i: int) -> list[dict]:
        return [{"constraint": m.name, "family": m.family, "message": m.explain(i)} for m in self.masks if not m.ok[i]]


def with_global_batch(model: ModelSpec, global_batch: int | None) -> ModelSpec:
    if global_batch is None:
        return model
    if global_batch <= 0:
        raise SpecError("global batch must be positive", path="--global-batch", expected="an integer > 0")
    return model.model_copy(update={"training": model.training.model_copy(update={"global_batch": global_batch})})


def objective_cost(cluster: ClusterSpec, scores: Scores, objective: str) -> np.ndarray:
    if objective == "time":
        return scores.step_time_s
    if objective == "energy":
        return scores.energy.energy_j_per_step
    if objective == "cost":
        gpu_usd = scores.layouts.gpus * scores.step_time_s / 3600.0 * cluster.pricing.gpu_hour_usd
        power_usd = scores.energy.energy_j_per_step / 3.6e6 * cluster.pricing.electricity_usd_per_kwh
        return gpu_usd + power_usd
    raise SpecError(f"unknown objective '{objective}'", path="--objective", expected=" | ".join(OBJECTIVES))


def tiebreak_rank(layouts: Layouts) -> np.ndarray:
    """Rank of each row in the order smaller tp, pp, micro-batch, vpp, recompute, sp, zero."""
    order = np.lexsort((layouts.zero, layouts.sequence_parallel, layouts.recompute, layouts.vpp,
                        layouts.micro_batch, layouts.pp, layouts.tp))
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return rank


def space_for(model: ModelSpec, gpus: int, space: SpaceLimits) -> Layouts:
    return enumerate_layouts(gpus=gpus, layers=model.layers, heads=model.heads, kv_heads=model.num_kv_heads,
                             global_batch=model.training.global_batch, limits=space)


def search(
    model: ModelSpec,
    cluster: ClusterSpec,
    *,
    gpus: int | None = None,
    objective: str = "time",
    top_k: int = 5,
    limits: Limits = Limits(),
    space: SpaceLimits = SpaceLimits(),
    time_limit_s: float = 10.0,
) -> SearchResult:
    gpus = gpus or cluster.total_gpus
    if gpus <= 0:
        raise SpecError("GPU count must be positive", path="--gpus", expected="an integer > 0")
    if objective not in OBJECTIVES:
        objective_cost(cluster, None, objective)  # raises the error
    layouts = space_for(model, gpus, space)
    if not len(layouts):
        raise InfeasibleError(empty_space_reason(model, gpus))
    if limits.min_scaling_efficiency is not None and limits.reference_tokens_per_s_per_gpu is None and gpus >= 2:
        limits = replace(limits, reference_tokens_per_s_per_gpu=_reference_rate(model, cluster, gpus // 2, limits, space))
    scores = score(model, cluster, layouts)
    masks = evaluate(model, cluster, scores, limits)
    feasible = np.ones(len(layouts), dtype=bool)
    for m in masks:
        feasible &= m.ok
    rows = np.flatnonzero(feasible)
    cost = objective_cost(cluster, scores, objective)
    # Only the best rows can be in the top K: keeping a pool of them keeps the model small and the
    # answer exact (at least K feasible rows are at least as good as anything left out).
    pool = max(32 * top_k, 256)
    if rows.size > pool:
        rows = rows[np.argpartition(cost[rows], pool - 1)[:pool]]
    terms = objective_terms(cost[rows], tiebreak_rank(layouts.take(rows)))
    result = solve(terms, top_k, time_limit_s=time_limit_s)
    return SearchResult(model, cluster, gpus, objective, scores, masks, feasible, rows[result.chosen], result)


def _reference_rate(model, cluster, gpus, limits, space) -> float | None:
    try:
        ref = search(model, cluster, gpus=gpus, objective="time", top_k=1,
                     limits=replace(limits, min_scaling_efficiency=None, max_step_time_s=None), space=space)
    except InfeasibleError:
        return None
    if not ref.chosen.size:
        return None
    i = ref.chosen[0]
    return float(ref.scores.tokens_per_s[i] / ref.scores.layouts.gpus[i])


def empty_space_reason(model: ModelSpec, gpus: int) -> str:
    b = model.training.global_batch
    return (
        f"no layout of {gpus} GPUs is valid for {model.name}: dp*tp*pp must equal {gpus}, tp must divide "
        f"heads ({model.heads}) and kv_heads ({model.num_kv_heads}), pp at most {model.layers} layers, and dp "
        f"must divide the global batch ({b}); try --gpus with a divisor-friendly count or --global-batch"
    )
