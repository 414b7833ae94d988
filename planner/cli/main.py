"""The `plan` command line: parses arguments, calls the library, prints. No planning logic here.

Options of layout axes, limits and search settings are generated from their declarations
(planner/cli/common.py); each command only adds its own arguments."""
from __future__ import annotations

import json
import math
import sys
from typing import Annotated, Optional

import typer
from rich.markup import escape

from planner.cli import check as cli_check

from planner.cli import sweep as cli_sweep
from planner.cli import allocate as cli_allocate
from planner.cli import hf_import as cli_import
from planner.cli import calibrate as cli_calibrate
from planner.cli import replan as cli_replan
from planner.cli.edge import PlanApp
from planner.cli.common import (DEFAULT_CLUSTER, DEFAULT_MODEL, axis_params, err, numbers_checked, option_params, out,
                         read_axes, read_limits, read_options, run, setting, with_params, with_run, check_nvlink_segment)
from planner.errors import SpecError
from planner.specs.precision import PRECISIONS
from planner.options import (CRITICAL_BATCH, GLOBAL_BATCH, GPUS, MAX_MICRO_BATCH, SPLIT_TOP, TIME_LIMIT, TOP, check_option,
                      shown_number)

# One example per command, shown at the end of its --help (the README runs each: tests/test_readme.py).
EXAMPLES = {
    "search": "plan search llama3-70b dgx-h100-1024 --top 3",
    "estimate": ("plan estimate gpt3-175b dgx-a100-1024 --gpus 64 --global-batch 64 --tp 8 --pp 8 --micro-batch 1 "
                 "--vpp 3 --recompute selective"),
    "validate": "plan validate",
    "list": "plan list models",
    "check": "plan check configs/",
    "schema": "plan schema cluster > cluster.schema.json",
    "sweep": ("plan sweep --scale-model gpt3-1.3b --params 1e9:1e10:2 --gpus 8,64 --batch-tokens 1048576 "
              "--tokens 3e11 --out rows.csv"),
    "allocate": "plan allocate configs/jobs/three-jobs.yaml dgx-h100-1024",
    "import": "plan import configs/hf/qwen3-30b-a3b.json -o qwen3-30b-a3b.yaml",
    "calibrate": "plan calibrate configs/runs/dgxc-h100-gpt3.yaml -o h100.yaml",
    "replan": "plan replan gpt3-175b dgx-a100-1024 --gpus 1024 --lost-gpus 16 --tp 8 --pp 4 --micro-batch 4 --vpp 12",
}


def _plain_help(command) -> None:
    """Help that reads as the docs write it: no `<bool>`/`<str>`/`<int>` tags. A switch shows
    none, a value a word for what it takes; an argument its name in capitals (`[MODEL]`)."""
    from typer.core import TyperArgument

    for param in command.params:
        if isinstance(param, TyperArgument):
            param.metavar = param.metavar or param.name.upper()
            param.display_type_rich = lambda ctx: None  # the name says it; the help says what it is
        elif param.metavar is None:
            param.metavar = "" if getattr(param, "is_flag", False) else _METAVARS.get(_bare_type(param), "VALUE")
    if not getattr(command, "_plain_help_option", False):  # --help is made on demand: untag it then
        made = command.get_help_option

        def help_option(ctx, made=made):
            option = made(ctx)
            if option is not None:
                option.metavar = ""
            return option

        command.get_help_option, command._plain_help_option = help_option, True
    if command.name in EXAMPLES and "Example:" not in (command.help or ""):
        command.help = f"{command.help or ''}\n\nExample: {EXAMPLES[command.name]}"


_METAVARS = {"int": "N", "float": "NUMBER", "str": "TEXT", "Path": "PATH", "list[str]": "TEXT"}


def _bare_type(param) -> str:
    try:
        return param.bare_type()
    except Exception:  # a type typer cannot name: the generic word
        return ""


