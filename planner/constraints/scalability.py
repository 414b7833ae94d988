"""Scalability family: batch size limits, scaling efficiency, fixed layout dimensions."""
from __future__ import annotations

import numpy as np

from ..score import Scores
from ..space import RECOMPUTE_MODES
from ..specs import ClusterSpec, ModelSpec
from .base import Limits, Mask, relative_excess


def masks(model: ModelSpec, cluster: ClusterSpec, scores: Scores, limits: Limits) -> list[Mask]:
    lay = scores.layouts
    n = len(lay)
    out = []
    if limits.max_global_batch_tokens is not None:
        cap = limits.max_global_batch_tokens
        tokens = float(model.training.global_batch * model.seq_len)
        out.append(Mask("max_global_batch_tokens", "scalability", np.full(n, tokens <= cap),
                        lambda i: f"global batch of {tokens:.3g} tokens exceeds --max-global-batch-tokens {cap:g}",
                        np.full(n, max(tokens - cap, 0.0) / cap)))
    if limits.min_scaling_efficiency is not None and limits.reference_tokens_per_s_per_gpu:
        floor, ref = limits.min_scaling_efficiency, limits.reference_tokens_per_s_per_gpu
        eff = scores.tokens_per_s / lay.gpus / ref
        out.append(Mask("min_scaling_efficiency", "scalability", eff >= floor,
                        lambda i: f"scaling efficiency {eff[i]:.1%} against the best layout on half the GPUs "
                        f"is below --min-scaling-efficiency {floor:.0%}",
                        relative_excess(eff, floor, upper=False)))
    for dim, want in limits.fixed.items():
        values = getattr(lay, dim)
        target = RECOMPUTE_MODES.index(want) if dim == "recompute" else int(want)
        shown = want if dim == "recompute" else target
        out.append(Mask(f"fixed_{dim}", "scalability", values == target,
                        lambda i, d=dim, v=values, s=shown: f"{d}={RECOMPUTE_MODES[v[i]] if d == 'recompute' else v[i]}, "
                        f"but --{d.replace('_', '-')} {s} was asked for",
                        (values != target).astype(float)))
    return out
