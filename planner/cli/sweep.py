"""`plan sweep` command (registered on the main app): flags in, planner.api.sweep checks them and runs the
points, a progress bar while it runs, tables out."""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.markup import escape

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

Items = Optional[list[str]]
SHOWN_REASONS = 10  # reasons printed under the table; all are in the output file
PLAIN_PROGRESS_S = 30.0  # a progress line this often when stderr is a log, not a terminal


def split(values: Optional[list[str]]) -> list[str]:
    """`--models a --models b,c` -> [a, b, c]."""
    return [v.strip() for text in values or [] for v in text.split(",") if v.strip()]


def overrides_of(flags: dict, options: dict) -> dict:
    """The sweep-file keys given by flags (None: not given, so the file's value stands).
    `options`: the generated limit, setting and axis options, keyed by their file keys."""
    from planner.api.sweep import overrides

    return overrides(**flags, constraints=options)


def _fmt(value, spec: str, empty: str = "-") -> str:
    return empty if value is None else format(value, spec)


def _priced(rows: list[dict]) -> list[tuple[str, str, str]]:
    """(header, column, format) of what the cost and carbon objectives minimise, when swept."""
    objectives = {r["objective"] for r in rows}
    return ([("$/Mtok", "cost_usd_per_m_tokens", ",.3f")] if "cost" in objectives else []) + \
        ([("kgCO2e/Mtok", "co2e_kg_per_m_tokens", ",.3f")] if "carbon" in objectives else [])


def render_rows(rows: list[dict], console: "Console", title: str) -> None:
    from rich import box
    from rich.table import Table

    objectives = len({r["objective"] for r in rows}) > 1
    clusters = len({r["cluster"] for r in rows}) > 1
    budget = any(r["time_to_train_days"] is not None for r in rows)
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1, 0, 0))
    cols = ["model", "params"] + (["cluster"] if clusters else []) + ["GPUs"] + (["objective"] if objectives else [])
    # The table names everything a layout is: its degrees, and recompute and ZeRO stage beside them.
    cols += ["layout", "recompute", "zero", "step s", "tokens/s", "MFU", "mem GiB", "J/token", "kW"]
    cols = [c for c in cols if c != "kW" or not budget]  # room for days and MWh (avg power stays in --out)
    cols += (["days", "MWh"] if budget else []) + [name for name, _, _ in _priced(rows)]
    for col in cols:
        t.add_column(col, justify="left" if col in ("model", "cluster", "objective", "layout", "recompute") else "right",
                     no_wrap=col in ("model", "layout"), min_width=len(col))
    from planner.layout.axes import layout_cell
    from planner.report import _si, name_text
    from planner.sweep import params_label

    for r in rows:
        cells = [name_text(r["model"]), params_label(r["params"])] + ([name_text(r["cluster"])] if clusters else []) + [str(r["gpus"])]
        cells += [escape(r["objective"])] if objectives else []
        if r["status"] != "ok":
            cells += [f"[red]{r['status']}[/red]"] + [""] * (len(cols) - len(cells) - 1)
        else:
            layout = layout_cell(r)
            cells += [layout, r["recompute"], str(r["zero"]), f"{r['step_time_s']:.3f}", _si(r['tokens_per_s']), f"{r['mfu']:.1%}",
                      f"{r['memory_gib']:.1f}", f"{r['energy_j_per_token']:.3g}"]
            cells += [] if budget else [f"{r['avg_power_kw']:,.1f}"]
            cells += [_fmt(r["time_to_train_days"], ".1f"), _fmt(r["energy_to_train_mwh"], ",.0f")] if budget else []
            cells += [_fmt(r[key], spec) for _, key, spec in _priced(rows)]
        t.add_row(*cells)
    console.print(t)
    bad = [r for r in rows if r["status"] != "ok"]
    for r in bad[:SHOWN_REASONS]:
        console.print(f"[red]{r['status']}[/red] {name_text(r['model'])} on {r['gpus']} GPUs ({escape(r['objective'])}): "
                      f"{name_text(r['reason'] or '')}",
                      highlight=False, soft_wrap=True)
    if len(bad) > SHOWN_REASONS:
        console.print(f"... and {len(bad) - SHOWN_REASONS} more points without a feasible layout (see --out)", highlight=False)


