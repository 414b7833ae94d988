"""CP-SAT choice against brute force: the model must return the true optimum of the scored space."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.solver import integer_costs, objective_terms, solve


def brute_force_top_k(terms: np.ndarray, k: int) -> list[int]:
    return sorted(range(terms.size), key=lambda i: (terms[i], i))[:k]


def test_integer_costs_are_ppm_of_the_best():
    # best 2.0 s -> 1_000_000; 3.0 s -> 1.5 x; 2.000001 s -> 1_000_000.5 rounds to even 1_000_000
    assert integer_costs(np.array([2.0, 3.0, 2.5])).tolist() == [1_000_000, 1_500_000, 1_250_000]


def test_objective_terms_break_ties_by_rank():
    # Two rows with equal cost: the one with the smaller tie-break rank must win.
    terms = objective_terms(np.array([1.0, 1.0, 2.0]), np.array([2, 0, 1]))
    # n = 3 ranks: 1_000_000*3 + 2, 1_000_000*3 + 0, 2_000_000*3 + 1
    assert terms.tolist() == [3_000_002, 3_000_000, 6_000_001]
    assert solve(terms, 1).chosen.tolist() == [1]


def test_empty_is_infeasible():
    r = solve(np.zeros(0, dtype=np.int64), 3)
    assert r.status == "INFEASIBLE" and r.chosen.size == 0


def test_k_larger_than_rows_returns_all_in_order():
    r = solve(np.array([30, 10, 20]), 5)
    assert r.status == "OPTIMAL" and r.chosen.tolist() == [1, 2, 0]


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    costs=st.lists(st.floats(min_value=0.01, max_value=1e4, allow_nan=False), min_size=1, max_size=60),
    k=st.integers(min_value=1, max_value=6),
)
def test_cpsat_equals_brute_force(costs, k):
    cost = np.array(costs)
    rank = np.random.default_rng(len(costs)).permutation(cost.size)
    terms = objective_terms(cost, rank)
    result = solve(terms, k)
    assert result.status == "OPTIMAL"
    assert result.chosen.tolist() == brute_force_top_k(terms, k)
    assert result.objective == int(terms[result.chosen].sum())


def test_deterministic():
    terms = objective_terms(np.random.default_rng(0).uniform(1, 2, 500), np.arange(500))
    assert solve(terms, 5).chosen.tolist() == solve(terms, 5).chosen.tolist()
