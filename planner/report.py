"""Turn scored layouts and search results into JSON-ready dicts and rich terminal tables."""
from __future__ import annotations

from dataclasses import fields

from rich.console import Console
from rich.table import Table

from .score import Scores
from .search import SearchResult

TIME_KEYS = ("compute", "recompute", "tp_comm", "pp_comm", "dp_comm", "bubble", "optimizer", "overhead")
MEMORY_KEYS = ("weights", "gradients", "optimizer", "activations", "other")


def layout_json(scores: Scores, i: int, violations: list[dict] | None = None) -> dict:
    t, m, e = scores.time_s, scores.memory_gib, scores.energy
    memory = {k: round(float(getattr(m, k)[i]), 4) for k in MEMORY_KEYS}
    memory["total"] = round(float(m.total[i]), 4)
    out = {
        "layout": scores.layouts.row(i),
        "feasible": not violations,
        "violations": [{"constraint": v["constraint"], "message": v["message"]} for v in violations or []],
        "step_time_s": float(scores.step_time_s[i]),
        "time_breakdown_s": {k: float(getattr(t, k)[i]) for k in TIME_KEYS},
        "memory_gib": memory,
        "tokens_per_s": float(scores.tokens_per_s[i]),
        "model_tflops_per_gpu": float(scores.model_tflops_per_gpu[i]),
        "mfu": float(scores.mfu[i]),
        "energy_j_per_step": float(e.energy_j_per_step[i]),
        "energy_j_per_token": float(scores.energy_j_per_token[i]),
        "avg_power_kw": float(e.avg_power_kw[i]),
    }
    out.update(extra_layout_fields(scores, i))
    return out


def extra_layout_fields(scores: Scores, i: int) -> dict:
    """Optional per-layout fields carried by the scores (extension point: reliability, caps)."""
    extra = getattr(scores, "extras", None) or {}
    return {k: (v[i].item() if hasattr(v[i], "item") else v[i]) for k, v in extra.items()}


def search_json(result: SearchResult) -> dict:
    s = result.scores
    results = [layout_json(s, int(i)) for i in result.chosen]
    out = {
        "model": result.model.name,
        "cluster": result.cluster.name,
        "gpus": result.gpus,
        "objective": result.objective,
        "best": results[0] if results else None,
        "results": results,
        "solver": {"status": result.solver.status, "wall_s": result.solver.wall_s,
                   "objective": result.solver.objective, "bound": result.solver.bound},
        "candidates": {"total": len(s), "feasible": int(result.feasible.sum())},
        "rejected": result.rejected,
    }
    if not results:
        near = result.nearest_infeasible()
        if near is not None:
            out["nearest"] = layout_json(s, near, result.violations(near))
    return out


def _fmt_layout(row: dict) -> str:
    parts = [f"dp{row['dp']}", f"tp{row['tp']}", f"pp{row['pp']}", f"mb{row['micro_batch']}"]
    if row["vpp"] > 1:
        parts.append(f"vpp{row['vpp']}")
    return " ".join(parts)


def render_search(result: SearchResult, console: Console) -> None:
    data = search_json(result)
    title = f"{data['model']} on {data['gpus']} x {result.cluster.gpu.name} ({data['cluster']}), objective: {data['objective']}"
    table = Table(title=title, title_justify="left")
    for col, just in (("#", "right"), ("layout", "left"), ("recompute", "left"), ("sp", "center"), ("zero", "right"),
                      ("step s", "right"), ("tokens/s", "right"), ("MFU", "right"), ("mem GiB", "right"),
                      ("kJ/step", "right"), ("kW", "right")):
        table.add_column(col, justify=just)
    for rank, r in enumerate(data["results"], 1):
        lay = r["layout"]
        table.add_row(str(rank), _fmt_layout(lay), lay["recompute"], "y" if lay["sequence_parallel"] else "-",
                      str(lay["zero"]), f"{r['step_time_s']:.3f}", f"{r['tokens_per_s']:,.0f}", f"{r['mfu']:.1%}",
                      f"{r['memory_gib']['total']:.1f}", f"{r['energy_j_per_step'] / 1e3:,.1f}", f"{r['avg_power_kw']:,.1f}")
    console.print(table)
    if data["best"]:
        render_breakdown(data["best"], result.cluster.gpu.memory_gib, console)
    cand = data["candidates"]
    console.print(f"candidates: {cand['total']:,} scored, {cand['feasible']:,} feasible; "
                  f"solver {data['solver']['status']} in {data['solver']['wall_s'] * 1e3:.0f} ms")
    rejected = {k: v for k, v in data["rejected"].items() if v}
    if rejected:
        console.print("rejected by: " + ", ".join(f"{k} {v:,}" for k, v in rejected.items()))


def render_breakdown(r: dict, memory_gib: float, console: Console) -> None:
    t = Table(title="best layout: where the step goes and what memory holds", title_justify="left")
    t.add_column("time", justify="left")
    t.add_column("s", justify="right")
    t.add_column("%", justify="right")
    t.add_column("memory", justify="left")
    t.add_column("GiB", justify="right")
    step = r["step_time_s"]
    times = list(r["time_breakdown_s"].items())
    mems = list(r["memory_gib"].items())
    for k in range(max(len(times), len(mems))):
        tk, tv = times[k] if k < len(times) else ("", None)
        mk, mv = mems[k] if k < len(mems) else ("", None)
        t.add_row(tk, "" if tv is None else f"{tv:.3f}", "" if tv is None else f"{tv / step:.1%}",
                  mk + (f" (of {memory_gib:g})" if mk == "total" else ""), "" if mv is None else f"{mv:.2f}")
    console.print(t)


def render_estimate(r: dict, console: Console, memory_gib: float) -> None:
    lay = r["layout"]
    status = "[green]feasible[/green]" if r["feasible"] else "[red]infeasible[/red]"
    console.print(f"{_fmt_layout(lay)} recompute={lay['recompute']} sp={lay['sequence_parallel']} zero={lay['zero']} "
                  f"m={lay['num_microbatches']}: {status}")
    console.print(f"step {r['step_time_s']:.3f} s, {r['tokens_per_s']:,.0f} tokens/s, MFU {r['mfu']:.1%}, "
                  f"{r['model_tflops_per_gpu']:.1f} TFLOP/s per GPU, {r['avg_power_kw']:,.1f} kW")
    render_breakdown(r, memory_gib, console)
    for v in r["violations"]:
        console.print(f"[red]violates {v['constraint']}[/red]: {v['message']}")


def render_infeasible(data: dict, console: Console) -> None:
    console.print("[red]no feasible layout[/red]: " + ", ".join(f"{k} removed {v:,}" for k, v in data["rejected"].items() if v))
    near = data.get("nearest")
    if near:
        console.print(f"nearest candidate: {_fmt_layout(near['layout'])} recompute={near['layout']['recompute']} "
                      f"zero={near['layout']['zero']}")
        for v in near["violations"]:
            console.print(f"  {v['constraint']}: {v['message']}")
