"""Pareto frontier of step time vs energy per token among the feasible scored rows.

A row is on the frontier when no other row is at least as fast and at least as frugal and strictly
better in one of the two. Vectorised: sort by (time, energy), keep the rows whose energy is below
the running minimum of all faster rows; of exact duplicates the first (tie-break order) is kept.
"""
from __future__ import annotations

import numpy as np


def pareto_front(time_s: np.ndarray, energy: np.ndarray, rows: np.ndarray | None = None,
                 tiebreak: np.ndarray | None = None) -> np.ndarray:
    """Indices of the non-dominated rows among `rows` (default: all), fastest first."""
    rows = np.arange(time_s.size) if rows is None else np.asarray(rows)
    if rows.size == 0:
        return rows.astype(np.int64)
    t, e = time_s[rows], energy[rows]
    keys = (e, t) if tiebreak is None else (tiebreak[rows], e, t)
    order = np.lexsort(keys)
    e_sorted = e[order]
    best_before = np.concatenate([[np.inf], np.minimum.accumulate(e_sorted)[:-1]])
    return rows[order[e_sorted < best_before]].astype(np.int64)


def dominated(time_s: np.ndarray, energy: np.ndarray, i: int, others: np.ndarray) -> bool:
    """Whether row i is dominated by any of `others` (a plain check used by tests and validators)."""
    t, e = time_s[others], energy[others]
    return bool(np.any((t <= time_s[i]) & (e <= energy[i]) & ((t < time_s[i]) | (e < energy[i]))))
