"""The presentation layer: typed results (planner/results.py, planner/search.py) as rich terminal
tables. Nothing here computes a figure; columns of layouts come from planner/layout/axes.py. JSON is
the results' own `to_dict()` (planner/results.py, planner/api/results.py)."""
from __future__ import annotations

from dataclasses import fields
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from planner.layout.axes import AXES, layout_cell, layout_summary
from planner.export import is_even, megatron_pipeline_args, runs
from planner.export.common import word
from planner.results import ScoredLayout
from planner.choose import TIE_PCT
from planner.mixed_pools import PoolSearch
from planner.search import GpuCountResult, SearchResult
from planner.errors import printable

COLUMN_AXES = tuple(a for a in AXES if a.column)


def name_text(text: object) -> str:
    """A name from a spec (model, cluster, GPU, stack, pool, job) as rich markup on one line: control
    characters (newline, CR, ESC, U+2028) as escapes, brackets escaped, so no name starts a line of its own."""
    return escape(printable(str(text)))


def search_json(result: SearchResult) -> dict:
    """`plan search --json` of an engine's `SearchResult` (what `planner.Search.to_dict()` gives)."""
    from planner.api.results import search_dict

    return search_dict(result)


def _split_args(s: ScoredLayout) -> list[str]:
    split = s.layout.get("stage_layers")
    return [] if split is None else megatron_pipeline_args(split, s.layout["pp"], s.layout.get("vpp", 1), s.mtp_layers)


def _cell(layout: dict) -> str:
    """The layout cell, with an uneven split's layers per virtual stage: `dp4 tp8 pp16 [7 8x14 7]`."""
    split = layout.get("stage_layers")
    if split is None or is_even(split):
        return layout_cell(layout)
    text = runs(split)  # a split of many short runs would push the table off the line: named below it
    return layout_cell(layout) + (f" [{text}]" if len(text) <= 24 else " [uneven]")


# --- terminal ----------------------------------------------------------------------------------

def _si(value: float) -> str:
    """184,579 -> '184.6k', 11,335,957 -> '11.34M': short enough for a terminal column."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.4g}{suffix}"
    return f"{value:.4g}"


def _axis_value(s: ScoredLayout, a) -> Any:
    """An axis's value for a table cell (None: this result has no such value)."""
    return a.shown(s) if a.shown is not None else s.layout.get(a.name)


def step_cell(r: ScoredLayout) -> str:
    """Step time with its expected error: `17.218 ±4%`."""
    return f"{r.step_time_s:.3f} ±{r.error_band.pct:.0f}%"


# Columns an objective adds to the table: what it minimises, shown (header, cell of a layout).
OBJECTIVE_COLUMNS = {
    "cost": (("$/step", lambda r: f"{r.cost_usd_per_step:,.2f}"), ("$/Mtok", lambda r: f"{r.cost_usd_per_m_tokens:,.3f}")),
    "carbon": (("kgCO2e/step", lambda r: f"{r.co2e_g_per_step / 1e3:,.3f}"),),
}


def _layout_table(title: str, rows: list[ScoredLayout], per_token: bool = False, objective: str = "time") -> Table:
    # No vertical rules: the table stays on one line per layout in a 100-column terminal.
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1, 0, 0))
    axes = [a for a in COLUMN_AXES if rows and all(_axis_value(r, a) is not None for r in rows)]
    cols = [("#", "right"), ("layout", "left")] + [(a.column, a.justify) for a in axes]
    cols += [("step s", "right"), ("tokens/s", "right"), ("MFU", "right"), ("mem GiB", "right"),
             ("MJ/step", "right"), ("kW", "right")]
    cols += [("J/token", "right")] if per_token else []
    extra = OBJECTIVE_COLUMNS.get(objective, ()) if all(r.cost_usd_per_step is not None for r in rows) else ()
    cols += [(name, "right") for name, _ in extra]
    for col, just in cols:
        # A layout reads as one token ("dp32 tp4 pp8 mb1 vpp6"): never wrap it, shrink the rest first.
        table.add_column(col, justify=just, no_wrap=col == "layout")
    for rank, r in enumerate(rows, 1):
        cells = [str(rank), escape(_cell(r.layout))] + [a.cell(_axis_value(r, a)) for a in axes]
        cells += [step_cell(r), _si(r.tokens_per_s), f"{r.mfu:.1%}", f"{r.memory_gib.total:.1f}",
                  f"{r.energy_j_per_step / 1e6:,.2f}", f"{r.avg_power_kw:,.1f}"]
        cells += [f"{r.energy_j_per_token:.4g}"] if per_token else []
        cells += [cell(r) for _, cell in extra]
        table.add_row(*cells)
    return table