class _Group(typer.core.TyperGroup):
    """`plan` alone prints the help and exits 0; every command's help without type tags and with
    its example."""

    def parse_args(self, ctx, args):
        if not args and not ctx.resilient_parsing:
            typer.echo(ctx.get_help(), color=ctx.color)
            ctx.exit(0)
        return super().parse_args(ctx, args)

    def get_command(self, ctx, cmd_name):
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            _plain_help(command)
        return command

    def format_help(self, ctx, formatter):
        _plain_help(self)
        return super().format_help(ctx, formatter)


app = PlanApp(add_completion=False, no_args_is_help=True, help="Plan the parallel layout of a large-model training run.",
              pretty_exceptions_enable=False, cls=_Group)

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
ProfileOpt = Annotated[Optional[str], typer.Option("--profile", help=(
    "a profile from plan calibrate (kind: profile): price with the constants fitted to your own runs, bands from their errors"))]
NvlinkSegment = Annotated[Optional[int], typer.Option("--nvlink-domain-gpus", help=(
    "GPUs of an NVLink domain (an NVL72 rack) the job's consecutive ranks fill, e.g. 64 of 72 "
    "(overrides the cluster's node.nvlink_segment_gpus)"))]


def _version(value: bool) -> None:
    if value:
        from planner import DISTRIBUTION, version

        print(f"plan {version()} ({DISTRIBUTION})")
        raise typer.Exit(0)


@app.callback()
def _main(version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_version,
                                                help="print the version and exit")] = False) -> None:
    """Plan the parallel layout of a large-model training run."""


def _print_json(data: dict) -> None:
    """Strict JSON: a NaN or an infinity is refused naming its field (exit 2), never `NaN` in the output."""
    _require_finite(data)
    print(json.dumps(data, indent=2, allow_nan=False))


def _require_finite(data) -> None:
    """Tables and JSON show the same figures: neither prints inf or nan (planner/results.py)."""
    from planner.results import non_finite_error

    problem = non_finite_error(data)
    if problem is not None:
        raise problem


def _load(model: str, cluster: str, global_batch: int | None, gpus: int | None, stack: str | None = None, *,
          seq_len: int | None = None, precision: str | None = None, nvlink_segment: int | None = None,
          profile: str | None = None):
    from planner.specs.loading import load_cluster, load_model, precision_line
    from planner.search import check_precision, with_global_batch, with_stack

    check_option(GPUS, gpus)
    check_option(GLOBAL_BATCH, global_batch)
    _check_stack_name(stack)
    m = with_run(load_model(model), seq_len=seq_len, precision=precision)
    m = with_stack(with_global_batch(m, global_batch), stack)
    c = check_nvlink_segment(load_cluster(cluster), nvlink_segment)
    if profile is not None:
        m, c = _with_profile(m, c, profile, stack)
    try:
        check_precision(m, c, *precision_line(model))
    except SpecError as exc:
        if precision is None:
            raise
        raise SpecError(exc.message, path="--precision", expected=exc.expected) from None
    total = sum(c.pool_cluster(n).total_gpus for n in c.pool_names)  # every pool's (planner/mixed_pools.py)
    if gpus is not None and gpus > total:
        raise SpecError(f"--gpus {gpus} is more than the {total} GPUs of {c.name}", path="--gpus",
                        expected=f"at most {total}")
    return m, c


def _with_profile(model, cluster, path: str, stack: str | None):
    """The model and cluster priced with a calibration profile; a --stack (or --framework's stack)
    other than the profile's is refused: the profile's constants are that stack's."""
    from planner.fidelity.profile import apply_profile, load_profile

    prof = load_profile(path)
    if stack is not None and stack != prof.stack:
        raise SpecError(f"the profile was fitted with stack {prof.stack}, --stack or --framework asks for {stack}",
                        path="--profile", expected=f"no --stack, or --stack {prof.stack} (or a profile of {stack})")
    return apply_profile(model, cluster, prof)


