"""Mixed GPU pools: the placement model (planner/cpsat/pool_placement.py) against brute force and hand-derived
cases, and the `pools:` cluster spec (planner/specs.py, planner/specs/loading.py)."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from planner.errors import SpecError, SpecErrors
from planner.specs.loading import load_cluster
from planner.cpsat.pool_placement import PoolInstance, PoolTerms, integer_coefficients, plan_mixed, solve
from planner.specs import ClusterSpec, NodeSpec, PoolSpec

GIB = 2**30
MS = 1e-3


def pool(name, gpus, t_ms, *, logits_ms=0.0, held_gib=0.0, act_gib=0.0, const_gib=0.0, usable_gib=1e3, p2p_ms=0.0):
    return PoolTerms(name, gpus, t_ms * MS, logits_ms * MS, held_gib * GIB, act_gib * GIB, const_gib * GIB,
                     0.0, 0.0, usable_gib * GIB, p2p_ms * MS)


# --- brute force: every placement, every composition of the layers (n_r >= 1 when L >= p) ---------

def _step(inst, c, placement, layers) -> int:
    """The integer 1F1B step, written out from the module's definition: (m - 1) max T + sum T."""
    p, times = inst.pp, []
    for r in range(p):
        q = placement[r]
        t = c["t"][q] * layers[r]
        if r == p - 1:
            t += c["logits"][q]
        elif placement[r + 1] == q:
            t += c["within"][q]
        else:
            t += c["cross"]
        times.append(t)
    return (inst.microbatches - 1) * max(times) + sum(times)


def _fits(inst, c, placement, layers) -> bool:
    for q in set(placement):
        if placement.count(q) * inst.stage_gpus > inst.pools[q].gpus:
            return False
    for r, q in enumerate(placement):
        k = min(inst.microbatches, inst.pp - r)
        mem = (c["const"][q] + (c["first"][q] if r == 0 else 0) + (c["last"][q] if r == inst.pp - 1 else 0)
               + (c["held"][q] + k * c["act"][q]) * layers[r])
        if mem > c["usable"][q]:
            return False
    return True


def brute_force(inst):
    c = integer_coefficients(inst)
    p, L, Q = inst.pp, inst.layers, len(inst.pools)
    best = None
    for placement in itertools.product(range(Q), repeat=p):
        crossings = sum(placement[r] != placement[r + 1] for r in range(p - 1))
        tie = p * Q * crossings + sum(placement)
        for cuts in itertools.combinations(range(L + p - 1), p - 1):  # stars and bars
            edges = (-1, *cuts, L + p - 1)
            layers = [edges[i + 1] - edges[i] - 1 for i in range(p)]
            if L >= p and min(layers) == 0:  # no empty rank when every rank can hold a layer
                continue
            if _fits(inst, c, list(placement), layers):
                key = (_step(inst, c, placement, layers), tie)
                best = key if best is None or key < best else best
    return best


def random_instance(seed, *, tight_memory=False, tight_capacity=False):
    rng = np.random.default_rng(seed)
    p, L, m = int(rng.integers(2, 5)), int(rng.integers(4, 9)), int(rng.integers(1, 7))
    g = 8
    pools = []
    for q in range(2):
        cap = g * (int(rng.integers(1, p)) if tight_capacity else p)
        held, act = rng.uniform(0.5, 2.0), rng.uniform(0.1, 1.0)
        # tight: about the memory of an even share of the layers at rank 0's peak, +- 30%
        usable = (1.0 + (held + min(m, p) * act) * L / p * rng.uniform(0.7, 1.3)) if tight_memory else 1e3
        pools.append(pool(f"pool{q}", cap, rng.uniform(1.0, 3.0), logits_ms=rng.uniform(0, 2.0), held_gib=held,
                          act_gib=act, const_gib=1.0, usable_gib=usable, p2p_ms=rng.uniform(0, 0.2)))
    return PoolInstance(L, p, m, g, tuple(pools), rng.uniform(0.1, 1.0) * MS)


CASES = [(seed, mem, cap) for seed in range(6) for mem, cap in ((False, False), (True, False), (False, True), (True, True))]


@pytest.mark.parametrize("seed,tight_memory,tight_capacity", CASES)
def test_cpsat_equals_brute_force(seed, tight_memory, tight_capacity):
    inst = random_instance(seed, tight_memory=tight_memory, tight_capacity=tight_capacity)
    expected = brute_force(inst)
    result = solve(inst)
    if expected is None:
        assert result.status == "INFEASIBLE"
        return
    assert result.status == "OPTIMAL"
    assert (result.objective, result.tiebreak) == expected
    assert result.bound == result.objective
    # the reported placement and split reach the optimum when evaluated by the brute-force formulas
    c = integer_coefficients(inst)
    placement = [[P.name for P in inst.pools].index(n) for n in result.stage_pools]
    assert _fits(inst, c, placement, list(result.stage_layers))
    assert _step(inst, c, placement, list(result.stage_layers)) == expected[0]


