"""`plan allocate`: several training jobs on one cluster (docs/cpsat.md, "Several jobs on one cluster").

The jobs file is validated strictly, as the specs are (planner/specs/jobs.py). For each job, a sparse
ladder of GPU counts in its range, each a whole number of granules (nodes, or NVLink domains where
a domain spans several nodes, so that no job splits one); at each count the fastest layout of
`plan search` is a candidate. CP-SAT then picks one candidate per job (planner/cpsat/job_allocation.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

from planner.cpsat.job_allocation import (OBJECTIVES, AllocationInstance, AllocationSolve, Candidate, JobInstance,
                                          objective_value, solve)
from planner.constraints import Limits, constraint_of_option
from planner.costs.reliability import TrainingTotals, training_totals
from planner.errors import InfeasibleError, SpecError
from planner.results import ScoredLayout
from planner.search import check_precision, search
from planner.specs import ClusterSpec, ModelSpec
# The jobs file's spec and loading live in planner/specs/jobs.py (no OR-Tools); re-exported for old imports.
from planner.specs.jobs import Jobs, JobSpec, JobsSpec, jobs_from_loaded, load_jobs, with_tokens  # noqa: F401


def check_jobs(jobs: Jobs, cluster: ClusterSpec, objective: str) -> None:
    """What needs the cluster and the objective too: each model's precision runs on the cluster's
    GPU, and makespan needs every job's time to train."""
    if objective not in OBJECTIVES:
        raise SpecError(f"unknown objective '{objective}'", path="--objective", expected=" | ".join(OBJECTIVES))
    for i, (job, model) in enumerate(zip(jobs.spec.jobs, jobs.models)):
        check_precision(model, cluster, jobs.file, jobs.line_of("jobs", i, "model"))
        if objective == "makespan" and model.training.tokens is None:
            raise SpecError(f"job '{job.name}' has no token budget; --objective makespan needs every job's time to train",
                            file=jobs.file, line=jobs.line_of("jobs", i), path=f"jobs.{i}.tokens",
                            expected="tokens: the tokens to train, e.g. 1.0e12")


def granule_gpus(cluster: ClusterSpec) -> int:
    """GPUs a job gets at a time: whole nodes, or whole NVLink domains where one spans several
    nodes (a job never splits a domain)."""
    domain = cluster.node.nvlink_domain
    return domain if cluster.node.gpus < domain <= cluster.total_gpus else cluster.node.gpus


