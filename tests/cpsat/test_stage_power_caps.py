"""Per-stage power caps with CP-SAT (planner/cpsat/stage_power_caps.py): optimum equals brute force on small
instances, the step never lengthens, and the base pipeline matches planner/costs/pipeline.py."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from pytest import approx

from planner.specs.loading import load_cluster, load_model
from planner.layout.space import single_layout
from planner.score import score
from planner.specs import PowerCap
from planner.cpsat.stage_power_caps import (StageCapInstance, integer_energy, pipeline_s, solve, stage_caps,
                                stage_instance)

CAPS = [PowerCap(cap_w=400, speed=1.0, power=1.0), PowerCap(cap_w=300, speed=0.9, power=0.75),
        PowerCap(cap_w=200, speed=0.75, power=0.5)]


def random_instance(rng, stages: int, budget: bool) -> StageCapInstance:
    base_t = rng.uniform(1.0, 2.0, stages)
    slow = np.array([1.0, 1 / 0.9, 1 / 0.75])
    t = base_t[:, None] * slow[None, :]
    e = rng.uniform(100.0, 200.0, (stages, 3))
    busy = np.array([400.0, 300.0, 200.0])
    return StageCapInstance(CAPS, t, e, busy, gpus_per_stage=2, steady_microbatches=7, vpp=1, base=0, pue=1.1,
                            max_busy_power_w=float(rng.uniform(300, 800) * 2) if budget else None)


def brute_force(inst: StageCapInstance):
    ok = inst.feasible()
    cost = integer_energy(inst)
    watts = np.rint(inst.busy_power_w).astype(int) * inst.gpus_per_stage
    best = None
    for choice in itertools.product(range(len(inst.caps)), repeat=ok.shape[0]):
        c = np.array(choice)
        if not ok[np.arange(c.size), c].all():
            continue
        if inst.max_busy_power_w is not None and watts[c].sum() > np.floor(inst.max_busy_power_w):
            continue
        obj = int(sum(cost[r, k] * len(inst.caps) + k for r, k in enumerate(c)))
        if best is None or obj < best[0]:
            best = (obj, c)
    return best


@pytest.mark.parametrize("seed, stages, budget", [(s, n, b) for s in range(4) for n in (2, 3, 5) for b in (False, True)])
def test_cp_sat_equals_brute_force(seed, stages, budget):
    inst = random_instance(np.random.default_rng(seed), stages, budget)
    expected = brute_force(inst)
    got = solve(inst)
    if expected is None:
        assert got.status == "INFEASIBLE"
        return
    assert got.status == "OPTIMAL"
    assert got.objective == expected[0]
    assert got.choice.tolist() == expected[1].tolist()
    assert got.step_pipeline_s <= got.base_step_pipeline_s * (1 + 1e-12)


@pytest.mark.parametrize("model_name, cluster_name, layout", [
    ("gpt3-175b", "dgx-a100-1024", dict(dp=8, tp=8, pp=16, micro_batch=1, num_microbatches=192)),
    ("llama3-405b", "dgx-h100-16384", dict(dp=128, tp=8, pp=16, micro_batch=1, num_microbatches=16)),
    ("llama3-70b", "dgx-h100-1024", dict(dp=16, tp=8, pp=8, micro_batch=1, vpp=2, num_microbatches=32)),
])
def test_stage_caps_never_lengthen_the_step_and_save_energy(model_name, cluster_name, layout):
    model, cluster = load_model(model_name), load_cluster(cluster_name)
    lay = single_layout(**layout)
    r = stage_caps(model, cluster, lay)
    assert r.status == "OPTIMAL"
    assert r.step_pipeline_s <= r.base_step_pipeline_s * (1 + 1e-12)
    assert r.energy_saved_j_per_step >= 0.0
    inst = stage_instance(model, cluster, lay)
    # the slowest stage keeps the base cap; each pipeline is imbalanced (the last stage also
    # computes the logits; 405B's 126 layers split unevenly), so some other stage slows down
    slowest = int(np.argmax(inst.stage_time_s[:, inst.base]))
    assert r.choice[slowest] == inst.base
    assert (r.choice != inst.base).any() and r.energy_saved_j_per_step > 0.0


def test_saving_of_a_two_stage_pipeline_by_hand():
    # stage 0 takes 1.0 s per micro-batch at 400 W, stage 1 (the slowest) 1.5 s; a cap at speed s
    # stretches a stage to t / s. Energy per micro-batch per GPU = busy W x t + 100 W idle x (1.5 - t):
    #   stage 0: 400 W: 400 x 1.0 + 100 x 0.5 = 450 J; 300 W: 300 x 1.111 + 100 x 0.389 = 372.2 J;
    #            200 W: 200 x 1.333 + 100 x 0.167 = 283.3 J (1.333 s <= 1.5 s: allowed)
    #   stage 1: 400 W only (1.667 s and 2.0 s would lengthen the step): 600 J
    speed = np.array([cap.speed for cap in CAPS])
    busy = np.array([cap.cap_w for cap in CAPS])
    t = np.array([[1.0], [1.5]]) / speed[None, :]
    e = busy[None, :] * t + 100.0 * (1.5 - t)
    inst = StageCapInstance(CAPS, t, e, busy, gpus_per_stage=2, steady_microbatches=7, vpp=1, base=0, pue=1.1)
    r = solve(inst)
    assert r.status == "OPTIMAL"
    assert r.caps_w == [200.0, 400.0]
    # (450 - 283.3) J x 2 GPUs x 7 steady micro-batches x PUE 1.1 = 166.7 x 15.4 = 2,566.7 J
    assert r.energy_saved_j_per_step == approx(500 / 3 * 2 * 7 * 1.1)
    # 7 x 1.5 s steady + 1.5 s + (1.0 + 1.5 - 1.5) s fill and drain = 13.0 s, as at the base cap
    assert r.step_pipeline_s == approx(13.0) and r.base_step_pipeline_s == approx(13.0)
    # busy power: stage 1 needs 2 x 400 W, stage 0 at least 2 x 200 W: 1,200 W; a 1,000 W budget fails
    assert solve(StageCapInstance(CAPS, t, e, busy, 2, 7, 1, 0, 1.1, max_busy_power_w=1000.0)).status == "INFEASIBLE"


def test_base_pipeline_matches_the_step_time_model():
    model, cluster = load_model("gpt3-175b"), load_cluster("dgx-a100-1024")
    lay = single_layout(dp=8, tp=8, pp=16, micro_batch=1, num_microbatches=192)
    t = score(model, cluster, lay).time_s  # the step time model, through its stable entry point
    inst = stage_instance(model, cluster, lay)
    # pipeline = compute + recompute + tp_comm + bubble + the per-micro-batch part of the overhead
    # (m x v x the stack's microbatch_overhead) in planner/costs/pipeline.py (bubble > 0 here)
    micro = model.training.stack.for_gpu(cluster.gpu.name).microbatch_overhead_s * 192 * 1
    expected = t.compute[0] + t.recompute[0] + t.tp_comm[0] + t.bubble[0] + micro
    assert pipeline_s(inst, np.full(16, inst.base)) == approx(expected, rel=1e-9)


def test_a_balanced_single_microbatch_pipeline_has_nothing_to_save():
    # m = 1: no steady-state micro-batches, so nothing can be slowed
    model, cluster = load_model("gpt3-175b"), load_cluster("dgx-a100-1024")
    r = stage_caps(model, cluster, single_layout(dp=8, tp=8, pp=16, micro_batch=1, num_microbatches=1))
    assert r.energy_saved_j_per_step == 0.0


def test_search_reports_stage_caps_when_caps_are_searched():
    model, cluster = load_model("gpt3-175b"), load_cluster("dgx-a100-1024")
    from planner.search import search

    r = search(model, cluster, objective="cost")
    assert r.stage_caps is not None and r.stage_caps.step_pipeline_s <= r.stage_caps.base_step_pipeline_s * (1 + 1e-12)
