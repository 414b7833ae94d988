"""The `plan` command line: parses arguments, calls the library, prints. No planning logic here."""
from __future__ import annotations

import json
import os
import sys
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape

from .errors import InfeasibleError, PlannerError, SpecError, SpecErrors

app = typer.Typer(add_completion=False, no_args_is_help=False, help="Plan the parallel layout of a large-model training run.",
                  pretty_exceptions_enable=False)
# Piped output gets a fixed width that fits the tables instead of rich's 80-column default.
out = Console(width=None if Console().is_terminal else 150)
err = Console(stderr=True, width=None if Console(stderr=True).is_terminal else 150)

DEFAULT_MODEL = "gpt3-175b"
DEFAULT_CLUSTER = "dgx-a100-1024"

# Options shared by search and sweep.
Gpus = Annotated[Optional[int], typer.Option("--gpus", help="GPUs to use (default: the whole cluster)")]
GlobalBatch = Annotated[Optional[int], typer.Option("--global-batch", help="sequences per step (overrides the model spec)")]
Objective = Annotated[str, typer.Option("--objective", help="time | energy | cost | carbon")]
Top = Annotated[int, typer.Option("--top", help="how many layouts to list")]
AsJson = Annotated[bool, typer.Option("--json", help="print JSON instead of tables")]
Headroom = Annotated[float, typer.Option("--memory-headroom", help="fraction of GPU memory kept free")]
CrossTp = Annotated[bool, typer.Option("--allow-cross-node-tp", help="let tp groups leave the NVLink domain")]
MaxStep = Annotated[Optional[float], typer.Option("--max-step-time", help="upper bound on step time [s]")]
MinMfu = Annotated[Optional[float], typer.Option("--min-mfu", help="lower bound on MFU (0-1)")]
MaxBubble = Annotated[Optional[float], typer.Option("--max-bubble", help="upper bound on bubble / step (0-1)")]
MaxPower = Annotated[Optional[float], typer.Option("--max-power-kw", help="cluster power budget incl. node overhead and PUE [kW]")]
MaxEpt = Annotated[Optional[float], typer.Option("--max-energy-per-token", help="upper bound [J/token]")]
MaxGpuW = Annotated[Optional[float], typer.Option("--max-gpu-power-w", help="upper bound on per-GPU power [W]")]
MaxGbt = Annotated[Optional[float], typer.Option("--max-global-batch-tokens", help="critical batch size [tokens]")]
MinScale = Annotated[Optional[float], typer.Option("--min-scaling-efficiency", help="vs the best layout on half the GPUs (0-1)")]
Tp = Annotated[Optional[int], typer.Option("--tp", help="fix the tensor-parallel degree")]
Pp = Annotated[Optional[int], typer.Option("--pp", help="fix the pipeline-parallel degree")]
Dp = Annotated[Optional[int], typer.Option("--dp", help="fix the data-parallel degree")]
Mb = Annotated[Optional[int], typer.Option("--micro-batch", help="fix the micro-batch size [sequences]")]
Vpp = Annotated[Optional[int], typer.Option("--vpp", help="fix the virtual stages per pipeline rank")]
Recompute = Annotated[Optional[str], typer.Option("--recompute", help="none | selective | full")]
Sp = Annotated[Optional[bool], typer.Option("--sequence-parallel/--no-sequence-parallel", help="fix sequence parallelism")]
Zero = Annotated[Optional[int], typer.Option("--zero", help="fix the ZeRO stage (0-3)")]
MaxMb = Annotated[int, typer.Option("--max-micro-batch", help="largest micro-batch to enumerate")]
TimeLimit = Annotated[float, typer.Option("--time-limit", help="CP-SAT deterministic time limit [s]")]


