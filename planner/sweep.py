"""`plan sweep`: the best layout over a grid of models, clusters, GPU counts and objectives.

Pure logic, no printing. A sweep file (or the equivalent flags) is validated into a `SweepSpec`,
expanded into `Point`s, and each point runs the same `planner.search.search` as `plan search`
(top_k=1). Every point becomes one flat row with the stable columns of `COLUMNS`; an infeasible
point is a row with its reason. Rows are appended to the output as they finish, so a rerun skips
the points already there (keyed by a hash of the point's inputs) and Ctrl-C keeps them.
"""
from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import signal
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import closing
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterator, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .constraints import Limits
from .errors import InfeasibleError, PlannerError, SpecError
from .space import SpaceLimits
from .specs import ClusterSpec, ModelSpec

KEY_VERSION = 1  # part of every point's key: bump when a row's meaning changes, so old rows are recomputed
DEFAULT_CLUSTER = "dgx-a100-1024"  # the same default as `plan search`
SCALE_TOLERANCE = 0.03  # a generated model's parameter count is within 3 % of its target
Objective = Literal["time", "energy", "cost", "carbon"]
_STRICT = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class ScaleSpec(BaseModel):
    """A generated family: `base` scaled to each parameter count (rule: `scale_model`)."""

    model_config = _STRICT
    base: str = Field(min_length=1, description="model spec to scale: a path or a shipped name")
    params: str | list[float] = Field(description="'LO:HI:N' (N log-spaced counts) or a list of parameter counts")


class ConstraintsSpec(BaseModel):
    """The constraints and fixed dimensions of `plan search`, under their `Limits` names."""

    model_config = _STRICT
    memory_headroom: float = Field(default=0.05, ge=0, lt=1, description="fraction of GPU memory kept free")
    allow_cross_node_tp: bool = False
    max_step_time_s: float | None = Field(default=None, gt=0)
    min_mfu: float | None = Field(default=None, gt=0, le=1)
    max_bubble: float | None = Field(default=None, ge=0, le=1)
    max_power_kw: float | None = Field(default=None, gt=0)
    max_energy_per_token_j: float | None = Field(default=None, gt=0)
    max_gpu_power_w: float | None = Field(default=None, gt=0)
    max_global_batch_tokens: float | None = Field(default=None, gt=0)
    min_scaling_efficiency: float | None = Field(default=None, gt=0, le=1)
    critical_batch_tokens: float | None = Field(default=None, gt=0)
    tp: int | None = Field(default=None, gt=0)
    pp: int | None = Field(default=None, gt=0)
    dp: int | None = Field(default=None, gt=0)
    micro_batch: int | None = Field(default=None, gt=0)
    vpp: int | None = Field(default=None, gt=0)
    recompute: Literal["none", "selective", "full"] | None = None
    sequence_parallel: bool | None = None
    zero: Literal[0, 1, 2, 3] | None = None
    max_micro_batch: int = Field(default=32, gt=0, le=65536)
    time_limit_s: float = Field(default=10.0, gt=0, le=3600, description="CP-SAT deterministic time limit [s]")


class SweepSpec(BaseModel):
    """A sweep file (docs/sweep.md); the flags of `plan sweep` override its keys."""

    model_config = _STRICT
    kind: Literal["sweep"] | None = Field(default=None, description="`kind: sweep` marks the file for `plan check`")
    name: str | None = Field(default=None, max_length=128)
    models: list[str] = Field(default=[], description="model specs: paths or shipped names")
    scale_model: ScaleSpec | None = None
    cluster: str | list[str] = DEFAULT_CLUSTER
    gpus: list[int] | str | None = Field(default=None, description="GPU counts, or 'LO:HI' for the powers of two")
    global_batch: int | None = Field(default=None, gt=0, le=100_000_000, description="sequences per step")
    batch_tokens: float | None = Field(default=None, gt=0, le=1e12, description="tokens per step (rule: batch_from_tokens)")
    tokens: float | None = Field(default=None, gt=0, le=1e16, description="token budget: time and energy to train")
    objective: Objective | list[Objective] = "time"
    constraints: ConstraintsSpec = ConstraintsSpec()

    @model_validator(mode="after")
    def _one_batch_rule(self) -> "SweepSpec":
        if self.global_batch is not None and self.batch_tokens is not None:
            raise ValueError("global_batch and batch_tokens exclude each other: give one")
        return self


