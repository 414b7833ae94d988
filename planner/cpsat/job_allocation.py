"""Several jobs on one cluster: which candidate each job runs, chosen with CP-SAT.

Instance (floats): per job a few candidates, each a GPU count in whole granules (nodes, or NVLink
domains where one spans several nodes) with the figures of the best layout at that count. Model:
one Boolean `job_<j>_gpus_<n>` per (job, candidate); per job a literal `serve_<j>` that enforces
"exactly one candidate" and "no candidate past the deadline"; the chosen granules fit the
cluster's; optionally the chosen layouts' average power fits the budget. Objective:
  throughput: maximise sum_j weight_j * GPUs_j * model TFLOP/s per GPU_j (useful work),
  makespan:   minimise t_max >= days to train job j's tokens, for every job j,
each then fewer GPUs in total (a tie-break worth less than one unit of the first term). The
`serve_` literals are assumptions: when no allocation exists, the solver's sufficient
assumptions (no objective, one worker), shrunk to a minimal set, name the jobs that cannot all
be served (CP-SAT notes, "Why infeasible").
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from ortools.sat.python import cp_model

from planner.cpsat.solve import deterministic_solver, solve_model
from planner.units import W_PER_KW

OBJECTIVES = ("throughput", "makespan")
SCALE = 100_000  # the objective's figure becomes parts per 100,000 of its largest candidate's


@dataclass(frozen=True)
class Candidate:
    """One way to run a job: a GPU count and the best layout's figures there."""

    gpus: int
    work_tflops: float  # GPUs x model TFLOP/s per GPU [TFLOP/s]
    power_kw: float  # average power of the layout [kW]
    train_days: float | None = None  # time to train the job's tokens [days]; None: no token budget
    layout: Any = None  # the ScoredLayout it came from (None in synthetic instances)


@dataclass(frozen=True)
class JobInstance:
    name: str
    candidates: tuple[Candidate, ...]
    weight: float = 1.0
    deadline_days: float | None = None
    why_none: str | None = None  # why the job has no candidate at all

    def meets_deadline(self, c: Candidate) -> bool:
        return self.deadline_days is None or (c.train_days is not None and c.train_days <= self.deadline_days)

    def on_time(self) -> list[Candidate]:
        return [c for c in self.candidates if self.meets_deadline(c)]


@dataclass(frozen=True)
class AllocationInstance:
    jobs: tuple[JobInstance, ...]
    cluster_gpus: int
    granule_gpus: int  # GPUs a job gets at a time
    objective: str = "throughput"
    power_budget_kw: float | None = None

    @property
    def cluster_granules(self) -> int:
        return self.cluster_gpus // self.granule_gpus


@dataclass(frozen=True)
class Unserved:
    jobs: tuple[str, ...]  # a minimal set of jobs that cannot all be served
    reason: str


@dataclass(frozen=True)
class AllocationSolve:
    status: str  # OPTIMAL | FEASIBLE | INFEASIBLE | MODEL_INVALID | UNKNOWN
    choice: tuple[int, ...]  # candidate index per job (empty unless a solution was found)
    objective: int | None
    bound: float | None
    wall_s: float
    unserved: Unserved | None = None


@dataclass(frozen=True)
class Scaled:
    """The instance in integers: objective figure per (job, candidate), power [W], budget [W]."""

    figure: list[list[int]]
    power_w: list[list[int]]
    budget_w: int | None
    tie: int  # weight of the first objective term over the tie-break (total granules)


def figure(inst: AllocationInstance, job: JobInstance, c: Candidate) -> float:
    """The float each candidate adds to the objective: weighted useful work, or days to train."""
    if inst.objective == "throughput":
        return job.weight * c.work_tflops
    if inst.objective == "makespan":
        if c.train_days is None:
            raise ValueError(f"job '{job.name}' has no token budget: makespan needs every job's time to train")
        return c.train_days
    raise ValueError(f"unknown objective {inst.objective!r}; expected one of {OBJECTIVES}")


def scaled(inst: AllocationInstance) -> Scaled:
    """The one place floats become integers. Figures: parts per SCALE of the largest candidate's.
    Power: watts rounded up, the budget rounded down, so a chosen set never exceeds it."""
    floats = [[figure(inst, job, c) for c in job.candidates] for job in inst.jobs]
    top = max((f for row in floats for f in row), default=1.0) or 1.0
    fig = [[int(round(f / top * SCALE)) for f in row] for row in floats]
    power = [[math.ceil(c.power_kw * W_PER_KW - 1e-6) for c in job.candidates] for job in inst.jobs]
    budget = None if inst.power_budget_kw is None else math.floor(inst.power_budget_kw * W_PER_KW + 1e-6)
    return Scaled(fig, power, budget, inst.cluster_granules + 1)


