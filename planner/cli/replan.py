"""`plan replan` (registered on the main app): K of the N GPUs running a layout failed; the best layout on
the GPUs left, what the change costs and whether waiting for spares beats shrinking (planner/replan.py)."""
from __future__ import annotations

import json
from typing import Annotated, Optional

import typer
from rich.markup import escape

from planner.cli.common import axis_params, numbers_checked, option_params, out, run, with_params

def decision_line(r) -> str:
    """One line: which wins, by how many tokens and hours, over which horizon, with spares when."""
    d = r.decision
    won, lost = (d.shrink_tokens, d.wait_tokens) if d.winner == "shrink" else (d.wait_tokens, d.shrink_tokens)
    verb, other = ("shrink now", "waiting") if d.winner == "shrink" else ("wait for spares", "shrinking")
    return (f"decision: {verb}: {_tokens(won)} tokens vs {_tokens(lost)} {other} over the next {d.horizon_h:,.1f} h "
            f"({d.horizon_source}), spares in {d.spares_in_h:g} h ({d.spares_source}): {_tokens(d.margin_tokens)} "
            f"tokens more, {r.margin_h:,.2f} h of the running job")


def render(r, model_name: str, cluster) -> None:
    from rich import box
    from rich.table import Table

    from planner.layout.axes import layout_cell, layout_summary
    from planner.errors import printable

    def name_text(text) -> str:  # a spec's name on one line, brackets escaped
        return escape(printable(str(text)))

    c = r.change
    out.print(f"{name_text(model_name)}: {r.lost_gpus:,} of {r.gpus:,} x {name_text(cluster.gpu.name)} lost "
              f"({name_text(cluster.name)}), {r.gpus_left:,} left")
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1, 0, 0))
    for name, right in (("", False), ("GPUs", True), ("layout", False), ("batch", True), ("step s", True),
                        ("tokens/s", True), ("mem GiB", True)):
        t.add_column(name, justify="right" if right else "left")
    for label, s, gpus, batch in (("running", r.running, r.gpus, r.global_batch),
                                  ("new", r.new, r.new_gpus, r.new_global_batch)):
        t.add_row(label, f"{gpus:,}", layout_cell(s.layout), f"{batch:,}", f"{s.step_time_s:.3f}",
                  f"{s.tokens_per_s:,.0f}", f"{s.memory_gib.total:.1f}")
    out.print(t)
    out.print(f"new layout: {escape(layout_summary(r.new.layout))}", soft_wrap=True)
    if r.change_note:
        out.print(escape(r.change_note), soft_wrap=True)
    for v in r.running.violations:
        out.print(f"[yellow]note:[/yellow] the running layout is predicted to violate {v.constraint}: {escape(v.message)}")
    lost = r.tokens_per_s_lost
    out.print(f"tokens/s lost: {lost:,.0f} ({lost / r.running.tokens_per_s:.1%})")
    out.print(f"change: reshard the {c.checkpoint_bytes / 1e12:,.2f} TB checkpoint ({c.read_bytes_per_gpu / 1e9:,.2f} GB a GPU "
              f"at {c.read_gbps_per_gpu:,.2f} GB/s: {c.reshard_s:,.1f} s) + restart {c.restart_s:,.0f} s = "
              f"{c.total_s / 60:,.1f} min")
    out.print(escape(decision_line(r)), soft_wrap=True)


def _tokens(n: float) -> str:
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:,.2f}{unit}"
    return f"{n:,.0f}"


def register(app: typer.Typer) -> None:
    @app.command("replan")
    @with_params(axis_params("give"), option_params("estimate"))
    def replan_cmd(
        model: Annotated[str, typer.Argument(help="model spec: a path or a shipped name")],
        cluster: Annotated[str, typer.Argument(help="cluster spec: a path or a shipped name")],
        gpus: Annotated[int, typer.Option("--gpus", help="GPUs the running layout uses")],
        lost_gpus: Annotated[int, typer.Option("--lost-gpus", help="GPUs lost to failures (from 1 to --gpus - 1)")],
        spares_in_h: Annotated[Optional[float], typer.Option("--spares-in-h", help=(
            "hours until spares arrive (default: 0 when the cluster has spare or unused nodes for the nodes lost, "
            "else its reliability.node_replace_s)"))] = None,
        tokens: Annotated[Optional[float], typer.Option("--tokens", help=(
            "tokens left to train: the horizon is their time at the running throughput (default: 24 h)"))] = None,
        global_batch: Annotated[Optional[int], typer.Option("--global-batch", help="sequences per step (overrides the model spec)")] = None,
        seq_len: Annotated[Optional[int], typer.Option("--seq-len", help="tokens per sequence (overrides the model spec's seq_len)")] = None,
        precision: Annotated[Optional[str], typer.Option("--precision", help="overrides the model spec's training.precision")] = None,
        json_out: Annotated[bool, typer.Option("--json", help="print JSON instead of tables")] = False,
        **options,
    ) -> None:
        """After K of N GPUs fail: the best layout on the GPUs left, the change's cost, and shrink now or wait for spares.

        Example: plan replan gpt3-175b dgx-a100-1024 --gpus 1024 --lost-gpus 16 --tp 8 --pp 4 --micro-batch 4 --vpp 12"""
        def go() -> None:
            from planner import api

            result = api.replan(model, cluster, gpus=gpus, lost_gpus=lost_gpus, spares_in_h=spares_in_h, tokens=tokens,
                                global_batch=global_batch, seq_len=seq_len, precision=precision, **options)
            if json_out:
                print(json.dumps(result.to_dict(), indent=2, allow_nan=False))
            else:
                render(result, result.model.name, result.cluster)

        run(numbers_checked(go), json_out=json_out)
