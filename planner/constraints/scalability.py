"""Scalability family: batch size limits, scaling efficiency, fixed layout dimensions."""
from __future__ import annotations

from planner.layout.axes import fixable
from planner.constraints.base import SEARCHES, Constraint, Context, Mask, Option


def _scaling(scores, ctx: Context, c: Constraint) -> list[Mask]:
    floor, ref = ctx.limits.min_scaling_efficiency, ctx.reference_tokens_per_s_per_gpu
    if floor is None or not ref:
        return []
    eff = scores.tokens_per_s / scores.layouts.gpus / ref
    return Constraint(c.name, c.family, c.option, bound="lower", value=lambda s, x: eff,
                      message=c.message).build(scores, ctx)


def _fixed(scores, ctx: Context, c: Constraint) -> list[Mask]:
    """`fixed_<axis>` for every layout axis fixed to a value (`--tp 8`, `tp: 8` in a sweep file)."""
    out = []
    by_name = {a.name: a for a in fixable()}
    for name, want in ctx.limits.fixed.items():
        a = by_name[name]
        values = getattr(scores.layouts, name)
        target = a.to_stored(want)
        out.append(Mask(f"fixed_{name}", c.family, values == target,
                        lambda i, a=a, v=values, w=want: f"{a.name}={a.to_json(v[i])}, but {a.as_option(w)} was asked for",
                        (values != target).astype(float)))
    return out


CONSTRAINTS = (
    Constraint("max_global_batch_tokens", "scalability", Option(
        "max_global_batch_tokens", "--max-global-batch-tokens", float, "critical batch size [tokens]",
        bounds=dict(gt=0, le=1e12), where=SEARCHES), unit="tokens", bound="upper",
        value=lambda s, ctx: float(ctx.model.training.global_batch * ctx.model.seq_len),
        message="global batch of {value:.3g} tokens exceeds {flag} {limit:g}"),
    Constraint("min_scaling_efficiency", "scalability", Option(
        "min_scaling_efficiency", "--min-scaling-efficiency", float, "vs the best layout on half the GPUs (0-1)",
        bounds=dict(gt=0, le=1), where=SEARCHES), masks=_scaling,
        message="scaling efficiency {value:.1%} against the best layout on half the GPUs is below {flag} {limit:.0%}"),
    Constraint("fixed", "scalability", masks=_fixed),
)