def render_search(result: SearchResult, console: Console) -> None:
    title = (f"{name_text(result.model.name)} on {result.gpus} x {name_text(result.cluster.gpu.name)} "
             f"({name_text(result.cluster.name)}), stack: {name_text(result.model.training.stack.name)}, "
             f"objective: {result.objective}")
    best = result.best
    console.print(_layout_table(title, result.results, objective=result.objective))
    if best is not None and result.objective in OBJECTIVE_COLUMNS:
        _render_price(best, result.cluster, console)
    if best is not None:
        _render_split(best, console)
        render_breakdown(best, result.cluster.gpu.memory_gib, console)
        render_reliability(best, console)
        _render_placement(result, console)
        console.print(f"[dim]step time ±: expected error from {name_text(best.error_band.basis)}[/dim]")
        _render_simplest(result, console)
        if result.compiled_step_time_s is not None:
            console.print(f"torch.compile: {result.compiled_step_time_s:.3f} s a step compiled "
                          f"({1 - result.compiled_step_time_s / best.step_time_s:.1%} faster; --torch-compile), "
                          f"priced eager as {name_text(result.model.training.stack.name)}'s blocks run by default")
    sc = result.stage_caps
    if sc is not None:
        best_kj = best.energy_j_per_step / 1e3
        console.print(f"per-stage caps (CP-SAT {sc.status}): {', '.join(f'{w:g}' for w in sc.caps_w)} W; "
                      f"saves {sc.energy_saved_j_per_step / 1e3:,.1f} kJ/step "
                      f"({sc.energy_saved_j_per_step / 1e3 / best_kj:.1%}) with the step unchanged")
    if result.frontier is not None:
        render_frontier(result.frontier_results, console)
    console.print(f"candidates: {len(result.scores):,} scored, {int(result.feasible.sum()):,} feasible; "
                  f"chosen by {result.solver.method} in {result.solver.wall_s * 1e3:.0f} ms")
    tried = result.split_solves
    if tried:
        statuses = sorted({r.status for r in tried.values()})
        console.print(f"stage split (CP-SAT): {len(tried)} layouts tried ({', '.join(statuses)}), "
                      f"{len(result.splits)} made faster or feasible; "
                      f"{sum(r.wall_s for r in tried.values()) * 1e3:.0f} ms of solver time (solves run one a core)")
    rejected = {k: v for k, v in result.rejected.items() if v}
    if rejected:
        console.print("rejected by: " + ", ".join(f"{k} {v:,}" for k, v in rejected.items()))


def _render_simplest(result: SearchResult, console: Console) -> None:
    """The simplest layout predicted within TIE_PCT of the best: a tie the planner cannot break."""
    simple, best = result.simplest_within_tie, result.best
    if simple is None:
        return
    slower = simple.step_time_s / best.step_time_s - 1
    s, b = simple.layout, best.layout
    replica_s, replica_b = (x["tp"] * x["pp"] * x["cp"] for x in (s, b))
    simpler = [f"{replica_s} GPU{'s' if replica_s > 1 else ''} per replica (not {replica_b})"] if replica_s < replica_b else []
    simpler += [f"{k} {s[k]} (not {b[k]})" for k in ("pp", "vpp", "ep") if s[k] < b[k]]
    also = [f"{k} {s[k]} (not {b[k]})" for k in _OTHER_KEYS if s.get(k) != b.get(k)]
    why = "simpler: " + ", ".join(simpler) if simpler else "as simple"
    console.print(f"a tie, within {TIE_PCT:g}% (closer than the planner can tell): {escape(_cell(s))} "
                  f"at +{slower:.1%} is {escape(why)}" + (f"; also {escape(', '.join(also))}" if also else ""))


