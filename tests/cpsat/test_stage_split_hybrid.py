"""The stage split of hybrid models (a stage costs what its kinds of layer cost: the split is a set of cut
points along the pattern) and of the V schedules (the layers' order follows the path, the loss on rank 0),
against brute force, by hand, and against the cost models (planner/cpsat/stage_split.py)."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from planner.costs.context import job_context
from planner.costs.memory import memory_per_rank
from planner.costs.pipeline import rank_time_s
from planner.costs.pipeline_ranks import inflight_chunks, layout_default_split, split_ranks
from planner.cpsat.stage_split import (SplitInstance, balanced_chunks, fits_integer, instance, integer_peak_kib,
                                       integer_times, solve)
from planner.estimate import layout_of
from planner.specs.loading import load_cluster, load_model

GIB = 2**30
MIB = 2**20


def _compositions(L, S):
    for cut in itertools.combinations(range(L + S - 1), S - 1):
        edges = (-1,) + cut + (L + S - 1,)
        yield [edges[k + 1] - edges[k] - 1 for k in range(S)]


def _brute(inst: SplitInstance):
    best = None
    least = 1 if inst.layers >= inst.stages else 0
    for split in _compositions(inst.layers, inst.stages):
        if min(split) < least or not balanced_chunks(inst, split) or not fits_integer(inst, split):
            continue
        key = (int(integer_times(inst, split).max()), integer_peak_kib(inst, split))
        best = key if best is None or key < best else best
    return best


def _tighten(inst: SplitInstance, tight: float) -> SplitInstance:
    """The usable memory between the lightest and the heaviest split's peak, so that memory binds."""
    peaks = sorted(integer_peak_kib(inst, s) for s in _compositions(inst.layers, inst.stages))
    return SplitInstance(**{**inst.__dict__, "usable_bytes": peaks[int(tight * (len(peaks) - 1))] * 1024.0})


def _hybrid(rng, p, v, L, chars, v_shape, tight) -> SplitInstance:
    kinds = tuple(chars)
    pattern = "".join(rng.choice(list(chars), size=L))
    return _tighten(SplitInstance(
        L, p, v, 0.0, 0.0, 1e-3 * float(rng.integers(0, 30)), (0.0, 0.0), (0.0, 0.0), 0.0,
        float(rng.integers(0, 40)) * MIB, float(rng.integers(0, 40)) * MIB, 1e12,
        tuple(np.zeros((1, v), dtype=np.int64) for _ in range(p)), v_shape=v_shape, pattern=pattern, kind_chars=kinds,
        t_kind_s=tuple(1e-3 * float(rng.integers(2, 40)) for _ in kinds),
        kind_bytes=tuple(tuple(float(rng.integers(1, 30)) * MIB for _ in kinds) for _ in range(p)),
        rank_const_bytes=tuple(float(rng.integers(900, 1100)) * MIB for _ in range(p))), tight)


@pytest.mark.parametrize("seed", range(14))
def test_hybrid_split_equals_brute_force(seed):
    rng = np.random.default_rng(100 + seed)
    p, v = [(2, 1), (3, 1), (4, 1), (2, 2), (3, 2), (2, 3), (2, 2)][seed % 7]
    v_shape = v == 2 and seed % 2 == 0
    L = int(rng.integers(p * v, p * v + 5))
    inst = _hybrid(rng, p, v, L, ["M-*", "MD*-", "M*"][seed % 3], v_shape, [0.3, 0.6, 1.0][seed % 3])
    expected = _brute(inst)
    result = solve(inst)
    if expected is None:
        assert result.status == "INFEASIBLE" and result.stage_layers is None
        return
    assert result.status == "OPTIMAL"
    assert result.objective == expected[0] and result.bound == expected[0]
    assert integer_peak_kib(inst, result.stage_layers) == expected[1]


@pytest.mark.parametrize("seed", range(8))
def test_v_split_equals_brute_force(seed):
    # dense and MoE layers (the first dense_layers dense, then every layer_every-th MoE) counted along
    # the V's path; the logits and the last stage's memory on rank 0
    rng = np.random.default_rng(200 + seed)
    p = [2, 3][seed % 2]
    L = int(rng.integers(2 * p, 2 * p + 5))
    m = 2 * p * int(rng.integers(1, 3))
    moe = seed % 2 == 1
    inst = SplitInstance(L, p, 2, 1e-3 * float(rng.integers(5, 15)), 1e-3 * float(rng.integers(10, 30)) if moe else 0.0,
                         1e-3 * float(rng.integers(0, 40)), (float(rng.integers(1, 9)) * MIB, float(rng.integers(1, 9)) * MIB if moe else 0.0),
                         (float(rng.integers(1, 9)) * MIB, float(rng.integers(1, 9)) * MIB if moe else 0.0), GIB,
                         float(rng.integers(0, 40)) * MIB, float(rng.integers(0, 40)) * MIB, 1e12,
                         tuple(inflight_chunks(p, 2, m, r) for r in range(p)), int(rng.integers(0, 3)) if moe else 0,
                         int(rng.integers(1, 3)) if moe else 0, v_shape=True)
    inst = _tighten(inst, [0.3, 0.6, 1.0][seed % 3])
    expected = _brute(inst)
    result = solve(inst)
    if expected is None:
        assert result.status == "INFEASIBLE"
        return
    assert result.status == "OPTIMAL" and result.objective == expected[0]
    assert integer_peak_kib(inst, result.stage_layers) == expected[1]


