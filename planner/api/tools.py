"""`planner.check`, `planner.export`, `planner.calibrate` and `planner.import_runs`: `plan check`, `--export`,
`plan calibrate` and `plan runs import` as functions; the commands call them (planner/cli/check.py, layouts.py,
calibrate.py)."""
from __future__ import annotations

import os
from typing import Any, Iterable

from planner.api import arguments as args
from planner.errors import InfeasibleError, SpecError


def check(paths: str | os.PathLike | Iterable[str | os.PathLike], *, memory_headroom: float | None = None,
          against_best: float | None = None, strict: bool = False):
    """Check spec, plan, sweep, runs and profile files (directories: their *.yaml and *.yml) as `plan
    check` does. Returns a `CheckReport`; what a file gets wrong is a finding in it, not an exception."""
    from planner.api.checking import CheckReport
    from planner.check import check_paths, exit_code

    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    for p in paths:
        args.typed(p, (str, os.PathLike), "PATHS")
    args.typed(memory_headroom, float, "--memory-headroom"), args.typed(against_best, float, "--against-best")
    args.typed(strict, bool, "--strict")
    if memory_headroom is not None:  # the limits import numpy: a model file's check needs neither
        from planner.constraints import constraint_of_option
        from planner.options import check_option

        check_option(constraint_of_option("memory_headroom").option, memory_headroom)
    if against_best is not None and not 0 <= against_best < 1e6:
        raise SpecError("must be a percentage >= 0", path="--against-best", expected="e.g. 5")
    files, findings = check_paths([os.fspath(p) for p in paths], headroom=memory_headroom, against_best=against_best)
    return CheckReport(tuple(files), tuple(findings), exit_code(findings, strict))


def export(result: Any, framework: str):
    """Launch settings (`Export`: `text`, `notes`, `argv`) of a result's layout for `framework`
    (megatron | megatron-bridge | nemo | torchtitan | torchtitan@0.2 | deepspeed), as `--export` prints
    them: a search's best layout, or an estimate's layout (an infeasible one too, as `plan estimate
    --export` writes it; its `violations` say why)."""
    from planner.api.results import Estimate, PoolsSearch
    from planner.export import export_settings
    from planner.search import SearchResult

    export_kind(framework)
    searched = getattr(result, "framework", None)
    if searched is not None:
        from planner.api.inputs import framework_stack

        framework_stack(searched, None, framework)  # settings of another framework than the one searched
    if isinstance(result, PoolsSearch):
        raise SpecError(f"the cluster has {len(result.per_pool)} pools; launch settings are for one pool",
                        path="--export", expected="a cluster of one pool (e.g. one of its pools as its own cluster spec)")
    if isinstance(result, Estimate):
        return export_settings(framework, result, result.model, result.cluster)
    if isinstance(result, SearchResult):
        if result.best is None:
            raise InfeasibleError("no feasible layout: " + ", ".join(f"{k} removed {v:,}"
                                                                     for k, v in result.rejected.items() if v))
        return export_settings(framework, result.best, result.model, result.cluster)
    raise SpecError(f"a {type(result).__name__}", path="result",
                    expected="the result of planner.search or planner.estimate")


def export_kind(kind: str | None) -> str | None:
    """`kind` when it names launch settings `planner.export` writes (None: none asked), else a SpecError."""
    if kind is None:
        return None
    from planner.export import EXPORTS

    args.typed(kind, str, "--export")
    if kind not in EXPORTS:
        raise SpecError(f"unknown framework '{kind[:40]}'", path="--export", expected=" | ".join(EXPORTS))
    return kind


def calibrate(runs: Iterable[Any] | str | os.PathLike, *, stack: str | None = None, cluster: str | None = None,
              model: str | None = None):
    """Fit the GPU's and the stack's constants to runs measured on your own cluster, as `plan
    calibrate` does. `runs`: paths of runs files (*.yaml, kind: runs) or training logs (Megatron-LM,
    NeMo / Megatron-Bridge, torchtitan, DeepSpeed), or `MeasuredRun`s; `cluster` and `model`: of the
    logs, where a log names none. Returns a `Calibration` (pass it as `profile=`, or `write` it)."""
    from planner.api.results import Calibration, _from
    from planner.fidelity.own import calibrate as fit
    from planner.fidelity.runs import MeasuredRun, read_runs

    items = args.items(runs, "RUNS", (str, os.PathLike, MeasuredRun), "runs files, training logs or MeasuredRuns")
    paths = [r for r in items if not isinstance(r, MeasuredRun)]
    for p in paths:
        args.typed(p, (str, os.PathLike), "RUNS")
    args.typed(stack, str, "--stack")
    _check_stack(stack)
    measured = read_runs(paths, cluster=cluster, model=model) if paths else []
    measured += [r for r in items if isinstance(r, MeasuredRun)]
    with args.numbers_checked():
        return _from(Calibration, fit(measured, stack=stack), sources=tuple(os.fspath(p) for p in paths))


def import_runs(logs: Iterable[str | os.PathLike] | str | os.PathLike, *, cluster: str | None = None,
                model: str | None = None) -> dict[str, Any]:
    """Training logs (Megatron-LM, NeMo / Megatron-Bridge, torchtitan, DeepSpeed) as one runs file's content
    (`kind: runs`), as `plan runs import` writes it: each log's run checked as `calibrate` would read it.
    `cluster`: the cluster the logs ran on (a log names none); `model`: where a log prints no model dimensions.
    What a log does not print and calibrate needs (NeMo 2's micro-batch, DeepSpeed's tp and pp) is written as
    null, for the user to fill in (`planner.fidelity.runs.unstated` lists them)."""
    from planner.fidelity.runs import checked_entries, log_entries

    paths = args.items(logs, "LOGS", (str, os.PathLike), "a training log's path or a list of them")
    for p in paths:
        args.typed(p, (str, os.PathLike), "LOGS")
    args.typed(cluster, str, "--cluster"), args.typed(model, str, "--model")
    entries = []
    for log in paths:
        data = log_entries(log, cluster=cluster, model=model, flag_unstated=True)
        checked_entries(data, os.fspath(log))  # what calibrate would refuse, the values to fill in aside
        entries += data["runs"]
    return {"kind": "runs", "runs": entries}


def _check_stack(stack: str | None) -> None:
    """A stack names a shipped profile (`plan calibrate --stack`'s message)."""
    from planner.specs import is_plain_name
    from planner.specs.shipped import shipped_names

    if stack is not None and not is_plain_name(stack):
        raise SpecError(f"'{stack[:40]}' is not a stack name", path="--stack",
                        expected=f"one of: {', '.join(shipped_names('stack'))}")
