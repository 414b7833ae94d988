"""`plan search` and `plan estimate` (registered on the main app, loaded when asked for): flags in,
planner.api.search / planner.api.estimate do the work, tables from planner/report.py or the result's
`to_dict()` out."""
from __future__ import annotations

import json
from typing import Annotated, Optional

import typer
from rich.markup import escape

from planner.cli.common import (DEFAULT_CLUSTER, DEFAULT_MODEL, axis_params, err, numbers_checked, option_params, out,
                                 warn_implausible,
                                run, with_params)
from planner.errors import SpecError
from planner.specs.precision import PRECISIONS

ModelArg = Annotated[str, typer.Argument(help="model spec: a path or a shipped name")]
ClusterArg = Annotated[str, typer.Argument(help="cluster spec: a path or a shipped name")]
Gpus = Annotated[Optional[int], typer.Option("--gpus", help="GPUs to use (default: the whole cluster)")]
GlobalBatch = Annotated[Optional[int], typer.Option("--global-batch", help="sequences per step (overrides the model spec)")]
Stack = Annotated[Optional[str], typer.Option("--stack", help=(
    "software stack: megatron-core, megatron-lm-2022, megatron-deepspeed, deepspeed-zero3, pytorch-fsdp "
    "or a shipped profile in configs/stacks (overrides the model's training.stack)"))]
AsJson = Annotated[bool, typer.Option("--json", help="print JSON instead of tables")]
Export = Annotated[Optional[str], typer.Option("--export", help=(
    "print launch settings of the layout instead of the table: megatron | megatron-bridge | nemo | torchtitan | torchtitan@main | torchtitan@0.2 | deepspeed"))]
Framework = Annotated[Optional[str], typer.Option("--framework", help=(
    "only layouts this framework runs (megatron | megatron-bridge | nemo | torchtitan | torchtitan@main | torchtitan@0.2 | deepspeed), "
    "priced with its stack profile unless --stack says otherwise"))]
SeqLen = Annotated[Optional[int], typer.Option("--seq-len", help="tokens per sequence (overrides the model spec's seq_len)")]
Precision = Annotated[Optional[str], typer.Option("--precision", help=(
    f"{' | '.join(PRECISIONS)} (overrides the model spec's training.precision)"))]
OffloadLayers = Annotated[Optional[int], typer.Option("--offload-layers", help=(
    "layers whose activations an activation-offloading layout moves to the host, at most a rank's layers - 1 "
    "(overrides the model spec's training.offload_layers; default: the fewest that fit)"))]
TorchCompile = Annotated[Optional[bool], typer.Option("--torch-compile/--no-torch-compile", help=(
    "torch.compile each block, or not (overrides the model spec's training.torch_compile; priced where the stack "
    "runs its block's elementwise ops one by one without it: torchtitan)"))]
ProfileOpt = Annotated[Optional[str], typer.Option("--profile", help=(
    "a profile from plan calibrate (kind: profile): price with the constants fitted to your own runs, bands from their errors"))]
NvlinkSegment = Annotated[Optional[int], typer.Option("--nvlink-domain-gpus", help=(
    "GPUs of an NVLink domain (an NVL72 rack) the job's consecutive ranks fill, e.g. 64 of 72 "
    "(overrides the cluster's node.nvlink_segment_gpus)"))]


def print_json(data) -> None:
    """Strict JSON: a NaN or an infinity is refused naming its field (exit 2), never `NaN` in the output."""
    from planner.api.arguments import require_finite

    require_finite(data)
    print(json.dumps(data, indent=2, allow_nan=False))


def search(
    model: ModelArg = DEFAULT_MODEL, cluster: ClusterArg = DEFAULT_CLUSTER, gpus: Gpus = None,
    global_batch: GlobalBatch = None, seq_len: SeqLen = None, precision: Precision = None,
    nvlink_domain_gpus: NvlinkSegment = None, stack: Stack = None, framework: Framework = None,
    profile: ProfileOpt = None, offload_layers: OffloadLayers = None, torch_compile: TorchCompile = None,
    objective: Annotated[str, typer.Option("--objective", help="time | energy | cost | carbon")] = "time",
    top: Annotated[int, typer.Option("--top", help="how many layouts to list")] = 5, json_out: AsJson = False,
    export: Export = None,
    frontier: Annotated[bool, typer.Option("--frontier", help="also list the Pareto frontier of step time vs energy per token")] = False,
    gpus_range: Annotated[Optional[str], typer.Option("--gpus-range", help="LO:HI: best layout per power-of-two GPU count and the recommended count")] = None,
    plot: Annotated[Optional[str], typer.Option("--plot", help=(
        "draw the step time / energy per token frontier to FILE (.png or .svg; needs matplotlib); as --frontier, "
        "tries the power caps, so capped layouts join the table (--no-power-caps: not)"))] = None,
    power_caps: Annotated[Optional[bool], typer.Option("--power-caps/--no-power-caps", help="try the GPU preset's power caps (default: unless --objective time without energy limits, or with --frontier or --plot)")] = None,
    **options,
) -> None:
    """Find the best layouts for MODEL on CLUSTER (default: GPT-3 175B on 1024 A100s)."""

    def go():
        from planner import api, report
        from planner.api.results import GpuCounts, PoolsSearch

        check_export(export, json_out, gpus_range=gpus_range, plot=plot)
        figure = _figure(plot, "--plot")  # every option is checked before the files are read
        warn_implausible(model, cluster)
        result = api.search(model, cluster, gpus=gpus, profile=profile, framework=framework, objective=objective,
                            top=top, global_batch=global_batch, seq_len=seq_len, precision=precision,
                            nvlink_domain_gpus=nvlink_domain_gpus, stack=stack, frontier=frontier or figure is not None,
                            power_caps=power_caps, gpus_range=gpus_range, export=export,
                            offload_layers=offload_layers, torch_compile=torch_compile, **options)
        if isinstance(result, GpuCounts):
            print_json(result.to_dict()) if json_out else report.render_gpus_range(result, out)
            if result.recommended is None:
                raise typer.Exit(1)
        elif isinstance(result, PoolsSearch):
            print_json(result.to_dict()) if json_out else report.render_pool_search(result, out)
        else:
            _show_search(result, figure, export, json_out)

    run(numbers_checked(go), json_out=json_out)