# --- the scaling rule --------------------------------------------------------------------------

def aspect_trend(params: float) -> float:
    """d_model / n_layers of a GPT of `params` parameters: 64 up to 1e9, rising linearly in
    log10(params) to 128 at 1e10 and staying there. A fit to GPT-3 (Brown et al. 2020, Table 2.1:
    ~64 from 125M to 760M, 85 at 1.3B, 128 from 6.7B to 175B); Kaplan et al. 2020 (Sec. 3.1) found
    the loss nearly insensitive to this ratio over a wide range, so a smooth trend loses little."""
    return 64.0 + 64.0 * float(np.clip(np.log10(params / 1e9), 0.0, 1.0))


def _shaped(base: ModelSpec, name: str, hidden: int, layers: int) -> ModelSpec:
    head_dim = base.hidden // base.heads
    heads = hidden // head_dim
    update = dict(name=name, hidden=hidden, layers=layers, heads=heads)
    if base.kv_heads is not None:
        update["kv_heads"] = heads // (base.heads // base.num_kv_heads)
    if base.ffn_hidden is not None:
        update["ffn_hidden"] = max(128, round(base.ffn_hidden / base.hidden * hidden / 128) * 128)
    return ModelSpec.model_validate({**base.model_dump(), **update})


def scale_model(base: ModelSpec, params: float) -> ModelSpec:
    """`base` resized to about `params` parameters (ModelSpec.total_params, embeddings included).

    Rule: keep the base's head size, GQA group (heads / kv_heads), FFN / hidden ratio (FFN rounded
    to a multiple of 128), vocabulary, context and training settings; hidden is a multiple of
    head_dim * lcm(8, group) (heads a multiple of 8 so tp up to 8 divides them); the aspect ratio
    hidden / layers follows the base's own, moved along `aspect_trend`. Among the hidden sizes near
    (12 * L * h^2 = params with L = h / aspect), each takes the layer count closest to the target;
    the one closest to the aspect ratio among those within 2 % of the target wins."""
    head_dim, group = base.hidden // base.heads, base.heads // base.num_kv_heads
    quantum = head_dim * math.lcm(8, group)
    aspect = base.hidden / base.layers * aspect_trend(params) / aspect_trend(base.total_params())
    ideal = (params * aspect / 12.0) ** (1.0 / 3.0)
    name = f"{base.name}-scaled-{params_label(params)}"
    best = None
    for hidden in range(quantum, max(2 * quantum, int(2 * ideal)) + 1, quantum):
        one = _shaped(base, name, hidden, 1).total_params()
        per_layer = _shaped(base, name, hidden, 2).total_params() - one
        layers = max(1, round((params - (one - per_layer)) / per_layer))
        error = abs((one + (layers - 1) * per_layer) / params - 1.0)
        rank = (error > 0.02, abs(math.log(hidden / layers / aspect)) if error <= 0.02 else error)
        if best is None or rank < best[0]:
            best = (rank, hidden, layers)
    model = _shaped(base, name, best[1], best[2])
    if abs(model.total_params() / params - 1.0) > SCALE_TOLERANCE:
        raise SpecError(f"cannot scale {base.name} to {params_label(params)} parameters: the nearest shape has "
                        f"{params_label(model.total_params())}", path="scale_model.params",
                        expected=f"counts above the embeddings of {base.name} (about "
                        f"{params_label(base.embedding_params() + base.output_params())})")
    return model


