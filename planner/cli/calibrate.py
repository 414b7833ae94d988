"""`plan calibrate` and `plan runs import` (registered on the main app): measured runs of the user's
own cluster in, a profile out (planner/fidelity/own.py fits, planner/fidelity/profile.py writes)."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from planner.cli.common import err, out, run
from planner.errors import clip_file, printable

RunsArg = Annotated[list[Path], typer.Argument(help=(
    "runs files (*.yaml, kind: runs) or training logs of Megatron-LM, NeMo / Megatron-Bridge, torchtitan or DeepSpeed"))]
ClusterOpt = Annotated[Optional[str], typer.Option("--cluster", help="the cluster of the logs (a shipped name or a path); runs files name their own")]
ModelOpt = Annotated[Optional[str], typer.Option("--model", help="the model of the logs, where a log prints no dimensions")]


def render_calibration(cal, data: dict, console) -> None:
    """The runs measured vs fitted and left out, the constants that moved, the range, the notes."""
    from rich import box
    from rich.table import Table

    from planner.layout.axes import layout_cell

    console.print(f"calibrated {escape(cal.stack)} on {escape(cal.gpu)} from {len(cal.runs)} run"
                  f"{'s' if len(cal.runs) != 1 else ''}", highlight=False)
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1, 0, 0))
    memory = any(r.run.peak_memory_gib is not None for r in cal.runs)  # no run states memory: no empty column
    for col in ("run", "model", "GPUs", "layout", "measured s", "fitted s", "error", "left out") + (
            ("mem GiB meas/fit",) if memory else ()):
        t.add_column(col, justify="left" if col in ("run", "model", "layout") else "right", no_wrap=col == "layout")
    for r in cal.runs:
        mem = "" if r.run.peak_memory_gib is None else f"{r.run.peak_memory_gib:.1f}/{r.fitted_memory_gib:.1f}"
        left = "" if r.loo_error_pct is None else f"{r.loo_error_pct:+.1f}%"
        t.add_row(escape(printable(r.run.name)), escape(printable(r.run.model.name)), f"{r.run.gpus:,}",
                  layout_cell(r.layout), f"{r.run.step_time_s:.3f}", f"{r.fitted_s:.3f}", f"{r.fitted_error_pct:+.1f}%", left,
                  *((mem,) if memory else ()))
    console.print(t)
    c = Table(title="constants (prior -> fitted, cited bounds)", title_justify="left", box=box.SIMPLE_HEAD,
              pad_edge=False, padding=(0, 1, 0, 0))
    for col in ("constant", "of", "prior", "fitted", "change", "bounds"):
        c.add_column(col, justify="left" if col in ("constant", "of", "bounds") else "right")
    for k in cal.constants:
        if not k.fitted:
            continue
        change = f"{100 * (k.value / k.prior - 1):+.1f}%" if k.prior else ""
        c.add_row(k.name, k.group, f"{k.prior:.4g}", f"{k.value:.4g}", change,
                  f"{k.bounds[0]:g}-{k.bounds[1]:g}" + (" (at bound)" if k.at_bound else ""))
    console.print(c)
    m = data["measured"]
    console.print(f"measured: {m['gpus'][0]:,}-{m['gpus'][1]:,} GPUs, {m['params_b'][0]:.3g}-{m['params_b'][1]:.3g} B "
                  f"parameters, {m['seq_len'][0]:,}-{m['seq_len'][1]:,} tokens, {', '.join(m['precisions'])}; varied: "
                  f"{', '.join(a for a, v in m['axes'].items() if len(v) > 1) or 'no layout axis'}", highlight=False)
    loo = [abs(r.loo_error_pct) for r in cal.runs if r.loo_error_pct is not None]
    if loo:
        console.print(f"left out: mean |error| {sum(loo) / len(loo):.1f}%, largest {max(loo):.1f}% "
                      f"(each run predicted from the others)", highlight=False)
    for note in cal.notes:
        console.print(f"[yellow]note:[/yellow] {escape(printable(note))}", highlight=False, soft_wrap=True)


def calibrate_cmd(
    runs: RunsArg,
    output: Annotated[Optional[Path], typer.Option("-o", "--output", help=(
        "write the profile here (YAML, kind: profile) for --profile; whole or not at all"))] = None,
    stack: Annotated[Optional[str], typer.Option("--stack", help="price every run with this shipped stack profile")] = None,
    cluster: ClusterOpt = None, model: ModelOpt = None,
    json_out: Annotated[bool, typer.Option("--json", help="print the profile as JSON")] = False,
) -> None:
    """Fit the planner's constants to runs measured on your own cluster; predict with --profile."""
    def go() -> None:
        from planner import api
        from planner.api.results import profile_name
        from planner.atomic import check_output

        if output is not None:
            check_output(output, "--output", runs)  # before the fit: an input or a FIFO is refused at once
        cal = api.calibrate(runs, stack=stack, cluster=cluster, model=model)
        data = cal.to_dict(profile_name(output))
        if json_out:
            sys.stdout.write(json.dumps(data, indent=2) + "\n")
        else:
            render_calibration(cal, data, out)
        if output is not None:
            cal.write(output, data["name"])
            err.print(f"wrote {escape(clip_file(str(output)))}: plan search MODEL CLUSTER --profile "
                      f"{escape(clip_file(str(output)))}", highlight=False, soft_wrap=True)

    run(go, json_out=json_out)


def runs_import(
    logs: Annotated[list[Path], typer.Argument(help="training logs (Megatron-LM, NeMo / Megatron-Bridge, torchtitan, DeepSpeed)")],
    output: Annotated[Optional[Path], typer.Option("-o", "--output", help="write the runs file here (default: stdout)")] = None,
    cluster: ClusterOpt = None, model: ModelOpt = None,
) -> None:
    """Read training logs into a runs file (kind: runs) to check, edit and calibrate on."""
    def go() -> None:
        from planner import api
        from planner.atomic import check_output, write_atomic
        from planner.specs.yamlio import dump_yaml

        if output is not None:
            check_output(output, "--output", logs)
        from planner.fidelity.runs import unstated

        data = api.import_runs(logs, cluster=cluster, model=model)
        entries = data["runs"]
        text = dump_yaml(data)
        if output is None:
            sys.stdout.write(text)
        else:
            write_atomic(output, text, "--output", logs)
            err.print(f"wrote {escape(clip_file(str(output)))}: {len(entries)} run{'s' if len(entries) != 1 else ''}",
                      highlight=False)
        where = "the runs file" if output is None else clip_file(str(output))
        for i, entry in enumerate(entries):  # what the log does not print: null in the file, to fill in
            for keys, doc in unstated(entry):
                name = escape(printable(str(entry.get("name"))))
                err.print(f"[yellow]fill in:[/yellow] runs.{i}.{'.'.join(keys)}: {name}'s log does not print the "
                          f"{escape(doc)}; set it in {escape(where)} before plan calibrate", highlight=False, soft_wrap=True)

    run(go)


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate_cmd)
    runs_app = typer.Typer(help="Measured runs: read training logs into a runs file.", no_args_is_help=True)
    runs_app.command("import")(runs_import)
    app.add_typer(runs_app, name="runs")
