"""`plan allocate` (registered on the main app): a jobs file and a cluster in, planner.allocate
does the work, a table or JSON out."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from planner.cli.common import err, out, run

if TYPE_CHECKING:
    from planner.allocate import Allocation


def _table(a: Allocation) -> Table:
    from planner.layout.axes import layout_cell
    from planner.report import name_text, step_cell

    title = (f"{len(a.chosen)} jobs on {name_text(a.cluster.name)} ({a.cluster.total_gpus:,} x "
             f"{name_text(a.cluster.gpu.name)}), objective: {a.instance.objective}")
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1, 0, 0))
    for col in ("job", "model", "GPUs", "layout", "step s", "TFLOP/s/GPU", "MFU", "kW", "days"):
        t.add_column(col, justify="left" if col in ("job", "model", "layout") else "right", no_wrap=col == "layout")
    for job, model, c in a.chosen:
        s = c.layout
        days = "-" if c.train_days is None else f"{c.train_days:.1f}"
        late = job.deadline_days is not None
        t.add_row(name_text(job.name), name_text(model.name), f"{c.gpus:,}", layout_cell(s.layout), step_cell(s),
                  f"{s.model_tflops_per_gpu:.0f}", f"{s.mfu:.1%}", f"{c.power_kw:,.1f}",
                  days + (f" (<= {job.deadline_days:g})" if late else ""))
    return t


def render_allocation(a: Allocation, console: Console) -> None:
    from planner.report import name_text

    console.print(_table(a))
    budget = a.instance.power_budget_kw
    power = f"{a.power_kw:,.1f} kW" + ("" if budget is None else f" of a {budget:,g} kW budget")
    useful = sum(c.work_tflops for _, _, c in a.chosen) / 1e3
    console.print(f"total: {a.gpus_used:,} of {a.cluster.total_gpus:,} GPUs, {power}, "
                  f"{useful:,.1f} PFLOP/s of model work", highlight=False)
    days = [(c.train_days, job.name) for job, _, c in a.chosen if c.train_days is not None]
    if len(days) == len(a.chosen):
        longest = max(days)
        console.print(f"makespan: {longest[0]:.1f} days ({name_text(longest[1])})", highlight=False)
    _solver_line(a, console)


def _objective_line(a: Allocation) -> str:
    """What the solver optimised, in its unit (the integer CP-SAT reports is scaled: no unit of its own)."""
    value = a.objective_value
    if a.instance.objective == "makespan":
        return f"objective: makespan {value:,.1f} days (the longest job's time to train), minimised"
    return (f"objective: weighted model work {value / 1e3:,.1f} PFLOP/s (sum over jobs of weight x GPUs x model "
            "TFLOP/s per GPU), maximised")


def _solver_line(a: Allocation, console: Console) -> None:
    s = a.solve
    if a.feasible:
        console.print(_objective_line(a), highlight=False)
    # CP-SAT minimises integers: each job's figure in parts per job_allocation.SCALE of the largest candidate's
    # (negated for throughput), times a tie weight, plus the GPU granules used (fewer GPUs break a tie)
    figures = "" if s.objective is None else f" (its scaled integer objective {s.objective:,}, bound {s.bound:,.0f})"
    n = a.candidates
    console.print(f"solver {s.status} in {s.wall_s * 1e3:.0f} ms{figures}; {n} candidate{'s' * (n != 1)} "
                  f"(fastest layout per GPU count) over {len(a.instance.jobs)} jobs", highlight=False)


def run_allocate(jobs_file: str, cluster: str, objective: str, json_out: bool) -> None:
    from planner import api
    from planner.report import name_text  # the reason quotes job names: one line, no terminal escapes

    result = api.allocate(jobs_file, cluster, objective=objective)
    if json_out:
        print(json.dumps(result.to_dict(), indent=2, allow_nan=False))
    elif result.feasible:
        render_allocation(result, out)
    if not result.feasible:
        stopped = result.solve.unserved is None and result.solve.status == "UNKNOWN"  # no answer, not "none exists"
        why = result.solve.unserved.reason if result.solve.unserved else (
            "CP-SAT stopped (UNKNOWN) before finding an allocation or proving there is none" if stopped
            else f"solver {result.solve.status}")
        err.print(f"[red]{'no answer' if stopped else 'infeasible'}:[/red] {name_text(why)}", highlight=False, soft_wrap=True)
        if not json_out:
            _solver_line(result, err)
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add `plan allocate` to `app`."""

    @app.command()
    def allocate(
        jobs_file: Annotated[str, typer.Argument(help="jobs YAML (docs/cpsat.md, 'Several jobs on one cluster')")],
        cluster: Annotated[str, typer.Argument(help="cluster spec: a path or a shipped name")],
        objective: Annotated[str, typer.Option("--objective", help="throughput | makespan")] = "throughput",
        json_out: Annotated[bool, typer.Option("--json", help="print JSON instead of tables")] = False,
    ) -> None:
        """Share one cluster among several jobs: GPUs and layout per job, chosen with CP-SAT."""
        run(lambda: run_allocate(jobs_file, cluster, objective, json_out), json_out=json_out)