# What else may differ in a tie (planner/choose.py simplicity_keys reads tp x pp x cp, pp, vpp, ep).
_OTHER_KEYS = ("tp", "cp", "micro_batch", "recompute", "sequence_parallel", "zero")


def _render_price(r: ScoredLayout, cluster, console: Console) -> None:
    p, g = cluster.pricing, cluster.power.grid_gco2_per_kwh
    console.print(f"cost: ${r.cost_usd_per_step:,.2f} per step, ${r.cost_usd_per_m_tokens:,.3f} per million tokens "
                  f"(GPU ${p.gpu_hour_usd:g}/h, electricity ${p.electricity_usd_per_kwh:g}/kWh); carbon "
                  f"{r.co2e_g_per_step / 1e3:,.2f} kgCO2e per step ({g:g} gCO2e/kWh)", highlight=False)


def _render_placement(result: SearchResult, console: Console) -> None:
    """On rack-scale NVLink domains, how the best layout's consecutive ranks fill them (issue 37 item 4)."""
    p = result.placement
    if p is None:
        return
    whose = ("node.nvlink_segment_gpus" if p["stated"] else
             "the planner's default: whole trays holding whole tp x cp and ep groups, as Slurm --segment advises; "
             "state node.nvlink_segment_gpus for your scheduler's")
    split = ", ".join(p["split_groups"]) or "none"
    console.print(f"placement: consecutive ranks (tp innermost, then cp, ep, dp, pp) fill {p['gpus_per_domain']} "
                  f"of each {p['nvlink_domain_gpus']}-GPU NVLink domain ({whose}); groups spanning domains: {split}")


def render_reliability(r: ScoredLayout, console: Console) -> None:
    rel = r.reliability
    console.print(f"reliability: MTTI {rel.mtti_h:.2f} h, checkpoint {rel.checkpoint_write_s:.1f} s every "
                  f"{rel.checkpoint_interval_s / 60:.1f} min (Daly), restart {rel.restart_s / 60:.1f} min -> "
                  f"ETTR {rel.ettr:.1%}, goodput {rel.goodput_tokens_per_s:,.0f} of {r.tokens_per_s:,.0f} tokens/s")
    t = r.training
    if t is not None:
        stat = "" if r.statistical_efficiency is None else f" (statistical efficiency {r.statistical_efficiency:.1%})"
        console.print(f"to train: {t.train_days:.1f} days, {t.train_gpu_hours:,.0f} GPU-hours, "
                      f"{t.train_mwh:,.0f} MWh, ${t.train_cost_usd:,.0f}, {t.train_tco2e:,.0f} tCO2e{stat}")


def render_frontier(rows: list[ScoredLayout], console: Console) -> None:
    console.print(_layout_table("Pareto frontier: step time vs energy per token (fastest first)", rows, True))


