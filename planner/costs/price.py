"""What a step costs in money and carbon: GPU-hours at the cluster's hourly price plus the energy
the step draws (planner/costs/energy.py, PUE included) at the electricity price; carbon from the
same energy at the grid's intensity (Patterson et al. 2021, "Carbon Emissions and Large Neural
Network Training", eq. 1: tCO2e = MWh x tCO2e/MWh).

cost per step [$] = gpus * t_step / 3600 * gpu_hour_usd + E_step / 3.6e6 * electricity_usd_per_kwh
carbon per step [gCO2e] = E_step / 3.6e6 * grid_gco2_per_kwh
"""
from __future__ import annotations

import numpy as np

from planner.specs import ClusterSpec
from planner.units import J_PER_KWH, S_PER_H


def step_cost_usd(cluster: ClusterSpec, gpus, step_time_s, energy_j_per_step) -> np.ndarray:
    """[$ per step] GPU rental for the step's wall time plus its electricity."""
    gpu_usd = np.asarray(gpus) * np.asarray(step_time_s) / S_PER_H * cluster.pricing.gpu_hour_usd
    power_usd = np.asarray(energy_j_per_step) / J_PER_KWH * cluster.pricing.electricity_usd_per_kwh
    return gpu_usd + power_usd


def step_co2e_g(cluster: ClusterSpec, energy_j_per_step) -> np.ndarray:
    """[gCO2e per step] the step's energy at the grid's carbon intensity."""
    return np.asarray(energy_j_per_step) / J_PER_KWH * cluster.power.grid_gco2_per_kwh