def _show_search(result, figure, export: str | None, json_out: bool) -> None:
    """The frontier picture, then settings, JSON or tables on stdout; exit 1 when nothing is feasible."""
    from planner import report

    if figure is not None and result.chosen.size:
        from planner.plots.frontier import plot_frontier

        plot_frontier(result, figure)
        err.print(f"frontier drawn to {escape(str(figure))}", highlight=False)
    if export is not None and result.chosen.size:
        print_export(result, export)
    elif export is not None:
        report.render_infeasible(result, err)  # stdout holds settings only
    elif json_out:
        print_json(result.to_dict())
    elif result.chosen.size:
        report.render_search(result, out)
    else:  # the explanation is the result of this search: stdout, with exit 1
        report.render_infeasible(result, out)
    if not result.chosen.size:
        raise typer.Exit(1)


def _figure(path: str | None, flag: str):
    """The figure's path (.png/.svg) and matplotlib checked before any work, or None."""
    if path is None:
        return None
    from planner.plots.sweep import figure_path, require_matplotlib

    figure = figure_path(path, flag)
    require_matplotlib(flag)
    return figure


def check_export(kind: str | None, json_out: bool, *, gpus_range: str | None = None, plot: str | None = None) -> None:
    """What stdout holds is one choice; --gpus-range compares counts and has no single layout to export or draw."""
    from planner.api.tools import export_kind

    if gpus_range is not None and (kind is not None or plot is not None):
        raise SpecError("--gpus-range compares GPU counts; launch settings and the frontier are of one search",
                        path="--export" if kind is not None else "--plot", expected="--gpus N, or --gpus-range alone")
    export_kind(kind)
    if kind is not None and json_out:
        raise SpecError("--export and --json both choose what stdout holds", path="--export", expected="one of them")


def print_export(result, kind: str) -> None:
    """Launch settings on stdout; notes the format cannot carry as comments (DeepSpeed JSON) on stderr."""
    from planner import api

    settings = api.export(result, kind)
    print(settings.text.rstrip("\n"))
    if kind == "deepspeed":
        for note in settings.notes:
            err.print(f"note: {escape(note)}", highlight=False, soft_wrap=True)


def estimate(model: ModelArg, cluster: ClusterArg, global_batch: GlobalBatch = None, gpus: Gpus = None,
             seq_len: SeqLen = None, precision: Precision = None, nvlink_domain_gpus: NvlinkSegment = None,
             stack: Stack = None, framework: Framework = None, profile: ProfileOpt = None,
             offload_layers: OffloadLayers = None, torch_compile: TorchCompile = None, json_out: AsJson = False,
             export: Export = None, timeline: Annotated[Optional[str], typer.Option("--timeline", help=(
                 "draw the pipeline schedule and memory per rank to FILE (.png or .svg; needs matplotlib)"))] = None,
             stage_layers: Annotated[Optional[str], typer.Option("--stage-layers", help=(
                 "layers per virtual stage in schedule order, comma-separated or runs like 7,8x14,7 "
                 "(default: Megatron's even split, extra layers first)"))] = None, **options) -> None:
    """Score one layout and say whether and why it is infeasible."""

    def go():
        from planner import api, report

        check_export(export, json_out)
        figure = _figure(timeline, "--timeline")
        warn_implausible(model, cluster)
        result = api.estimate(model, cluster, gpus=gpus, profile=profile, framework=framework,
                              global_batch=global_batch, seq_len=seq_len, precision=precision,
                              nvlink_domain_gpus=nvlink_domain_gpus, stack=stack, stage_layers=stage_layers,
                              offload_layers=offload_layers, torch_compile=torch_compile, export=export, **options)
        if figure is not None:  # a step too long to draw: exit 2 before the numbers and the drawing
            from planner.timeline import check_drawable

            check_drawable(result.layout)
        if export is not None:
            print_export(result, export)
            for v in result.violations:  # settings of an infeasible layout: say why on stderr, exit 1
                err.print(f"[red]infeasible:[/red] {v.constraint}: {escape(v.message)}", highlight=False, soft_wrap=True)
        elif json_out:
            print_json(result.to_dict())
        else:
            report.render_estimate(result, out, result.cluster.gpu.memory_gib)
        if figure is not None:  # drawn for an infeasible layout too (the picture shows why), after the numbers
            from planner.plots.timeline import plot_timeline

            plot_timeline(result.model, result.cluster, result, figure)
            err.print(f"timeline drawn to {escape(str(figure))}", highlight=False)
        if not result.feasible:
            raise typer.Exit(1)

    run(numbers_checked(go), json_out=json_out)


def register(app: typer.Typer) -> None:
    """Add `plan search` and `plan estimate` to `app`."""
    app.command("search")(with_params(axis_params("fix"), option_params("search"))(search))
    app.command("estimate")(with_params(axis_params("give"), option_params("estimate"))(estimate))
