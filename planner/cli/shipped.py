"""`plan validate` and `plan list` (registered on the main app, loaded when asked for): the published
measurements replayed, and the shipped specs listed."""
from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from planner.cli.common import out, run
from planner.cli.layouts import AsJson, ProfileOpt, print_json as _print_json
from planner.errors import SpecError


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

    run(go, json_out=json_out)


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

    run(go, json_out=json_out)


def register(app: typer.Typer) -> None:
    """Add `plan validate` and `plan list` to `app`."""
    app.command("validate")(validate)
    app.command("list")(list_shipped)