@dataclass(frozen=True)
class AllocationVars:
    """The CP-SAT variables, by what they mean."""

    pick: dict[tuple[int, int], cp_model.IntVar]  # (job, candidate) -> chosen
    serve: list[cp_model.IntVar]  # per job: its constraints hold
    t_max: cp_model.IntVar | None  # makespan: the longest scaled time to train

    def chosen(self, solver: cp_model.CpSolver, jobs: int) -> tuple[int, ...]:
        out = [-1] * jobs
        for (j, k), v in self.pick.items():
            if solver.value(v):
                out[j] = k
        return tuple(out)


def build_model(inst: AllocationInstance, *, with_objective: bool = True) -> tuple[cp_model.CpModel, AllocationVars]:
    s = scaled(inst)
    model = cp_model.CpModel()
    pick, serve = {}, []
    for j, job in enumerate(inst.jobs):
        lit = model.new_bool_var(f"serve_{job.name}")
        serve.append(lit)
        for k, c in enumerate(job.candidates):
            pick[j, k] = model.new_bool_var(f"job_{job.name}_gpus_{c.gpus}")
            if not job.meets_deadline(c):
                model.add(pick[j, k] == 0).only_enforce_if(lit)
        model.add_exactly_one([pick[j, k] for k in range(len(job.candidates))]).only_enforce_if(lit)
    granules = {(j, k): inst.jobs[j].candidates[k].gpus // inst.granule_gpus for j, k in pick}
    model.add(sum(granules[jk] * v for jk, v in pick.items()) <= inst.cluster_granules)
    if s.budget_w is not None:
        model.add(sum(s.power_w[j][k] * v for (j, k), v in pick.items()) <= s.budget_w)
    t_max = None
    tiebreak = sum(granules[jk] * v for jk, v in pick.items())
    if inst.objective == "makespan":
        t_max = model.new_int_var(0, SCALE, "t_max_scaled")
        for j in range(len(inst.jobs)):
            model.add(t_max >= sum(s.figure[j][k] * v for (jj, k), v in pick.items() if jj == j))
        if with_objective:
            model.minimize(t_max * s.tie + tiebreak)
    elif with_objective:
        model.minimize(sum(-s.figure[j][k] * s.tie * v for (j, k), v in pick.items()) + tiebreak)
    model.add_assumptions(serve)
    return model, AllocationVars(pick, serve, t_max)


def solve(inst: AllocationInstance, *, time_limit_s: float = 10.0, seed: int = 0) -> AllocationSolve:
    """The best allocation; when none exists, which jobs cannot all be served and why."""
    started = time.perf_counter()
    model, v = build_model(inst)
    solver, status, name = solve_model(model, time_limit_s, seed)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        choice = v.chosen(solver, len(inst.jobs))
        validate(inst, choice)
        return AllocationSolve(name, choice, int(solver.objective_value), float(solver.best_objective_bound),
                               time.perf_counter() - started)
    unserved = diagnose(inst, time_limit_s=time_limit_s, seed=seed) if status == cp_model.INFEASIBLE else None
    return AllocationSolve(name, (), None, None, time.perf_counter() - started, unserved)


def integer_objective(inst: AllocationInstance, choice: tuple[int, ...]) -> int:
    """The objective CP-SAT minimises, recomputed from a choice (for the validator and tests)."""
    s = scaled(inst)
    granules = sum(inst.jobs[j].candidates[k].gpus // inst.granule_gpus for j, k in enumerate(choice))
    if inst.objective == "makespan":
        return max((s.figure[j][k] for j, k in enumerate(choice)), default=0) * s.tie + granules
    return -sum(s.figure[j][k] for j, k in enumerate(choice)) * s.tie + granules


def objective_value(inst: AllocationInstance, choice: tuple[int, ...]) -> float:
    """The objective in floats: weighted useful work [TFLOP/s] or the makespan [days]."""
    figures = [figure(inst, inst.jobs[j], inst.jobs[j].candidates[k]) for j, k in enumerate(choice)]
    return max(figures, default=0.0) if inst.objective == "makespan" else sum(figures)


def validate(inst: AllocationInstance, choice: tuple[int, ...]) -> float:
    """Check a choice against every constraint, in floats and apart from the CP-SAT model; return
    its objective value. A failure is a bug of the model, hence `assert`."""
    assert len(choice) == len(inst.jobs) and all(0 <= k < len(j.candidates) for j, k in zip(inst.jobs, choice))
    picked = [job.candidates[k] for job, k in zip(inst.jobs, choice)]
    assert all(c.gpus % inst.granule_gpus == 0 for c in picked), "a job splits a node or NVLink domain"
    assert sum(c.gpus for c in picked) <= inst.cluster_gpus, "more GPUs than the cluster has"
    if inst.power_budget_kw is not None:
        assert sum(c.power_kw for c in picked) <= inst.power_budget_kw * (1 + 1e-12), "over the power budget"
    assert all(job.meets_deadline(c) for job, c in zip(inst.jobs, picked)), "a job misses its deadline"
    return objective_value(inst, choice)


# The diagnosis's solves have no objective, so CP-SAT's default linearization leaves out the knapsack
# of GPUs that an LP bounds at once: 64 jobs over the cluster were UNKNOWN after 5 s with it, proven
# infeasible in 0.07 s at level 2 (CpSolver parameter `linearization_level`).
DIAGNOSIS_PARAMS = {"linearization_level": 2}


def _infeasible(inst: AllocationInstance, assumed: list[int], time_limit_s: float, seed: int) -> list[int] | None:
    """Solve without objective assuming only the jobs `assumed` are served: None if feasible or not
    proven infeasible in the time, else the jobs of the solver's sufficient assumptions."""
    model, v = build_model(inst, with_objective=False)
    model.clear_assumptions()
    model.add_assumptions([v.serve[j] for j in assumed])
    solver = deterministic_solver(time_limit_s, seed, DIAGNOSIS_PARAMS)
    if solver.solve(model) != cp_model.INFEASIBLE:
        return None
    core = set(solver.sufficient_assumptions_for_infeasibility())
    return [j for j in assumed if v.serve[j].index in core]


def diagnose(inst: AllocationInstance, *, time_limit_s: float = 10.0, seed: int = 0) -> Unserved:
    """A minimal set of jobs that cannot all be served (the solver's core, then each job dropped
    in turn while the rest stays infeasible), with the reason in words. The drops share one time
    limit (a drop not proven infeasible in its share keeps the job), so the diagnosis takes at most
    twice `time_limit_s`; a core not found in time is every job."""
    core = _infeasible(inst, list(range(len(inst.jobs))), time_limit_s, seed) or list(range(len(inst.jobs)))
    share_s = time_limit_s / len(core)
    for j in list(core):
        rest = [i for i in core if i != j]
        if rest and _infeasible(inst, rest, share_s, seed) is not None:
            core = rest
    return Unserved(tuple(inst.jobs[j].name for j in core), reason(inst, core))


def reason(inst: AllocationInstance, core: list[int]) -> str:
    """Why the jobs `core` cannot all be served, from their candidates."""
    jobs = [inst.jobs[j] for j in core]
    for job in jobs:
        if not job.candidates:
            return f"job '{job.name}' cannot be served: {job.why_none or 'it has no candidate layout'}"
        if not job.on_time():
            fastest = min(job.candidates, key=lambda c: (c.train_days or math.inf))
            return (f"job '{job.name}' cannot be served: its fastest candidate ({fastest.gpus:,} GPUs) takes "
                    f"{fastest.train_days:.1f} days to train its tokens, over its deadline of {job.deadline_days:g} days")
    one = len(jobs) == 1
    who = f"job '{jobs[0].name}' cannot be served" if one else (
        "jobs " + ", ".join(f"'{job.name}'" for job in jobs) + " cannot all be served")
    on_time = ("" if all(job.deadline_days is None for job in jobs) else
               " that meets its deadline" if one else " that meet their deadlines")
    gpus = [min(c.gpus for c in job.on_time()) for job in jobs]
    power = sum(min(c.power_kw for c in job.on_time()) for job in jobs)
    usable = inst.cluster_granules * inst.granule_gpus
    if sum(gpus) > usable or inst.power_budget_kw is None:
        needs = ", ".join(f"{job.name} {n:,}" for job, n in zip(jobs, gpus))
        return (f"{who}: their smallest GPU counts{on_time} ({needs}) add up to {sum(gpus):,} GPUs, "
                f"more than the cluster's {usable:,}")
    if power > inst.power_budget_kw:
        least = "its least-power candidate" + on_time + " draws" if one else "their least-power candidates" + on_time + " draw"
        return f"{who}: {least} {power:,.1f} kW, over the power budget of {inst.power_budget_kw:,g} kW"
    return (f"{who}: no choice of their candidates{on_time} fits both the cluster's {usable:,} GPUs and the "
            f"power budget of {inst.power_budget_kw:,g} kW")
