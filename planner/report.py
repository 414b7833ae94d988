"""Turn scored layouts and search results into JSON-ready dicts and rich terminal tables."""
from __future__ import annotations

from dataclasses import fields

from rich import box
from rich.console import Console
from rich.table import Table

from .score import Scores
from .search import GpuCountResult, SearchResult

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
    out.update(energy_search_fields(result))
    return out


def energy_search_fields(result: SearchResult) -> dict:
    """Keys added by power caps, per-stage caps and --frontier (absent when not asked for)."""
    out: dict = {}
    if getattr(result, "power_caps", False):
        out["power_caps_searched"] = True
    stages = getattr(result, "stage_caps", None)
    if stages is not None:
        out["stage_caps"] = stage_caps_json(stages)
    if getattr(result, "frontier", None) is not None:
        out["frontier"] = [layout_json(result.scores, int(i)) for i in result.frontier]
    return out


def stage_caps_json(r) -> dict:
    return {"status": r.status, "caps_w": r.caps_w, "energy_saved_j_per_step": r.energy_saved_j_per_step,
            "base_pipeline_s": float(r.base_step_pipeline_s), "pipeline_s": float(r.step_pipeline_s),
            "wall_s": r.wall_s}


def gpus_range_json(r: GpuCountResult) -> dict:
    rows = []
    for n, res, why, eff in zip(r.counts, r.results, r.reasons, r.scaling_efficiency):
        row = {"gpus": n, "feasible": res is not None, "scaling_efficiency": eff}
        if res is not None:
            row["best"] = layout_json(res.scores, int(res.chosen[0]))
        else:
            row["reason"] = why
        rows.append(row)
    return {"counts": rows, "recommended_gpus": r.recommended}


def _fmt_layout(row: dict) -> str:
    parts = [f"dp{row['dp']}", f"tp{row['tp']}", f"pp{row['pp']}", f"mb{row['micro_batch']}"]
    if row["vpp"] > 1:
        parts.append(f"vpp{row['vpp']}")
    return " ".join(parts)


