"""The layout choice is a lexicographic sort (planner/choose.py): checked against Python's sort."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.choose import choose


def test_ties_fall_to_the_next_key():
    # objective 1, 1, 2: rows 0 and 1 tie, the second key (5 > 3) puts row 1 first
    r = choose([np.array([1.0, 1.0, 2.0]), np.array([5.0, 3.0, 0.0])], 2)
    assert r.status == "OPTIMAL" and r.chosen.tolist() == [1, 0]
    assert r.objective == r.bound == 1.0


def test_empty_is_infeasible():
    r = choose([np.zeros(0)], 3)
    assert r.status == "INFEASIBLE" and r.chosen.size == 0


def test_k_larger_than_rows_returns_all_in_order():
    assert choose([np.array([30, 10, 20])], 5).chosen.tolist() == [1, 2, 0]


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    rows=st.lists(st.tuples(st.integers(0, 5), st.floats(0, 10, allow_nan=False), st.integers(0, 3)),
                  min_size=1, max_size=60),
    k=st.integers(min_value=1, max_value=6),
)
def test_choice_equals_python_sort(rows, k):
    keys = [np.array([r[j] for r in rows]) for j in range(3)] + [np.arange(len(rows))]
    expected = sorted(range(len(rows)), key=lambda i: (rows[i][0], rows[i][1], rows[i][2], i))[:k]
    assert choose(keys, k).chosen.tolist() == expected


# --- the tie: the simplest row within TIE_PCT of the best ------------------------------------------

def test_the_simplest_within_the_window_is_named_and_a_slower_or_refused_one_is_not():
    from planner.choose import simplest_within
    # rows 0..3: 10.0 s (best, 64 GPUs per replica), 10.2 s (+2 %, 8), 10.4 s (+4 %, 1), 9.0 s (1, refused)
    time_s = np.array([10.0, 10.2, 10.4, 9.0])
    replica = np.array([64, 8, 1, 1])
    feasible = np.array([0, 1, 2])  # row 3 is faster and simplest, but infeasible: never named
    # 3 % of 10.0 s is 10.3 s: rows 0 and 1 tie; row 1 is simpler (8 < 64).
    assert simplest_within(time_s, feasible, 0, 3.0, _keys(replica)) == 1
    # 5 %: 10.5 s takes row 2 in, simpler still (1 GPU per replica).
    assert simplest_within(time_s, feasible, 0, 5.0, _keys(replica)) == 2
    # 1 %: 10.1 s: only the best itself, so nothing to name.
    assert simplest_within(time_s, feasible, 0, 1.0, _keys(replica)) is None


def test_equally_simple_rows_go_to_the_faster_and_the_best_when_it_is_simplest():
    from planner.choose import simplest_within
    time_s = np.array([10.0, 10.1, 10.2])
    rows = np.arange(3)
    # rows 1 and 2 equally simple (8): the faster, row 1.
    assert simplest_within(time_s, rows, 0, 3.0, _keys(np.array([64, 8, 8]))) == 1
    # the best is the simplest: None (the search shows no extra line).
    assert simplest_within(time_s, rows, 0, 3.0, _keys(np.array([1, 8, 8]))) is None


def test_simplicity_counts_gpus_per_replica_before_pipeline_stages():
    from planner.choose import simplicity_keys
    from planner.layout.space import single_layout
    a = single_layout(dp=8, tp=8, pp=1, cp=1, micro_batch=1, num_microbatches=1)  # 8 GPUs per replica, one stage
    b = single_layout(dp=16, tp=2, pp=2, cp=1, micro_batch=1, num_microbatches=1)  # 4 GPUs per replica, two stages
    keys = [np.concatenate([np.atleast_1d(ka), np.atleast_1d(kb)])
            for ka, kb in zip(simplicity_keys(a), simplicity_keys(b))]
    assert keys[0].tolist() == [8, 4] and keys[1].tolist() == [1, 2]


def test_as_simple_goes_to_the_faster_then_to_the_first_row():
    from planner.choose import simplest_within
    # rows 1 and 2 are as simple on the four simplicity keys (8 GPUs a replica, pp 2, vpp 1, ep 1):
    # the faster, row 1 (10.1 s against 10.2 s), whichever comes first.
    keys = _keys(np.array([64, 8, 8]), np.array([4, 2, 2]), np.array([1, 1, 1]), np.array([1, 1, 1]))
    assert simplest_within(np.array([10.0, 10.2, 10.1]), np.arange(3), 0, 3.0, keys) == 2
    assert simplest_within(np.array([10.0, 10.1, 10.2]), np.arange(3), 0, 3.0, keys) == 1
    # equal times too: the first row (a stable sort), so the answer is the same every run
    assert simplest_within(np.array([10.0, 10.1, 10.1]), np.arange(3), 0, 3.0, keys) == 1


def _keys(*arrays):
    """simplest_within's `simplicity`: the given keys of the close rows."""
    return lambda close: [a[close] for a in arrays]
