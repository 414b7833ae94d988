"""Power caps as a decision: each GPU preset lists cap levels with their speed and busy power.

Rule under a cap (DVFS lowers the SM clock): tensor-core throughput scales by `speed`, so every
FLOP-bound term of the compute model (GEMMs, attention) takes 1/speed longer, while memory-bound
kernels (HBM bandwidth), communication and fixed overheads (launches, step overhead) keep their
time; a computing GPU draws `power` x busy_w, a communicating one min(comm_w, that), an idle one
idle_w. The energy per step is then U-shaped in the cap: lower caps save GPU power, but the step
grows and node overhead, idle and communication power are paid for longer (Zeus, You et al.
NSDI'23; Perseus, Chung et al. SOSP'24, report such curves measured on A100/H100).

The uncapped GPU (cap = TDP, speed 1, power 1) is always level 0, so a preset without a table, or
a search that does not try caps, gives exactly the uncapped numbers.
"""
from __future__ import annotations

from dataclasses import fields, is_dataclass

import numpy as np

from ..specs import ClusterSpec, GpuPower, GpuSpec, PowerCap


def uncapped(gpu: GpuSpec) -> PowerCap:
    return PowerCap(cap_w=gpu.tdp_w, speed=1.0, power=1.0)


def cap_levels(gpu: GpuSpec) -> list[PowerCap]:
    """The uncapped level first, then the preset's lower caps, highest first."""
    lower = [c for c in sorted(gpu.power_caps, key=lambda c: -c.cap_w) if c.cap_w < gpu.tdp_w]
    return [uncapped(gpu), *lower]


def capped_gpu(gpu: GpuSpec, cap: PowerCap) -> GpuSpec:
    """The GPU as the cost models see it under `cap` (rule in the module docstring)."""
    if cap == uncapped(gpu):
        return gpu
    peak = gpu.peak_tflops
    scaled = {k: (None if v is None else v * cap.speed) for k, v in peak.model_dump().items()}
    busy = gpu.busy_w * cap.power
    power = GpuPower(busy_w=busy, comm_w=min(gpu.comm_w, busy),
                     full_power_compute_fraction=gpu.power.full_power_compute_fraction)
    return gpu.model_copy(update={"peak_tflops": peak.model_copy(update=scaled), "power": power, "power_caps": ()})


def capped_cluster(cluster: ClusterSpec, cap: PowerCap) -> ClusterSpec:
    gpu = capped_gpu(cluster.gpu, cap)
    return cluster if gpu is cluster.gpu else cluster.model_copy(update={"gpu": gpu})


def concat(parts: list):
    """Concatenate aligned dataclasses of arrays (Layouts, breakdowns, Energy) row-wise."""
    first = parts[0]
    assert is_dataclass(first)
    return type(first)(**{f.name: np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(first)})


def score_with_caps(model, cluster: ClusterSpec, layouts, caps: list[PowerCap] | None = None, **score_kwargs):
    """Scores of every (layout, cap) pair: the rows of cap level j are rows j*n .. (j+1)*n - 1, and
    `extras` carries `power_cap_w` and `power_cap_speed` per row."""
    from ..score import Scores, score

    caps = cap_levels(cluster.gpu) if caps is None else caps
    parts = [score(model, cluster, layouts, cap=c, **score_kwargs) for c in caps]
    n = len(layouts)
    extras = {k: np.concatenate([p.extras[k] for p in parts]) for k in parts[0].extras}
    extras["power_cap_w"] = np.repeat([float(c.cap_w) for c in caps], n)
    extras["power_cap_speed"] = np.repeat([float(c.speed) for c in caps], n)
    arrays = {f.name: (concat([getattr(p, f.name) for p in parts]) if is_dataclass(getattr(parts[0], f.name))
                       else np.concatenate([getattr(p, f.name) for p in parts]))
              for f in fields(Scores) if f.name != "extras"}
    return Scores(**arrays, extras=extras)
