"""The stable row columns, and one row from a point's search: ok, infeasible (with the reason) or error."""
from __future__ import annotations

from dataclasses import asdict
from functools import lru_cache

from planner.layout.axes import AXES, layout_cell
from planner.errors import InfeasibleError, PlannerError
from planner.results import ScoredLayout, non_finite_error
from planner.sweep.points import Point

# --- rows --------------------------------------------------------------------------------------

# (name, type, meaning); the order is the CSV header and the JSONL key order. Keep it stable.
# The layout columns are the axes of planner/layout/axes.py that have one (`csv`).
INPUT_COLUMNS: tuple[tuple[str, type, str], ...] = (
    ("point_id", str, "sha256 of the point's canonical inputs (16 hex digits): the resume key"),
    ("model", str, "model name (generated: BASE-scaled-SIZE)"),
    ("params", int, "parameters, embeddings included [count]"),
    ("layers", int, "transformer layers"),
    ("hidden", int, "hidden size d_model"),
    ("heads", int, "attention heads"),
    ("kv_heads", int, "key/value heads (GQA)"),
    ("cluster", str, "cluster name as given"),
    ("gpu", str, "GPU type"),
    ("nodes", int, "nodes the point's job spans: ceil(gpus / GPUs per node) (not the cluster's node count)"),
    ("gpus", int, "GPUs of the point"),
    ("global_batch", int, "sequences per step"),
    ("seq_len", int, "tokens per sequence"),
    ("tokens", float, "token budget of the run (empty: none given)"),
    ("objective", str, "time | energy | cost | carbon"),
    ("status", str, "ok | infeasible | error"),
    ("reason", str, "why no layout is feasible (empty when ok)"),
)


def layout_column_specs(axes: tuple = AXES) -> tuple[tuple[str, type, str], ...]:
    return tuple((a.name, a.kind, a.doc) for a in axes if a.csv)


LAYOUT_COLUMNS = layout_column_specs()
RESULT_COLUMNS: tuple[tuple[str, type, str], ...] = (
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
    ("cost_usd_per_m_tokens", float, "GPU-hours and electricity per million tokens at the cluster's prices [$]"),
    ("co2e_kg_per_m_tokens", float, "carbon per million tokens at the grid's intensity [kgCO2e]"),
)
# Last, so the columns before keep their places: who computed the row. A resume refuses rows of another
# version (planner/sweep/run.py): their numbers would be kept as done beside this version's.
PROVENANCE_COLUMNS: tuple[tuple[str, type, str], ...] = (
    ("planner_version", str, "version of the planner that computed the row (llm-layout-planner)"),
)
COLUMNS: tuple[tuple[str, type, str], ...] = INPUT_COLUMNS + LAYOUT_COLUMNS + RESULT_COLUMNS + PROVENANCE_COLUMNS
COLUMN_NAMES = tuple(name for name, _, _ in COLUMNS)
STATUSES = ("ok", "infeasible", "error")
# Columns a row may leave empty; every other one is filled in an ok row, and every input column
# (with the reason) in a row without a layout. A row read back that breaks this was cut short.
OPTIONAL_COLUMNS = frozenset({"tokens", "reason", "goodput_tokens_per_s", "time_to_train_days", "energy_to_train_mwh"})


def is_complete(row: dict) -> bool:
    """Whether a typed row has every column its status needs (see OPTIONAL_COLUMNS)."""
    if row["status"] not in STATUSES:
        return False
    if row["status"] != "ok":
        return bool(row["reason"]) and all(row[n] is not None for n, _, _ in INPUT_COLUMNS + PROVENANCE_COLUMNS
                                           if n not in OPTIONAL_COLUMNS)
    return all(row[n] is not None for n in COLUMN_NAMES if n not in OPTIONAL_COLUMNS)


@lru_cache(maxsize=1)
def planner_version() -> str:
    """The version written into every row: the installed distribution's (planner.version)."""
    from planner import version

    return version()


def _input_columns(p: Point) -> dict:
    m = p.model
    return {"point_id": p.key, "model": m.name, "params": m.total_params(), "layers": m.layers, "hidden": m.hidden,
            "heads": m.heads, "kv_heads": m.num_kv_heads, "cluster": p.cluster_label, "gpu": p.cluster.gpu.name,
            "nodes": p.job_nodes, "gpus": p.gpus, "global_batch": m.training.global_batch, "seq_len": m.seq_len,
            "tokens": m.training.tokens, "objective": p.objective, "planner_version": planner_version()}


def layout_columns(best: ScoredLayout) -> dict:
    """The layout and result columns of a row from the chosen layout."""
    row = {name: best.layout[name] for name, _, _ in LAYOUT_COLUMNS}
    row.update(step_time_s=best.step_time_s, tokens_per_s=best.tokens_per_s, mfu=best.mfu,
               model_tflops_per_gpu=best.model_tflops_per_gpu, energy_j_per_token=best.energy_j_per_token,
               avg_power_kw=best.avg_power_kw, goodput_tokens_per_s=best.goodput_tokens_per_s,
               memory_gib=round(best.memory_gib.total, 4), cost_usd_per_m_tokens=best.cost_usd_per_m_tokens,
               co2e_kg_per_m_tokens=best.co2e_g_per_step / 1e3 / (best.tokens_per_s * best.step_time_s) * 1e6)
    if best.training is not None:  # the token budget: planner/costs/reliability.py, training_totals
        row["time_to_train_days"] = best.training.train_days
        row["energy_to_train_mwh"] = best.training.train_mwh
    return row


def infeasible_reason(result) -> str:
    """What removed the candidates, and why the nearest one fails."""
    removed = ", ".join(f"{k} removed {v}" for k, v in result.rejected.items() if v)
    text = f"no feasible layout of {len(result.scores)} candidates ({removed})"
    near = result.nearest
    if near is not None:
        why = "; ".join(f"{v.constraint}: {v.message}" for v in near.violations)
        text += f"; nearest {layout_cell(near.layout)}: {why}"
    return text


def run_point(p: Point) -> dict:
    """One point: the same search as `plan search` with top_k=1, as a row; never raises for a point."""
    from planner import search as searching  # looked up when called, so a replaced `planner.search.search` is run

    row = dict.fromkeys(COLUMN_NAMES)
    row.update(_input_columns(p))
    framework = {} if p.framework is None else {"framework": p.framework}
    try:
        r = searching.search(p.model, p.cluster, gpus=p.gpus, objective=p.objective, top_k=1, limits=p.limits,
                             space=p.space, time_limit_s=p.time_limit_s, critical_batch_tokens=p.critical_batch_tokens,
                             **framework)
    except InfeasibleError as exc:
        return {**row, "status": "infeasible", "reason": str(exc)}
    except PlannerError as exc:
        return {**row, "status": "error", "reason": str(exc)}
    except Exception as exc:  # a bug at one point must not lose the rest of the sweep
        return {**row, "status": "error", "reason": f"{type(exc).__name__}: {exc}"}
    if not r.chosen.size:
        return {**row, "status": "infeasible", "reason": infeasible_reason(r)}
    found = layout_columns(r.best)
    problem = non_finite_error({**found, **asdict(r.best.reliability)})  # never Infinity in a row
    if problem is not None:
        return {**row, "status": "error", "reason": str(problem)}
    return {**row, "status": "ok", "reason": None, **found}