def test_infeasible_capacity_and_memory():
    # 3 stages of 8 GPUs need 24 GPUs; the pools hold 8 + 8
    few = PoolInstance(6, 3, 4, 8, (pool("a", 8, 1.0), pool("b", 8, 2.0)), 0.0)
    assert solve(few).status == "INFEASIBLE" and brute_force(few) is None
    # 2 GiB fixed per rank, but 1.5 GiB usable on each pool
    small = PoolInstance(6, 2, 4, 8, (pool("a", 64, 1.0, const_gib=2.0, usable_gib=1.5),
                                      pool("b", 64, 2.0, const_gib=2.0, usable_gib=1.5)), 0.0)
    assert solve(small).status == "INFEASIBLE" and brute_force(small) is None


def test_twice_as_fast_pool_gets_twice_the_layers():
    # Fast pool 1 ms per layer, slow 2 ms, room for one stage each; p = 2, L = 6, m = 4, free links.
    # Fast n, slow 6 - n: T = (n, 2 (6 - n)) ms; equal at n = 4: T = (4, 4), and the step is
    # (m - 1) max T + sum T = 3 x 4 + 8 = 20 ms (n = 3: T = (3, 6): 3 x 6 + 9 = 27; n = 5: (5, 2): 22).
    inst = PoolInstance(6, 2, 4, 8, (pool("fast", 8, 1.0), pool("slow", 8, 2.0)), 0.0)
    r = solve(inst)
    assert r.status == "OPTIMAL"
    assert dict(zip(r.stage_pools, r.stage_layers)) == {"fast": 4, "slow": 2}
    assert r.step_s == pytest.approx(20 * MS)
    assert r.objective == 20_000  # unit: the fast layer / 1000 = 1 us


def test_memory_caps_the_fast_pool():
    # As above, but a fast rank holds at most 3 layers (1 GiB each, 3 GiB usable): fast 3, slow 3,
    # T = (3, 6) ms, step = 3 x 6 + 9 = 27 ms (fast 2, slow 4: T = (2, 8), 3 x 8 + 10 = 34).
    inst = PoolInstance(6, 2, 4, 8, (pool("fast", 8, 1.0, held_gib=1.0, usable_gib=3.0),
                                     pool("slow", 8, 2.0, held_gib=1.0, usable_gib=10.0)), 0.0)
    r = solve(inst)
    assert dict(zip(r.stage_pools, r.stage_layers)) == {"fast": 3, "slow": 3}
    assert r.step_s == pytest.approx(27 * MS)


@pytest.mark.parametrize("capacity,pools,step_ms", [
    # Two equal pools, 1 ms per layer; crossing costs 2 x 0.5 ms (activation + gradient), within 0.
    # Room for both stages in pool a: T = (2, 2), step = 2 x 2 + 4 = 8 ms, no crossing.
    (16, ("a", "a"), 8.0),
    # One stage per pool: T = (n0 + 1, 4 - n0); n0 = 1: (2, 3) or n0 = 2: (3, 2): 2 x 3 + 5 = 11 ms.
    (8, ("a", "b"), 11.0),
])
def test_crossing_is_priced(capacity, pools, step_ms):
    inst = PoolInstance(4, 2, 3, 8, (pool("a", capacity, 1.0), pool("b", 8, 1.0)), 0.5 * MS)
    r = solve(inst)
    # (a, b) and (b, a) tie: the same step, one crossing, the same tie-break (p Q crossings + sum of
    # pool indices = 4 + 1 either way); the solver's pick between them is not the point
    assert sorted(r.stage_pools) == sorted(pools)
    assert r.step_s == pytest.approx(step_ms * MS)


# --- specs --------------------------------------------------------------------------------------

MIXED = """\
name: mix
pools:
  - name: h100
    gpu: h100-sxm-80gb
    nodes: 2
    node: {gpus: 8, nvlink_gbps: 450, network_gbps: 50}
  - name: a100
    gpu: a100-sxm-80gb
    nodes: 3
    node: {gpus: 8, nvlink_gbps: 300, network_gbps: 25}
"""


def _paths(exc) -> list[str]:
    errors = exc.errors if isinstance(exc, SpecErrors) else [exc]
    return [e.path for e in errors]


def _write(tmp_path, text):
    f = tmp_path / "c.yaml"
    f.write_text(text)
    return f


