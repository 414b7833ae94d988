"""Choose the best K layouts among the feasible candidates with a CP-SAT model.

One Boolean per candidate row, exactly K of them true; the objective is the integer-scaled cost
plus a tie-break rank (prefer smaller tp, then pp, then micro-batch, ...), so the optimum is
unique and the run deterministic: one worker, a fixed seed and a deterministic time limit
(OR-Tools notes on reproducibility; see shared CP-SAT notes). The K chosen rows come back ordered by
their objective term.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

COST_SCALE = 1_000_000  # costs become parts-per-million of the best candidate's cost


@dataclass(frozen=True)
class SolveResult:
    status: str  # OPTIMAL | FEASIBLE | INFEASIBLE | MODEL_INVALID | UNKNOWN
    chosen: np.ndarray  # indices into the rows given, best first
    objective: int | None
    bound: float | None
    wall_s: float


def integer_costs(cost: np.ndarray) -> np.ndarray:
    """Scale positive float costs to integers: ppm of the smallest, so magnitudes stay moderate."""
    base = float(np.min(cost)) if cost.size else 1.0
    return np.rint(cost / base * COST_SCALE).astype(np.int64)


def objective_terms(cost: np.ndarray, tiebreak_rank: np.ndarray) -> np.ndarray:
    """cost_int * n + rank: strictly ordered by cost, then by the tie-break rank (all distinct)."""
    n = max(int(tiebreak_rank.max()) + 1, 1) if tiebreak_rank.size else 1
    return integer_costs(cost) * n + tiebreak_rank.astype(np.int64)


def build_model(terms: np.ndarray, k: int) -> tuple[cp_model.CpModel, list[cp_model.IntVar]]:
    model = cp_model.CpModel()
    pick = [model.new_bool_var(f"pick_row_{i}") for i in range(terms.size)]
    model.add(cp_model.LinearExpr.sum(pick) == min(k, terms.size))
    model.minimize(cp_model.LinearExpr.weighted_sum(pick, terms.tolist()))
    return model, pick


def deterministic_solver(time_limit_s: float, seed: int = 0) -> cp_model.CpSolver:
    """One worker, a fixed seed and a deterministic (not wall-clock) limit: the same answer every run."""
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = seed
    solver.parameters.max_deterministic_time = time_limit_s
    return solver


def solve(terms: np.ndarray, k: int, *, time_limit_s: float = 10.0, seed: int = 0) -> SolveResult:
    started = time.perf_counter()
    if terms.size == 0:
        return SolveResult("INFEASIBLE", np.zeros(0, dtype=np.int64), None, None, 0.0)
    model, pick = build_model(terms, k)
    solver = deterministic_solver(time_limit_s, seed)
    status = solver.solve(model)
    name = solver.status_name(status)
    chosen = np.zeros(0, dtype=np.int64)
    objective = bound = None
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        chosen = np.array([i for i, var in enumerate(pick) if solver.value(var)], dtype=np.int64)
        chosen = chosen[np.argsort(terms[chosen], kind="stable")]
        objective, bound = int(solver.objective_value), float(solver.best_objective_bound)
    return SolveResult(name, chosen, objective, bound, time.perf_counter() - started)
