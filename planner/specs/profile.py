"""A calibration profile (`kind: profile`): what `plan calibrate` fitted to a user's runs, which
`plan search/estimate/sweep/validate --profile` predict with (planner/fidelity/profile.py)."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from planner.specs.base import PLAIN_NAME, Spec, is_plain_name
from planner.specs.stack import AxisValue, MeasuredRange, layout_value_problem


class FittedConstant(Spec):
    """One constant: the value predictions use, the shipped prior, its cited bounds, whether fitted."""

    value: float = Field(ge=0, le=1e6)
    prior: float = Field(ge=0, le=1e6)
    bounds: tuple[float, float] = Field(strict=False)
    fitted: bool

    @model_validator(mode="after")
    def _inside(self):
        lo, hi = self.bounds
        if not lo <= self.value <= hi:
            raise ValueError(f"value: {self.value:g} lies outside its bounds {lo:g}-{hi:g}")
        return self


class ProfileRun(Spec):
    """A run the profile was fitted on, with its errors (`error_pct`: the fit's; `loo_error_pct`:
    predicted from the other runs, what the bands promise)."""

    name: str = Field(min_length=1, max_length=128)
    model: str = Field(min_length=1, max_length=128)
    cluster: str = Field(min_length=1, max_length=128)
    gpus: int = Field(gt=0, le=10_000_000)
    params_b: float = Field(gt=0, le=1e6)
    seq_len: int = Field(gt=0, le=100_000_000)
    global_batch: int = Field(gt=0, le=100_000_000)
    precision: str = Field(min_length=1, max_length=16)
    layout: dict[str, AxisValue | list[int]] = Field(max_length=32)
    measured_step_time_s: float = Field(gt=0, le=1e6)
    fitted_step_time_s: float = Field(gt=0, le=1e9)
    error_pct: float = Field(ge=-100, le=1e6)
    loo_error_pct: float | None = Field(default=None, ge=-100, le=1e6)
    measured_peak_memory_gib: float | None = Field(default=None, gt=0, le=4096)
    fitted_peak_memory_gib: float = Field(ge=0, le=1e6)
    loo_memory_error_pct: float | None = Field(default=None, ge=-100, le=1e6)
    infeasible: tuple[str, ...] = Field(default=(), strict=False, max_length=32)

    @model_validator(mode="after")
    def _layout_values(self):
        """Each layout value of its axis's kind (plan validate --profile replays the run through plan estimate:
        a hand-edited tp: abc or [1, 2] was 'internal error: TypeError', exit 3)."""
        for key, value in self.layout.items():
            problem = layout_value_problem(key, value)
            if problem:
                raise ValueError(f"layout {key}: {problem}")
        return self


class ProfileSpec(Spec):
    """A fit of one GPU type and software stack to measured runs."""

    kind: Literal["profile"] = "profile"
    name: str = Field(min_length=1, max_length=128, pattern=PLAIN_NAME.pattern)
    gpu: str = Field(min_length=1, max_length=128, description="the GPU preset the runs were measured on")
    stack: str = Field(min_length=1, max_length=128, description="the shipped stack profile fitted from")
    planner_version: str = Field(default="", max_length=64)
    hardware: dict[str, FittedConstant] = Field(max_length=32, description="the GPU preset's efficiency fields")
    stack_constants: dict[str, FittedConstant] = Field(max_length=32, description="the stack profile's constants on this GPU")
    memory: dict[str, FittedConstant] = Field(default_factory=dict, max_length=4, description="memory_reserve_gib")
    runs: tuple[ProfileRun, ...] = Field(strict=False, min_length=1, max_length=1000)
    measured: MeasuredRange
    notes: tuple[str, ...] = Field(default=(), strict=False, max_length=1100)

    @field_validator("stack")
    @classmethod
    def _shipped_stack(cls, stack: str) -> str:
        """The stack --profile prices with: a shipped one, never a path (as every command refuses it)."""
        from planner.specs.shipped import shipped_names, unknown_stack_message

        if not is_plain_name(stack) or stack not in shipped_names("stack"):
            raise PydanticCustomError("value_error", unknown_stack_message(stack[:40]),
                                      {"expected": "the shipped stack the profile was fitted from (plan list stacks)"})
        return stack
