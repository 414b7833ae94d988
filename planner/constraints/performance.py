"""Performance family: response time, utilisation, pipeline balance."""
from __future__ import annotations

import numpy as np

from planner.constraints.base import Constraint, Context, Mask, Option
from planner.units import TERA

PEAK_SLACK = 1e-9  # float rounding of FLOPs / (s x GPUs)


class PhysicsError(AssertionError):
    """A scored row that does more model FLOPs per second than its GPUs' peak: a bug in a cost model."""


def _within_peak(scores, ctx: Context, c: Constraint) -> list[Mask]:
    """The physics bound, checked on every scored row (never a user's limit, so never a mask): model
    FLOPs / (step time x GPUs) at most the dense peak of the run's precision (the FP8 one for FP8 runs).
    A row above it is confident nonsense (MFU above 100 %), raised as a bug (exit 3), not printed."""
    if ctx.model is None or ctx.cluster is None or not len(scores):
        return []
    peak = ctx.cluster.gpu.peak_flops(ctx.model.training.numerics.peak)
    rate = np.asarray(scores.model_tflops_per_gpu, dtype=float) * TERA
    bad = np.flatnonzero(~(rate <= peak * (1 + PEAK_SLACK)))
    if bad.size:
        i = int(bad[0])
        lay = scores.layouts
        raise PhysicsError(
            f"{bad.size} scored layouts beat the peak: {ctx.model.name} row {i} (tp {lay.tp[i]}, pp {lay.pp[i]}, "
            f"cp {lay.cp[i]}, dp {lay.dp[i]}, ep {lay.ep[i]}, micro-batch {lay.micro_batch[i]}) does "
            f"{rate[i] / TERA:.1f} TFLOP/s of model FLOPs per GPU in {float(scores.step_time_s[i]):.4g} s, above the "
            f"{peak / TERA:.1f} TFLOP/s {ctx.model.training.precision} peak of {ctx.cluster.gpu.name}")
    return []

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
    Constraint("within_peak", "performance", masks=_within_peak),
)
