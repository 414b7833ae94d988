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
    return value[i].item() if isinstance(value, np.ndarray) else value


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
    integer columns, for costs that depend on a few axes only (compute them once per combination)."""
    cols = [np.asarray(c, dtype=np.int64) for c in columns]
    spans = [int(c.max(initial=0)) + 1 for c in cols]
    if all(c.min(initial=0) >= 0 for c in cols) and float(np.prod([float(x) for x in spans])) < 2.0**62:
        key = np.ravel_multi_index(cols, spans)
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    else:
        _, first, inverse = np.unique(np.stack(cols, axis=1), axis=0, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)


def replace_rows(rows: T, index: np.ndarray, new: T) -> T:
    """A copy of `rows` with rows `index` taken from `new` (one row of `new` per index, in order)."""
    out = {}
    for f in fields(rows):
        value, other = getattr(rows, f.name), getattr(new, f.name)
        if value is None:
            out[f.name] = None
        elif is_dataclass(value):
            out[f.name] = replace_rows(value, index, other)
        elif isinstance(value, np.ndarray):
            arr = value.astype(np.result_type(value, other), copy=True)
            arr[index] = other
            out[f.name] = arr
        else:
            out[f.name] = value
    return replace(rows, **out)
