"""A search on a cluster of several GPU pools: each pool alone, and pipelines across pools.

Each pool is searched as a cluster of its own (planner/search.py on `ClusterSpec.pool_cluster`).
Across pools, the layouts of all the pools' GPUs with pp >= 2 and no interleaving are scored on
the slowest pool's GPU (a conservative stand-in: no rank is slower than there); the best
`mixed_top` that meet every constraint but the GPU count (the slowest pool alone cannot hold
them) go to the placement model (planner/cpsat/pool_placement.py, CP-SAT), which puts each rank on a pool and
chooses its layers. The placement prices the pipeline: m T_max + sum T_r - T_max with the sends
between ranks. What lies outside the pipeline (data-parallel communication left exposed, the
optimizer step, fixed overheads) is taken from the slowest-pool score of the same layout.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from planner.constraints import Limits, evaluate
from planner.costs.offload import count_headroom
from planner.errors import InfeasibleError
from planner.cpsat.pool_placement import PoolResult, plan_mixed
from planner.score import score
from planner.search import SearchResult, objective_cost, search, space_for
from planner.layout.space import SpaceLimits
from planner.specs import ClusterSpec, ModelSpec

MIXED_TOP = 4  # layouts across pools given a placement by default


@dataclass(frozen=True)
class MixedLayout:
    """The best pipeline across pools."""

    layout: dict  # the JSON layout, with stage_pools and stage_layers (one per pipeline rank)
    gpus: int
    step_time_s: float
    pipeline_s: float  # the placement's pipeline part (planner/cpsat/pool_placement.py)
    outside_pipeline_s: float  # exposed DP communication, optimizer, overheads (slowest pool's score)
    tokens_per_s: float
    placement: PoolResult


@dataclass(frozen=True)
class PoolSearch:
    """`plan search` on a cluster with pools."""

    best: SearchResult | None  # the best single pool's search (its layouts carry stage_pools); None: none fits
    per_pool: dict[str, SearchResult | None]  # None: no feasible layout in that pool
    mixed: MixedLayout | None  # None: no feasible pipeline across pools
    tried: tuple[PoolResult, ...]  # every placement solved, in candidate order

    @property
    def fastest(self) -> str:
        """'mixed' when the pipeline across pools is faster than every pool alone, else the pool's name."""
        single = self.best.best.step_time_s if self.best is not None else np.inf
        return "mixed" if self.mixed is not None and self.mixed.step_time_s < single else self.best.pool


def search_pools(model: ModelSpec, cluster: ClusterSpec, *, gpus: int | None = None, objective: str = "time",
                 limits: Limits = Limits(), space: SpaceLimits = SpaceLimits(), mixed_top: int = MIXED_TOP,
                 time_limit_s: float = 10.0, **kwargs) -> PoolSearch:
    """`kwargs`: the rest of planner/search.py's arguments, passed to each pool's search."""
    per_pool: dict[str, SearchResult | None] = {}
    for name in cluster.pool_names:
        view = cluster.pool_cluster(name)
        if gpus is not None and gpus > view.total_gpus:
            per_pool[name] = None
            continue
        try:
            found = search(model, view, gpus=gpus, objective=objective, limits=limits, space=space,
                           time_limit_s=time_limit_s, **kwargs)
        except InfeasibleError:
            found = None
        per_pool[name] = replace(found, pool=name) if found is not None and found.chosen.size else None
    done = [r for r in per_pool.values() if r is not None]
    best = min(done, key=lambda r: objective_cost(r.cluster, r.scores, objective)[r.chosen[0]]) if done else None
    total = gpus or sum(cluster.pool_cluster(n).total_gpus for n in cluster.pool_names)
    mixed, tried = _across_pools(model, cluster, total, limits, space, mixed_top, time_limit_s)
    if best is None and mixed is None:
        raise InfeasibleError(f"no feasible layout of {total:,} GPUs in any pool of {cluster.name} "
                              f"({', '.join(cluster.pool_names)}) nor across them")
    return PoolSearch(best, per_pool, mixed, tried)


def _across_pools(model, cluster, gpus, limits, space, top, time_limit_s):
    """The best pipeline of `gpus` GPUs across the pools (module docstring), and every placement tried."""
    if top <= 0:
        return None, ()
    views = [cluster.pool_cluster(n) for n in cluster.pool_names]
    slow = min(views, key=lambda v: v.gpu.peak_flops(model.training.numerics.peak))
    layouts = space_for(model, gpus, replace(space, vpp=1))
    layouts = layouts.take(np.flatnonzero(layouts.pp >= 2))
    if not len(layouts):
        return None, ()
    scores = score(model, slow, layouts, memory_headroom=count_headroom(limits.memory_headroom))
    ok = np.ones(len(scores), dtype=bool)
    for m in evaluate(model, slow, scores, limits):
        if m.name != "gpu_count":  # the slowest pool alone cannot hold them; the placement checks capacity
            ok &= m.ok
    rows = np.flatnonzero(ok)
    rows = rows[np.argsort(scores.step_time_s[rows], kind="stable")[:top]]
    if not rows.size:
        return None, ()
    plan = plan_mixed(model, cluster, layouts.take(rows), memory_headroom=limits.memory_headroom,
                      time_limit_s=min(time_limit_s, 1.0))
    # A placement that keeps every rank in one pool is that pool's layout, which its own search
    # scores with every term: only pipelines that do span pools are reported here.
    spanning = [k for k, r in enumerate(plan.results) if r.stage_pools is not None and len(set(r.stage_pools)) > 1]
    if not spanning:
        return None, plan.results
    k = min(spanning, key=lambda k: (plan.results[k].step_s, k))
    i, placed = int(rows[k]), plan.results[k]
    t = scores.time_s
    outside = float(t.dp_comm[i] + t.optimizer[i] + t.overhead[i])
    step = placed.step_s + outside
    layout = {**layouts.row(i), "stage_layers": list(placed.stage_layers), "stage_pools": list(placed.stage_pools)}
    return MixedLayout(layout, gpus, step, placed.step_s, outside,
                       model.training.global_batch * model.seq_len / step, placed), plan.results