def _check_stack_name(stack: str | None) -> None:
    """--stack names a shipped profile: a plain file name, never a path (or 10,000 characters)."""
    from planner.specs.shipped import shipped_names
    from planner.specs import is_plain_name

    if stack is not None and not is_plain_name(stack):
        raise SpecError(f"'{stack[:40]}{'...' if len(stack) > 40 else ''}' is not a stack name", path="--stack",
                        expected=f"one of: {', '.join(shipped_names('stack'))}")


def _check_degree_product(given: dict) -> None:
    """Degrees given on the command line multiply to at most --gpus's bound (no int64 overflow
    later: 10^7 * 10^5 * 10^5 * 10^5 GPUs is bad input, not a step time)."""
    from planner.layout.axes import AXES

    degrees = [a for a in AXES if a.role == "degree" and given.get(a.name) is not None]
    product = math.prod(given[a.name] for a in degrees)
    if product > GPUS.bounds["le"]:
        raise SpecError(f"{'*'.join(a.name for a in degrees)} = {shown_number(product)} GPUs",
                        path="/".join(a.flag for a in degrees), expected=f"degrees whose product is at most "
                        f"{GPUS.bounds['le']:,}")


@app.command()
@with_params(axis_params("fix"), option_params("search"))
def search(
    model: ModelArg = DEFAULT_MODEL, cluster: ClusterArg = DEFAULT_CLUSTER, gpus: Gpus = None,
    global_batch: GlobalBatch = None, seq_len: SeqLen = None, precision: Precision = None,
    nvlink_domain_gpus: NvlinkSegment = None, stack: Stack = None, framework: Framework = None,
    profile: ProfileOpt = None,
    objective: Annotated[str, typer.Option("--objective", help="time | energy | cost | carbon")] = "time",
    top: Annotated[int, typer.Option("--top", help="how many layouts to list")] = 5, json_out: AsJson = False,
    export: Export = None,
    frontier: Annotated[bool, typer.Option("--frontier", help="also list the Pareto frontier of step time vs energy per token")] = False,
    gpus_range: Annotated[Optional[str], typer.Option("--gpus-range", help="LO:HI: best layout per power-of-two GPU count and the recommended count")] = None,
    plot: Annotated[Optional[str], typer.Option("--plot", help=(
        "draw the step time / energy per token frontier to FILE (.png or .svg; needs matplotlib)"))] = None,
    power_caps: Annotated[Optional[bool], typer.Option("--power-caps/--no-power-caps", help="try the GPU preset's power caps (default: unless --objective time without energy limits or --frontier)")] = None,
    **options,
) -> None:
    """Find the best layouts for MODEL on CLUSTER (default: GPT-3 175B on 1024 A100s)."""

    def go():
        from planner import report
        from planner.search import search as do_search, search_gpu_counts
        from planner.layout.space import SpaceLimits

        check_option(TOP, top)
        check_option(GPUS, gpus)
        check_export(export, json_out, gpus_range=gpus_range, plot=plot)
        stack_ = _framework_stack(framework, stack, export)
        figure = _figure(plot, "--plot")
        _check_degree_product(read_axes(options))
        _check_fixed_degrees(gpus, read_axes(options))
        # Every option is checked before the files are read: bad input costs no loading.
        limits, split_top = read_limits(options, "search"), setting(options, SPLIT_TOP)
        common = dict(objective=objective, limits=limits, space=SpaceLimits(max_micro_batch=setting(options, MAX_MICRO_BATCH)),
                      time_limit_s=setting(options, TIME_LIMIT), power_caps=power_caps,
                      critical_batch_tokens=read_options(options, "search").get(CRITICAL_BATCH.key),
                      framework=framework)
        span = None if gpus_range is None else parse_range(gpus_range)
        m, c = _load(model, cluster, global_batch, gpus, stack_, seq_len=seq_len, precision=precision,
                     nvlink_segment=nvlink_domain_gpus, profile=profile)
        if span is not None:
            counts = search_gpu_counts(m, c, *span, **common)
            _require_finite(report.gpus_range_json(counts))
            if json_out:
                _print_json(report.gpus_range_json(counts))
            else:
                report.render_gpus_range(counts, out)
            if counts.recommended is None:
                raise typer.Exit(1)
            return
        if len(c.pool_names) > 1 and export is not None:
            raise SpecError(f"{c.name} has {len(c.pool_names)} pools; launch settings are for one pool", path="--export",
                            expected="a cluster of one pool (e.g. one of its pools as its own cluster spec)")
        if len(c.pool_names) > 1 and not frontier and figure is None:
            return _search_pools(m, c, gpus, top, json_out, split_top=split_top, **common)
        result = do_search(m, c, gpus=gpus, top_k=top, frontier=frontier or figure is not None, split_top=split_top,
                           **common)
        _show_search(result, figure, export, json_out)

    run(numbers_checked(go))


