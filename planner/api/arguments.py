"""Keyword arguments of the API checked as `plan` checks its options: the same declarations
(planner/options.py, planner/layout/axes.py), the same bounds and the same messages, which name the
command-line flag that stands for the argument (`--gpus` for `gpus=`, `--tp` for `tp=`).

What the command line gets from its parser and a Python caller does not, a value's type, is checked
here first: a string where a number is wanted is a `SpecError`, not a TypeError deep inside."""
from __future__ import annotations

import difflib
import math
import warnings
from contextlib import contextmanager
from typing import Any, Iterator

from planner.errors import SpecError


def typed(value: Any, kind: type, flag: str) -> Any:
    """`value` when it is of `kind` (an int is a float; a bool is neither), else a SpecError."""
    if value is None:
        return None
    if kind is bool:
        ok = isinstance(value, bool)
    elif kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, kind)
    if not ok:
        from planner.specs.loading import describe

        words = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
        raise SpecError(f"got {describe(value)}", path=flag,
                        expected=words.get(kind) or ("a string or a path" if isinstance(kind, tuple) else kind.__name__))
    return value


# Values read from one list argument at most: a sweep has at most MAX_POINTS (100,000) points, and a
# list may repeat names; `gpus=range(1, 10**12)` was joined into one string for minutes, an endless
# generator forever.
MAX_ITEMS = 1_000_000


def items(value: Any, flag: str, one: tuple, expected: str) -> list:
    """`value` as a list: one item of the types `one` alone, else the items of a list (a tuple, a range, a
    generator), at most MAX_ITEMS of them; anything else is a SpecError naming the flag."""
    from collections.abc import Mapping
    from itertools import islice

    if isinstance(value, one):
        return [value]
    if isinstance(value, (Mapping, bytes)) or not hasattr(value, "__iter__"):
        typed(value, one, flag)  # says what it got
        raise SpecError(f"got {type(value).__name__}", path=flag, expected=expected)  # one of `one` after all
    out = list(islice(value, MAX_ITEMS + 1))
    if len(out) > MAX_ITEMS:
        raise SpecError(f"more than {MAX_ITEMS:,} values", path=flag, expected=f"at most {MAX_ITEMS:,} ({expected})")
    return out


def required(value: Any, kind: type, flag: str) -> Any:
    """`typed` for an argument that has no default: None is a SpecError too (the command line requires it)."""
    if value is None:
        words = {int: "an integer", float: "a number", str: "a string"}
        raise SpecError("got None", path=flag, expected=words.get(kind) or "a string or a path")
    return typed(value, kind, flag)


def unknown(function: str, given: dict, known: set[str]) -> None:
    """A keyword no declaration has is a programmer's error, as for any Python function: TypeError."""
    for key in given:
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise TypeError(f"{function}() got an unexpected keyword argument {key!r}{hint}")


def layout_keywords(function: str, axes: dict) -> None:
    """The keywords of one given layout (`plan estimate`'s axes and options): an unknown one, or a missing
    required axis (tp, pp, micro_batch), is a TypeError, as for any Python function."""
    from planner.layout.axes import fixable
    from planner.options import options_for

    unknown(function, axes, {o.key for o in options_for("estimate")} | {a.name for a in fixable() if a.given is not None})
    missing = [a.name for a in fixable() if a.given == "required" and axes.get(a.name) is None]
    if missing:
        raise TypeError(f"{function}() missing required keyword argument{'s' if len(missing) > 1 else ''}: "
                        + ", ".join(repr(n) for n in missing))


def option_values(where: str, given: dict) -> dict:
    """The values of the options `where` takes (a command: "search", "estimate"), each the caller's
    or, as on the command line, the option's default (a switch: off). Types checked."""
    from planner.options import options_for

    values = {}
    for o in options_for(where):
        value = given.get(o.key)
        values[o.key] = (False if o.kind is bool else o.default) if value is None else typed(value, o.kind, o.flag)
    return values


def read_options(values: dict, where: str) -> dict:
    """The values given of the limits and settings `where` takes (a command: "search", "estimate",
    "sweep"), checked against their bounds."""
    from planner.options import check_option, options_for

    out = {}
    for o in options_for(where):
        if values.get(o.key) is not None:
            check_option(o, values[o.key])
            out[o.key] = values[o.key]
    return out


def read_axes(values: dict) -> dict:
    """The axis values given (the others left free), typed and checked against their domains."""
    from planner.layout.axes import fixable
    from planner.options import check_axis

    out = {}
    for a in fixable():
        if values.get(a.name) is not None:
            check_axis(a, typed(values[a.name], a.kind, a.flag))
            out[a.name] = values[a.name]
    return out


def read_limits(values: dict, where: str, *, fix: bool = True):
    """`Limits` from option values; with `fix`, the axes given are fixed dimensions."""
    from planner.options import limits_from

    return limits_from(read_options(values, where), read_axes(values) if fix else None)


def setting(values: dict, option) -> Any:
    """A search setting's value (its default when not given), checked."""
    from planner.options import check_option

    value = values.get(option.key)
    if value is None:
        return option.default
    check_option(option, value)
    return value


def check_degree_product(given: dict) -> None:
    """Degrees given multiply to at most the GPU bound (no int64 overflow later)."""
    from planner.layout.axes import AXES
    from planner.options import GPUS, shown_number

    degrees = [a for a in AXES if a.role == "degree" and given.get(a.name) is not None]
    product = math.prod(given[a.name] for a in degrees)
    if product > GPUS.bounds["le"]:
        raise SpecError(f"{'*'.join(a.name for a in degrees)} = {shown_number(product)} GPUs",
                        path="/".join(a.flag for a in degrees), expected=f"degrees whose product is at most "
                        f"{GPUS.bounds['le']:,}")


def check_fixed_degrees(gpus: int | None, fixed: dict) -> None:
    """`gpus` against the degrees fixed (dp must come out whole)."""
    from planner.layout.axes import AXES
    from planner.layout.space import derive_dp

    degrees = [a for a in AXES if a.role == "degree"]
    if gpus is not None and all(a.name in fixed or a.default is not None for a in degrees):
        product = math.prod(fixed[a.name] for a in degrees if a.name in fixed)
        if all(a.name in fixed for a in degrees) or gpus % product:
            derive_dp(gpus, fixed, gpus_said=f"--gpus is {gpus}")


@contextmanager
def numbers_checked() -> Iterator[None]:
    """No numpy RuntimeWarning from the planner's own modules: a non-finite figure is refused by name
    (planner/results.py non_finite_error) instead."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"planner(\.|$)")
        yield


def require_finite(data: Any) -> None:
    """A NaN or an infinity in a result is a SpecError naming its field, as `plan` exits 2 on it."""
    from planner.results import non_finite_error

    problem = non_finite_error(data)
    if problem is not None:
        raise problem
