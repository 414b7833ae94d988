"""Energy per step from a power model per GPU state, node overhead and PUE.

A GPU draws `busy_w` while computing, `comm_w` while it only communicates and `idle_w` while it
waits (pipeline bubble, fixed overheads). Defaults: busy = TDP (dense training holds GPUs at their
power limit; Patel et al. 2024, "Characterizing Power Management Opportunities for LLMs in the
Cloud", ASPLOS'24, Sec. 3), idle from the datasheet or measurement. Non-GPU node power (CPUs,
NICs, fans, switches) is a flat `node_overhead_w` per node (DGX A100 6.5 kW max system power minus
8 x 400 W GPUs = 3.3 kW; DGX H100 10.2 kW minus 8 x 700 W = 4.6 kW); facility overhead is the PUE.
These are datasheet maxima: measured power should replace them.

Busy power may follow the achieved compute rate (opt-in, `power.full_power_compute_fraction` = u_ref):
P_busy(u) = P_comm + (P_busy - P_comm) min(1, u / u_ref), with u the achieved fraction of peak
FLOP/s while computing. Without u_ref the busy power is `busy_w` at any rate.

energy per step [J] = PUE (gpus (t_busy P_busy + t_comm P_comm + t_wait P_idle) + nodes P_node t_step)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.specs import ClusterSpec
from planner.units import G_PER_T, KWH_PER_MWH, W_PER_KW, WH_PER_MWH
from planner.costs.pipeline import TimeBreakdown


@dataclass(frozen=True)
class Energy:
    energy_j_per_step: np.ndarray
    avg_power_kw: np.ndarray
    gpu_power_w: np.ndarray  # the highest state power a GPU draws during the step


def busy_power_w(cluster: ClusterSpec, compute_fraction: np.ndarray | None) -> np.ndarray | float:
    """Power of a computing GPU [W] at an achieved fraction of peak FLOP/s (see module docstring)."""
    gpu = cluster.gpu
    ref = gpu.power.full_power_compute_fraction
    if ref is None or compute_fraction is None:
        return gpu.busy_w
    return gpu.comm_w + (gpu.busy_w - gpu.comm_w) * np.minimum(1.0, np.asarray(compute_fraction) / ref)


def step_energy(cluster: ClusterSpec, times: TimeBreakdown, gpus: np.ndarray,
                compute_fraction: np.ndarray | None = None) -> Energy:
    gpu = cluster.gpu
    busy = times.compute + times.recompute + times.optimizer
    communicating = times.tp_comm + times.pp_comm + times.dp_comm
    waiting = times.bubble + times.overhead
    p_busy = busy_power_w(cluster, compute_fraction)
    per_gpu_j = busy * p_busy + communicating * gpu.comm_w + waiting * gpu.idle_w
    nodes = np.ceil(gpus / cluster.node.gpus)
    step = times.total
    it_j = gpus * per_gpu_j + nodes * cluster.power.node_overhead_w * step
    total_j = it_j * cluster.power.pue
    peak_w = np.broadcast_to(p_busy, step.shape).astype(float)
    return Energy(energy_j_per_step=total_j, avg_power_kw=total_j / step / W_PER_KW, gpu_power_w=peak_w)


def energy_mwh(gpu_hours, watts_per_gpu, pue=1.0):
    """Energy of a run from its GPU-hours and the average power per GPU [MWh]
    (the arithmetic of Luccioni et al. 2022 and Patterson et al. 2021)."""
    return np.asarray(gpu_hours) * watts_per_gpu * pue / WH_PER_MWH


def carbon_t(mwh, grid_gco2_per_kwh):
    """Operational emissions [tCO2e] of `mwh` at a grid intensity [gCO2e/kWh]."""
    return np.asarray(mwh) * KWH_PER_MWH * grid_gco2_per_kwh / G_PER_T