def progress_bar(console: "Console", quiet: bool) -> "Progress":
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)
    from rich.text import Text

    class RateColumn(ProgressColumn):
        def render(self, task) -> Text:
            return Text(f"{task.speed:.1f} points/s" if task.speed else "- points/s", style="progress.data.speed")

    return Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TextColumn("points"), RateColumn(),
                    TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=console,
                    disable=quiet or not console.is_terminal, transient=False)


# Suffixes of a picture file: a --plot value ending in one is a file name given where a folder is asked for.
PICTURE_SUFFIXES = (".png", ".svg", ".pdf", ".jpg", ".jpeg")


def register(app: typer.Typer) -> None:
    """Add the commands of this module to `app`."""
    from planner.cli.common import axis_params, numbers_checked, option_params, run, with_params
    from planner.specs.precision import PRECISIONS

    GlobalBatch = Annotated[Optional[int], typer.Option("--global-batch", help="sequences per step (overrides the model spec)")]

    @app.command()
    @with_params(option_params("sweep", file_defaults=True), axis_params("fix"))
    def sweep(
        sweep_file: Annotated[Optional[Path], typer.Argument(help="sweep YAML (docs/sweeps.md, 'The sweep file'); flags override its keys")] = None,
        models: Annotated[Items, typer.Option("--models", help="model specs (paths or shipped names); repeat or comma-separate")] = None,
        scale_model: Annotated[Optional[str], typer.Option("--scale-model", help="base model of a generated family (with --params)")] = None,
        params: Annotated[Optional[str], typer.Option("--params", help="parameter counts LO:HI:N (N log-spaced) or A,B,C, e.g. 1e9:1e12:8")] = None,
        cluster: Annotated[Items, typer.Option("--cluster", help="cluster specs (paths or shipped names); repeat or comma-separate")] = None,
        gpus: Annotated[Items, typer.Option("--gpus", help="GPU counts: 64,256,1024 or LO:HI (powers of two); default: the whole cluster")] = None,
        global_batch: GlobalBatch = None,
        batch_tokens: Annotated[Optional[float], typer.Option("--batch-tokens", help="tokens per step: global batch = T / seq_len, rounded (docs/sweeps.md, 'The batch rule')")] = None,
        tokens: Annotated[Optional[float], typer.Option("--tokens", help="token budget: adds time and energy to train")] = None,
        objective: Annotated[Items, typer.Option("--objective", help="time | energy | cost | carbon; repeat or comma-separate to sweep several")] = None,
        framework: Annotated[Optional[str], typer.Option("--framework", help=(
            "only layouts this framework runs at every point (megatron | megatron-bridge | nemo | torchtitan | "
            "torchtitan@main | torchtitan@0.2 | deepspeed), priced with its stack profile; overrides the file's framework:"))] = None,
        out_file: Annotated[Optional[Path], typer.Option("--out", help="results.csv | .jsonl | .parquet; rerunning skips the points in it")] = None,
        plot: Annotated[Optional[str], typer.Option("--plot", help=escape("folder (not a file name) for the five PNG figures (needs matplotlib: pip install matplotlib)"))] = None,
        workers: Annotated[Optional[int], typer.Option("--workers", help="processes (default: the core count)")] = None,
        force: Annotated[bool, typer.Option("--force", help="recompute points already in --out")] = False,
        quiet: Annotated[bool, typer.Option("--quiet", help="no progress bar or summary (for CI)")] = False,
        seq_len: Annotated[Optional[int], typer.Option("--seq-len", help="tokens per sequence of every model (overrides their seq_len; --batch-tokens divides by it)")] = None,
        precision: Annotated[Optional[str], typer.Option("--precision", help=f"{' | '.join(PRECISIONS)} (overrides every model's training.precision)")] = None,
        nvlink_domain_gpus: Annotated[Optional[int], typer.Option("--nvlink-domain-gpus", help=(
            "GPUs of an NVLink domain (an NVL72 rack) a job's consecutive ranks fill (overrides node.nvlink_segment_gpus)"))] = None,
        offload_layers: Annotated[Optional[int], typer.Option("--offload-layers", help=(
            "layers whose activations an activation-offloading layout moves to the host (overrides every model's "
            "training.offload_layers)"))] = None,
        torch_compile: Annotated[Optional[bool], typer.Option("--torch-compile/--no-torch-compile", help=(
            "torch.compile each block, or not (overrides every model's training.torch_compile)"))] = None,
        executor: Annotated[str, typer.Option("--executor", help=(
            "local (this machine: --workers processes) or ray (Ray tasks: a local instance of --workers CPUs, "
            "or the cluster at --ray-address; pip install 'llm-layout-planner[ray]')"))] = "local",
        ray_address: Annotated[Optional[str], typer.Option("--ray-address", help=(
            "a running Ray cluster: HOST:PORT, ray://HOST:PORT or auto (with --executor ray)"))] = None,
        profile: Annotated[Optional[str], typer.Option("--profile", help=(
            "a profile from plan calibrate: every point priced with its fitted constants (clusters of its GPU only)"))] = None,
        **options,
    ) -> None:
        """Best layout over model sizes x clusters x GPU counts x objectives: a table, a file, plots."""
        flags = dict(models=models, scale_model=scale_model, params=params, cluster=cluster, gpus=gpus,
                     global_batch=global_batch, batch_tokens=batch_tokens, tokens=tokens, objective=objective,
                     framework=framework)
        stated = dict(seq_len=seq_len, precision=precision, nvlink_domain_gpus=nvlink_domain_gpus, profile=profile,
                      offload_layers=offload_layers, torch_compile=torch_compile)
        run(numbers_checked(lambda: run_command(sweep_file, flags, options, out_file=out_file, plot=plot,
                                                workers=workers, force=force, quiet=quiet, stated=stated,
                                                executor=executor_of(executor, ray_address))))


