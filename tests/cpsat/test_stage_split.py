"""The stage-split CP-SAT model (planner/cpsat/stage_split.py) against brute force, the schedule's
in-flight counts by hand, and the Llama 3 405B split."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from planner.costs.context import job_context
from planner.costs.pipeline_ranks import default_split, inflight_chunks, split_ranks
from planner.estimate import layout_of
from planner.specs.loading import load_cluster, load_model
from planner.cpsat.stage_split import (SplitInstance, balanced_chunks, fits_integer, integer_peak_kib, integer_times,
                                 instance, solve)

GIB = 2**30


def test_inflight_chunks_by_hand():
    # 1F1B, p = 4, m = 8: rank 0 runs 3 warm-up forwards, then holds 4 micro-batches; rank 3 holds 1
    assert inflight_chunks(4, 1, 8, 0).tolist() == [[4]]
    assert inflight_chunks(4, 1, 8, 3).tolist() == [[1]]
    # interleaved, p = 2, v = 2, m = 2, rank 0: warm-up 2 (2 - 0 - 1) + (2 - 1) 2 = 4 = m v: every
    # forward first; forward units run chunks (u // 2) % 2 = 0, 0, 1, 1 -> [2, 2] in flight
    assert inflight_chunks(2, 2, 2, 0).tolist() == [[2, 2]]
    # rank 1: warm-up 2 forwards (chunks 0, 0); forward 2 (chunk 1) -> [2, 1]; then backward 0 runs
    # chunk v - 1 - 0 = 1 and forward 3 (chunk 1) -> [2, 2] - [0, 1] = [2, 1]
    assert inflight_chunks(2, 2, 2, 1).tolist() == [[2, 1]]


@pytest.mark.parametrize("p,v,m", [(4, 2, 8), (4, 3, 12), (8, 2, 16), (2, 4, 6)])
def test_inflight_total_is_korthikanti_count(p, v, m):
    # the largest total in flight is min(m v, 2 (p - r - 1) + (v - 1) p + 1) chunks (Korthikanti
    # et al. 2022 Sec. 4.2.3 for rank 0; Megatron-LM's warm-up count plus the one at work)
    for r in range(p):
        expected = min(m * v, 2 * (p - r - 1) + (v - 1) * p + 1)
        assert int(inflight_chunks(p, v, m, r).sum(axis=1).max()) == expected


def _instance(rng, p, v, L, moe=False, tight=1.0) -> SplitInstance:
    m = int(rng.integers(p, 3 * p))
    m -= m % p if v > 1 else 0
    peaks = tuple(inflight_chunks(p, v, m, r) for r in range(p))
    act = (float(rng.integers(1, 9)) * 2**20, float(rng.integers(1, 9)) * 2**20 if moe else 0.0)
    held = (float(rng.integers(1, 9)) * 2**20, float(rng.integers(1, 9)) * 2**20 if moe else 0.0)
    inst = SplitInstance(L, p, v, 1e-3 * float(rng.integers(5, 15)), 1e-3 * float(rng.integers(10, 30)) if moe else 0.0,
                         1e-3 * float(rng.integers(0, 20)), held, act, 2**30, float(rng.integers(0, 40)) * 2**20,
                         float(rng.integers(0, 40)) * 2**20, 1e12, peaks, int(rng.integers(0, 3)) if moe else 0,
                         int(rng.integers(1, 3)) if moe else 0)
    # the usable memory between the lightest and the heaviest split's peak, so that memory binds
    splits = list(_compositions(L, p * v))
    peaks_kib = sorted(integer_peak_kib(inst, s) for s in splits)
    usable = peaks_kib[int(tight * (len(peaks_kib) - 1))] * 1024.0
    return SplitInstance(**{**inst.__dict__, "usable_bytes": usable})


def _compositions(L, S):
    for cut in itertools.combinations(range(L + S - 1), S - 1):
        edges = (-1,) + cut + (L + S - 1,)
        yield [edges[k + 1] - edges[k] - 1 for k in range(S)]


def _brute(inst: SplitInstance):
    best = None
    least = 1 if inst.layers >= inst.stages else 0  # no empty stage when every stage can hold a layer
    for split in _compositions(inst.layers, inst.stages):
        if min(split) < least or not balanced_chunks(inst, split) or not fits_integer(inst, split):
            continue
        key = (int(integer_times(inst, split).max()), integer_peak_kib(inst, split))
        best = key if best is None or key < best else best
    return best


@pytest.mark.parametrize("seed", range(12))
def test_split_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    p, v = [(2, 1), (3, 1), (4, 1), (2, 2), (2, 3), (3, 2)][seed % 6]
    L = int(rng.integers(p * v - 2 if v > 1 else p, p * v + 5))
    inst = _instance(rng, p, v, max(L, 2), moe=seed % 2 == 1, tight=[0.3, 0.6, 1.0][seed % 3])
    expected = _brute(inst)
    result = solve(inst)
    if expected is None:
        assert result.status == "INFEASIBLE" and result.stage_layers is None
        return
    assert result.status == "OPTIMAL"
    assert result.objective == expected[0] and result.bound == expected[0]
    assert integer_peak_kib(inst, result.stage_layers) == expected[1]


def test_too_little_memory_is_infeasible():
    rng = np.random.default_rng(0)
    inst = _instance(rng, 2, 1, 6)
    inst = SplitInstance(**{**inst.__dict__, "usable_bytes": inst.const_bytes / 2})
    assert solve(inst).status == "INFEASIBLE"


def test_time_balance_by_hand():
    # 2 ranks, 5 layers of 10 ms, logits 15 ms on the last rank, memory never binds. Splits (a, 5 - a):
    # rank times 10 a and 10 (5 - a) + 15: a = 4 gives max(40, 25) = 40, a = 3 gives max(30, 35) = 35,
    # a = 2 gives max(20, 45): the best is 3 + 2 at 35 ms, where the default (3, 2) already is.
    inst = SplitInstance(5, 2, 1, 0.010, 0.0, 0.015, (1.0, 0.0), (1.0, 0.0), 0.0, 0.0, 0.0, 1e12,
                         (np.array([[2]]), np.array([[1]])))
    result = solve(inst)
    assert result.stage_layers == (3, 2) and result.t_max_s == pytest.approx(0.035)
    # logits of 35 ms: (4, 1) gives max(40, 45) = 45, (3, 2) gives max(30, 55) = 55: one layer moves
    inst = SplitInstance(**{**inst.__dict__, "t_logits_s": 0.035})
    assert solve(inst).stage_layers == (4, 1) and solve(inst).t_max_s == pytest.approx(0.045)


def test_no_empty_stage_by_hand():
    # 3 ranks, 4 layers of 10 ms, logits 100 ms on the last rank, memory never binds. An empty last
    # stage, (2, 2, 0), would give the slowest rank max(20, 20, 0 + 100) = 100 ms; every stage holding
    # a layer, the last rank runs at least 10 + 100 = 110 ms, reached by (2, 1, 1) or (1, 2, 1).
    inst = SplitInstance(4, 3, 1, 0.010, 0.0, 0.100, (1.0, 0.0), (1.0, 0.0), 0.0, 0.0, 0.0, 1e12,
                         (np.array([[3]]), np.array([[2]]), np.array([[1]])))
    result = solve(inst)
    assert min(result.stage_layers) == 1 and sum(result.stage_layers) == 4
    assert result.stage_layers[-1] == 1 and result.t_max_s == pytest.approx(0.110)


def test_search_proposes_no_empty_stage():
    # llama3.1-70b on 200 GPUs proposed pp 25 with two empty stages ([3 4x7 0 4x4 3x11 0]); 80
    # layers over 25 stages: every stage can hold one, so none may be empty
    from planner.search import search

    result = search(load_model("llama3.1-70b"), load_cluster("dgx-h100-1024"), gpus=200, top_k=3)
    for i in result.chosen:
        assert min(result.stage_layers(i)) >= 1, result.stage_layers(i)
    assert any(int(result.scores.layouts.pp[i]) == 25 for i in result.chosen)  # the case that had them


def test_llama3_405b_split_is_the_published_one():
    # Llama 3 405B on 16 ranks without interleaving: 126 layers = 8 x 14 + 7 x 2. Every split has a
    # rank of 8 layers, so the slowest rank is 8 layers whichever ranks hold 7; the lower memory
    # peak moves the light ranks to the first (embedding, most micro-batches in flight) and the last
    # (logits): one layer fewer on the first and the last stage (Dubey et al. 2024 Sec. 3.3.2).
    model, cluster = load_model("llama3-405b"), load_cluster("dgx-h100-16384")
    lay = layout_of(model, 8192, dict(tp=8, pp=16, micro_batch=1, sequence_parallel=True, zero=1, recompute="full"),
                    gpus_said="test")
    result = solve(instance(job_context(model, cluster, lay), 76.0), default=default_split(model, 16, 1))
    assert result.status == "OPTIMAL"
    assert result.stage_layers == (7,) + (8,) * 14 + (7,)


def test_split_ranks_counts_layers_and_moe():
    # DeepSeek-V3: 61 layers, the first 3 dense. Split [5, 3, 3, 4 x 12, 2] on 16 ranks: rank 0
    # holds layers 0-4 (3 dense, 2 MoE), rank 1 layers 5-7 (3 MoE), the last rank 2 MoE layers.
    model = load_model("deepseek-v3")
    lay = layout_of(model, 1024, dict(tp=2, pp=16, cp=2, micro_batch=1, sequence_parallel=True, zero=1, ep=8),
                    gpus_said="test")
    split = [5, 3, 3] + [4] * 12 + [2]
    ranks = split_ranks(model, lay, split)
    assert ranks.layers[:, 0].tolist() == split
    assert ranks.moe_layers[0, 0] == 2 and ranks.moe_layers[1, 0] == 3 and ranks.moe_layers[15, 0] == 2
    # 1F1B: rank r holds min(m, p - r) micro-batches of its layers at its peak: rank 0 16 x 5 = 80
    assert ranks.in_flight[0, 0] == 16 * 5 and ranks.in_flight[15, 0] == 1 * 2
