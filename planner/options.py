"""Every user setting declared once, and the file schemas generated from the declarations.

Limits come from the constraint declarations (planner/constraints/), layout axes from
planner/layout/axes.py; the search settings below are neither. `plan search`, `plan estimate`, `plan
sweep`, plan files, sweep files and `plan schema` all read these lists.
"""
from __future__ import annotations

from decimal import Decimal
from typing import Any, Literal, Optional

from pydantic import Field

from planner.layout.axes import Axis, axis, fixable
from planner.constraints import LIMIT_OPTIONS, Limits
from planner.constraints.base import SEARCHES, Option
from planner.errors import SpecError
from planner.specs import ModelSpec, TrainingSpec

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


def spec_bounds(spec: type, name: str) -> dict:
    """The gt/ge/lt/le of a spec field, so that an option that overrides it has the same bounds."""
    out = {}
    for m in spec.model_fields[name].metadata:
        out.update({k: getattr(m, k) for k in ("gt", "ge", "lt", "le") if getattr(m, k, None) is not None})
    return out


# Options of single commands (not limits, not in files): the values they override or select have
# the bounds of the spec field or axis they stand for.
GPUS = Option("gpus", "--gpus", int, "GPUs to use", bounds=dict(axis("dp").bounds), where=frozenset())
GLOBAL_BATCH = Option("global_batch", "--global-batch", int, "sequences per step",
                      bounds=spec_bounds(TrainingSpec, "global_batch"), where=frozenset())
SEQ_LEN = Option("seq_len", "--seq-len", int, "tokens per sequence", bounds=spec_bounds(ModelSpec, "seq_len"),
                 where=frozenset())
OFFLOAD_LAYERS = Option("offload_layers", "--offload-layers", int,
                        "layers whose activations an activation-offloading layout moves to the host",
                        bounds=spec_bounds(TrainingSpec, "offload_layers"), where=frozenset())
TOP = Option("top", "--top", int, "layouts listed", bounds=dict(gt=0, le=1000), where=frozenset())
COMMAND_OPTIONS: tuple[Option, ...] = (GPUS, GLOBAL_BATCH, SEQ_LEN, OFFLOAD_LAYERS, TOP)


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
        raise SpecError(f"out of range: got {shown_number(value)}", path=option.flag, expected=expected)


def shown_number(value: Any) -> str:
    """A number for a message: 64, 1e+30, 4.612e+18; an integer too large for a float (10**400)
    too, where `{value:g}` raises OverflowError."""
    if not isinstance(value, int):
        return f"{value:g}"
    if abs(value) < 10**16:
        return str(value)
    return f"{value:.4g}" if abs(value) < 10**300 else f"{Decimal(value):.4g}"


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
