"""A calibration as a profile file, and a model and cluster priced with a profile (`--profile`).

With a profile the GPU preset's efficiencies and memory reserve and the stack's constants on that
GPU are the fitted ones, every other field stays the shipped one, and the stack carries the runs'
leave-one-out errors (StackSpec.own_runs), from which planner/fidelity/error_bands.py takes the band.
Without --profile nothing here runs: calibration never changes a prediction made without it.
"""
from __future__ import annotations

import numbers
import os

from planner.errors import SpecError
from planner.fidelity.own import Calibration, with_constants
from planner.specs import ClusterSpec, ModelSpec
from planner.specs.profile import ProfileSpec
from planner.specs.stack import MeasuredRange, OwnRuns

RANGE_AXES = ("tp", "pp", "cp", "ep", "vpp", "micro_batch", "recompute", "sequence_parallel", "zero")


def measured_range(cal: Calibration) -> MeasuredRange:
    runs = [r.run for r in cal.runs]
    axes = {a: tuple(sorted({r.layout[a] for r in cal.runs if a in r.layout}, key=str)) for a in RANGE_AXES}
    return MeasuredRange(gpus=(min(r.gpus for r in runs), max(r.gpus for r in runs)),
                         params_b=(min(r.params_b for r in runs), max(r.params_b for r in runs)),
                         seq_len=(min(r.model.seq_len for r in runs), max(r.model.seq_len for r in runs)),
                         precisions=tuple(sorted({r.model.training.precision for r in runs})), axes=axes)


def profile_data(cal: Calibration, name: str, version: str = "") -> dict:
    """The profile file's content (kind: profile) of a calibration, validated."""
    from planner.specs.loading import validate
    from planner.specs.yamlio import LoadedYaml

    def const(c):
        return {"value": round(c.value, 6), "prior": round(c.prior, 6), "bounds": list(c.bounds), "fitted": c.fitted}

    runs = []
    for r in cal.runs:
        m = r.run.model
        runs.append({
            "name": r.run.name, "model": m.name, "cluster": r.run.cluster.name, "gpus": r.run.gpus, "params_b": round(r.run.params_b, 3),
            "seq_len": m.seq_len, "global_batch": m.training.global_batch, "precision": m.training.precision,
            "layout": {k: v for k, v in r.layout.items() if k != "power_cap"},
            "measured_step_time_s": r.run.step_time_s, "fitted_step_time_s": round(r.fitted_s, 6),
            "error_pct": round(r.fitted_error_pct, 3),
            "loo_error_pct": None if r.loo_error_pct is None else round(r.loo_error_pct, 3),
            "measured_peak_memory_gib": r.run.peak_memory_gib, "fitted_peak_memory_gib": round(r.fitted_memory_gib, 3),
            "loo_memory_error_pct": _memory_error(r), "infeasible": list(r.infeasible)})
    data = {"kind": "profile", "name": name, "gpu": cal.gpu, "stack": cal.stack, "planner_version": version,
            "hardware": {c.name: const(c) for c in cal.constants if c.group == "hardware"},
            "stack_constants": {c.name: const(c) for c in cal.constants if c.group == "stack"},
            "memory": {c.name: const(c) for c in cal.constants if c.group == "memory"},
            "runs": runs, "measured": measured_range(cal).model_dump(mode="json"), "notes": list(cal.notes)}
    data = _json_types(data)
    # as load_profile will read it back: runs priced with an inline stack make no profile --profile takes (exit 2)
    validate(ProfileSpec, data, LoadedYaml(data, None, {}))
    return data