def test_hybrid_split_by_hand():
    # Pattern MM** on 2 ranks, a Mamba layer 10 ms, an attention layer 30 ms, no logits, memory never
    # binds. Splits (a, 4 - a): (1, 3) 10 | 10 + 60 = 70 ms; (2, 2) 20 | 60 ms; (3, 1) 20 + 30 = 50 | 30 ms.
    # The best is (3, 1) at 50 ms, where counting layers alone would keep (2, 2) (60 ms).
    inst = SplitInstance(4, 2, 1, 0.0, 0.0, 0.0, (0.0, 0.0), (0.0, 0.0), 0.0, 0.0, 0.0, 1e12,
                         (np.zeros((1, 1)), np.zeros((1, 1))), pattern="MM**", kind_chars=("M", "*"),
                         t_kind_s=(0.010, 0.030), kind_bytes=((1.0, 1.0), (1.0, 1.0)), rank_const_bytes=(0.0, 0.0))
    result = solve(inst, default=[2, 2])
    assert result.stage_layers == (3, 1)
    assert result.t_max_s == pytest.approx(0.050) and result.default_t_max_s == pytest.approx(0.060)
    # Reversed, **MM: (1, 3) 30 | 30 + 20 = 50 ms is the best
    inst = SplitInstance(**{**inst.__dict__, "pattern": "**MM"})
    assert solve(inst).stage_layers == (1, 3)


def test_v_split_by_hand():
    # zb-v on 2 ranks, 4 stages along the path 0 1 2 3 = schedule indices 0 1 3 2 (chunk 1 of rank r is
    # path stage 3 - r): rank 0 holds path stages 0 and 3 and the logits. 8 layers of 10 ms, logits
    # 20 ms. Rank 0 with a + d layers runs 10 (a + d) + 20, rank 1 10 (b + c): the best is rank 0 with
    # 3 layers (50 ms) and rank 1 with 5 (50 ms); a rank's chunks differ by at most one layer but for
    # the path's first and last stage, so rank 1 holds 2 + 3 and rank 0 e.g. 1 + 2 or 2 + 1.
    inst = SplitInstance(8, 2, 2, 0.010, 0.0, 0.020, (1.0, 0.0), (1.0, 0.0), 0.0, 0.0, 0.0, 1e12,
                         tuple(inflight_chunks(2, 2, 4, r) for r in range(2)), v_shape=True)
    result = solve(inst)
    n = result.stage_layers
    assert n[0] + n[2] == 3 and n[1] + n[3] == 5 and result.t_max_s == pytest.approx(0.050)
    assert inst.end_stages == (0, 2) and inst.loss_rank == 0


@pytest.mark.parametrize("name,pp,gpus,tp", [("nemotron-h-56b", 4, 64, 4), ("qwen3-next-80b-a3b", 4, 128, 2)])
def test_hybrid_instance_is_the_cost_models(name, pp, gpus, tp):
    # The split problem's times and memory are the cost models' (pipeline.rank_time_s and
    # memory.memory_per_rank of split_ranks) for splits other than the default one
    model, cluster = load_model(name), load_cluster("dgx-h100-1024")
    given = dict(tp=tp, pp=pp, micro_batch=1, sequence_parallel=True, zero=1, recompute="none")
    if model.moe is not None:
        given["ep"] = 8
    lay = layout_of(model, gpus, given, gpus_said="test")
    job = job_context(model, cluster, lay)
    inst = instance(job, 80.0)
    default = layout_default_split(model, lay)
    L = model.layers
    for split in (default, [L // pp - 3] + [L // pp + 1] * (pp - 2) + [L - (L // pp - 3) - (L // pp + 1) * (pp - 2)]):
        ranks = split_ranks(model, lay, split)
        priced = job_context(model, cluster, lay, ranks)
        assert inst.rank_time_s(split) == pytest.approx(rank_time_s(priced.kinds, ranks)[:, 0], rel=1e-9)
        assert inst.rank_memory_bytes(split) == pytest.approx(memory_per_rank(priced).total[:, 0] * GIB, rel=1e-9)


def test_hybrid_search_and_estimate_agree_on_a_split():
    # estimate --stage-layers prices the split a search proposes (or the default) as the search did
    from planner.estimate import estimate_layout
    from planner.layout.space import SpaceLimits
    from planner.search import search

    model, cluster = load_model("nemotron-h-56b"), load_cluster("dgx-h100-1024")
    found = search(model, cluster, gpus=64, top_k=3, space=SpaceLimits(pp=4))
    assert len(found.chosen) == 3
    for i in found.chosen[:3]:
        row = found.scores.layouts.row(int(i))
        given = {k: row[k] for k in ("tp", "pp", "cp", "vpp", "micro_batch", "recompute", "sequence_parallel", "zero", "schedule")}
        est = estimate_layout(model, cluster, gpus=64, stage_layers=list(found.stage_layers(i)), **given)
        assert est.step_time_s == pytest.approx(float(found.scores.step_time_s[i]), rel=1e-9)
