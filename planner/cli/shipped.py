"""`plan validate` and `plan list` (registered on the main app, loaded when asked for): the published
measurements replayed, and the shipped specs listed."""
from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from planner.cli.common import out, run
from planner.cli.layouts import AsJson, ProfileOpt, print_json as _print_json
from planner.errors import printable


def validate(json_out: AsJson = False, profile: ProfileOpt = None) -> None:
    """Replay the published measurements in data/calibration (or a profile's own runs) and print predicted vs measured."""

    def go():
        from rich.table import Table

        from planner import api
        from planner.fidelity.calibration import summary

        result = api.validate(profile)
        if json_out:
            _print_json(result)
            return
        if profile is not None:
            return _profile_table(result)
        t = Table(title="planner vs published measurements", title_justify="left")
        for col in ("case", "metric", "measured", "predicted", "error"):
            t.add_column(col, justify="left" if col in ("case", "metric") else "right")
        for r in result:
            t.add_row(r["case"], r["metric"], f"{r['measured']:.4g}", f"{r['predicted']:.4g}", f"{r['error']:+.1%}")
        out.print(t)
        s = summary([r["error"] for r in result])
        # In sample: the shipped constants were fitted on these very runs. What a run never seen can expect is the
        # left-out error (each source's runs predicted by a fit without them), in docs/fidelity.md.
        out.print(f"{s['n']} figures: mean |error| {s['mean_abs']:.2%}, max {s['max_abs']:.2%}, in sample "
                  "(the shipped constants were fitted on these runs)")
        out.print("error with each source left out of the fit (what a new run can expect): docs/fidelity.md")

    run(go, json_out=json_out)


def _profile_table(data: dict) -> None:
    """A profile's runs replayed: each predicted now with the profile's constants (where its model is a
    shipped one: a runs file's own model files are not in the profile), beside what the fit said."""
    from rich.table import Table

    t = Table(title=f"profile {escape(data['profile'])}: its runs replayed",
              caption=f"{escape(data['stack'])} on {escape(data['gpu'])}", title_justify="left")
    for col in ("run", "measured s", "fitted s", "now s", "error", "left out"):
        t.add_column(col, justify="left" if col == "run" else "right")
    for r in data["runs"]:
        now = "-" if r["predicted_now_s"] is None else f"{r['predicted_now_s']:.4g}"
        left = "-" if r["loo_error_pct"] is None else f"{r['loo_error_pct']:+.1f}%"
        t.add_row(escape(printable(r["name"])), f"{r['measured_s']:.4g}", f"{r['fitted_s']:.4g}", now,
                  f"{r['error_pct']:+.1f}%", left)
    out.print(t)


def list_shipped(
    kind: Annotated[str, typer.Argument(help="models | clusters | gpus | stacks")],
    json_out: AsJson = False,
) -> None:
    """List the shipped specs of a kind, the names MODEL, CLUSTER, a GPU preset and --stack take."""

    def go():
        from planner import api

        rows = api.list_specs(kind)
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
