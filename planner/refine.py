"""Second pass of a search: uneven pipeline stages for the best rows of the vectorised pass.

The vectorised pass scores every layout under the default split (planner/costs/pipeline_ranks.py). For the
best `top` pipelined rows that meet every constraint, and the best `top` that fail only memory
(a lighter first or last stage may make them fit), the stage split (planner/cpsat/stage_split.py, CP-SAT)
chooses layers per virtual stage; each chosen split is re-scored with every rank by the same cost
models and constraints, and replaces its row when it is feasible and at least as good.

The split solves are independent and CP-SAT releases the GIL, so they run in threads, one a core;
each stays one deterministic worker (planner/cpsat/solve.py), so the answers are those of a plain loop.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from planner.layout.arrays import replace_rows, scatter
from planner.constraints import Limits, evaluate
from planner.costs.offload import count_headroom
from planner.costs.context import job_context
from planner.costs.pipeline_ranks import layout_default_split, split_ranks
from planner.errors import SpecError
from planner.choose import contenders
from planner.cpsat.stage_split import SplitResult, instance, solve
from planner.specs import ClusterSpec, ModelSpec

SPLIT_TOP = 2  # rows of each kind (feasible; failing only memory) given a stage split by default
# Deterministic seconds per split solve in a search: MoE splits (a max per stage for the dense
# prefix) can take 0.4 s to prove optimal, and a search stays under a second; the answer is then
# FEASIBLE (reported per row), still validated and never slower than the default split.
SPLIT_TIME_LIMIT = 0.05
# A hybrid model's split (planner/cpsat/stage_split.py: cut points, an element constraint per cut and kind)
# is searched for rows without interleaving: with vpp 4-8 (16-48 stages) each solve took 0.3-1.7 s wall for
# Nemotron-H and Qwen3-Next (found nothing faster in 0.05 deterministic s), where Megatron-LM core_v0.15.0
# runs hybrids without interleaving anyway; `plan estimate --stage-layers` prices any split.
HYBRID_VPP = 1
WORKERS_ENV = "PLANNER_SPLIT_WORKERS"  # at most this many split solves at once; 1: one after another


@dataclass(frozen=True)
class Refined:
    scores: object  # planner.score.Scores with the refined rows replaced
    splits: dict[int, tuple[int, ...]]  # row -> layers per virtual stage, where the split changed
    solves: dict[int, SplitResult]  # row -> the CP-SAT answer, for every row tried


def candidates(scores, masks, cost: np.ndarray, top: int, hybrid: bool = False) -> np.ndarray:
    """The best `top` pipelined rows meeting every constraint, then the best `top` failing only memory;
    of a hybrid model (`hybrid`) rows without interleaving only (HYBRID_VPP)."""
    pipelined = scores.layouts.pp > 1
    if hybrid:
        pipelined &= scores.layouts.vpp == HYBRID_VPP
    ok = np.ones(len(scores), dtype=bool)
    others_ok = np.ones(len(scores), dtype=bool)
    for m in masks:
        ok &= m.ok
        if m.name != "memory":
            others_ok &= m.ok
    rows = []
    for pool in (ok & pipelined, others_ok & ~ok & pipelined):
        index = np.flatnonzero(pool)
        index = index[contenders(cost[index], top)]  # the stable sort's first `top`, sorting fewer
        rows.extend(index[np.argsort(cost[index], kind="stable")[:top]].tolist())
    return np.array(rows, dtype=np.int64)


def refine(model: ModelSpec, cluster: ClusterSpec, scores, masks, cost_of, limits: Limits, *, top: int = SPLIT_TOP,
           reference: float | None = None, levels=None, critical_batch_tokens: float | None = None,
           time_limit_s: float = 1.0, in_place: bool = False) -> Refined:
    """`cost_of(scores) -> array`: the search objective; `levels`: the power-cap levels the rows index;
    `in_place`: the caller drops `scores`, whose columns may then take the refined rows in place."""
    from planner.score import score  # score imports the cost models; keep this module light to import

    if top <= 0:
        return Refined(scores, {}, {})
    cost = cost_of(scores)
    usable_gib = cluster.gpu.memory_gib * (1.0 - limits.memory_headroom)
    parts, splits, solves = [], {}, {}
    rows = candidates(scores, masks, cost, top, hybrid=model.layer_pattern is not None)
    if rows.size == 0:
        return Refined(scores, splits, solves)
    headroom = count_headroom(limits.memory_headroom)  # what the offloaded layer count fits under
    batch = job_context(model, cluster, scores.layouts.take(rows), memory_headroom=headroom)  # one call, not one a row
    jobs = [batch.row(j) for j in range(rows.size)]
    insts = [instance(job, usable_gib) for job in jobs]
    defaults = [layout_default_split(model, job.layouts) for job in jobs]
    results = solve_splits(insts, defaults, time_limit_s)
    for i, job, inst, default, result in zip(rows.tolist(), jobs, insts, defaults, results):
        row = job.layouts
        solves[i] = result
        if result.stage_layers is None or list(result.stage_layers) == default:
            continue
        ranks = split_ranks(model, row, result.stage_layers, inst.act_bytes)
        new = score(model, cluster, row, caps=levels, ranks=ranks, critical_batch_tokens=critical_batch_tokens,
                    memory_headroom=headroom)
        fits = all(bool(m.ok[0]) for m in evaluate(model, cluster, new, limits, reference))
        was_ok = all(bool(m.ok[i]) for m in masks)
        # An equally fast split that only lowers memory stays Megatron's default (no flags to set).
        if fits and (not was_ok or cost_of(new)[0] < cost[i] * (1 - 1e-9)):
            parts.append(new)
            splits[i] = tuple(result.stage_layers)
    if not parts:
        return Refined(scores, splits, solves)
    changed = np.array(list(splits), dtype=np.int64)
    new = parts[0] if len(parts) == 1 else scatter(len(parts), [(np.array([k]), p) for k, p in enumerate(parts)])
    return Refined(replace_rows(scores, changed, new, in_place), splits, solves)


def solve_splits(insts: list, defaults: list, time_limit_s: float, workers: int | None = None) -> list[SplitResult]:
    """The fastest split of each instance (no memory tie-break: a search keeps only splits that are
    faster), in their order; `workers`: solves at once (default: one a core, at most $WORKERS_ENV)."""
    def one(k: int) -> SplitResult:
        return solve(insts[k], default=defaults[k], time_limit_s=time_limit_s, memory_tiebreak=False)

    workers = min(len(insts), split_workers() if workers is None else workers)
    if workers <= 1:
        return [one(k) for k in range(len(insts))]
    pool = ThreadPoolExecutor(workers, thread_name_prefix="stage-split")
    try:
        futures = [pool.submit(one, k) for k in range(len(insts))]
        return [f.result() for f in futures]  # a solve's exception, or Ctrl-C while waiting, is raised here
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # after an error: drop the queued, finish the running


def split_workers() -> int:
    """One split solve a core, unless $WORKERS_ENV asks for fewer (1: serial, to debug or profile)."""
    # the cores this process may run on (a CPU affinity or container limit), not the machine's
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    text = os.environ.get(WORKERS_ENV)
    if text is None:
        return cores
    if not text.strip().isdigit() or int(text) < 1:
        raise SpecError(f"{text!r} is not a number of workers", path=WORKERS_ENV, expected="an integer >= 1")
    return min(int(text), cores)
