"""`planner.list_specs` and `planner.validate`: `plan list` and `plan validate` as functions returning what
the commands print as `--json`; the commands call them (planner/cli/shipped.py)."""
from __future__ import annotations

import os
from typing import Any

from planner.api import arguments as args
from planner.errors import SpecError

LIST_KINDS = {"models": "model", "clusters": "cluster", "gpus": "gpu", "stacks": "stack"}


def list_specs(kind: str) -> list[dict[str, str]]:
    """The shipped specs of `kind` (models | clusters | gpus | stacks), the names a model, cluster, GPU preset
    and stack take: [{name, description}] sorted by name; a file that does not load is listed with its error."""
    from planner.specs.loading import load_cluster, load_gpu, load_model, load_stack
    from planner.specs.shipped import config_dir, shipped_names

    args.typed(kind, str, "KIND")
    if kind not in LIST_KINDS:
        raise SpecError(f"unknown kind '{kind[:40]}'", path="KIND", expected=" | ".join(LIST_KINDS))
    one = LIST_KINDS[kind]
    load = {"model": load_model, "cluster": load_cluster, "gpu": load_gpu, "stack": load_stack}[one]
    rows = []
    for name in shipped_names(one):
        try:
            text = _described(one, load(config_dir() / kind / f"{name}.yaml"))
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


def validate(profile: str | os.PathLike | None = None) -> Any:
    """The published measurements of data/calibration replayed with the shipped constants, as `plan validate`
    does: [{case, metric, measured, predicted, error}] (error: predicted / measured - 1). With `profile` (a
    profile file), its own runs replayed: {profile, gpu, stack, runs} (planner/fidelity/profile.py replay)."""
    args.typed(profile, (str, os.PathLike), "--profile")
    with args.numbers_checked():
        if profile is not None:
            from planner.fidelity.profile import load_profile, replay

            prof = load_profile(os.fspath(profile))
            return {"profile": prof.name, "gpu": prof.gpu, "stack": prof.stack, "runs": replay(prof)}
        from planner.fidelity.calibration import errors, load_cases

        # error: predicted / measured - 1 (a fraction, as before); error_pct the same in percent
        return [{"case": c.id, "metric": k, "measured": m, "predicted": p, "error": e, "error_pct": 100.0 * e}
                for c, k, m, p, e in errors(load_cases())]
