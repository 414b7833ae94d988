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