def _show_search(result, figure, export: str | None, json_out: bool) -> None:
    """The frontier picture, then settings, JSON or tables on stdout; exit 1 when nothing is feasible."""
    from planner import report

    _require_finite(report.search_json(result))
    if figure is not None and result.chosen.size:
        from planner.plots.frontier import plot_frontier

        plot_frontier(result, figure)
        err.print(f"frontier drawn to {escape(str(figure))}", highlight=False)
    if export is not None and result.chosen.size:
        print_export(export, result.best, result.model, result.cluster)
    elif export is not None:
        report.render_infeasible(result, err)  # stdout holds settings only
    elif json_out:
        _print_json(report.search_json(result))
    elif result.chosen.size:
        report.render_search(result, out)
    else:  # the explanation is the result of this search: stdout, with exit 1
        report.render_infeasible(result, out)
    if not result.chosen.size:
        raise typer.Exit(1)


def _check_fixed_degrees(gpus: int | None, fixed: dict) -> None:
    """--gpus against the degrees fixed on the command line (dp must come out whole)."""
    from planner.layout.axes import AXES
    from planner.layout.space import derive_dp

    degrees = [a for a in AXES if a.role == "degree"]
    if gpus is not None and all(a.name in fixed or a.default is not None for a in degrees):
        # A free degree with a default (cp) could still take up GPUs the fixed ones leave.
        product = math.prod(fixed[a.name] for a in degrees if a.name in fixed)
        if all(a.name in fixed for a in degrees) or gpus % product:
            derive_dp(gpus, fixed, gpus_said=f"--gpus is {gpus}")


def _search_pools(m, c, gpus, top, json_out, **kwargs) -> None:
    """`plan search` on a cluster of several pools (planner/mixed_pools.py)."""
    from planner import report
    from planner.mixed_pools import search_pools

    pools = search_pools(m, c, gpus=gpus, top_k=top, **kwargs)
    data = pool_search_json(pools)
    _require_finite(data)
    if json_out:
        _print_json(data)
    else:
        report.render_pool_search(pools, out)


def pool_search_json(pools) -> dict:
    """`search --json` on a cluster with pools, `best` the overall best plan: the pipeline across
    pools (the fields of `mixed`) when it is the fastest, else the best single pool's layout. It
    is null only when nothing is feasible."""
    from planner import report

    data = report.pool_search_json(pools)
    if pools.mixed is not None and pools.fastest == "mixed":
        data["best"] = report.mixed_json(pools.mixed)
        data.pop("simplest_within_tie", None)  # measured against one pool's best, not this one
    return data


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
    from planner.export import EXPORTS

    if gpus_range is not None and (kind is not None or plot is not None):
        raise SpecError("--gpus-range compares GPU counts; launch settings and the frontier are of one search",
                        path="--export" if kind is not None else "--plot", expected="--gpus N, or --gpus-range alone")
    if kind is not None and kind not in EXPORTS:
        raise SpecError(f"unknown framework '{kind[:40]}'", path="--export", expected=" | ".join(EXPORTS))
    if kind is not None and json_out:
        raise SpecError("--export and --json both choose what stdout holds", path="--export", expected="one of them")