def _json_types(data):
    """Plain lists, floats and ints (what a YAML or JSON file holds): no tuple, no numpy scalar."""
    if isinstance(data, dict):
        return {k: _json_types(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_json_types(v) for v in data]
    if isinstance(data, (bool, str)) or data is None:
        return data
    if isinstance(data, numbers.Integral):
        return int(data)
    if isinstance(data, numbers.Real):
        return float(data)
    return data


def _memory_error(r) -> float | None:
    if r.loo_memory_gib is None or r.run.peak_memory_gib is None:
        return None
    return round(100 * (r.loo_memory_gib / r.run.peak_memory_gib - 1), 3)


def load_profile(path: str | os.PathLike) -> ProfileSpec:
    """A profile file (YAML), validated, errors with file, line and field path."""
    from planner.specs.loading import load_yaml_file, validate

    loaded = load_yaml_file(path)
    if not isinstance(loaded.data, dict) or loaded.data.get("kind") != "profile":
        raise SpecError("not a profile file", file=loaded.file, line=1, path="kind",
                        expected="a file written by plan calibrate -o (kind: profile)")
    return validate(ProfileSpec, loaded.data, loaded)


def apply_profile(model: ModelSpec, cluster: ClusterSpec, profile: ProfileSpec,
                  flag: str = "--profile") -> tuple[ModelSpec, ClusterSpec]:
    """`model` and `cluster` priced with the profile's constants (its stack's profile in place of the
    model's), their bands from its runs. A cluster of another GPU is refused: a profile is for the
    GPU it was measured on."""
    from planner.search import with_stack

    if len(cluster.pool_names) > 1:
        raise SpecError(f"{cluster.name} has {len(cluster.pool_names)} pools; a profile prices one GPU type", path=flag,
                        expected="a cluster of one pool (e.g. one of its pools as its own cluster spec)")
    names = {cluster.gpu.name}
    if names != {profile.gpu}:
        raise SpecError(f"profile {profile.name} was measured on {profile.gpu}; {cluster.name} has "
                        f"{', '.join(sorted(names))}", path=flag,
                        expected=f"a cluster of {profile.gpu} GPUs, or a profile calibrated on this cluster's GPUs")
    model = with_stack(model, profile.stack)
    shipped = {name: g.error_cases for name, g in model.training.stack.gpus.items() if g.error_cases}
    model, cluster = with_constants(model, cluster, {k: c.value for k, c in profile.hardware.items()},
                                    {k: c.value for k, c in profile.stack_constants.items()},
                                    profile.memory["memory_reserve_gib"].value if "memory_reserve_gib" in profile.memory else None)
    own = OwnRuns(profile=profile.name, gpu=profile.gpu,
                  errors=tuple((r.gpus, r.params_b, abs(r.loo_error_pct)) for r in profile.runs if r.loo_error_pct is not None),
                  memory_errors_pct=tuple(abs(r.loo_memory_error_pct) for r in profile.runs if r.loo_memory_error_pct is not None),
                  measured=profile.measured, shipped_error_cases=shipped)
    stack = model.training.stack.model_copy(update={"own_runs": own})
    return model.model_copy(update={"training": model.training.model_copy(update={"stack": stack})}), cluster


def replay(profile: ProfileSpec) -> list[dict]:
    """Each run of the profile predicted now with its constants (None where its model is no shipped
    name: an inline or path model is not kept in the profile), beside its measured and fitted times."""
    from planner.estimate import estimate_layout
    from planner.search import with_global_batch, with_run
    from planner.specs.loading import load_cluster, load_model
    from planner.specs.shipped import shipped_names

    models, clusters, out = set(shipped_names("model")), set(shipped_names("cluster")), []
    for r in profile.runs:
        now = None
        if r.model in models and r.cluster in clusters:
            cluster = load_cluster(r.cluster)
            m = with_global_batch(load_model(r.model), r.global_batch)
            m = with_run(m, seq_len=r.seq_len, precision=r.precision, flags={"seq_len": "seq_len", "training.precision": "precision"})
            m, c = apply_profile(m, cluster, profile)
            given = {k: v for k, v in r.layout.items() if k not in ("num_microbatches", "stage_layers", "dp", "offload_layers")}
            now = estimate_layout(m, c, gpus=r.gpus, **given).step_time_s
        out.append({"name": r.name, "measured_s": r.measured_step_time_s, "fitted_s": r.fitted_step_time_s,
                    "predicted_now_s": now, "error_pct": r.error_pct, "loo_error_pct": r.loo_error_pct})
    return out