def render_gpus_range(r: GpuCountResult, console: Console) -> None:
    t = Table(title="how many GPUs: best layout per count", title_justify="left")
    for col in ("GPUs", "layout", "step s", "tokens/s", "ETTR", "goodput tok/s", "scaling eff", "J/token", "days"):
        t.add_column(col, justify="left" if col == "layout" else "right", no_wrap=col == "layout")
    for n, res, eff in zip(r.counts, r.results, r.scaling_efficiency):
        if res is None:
            t.add_row(str(n), "[red]infeasible[/red]", "", "", "", "", "", "", "")
            continue
        b = res.best
        t.add_row(str(n), layout_cell(b.layout), f"{b.step_time_s:.3f}", f"{b.tokens_per_s:,.0f}",
                  f"{b.reliability.ettr:.1%}", f"{b.goodput_tokens_per_s:,.0f}", f"{eff:.1%}",
                  f"{b.energy_j_per_token:.3g}", f"{b.training.train_days:.1f}" if b.training else "-")
    console.print(t)
    rec = r.recommended
    console.print(f"recommended: {rec} GPUs" if rec else "[red]no GPU count meets the constraints[/red]")


# Time breakdown fields that are a part of other terms (costs.pipeline.PARTS_OF_TERMS), with their row label.
_OF_WHICH = {"moe_imbalance": "of which moe imbalance"}
# Offload's terms (planner/costs/offload.py): shown only where the layout offloads.
_OFFLOAD_ONLY = ("offload", "host")
# MemoryBreakdown fields that are no GiB of the GPU (the layer count is in the layout cell: offload=activations:N).
_NOT_GIB = ("offload_layers",)


def render_breakdown(r: ScoredLayout, memory_gib: float, console: Console, title: str = "best layout") -> None:
    """Step time and memory per GPU of `r`, titled `title` (a search's best layout, or `plan estimate`'s one)."""
    t = Table(title=f"{title}: step time and memory per GPU", title_justify="left",
              box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1, 0, 0))
    t.add_column("time", justify="left")
    t.add_column("s", justify="right")
    t.add_column("%", justify="right")
    t.add_column("memory", justify="left")
    t.add_column("GiB", justify="right")
    step = r.step_time_s
    times = [(f.name, getattr(r.time_breakdown_s, f.name)) for f in fields(r.time_breakdown_s) if f.name not in _OF_WHICH
             and not (f.name in _OFFLOAD_ONLY and not getattr(r.time_breakdown_s, f.name))]
    for name, label in _OF_WHICH.items():  # parts of the terms above, not added to the step: shown when priced
        value = getattr(r.time_breakdown_s, name, 0.0)
        if value:
            times.append((label, value))
    mems = [(f.name, getattr(r.memory_gib, f.name)) for f in fields(r.memory_gib)
            if f.name not in _OFFLOAD_ONLY + _NOT_GIB]
    mems.append(("total", r.memory_gib.total))
    if r.memory_gib.host:  # not on the GPU: after its total
        mems.append(("host (offloaded)", r.memory_gib.host))
    for k in range(max(len(times), len(mems))):
        tk, tv = times[k] if k < len(times) else ("", None)
        mk, mv = mems[k] if k < len(mems) else ("", None)
        t.add_row(tk, "" if tv is None else f"{tv:.3f}", "" if tv is None else f"{tv / step:.1%}",
                  mk + (f" (of {memory_gib:g})" if mk == "total" else ""), "" if mv is None else f"{round(mv, 4):.2f}")
    console.print(t)


def split_flags_line(args: list[str]) -> str:
    """Megatron-LM's split flags as one pasteable shell line: each word shell-quoted (a layout string holds
    `|`, `(`, `*`, which a shell reads as a pipe, a subshell and a glob)."""
    return " ".join(word(a) for a in args)


def _render_split(r: ScoredLayout, console: Console) -> None:
    split = r.layout.get("stage_layers")
    if split is None or is_even(split):
        return
    if r.stack_split:  # nanotron's own balance: nothing to set
        console.print(f"stages as the stack splits them by cost (pipeline_split cost_balanced, as nanotron's build_model), layers per rank: {runs(split)}; "
                      "not a setting")
        return
    args = _split_args(r) if not r.hybrid and r.megatron_schedule else []
    said = ("Megatron-LM core_v0.15.0 has no flags for it (MambaStack splits a hybrid pattern evenly)" if r.hybrid
            else "Megatron-LM flags (one line, shell-quoted):" if args
            else f"Megatron-LM does not run schedule {r.layout['schedule']}")
    console.print(f"uneven stages, layers per virtual stage in schedule order: {runs(split)}; {said}")
    if args:  # never wrapped, never read as markup: a flag and its value stay on one line to paste
        console.print("  " + split_flags_line(args), markup=False, highlight=False, soft_wrap=True)


