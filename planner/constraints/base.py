"""Constraints, declared once: name, family, the option that sets it, its unit and its message.

Each family module (hardware, performance, energy, scalability) lists its `Constraint`s; a
constraint with an `Option` is set by that option on the command line (`flag`), in plan files and
sweep files (`key`), and in `Limits` (`key`). Everything that reads limits (the CLIs, `plan check`,
`plan sweep`, `plan schema`) is generated from these declarations.

A constraint becomes a `Mask` over the scored layouts: which rows pass, how far each row is from
passing, and how to tell a user why a row fails, so the search can count what each constraint
removed and explain the nearest infeasible layout.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, make_dataclass
from typing import Any, Callable, Literal

import numpy as np

Family = Literal["hardware", "performance", "energy", "scalability"]
EVERYWHERE: frozenset = frozenset({"search", "estimate", "sweep", "plan"})
SEARCHES: frozenset = frozenset({"search", "sweep"})


@dataclass(frozen=True)
class Option:
    """A user setting: a CLI option, a key of plan and sweep files, a field of `Limits`."""

    key: str  # `Limits` field and file key, unit in the name: "max_step_time_s"
    flag: str  # "--max-step-time"
    kind: type  # float | bool | int
    help: str  # with its unit: "upper bound on step time [s]"
    default: Any = None  # what commands and files use when it is not given
    off: Any = None  # the value that leaves the constraint out (`Limits()`)
    bounds: dict = field(default_factory=dict)  # pydantic Field arguments: gt, ge, lt, le
    where: frozenset = EVERYWHERE  # the commands and files that take it

    def problem(self, value: Any) -> str | None:
        """Why `value` is out of bounds (as `expected` text), else None. NaN and infinities are
        always out: every option has finite bounds (tests/test_options.py checks it)."""
        if value is None or self.kind is bool:
            return None
        checks = {"gt": (lambda v, b: v > b, ">"), "ge": (lambda v, b: v >= b, ">="),
                  "lt": (lambda v, b: v < b, "<"), "le": (lambda v, b: v <= b, "<=")}
        wanted = [f"{sign} {_number(self.bounds[k])}" for k, (_, sign) in checks.items() if k in self.bounds]
        finite = isinstance(value, int) or math.isfinite(value)
        if finite and all(test(value, self.bounds[k]) for k, (test, _) in checks.items() if k in self.bounds):
            return None
        return ("an integer " if self.kind is int else "a value ") + " and ".join(wanted)


def _number(b: float) -> str:
    """A bound as users read it: 100,000,000 and 0.05, not 1e+08 and 5e-02."""
    return f"{int(b):,}" if float(b).is_integer() and 1000 <= abs(b) < 1e9 else f"{b:g}"


@dataclass(frozen=True)
class Mask:
    name: str  # e.g. "memory", "max_step_time"
    family: str  # hardware | performance | energy | scalability
    ok: np.ndarray  # bool per row
    explain: Callable[[int], str]  # why row i fails, in a user's words
    excess: np.ndarray | None = None  # how far each row is from passing (relative, >= 0), for "nearest"


@dataclass(frozen=True)
class Context:
    """What masks read besides the scores: the job and state the search derives."""

    model: Any
    cluster: Any
    limits: Any
    reference_tokens_per_s_per_gpu: float | None = None  # best layout on half the GPUs (scalability)


@dataclass(frozen=True)
class Constraint:
    """One constraint. A bound (`bound` upper/lower) on `value(scores, ctx)` needs only `message`:
    a template with {value}, {limit} and {flag}. Others build their masks with `masks`."""

    name: str
    family: Family
    option: Option | None = None
    unit: str = ""
    bound: Literal["upper", "lower"] | None = None
    value: Callable[[Any, Context], np.ndarray] | None = None
    message: str = ""
    masks: Callable[[Any, Context, "Constraint"], list[Mask]] | None = None  # a custom builder

    def build(self, scores, ctx: Context) -> list[Mask]:
        if self.masks is not None:
            return self.masks(scores, ctx, self)
        limit = getattr(ctx.limits, self.option.key)
        if limit is None:
            return []
        value = np.broadcast_to(np.asarray(self.value(scores, ctx), dtype=float), (len(scores),))
        upper = self.bound == "upper"
        ok = value <= limit if upper else value >= limit
        flag = self.option.flag
        return [Mask(self.name, self.family, ok, lambda i: self.message.format(value=value[i], limit=limit, flag=flag),
                     relative_excess(value, limit, upper))]


def relative_excess(value: np.ndarray, limit: float, upper: bool = True) -> np.ndarray:
    """(value - limit) / limit for an upper bound, (limit - value) / limit for a lower one, >= 0."""
    gap = (value - limit) if upper else (limit - value)
    return np.maximum(gap, 0.0) / max(abs(limit), 1e-12)


def limits_class(options: list[Option]) -> type:
    """`Limits`: one field per option (its `off` value by default: unconstrained), plus `fixed`,
    the layout axes fixed to a value ("--tp 8")."""
    cols = [(o.key, Any, field(default=o.off)) for o in options]
    doc = "User limits; the `off` value (None, 0, False) leaves a constraint out."
    return make_dataclass("Limits", [*cols, ("fixed", dict, field(default_factory=dict))], frozen=True,
                          namespace={"__doc__": doc, "__module__": "planner.constraints"})