def print_export(kind: str, scored, model, cluster) -> None:
    """Launch settings on stdout; notes the format cannot carry as comments (DeepSpeed JSON) on stderr."""
    from planner.export import export_settings

    settings = export_settings(kind, scored, model, cluster)
    print(settings.text.rstrip("\n"))
    if kind == "deepspeed":
        for note in settings.notes:
            err.print(f"note: {escape(note)}", highlight=False, soft_wrap=True)


def parse_split(text: str | None) -> list[int] | None:
    """`7,8x14,7` -> [7, 8, ..., 8, 7] (at most 100,000 stages)."""
    if text is None:
        return None
    out: list[int] = []
    for part in text.split(","):  # spaces around a part only: '12 12' is two numbers, not 1212
        part = part.strip(" ")
        count, x, times = part.partition("x")
        if not _digits(count) or (x and not (_digits(times) and int(times))) or len(out) + int(times or 1) > 100_000:
            raise SpecError(f"cannot read '{part[:40]}'", path="--stage-layers",
                            expected="comma-separated layer counts or runs COUNTxTIMES, e.g. 7,8x14,7")
        out.extend([int(count)] * int(times or 1))
    return out


def _digits(text: str) -> bool:
    """A count of at most 12 ASCII digits (int() of 5,000 digits raises; '²'.isdigit() is True)."""
    return 0 < len(text) <= 12 and text.isascii() and text.isdigit()


def parse_range(text: str) -> tuple[int, int]:
    lo, sep, hi = text.partition(":")
    if not sep or not _digits(lo.strip()) or not _digits(hi.strip()):
        raise SpecError(f"cannot read '{text[:40]}'", path="--gpus-range", expected="LO:HI, e.g. 256:8192")
    return int(lo), int(hi)


@app.command()
@with_params(axis_params("give"), option_params("estimate"))
def estimate(model: ModelArg, cluster: ClusterArg, global_batch: GlobalBatch = None, gpus: Gpus = None,
             seq_len: SeqLen = None, precision: Precision = None, nvlink_domain_gpus: NvlinkSegment = None,
             stack: Stack = None, framework: Framework = None, profile: ProfileOpt = None, json_out: AsJson = False,
             export: Export = None, timeline: Annotated[Optional[str], typer.Option("--timeline", help=(
                 "draw the pipeline schedule and memory per rank to FILE (.png or .svg; needs matplotlib)"))] = None,
             stage_layers: Annotated[Optional[str], typer.Option("--stage-layers", help=(
                 "layers per virtual stage in schedule order, comma-separated or runs like 7,8x14,7 "
                 "(default: Megatron's even split, extra layers first)"))] = None, **options) -> None:
    """Score one layout and say whether and why it is infeasible."""

    def go():
        from planner import report
        from planner.layout.axes import AXES
        from planner.estimate import estimate_defaults, estimate_layout, with_memory_hint

        check_option(GPUS, gpus)
        check_export(export, json_out)
        stack_ = _framework_stack(framework, stack, export)
        figure = _figure(timeline, "--timeline")
        given = {a.name: options[a.name] for a in AXES if a.given is not None}
        _check_degree_product(read_axes(given))  # each axis in its domain, then their product
        limits = read_limits(options, "estimate", fix=False)
        split = parse_split(stage_layers)
        m, c = _load(model, cluster, global_batch, None, stack_, seq_len=seq_len, precision=precision,
                     nvlink_segment=nvlink_domain_gpus, profile=profile)
        given = estimate_defaults(given, gpus, c, framework or (export if export and export.startswith('torchtitan') else None))
        result = estimate_layout(m, c, gpus=gpus, limits=limits, stage_layers=split, **given)
        if figure is not None:  # a step too long to draw: exit 2 before the numbers and the drawing
            from planner.timeline import check_drawable

            check_drawable(result.layout)
        _check_framework_runs(framework, result, m)
        result = with_memory_hint(result, m, c, gpus=gpus, limits=limits, given=given)
        _require_finite(report.scored_json(result))
        if export is not None:
            print_export(export, result, m, c)
            for v in result.violations:  # settings of an infeasible layout: say why on stderr, exit 1
                err.print(f"[red]infeasible:[/red] {v.constraint}: {escape(v.message)}", highlight=False, soft_wrap=True)
        elif json_out:
            _print_json(report.scored_json(result))
        else:
            report.render_estimate(result, out, c.gpu.memory_gib)
        if figure is not None:  # drawn for an infeasible layout too (the picture shows why), after the numbers
            from planner.plots.timeline import plot_timeline

            plot_timeline(m, c, result, figure)
            err.print(f"timeline drawn to {escape(str(figure))}", highlight=False)
        if not result.feasible:
            raise typer.Exit(1)

    run(numbers_checked(go))