def render_estimate(r: ScoredLayout, console: Console, memory_gib: float, title: str = "this layout") -> None:
    """`plan estimate`: one layout scored, its breakdown titled `title` (not as a search's best)."""
    status = "[green]feasible[/green]" if r.feasible else "[red]infeasible[/red]"
    console.print(f"{layout_summary(r.layout)}: {status}")
    _render_split(r, console)
    console.print(f"step {r.step_time_s:.3f} s ±{r.error_band.pct:.0f}%, {r.tokens_per_s:,.0f} tokens/s, MFU {r.mfu:.1%}, "
                  f"{r.model_tflops_per_gpu:.1f} TFLOP/s per GPU, {r.avg_power_kw:,.1f} kW")
    console.print(f"[dim]expected error: {name_text(r.error_band.basis)}[/dim]")
    if r.error_band.memory_pct is not None:
        console.print(f"memory {r.memory_gib.total:.1f} GiB ±{r.error_band.memory_pct:.0f}% (the profile's measured peaks)")
    render_breakdown(r, memory_gib, console, title)
    for v in r.violations:
        console.print(f"[red]violates {v.constraint}[/red]: {escape(v.message)}")


def render_infeasible(result: SearchResult, console: Console) -> None:
    console.print("[red]no feasible layout[/red]: " + ", ".join(f"{k} removed {v:,}" for k, v in result.rejected.items() if v))
    near = result.nearest
    if near is not None:
        console.print(f"nearest candidate: {layout_summary(near.layout)}")
        for v in near.violations:
            console.print(f"  {v.constraint}: {escape(v.message)}")


# --- clusters of several pools (planner/mixed_pools.py) ----------------------------------------------------

def render_pool_search(ps: PoolSearch, console: Console) -> None:
    if ps.best is not None:
        render_search(ps.best, console)
    for name, r in ps.per_pool.items():
        text = "no feasible layout" if r is None else (
            f"{layout_cell(r.best.layout)} on {r.gpus:,} x {name_text(r.cluster.gpu.name)}: {r.best.step_time_s:.3f} s/step, "
            f"{r.best.tokens_per_s:,.0f} tokens/s")
        console.print(f"pool {name_text(name)} alone: {text}")
    m = ps.mixed
    stopped = sum(p.status == "UNKNOWN" for p in ps.tried)
    if m is None and stopped:  # not "none exists": CP-SAT ran out of time before an answer
        console.print(f"across pools: CP-SAT stopped (UNKNOWN) before placing {stopped} of {len(ps.tried)} layouts; "
                      "raise --time-limit to know whether a pipeline across pools is faster")
    elif m is None:
        console.print(f"across pools: no pipeline that spans pools ({len(ps.tried)} layouts placed; "
                      "a placement in one pool is that pool's own search)")
    else:
        ranks = " ".join(f"{escape(q)}:{k}" for q, k in zip(m.layout["stage_pools"], m.layout["stage_layers"]))
        console.print(f"across pools (CP-SAT {m.placement.status}): {layout_cell(m.layout)} on {m.gpus:,} GPUs, "
                      f"{m.step_time_s:.3f} s/step ({m.pipeline_s:.3f} pipeline + {m.outside_pipeline_s:.3f} outside), "
                      f"{m.tokens_per_s:,.0f} tokens/s; rank pool:layers {ranks}")
    console.print(f"fastest: {'the pipeline across pools' if ps.fastest == 'mixed' else 'pool ' + name_text(ps.fastest)}")
