"""How well predicted times order layouts: a planner is used to choose, so ranking matters most.

Pure: no printing, no file reading; numpy only.
"""
from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np


def _average_ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks of x; equal values share the mean of the positions they occupy."""
    n = x.size
    order = np.argsort(x, kind="stable")
    xs = x[order]
    starts_run = np.r_[True, xs[1:] != xs[:-1]]
    run = np.cumsum(starts_run) - 1
    starts = np.flatnonzero(starts_run)
    ends = np.r_[starts[1:], n]  # one past the last position of each run
    ranks = np.empty(n)
    ranks[order] = ((starts + ends - 1) / 2 + 1)[run]
    return ranks


def _pair(predicted, measured) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(predicted, dtype=float).ravel()
    m = np.asarray(measured, dtype=float).ravel()
    if p.shape != m.shape:
        raise ValueError(f"predicted has {p.size} items, measured {m.size}")
    return p, m


def spearman_rho(predicted, measured) -> float:
    """Spearman rank correlation; nan for fewer than 2 items, a constant input or a nan."""
    p, m = _pair(predicted, measured)
    if p.size < 2 or np.isnan(p).any() or np.isnan(m).any():
        return float("nan")
    # Spearman 1904; ties get average ranks, and rho is then the Pearson correlation of the ranks
    # (the 1 - 6*sum(d^2)/(n(n^2-1)) shortcut holds only without ties).
    rp, rm = _average_ranks(p), _average_ranks(m)
    rp -= rp.mean()
    rm -= rm.mean()
    denom = np.sqrt((rp * rp).sum() * (rm * rm).sum())
    if denom == 0:
        return float("nan")
    return float((rp * rm).sum() / denom)


def regret(predicted, measured) -> float:
    """Measured time of the predicted-fastest layout over the best measured time, minus 1."""
    p, m = _pair(predicted, measured)
    if p.size == 0:
        return float("nan")
    chosen = int(np.argmin(p))  # ties in prediction: the first, as a planner listing in order would
    return float(m[chosen] / m.min() - 1.0)


def group_rows(keys: Sequence[Hashable], min_size: int = 3) -> list[np.ndarray]:
    """Row indices grouped by key, groups of at least min_size rows, in first-seen order."""
    groups: dict[Hashable, list[int]] = {}
    for i, k in enumerate(keys):
        groups.setdefault(k, []).append(i)
    return [np.array(ix, dtype=np.intp) for ix in groups.values() if len(ix) >= min_size]


@dataclass(frozen=True)
class GroupRanking:
    key: Hashable
    n: int
    rho: float
    regret: float


def rank_groups(keys: Sequence[Hashable], predicted, measured, min_size: int = 3) -> list[GroupRanking]:
    """Spearman rho and regret within each group of rows sharing a key (at least min_size rows)."""
    p, m = _pair(predicted, measured)
    if len(keys) != p.size:
        raise ValueError(f"{len(keys)} keys for {p.size} rows")
    return [GroupRanking(keys[ix[0]], int(ix.size), spearman_rho(p[ix], m[ix]), regret(p[ix], m[ix]))
            for ix in group_rows(keys, min_size)]