def run(fn):
    """Turn planner errors into one red line on stderr and the documented exit status."""
    try:
        return fn()
    except SpecErrors as exc:
        for e in exc.errors:
            err.print(f"[red]error:[/red] {escape(str(e))}", markup=True, highlight=False, soft_wrap=True)
        raise typer.Exit(2)
    except PlannerError as exc:
        label = "infeasible" if isinstance(exc, InfeasibleError) else "error"
        err.print(f"[red]{label}:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(exc.exit_code)
    except KeyboardInterrupt:
        err.print("[red]interrupted[/red]")
        raise typer.Exit(130)
    except BrokenPipeError:  # `plan search --json | head`: the reader left; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise typer.Exit(0)
    except (typer.Exit, SystemExit):
        raise
    except Exception as exc:  # a bug: say so in one line unless debugging
        if os.environ.get("PLANNER_DEBUG"):
            raise
        err.print(f"[red]internal error:[/red] {type(exc).__name__}: {escape(str(exc))} (set PLANNER_DEBUG=1 for a traceback)",
                  highlight=False, soft_wrap=True)
        raise typer.Exit(3)


def build_limits(*, headroom, cross_tp, max_step, min_mfu, max_bubble, max_power, max_ept, max_gpu_w, max_gbt,
                 min_scale, tp=None, pp=None, dp=None, mb=None, vpp=None, recompute=None, sp=None, zero=None):
    from .constraints import Limits
    from .space import RECOMPUTE_MODES

    if not 0 <= headroom < 1:
        raise SpecError("must be a fraction in [0, 1)", path="--memory-headroom", expected="e.g. 0.05")
    if recompute is not None and recompute not in RECOMPUTE_MODES:
        raise SpecError(f"unknown mode '{recompute}'", path="--recompute", expected=" | ".join(RECOMPUTE_MODES))
    if zero is not None and zero not in (0, 1, 2, 3):
        raise SpecError(f"ZeRO stage {zero} does not exist", path="--zero", expected="0, 1, 2 or 3")
    for flag, v in (("--tp", tp), ("--pp", pp), ("--dp", dp), ("--micro-batch", mb), ("--vpp", vpp)):
        if v is not None and v <= 0:
            raise SpecError(f"must be positive, got {v}", path=flag, expected="an integer > 0")
    fixed = {k: v for k, v in dict(tp=tp, pp=pp, dp=dp, micro_batch=mb, vpp=vpp, recompute=recompute,
                                   sequence_parallel=sp, zero=zero).items() if v is not None}
    return Limits(memory_headroom=headroom, allow_cross_node_tp=cross_tp, max_step_time_s=max_step, min_mfu=min_mfu,
                  max_bubble=max_bubble, max_power_kw=max_power, max_energy_per_token_j=max_ept,
                  max_gpu_power_w=max_gpu_w, max_global_batch_tokens=max_gbt, min_scaling_efficiency=min_scale,
                  fixed=fixed)


def parse_range(text: str) -> tuple[int, int]:
    lo, sep, hi = text.partition(":")
    if not sep or not lo.strip().isdigit() or not hi.strip().isdigit():
        raise SpecError(f"cannot read '{text}'", path="--gpus-range", expected="LO:HI, e.g. 256:8192")
    return int(lo), int(hi)


def check_layout_product(gpus, tp, pp, dp):
    if None not in (tp, pp, dp) and gpus is not None and tp * pp * dp != gpus:
        raise SpecError(f"dp*tp*pp = {dp}*{tp}*{pp} = {dp * tp * pp}, but --gpus is {gpus}",
                        path="--dp/--tp/--pp", expected=f"degrees whose product is {gpus}")


@app.command()
def search(
    model: Annotated[str, typer.Argument(help="model spec: a path or a shipped name")] = DEFAULT_MODEL,
    cluster: Annotated[str, typer.Argument(help="cluster spec: a path or a shipped name")] = DEFAULT_CLUSTER,
    gpus: Gpus = None, global_batch: GlobalBatch = None, objective: Objective = "time", top: Top = 5,
    json_out: AsJson = False, memory_headroom: Headroom = 0.05, allow_cross_node_tp: CrossTp = False,
    max_step_time: MaxStep = None, min_mfu: MinMfu = None, max_bubble: MaxBubble = None,
    max_power_kw: MaxPower = None, max_energy_per_token: MaxEpt = None, max_gpu_power_w: MaxGpuW = None,
    max_global_batch_tokens: MaxGbt = None, min_scaling_efficiency: MinScale = None,
    tp: Tp = None, pp: Pp = None, dp: Dp = None, micro_batch: Mb = None, vpp: Vpp = None,
    recompute: Recompute = None, sequence_parallel: Sp = None, zero: Zero = None,
    max_micro_batch: MaxMb = 32, time_limit: TimeLimit = 10.0,
    frontier: Annotated[bool, typer.Option("--frontier", help="also list the Pareto frontier of step time vs energy per token")] = False,
    gpus_range: Annotated[Optional[str], typer.Option("--gpus-range", help="LO:HI: best layout per power-of-two GPU count and the recommended count")] = None,
    power_caps: Annotated[Optional[bool], typer.Option("--power-caps/--no-power-caps", help="try the GPU preset's power caps (default: unless --objective time without energy limits or --frontier)")] = None,
    critical_batch_tokens: Annotated[Optional[float], typer.Option("--critical-batch-tokens", help="McCandlish critical batch B_crit [tokens]: tokens to train x (1 + B/B_crit)")] = None,
) -> None:
    """Find the best layouts for MODEL on CLUSTER (default: GPT-3 175B on 1024 A100s)."""

    def go():
        from . import report
        from .loading import load_cluster, load_model
        from .search import search as do_search, with_global_batch
        from .space import SpaceLimits

        if top < 1:
            raise SpecError("must be at least 1", path="--top", expected="an integer >= 1")
        check_layout_product(gpus, tp, pp, dp)
        m = with_global_batch(load_model(model), global_batch)
        c = load_cluster(cluster)
        limits = build_limits(headroom=memory_headroom, cross_tp=allow_cross_node_tp, max_step=max_step_time,
                              min_mfu=min_mfu, max_bubble=max_bubble, max_power=max_power_kw,
                              max_ept=max_energy_per_token, max_gpu_w=max_gpu_power_w, max_gbt=max_global_batch_tokens,
                              min_scale=min_scaling_efficiency, tp=tp, pp=pp, dp=dp, mb=micro_batch, vpp=vpp,
                              recompute=recompute, sp=sequence_parallel, zero=zero)
        if gpus is not None and gpus > c.total_gpus:
            raise SpecError(f"--gpus {gpus} is more than the {c.total_gpus} GPUs of {c.name}", path="--gpus",
                            expected=f"at most {c.total_gpus}")
        if critical_batch_tokens is not None:
            if critical_batch_tokens <= 0:
                raise SpecError("must be positive", path="--critical-batch-tokens", expected="a number of tokens > 0")
            from dataclasses import replace

            limits = replace(limits, critical_batch_tokens=critical_batch_tokens)
        space = SpaceLimits(max_micro_batch=max_micro_batch)
        if gpus_range is not None:
            from .search import search_gpu_counts

            lo, hi = parse_range(gpus_range)
            counts = search_gpu_counts(m, c, lo, hi, objective=objective, limits=limits, space=space,
                                       time_limit_s=time_limit, power_caps=power_caps)
            data = report.gpus_range_json(counts)
            if json_out:
                print(json.dumps(data, indent=2))
            else:
                report.render_gpus_range(data, out)
            if data["recommended_gpus"] is None:
                raise typer.Exit(1)
            return
        result = do_search(m, c, gpus=gpus, objective=objective, top_k=top, limits=limits,
                           space=space, time_limit_s=time_limit, power_caps=power_caps, frontier=frontier)
        data = report.search_json(result)
        if json_out:
            print(json.dumps(data, indent=2))
        elif data["results"]:
            report.render_search(result, out)
        else:
            report.render_infeasible(data, err)
        if not data["results"]:
            raise typer.Exit(1)

    run(go)


@app.command()
def estimate(
    model: Annotated[str, typer.Argument(help="model spec: a path or a shipped name")],
    cluster: Annotated[str, typer.Argument(help="cluster spec: a path or a shipped name")],
    tp: Annotated[int, typer.Option("--tp", help="tensor-parallel degree")],
    pp: Annotated[int, typer.Option("--pp", help="pipeline-parallel degree")],
    micro_batch: Annotated[int, typer.Option("--micro-batch", help="micro-batch size [sequences]")],
    dp: Dp = None, vpp: Annotated[int, typer.Option("--vpp", help="virtual stages per pipeline rank")] = 1,
    recompute: Annotated[str, typer.Option("--recompute", help="none | selective | full")] = "none",
    sequence_parallel: Annotated[bool, typer.Option("--sequence-parallel/--no-sequence-parallel")] = False,
    zero: Annotated[int, typer.Option("--zero", help="ZeRO stage 0-3")] = 0,
    global_batch: GlobalBatch = None, gpus: Gpus = None, json_out: AsJson = False,
    memory_headroom: Headroom = 0.05, allow_cross_node_tp: CrossTp = False,
    max_step_time: MaxStep = None, min_mfu: MinMfu = None, max_bubble: MaxBubble = None,
    max_power_kw: MaxPower = None, max_energy_per_token: MaxEpt = None, max_gpu_power_w: MaxGpuW = None,
) -> None:
    """Score one layout and say whether and why it is infeasible."""

    def go():
        from . import report
        from .estimate import estimate_layout
        from .loading import load_cluster, load_model

        m = with_gb(load_model(model), global_batch)
        c = load_cluster(cluster)
        limits = build_limits(headroom=memory_headroom, cross_tp=allow_cross_node_tp, max_step=max_step_time,
                              min_mfu=min_mfu, max_bubble=max_bubble, max_power=max_power_kw,
                              max_ept=max_energy_per_token, max_gpu_w=max_gpu_power_w, max_gbt=None, min_scale=None)
        data = estimate_layout(m, c, tp=tp, pp=pp, dp=dp, gpus=gpus, micro_batch=micro_batch, vpp=vpp,
                               recompute=recompute, sequence_parallel=sequence_parallel, zero=zero, limits=limits)
        if json_out:
            print(json.dumps(data, indent=2))
        else:
            report.render_estimate(data, out, c.gpu.memory_gib)
        if not data["feasible"]:
            raise typer.Exit(1)

    run(go)


def with_gb(model, global_batch):
    from .search import with_global_batch

    return with_global_batch(model, global_batch)


@app.command()
def validate(json_out: AsJson = False) -> None:
    """Replay the published measurements in data/calibration and print predicted vs measured."""

    def go():
        from .calibration import errors, load_cases, summary

        rows = errors(load_cases())
        if json_out:
            print(json.dumps([{"case": c.id, "metric": k, "measured": m, "predicted": p, "error": e}
                              for c, k, m, p, e in rows], indent=2))
            return
        from rich.table import Table

        t = Table(title="planner vs published measurements", title_justify="left")
        for col in ("case", "metric", "measured", "predicted", "error"):
            t.add_column(col, justify="left" if col in ("case", "metric") else "right")
        for c, k, m, p, e in rows:
            t.add_row(c.id, k, f"{m:.4g}", f"{p:.4g}", f"{e:+.1%}")
        out.print(t)
        s = summary(rows)
        out.print(f"{s['n']} figures: mean |error| {s['mean_abs']:.2%}, max {s['max_abs']:.2%}")

    run(go)


from . import cli_check, cli_sweep  # noqa: E402  (commands defined in their own modules)

cli_check.register(app)
cli_sweep.register(app)


def main() -> None:  # pragma: no cover - console entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
