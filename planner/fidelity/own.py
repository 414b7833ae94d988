"""Calibrate on your own cluster (`plan calibrate`): fit the constants of one GPU type and software
stack to a user's measured runs, starting from the shipped GPU preset and stack profile (the
priors) and never leaving the cited bounds (planner/fidelity/bounds.py).

The fit: residuals log(predicted / measured) of the step times, and a ridge term pulling each
constant to its prior (a full bound's range costs as much as a RIDGE misfit), minimised by
Levenberg-Marquardt over the constants mapped to the unit box. Which constants: as many as the runs
can determine, at most `max_free(n)` of n runs, chosen by pivoted Gram-Schmidt on the Jacobian at
the priors (the most sensitive first, then those that explain what it cannot); a constant no run
moves by MIN_SENSITIVITY stays at its prior. Every run is also predicted from the others
(leave-one-out, the whole procedure refitted), which is the error a band promises. Peak memory,
where two or more runs measured it, fits the GPU's memory reserve (the memory no formula gives: CUDA
context, NCCL buffers, fragmentation) as the ridge-weighted mean of what the formulas leave.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from planner.costs.context import job_context
from planner.costs.memory import memory_breakdown
from planner.costs.pipeline import step_time
from planner.errors import SpecError
from planner.fidelity.bounds import HARDWARE, MEMORY, stack_bounds
from planner.fidelity.calibration import priced_with as with_constants  # one mechanism with the published refit
from planner.fidelity.runs import MeasuredRun
from planner.specs import ModelSpec

# The ridge: a constant moved over its whole bound's range costs as much as a sqrt(RIDGE) log misfit of
# one run. From two runs it is chosen among RIDGES by the runs' own left-out errors; of one, RIDGE: benchmarks/calibrate_own.py over the published scale series and jobs (k = 1 and 3 of
# their runs, left-out constants as priors) found 0.05 fits one run's noise into the constants (llm-foundry
# 6.3 -> 7.5 %, vocabpar 4.0 -> 4.4 % from one run) and 2 moves them too little (vTrain 23 -> 16 % from three).
RIDGE = 0.5
RIDGES = (0.05, 0.5, 2.0)
LOO_EXACT = 8  # runs up to which the leave-one-out errors refit the whole procedure
MEMORY_RIDGE = 0.5  # the prior reserve counts as half a measured run
# Runs stating peak memory from which the reserve is fitted: two, the fewest that leave a left-out memory error
# (the check and the memory band a profile gives). From one, the reserve would take all the formulas leave of
# that run, unchecked: the sample Megatron-LM log drove it to its 16 GiB bound (49.6 GiB left of 62.0) and the
# torchtitan one to 0, and every later --profile search reserved that per GPU. Time constants have ridge and
# leave-one-out behind them; one run's memory has neither.
MIN_MEMORY_RUNS = 2
MIN_SENSITIVITY = 0.005  # a constant whose whole range moves no run's time by 0.5 % is left at its prior
MAX_ITERATIONS = 40
CONTRADICTION = 1.5  # the same layout measured this many times apart: the runs contradict each other
OUTLIER = 3.0  # a run this many times the others' RMS error off the fit is named
# A measured step this many times faster or slower than the shipped constants predict is refused: a step in
# ms written as s is 1,000x, while published runs that trained reach 300x (the Ultra-Scale Playbook's 64-node
# runs, on a cluster slow at scale: benchmarks/calibrate_own.py calibrates on them) and vTrain's host-bound
# runs 2.5x; a profile's errors stop at 10^6 % (planner/specs/profile.py)
MAX_MEASURED_RATIO = 500.0
LAYOUT_AXES = ("dp", "tp", "pp", "cp", "ep", "etp", "vpp", "micro_batch", "recompute", "sequence_parallel", "zero")


def max_free(n_runs: int) -> int:
    """Constants n runs may determine: one of one run, then one more per two runs (a fit of as many
    constants as runs interpolates them, and its leave-one-out error says nothing)."""
    return max(1, math.ceil(n_runs / 2))


@dataclass(frozen=True)
class Constant:
    name: str
    group: str  # "hardware" (the GPU preset's efficiency), "stack" (the stack profile), "memory" (the GPU)
    value: float
    prior: float
    bounds: tuple[float, float]
    fitted: bool

    @property
    def at_bound(self) -> bool:
        lo, hi = self.bounds
        return self.fitted and min(self.value - lo, hi - self.value) <= 1e-3 * (hi - lo)


@dataclass(frozen=True)
class RunResult:
    run: MeasuredRun
    layout: dict  # the layout as scored (every axis, estimate's defaults filled in)
    fitted_s: float
    loo_s: float | None  # predicted from the other runs (None with one run)
    fitted_memory_gib: float
    loo_memory_gib: float | None
    infeasible: tuple[str, ...]  # what the planner says stops this layout (a run that trained: a model to mend)

    @property
    def loo_error_pct(self) -> float | None:
        return None if self.loo_s is None else 100 * (self.loo_s / self.run.step_time_s - 1)

    @property
    def fitted_error_pct(self) -> float:
        return 100 * (self.fitted_s / self.run.step_time_s - 1)


@dataclass(frozen=True)
class Calibration:
    """A fit of one GPU type and stack to measured runs: the profile `plan calibrate` writes."""

    gpu: str
    stack: str
    constants: tuple[Constant, ...]
    runs: tuple[RunResult, ...]
    notes: tuple[str, ...] = field(default=())
    ridge: float = RIDGE  # the prior's weight the fit used (chosen by the runs' left-out errors from 3 runs)

    def constant(self, name: str) -> Constant:
        return next(c for c in self.constants if c.name == name)


@dataclass
class _Job:
    """A run as the fit predicts it: the model and cluster at the priors and its one-row layout."""

    run: MeasuredRun
    layouts: object
    scored: object  # estimate_layout's ScoredLayout at the priors


def _jobs(runs: list[MeasuredRun]) -> list[_Job]:
    from planner.estimate import estimate_defaults, estimate_layout, layout_of

    jobs = []
    for r in runs:
        given = estimate_defaults(r.given, r.gpus, r.cluster)
        try:
            lay = layout_of(r.model, r.gpus, given, gpus_said=f"the run uses {r.gpus} GPUs", in_file=True)
            scored = estimate_layout(r.model, r.cluster, gpus=r.gpus, gpus_said=f"the run uses {r.gpus} GPUs",
                                     in_file=True, **given)
        except SpecError as exc:
            raise SpecError(f"{r.name}: {exc.message}", file=r.file, line=r.line, path=exc.path,
                            expected=exc.expected) from None
        ratio = r.step_time_s / float(scored.step_time_s)
        if not 1 / MAX_MEASURED_RATIO <= ratio <= MAX_MEASURED_RATIO:
            factor = max(ratio, 1 / ratio) if ratio > 0 else math.inf  # a 5e-324 s step: the ratio underflows to 0
            raise SpecError(f"{r.name}: measured step {r.step_time_s:.3g} s, {factor:.3g} times "
                            f"{'slower' if ratio > 1 else 'faster'} than the {float(scored.step_time_s):.3g} s the "
                            "shipped constants predict", file=r.file, line=r.line, path="measured",
                            expected=f"a step within {MAX_MEASURED_RATIO:g}x of the prediction (no constant within "
                                     "its bounds moves a step further): check the unit (s, not ms) and the run's layout")
        jobs.append(_Job(r, lay, scored))
    return jobs


def _one_kind(runs: list[MeasuredRun], stack: str | None) -> tuple[str, str]:
    gpus = {r.cluster.gpu.name for r in runs}
    if len(gpus) > 1:
        odd = next(r for r in runs if r.cluster.gpu.name != runs[0].cluster.gpu.name)
        raise SpecError(f"runs on {len(gpus)} GPU types ({', '.join(sorted(gpus))}): a profile is for one",
                        file=odd.file, line=odd.line, path="cluster", expected="runs on one GPU type (one runs file each)")
    stacks = {r.model.training.stack.name for r in runs} if stack is None else {stack}
    if len(stacks) > 1:
        odd = next(r for r in runs if r.model.training.stack.name != runs[0].model.training.stack.name)
        raise SpecError(f"runs of {len(stacks)} software stacks ({', '.join(sorted(stacks))}): a profile is for one",
                        file=odd.file, line=odd.line, path="stack", expected="one stack (or --stack NAME)")
    return gpus.pop(), stacks.pop()


class _Problem:
    """The candidate constants of a set of jobs in the unit box, and the jobs' predicted step times
    (jobs of one model and cluster priced in one call: their layouts as the rows of one array)."""

    def __init__(self, jobs: list[_Job], stack: str):
        run0 = jobs[0].run
        eff = run0.cluster.gpu.efficiency
        constants = run0.model.training.stack.for_gpu(run0.cluster.gpu.name)
        fp8 = any(j.run.model.training.numerics.is_fp8 for j in jobs)
        hw = {k: b for k, b in HARDWARE.items() if (k != "gemm_fp8" or fp8) and getattr(eff, k, None) is not None}
        self.names = [("hardware", k) for k in hw] + [("stack", k) for k in stack_bounds(stack)]
        self.bounds = np.array([hw[k] if g == "hardware" else stack_bounds(stack)[k] for g, k in self.names])
        prior = [getattr(eff if g == "hardware" else constants, k) for g, k in self.names]
        lo, hi = self.bounds[:, 0], self.bounds[:, 1]
        self.prior = np.clip(np.array(prior, dtype=float), lo, hi)
        self.u0 = (self.prior - lo) / (hi - lo)
        self.jobs = jobs
        self.groups = _groups(jobs)

    def values(self, u: np.ndarray) -> np.ndarray:
        lo, hi = self.bounds[:, 0], self.bounds[:, 1]
        return lo + np.clip(u, 0, 1) * (hi - lo)

    def log_times(self, u: np.ndarray) -> np.ndarray:
        """log step time of every job with the constants at `u`."""
        v = self.values(u)
        hw = {k: float(x) for (g, k), x in zip(self.names, v) if g == "hardware"}
        st = {k: float(x) for (g, k), x in zip(self.names, v) if g == "stack"}
        out = np.empty(len(self.jobs))
        for model, cluster, layouts, idx in self.groups:
            m, c = with_constants(model, cluster, hw, st)
            out[idx] = step_time(job_context(m, c, layouts)).total
        return np.log(out)


def _groups(jobs: list[_Job]) -> list[tuple]:
    """(model, cluster, the jobs' layouts as one array, their indices) per distinct model and cluster."""
    from planner.layout.space import Layouts

    keyed: dict[tuple, list[int]] = {}
    for i, j in enumerate(jobs):
        keyed.setdefault((j.run.model.model_dump_json(), j.run.cluster.model_dump_json()), []).append(i)
    out = []
    for idx in keyed.values():
        first = jobs[idx[0]].layouts
        rows = Layouts(**{k: np.concatenate([getattr(jobs[i].layouts, k) for i in idx]) for k in first.columns()})
        out.append((jobs[idx[0]].run.model, jobs[idx[0]].run.cluster, rows, np.array(idx)))
    return out


def _jacobian(p: _Problem, u: np.ndarray, free: list[int], base: np.ndarray) -> np.ndarray:
    """d log t / d u of the free constants (every job): a step of 0.02 of the range, inward at a bound."""
    cols = []
    for i in free:
        h = 0.02 if u[i] <= 0.98 else -0.02
        v = u.copy()
        v[i] += h
        cols.append((p.log_times(v) - base) / h)
    return np.array(cols).T.reshape(len(p.jobs), len(free))


def sensitivities(p: _Problem) -> np.ndarray:
    """(jobs, constants): the change of log step time as each constant sweeps its whole range."""
    sens = []
    for i in range(len(p.names)):
        lo, hi = p.u0.copy(), p.u0.copy()
        lo[i], hi[i] = 0.0, 1.0
        sens.append(p.log_times(hi) - p.log_times(lo))
    return np.array(sens).T.reshape(len(p.jobs), len(p.names))


def select_free(cols: np.ndarray, limit: int) -> list[int]:
    """Up to `limit` constants, by pivoted Gram-Schmidt on the sensitivities (rows: the runs fitted):
    the most sensitive first, then those that explain what the chosen ones cannot."""
    chosen, rest = [], cols.copy()
    for _ in range(min(limit, cols.shape[1])):
        norms = np.linalg.norm(rest, axis=0) / math.sqrt(max(cols.shape[0], 1))
        norms[chosen] = 0.0
        i = int(np.argmax(norms))
        if norms[i] < MIN_SENSITIVITY:
            break
        chosen.append(i)
        q = rest[:, i] / np.linalg.norm(rest[:, i])
        rest = rest - np.outer(q, q @ rest)
    return sorted(chosen)


@dataclass(frozen=True)
class _Fit:
    u: np.ndarray
    free: list
    log_times: np.ndarray  # every job's, at u
    jacobian: np.ndarray | None  # of the fitted jobs' log times in the free constants, at u


def _fit_times(p: _Problem, rows: np.ndarray, measured: np.ndarray, ridge: float, sens: np.ndarray,
               start: np.ndarray | None = None) -> _Fit:
    """The constants minimising the log errors of jobs `rows` plus the ridge (Levenberg-Marquardt in
    the unit box), at most max_free(len(rows)) of them free; from `start`'s values of them (a fit of
    more runs, for the leave-one-out refits) or the priors."""
    free = select_free(sens[rows], max_free(rows.size))
    u = p.u0.copy()
    if start is not None:
        u[free] = start[free]
    t = p.log_times(u)
    if not free:
        return _Fit(u, free, t, None)
    target, w = np.log(measured[rows]), math.sqrt(ridge)

    def residuals(tt, x):
        return np.concatenate([tt[rows] - target, w * (x[free] - p.u0[free])])

    r = residuals(t, u)
    cost, mu, J = float(r @ r), 1e-2, None
    for _ in range(MAX_ITERATIONS):
        J = _jacobian(p, u, free, t)[rows]
        A, g = J.T @ J + ridge * np.eye(len(free)), J.T @ r[:rows.size] + w * w * (u[free] - p.u0[free])
        accepted = None
        for _ in range(8):
            trial = u.copy()
            trial[free] = np.clip(u[free] + np.linalg.solve(A + mu * np.diag(np.diag(A)), -g), 0, 1)
            t2 = p.log_times(trial)
            r2 = residuals(t2, trial)
            if float(r2 @ r2) < cost:
                accepted = (trial, t2, r2)
                break
            mu *= 4
        if accepted is None:
            break
        gain = cost - float(accepted[2] @ accepted[2])
        u, t, r = accepted
        cost, mu = float(r @ r), max(mu / 3, 1e-7)
        if gain < 1e-10 + 1e-7 * cost:
            break
    return _Fit(u, free, t, _jacobian(p, u, free, t)[rows])


def _left_out(p: _Problem, measured: np.ndarray, ridge: float, sens: np.ndarray, full: _Fit) -> np.ndarray:
    """Each run's log step time predicted without it: the whole fit redone (constants chosen again) up
    to LOO_EXACT runs; beyond, the ridge regression's closed form at the full fit (r_i / (1 - h_ii))."""
    n = len(p.jobs)
    everything = np.arange(n)
    if n <= LOO_EXACT:
        return np.array([_fit_times(p, np.delete(everything, i), measured, ridge, sens, full.u).log_times[i]
                         for i in range(n)])
    if full.jacobian is None:
        return full.log_times
    J = full.jacobian
    h = np.einsum("ij,jk,ik->i", J, np.linalg.inv(J.T @ J + ridge * np.eye(J.shape[1])), J)
    r = full.log_times - np.log(measured)
    return np.log(measured) + r / np.maximum(1 - h, 1e-3)


def _ridge_fit(p: _Problem, measured: np.ndarray) -> tuple[float, _Fit, np.ndarray | None]:
    """(ridge, fit, left-out log times): from two runs, the ridge of RIDGES whose left-out errors are
    smallest (cross-validated on the user's own runs). `inf` (no constant moved: the priors) is not among
    them: chosen on 2-5 runs' left-out errors it made the published sources' other runs worse (vTrain with
    two runs 18.9 -> 22.5 %, benchmarks/calibrate_own.py, fifth session)."""
    sens = sensitivities(p)
    everything = np.arange(len(p.jobs))
    if len(p.jobs) == 1:
        return RIDGE, _fit_times(p, everything, measured, RIDGE, sens), None
    best = None
    for ridge in RIDGES:
        if math.isinf(ridge):
            t = p.log_times(p.u0)
            fit, loo = _Fit(p.u0.copy(), [], t, None), t
        else:
            fit = _fit_times(p, everything, measured, ridge, sens)
            loo = _left_out(p, measured, ridge, sens, fit)
        rms = float(np.sqrt(np.mean((loo - np.log(measured)) ** 2)))
        if best is None or rms < best[0] - 1e-12:
            best = (rms, ridge, fit, loo)
    return best[1], best[2], best[3]


def _memory_base_gib(job: _Job) -> float:
    """The busiest GPU's memory without the reserve (the formulas' part) [GiB]."""
    run = job.run
    reserve = run.cluster.gpu.memory_reserve_gib
    return float(memory_breakdown(job_context(run.model, run.cluster, job.layouts)).total[0]) - reserve


def _fit_reserve(base: np.ndarray, measured: np.ndarray, prior: float) -> float:
    lo, hi = MEMORY["memory_reserve_gib"]
    return float(np.clip((np.sum(measured - base) + MEMORY_RIDGE * prior) / (measured.size + MEMORY_RIDGE), lo, hi))


def calibrate(runs: list[MeasuredRun], *, stack: str | None = None) -> Calibration:
    """Fit the GPU's and the stack's constants to `runs` (one GPU type, one stack) and predict each
    run from the others. `stack`: a shipped stack profile every run is priced with."""
    from planner.search import with_stack

    if not runs:
        raise SpecError("no runs to calibrate on", expected="at least one measured run")
    if stack is not None:
        runs = [_with_model(r, with_stack(r.model, stack)) for r in runs]
    gpu, stack_name = _one_kind(runs, stack)
    jobs = _jobs(runs)
    p = _Problem(jobs, stack_name)
    measured = np.array([r.step_time_s for r in runs])
    ridge, fit, loo_log = _ridge_fit(p, measured)
    u, free = fit.u, fit.free
    fitted = np.exp(fit.log_times)
    loo = [None] * len(runs) if loo_log is None else [float(x) for x in np.exp(loo_log)]
    mem_fit, mem_loo, reserve = _memory(jobs, runs)
    values = p.values(u)
    constants = [Constant(k, g, float(v), float(pr), (float(b[0]), float(b[1])), i in free)
                 for i, ((g, k), v, pr, b) in enumerate(zip(p.names, values, p.prior, p.bounds))]
    constants.append(reserve)
    results = tuple(RunResult(j.run, j.scored.layout, float(f), lo, mf, ml,
                              tuple(f"{v.constraint}: {v.message}" for v in j.scored.violations))
                    for j, f, lo, mf, ml in zip(jobs, fitted, loo, mem_fit, mem_loo))
    cal = Calibration(gpu, stack_name, tuple(constants), results)
    return Calibration(gpu, stack_name, tuple(constants), results, tuple(notes_of(cal, len(free), ridge)), ridge)


def _with_model(run: MeasuredRun, model: ModelSpec) -> MeasuredRun:
    from dataclasses import replace

    return replace(run, model=model)


def _memory(jobs: list[_Job], runs: list[MeasuredRun]) -> tuple[list[float], list[float | None], Constant]:
    """Predicted peak memory per run with the fitted reserve, each also from the others' fit."""
    prior = runs[0].cluster.gpu.memory_reserve_gib
    bounds = MEMORY["memory_reserve_gib"]
    base = np.array([_memory_base_gib(j) for j in jobs])
    have = np.array([r.peak_memory_gib is not None for r in runs])
    if have.sum() < MIN_MEMORY_RUNS:  # the prior; notes_of says why when one run states its memory
        return list(base + prior), [None] * len(runs), Constant("memory_reserve_gib", "memory", prior, prior, bounds, False)
    meas = np.array([r.peak_memory_gib or 0.0 for r in runs])
    reserve = _fit_reserve(base[have], meas[have], prior)
    loo: list[float | None] = [None] * len(runs)
    for i in np.flatnonzero(have) if have.sum() > 1 else ():
        others = have.copy()
        others[i] = False
        loo[i] = float(base[i] + _fit_reserve(base[others], meas[others], prior))
    return list(base + reserve), loo, Constant("memory_reserve_gib", "memory", reserve, prior, bounds, True)


def notes_of(cal: Calibration, n_free: int, ridge: float = RIDGE) -> list[str]:
    """What a user must be told of a fit: how many constants the runs could set, bounds reached,
    runs that contradict each other, runs far off the fit, runs the planner would refuse."""
    n = len(cal.runs)
    fitted = [c.name for c in cal.constants if c.fitted and c.group != "memory"]
    out = [constants_note(n, fitted) + f"; prior weight {ridge:g}"
           + (" (the smallest left-out error of " + ", ".join(f"{r:g}" for r in RIDGES) + ")" if n >= 2 else "")]
    if n == 1:
        out.append("one run: no leave-one-out error, so bands stay those of the shipped calibration")
    out += _memory_notes(cal)
    out += [f"{c.name} reached its bound {c.value:g} (range {c.bounds[0]:g}-{c.bounds[1]:g}): what the runs ask "
            "for lies outside what its cited figures allow; another mechanism is missing" for c in cal.constants if c.at_bound]
    out += _contradictions(cal.runs)
    errs = np.array([abs(r.fitted_error_pct) for r in cal.runs])
    for i, r in enumerate(cal.runs):
        others = np.delete(errs, i)
        if others.size >= 2 and errs[i] > max(OUTLIER * float(np.sqrt(np.mean(others ** 2))), 10.0):
            out.append(f"{r.run.name} is {r.fitted_error_pct:+.1f} % off the fit, the others {np.sqrt(np.mean(others ** 2)):.1f} % "
                       "(RMS): a mis-stated run, or a mechanism the planner lacks")
    out += [f"{r.run.name}: the planner calls this layout infeasible ({'; '.join(r.infeasible)}), yet it was measured; "
            "kept in the fit" for r in cal.runs if r.infeasible]
    return out


def constants_note(n_runs: int, fitted: list[str]) -> str:
    """How many time constants were fitted and what stopped there: the runs' count (max_free), or
    select_free finding no other constant that moves the runs' times beyond what the chosen ones do."""
    limit, k = max_free(n_runs), len(fitted)
    runs = f"{n_runs} run{'s' if n_runs != 1 else ''} fit{'s' if n_runs == 1 else ''} at most {limit} constant" \
           f"{'s' if limit != 1 else ''}"
    if k == 0:
        return (f"no constant fitted: none moves the runs' step times by {100 * MIN_SENSITIVITY:g} % over its cited "
                "range; every constant keeps its prior")
    head = f"{k} constant{'s' if k != 1 else ''} fitted ({', '.join(fitted)})"
    if k >= limit:
        why = f"{runs} (one of one run, one more per two runs)"
    else:
        why = (f"{runs}, and no other constant moves their step times by {100 * MIN_SENSITIVITY:g} % over its cited "
               f"range beyond what {' and '.join(fitted)} already {'does' if k == 1 else 'do'}")
    return f"{head}: {why}; the others keep their priors"


def _memory_notes(cal: Calibration) -> list[str]:
    """Why the memory reserve kept its prior though a run states its peak memory (fewer than MIN_MEMORY_RUNS)."""
    reserve = cal.constant("memory_reserve_gib")
    stated = [r for r in cal.runs if r.run.peak_memory_gib is not None]
    if reserve.fitted or not stated:
        return []
    (r,) = stated
    left = r.run.peak_memory_gib - (r.fitted_memory_gib - reserve.value)  # measured minus the formulas' part
    lo, hi = reserve.bounds
    out = (f"memory_reserve_gib keeps its prior {reserve.prior:g} GiB: one run states its peak memory, and a reserve "
           f"fitted to it would take all the formulas leave ({left:.1f} GiB of {r.run.peak_memory_gib:.1f} measured) "
           f"with no other run to check it; it is fitted from {MIN_MEMORY_RUNS} or more runs that state memory")
    if left > hi:
        out += (f"; {left:.1f} GiB is beyond the {hi:g} GiB a reserve may be: the formulas miss memory of this run, "
                "or its figure is not the busiest GPU's peak")
    elif left < lo:
        out += f"; the formulas alone count {-left:.1f} GiB more than it used"
    return [out]


def _contradictions(results) -> list[str]:
    out, seen = [], {}
    for r in results:
        key = (r.run.model.name, r.run.model.training.global_batch, r.run.model.seq_len, r.run.gpus,
               repr(sorted(r.layout.items())))
        if key in seen:
            a = seen[key]
            ratio = max(a.run.step_time_s, r.run.step_time_s) / min(a.run.step_time_s, r.run.step_time_s)
            if ratio >= CONTRADICTION:
                out.append(f"{a.run.name} and {r.run.name} are the same layout measured {ratio:.2f}x apart: the runs "
                           "contradict each other (a slow node, another setting not stated?)")
        else:
            seen[key] = r
    return out
