"""Energy family: cluster power budget, energy per token, per-GPU power."""
from __future__ import annotations

from planner.constraints.base import Constraint, Option

CONSTRAINTS = (
    Constraint("max_power", "energy", Option(
        "max_power_kw", "--max-power-kw", float, "cluster power budget incl. node overhead and PUE [kW]",
        bounds=dict(gt=0, le=1e9)), unit="kW", bound="upper", value=lambda s, ctx: s.energy.avg_power_kw,
        message="draws {value:.1f} kW on average (with node overhead and PUE), above {flag} {limit:g}"),
    Constraint("max_energy_per_token", "energy", Option(
        "max_energy_per_token_j", "--max-energy-per-token", float, "upper bound [J/token]", bounds=dict(gt=0, le=1e9)),
        unit="J/token", bound="upper", value=lambda s, ctx: s.energy_j_per_token,
        message="uses {value:.3g} J per token, above {flag} {limit:g} J"),
    Constraint("max_gpu_power", "energy", Option(
        "max_gpu_power_w", "--max-gpu-power-w", float, "upper bound on per-GPU power [W]", bounds=dict(gt=0, le=1e5)),
        unit="W", bound="upper", value=lambda s, ctx: s.energy.gpu_power_w,
        message="a GPU draws {value:.0f} W while busy, above {flag} {limit:g} W"),
)
