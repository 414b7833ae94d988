"""Where a search tries host-memory offload (the `offload` axis, planner/costs/offload.py).

Offload only adds time to a layout (copies over the host link, Adam on the CPU instead of the GPU);
its gain is the memory it frees. A search scores its space with offload none and, when no layout of
it is feasible and the GPU memory is among what rules them out, on a cluster whose nodes state their
host memory and link, adds the offloading variants of the rows that
- break the GPU memory constraint and no other one, and
- could fit with what offload takes off the GPU (the optimizer states, all but a double buffer of
  the activations).
Only those variants are scored. Where layouts without offload fit, a search keeps to them (as it
keeps to 1f1b/interleaved schedules) unless --offload or the model's training.offload names one:
offload's costs are priced from datasheets and the frameworks' mechanisms, not calibrated against
measured steps as the rest of the step time is. (Letting every memory-bound row that could beat the
fastest feasible one try it made offload the best of 16 of benchmarks/snapshot.py's 24 searches with a
best, 15 of them activation offload, 3.7-16.8 % faster as priced: a claim no measurement backs yet.)
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from planner.constraints import evaluate
from planner.costs.offload import ACTIVATIONS, BOTH, OPTIMIZER
from planner.errors import SpecError
from planner.layout.arrays import scatter
from planner.layout.space import RECOMPUTE_SELECTIVE

__all__ = ["check_offload", "offload_space", "with_offload"]


def check_offload(cluster, value: str | None, path: str = "--offload") -> None:
    """An offload asked for on a cluster whose nodes do not state what it is priced with is bad input."""
    if value in (None, "none") or cluster.node.offload_ready:
        return
    raise SpecError(f"offload {value} needs the node's host memory, host link and host memory bandwidth, and "
                    f"cluster {cluster.name} does not state them", path=path,
                    expected="--offload none, or a cluster with node.host_memory_gib, node.host_link_gbps and "
                             "node.host_memory_gbps")


def offload_space(model, cluster, space, limits):
    """The search's space limits with the model's training.offload fixing the axis where neither
    --offload (`space`) nor a constraint (`limits.fixed`) does; an offload on a cluster that does not
    price it is bad input."""
    if model.training.offload is not None and space.offload is None and "offload" not in limits.fixed:
        space = replace(space, offload=model.training.offload)
    check_offload(cluster, space.offload or limits.fixed.get("offload"),
                  "--offload" if model.training.offload is None else "training.offload")
    return space


def offload_rows(cluster, scores, masks, limits) -> tuple[np.ndarray, np.ndarray]:
    """(rows, offload values) worth scoring with offload when no row of `scores` (all offload none)
    is feasible under `masks` (its constraints): each row that only the GPU memory keeps out, once per
    offload value that could make it fit."""
    memory = next(m for m in masks if m.name == "memory")
    if memory.ok.all():
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    others = np.ones(len(scores), dtype=bool)
    for m in masks:
        if m.name != "memory":
            others &= m.ok
    if (others & memory.ok).any():  # a layout fits without offload
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    mem = scores.memory_gib
    usable = cluster.gpu.memory_gib * (1.0 - limits.memory_headroom)
    rows = np.flatnonzero(others & ~memory.ok & (mem.total - mem.optimizer - mem.activations <= usable))
    # Activation offload only where a framework runs it: Megatron Core's cpu_offloading refuses pp > 1 and any
    # recompute granularity (transformer_config.py), DeepSpeed's cpu_checkpointing needs full recomputation:
    # pp 1 without selective recomputation (a --framework search applies its own restrictions after this).
    lay = scores.layouts
    runs = (lay.pp[rows] == 1) & (lay.recompute[rows] != RECOMPUTE_SELECTIVE)
    fits = {OPTIMIZER: mem.total[rows] - mem.optimizer[rows] <= usable,
            ACTIVATIONS: (mem.total[rows] - mem.activations[rows] <= usable) & runs,
            BOTH: runs}
    pairs = [(rows[ok], np.full(int(ok.sum()), value)) for value, ok in fits.items()]
    return np.concatenate([r for r, _ in pairs]), np.concatenate([v for _, v in pairs])


def with_offload(model, cluster, layouts, scores, limits, space, score_fn, reference=None, framework: str | None = None):
    """(layouts, scores) with the offloading variants of offload_rows appended (the same when none
    is worth it, or when --offload or a constraint fixes the axis); `score_fn(layouts)` scores the
    variants as the search scores its space. Third: the constraints' masks of the rows returned when they
    are the rows given (the search evaluates them once), else None."""
    if not cluster.node.offload_ready or space.offload is not None or "offload" in limits.fixed:
        return layouts, scores, None
    masks = evaluate(model, cluster, scores, limits, reference)
    rows, values = offload_rows(cluster, scores, masks, limits)
    if not rows.size:
        return layouts, scores, masks
    cols = {k: v[rows] for k, v in layouts.columns().items()}
    cols["offload"] = values
    variants = type(layouts)(**cols)
    if framework is not None:
        from planner.export.frameworks import framework_mask

        ok, _ = framework_mask(framework, variants, model)
        if not ok.any():
            return layouts, scores, masks
        variants = variants.take(np.flatnonzero(ok))
    n, k = len(layouts), len(variants)
    merged = type(layouts).concat([layouts, variants])
    extra = score_fn(variants)
    both = scatter(n + k, [(np.arange(n), scores), (np.arange(n, n + k), extra)])
    return merged, type(scores)(**{**both.__dict__, "layouts": merged}), None

