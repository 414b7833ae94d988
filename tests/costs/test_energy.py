"""Energy model (planner/costs/energy.py): per-state GPU power, node overhead, PUE.

energy per step = PUE x (gpus x (t_busy P_busy + t_comm P_comm + t_wait P_idle)
                         + nodes x node_overhead x step time)
with busy = compute + recompute + optimizer, comm = tp + pp + dp, wait = bubble + overhead.
Toy GPU (conftest): TDP 500 W, idle 100 W, so by default P_busy = 500 W and
P_comm = idle + 0.4 (TDP - idle) = 100 + 160 = 260 W.
"""
from __future__ import annotations

import numpy as np
from pytest import approx

from planner.costs.energy import step_energy
from planner.costs.pipeline import TimeBreakdown, step_time
from planner.score import score
from planner.layout.space import single_layout
from planner.costs.context import job_context


def breakdown(**seconds) -> TimeBreakdown:
    fields = ("compute", "recompute", "tp_comm", "pp_comm", "dp_comm", "bubble", "optimizer", "overhead")
    return TimeBreakdown(**{f: np.array([float(seconds.get(f, 0.0))]) for f in fields})


HAND = dict(compute=1.0, recompute=0.5, tp_comm=0.2, pp_comm=0.1, dp_comm=0.3, bubble=0.4, optimizer=0.05, overhead=0.06)


def test_energy_of_a_given_breakdown_by_hand(make_cluster):
    cluster = make_cluster(power=dict(pue=1.2, node_overhead_w=3000.0))
    times = breakdown(**HAND)
    # step = 1 + 0.5 + 0.2 + 0.1 + 0.3 + 0.4 + 0.05 + 0.06 = 2.61 s
    assert times.total[0] == approx(2.61)
    e = step_energy(cluster, times, np.array([12]))
    # per GPU: busy 1.55 s x 500 W = 775 J; comm 0.6 s x 260 W = 156 J; wait 0.46 s x 100 W = 46 J
    # -> 977 J; 12 GPUs -> 11,724 J. 12 GPUs occupy ceil(12/8) = 2 nodes: 2 x 3000 W x 2.61 s
    # = 15,660 J. IT energy 27,384 J x PUE 1.2 = 32,860.8 J
    assert e.energy_j_per_step[0] == approx(32_860.8, rel=1e-12)
    # average power 32,860.8 J / 2.61 s = 12.59 kW
    assert e.avg_power_kw[0] == approx(32_860.8 / 2.61 / 1e3, rel=1e-12)
    assert e.gpu_power_w[0] == 500.0


def test_measured_state_powers_replace_the_defaults(make_cluster, toy_gpu_data):
    gpu = toy_gpu_data(power=dict(busy_w=450.0, comm_w=300.0))
    cluster = make_cluster(gpu=gpu, power=dict(pue=1.0, node_overhead_w=0.0))
    e = step_energy(cluster, breakdown(**HAND), np.array([8]))
    # 8 x (1.55 x 450 + 0.6 x 300 + 0.46 x 100) = 8 x (697.5 + 180 + 46) = 8 x 923.5 = 7,388 J
    assert e.energy_j_per_step[0] == approx(7_388.0, rel=1e-12)
    assert e.gpu_power_w[0] == 450.0


def test_energy_of_one_scored_layout_by_hand(make_model, make_cluster):
    # A real layout: dp 2, tp 2, pp 2 on one 8-GPU node (uses 8 GPUs).
    model = make_model(training=dict(global_batch=8))
    cluster = make_cluster(power=dict(pue=1.1, node_overhead_w=3300.0))
    layout = single_layout(dp=2, tp=2, pp=2, micro_batch=1, num_microbatches=4)
    t = step_time(job_context(model, cluster, layout))
    busy = t.compute[0] + t.recompute[0] + t.optimizer[0]
    comm = t.tp_comm[0] + t.pp_comm[0] + t.dp_comm[0]
    wait = t.bubble[0] + t.overhead[0]
    step = t.total[0]
    # one node: 8 GPUs at 500 / 260 / 100 W plus 3,300 W for the node, times PUE 1.1
    expected = 1.1 * (8 * (500 * busy + 260 * comm + 100 * wait) + 1 * 3300 * step)
    s = score(model, cluster, layout)
    assert s.energy.energy_j_per_step[0] == approx(expected, rel=1e-12)
    # per token: the step's energy over the 8 x 512 = 4,096 tokens of the global batch
    assert s.energy_j_per_token[0] == approx(expected / 4096, rel=1e-9)
    # average power between the all-idle and all-busy bounds of the node
    low = 1.1 * (8 * 100 + 3300) / 1e3
    high = 1.1 * (8 * 500 + 3300) / 1e3
    assert low < s.energy.avg_power_kw[0] < high


def test_partial_node_pays_the_whole_node_overhead(make_cluster):
    cluster = make_cluster(power=dict(pue=1.0, node_overhead_w=1000.0))
    times = breakdown(overhead=1.0)  # one second of waiting
    # 1 GPU idle for 1 s (100 J) + one whole node's overhead for 1 s (1000 J)
    assert step_energy(cluster, times, np.array([1])).energy_j_per_step[0] == approx(1100.0)
    # 9 GPUs need 2 nodes: 900 + 2000
    assert step_energy(cluster, times, np.array([9])).energy_j_per_step[0] == approx(2900.0)
