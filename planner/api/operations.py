"""`planner.allocate` and `planner.replan`: `plan allocate` and `plan replan` as functions returning typed
results (planner/api/operation_results.py) whose `to_dict()` is the command's `--json`; the commands call
them (planner/cli/allocate.py, replan.py)."""
from __future__ import annotations

import os
from typing import Any, Mapping

from planner.api import arguments as args


def allocate(jobs: str | os.PathLike, cluster: str | os.PathLike | Mapping | Any, *,
             objective: str = "throughput"):
    """Share `cluster` among the jobs of a jobs file (docs/cpsat.md), as `plan allocate` does: one layout
    and GPU count per job, chosen with CP-SAT for `objective` (throughput | makespan). An allocation that
    cannot exist is a result (`feasible` False), not an exception."""
    from planner.allocate import allocate as solve, load_jobs
    from planner.api.inputs import load_cluster
    from planner.api.operation_results import Allocated
    from planner.api.results import _from

    args.required(jobs, (str, os.PathLike), "JOBS_FILE")
    args.typed(objective, str, "--objective")
    with args.numbers_checked():
        result = solve(load_jobs(os.fspath(jobs)), load_cluster(cluster), objective)
    return _from(Allocated, result)


def replan(model: str | os.PathLike | Mapping | Any, cluster: str | os.PathLike | Mapping | Any, *, gpus: int,
           lost_gpus: int, spares_in_h: float | None = None, tokens: float | None = None,
           global_batch: int | None = None, seq_len: int | None = None, precision: str | None = None,
           **axes: Any):
    """After `lost_gpus` of `gpus` fail, as `plan replan` does: the running layout (`tp`, `pp`,
    `micro_batch` required, the other axes as `plan estimate` takes them; limits by their file keys)
    scored, the best layout on the GPUs left, the change's cost, and shrink now or wait for spares
    (`spares_in_h`; `tokens` left to train set the horizon). No layout on the GPUs left: InfeasibleError."""
    from planner.api.inputs import prepare
    from planner.api.operation_results import Replanned
    from planner.api.results import _from
    from planner.layout.axes import AXES
    from planner.options import GPUS, check_option
    from planner.replan import replan as engine

    args.layout_keywords("replan", axes)  # the running layout, given as estimate() takes one
    args.required(gpus, int, "--gpus"), args.required(lost_gpus, int, "--lost-gpus")
    for value, kind, flag in ((spares_in_h, float, "--spares-in-h"),
                              (tokens, float, "--tokens"), (global_batch, int, "--global-batch"), (seq_len, int, "--seq-len"),
                              (precision, str, "--precision")):
        args.typed(value, kind, flag)
    with args.numbers_checked():
        check_option(GPUS, gpus)
        running = args.read_axes({a.name: axes.get(a.name) for a in AXES if a.given is not None})
        limits = args.read_limits(args.option_values("estimate", axes), "estimate", fix=False)
        # gpus=None: the engine bounds --gpus itself (from 2, and the GPUs lost within them)
        m, c = prepare(model, cluster, global_batch=global_batch, gpus=None, stack=None, nvlink_domain_gpus=None,
                       profile=None, overrides=dict(seq_len=seq_len, precision=precision))
        result = _from(Replanned, engine(m, c, gpus=gpus, lost_gpus=lost_gpus, running=running, spares_eta_h=spares_in_h,
                                         remaining_tokens=tokens, limits=limits), model=m, cluster=c)
        args.require_finite(result.to_dict())
    return result
