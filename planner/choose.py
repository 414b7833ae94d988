"""Choosing among independent scored rows is a sort; CP-SAT is for coupled choices.

A search scores every layout as an independent row: no constraint ties two rows together, so the
best K under an ordered objective are a lexicographic sort of the feasible rows (the objective,
then a second figure, then fewest GPUs, then the tie-break rank: smaller tp, then pp, micro-batch,
...; all distinct, so the order is total and the same every run). A CP-SAT model that picked K
Booleans with a weighted sum returned exactly this order and nothing more. CP-SAT models live in
planner/cpsat/, where choices are coupled.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

METHOD = "lexicographic sort"


@dataclass(frozen=True)
class SolveResult:
    status: str  # OPTIMAL (the sort is exact) | INFEASIBLE (no row)
    chosen: np.ndarray  # indices into the rows given, best first
    objective: float | None  # the best row's objective figure
    bound: float | None  # equal to it: a sort leaves no gap
    wall_s: float
    method: str = METHOD


def choose(keys: list[np.ndarray], k: int) -> SolveResult:
    """The best `k` rows in lexicographic order of `keys` (most significant first; all smaller-is-better)."""
    started = time.perf_counter()
    n = keys[0].size if keys else 0
    if n == 0:
        return SolveResult("INFEASIBLE", np.zeros(0, dtype=np.int64), None, None, time.perf_counter() - started)
    order = np.lexsort(tuple(reversed([np.asarray(x) for x in keys])))[:k]
    best = float(keys[0][order[0]])
    return SolveResult("OPTIMAL", order.astype(np.int64), best, best, time.perf_counter() - started)


def contenders(first: np.ndarray, k: int) -> np.ndarray:
    """Positions of the rows that can be among the best `k` in any lexicographic order whose most
    significant key is `first` (smaller first): those at most its k-th smallest value, ties kept.
    Sorting only these picks the same rows (in row order, so ties keep their order), and a full
    space has few: sorting every feasible row took longer than scoring one cost term."""
    first = np.asarray(first)
    if k <= 0 or first.size <= k:
        return np.arange(first.size)
    kth = np.partition(first, k - 1)[k - 1]
    if np.isnan(kth):  # fewer than k numbers: NaN sorts last, keep everything
        return np.arange(first.size)
    return np.flatnonzero(first <= kth)


# Predictions closer than this are a tie: the "good regret" (3 %), below every stated band
# and below the spread of left-out errors between layouts of one job (vTrain: median 23 %).
TIE_PCT = 3.0


def simplest_within(time_s: np.ndarray, rows: np.ndarray, best: int, band_pct: float,
                    simplicity) -> int | None:
    """Of the `rows` predicted within `band_pct` of row `best`'s time, the simplest; of rows as
    simple the faster, then the first. `simplicity(close)` gives the keys of the close rows (few),
    most significant first, smaller simpler (simplicity_keys). None when that row is `best` itself.
    The planner cannot tell predictions this close apart, so a user may prefer fewer moving parts;
    the search keeps the fastest first (preferring the simpler one measured mixed over groups of
    measured layouts: docs/fidelity.md, Ties) and names this one beside it."""
    time_s = np.asarray(time_s, dtype=float)
    rows = np.asarray(rows, dtype=np.int64)
    close = rows[time_s[rows] <= time_s[best] * (1.0 + band_pct / 100.0)]
    if close.size <= 1:
        return None
    keys = [*simplicity(close), time_s[close]]
    pick = int(close[np.lexsort(tuple(reversed(keys)))[0]])  # lexsort is stable: equal rows keep row order
    return None if pick == best else pick


def simplicity_keys(layouts) -> list[np.ndarray]:
    """Simpler first: fewer GPUs per model replica (tp x pp x cp: fewer collectives on the step's
    critical path, fewer ranks a failure stops), then fewer pipeline stages and chunks, fewer
    expert ranks."""
    return [layouts.tp * layouts.pp * layouts.cp, layouts.pp, layouts.vpp, layouts.ep]
