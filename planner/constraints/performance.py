"""Performance family: response time, utilisation, pipeline balance."""
from __future__ import annotations

from planner.constraints.base import Constraint, Option

CONSTRAINTS = (
    Constraint("max_step_time", "performance", Option(
        "max_step_time_s", "--max-step-time", float, "upper bound on step time [s]", bounds=dict(gt=0, le=1e6)),
        unit="s", bound="upper", value=lambda s, ctx: s.step_time_s,
        message="step takes {value:.3g} s, above {flag} {limit:g} s"),
    Constraint("min_mfu", "performance", Option(
        "min_mfu", "--min-mfu", float, "lower bound on MFU (0-1)", bounds=dict(gt=0, le=1)),
        bound="lower", value=lambda s, ctx: s.mfu, message="MFU {value:.1%} is below {flag} {limit:.1%}"),
    Constraint("max_bubble", "performance", Option(
        "max_bubble", "--max-bubble", float, "upper bound on bubble / step (0-1)", bounds=dict(ge=0, le=1)),
        bound="upper", value=lambda s, ctx: s.time_s.bubble / s.step_time_s,
        message="pipeline bubble is {value:.1%} of the step, above {flag} {limit:.1%}"),
)
