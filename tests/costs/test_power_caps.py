"""A stated power cap is never exceeded by its own pricing (issue 38). Found: the H100 preset's 300 W level
(power 0.429 of the 700 W busy power, a rounded fraction) priced a busy GPU at 700 x 0.429 = 300.3 W, so
`--power-caps --max-gpu-power-w 300` refused every layout at the 300 W cap."""
from __future__ import annotations

from pathlib import Path

import pytest

from planner.constraints import Limits
from planner.costs.power_caps import cap_levels, capped_gpu
from planner.search import search
from planner.specs.loading import load_cluster, load_gpu, load_model

GPUS = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "configs" / "gpus").glob("*.yaml"))


@pytest.mark.parametrize("name", GPUS)
def test_no_state_of_a_capped_gpu_draws_more_than_its_cap(name):
    gpu = load_gpu(name)
    for cap in cap_levels(gpu):
        g = capped_gpu(gpu, cap)
        assert max(g.busy_w, g.comm_w, g.idle_w) <= cap.cap_w, (name, cap)


def test_the_h100s_300_w_level_is_priced_at_300_w():
    gpu = load_gpu("h100-sxm-80gb")
    cap = next(c for c in cap_levels(gpu) if c.cap_w == 300)
    assert gpu.busy_w * cap.power == pytest.approx(300.3)  # 700 W x 0.429: the preset's rounded fraction
    assert capped_gpu(gpu, cap).busy_w == 300.0
    # a level whose fraction is below the cap keeps it: 700 x 0.571 = 399.7 W at the 400 W level
    four = next(c for c in cap_levels(gpu) if c.cap_w == 400)
    assert capped_gpu(gpu, four).busy_w == pytest.approx(399.7)


def test_a_search_limited_to_the_cap_finds_layouts_at_that_cap():
    model, cluster = load_model("llama3-8b"), load_cluster("dgx-h100-1024")
    best = search(model, cluster, gpus=8, power_caps=True, limits=Limits(max_gpu_power_w=300.0), split_top=0).best
    assert best is not None and best.power_cap.power_cap_w == 300