def params_label(params: float) -> str:
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6)):
        if params >= scale:
            return f"{params / scale:.3g}{unit}"
    return f"{params:.3g}"


def parse_params(text: str, where: str = "--params") -> list[float]:
    """'LO:HI:N' -> N log-spaced counts from LO to HI; 'A,B,C' -> those counts."""
    expected = "LO:HI:N (N log-spaced counts, e.g. 1e9:1e12:8) or a comma-separated list"
    try:
        if ":" in text:
            lo, hi, n = text.split(":")
            lo, hi, steps = float(lo), float(hi), int(n)
            if not (0 < lo <= hi < 1e16 and 1 <= steps <= 1000):
                raise ValueError
            return [float(v) for v in np.geomspace(lo, hi, steps)]
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise SpecError(f"cannot read '{text}'", path=where, expected=expected) from None
    if not values or not all(0 < v < 1e16 for v in values):
        raise SpecError(f"cannot read '{text}'", path=where, expected=expected)
    return values


def parse_gpus(values: list[str] | str, where: str = "--gpus") -> list[int]:
    """'64,256,1024' (and repeats) -> those counts; 'LO:HI' -> the powers of two in [LO, HI]."""
    out: list[int] = []
    for text in [values] if isinstance(values, str) else values:
        for part in (p.strip() for p in str(text).split(",") if p.strip()):
            lo, sep, hi = part.partition(":")
            if not (lo.isdigit() and (not sep or hi.isdigit())) or int(lo) <= 0 or (sep and int(hi) < int(lo)):
                raise SpecError(f"cannot read '{part}'", path=where,
                                expected="positive GPU counts like 64,256,1024 or LO:HI (powers of two), e.g. 8:16384")
            out += [1 << k for k in range(0, 40) if int(lo) <= 1 << k <= int(hi)] if sep else [int(lo)]
    if not out:
        raise SpecError("no GPU count", path=where, expected="e.g. 64,256,1024 or 8:16384")
    return list(dict.fromkeys(out))


def batch_from_tokens(batch_tokens: float, seq_len: int) -> int:
    """Sequences per step for about `batch_tokens` tokens: R = T / seq_len rounded to the nearest
    multiple of the granule 2^floor(log2(R / 8)) (1 when R < 8). The granule lies in (R/16, R/8], so
    dp can be any power of two up to it and the batch is within R/16 (6.25 %) of the target."""
    raw = batch_tokens / seq_len
    granule = 1 << max(0, math.floor(math.log2(raw / 8))) if raw >= 8 else 1
    return max(granule, round(raw / granule) * granule)


