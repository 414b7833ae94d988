"""The setting every CP-SAT model here shares: one worker, a fixed seed and a deterministic limit.

The models: uneven stage splits (planner/cpsat/stage_split.py), per-stage power caps
(planner/cpsat/stage_power_caps.py), mixed GPU pools (planner/cpsat/pool_placement.py) and jobs
sharing a cluster (planner/cpsat/job_allocation.py).
"""
from __future__ import annotations

from ortools.sat.python import cp_model


def deterministic_solver(time_limit_s: float, seed: int = 0, params: dict | None = None) -> cp_model.CpSolver:
    """One worker, a fixed seed and a deterministic (not wall-clock) limit: the same answer every run.
    `params`: further CpSolver parameters a model needs (by name)."""
    solver = cp_model.CpSolver()
    for name, value in (params or {}).items():
        setattr(solver.parameters, name, value)
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = seed
    solver.parameters.max_deterministic_time = time_limit_s
    solver.parameters.catch_sigint_signal = False  # Ctrl-C: KeyboardInterrupt after the solve, never UNKNOWN
    return solver


def solve_model(model: cp_model.CpModel, time_limit_s: float, seed: int = 0,
                params: dict | None = None) -> tuple[cp_model.CpSolver, int, str]:
    """Solve with `deterministic_solver`: (the solver, to read values from; its status; the status name)."""
    solver = deterministic_solver(time_limit_s, seed, params)
    status = solver.solve(model)
    return solver, status, solver.status_name(status)
