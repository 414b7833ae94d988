"""Performance family: response time, utilisation, pipeline balance."""
from __future__ import annotations

from ..score import Scores
from ..specs import ClusterSpec, ModelSpec
from .base import Limits, Mask, relative_excess


def masks(model: ModelSpec, cluster: ClusterSpec, scores: Scores, limits: Limits) -> list[Mask]:
    out = []
    step = scores.step_time_s
    if limits.max_step_time_s is not None:
        cap = limits.max_step_time_s
        out.append(Mask("max_step_time", "performance", step <= cap,
                        lambda i: f"step takes {step[i]:.3g} s, above --max-step-time {cap:g} s",
                        relative_excess(step, cap)))
    if limits.min_mfu is not None:
        floor, mfu = limits.min_mfu, scores.mfu
        out.append(Mask("min_mfu", "performance", mfu >= floor,
                        lambda i: f"MFU {mfu[i]:.1%} is below --min-mfu {floor:.1%}",
                        relative_excess(mfu, floor, upper=False)))
    if limits.max_bubble is not None:
        cap = limits.max_bubble
        frac = scores.time_s.bubble / step
        out.append(Mask("max_bubble", "performance", frac <= cap,
                        lambda i: f"pipeline bubble is {frac[i]:.1%} of the step, above --max-bubble {cap:.1%}",
                        relative_excess(frac, cap)))
    return out