def _framework_stack(framework: str | None, stack: str | None, export: str | None) -> str | None:
    """The stack a --framework search prices with (its profile unless --stack is given); an
    --export of another framework's settings is refused: they would not run what was searched."""
    if framework is None:
        return stack
    from planner.export.frameworks import FRAMEWORK_EXPORT, FRAMEWORK_STACK, framework_names

    if framework not in framework_names():
        raise SpecError(f"no framework named '{framework[:40]}'", path="--framework",
                        expected=f"one of: {', '.join(framework_names())}")
    if export is not None and export != FRAMEWORK_EXPORT[framework]:
        raise SpecError(f"--export {export} with --framework {framework}", path="--export",
                        expected=f"{FRAMEWORK_EXPORT[framework]} (or no --framework)")
    return stack if stack is not None else FRAMEWORK_STACK[framework]


def _check_framework_runs(framework: str | None, result, model) -> None:
    """The layout given to estimate is one the framework runs with this model (its precision, its MoE),
    else exit 2 saying which rule."""
    if framework is None:
        return
    from planner.export.frameworks import framework_mask
    from planner.layout.axes import AXES
    from planner.layout.space import single_layout

    ok, reason = framework_mask(framework, single_layout(**{a.name: result.layout[a.name] for a in AXES
                                                            if a.name in result.layout}), model)
    if not bool(ok[0]):
        raise SpecError(f"{framework} cannot run this layout: {reason[0]}", path="--framework",
                        expected="a layout the framework runs (planner/export/frameworks.py)")


@app.command()
def validate(json_out: AsJson = False, profile: ProfileOpt = None) -> None:
    """Replay the published measurements in data/calibration (or a profile's own runs) and print predicted vs measured."""

    def go():
        from rich.table import Table

        from planner.fidelity.calibration import errors, load_cases, summary

        if profile is not None:
            return _validate_profile(profile, json_out)
        rows = errors(load_cases())
        if json_out:
            _print_json([{"case": c.id, "metric": k, "measured": m, "predicted": p, "error": e} for c, k, m, p, e in rows])
            return
        t = Table(title="planner vs published measurements", title_justify="left")
        for col in ("case", "metric", "measured", "predicted", "error"):
            t.add_column(col, justify="left" if col in ("case", "metric") else "right")
        for c, k, m, p, e in rows:
            t.add_row(c.id, k, f"{m:.4g}", f"{p:.4g}", f"{e:+.1%}")
        out.print(t)
        s = summary(rows)
        out.print(f"{s['n']} figures: mean |error| {s['mean_abs']:.2%}, max {s['max_abs']:.2%}")

    run(go)


