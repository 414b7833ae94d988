"""The search end to end on small instances: it must return the best feasible scored layout."""
from __future__ import annotations

import numpy as np
import pytest

from planner.constraints import Limits
from planner.errors import InfeasibleError
from planner.specs.loading import load_cluster, load_model
from planner.search import objective_cost, search, tiebreak_rank


@pytest.fixture(scope="module")
def small():
    model = load_model("gpt3-175b").model_copy(update={"layers": 8, "name": "tiny-175b-width"})
    cluster = load_cluster("dgx-a100-1024")
    return model, cluster


@pytest.mark.parametrize("objective", ["time", "energy", "cost"])
def test_search_equals_brute_force(small, objective):
    model, cluster = small
    result = search(model, cluster, gpus=32, objective=objective, top_k=3)
    s = result.scores
    cost = objective_cost(cluster, s, objective)
    rank = tiebreak_rank(s.layouts)
    feasible = np.flatnonzero(result.feasible)
    # brute force: sort the feasible rows by (objective, then energy per step for time or step
    # time otherwise, then GPUs, then tie-break rank) with Python's sort on tuples
    second = s.energy.energy_j_per_step if objective == "time" else s.step_time_s
    gpus = s.layouts.gpus  # a property computed on each access: once, not once a row
    expected = sorted(feasible.tolist(), key=lambda i: (cost[i], second[i], gpus[i], rank[i]))[:3]
    assert result.solver.status == "OPTIMAL"
    assert result.chosen.tolist() == expected
    assert cost[result.chosen[0]] == cost[feasible].min()


def test_rejection_counts_match_the_limit(small):
    # split_top=0: no uneven splits, so both searches score the same rows the same way
    model, cluster = small
    free = search(model, cluster, gpus=32, split_top=0)
    times = free.scores.step_time_s.tolist()
    limit = sorted(times)[len(times) // 2]  # the median row's step time: about half are slower
    r = search(model, cluster, gpus=32, split_top=0, limits=Limits(max_step_time_s=limit))
    slower = sum(t > limit for t in times)  # counted from the definition, not from the masks
    assert 0 < slower < len(times)
    assert r.rejected["max_step_time"] == slower
    # feasible with the limit = feasible without it and no slower than the limit
    assert set(np.flatnonzero(r.feasible).tolist()) == {i for i in np.flatnonzero(free.feasible).tolist()
                                                        if times[i] <= limit}
    assert search(model, cluster, gpus=32, split_top=0, limits=Limits(max_step_time_s=1e6)).rejected["max_step_time"] == 0


def test_fixed_dimension_is_a_named_constraint(small):
    model, cluster = small
    r = search(model, cluster, gpus=32, limits=Limits(fixed={"tp": 8, "recompute": "full"}))
    best = r.scores.layouts.row(int(r.chosen[0]))
    assert best["tp"] == 8 and best["recompute"] == "full"
    assert r.rejected["fixed_tp"] > 0


def test_a_fixed_boolean_axis_says_which_option_was_given(small):
    model, cluster = small
    r = search(model, cluster, gpus=32, limits=Limits(fixed={"sequence_parallel": False}))
    mask = next(m for m in r.masks if m.name == "fixed_sequence_parallel")
    row = int(np.flatnonzero(~mask.ok)[0])
    assert mask.explain(row) == "sequence_parallel=True, but --no-sequence-parallel was asked for"


def test_infeasible_names_the_binding_constraint():
    # 175B on 8 A100s cannot fit: 175e9 params * 18 bytes / 8 GPUs = 394 GB per GPU > 80 GiB.
    model = load_model("gpt3-175b")
    cluster = load_cluster("dgx-a100-1024")
    r = search(model, cluster, gpus=8)
    assert r.chosen.size == 0
    near = r.nearest_infeasible()
    messages = [v.message for v in r.violations(near)]
    assert any("GiB on 80 GiB" in m for m in messages)
    # 18 B x 175.2e9 parameters / (80 x 2^30 B) = 36.7 -> no layout of fewer than 37 GPUs can fit
    assert model.total_params() == pytest.approx(175.2e9, rel=1e-3)
    assert any("need at least 37 GPUs, this run has 8" in m for m in messages)


def test_empty_space_raises():
    model = load_model("gpt3-175b")
    cluster = load_cluster("dgx-a100-1024")
    # 77 GPUs, 4 layers: tp must divide 96 heads and 77 -> tp 1; pp must divide 77 and be <= 4 -> pp 1;
    # so dp = 77, which does not divide the global batch of 1536: no layout exists.
    with pytest.raises(InfeasibleError):
        search(model.model_copy(update={"layers": 4}), cluster, gpus=7 * 11)


def test_min_scaling_efficiency_uses_half_the_gpus(small):
    model, cluster = small
    r = search(model, cluster, gpus=64, limits=Limits(min_scaling_efficiency=0.5))
    assert "min_scaling_efficiency" in r.rejected




def test_the_tie_named_beside_the_best_is_feasible_close_and_simpler():
    # gpt3-175b on 1,024 A100s: the planner's fastest and the simplest within 3 % of it.
    from planner.choose import TIE_PCT
    from planner.report import search_json
    r = search(load_model("gpt3-175b"), load_cluster("dgx-a100-1024"))
    i, b = r.simplest, int(r.chosen[0])
    assert i is not None and i != b and r.feasible[i]
    t = r.scores.step_time_s
    assert t[b] <= t[i] <= t[b] * (1 + TIE_PCT / 100)
    lay = r.scores.layouts
    # no feasible row as close is simpler: fewer GPUs per replica (tp x pp x cp), or as few and fewer stages
    close = np.flatnonzero(r.feasible & (t <= t[b] * (1 + TIE_PCT / 100)))
    replica = lay.tp * lay.pp * lay.cp
    assert replica[i] == replica[close].min()
    assert lay.pp[i] == lay.pp[close][replica[close] == replica[i]].min()
    # and of the rows as simple on every simplicity key, the fastest
    same = close[(replica[close] == replica[i]) & (lay.pp[close] == lay.pp[i]) & (lay.vpp[close] == lay.vpp[i])
                 & (lay.ep[close] == lay.ep[i])]
    assert t[i] == t[same].min()
    tie = search_json(r)["simplest_within_tie"]
    assert 0 < tie["slower_than_best_pct"] <= TIE_PCT and tie["tie_pct"] == TIE_PCT
