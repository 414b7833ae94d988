"""Energy per step from a power model per GPU state, node overhead and PUE.

A GPU draws `busy_w` while computing, `comm_w` while it only communicates and `idle_w` while it
waits (pipeline bubble, fixed overheads). Defaults: busy = TDP (dense training holds GPUs at their
power limit; Patel et al. 2024, "Characterizing Power Management Opportunities for LLMs in the
Cloud", ASPLOS'24, Sec. 3), idle from the datasheet or measurement. Non-GPU node power (CPUs,
NICs, fans, switches) is a flat `node_overhead_w` per node (DGX A100 6.5 kW max system power minus
8 x 400 W GPUs = 3.3 kW); facility overhead is the PUE. Measured power should replace them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..specs import ClusterSpec
from .pipeline import TimeBreakdown


@dataclass(frozen=True)
class Energy:
    energy_j_per_step: np.ndarray
    avg_power_kw: np.ndarray
    gpu_power_w: np.ndarray  # the highest state power a GPU draws during the step


def step_energy(cluster: ClusterSpec, times: TimeBreakdown, gpus: np.ndarray) -> Energy:
    gpu = cluster.gpu
    busy = times.compute + times.recompute + times.optimizer
    communicating = times.tp_comm + times.pp_comm + times.dp_comm
    waiting = times.bubble + times.overhead
    per_gpu_j = busy * gpu.busy_w + communicating * gpu.comm_w + waiting * gpu.idle_w
    nodes = np.ceil(gpus / cluster.node.gpus)
    step = times.total
    it_j = gpus * per_gpu_j + nodes * cluster.power.node_overhead_w * step
    total_j = it_j * cluster.power.pue
    peak_w = np.full_like(step, gpu.busy_w)
    return Energy(energy_j_per_step=total_j, avg_power_kw=total_j / step / 1e3, gpu_power_w=peak_w)
