"""Power caps as a decision: each GPU preset lists cap levels with their speed and busy power.

Rule under a cap (DVFS lowers the SM clock): tensor-core throughput scales by `speed`, so every
FLOP-bound term of the compute model (GEMMs, attention) takes 1/speed longer, while memory-bound
kernels (HBM bandwidth), communication and fixed overheads (launches, step overhead) keep their
time; a computing GPU draws `power` x busy_w, a communicating one min(comm_w, that), an idle one
idle_w. The energy per step is then U-shaped in the cap: lower caps save GPU power, but the step
grows and node overhead, idle and communication power are paid for longer (Zeus, You et al.
NSDI'23; Perseus, Chung et al. SOSP'24, report such curves measured on A100/H100).

The uncapped GPU (cap = TDP, speed 1, power 1) is always level 0, so a preset without a table, or
a search that does not try caps, gives exactly the uncapped numbers. The cap level is a layout axis
(`power_cap` in planner/layout/axes.py): searching caps repeats the space once per level, and
planner.score scores each level's rows on the GPU this module returns for it.
"""
from __future__ import annotations

from planner.specs import ClusterSpec, GpuPower, GpuSpec, PowerCap


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
    # The cap is what nvidia-smi -pl enforces: no state draws more, whatever the preset's rounded fraction
    # says (an H100's 700 W x 0.429 is 300.3 W, which --max-gpu-power-w 300 refused at the 300 W cap).
    busy = min(gpu.busy_w * cap.power, cap.cap_w)
    power = GpuPower(busy_w=busy, comm_w=min(gpu.comm_w, busy),
                     full_power_compute_fraction=gpu.power.full_power_compute_fraction)
    return gpu.model_copy(update={"peak_tflops": peak.model_copy(update=scaled), "power": power, "power_caps": (),
                                  "idle_w": min(gpu.idle_w, busy)})


def capped_cluster(cluster: ClusterSpec, cap: PowerCap) -> ClusterSpec:
    gpu = capped_gpu(cluster.gpu, cap)
    return cluster if gpu is cluster.gpu else cluster.model_copy(update={"gpu": gpu})
