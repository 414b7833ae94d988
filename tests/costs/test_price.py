"""Cost and carbon of a step (planner/costs/price.py), from prices and energy by hand."""
from __future__ import annotations

import numpy as np
import pytest

from planner.costs.price import step_co2e_g, step_cost_usd
from planner.specs.loading import load_cluster


def test_step_cost_is_gpu_hours_plus_electricity():
    c = load_cluster("dgx-a100-1024")  # shipped defaults: $2.00 per GPU-hour, $0.10 per kWh
    # 1024 GPUs for 18 s: 1024 x 18 / 3600 = 5.12 GPU-hours = $10.24; 15.84 MJ = 4.4 kWh = $0.44
    assert step_cost_usd(c, 1024, 18.0, 15.84e6) == pytest.approx(10.24 + 0.44, rel=1e-12)
    # arrays broadcast: twice the GPUs for half the time cost the same GPU-hours
    both = step_cost_usd(c, np.array([512, 1024]), np.array([36.0, 18.0]), np.array([0.0, 0.0]))
    assert both == pytest.approx([10.24, 10.24], rel=1e-12)


def test_step_carbon_is_energy_at_the_grid_intensity():
    c = load_cluster("dgx-a100-1024")  # 429 gCO2e/kWh (Patterson et al. 2021, US average)
    assert step_co2e_g(c, 3.6e6) == pytest.approx(429.0, rel=1e-12)  # 1 kWh