def candidate_counts(min_gpus: int, max_gpus: int, granule: int, cluster_gpus: int) -> list[int]:
    """A sparse ladder of GPU counts in [min_gpus, max_gpus]: granule x (1, 2, 3, 4, 6, 8, 12, ...),
    i.e. powers of two and 1.5 x powers of two, plus the range's first and last whole granule."""
    lo = -(-min_gpus // granule)
    hi = min(max_gpus, cluster_gpus) // granule
    if lo > hi:
        return []
    ladder = {m for k in range(0, 40) for m in (1 << k, 3 << k) if lo <= m <= hi}
    return [m * granule for m in sorted(ladder | {lo, hi})]


def no_candidate_reason(job: JobSpec, granule: int, cluster: ClusterSpec, counts: list[int],
                        never: list[int] = ()) -> str:
    if never:
        return (f"its tokens are never trained at {', '.join(f'{n:,}' for n in never)} GPUs: goodput 0 (ETTR 0: failures "
                f"outpace checkpoints and restarts under {cluster.name}'s reliability gpu_mtbf_h, restart_s, "
                f"storage_write_gbps)" + ("" if len(never) == len(counts) else
                                          f", and no feasible layout at the other counts of {', '.join(f'{n:,}' for n in counts)}"))
    if job.min_gpus > cluster.total_gpus:
        return f"min_gpus {job.min_gpus:,} is more than the {cluster.total_gpus:,} GPUs of {cluster.name}"
    if not counts:
        return (f"no whole number of {granule}-GPU {'NVLink domains' if granule > cluster.node.gpus else 'nodes'} "
                f"lies in {job.min_gpus:,}..{job.max_gpus:,} GPUs")
    return f"no feasible layout at {', '.join(f'{n:,}' for n in counts)} GPUs"


# The limits `plan search` applies by default (its --memory-headroom), so that a job's candidate is
# the layout `plan search` would print for it.
SEARCH_LIMITS = Limits(memory_headroom=constraint_of_option("memory_headroom").option.default)
# Candidates keep the default pipeline split: the stage split of 14 searches would add about 0.8 s
# to an allocation meant to take under 2 s; `plan search` at a job's count shows a faster split.
ALLOCATE_SPLIT_TOP = 0


def _with_budget(best: ScoredLayout, model: ModelSpec, cluster: ClusterSpec, gpus: int) -> ScoredLayout:
    """`best` with the time and energy to train `model`'s own token budget (planner/costs/reliability.py
    training_totals at its goodput; SEARCH_LIMITS set no critical batch, so no statistical factor)."""
    tokens = model.training.tokens
    if tokens is None:
        return replace(best, training=None)
    totals = training_totals(cluster, tokens, best.reliability.goodput_tokens_per_s, gpus, best.energy.avg_power_kw)
    return replace(best, training=TrainingTotals(**{f.name: float(getattr(totals, f.name)) for f in fields(totals)}))


def job_instance(job: JobSpec, model: ModelSpec, cluster: ClusterSpec, cache: dict | None = None) -> JobInstance:
    """The job's candidates: the fastest layout of `plan search` at each count of its ladder."""
    granule = granule_gpus(cluster)
    counts = candidate_counts(job.min_gpus, job.max_gpus, granule, cluster.total_gpus)
    cache = {} if cache is None else cache
    candidates, never = [], []
    for n in counts:
        # Searched once per model and count: the fastest layout does not depend on the token budget, only its
        # totals do (64 jobs of one model with 64 budgets searched 64 times: ~13 min on 16k GPUs).
        key = (job.model, n)
        if key not in cache:
            try:
                cache[key] = search(model, cluster, gpus=n, top_k=1, limits=SEARCH_LIMITS, split_top=ALLOCATE_SPLIT_TOP).best
            except InfeasibleError:
                cache[key] = None
        best = cache[key] and _with_budget(cache[key], model, cluster, n)
        if best is not None:
            days = None if best.training is None else best.training.train_days
            if days is not None and not math.isfinite(days):  # goodput 0: its tokens are never trained here
                never.append(n)
                continue
            candidates.append(Candidate(n, n * best.model_tflops_per_gpu, best.avg_power_kw, days, best))
    why = None if candidates else no_candidate_reason(job, granule, cluster, counts, never)
    return JobInstance(job.name, tuple(candidates), job.weight, job.deadline_days, why)


def instance(jobs: Jobs, cluster: ClusterSpec, objective: str = "throughput") -> AllocationInstance:
    cache: dict = {}
    per_job = tuple(job_instance(j, m, cluster, cache) for j, m in zip(jobs.spec.jobs, jobs.models))
    return AllocationInstance(per_job, cluster.total_gpus, granule_gpus(cluster), objective, jobs.spec.power_budget_kw)


@dataclass(frozen=True)
class Allocation:
    """What `plan allocate` found: the instance it solved and the solver's answer."""

    jobs: Jobs
    cluster: ClusterSpec
    instance: AllocationInstance
    solve: AllocationSolve

    @property
    def feasible(self) -> bool:
        return bool(self.solve.choice)

    @property
    def chosen(self) -> list[tuple[JobSpec, ModelSpec, Candidate]]:
        """(job, model, chosen candidate) per job, in the file's order; empty when infeasible."""
        return [(job, model, inst.candidates[k]) for job, model, inst, k
                in zip(self.jobs.spec.jobs, self.jobs.models, self.instance.jobs, self.solve.choice)]

    @property
    def gpus_used(self) -> int:
        return sum(c.gpus for _, _, c in self.chosen)

    @property
    def power_kw(self) -> float:
        return sum(c.power_kw for _, _, c in self.chosen)

    @property
    def candidates(self) -> int:
        return sum(len(j.candidates) for j in self.instance.jobs)

    @property
    def objective_value(self) -> float | None:
        """The objective in its unit (None when infeasible): throughput, the sum over jobs of weight x model
        work [TFLOP/s], maximised; makespan, the longest time to train [days], minimised. CP-SAT's own
        `solve.objective` is its scaled integer form (planner/cpsat/job_allocation.py `scaled`)."""
        return objective_value(self.instance, self.solve.choice) if self.feasible else None


def allocate(jobs: Jobs, cluster: ClusterSpec, objective: str = "throughput", *, time_limit_s: float = 10.0) -> Allocation:
    """One candidate per job under the cluster's GPUs, the power budget and the deadlines."""
    check_jobs(jobs, cluster, objective)
    inst = instance(jobs, cluster, objective)
    return Allocation(jobs, cluster, inst, solve(inst, time_limit_s=time_limit_s))
