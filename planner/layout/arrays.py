"""Dataclasses whose fields are aligned arrays (one entry per layout): row selection and assembly."""
from __future__ import annotations

from dataclasses import fields, is_dataclass, replace
from typing import TypeVar

import numpy as np

T = TypeVar("T")


def take(rows: T, index) -> T:
    """The same dataclass with each array field indexed (nested dataclasses too; None stays None)."""
    return replace(rows, **{f.name: _take_value(getattr(rows, f.name), index) for f in fields(rows)})


def _take_value(value, index):
    if value is None:
        return None
    if is_dataclass(value):
        return take(value, index)
    return value[index] if isinstance(value, np.ndarray) else value


def row(rows: T, i: int) -> T:
    """Row i as the same dataclass of Python floats/ints (for typed results of one layout)."""
    return replace(rows, **{f.name: _row_value(getattr(rows, f.name), i) for f in fields(rows)})


def _row_value(value, i):
    if value is None:
        return None
    if is_dataclass(value):
        return row(value, i)
    if not isinstance(value, np.ndarray):
        return value
    v = value[i]
    return v.item() if isinstance(v, np.generic) else v  # an object array's row is the object itself


def scatter(n: int, parts: list[tuple[np.ndarray, T]]) -> T:
    """One dataclass of length n from parts that each fill the rows `index` (a partition of 0..n-1)."""
    first = parts[0][1]
    out = {}
    for f in fields(first):
        values = [getattr(p, f.name) for _, p in parts]
        if values[0] is None:
            out[f.name] = None
        elif is_dataclass(values[0]):
            out[f.name] = scatter(n, [(idx, v) for (idx, _), v in zip(parts, values)])
        elif isinstance(values[0], np.ndarray):
            arr = np.empty(n, dtype=np.result_type(*values))
            for (idx, _), v in zip(parts, values):
                arr[idx] = v
            out[f.name] = arr
        else:
            out[f.name] = values[0]
    return type(first)(**out)


def unique_rows(columns: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(first row of each distinct combination, inverse: which combination each row has) of aligned
    integer columns, for costs that depend on a few axes only (compute them once per combination).
    Combinations are numbered in lexicographic order of the columns, as np.unique numbers them.
    A space's rows come in runs of equal combinations (the options that vary fastest are often
    not among the columns): those are found first and only their first rows compared."""
    cols = [np.asarray(c, dtype=np.int64) for c in columns]
    starts = _run_starts(cols)
    if starts is None:
        return _unique_codes(cols)
    first, inverse = _unique_codes([c[starts] for c in cols])
    return starts[first], np.repeat(inverse, np.diff(starts, append=cols[0].size))


def _run_starts(cols: list[np.ndarray]) -> np.ndarray | None:
    """First row of each run of rows equal in every column, or None if runs average < 8 rows."""
    n = cols[0].size
    if n < 64:
        return None
    change = np.zeros(n, dtype=bool)
    change[0] = True
    for c in reversed(cols):  # the axes that vary fastest come last: give up early
        change[1:] |= c[1:] != c[:-1]
        if np.count_nonzero(change) > n // 8:
            return None
    return np.flatnonzero(change)


def _unique_codes(cols: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """unique_rows without runs: the columns combined into one key, renumbered through a lookup
    table whenever its range would outgrow a few entries per row (no sort)."""
    n = cols[0].size
    table = 4 * n + 4096  # a lookup table this long costs about one pass over the rows
    key, span = _column(cols[0], table)
    for c in cols[1:]:
        value, count = _column(c, table)
        if span * count > table:
            key, span = _dense_codes(key, span, table)
        key = key * count + value  # lexicographic: the earlier columns weigh more
        span = span * count
    inverse, distinct = _dense_codes(key, span, table)
    first = np.full(distinct, n, dtype=np.int64)
    np.minimum.at(first, inverse, np.arange(n, dtype=np.int64))
    return first, inverse


def _column(values: np.ndarray, table: int) -> tuple[np.ndarray, int]:
    """(a column as integers 0..span-1 in the order of its values, span): its values less their
    minimum, or their ranks when they spread wider (dp 1..1024: 11 values) and would widen the key."""
    low, high = (int(values.min()), int(values.max())) if values.size else (0, 0)
    shifted, span = (values if low == 0 else values - low), high - low + 1
    return _dense_codes(shifted, span, table) if span > 64 else (shifted, span)


def _dense_codes(key: np.ndarray, span: int, table: int) -> tuple[np.ndarray, int]:
    """(each key's rank among the distinct keys, how many there are) of keys in 0..span-1: a
    lookup table when the span is at most `table`, else a sort (both rank in increasing order)."""
    if span > table:
        distinct, inverse = np.unique(key, return_inverse=True)
        return inverse.reshape(-1).astype(np.int64, copy=False), int(distinct.size)
    present = np.zeros(span, dtype=bool)
    present[key] = True
    rank = np.cumsum(present, dtype=np.int64) - 1
    return rank[key], int(rank[-1]) + 1


def replace_rows(rows: T, index: np.ndarray, new: T, in_place: bool = False) -> T:
    """A copy of `rows` with rows `index` taken from `new` (one row of `new` per index, in order).
    A column whose rows already hold those values is shared, not copied; `in_place`: the caller
    owns `rows` and drops it, so a column that owns its memory alone is written in place (a full
    space's columns are MBs each: copying them all took as long as scoring the changed rows)."""
    shared = _roots(rows) if in_place else None
    return _replace(rows, index, new, shared)


def _replace(rows: T, index: np.ndarray, new: T, shared: dict | None) -> T:
    out = {}
    for f in fields(rows):
        value, other = getattr(rows, f.name), getattr(new, f.name)
        if value is None:
            out[f.name] = None
        elif is_dataclass(value):
            out[f.name] = _replace(value, index, other, shared)
        elif isinstance(value, np.ndarray):
            dtype = np.result_type(value, other)
            if dtype == value.dtype and np.array_equal(value[index], other):
                out[f.name] = value  # unchanged rows (NaN compares unequal: copied)
                continue
            alone = shared is not None and value.base is None and shared.get(id(value)) == 1
            arr = value if alone and dtype == value.dtype and value.flags.writeable else value.astype(dtype, copy=True)
            arr[index] = other
            out[f.name] = arr
        else:
            out[f.name] = value
    return replace(rows, **out)


def _roots(rows, counts: dict | None = None) -> dict:
    """id of each array's memory owner -> how many array fields use it (views counted with their base)."""
    counts = {} if counts is None else counts
    for f in fields(rows):
        value = getattr(rows, f.name)
        if is_dataclass(value):
            _roots(value, counts)
        elif isinstance(value, np.ndarray):
            while isinstance(value.base, np.ndarray):
                value = value.base
            counts[id(value)] = counts.get(id(value), 0) + 1
    return counts
