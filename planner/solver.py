"""Choosing among independent scored rows is a sort; CP-SAT is for coupled choices.

A search scores every layout as an independent row: no constraint ties two rows together, so the
best K under an ordered objective are a lexicographic sort of the feasible rows (the objective,
then a second figure, then fewest GPUs, then the tie-break rank: smaller tp, then pp, micro-batch,
...; all distinct, so the order is total and the same every run). A CP-SAT model that picked K
Booleans with a weighted sum returned exactly this order and nothing more. CP-SAT models live
where choices are coupled: uneven stage splits (planner/stage_split.py), per-stage power caps
(planner/stage_caps.py), mixed GPU pools (planner/pools.py) and jobs sharing a cluster
(planner/allocate_cpsat.py); `deterministic_solver` is their common setting.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

METHOD = "lexicographic sort"


@dataclass(frozen=True)
class SolveResult:
    status: str  # OPTIMAL (the sort is exact) | INFEASIBLE (no row)
    chosen: np.ndarray  # indices into the rows given, best first
    objective: float | None  # the best row's objective figure
    bound: float | None  # equal to it: a sort leaves no gap
    wall_s: float
    method: str = METHOD


def choose(keys: list[np.ndarray], k: int) -> SolveResult:
    """The best `k` rows in lexicographic order of `keys` (most significant first; all smaller-is-better)."""
    started = time.perf_counter()
    n = keys[0].size if keys else 0
    if n == 0:
        return SolveResult("INFEASIBLE", np.zeros(0, dtype=np.int64), None, None, time.perf_counter() - started)
    order = np.lexsort(tuple(reversed([np.asarray(x) for x in keys])))[:k]
    best = float(keys[0][order[0]])
    return SolveResult("OPTIMAL", order.astype(np.int64), best, best, time.perf_counter() - started)


def contenders(first: np.ndarray, k: int) -> np.ndarray:
    """Positions of the rows that can be among the best `k` in any lexicographic order whose most
    significant key is `first` (smaller first): those at most its k-th smallest value, ties kept.
    Sorting only these picks the same rows (in row order, so ties keep their order), and a full
    space has few: sorting every feasible row took longer than scoring one cost term."""
    first = np.asarray(first)
    if k <= 0 or first.size <= k:
        return np.arange(first.size)
    kth = np.partition(first, k - 1)[k - 1]
    if np.isnan(kth):  # fewer than k numbers: NaN sorts last, keep everything
        return np.arange(first.size)
    return np.flatnonzero(first <= kth)


def deterministic_solver(time_limit_s: float, seed: int = 0) -> cp_model.CpSolver:
    """One worker, a fixed seed and a deterministic (not wall-clock) limit: the same answer every run."""
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = seed
    solver.parameters.max_deterministic_time = time_limit_s
    solver.parameters.catch_sigint_signal = False  # Ctrl-C: KeyboardInterrupt after the solve, never UNKNOWN
    return solver


def solve_model(model: cp_model.CpModel, time_limit_s: float, seed: int = 0) -> tuple[cp_model.CpSolver, int, str]:
    """Solve with `deterministic_solver`: (the solver, to read values from; its status; the status name)."""
    solver = deterministic_solver(time_limit_s, seed)
    status = solver.solve(model)
    return solver, status, solver.status_name(status)