# --- points ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Point:
    model: ModelSpec  # with the point's global batch and token budget
    cluster: ClusterSpec  # enlarged to hold `gpus` when the named cluster is smaller
    cluster_label: str  # the cluster as named in the sweep
    gpus: int
    objective: str
    limits: Limits
    space: SpaceLimits
    time_limit_s: float

    def inputs(self) -> dict:
        return {"version": KEY_VERSION, "model": self.model.model_dump(mode="json"),
                "cluster": self.cluster.model_dump(mode="json"), "cluster_label": self.cluster_label,
                "gpus": self.gpus, "objective": self.objective, "limits": asdict(self.limits),
                "space": asdict(self.space), "time_limit_s": self.time_limit_s}

    @property
    def key(self) -> str:
        """sha256 of the canonical JSON of every input of the point (first 16 hex digits)."""
        text = json.dumps(self.inputs(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def enlarged(cluster: ClusterSpec, gpus: int) -> ClusterSpec:
    """The cluster with nodes = ceil(gpus / gpus per node) when it has fewer GPUs than `gpus`."""
    if gpus <= cluster.total_gpus:
        return cluster
    return cluster.model_copy(update={"nodes": math.ceil(gpus / cluster.node.gpus)})


def limits_of(c: ConstraintsSpec) -> tuple[Limits, SpaceLimits]:
    fixed = {k: getattr(c, k) for k in ("tp", "pp", "dp", "micro_batch", "vpp", "recompute", "sequence_parallel", "zero")
             if getattr(c, k) is not None}
    limits = Limits(memory_headroom=c.memory_headroom, allow_cross_node_tp=c.allow_cross_node_tp,
                    max_step_time_s=c.max_step_time_s, min_mfu=c.min_mfu, max_bubble=c.max_bubble,
                    max_power_kw=c.max_power_kw, max_energy_per_token_j=c.max_energy_per_token_j,
                    max_gpu_power_w=c.max_gpu_power_w, max_global_batch_tokens=c.max_global_batch_tokens,
                    min_scaling_efficiency=c.min_scaling_efficiency, critical_batch_tokens=c.critical_batch_tokens,
                    fixed=fixed)
    return limits, SpaceLimits(max_micro_batch=c.max_micro_batch)


def _load(arg: str, kind: str, base_dir: Path | None):
    """A spec by path (relative to the sweep file's folder when it is there, else to the working
    directory) or shipped name."""
    from .loading import cluster_from_loaded, load_yaml_file, model_from_loaded, resolve

    local = base_dir is not None and not Path(arg).is_absolute() and (base_dir / arg).is_file()
    path = base_dir / arg if local else resolve(arg, kind)
    return (model_from_loaded if kind == "model" else cluster_from_loaded)(load_yaml_file(path))


def sweep_models(spec: SweepSpec, base_dir: Path | None = None) -> list[ModelSpec]:
    models = [_load(m, "model", base_dir) for m in spec.models]
    if spec.scale_model is not None:
        base = _load(spec.scale_model.base, "model", base_dir)
        counts = spec.scale_model.params
        counts = parse_params(counts, "scale_model.params") if isinstance(counts, str) else counts
        models += [scale_model(base, p) for p in counts]
    if not models:
        raise SpecError("nothing to sweep: no model", path="models",
                        expected="a SWEEP.yaml with models: or scale_model:, or --models / --scale-model with --params")
    return models


def _point_model(model: ModelSpec, spec: SweepSpec) -> ModelSpec:
    training = {}
    if spec.global_batch is not None:
        training["global_batch"] = spec.global_batch
    elif spec.batch_tokens is not None:
        training["global_batch"] = batch_from_tokens(spec.batch_tokens, model.seq_len)
    if spec.tokens is not None:
        training["tokens"] = spec.tokens
    if not training:
        return model
    return model.model_copy(update={"training": model.training.model_copy(update=training)})


def expand(spec: SweepSpec, base_dir: Path | None = None) -> list[Point]:
    """Every point of the sweep, in a stable order: model, then cluster, GPU count, objective."""
    models = [_point_model(m, spec) for m in sweep_models(spec, base_dir)]
    names = [spec.cluster] if isinstance(spec.cluster, str) else spec.cluster
    clusters = [_load(c, "cluster", base_dir) for c in names]
    objectives = [spec.objective] if isinstance(spec.objective, str) else list(dict.fromkeys(spec.objective))
    gpus = None if spec.gpus is None else parse_gpus(spec.gpus, "gpus") if isinstance(spec.gpus, str) else spec.gpus
    limits, space = limits_of(spec.constraints)
    return [Point(m, enlarged(c, g), c.name, g, o, limits, space, spec.constraints.time_limit_s)
            for m in models for c in clusters for g in (gpus or [c.total_gpus]) for o in objectives]


def load_sweep(path: str | os.PathLike, overrides: dict | None = None) -> SweepSpec:
    """The sweep file, validated with file locations, then with the flags' `overrides` on top."""
    from .loading import validate
    from .yamlio import load_yaml_file

    loaded = load_yaml_file(path)
    spec = validate(SweepSpec, loaded.data, loaded)
    return with_overrides(spec, overrides or {})


def with_overrides(spec: SweepSpec, overrides: dict) -> SweepSpec:
    """`spec` with flag values on top; a bad value names its flag (`--global-batch`)."""
    data = spec.model_dump(exclude_unset=True)
    constraints = {**data.pop("constraints", {}), **overrides.get("constraints", {})}
    scale = {**data.pop("scale_model", {}), **overrides.get("scale_model", {})}
    data.update({k: v for k, v in overrides.items() if k not in ("constraints", "scale_model")})
    if overrides.get("global_batch") is not None:
        data.pop("batch_tokens", None)
    if overrides.get("batch_tokens") is not None:
        data.pop("global_batch", None)
    if scale:
        if "base" not in scale or "params" not in scale:
            raise SpecError("a generated family needs a base model and parameter counts", path="--scale-model/--params",
                            expected="--scale-model BASE --params LO:HI:N")
        data["scale_model"] = scale
    try:
        return SweepSpec.model_validate({**data, "constraints": constraints})
    except ValidationError as exc:
        e = exc.errors()[0]
        key = next((str(p) for p in e["loc"] if p != "constraints"), "sweep")
        raise SpecError(e["msg"].removeprefix("Value error, "), path=flag_of(key)) from None


_FLAGS = {"max_step_time_s": "--max-step-time", "max_energy_per_token_j": "--max-energy-per-token",
          "time_limit_s": "--time-limit", "scale_model": "--scale-model", "objective": "--objective"}


def flag_of(key: str) -> str:
    return _FLAGS.get(key, "--" + key.replace("_", "-"))


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
    from .report import layout_json
    from .search import search

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


# --- output files ------------------------------------------------------------------------------

FORMATS = {".csv": "csv", ".jsonl": "jsonl", ".parquet": "parquet"}


def output_format(path: Path) -> str:
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise SpecError(f"unknown output format '{path.suffix or path.name}'", path="--out",
                        expected="a file ending in .csv, .jsonl or .parquet")
    if fmt == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise SpecError("writing parquet needs pyarrow, which is not installed", path="--out",
                            expected="`pip install pyarrow`, or an output ending in .csv or .jsonl") from None
    return fmt


def _typed(name: str, kind: type, value):
    if value is None or value == "":
        return None
    if kind is bool:
        return value if isinstance(value, bool) else str(value).lower() == "true"
    return kind(value)


def _coerce(raw: dict) -> dict | None:
    """A row read back, typed by COLUMNS; None for a malformed (e.g. half-written) row."""
    try:
        row = {name: _typed(name, kind, raw.get(name)) for name, kind, _ in COLUMNS}
    except (TypeError, ValueError):
        return None
    return row if row["point_id"] and row["status"] in STATUSES else None


def read_rows(path: Path) -> list[dict]:
    """The valid rows of an earlier run (none when the file does not exist)."""
    if not path.exists() or path.stat().st_size == 0:
        return []
    fmt = output_format(path)
    if fmt == "parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        names, raws = table.column_names, table.to_pylist()
    elif fmt == "csv":
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            names, raws = reader.fieldnames or [], list(reader)
    else:
        raws = []
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    raws.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # a line cut short by a kill
        names = list(raws[0]) if raws else list(COLUMN_NAMES)
    if tuple(names) != COLUMN_NAMES:
        raise SpecError("was written with other columns than this version of plan sweep", file=str(path),
                        expected="another --out file, or --force to overwrite it")
    return [row for row in map(_coerce, raws) if row is not None]


def _csv_cell(value):
    return "" if value is None else value


def write_rows(path: Path, rows: list[dict]) -> None:
    """Replace `path` with `rows` atomically (a temporary file renamed over it)."""
    fmt = output_format(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows or [dict.fromkeys(COLUMN_NAMES)]).select(list(COLUMN_NAMES)), tmp)
    else:
        with open(tmp, "w", newline="", encoding="utf-8") as f:
            _RowWriter(f, fmt, header=True).write_all(rows)
    os.replace(tmp, path)


class _RowWriter:
    def __init__(self, handle, fmt: str, header: bool) -> None:
        self.handle, self.fmt = handle, fmt
        self.csv = csv.writer(handle) if fmt == "csv" else None
        if header and self.csv is not None:
            self.csv.writerow(COLUMN_NAMES)

    def write(self, row: dict) -> None:
        if self.fmt == "csv":
            self.csv.writerow([_csv_cell(row[k]) for k in COLUMN_NAMES])
        elif self.fmt == "jsonl":
            self.handle.write(json.dumps({k: row[k] for k in COLUMN_NAMES}) + "\n")
        if self.fmt != "parquet":
            self.handle.flush()

    def write_all(self, rows: list[dict]) -> None:
        for row in rows:
            self.write(row)


# --- running -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class SweepRun:
    rows: list[dict]  # one per point, in the points' order (missing ones when interrupted)
    computed: int  # points run now
    skipped: int  # points whose rows were already in the output


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C during a sweep: the rows finished so far are written."""

    def __init__(self, run: SweepRun, total: int) -> None:
        super().__init__(f"{len(run.rows)} of {total} points done")
        self.run, self.total = run, total


def _worker_init() -> None:
    """Ctrl-C is the parent's to handle: a worker leaves the terminal's process group, so the
    SIGINT the terminal sends to that group does not reach it (CP-SAT installs its own SIGINT
    handler during a solve, so ignoring the signal is not enough), and ignores SIGINT anyway."""
    if hasattr(os, "setpgrp"):
        os.setpgrp()
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def compute(points: list[Point], workers: int = 1) -> Iterator[dict]:
    """Rows of `points` as they finish: in order when serial, in completion order in a pool."""
    if workers <= 1 or len(points) <= 1:
        for p in points:
            yield run_point(p)
        return
    pool = ProcessPoolExecutor(max_workers=min(workers, len(points)), initializer=_worker_init)
    try:
        futures = [pool.submit(run_point, p) for p in points]
        for future in as_completed(futures):
            yield future.result()
    finally:  # also on Ctrl-C and when the consumer stops early: drop the queued points
        pool.shutdown(wait=True, cancel_futures=True)


def run_sweep(points: list[Point], *, out: Path | None = None, workers: int = 1, force: bool = False,
              on_row: Callable[[dict], None] | None = None) -> SweepRun:
    """Run the points not already in `out` (all with `force`); append each row to `out` as it
    finishes, and finally rewrite `out` in the points' order (rows of other points kept after)."""
    fmt = output_format(out) if out is not None else None
    try:
        old = read_rows(out) if out is not None else []
    except SpecError:
        if not force:
            raise
        old = []
    have = {row["point_id"]: row for row in old}  # the last row of a key wins
    done = {} if force else {k: r for k, r in have.items() if r["status"] != "error"}
    todo = [p for p in points if p.key not in done]
    keys = [p.key for p in points]
    new: dict[str, dict] = {}

    def finish() -> SweepRun:
        rows = {**done, **new}
        ordered = [rows[k] for k in keys if k in rows]
        if out is not None:
            wanted = set(keys)
            write_rows(out, ordered + [r for k, r in have.items() if k not in wanted])
        return SweepRun(ordered, len(new), len(points) - len(todo))

    if out is not None:
        write_rows(out, list(have.values()))  # normalise: drops a half-written last line before appending
    try:
        with open(out if fmt in ("csv", "jsonl") else os.devnull, "a", newline="", encoding="utf-8") as handle:
            sink = _RowWriter(handle, fmt or "none", header=False)
            with closing(compute(todo, workers)) as rows:
                for row in rows:
                    new[row["point_id"]] = row
                    sink.write(row)
                    if on_row is not None:
                        on_row(row)
    except KeyboardInterrupt:
        raise SweepInterrupted(finish(), len(points)) from None
    except BaseException:  # e.g. a worker killed (out of memory): keep the finished rows, in order
        finish()
        raise
    return finish()