def _validate_profile(path: str, json_out: bool) -> None:
    """A profile's runs replayed: each predicted now with the profile's constants (where its model is a
    shipped one: a runs file's own model files are not in the profile), beside what the fit said."""
    from rich.table import Table

    from planner.fidelity.profile import load_profile, replay

    prof = load_profile(path)
    rows = replay(prof)
    if json_out:
        _print_json({"profile": prof.name, "gpu": prof.gpu, "stack": prof.stack, "runs": rows})
        return
    t = Table(title=f"profile {escape(prof.name)}: its runs replayed", caption=f"{escape(prof.stack)} on {escape(prof.gpu)}",
              title_justify="left")
    for col in ("run", "measured s", "fitted s", "now s", "error", "left out"):
        t.add_column(col, justify="left" if col == "run" else "right")
    for r in rows:
        now = "-" if r["predicted_now_s"] is None else f"{r['predicted_now_s']:.4g}"
        left = "-" if r["loo_error_pct"] is None else f"{r['loo_error_pct']:+.1f}%"
        t.add_row(escape(r["name"]), f"{r['measured_s']:.4g}", f"{r['fitted_s']:.4g}", now, f"{r['error_pct']:+.1f}%", left)
    out.print(t)


LIST_KINDS = {"models": "model", "clusters": "cluster", "gpus": "gpu", "stacks": "stack"}


def shipped_rows(kinds: str) -> list[dict]:
    """[{name, description}] of the shipped specs of a kind (planner/specs/shipped.py), sorted by
    name; a file that does not load is listed with its error, not dropped."""
    from planner.specs.loading import load_cluster, load_gpu, load_model, load_stack
    from planner.specs.shipped import config_dir, shipped_names

    kind = LIST_KINDS[kinds]
    load = {"model": load_model, "cluster": load_cluster, "gpu": load_gpu, "stack": load_stack}[kind]
    rows = []
    for name in shipped_names(kind):
        try:
            text = _described(kind, load(config_dir() / kinds / f"{name}.yaml"))
        except SpecError as exc:
            text = f"does not load: {exc}"
        rows.append({"name": name, "description": text})
    return rows


def _described(kind: str, spec) -> str:
    """One line: what sets one shipped spec apart (parameters, GPUs, memory, what a stack is)."""
    if kind == "model":
        size = f"{spec.total_params() / 1e9:,.1f}B parameters"
        size += f" ({spec.active_params() / 1e9:,.1f}B active, {spec.moe.experts} experts)" if spec.moe else ""
        return f"{size}, {spec.layers} layers, seq_len {spec.seq_len:,}, {spec.training.precision}"
    if kind == "cluster":
        pools = [spec.pool_cluster(n) for n in spec.pool_names]
        gpus = " + ".join(f"{p.total_gpus:,} x {p.gpu.name}" for p in pools)
        domain = spec.node.nvlink_domain
        return f"{gpus} GPUs, {spec.node.gpus} per node, NVLink domain {domain} GPUs" + (
            f", {len(pools)} pools" if len(pools) > 1 else "")
    if kind == "gpu":
        peaks = spec.peak_tflops
        fp8 = f", FP8 {peaks.fp8:,.0f}" if peaks.fp8 else ""
        return f"{spec.memory_gib:g} GiB, BF16 {peaks.bf16:,.0f}{fp8} TFLOP/s dense, TDP {spec.tdp_w:,.0f} W"
    return spec.description or spec.name


@app.command("list")
def list_shipped(
    kind: Annotated[str, typer.Argument(help="models | clusters | gpus | stacks")],
    json_out: AsJson = False,
) -> None:
    """List the shipped specs of a kind, the names MODEL, CLUSTER, a GPU preset and --stack take."""

    def go():
        if kind not in LIST_KINDS:
            raise SpecError(f"unknown kind '{kind[:40]}'", path="KIND", expected=" | ".join(LIST_KINDS))
        rows = shipped_rows(kind)
        if json_out:
            _print_json({"kind": kind, "items": rows})
            return
        from rich import box
        from rich.table import Table

        t = Table(box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 2, 0, 0))
        t.add_column("name", no_wrap=True)
        t.add_column("description")
        for r in rows:
            t.add_row(escape(r["name"]), escape(r["description"]))
        out.print(t)

    run(go)


cli_check.register(app)
cli_sweep.register(app)
cli_allocate.register(app)
cli_import.register(app)
cli_calibrate.register(app)
cli_replan.register(app)


def main() -> None:  # pragma: no cover - console entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
