"""Power caps, energy objectives and the published energy arithmetic (planner/costs/energy.py,
planner/costs/power_caps.py, the energy objectives of planner/search.py).

Shipped A100 SXM4 80GB: busy = TDP = 400 W, idle 55 W, comm = 55 + 0.4 x (400 - 55) = 193 W;
dgx-a100-1024: 8 GPUs per node, node overhead 3,300 W, PUE 1.1.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from pytest import approx

from planner.constraints import Limits
from planner.costs.energy import carbon_t, energy_mwh, step_energy
from planner.costs.pipeline import TimeBreakdown
from planner.costs.power_caps import cap_levels, capped_cluster, uncapped
from planner.specs.loading import load_cluster, load_model
from planner.score import score, score_with_caps
from planner.search import objective_cost, search, space_for
from planner.layout.space import SpaceLimits
from planner.specs import PowerCap

FIELDS = ("compute", "recompute", "tp_comm", "pp_comm", "dp_comm", "bubble", "optimizer", "overhead")


def breakdown(**seconds) -> TimeBreakdown:
    return TimeBreakdown(**{f: np.array([float(seconds.get(f, 0.0))]) for f in FIELDS})


@pytest.fixture(scope="module")
def a100():
    return load_cluster("dgx-a100-1024")


@pytest.fixture(scope="module")
def small():
    model = load_model("gpt3-175b").model_copy(update={"layers": 8, "name": "tiny-175b-width"})
    return model, load_cluster("dgx-a100-1024")


def test_energy_is_linear_in_the_step(a100):
    one = step_energy(a100, breakdown(compute=1.0, tp_comm=0.5, bubble=0.25), np.array([8]))
    two = step_energy(a100, breakdown(compute=2.0, tp_comm=1.0, bubble=0.5), np.array([8]))
    # 1.1 x (8 x (1 x 400 + 0.5 x 193 + 0.25 x 55) + 3300 x 1.75) = 1.1 x (8 x 510.25 + 5775) = 10,842.7 J
    assert one.energy_j_per_step[0] == approx(10_842.7, rel=1e-12)
    assert two.energy_j_per_step[0] == approx(2 * 10_842.7, rel=1e-12)
    assert one.avg_power_kw[0] == approx(two.avg_power_kw[0])


def test_capped_energy_by_hand(a100):
    cap = PowerCap(cap_w=300, speed=0.93, power=0.75)
    capped = capped_cluster(a100, cap)
    assert capped.gpu.busy_w == 300.0 and capped.gpu.comm_w == 193.0  # min(193, 300)
    assert capped.gpu.peak_tflops.bf16 == approx(312 * 0.93)
    # a purely FLOP-bound second takes 1/0.93 s under the cap:
    # 1.1 x (8 x 300 + 3300) / 0.93 = 1.1 x 5700 / 0.93 = 6,741.94 J against 1.1 x 6500 = 7,150 J
    e = step_energy(capped, breakdown(compute=1 / 0.93), np.array([8]))
    assert e.energy_j_per_step[0] == approx(1.1 * 5700 / 0.93, rel=1e-12)
    assert step_energy(a100, breakdown(compute=1.0), np.array([8])).energy_j_per_step[0] == approx(7150.0)
    assert e.gpu_power_w[0] == 300.0


def test_rate_dependent_busy_power_is_opt_in(a100):
    gpu = a100.gpu.model_copy(update={"power": a100.gpu.power.model_copy(update={"full_power_compute_fraction": 0.5})})
    c = a100.model_copy(update={"gpu": gpu, "power": a100.power.model_copy(update={"pue": 1.0, "node_overhead_w": 0.0})})
    # at a quarter of peak with u_ref 0.5: 193 + (400 - 193) x 0.5 = 296.5 W for 1 s of compute
    e = step_energy(c, breakdown(compute=1.0), np.array([1]), compute_fraction=np.array([0.25]))
    assert e.energy_j_per_step[0] == approx(296.5)
    # at or above u_ref, and without it, a computing GPU draws busy_w
    assert step_energy(c, breakdown(compute=1.0), np.array([1]), compute_fraction=np.array([0.9])).energy_j_per_step[0] == approx(400)


def test_uncapped_level_reproduces_todays_scores(small):
    model, cluster = small
    lay = space_for(model, 32, SpaceLimits())
    plain, capped = score(model, cluster, lay), score(model, cluster, lay, cap=uncapped(cluster.gpu))
    assert np.array_equal(plain.step_time_s, capped.step_time_s)
    assert np.array_equal(plain.energy.energy_j_per_step, capped.energy.energy_j_per_step)
    # and the default time search does not try caps
    assert not search(model, cluster, gpus=32).power_caps


@pytest.mark.parametrize("cluster_name", ["dgx-a100-1024", "dgx-h100-1024", "dgx-a100-40gb-64", "dgx-h200-1024"])
def test_lower_caps_never_beat_higher_caps_in_speed(cluster_name):
    model = load_model("gpt3-13b")
    cluster = load_cluster(cluster_name)
    lay = space_for(model, 64, SpaceLimits())
    levels = cap_levels(cluster.gpu)
    assert len(levels) >= 4 and levels[0] == uncapped(cluster.gpu)
    s = score_with_caps(model, cluster, lay)
    steps = s.step_time_s.reshape(len(levels), len(lay))  # rows of level j follow each other
    assert np.all(np.diff(steps, axis=0) >= -1e-12 * steps[:-1])  # (rounding only)
    # the compute part stretches by at most 1/speed (memory-bound kernels do not slow down)
    comp = (s.time_s.compute + s.time_s.recompute).reshape(len(levels), len(lay))
    for j, c in enumerate(levels):
        assert np.all(comp[j] <= comp[0] / c.speed * (1 + 1e-12))


def test_energy_curve_is_u_shaped_over_caps(small):
    model, cluster = small
    fastest = search(model, cluster, gpus=32)
    lay = fastest.scores.layouts.take(fastest.chosen[:1])
    e = score_with_caps(model, cluster, lay).energy.energy_j_per_step
    # node overhead and idle power are paid longer under deep caps: the minimum lies inside the table
    best = int(np.argmin(e))
    assert 0 < best < e.size - 1
    assert np.all(np.diff(e[: best + 1]) < 0) and np.all(np.diff(e[best:]) > 0)


def test_energy_objective_with_a_step_limit_finds_the_lowest_energy_layout_and_cap(small):
    model, cluster = small
    fastest = search(model, cluster, gpus=32)
    limit = float(fastest.scores.step_time_s[fastest.chosen[0]]) * 1.05
    r = search(model, cluster, gpus=32, objective="energy", limits=Limits(max_step_time_s=limit))
    assert r.power_caps
    s, i = r.scores, r.chosen[0]
    assert s.step_time_s[i] <= limit
    feasible = np.flatnonzero(r.feasible)
    assert s.energy.energy_j_per_step[i] <= s.energy.energy_j_per_step[feasible].min() * (1 + 1e-6)
    assert s.energy.energy_j_per_step[i] < fastest.scores.energy.energy_j_per_step[fastest.chosen[0]]


def test_max_gpu_power_keeps_only_caps_under_it(small):
    model, cluster = small
    r = search(model, cluster, gpus=32, limits=Limits(max_gpu_power_w=300.0))
    caps = r.scores.power_cap_w
    assert r.chosen.size and np.all(caps[r.feasible] <= 300.0)
    assert r.rejected["max_gpu_power"] > 0


def test_carbon_of_a_step_by_hand(a100):
    # the 1 s FLOP-bound step on one node of test_capped_energy_by_hand: 1.1 x (8 x 400 + 3300) = 7,150 J
    # = 7,150 / 3.6e6 = 1.98611e-3 kWh; x 429 gCO2e/kWh (the default grid, Patterson et al. 2021) = 0.852042 g
    e = step_energy(a100, breakdown(compute=1.0), np.array([8]))
    assert objective_cost(a100, SimpleNamespace(energy=e), "carbon")[0] == approx(0.852042, rel=1e-6)
    # a greener grid scales it: 50 gCO2e/kWh -> 1.98611e-3 x 50 = 0.0993056 g
    green = a100.model_copy(update={"power": a100.power.model_copy(update={"grid_gco2_per_kwh": 50.0})})
    assert objective_cost(green, SimpleNamespace(energy=e), "carbon")[0] == approx(0.0993056, rel=1e-6)


def test_carbon_objective_picks_the_energy_objectives_layout(small):
    # one grid: carbon is energy times a constant, so both objectives rank the layouts alike
    model, cluster = small
    carbon = search(model, cluster, gpus=32, objective="carbon")
    energy = search(model, cluster, gpus=32, objective="energy")
    i, j = carbon.chosen[0], energy.chosen[0]
    assert carbon.scores.layouts.row(i) == energy.scores.layouts.row(j)
    assert carbon.scores.power_cap_w[i] == energy.scores.power_cap_w[j]


@pytest.mark.parametrize("gpu_hours, watts, pue, mwh, source", [
    (1_082_990, 400.0, 1.0, 433.196, "BLOOM: Luccioni et al. 2022"),
    (10_000 * 14.8 * 24, 330.0, 1.1, 1289.4, "GPT-3: Patterson et al. 2021 (published 1,287)"),
])
def test_published_energy_arithmetic(gpu_hours, watts, pue, mwh, source):
    # BLOOM: 1,082,990 x 400 W = 433,196,000 Wh; GPT-3: 3,552,000 GPU-h x 330 W x 1.1 = 1,289.38 MWh
    assert energy_mwh(gpu_hours, watts, pue) == approx(mwh, rel=1e-4)


def test_carbon_of_gpt3():
    # Patterson et al. 2021: 1,287 MWh at 429 gCO2e/kWh = 552 tCO2e
    assert carbon_t(1287.0, 429.0) == approx(552.1, abs=0.1)
