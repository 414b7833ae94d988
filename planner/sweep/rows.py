"""The stable row columns, and one row from a point's search: ok, infeasible (with the reason) or error."""
from __future__ import annotations

from ..errors import InfeasibleError, PlannerError
from .points import Point

# --- rows --------------------------------------------------------------------------------------

# (name, type, meaning); the order is the CSV header and the JSONL key order. Keep it stable.
COLUMNS: tuple[tuple[str, type, str], ...] = (
    ("point_id", str, "sha256 of the point's canonical inputs (16 hex digits): the resume key"),
    ("model", str, "model name (generated: BASE-scaled-SIZE)"),
    ("params", int, "parameters, embeddings included [count]"),
    ("layers", int, "transformer layers"),
    ("hidden", int, "hidden size d_model"),
    ("heads", int, "attention heads"),
    ("kv_heads", int, "key/value heads (GQA)"),
    ("cluster", str, "cluster name as given"),
    ("gpu", str, "GPU type"),
    ("nodes", int, "nodes of the cluster used (enlarged to hold gpus when needed)"),
    ("gpus", int, "GPUs of the point"),
    ("global_batch", int, "sequences per step"),
    ("seq_len", int, "tokens per sequence"),
    ("tokens", float, "token budget of the run (empty: none given)"),
    ("objective", str, "time | energy | cost | carbon"),
    ("status", str, "ok | infeasible | error"),
    ("reason", str, "why no layout is feasible (empty when ok)"),
    ("dp", int, "data-parallel degree"),
    ("tp", int, "tensor-parallel degree"),
    ("pp", int, "pipeline-parallel degree"),
    ("micro_batch", int, "micro-batch size [sequences]"),
    ("vpp", int, "virtual pipeline stages per rank"),
    ("recompute", str, "none | selective | full"),
    ("sequence_parallel", bool, "sequence parallelism on"),
    ("zero", int, "ZeRO stage"),
    ("step_time_s", float, "time per optimizer step [s]"),
    ("tokens_per_s", float, "throughput [tokens/s]"),
    ("goodput_tokens_per_s", float, "throughput after failures and checkpoints [tokens/s] (empty when not modelled)"),
    ("mfu", float, "model FLOPs utilisation (0-1)"),
    ("model_tflops_per_gpu", float, "model FLOP/s per GPU [TFLOP/s]"),
    ("memory_gib", float, "peak memory per GPU [GiB]"),
    ("energy_j_per_token", float, "energy per token, node overhead and PUE included [J/token]"),
    ("avg_power_kw", float, "average power of the job [kW]"),
    ("time_to_train_days", float, "tokens / goodput (else tokens/s) [days] (empty without a token budget)"),
    ("energy_to_train_mwh", float, "average power x time to train [MWh] (empty without a token budget)"),
)
COLUMN_NAMES = tuple(name for name, _, _ in COLUMNS)
STATUSES = ("ok", "infeasible", "error")


def _input_columns(p: Point) -> dict:
    m = p.model
    return {"point_id": p.key, "model": m.name, "params": m.total_params(), "layers": m.layers, "hidden": m.hidden,
            "heads": m.heads, "kv_heads": m.num_kv_heads, "cluster": p.cluster_label, "gpu": p.cluster.gpu.name,
            "nodes": p.cluster.nodes, "gpus": p.gpus, "global_batch": m.training.global_batch, "seq_len": m.seq_len,
            "tokens": m.training.tokens, "objective": p.objective}


def layout_columns(best: dict, tokens: float | None, statistical_efficiency: float | None = None) -> dict:
    """The result columns of a row from a scored layout (`report.layout_json`)."""
    lay = best["layout"]
    row = {k: lay[k] for k in ("dp", "tp", "pp", "micro_batch", "vpp", "recompute", "sequence_parallel", "zero")}
    row.update({k: best[k] for k in ("step_time_s", "tokens_per_s", "mfu", "model_tflops_per_gpu",
                                     "energy_j_per_token", "avg_power_kw")})
    row["goodput_tokens_per_s"] = best.get("goodput_tokens_per_s")
    row["memory_gib"] = best["memory_gib"]["total"]
    if tokens is not None:
        rate = best.get("goodput_tokens_per_s") or best["tokens_per_s"]
        wall_s = tokens / (best.get("statistical_efficiency") or 1.0) / rate
        row["time_to_train_days"] = wall_s / 86_400.0
        row["energy_to_train_mwh"] = best["avg_power_kw"] * wall_s / 3.6e6  # kW x s -> MWh
    return row


def infeasible_reason(result) -> str:
    """What removed the candidates, and why the nearest one fails."""
    removed = ", ".join(f"{k} removed {v}" for k, v in result.rejected.items() if v)
    text = f"no feasible layout of {len(result.scores)} candidates ({removed})"
    near = result.nearest_infeasible()
    if near is not None:
        lay = result.scores.layouts.row(near)
        why = "; ".join(f"{v['constraint']}: {v['message']}" for v in result.violations(near))
        text += f"; nearest dp{lay['dp']} tp{lay['tp']} pp{lay['pp']} mb{lay['micro_batch']}: {why}"
    return text


def run_point(p: Point) -> dict:
    """One point: the same search as `plan search` with top_k=1, as a row; never raises for a point."""
    from ..report import layout_json
    from ..search import search

    row = dict.fromkeys(COLUMN_NAMES)
    row.update(_input_columns(p))
    try:
        r = search(p.model, p.cluster, gpus=p.gpus, objective=p.objective, top_k=1, limits=p.limits,
                   space=p.space, time_limit_s=p.time_limit_s)
    except InfeasibleError as exc:
        return {**row, "status": "infeasible", "reason": str(exc)}
    except PlannerError as exc:
        return {**row, "status": "error", "reason": str(exc)}
    except Exception as exc:  # a bug at one point must not lose the rest of the sweep
        return {**row, "status": "error", "reason": f"{type(exc).__name__}: {exc}"}
    if not r.chosen.size:
        return {**row, "status": "infeasible", "reason": infeasible_reason(r)}
    best = layout_json(r.scores, int(r.chosen[0]))
    return {**row, "status": "ok", "reason": None, **layout_columns(best, p.model.training.tokens)}
