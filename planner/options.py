"""Every user setting declared once, and the file schemas generated from the declarations.

Limits come from the constraint declarations (planner/constraints/), layout axes from
planner/axes.py; the search settings below are neither. `plan search`, `plan estimate`, `plan
sweep`, plan files, sweep files and `plan schema` all read these lists.
"""
from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field

from .axes import Axis, fixable
from .constraints import LIMIT_OPTIONS, Limits
from .constraints.base import SEARCHES, Option
from .errors import SpecError

# Settings of the search itself: how the score is turned into a choice, not a limit on it.
CRITICAL_BATCH = Option("critical_batch_tokens", "--critical-batch-tokens", float,
                        "McCandlish critical batch B_crit [tokens]: tokens to train x (1 + B/B_crit)",
                        bounds=dict(gt=0, le=1e15), where=SEARCHES)
MAX_MICRO_BATCH = Option("max_micro_batch", "--max-micro-batch", int, "largest micro-batch to enumerate",
                         default=32, bounds=dict(gt=0, le=65536), where=SEARCHES)
TIME_LIMIT = Option("time_limit_s", "--time-limit", float, "CP-SAT deterministic time limit per model [s] (a search's stage splits take at most 0.05 each)",
                    default=10.0, bounds=dict(gt=0, le=3600), where=SEARCHES)
SPLIT_TOP = Option("split_top", "--split-top", int,
                   "best feasible rows (and as many failing only memory) given an uneven stage split by CP-SAT; 0: none",
                   default=2, bounds=dict(ge=0, le=64), where=frozenset({"search"}))
SETTINGS: tuple[Option, ...] = (CRITICAL_BATCH, MAX_MICRO_BATCH, TIME_LIMIT, SPLIT_TOP)
OPTIONS: tuple[Option, ...] = LIMIT_OPTIONS + SETTINGS


def options_for(where: str) -> tuple[Option, ...]:
    return tuple(o for o in OPTIONS if where in o.where)


def flag_of(key: str) -> str:
    """The CLI option of a file key (`max_step_time_s` -> `--max-step-time`)."""
    for o in OPTIONS:
        if o.key == key:
            return o.flag
    for a in fixable():
        if a.name == key:
            return a.flag
    return "--" + key.replace("_", "-")


def check_option(option: Option, value: Any) -> None:
    """A value given on the command line, against the option's bounds."""
    expected = option.problem(value)
    if expected is not None:
        raise SpecError(f"out of range: got {value:g}", path=option.flag, expected=expected)


def check_axis(axis: Axis, value: Any) -> None:
    message = axis.problem(value)
    if message is not None:
        raise SpecError(message, path=axis.flag, expected=axis.expected)


def limits_from(values: dict, fixed: dict | None = None) -> Any:
    """`Limits` from option values by key (absent or None: the option's `off` value)."""
    given = {o.key: values[o.key] for o in LIMIT_OPTIONS if values.get(o.key) is not None}
    return Limits(**given, fixed=dict(fixed or {}))


# --- file schemas (pydantic field definitions) ------------------------------------------------------

def option_field(option: Option, required_default: bool) -> tuple[Any, Any]:
    """(annotation, Field) of an option in a file; `required_default`: use the option's default
    (sweep files) rather than None (plan files: absent means unconstrained or the command's default)."""
    default = option.default if required_default and option.default is not None else (
        False if option.kind is bool else None)
    kind = option.kind if option.kind is bool or default is not None else Optional[option.kind]
    return kind, Field(default=default, description=option.help, **option.bounds)


def axis_value_type(axis: Axis) -> Any:
    if axis.kind is bool:
        return bool
    if axis.choices:
        return Literal[axis.choices]
    return axis.kind


def axis_field(axis: Axis, optional: bool) -> tuple[Any, Any]:
    """(annotation, Field) of an axis in a plan file's `layout:` (optional=False: as `given`
    says) or as a sweep file's fixed dimension (optional=True: None leaves it free)."""
    kind = axis_value_type(axis)
    bounds = dict(axis.bounds)
    if optional:
        bounds.pop("description", None)
        return Optional[kind], Field(default=None, **bounds)
    if axis.given == "required":
        return kind, Field(**bounds)
    if axis.given == "optional":
        return Optional[kind], Field(default=None, **bounds)
    return kind, Field(default=axis.default, **bounds)
