"""The layout-space rules, checked on every enumerated row (property tests over random shapes)."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.layout.space import SpaceLimits, divisors, enumerate_layouts


def test_divisors():
    assert divisors(12) == [1, 2, 3, 4, 6, 12]
    assert divisors(1) == [1]


@settings(max_examples=80, deadline=None, derandomize=True)
@given(
    gpus=st.sampled_from([1, 2, 4, 6, 8, 12, 16, 24, 32, 64]),
    layers=st.integers(1, 48),
    heads_kv=st.sampled_from([(8, 8), (12, 4), (16, 2), (32, 8), (6, 6)]),
    global_batch=st.sampled_from([1, 4, 6, 16, 24, 64, 96]),
)
def test_every_row_obeys_the_rules(gpus, layers, heads_kv, global_batch):
    heads, kv = heads_kv
    lay = enumerate_layouts(gpus=gpus, layers=layers, heads=heads, kv_heads=kv, global_batch=global_batch)
    if not len(lay):
        return
    assert np.all(lay.dp * lay.tp * lay.pp * lay.cp == gpus) and np.all(lay.cp == 1)  # seq_len unknown: no cp
    assert np.all(heads % lay.tp == 0) and np.all(kv % lay.tp == 0)
    assert np.all(lay.pp <= layers)
    assert np.all(lay.dp * lay.micro_batch * lay.num_microbatches == global_batch)
    inter = lay.vpp > 1
    assert np.all(lay.pp[inter] >= 2)
    assert np.all(lay.num_microbatches[inter] % lay.pp[inter] == 0)
    # the virtual stages take the layers evenly or with at most two missing (embedding and loss)
    stages = lay.pp[inter] * lay.vpp[inter]
    assert np.all(-(-layers // stages) * stages - layers <= 2)
    assert np.all(lay.tp[lay.sequence_parallel == 1] > 1)
    assert np.all(lay.dp[lay.zero > 0] > 1)
    rows = np.stack([lay.dp, lay.tp, lay.pp, lay.micro_batch, lay.vpp, lay.recompute, lay.sequence_parallel, lay.zero])
    assert np.unique(rows, axis=1).shape[1] == len(lay), "duplicate layouts"


def test_counts_for_a_small_case_by_hand():
    # 4 GPUs, 4 layers, 4 heads, global batch 4, micro-batch <= 32.
    # (dp,tp,pp) with dp | 4: (1,1,4) (1,2,2) (1,4,1) (2,1,2) (2,2,1) (4,1,1) (1,4,1)... enumerate by hand:
    #   tp=1: pp in {1,2,4} -> dp 4,2,1 ; tp=2: pp in {1,2} -> dp 2,1 ; tp=4: pp=1 -> dp 1
    # micro-batches: divisors of 4/dp; vpp: divisors of 4/pp allowed when m % pp == 0 and pp >= 2;
    # recompute x3; sp x2 if tp>1; zero x4 if dp>1.
    lay = enumerate_layouts(gpus=4, layers=4, heads=4, kv_heads=4, global_batch=4)
    # tp1 pp1 dp4: mb {1}, vpp {1} -> 1*3*1*4 = 12
    # tp1 pp2 dp2: mb {1,2}; vpp {1,2} needs m%2==0: m=2 (mb1) ok, m=1 (mb2) no -> (mb1: 2 vpps, mb2: 1) = 3 -> 3*3*4 = 36
    # tp1 pp4 dp1: mb {1,2,4}; m = 4,2,1; vpp in {1} (4/4 = 1) -> 3 -> 3*3 = 9
    # tp2 pp1 dp2: mb {1,2} -> 2*3*2*4 = 48
    # tp2 pp2 dp1: mb {1,2,4}: m = 4,2,1; vpp {1,2}: m%2==0 for mb1, mb2 -> 2+2+1 = 5 -> 5*3*2 = 30
    # tp4 pp1 dp1: mb {1,2,4} -> 3*3*2 = 18
    assert len(lay) == 12 + 36 + 9 + 48 + 30 + 18


def test_fixed_dimension_limits_the_space():
    lay = enumerate_layouts(gpus=8, layers=8, heads=8, kv_heads=8, global_batch=16, limits=SpaceLimits(tp=2))
    assert set(lay.tp.tolist()) == {2}


def test_uneven_layer_split_allows_nearly_even_chunks():
    # 10 layers on pp = 3: vpp from the divisors of 10 // 3 = 3 and ceil(10 / 3) = 4, keeping those
    # whose 3 vpp stages hold the layers evenly or two short: vpp 2 -> 6 stages x 2 = 12 (2 short),
    # vpp 3 -> 9 x 2 = 18 (8 short), vpp 4 -> 12 x 1 = 12 (2 short)
    lay = enumerate_layouts(gpus=3, layers=10, heads=4, kv_heads=4, global_batch=6)
    assert set(lay.vpp[lay.pp == 3].tolist()) == {1, 2, 4}
    # 7 layers on pp = 3: vpp 3 -> 9 stages of 1 is 2 short; vpp 2 -> 6 x 2 = 12 is 5 short
    assert set(enumerate_layouts(gpus=3, layers=7, heads=4, kv_heads=4, global_batch=6).vpp.tolist()) == {1, 3}
