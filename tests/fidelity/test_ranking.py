"""Ranking metrics of planner/fidelity/ranking.py, checked against numbers worked out by hand."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from planner.fidelity.ranking import (
    GroupRanking,
    _average_ranks,
    group_rows,
    rank_groups,
    regret,
    spearman_rho,
)


def test_perfect_order_gives_rho_one_even_when_not_linear():
    # ranks [1..5] on both sides, d = 0 everywhere: rho = 1 - 0 = 1 (Pearson of the raw values is < 1)
    assert spearman_rho([1, 2, 3, 4, 5], [1, 4, 9, 16, 25]) == pytest.approx(1.0)


def test_reversed_order_gives_rho_minus_one():
    # d = [4, 2, 0, -2, -4], sum d^2 = 40: rho = 1 - 6*40/(5*24) = 1 - 2 = -1
    assert spearman_rho([1, 2, 3, 4, 5], [50, 40, 30, 20, 10]) == pytest.approx(-1.0)


def test_one_swap_of_four():
    # measured ranks [2, 1, 3, 4]: d = [1, 1, 0, 0], sum d^2 = 2, rho = 1 - 6*2/(4*15) = 0.8
    assert spearman_rho([1.0, 2.0, 3.0, 4.0], [2.0, 1.0, 3.0, 4.0]) == pytest.approx(0.8)


def test_ties_get_average_ranks():
    # [3, 1, 3, 2]: the two 3s take positions 3 and 4, so both rank (3 + 4)/2 = 3.5
    assert _average_ranks(np.array([3.0, 1.0, 3.0, 2.0])).tolist() == [3.5, 1.0, 3.5, 2.0]


def test_rho_with_a_tie():
    # predicted ranks [1, 2.5, 2.5, 4], measured ranks [1, 2, 3, 4]; both have mean 2.5.
    # centred: [-1.5, 0, 0, 1.5] and [-1.5, -0.5, 0.5, 1.5]
    # sum of products = 2.25 + 0 + 0 + 2.25 = 4.5; sums of squares 4.5 and 5
    # rho = 4.5 / sqrt(4.5*5) = sqrt(0.9) = 0.94868 (lowest ranks [1, 2, 2, 4] would give 0.9234)
    assert spearman_rho([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(math.sqrt(0.9))


def test_rho_is_nan_when_undefined():
    assert math.isnan(spearman_rho([1.0], [2.0]))  # one item
    assert math.isnan(spearman_rho([], []))
    assert math.isnan(spearman_rho([1, 1, 1], [1, 2, 3]))  # constant prediction: no order to compare
    assert math.isnan(spearman_rho([1, 2, 3], [5, 5, 5]))  # constant measurement
    assert math.isnan(spearman_rho([1, float("nan"), 3], [1, 2, 3]))


def test_length_mismatch_is_an_error():
    with pytest.raises(ValueError):
        spearman_rho([1, 2, 3], [1, 2])
    with pytest.raises(ValueError):
        regret([1, 2, 3], [1, 2])


def test_regret_of_a_wrong_choice():
    # predicted fastest is index 1, measured 1.10 s; best measured is 1.00 s: 1.10/1.00 - 1 = 0.10
    assert regret([2.0, 1.0, 3.0], [1.00, 1.10, 1.05]) == pytest.approx(0.10)
    # a ratio, not a difference: 2.20/2.00 - 1 = 0.10 (2.20 - 2.00 would be 0.20)
    assert regret([2.0, 1.0, 3.0], [2.00, 2.20, 2.10]) == pytest.approx(0.10)


def test_regret_of_the_right_choice_is_zero():
    # predicted fastest is index 2, which is also measured fastest: 0.9/0.9 - 1 = 0
    assert regret([3.0, 2.0, 1.0], [1.2, 1.0, 0.9]) == 0.0


def test_regret_takes_the_first_of_tied_predictions():
    # indices 0 and 1 tie at 1.0; the first (measured 1.2 s) is taken: 1.2/1.0 - 1 = 0.2, not 0
    assert regret([1.0, 1.0, 2.0], [1.2, 1.0, 1.5]) == pytest.approx(0.2)


def test_group_rows_keeps_groups_of_three_in_first_seen_order():
    keys = ["b", "a", "b", "c", "a", "b", "a", "c"]
    # b: rows 0, 2, 5 (seen first); a: rows 1, 4, 6; c has two rows and is dropped
    groups = group_rows(keys)
    assert [g.tolist() for g in groups] == [[0, 2, 5], [1, 4, 6]]


def test_rank_groups():
    keys = [("x", 8), ("y", 8), ("x", 8), ("y", 8), ("x", 8), ("y", 8), ("z", 8)]
    predicted = [1.0, 3.0, 2.0, 2.0, 3.0, 1.0, 5.0]
    measured = [1.0, 1.0, 2.0, 1.05, 3.0, 1.10, 5.0]
    out = rank_groups(keys, predicted, measured)
    # ("x", 8): rows 0, 2, 4, same order on both sides: rho 1, chosen row 0 is the fastest: regret 0
    # ("y", 8): rows 1, 3, 5, predicted [3, 2, 1] vs measured [1.0, 1.05, 1.10]: reversed, rho -1;
    #           the chosen row 5 measured 1.10 against 1.00: regret 0.10. ("z", 8) has one row.
    assert [(g.key, g.n) for g in out] == [(("x", 8), 3), (("y", 8), 3)]
    assert out[0].rho == pytest.approx(1.0) and out[0].regret == 0.0
    assert out[1].rho == pytest.approx(-1.0) and out[1].regret == pytest.approx(0.10)
    assert len(rank_groups(keys, predicted, measured, min_size=1)) == 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        out[0].rho = 0.0  # type: ignore[misc]
    assert isinstance(out[0], GroupRanking)


def test_rank_groups_rejects_keys_of_the_wrong_length():
    with pytest.raises(ValueError):
        rank_groups(["a", "a"], [1, 2, 3], [1, 2, 3])