def executor_of(kind: str, address: Optional[str]):
    """--executor and --ray-address checked before any work (Ray's presence too)."""
    from planner.api.sweep import executor_of as checked

    return checked(kind, address)


def run_command(sweep_file: Optional[Path], flags: dict, options: dict, *, out_file: Optional[Path], plot: Optional[str],
                workers: Optional[int], force: bool, quiet: bool, stated: Optional[dict] = None, executor=None) -> None:
    """`plan sweep`: the spec from the file and flags, the points run (planner.api.sweep), the table,
    file and plots."""
    from planner.api.sweep import check_offload_layers, check_out, make_folder, sweep_points, sweep_spec, worker_count
    from planner.cli.common import err, out
    from planner.errors import SpecError
    from planner.sweep.points import check_size

    n = worker_count(workers)
    check_offload_layers((stated or {}).get("offload_layers"))
    if workers is not None and workers > n:
        err.print(f"note: --workers {workers} capped to the {n} core{'s' if n > 1 else ''} available", highlight=False)
    spec, base_dir = sweep_spec(sweep_file, overrides_of(flags, options))
    out_file = check_out(out_file)  # before the work: unknown suffix, parquet without pyarrow, a FIFO
    if plot is not None and not plot.strip():  # Path('') is '.': figures would land wherever we run
        raise SpecError("an empty folder name", path="--plot", expected="a folder for the figures, e.g. plots/")
    if plot is not None and Path(plot).suffix.lower() in PICTURE_SUFFIXES:
        # `plan search --plot` and `estimate --timeline` take a file: `sweep --plot sweep.png` made a folder of that name
        raise SpecError(f"'{plot}' names a picture, but plan sweep --plot takes a folder (it writes five figures)",
                        path="--plot", expected=f"a folder for the figures, e.g. {Path(plot).stem or 'plots'}/")
    if plot is not None:
        _require_matplotlib(err)
        make_folder(Path(plot), "--plot")  # before the work: a folder that cannot be made fails at once
    if not quiet:  # first words before the models are generated and the first search ends
        err.print(f"plan sweep: {check_size(spec):,} points on {n} worker{'s' if n > 1 else ''}", highlight=False)
    stated = dict(stated or {})  # nvlink_domain_gpus and profile; the rest are the model's overrides
    points = sweep_points(spec, base_dir, nvlink_domain_gpus=stated.pop("nvlink_domain_gpus", None),
                          profile=stated.pop("profile", None), overrides=stated)
    result = _run_points(points, out_file, n, force, quiet, err, executor)
    from planner.report import name_text

    title = f"plan sweep{': ' + name_text(spec.name) if spec.name else ''} ({len(points)} points"
    title += f", framework {spec.framework})" if spec.framework else ")"
    # Piped: 170 columns, the sweep table's width with days, MWh and $/Mtok (search tables fit 150).
    render_rows(result.rows, out if out.is_terminal else type(out)(width=170), title)
    paths = []
    if plot is not None:
        from planner.plots.sweep import write_plots

        paths = write_plots(result.rows, plot)
    _summary(result, len(points), out_file, plot, paths, quiet, err)