def test_pools_cluster_loads(tmp_path):
    c = load_cluster(_write(tmp_path, MIXED))
    assert c.pool_names == ("h100", "a100")
    # the top-level gpu/nodes/node are the first pool's
    assert (c.gpu.name, c.nodes, c.node.gpus, c.total_gpus) == ("h100-sxm-80gb", 2, 8, 16)
    a100 = c.pool_cluster("a100")
    assert (a100.gpu.name, a100.nodes, a100.total_gpus, a100.node.network_gbps) == ("a100-sxm-80gb", 3, 24, 25)
    assert a100.pools is None and a100.power == c.power
    assert c.inter_pool_bandwidth_gbps == 25  # default: the slower pool's network_gbps
    with pytest.raises(ValueError, match="unknown pool"):
        c.pool_cluster("b200")


def test_pools_in_python():
    node = NodeSpec(gpus=8, nvlink_gbps=450, network_gbps=50)
    gpu = load_cluster("dgx-h100-1024").gpu
    c = ClusterSpec(name="x", pools=[PoolSpec(name="p", gpu=gpu, nodes=1, node=node)], inter_pool_gbps=10)
    assert c.gpu.name == "h100-sxm-80gb" and c.inter_pool_bandwidth_gbps == 10


def test_single_pool_form_still_loads():
    c = load_cluster("dgx-h100-1024")
    assert c.pools is None and c.pool_names == ("dgx-h100-1024",) and c.pool_cluster("dgx-h100-1024") is c


@pytest.mark.parametrize("old,new,path", [
    ("gpu: a100-sxm-80gb", "gpu: a100-sxm-80gbx", "pools.1.gpu"),  # unknown GPU preset
    ("nodes: 3", "nodes: 0", "pools.1.nodes"),
    ("name: a100", "name: h100", "pools"),  # duplicate names
    ("name: mix", "name: mix\nnodes: 5", "nodes"),  # not the first pool's
    ("name: mix", "name: mix\ninter_pool_gbps: 0", "inter_pool_gbps"),
])
def test_bad_pool_names_the_field(tmp_path, old, new, path):
    with pytest.raises((SpecError, SpecErrors)) as info:
        load_cluster(_write(tmp_path, MIXED.replace(old, new, 1)))
    assert _paths(info.value) == [path]
    assert str(tmp_path / "c.yaml") in str(info.value)


def test_unknown_gpu_of_first_pool_is_one_error(tmp_path):
    with pytest.raises((SpecError, SpecErrors)) as info:
        load_cluster(_write(tmp_path, MIXED.replace("gpu: h100-sxm-80gb", "gpu: h100-sxm-80g")))
    assert _paths(info.value) == ["pools.0.gpu"]
    assert "did you mean 'h100-sxm-80gb'" in str(info.value)


def test_shipped_mixed_cluster():
    c = load_cluster("mixed-h100-a100")
    assert c.pool_names == ("h100", "a100")
    # 64 DGX nodes of 8 GPUs per pool
    assert [c.pool_cluster(n).total_gpus for n in c.pool_names] == [512, 512]
    assert c.inter_pool_bandwidth_gbps == 25


def test_plan_mixed_on_the_shipped_cluster():
    from planner.specs.loading import load_model
    from planner.layout.space import Layouts, single_layout

    model = load_model("gpt3-175b")
    # Two 768-GPU candidates. (The second was tp 8, pp 16, dp 6: its 16-stage placement took CP-SAT
    # 30 s; 12 stages of 64 GPUs, 8 on the H100s and 4 on the A100s, solve in under a second.)
    rows = Layouts.concat([single_layout(tp=8, pp=8, dp=12, micro_batch=1, num_microbatches=128),
                           single_layout(tp=8, pp=12, dp=8, micro_batch=1, num_microbatches=192)])
    plan = plan_mixed(model, load_cluster("mixed-h100-a100"), rows, memory_headroom=0.1)
    assert plan.row in (0, 1) and len(plan.results) == 2
    assert all(p.status == "OPTIMAL" for p in plan.results)
    # the plan is the candidate with the shorter step
    assert plan.result is plan.results[plan.row]
    assert plan.result.step_s == min(p.step_s for p in plan.results) < max(p.step_s for p in plan.results)
    r = plan.result
    assert r.status == "OPTIMAL" and len(r.stage_pools) == int(rows.pp[plan.row]) and sum(r.stage_layers) == 96
    # 96 GPUs per stage at tp 8, dp 12 (64 at dp 8): 8 (12) stages need 768 GPUs, more than a pool's 512
    for placed in plan.results:
        assert set(placed.stage_pools) == {"h100", "a100"} and sum(placed.stage_layers) == 96
        # an H100 layer is faster than an A100 layer, so each H100 rank holds at least as many layers
        h = [n for q, n in zip(placed.stage_pools, placed.stage_layers) if q == "h100"]
        a = [n for q, n in zip(placed.stage_pools, placed.stage_layers) if q == "a100"]
        assert min(h) >= max(a)