def _si(value: float) -> str:
    """184,579 -> '184.6k', 11,335,957 -> '11.34M': short enough for a terminal column."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.4g}{suffix}"
    return f"{value:.4g}"


def _layout_table(title: str, rows: list[dict], caps: bool, per_token: bool = False) -> Table:
    # No vertical rules: the table stays on one line per layout in a 100-column terminal.
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1, 0, 0))
    cols = [("#", "right"), ("layout", "left"), ("recompute", "left"), ("sp", "center"), ("zero", "right")]
    cols += [("cap W", "right")] if caps else []
    cols += [("step s", "right"), ("tokens/s", "right"), ("MFU", "right"), ("mem GiB", "right"),
             ("MJ/step", "right"), ("kW", "right")]
    cols += [("J/token", "right")] if per_token else []
    for col, just in cols:
        # A layout reads as one token ("dp32 tp4 pp8 mb1 vpp6"): never wrap it, shrink the rest first.
        table.add_column(col, justify=just, no_wrap=col == "layout")
    for rank, r in enumerate(rows, 1):
        lay = r["layout"]
        cells = [str(rank), _fmt_layout(lay), lay["recompute"], "y" if lay["sequence_parallel"] else "-", str(lay["zero"])]
        cells += [f"{r.get('power_cap_w', 0):g}"] if caps else []
        cells += [f"{r['step_time_s']:.3f}", _si(r["tokens_per_s"]), f"{r['mfu']:.1%}",
                  f"{r['memory_gib']['total']:.1f}", f"{r['energy_j_per_step'] / 1e6:,.2f}", f"{r['avg_power_kw']:,.1f}"]
        cells += [f"{r['energy_j_per_token']:.4g}"] if per_token else []
        table.add_row(*cells)
    return table


def render_search(result: SearchResult, console: Console) -> None:
    data = search_json(result)
    title = f"{data['model']} on {data['gpus']} x {result.cluster.gpu.name} ({data['cluster']}), objective: {data['objective']}"
    caps = bool(data.get("power_caps_searched"))
    console.print(_layout_table(title, data["results"], caps))
    if data["best"]:
        render_breakdown(data["best"], result.cluster.gpu.memory_gib, console)
        render_reliability(data["best"], console)
    if "stage_caps" in data:
        sc = data["stage_caps"]
        best_kj = data["best"]["energy_j_per_step"] / 1e3
        console.print(f"per-stage caps (CP-SAT {sc['status']}): {', '.join(f'{w:g}' for w in sc['caps_w'])} W; "
                      f"saves {sc['energy_saved_j_per_step'] / 1e3:,.1f} kJ/step "
                      f"({sc['energy_saved_j_per_step'] / 1e3 / best_kj:.1%}) with the step unchanged")
    if "frontier" in data:
        render_frontier(data["frontier"], console, caps)
    cand = data["candidates"]
    console.print(f"candidates: {cand['total']:,} scored, {cand['feasible']:,} feasible; "
                  f"solver {data['solver']['status']} in {data['solver']['wall_s'] * 1e3:.0f} ms")
    rejected = {k: v for k, v in data["rejected"].items() if v}
    if rejected:
        console.print("rejected by: " + ", ".join(f"{k} {v:,}" for k, v in rejected.items()))


def render_reliability(r: dict, console: Console) -> None:
    if "ettr" not in r:
        return
    console.print(f"reliability: MTTI {r['mtti_h']:.2f} h, checkpoint {r['checkpoint_write_s']:.1f} s every "
                  f"{r['checkpoint_interval_s'] / 60:.1f} min (Daly), restart {r['restart_s'] / 60:.1f} min -> "
                  f"ETTR {r['ettr']:.1%}, goodput {r['goodput_tokens_per_s']:,.0f} of {r['tokens_per_s']:,.0f} tokens/s")
    if "train_days" in r:
        stat = f" (statistical efficiency {r['statistical_efficiency']:.1%})" if "statistical_efficiency" in r else ""
        console.print(f"to train: {r['train_days']:.1f} days, {r['train_gpu_hours']:,.0f} GPU-hours, "
                      f"{r['train_mwh']:,.0f} MWh, ${r['train_cost_usd']:,.0f}, {r['train_tco2e']:,.0f} tCO2e{stat}")


def render_frontier(rows: list[dict], console: Console, caps: bool) -> None:
    console.print(_layout_table("Pareto frontier: step time vs energy per token (fastest first)", rows, caps, True))


def render_gpus_range(data: dict, console: Console) -> None:
    t = Table(title="how many GPUs: best layout per count", title_justify="left")
    for col in ("GPUs", "layout", "step s", "tokens/s", "ETTR", "goodput tok/s", "scaling eff", "J/token", "days"):
        t.add_column(col, justify="left" if col == "layout" else "right", no_wrap=col == "layout")
    for row in data["counts"]:
        b = row.get("best")
        if b is None:
            t.add_row(str(row["gpus"]), "[red]infeasible[/red]", "", "", "", "", "", "", "")
            continue
        eff = row["scaling_efficiency"]
        t.add_row(str(row["gpus"]), _fmt_layout(b["layout"]), f"{b['step_time_s']:.3f}", f"{b['tokens_per_s']:,.0f}",
                  f"{b['ettr']:.1%}", f"{b['goodput_tokens_per_s']:,.0f}", f"{eff:.1%}",
                  f"{b['energy_j_per_token']:.3g}", f"{b['train_days']:.1f}" if "train_days" in b else "-")
    console.print(t)
    rec = data["recommended_gpus"]
    console.print(f"recommended: {rec} GPUs" if rec else "[red]no GPU count meets the constraints[/red]")


def render_breakdown(r: dict, memory_gib: float, console: Console) -> None:
    t = Table(title="best layout: step time and memory per GPU", title_justify="left",
              box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1, 0, 0))
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