def _summary(result, total: int, out_file: Optional[Path], plot: Optional[str], paths: list, quiet: bool, err: "Console") -> None:
    """The closing line on stderr; a sweep whose every point failed (status error) says so and exits 1."""
    errors = sum(r["status"] == "error" for r in result.rows)
    infeasible = sum(r["status"] == "infeasible" for r in result.rows)
    if not quiet:
        text = f"{total} points: {result.computed} computed, {result.skipped} already in the output"
        text += f", {infeasible} without a feasible layout" if infeasible else ""
        text += f", {errors} failed (status error)" if errors else ""
        text += f"; rows in {out_file}" if out_file else ""
        text += f"; {len(paths)} plots in {plot}" if plot is not None else ""
        err.print(escape(text), highlight=False, soft_wrap=True)
    if result.rows and errors == len(result.rows):
        err.print(f"[red]error:[/red] every one of the {errors} points failed (status error); the reasons are in "
                  f"{'the table and ' + escape(str(out_file)) if out_file else 'the table'}", highlight=False, soft_wrap=True)
        raise typer.Exit(1)


def _require_matplotlib(err: "Console") -> None:
    from rich.markup import escape

    from planner.errors import SpecError
    from planner.plots.sweep import require_matplotlib

    try:
        require_matplotlib()
    except SpecError as exc:  # the shared error printer uses markup, which would eat "[plot]"
        err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(2)


class _PlainProgress:
    """Progress for a log (stderr not a terminal, so no bar): a line every PLAIN_PROGRESS_S."""

    def __init__(self, err: "Console", total: int) -> None:
        import time

        self.err, self.total, self.done, self.clock = err, total, 0, time.monotonic
        self.shown = self.clock()

    def advance(self) -> None:
        self.done += 1
        if self.clock() - self.shown >= PLAIN_PROGRESS_S and self.done < self.total:
            self.shown = self.clock()
            self.err.print(f"sweep: {self.done:,} of {self.total:,} points done", highlight=False)


def _run_points(points, out_file: Optional[Path], workers: int, force: bool, quiet: bool, err: "Console", executor=None):
    """Run the points with a progress bar. Ctrl-C (SIGINT) or SIGTERM keeps the finished rows and
    exits 128 + the signal's number: 130 or 143."""
    import signal

    from planner.api.sweep import run as run_sweep
    from planner.sweep import SweepInterrupted

    with progress_bar(err, quiet) as bar:
        task = bar.add_task("sweep", total=len(points))
        plain = _PlainProgress(err, len(points)) if not quiet and bar.disable else None

        def on_row(row: dict) -> None:
            bar.advance(task)
            if plain is not None:
                plain.advance()

        try:
            result = run_sweep(points, out=out_file, workers=workers, force=force, on_row=on_row, executor=executor)
        except KeyboardInterrupt as exc:  # SweepInterrupted; or a bare one before the sweep's handlers were set
            bar.stop()
            signum = getattr(exc, "signum", signal.SIGINT)
            done = len(exc.run.rows) if isinstance(exc, SweepInterrupted) else 0
            where = f"; {done} rows kept in {out_file}, rerun to resume" if out_file else ""
            if out_file and not isinstance(exc, SweepInterrupted):  # stopped before the output was read: untouched
                where = f"; {out_file} left as it was, rerun to resume"
            what = "interrupted" if signum == signal.SIGINT else f"terminated ({signal.Signals(signum).name})"
            err.print(f"[red]{what}[/red]: {done} of {len(points)} points done{where}", highlight=False)
            raise typer.Exit(128 + signum)
        bar.update(task, completed=len(points))
    return result
