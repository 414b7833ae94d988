"""Energy family: cluster power budget, energy per token, per-GPU power."""
from __future__ import annotations

from ..score import Scores
from ..specs import ClusterSpec, ModelSpec
from .base import Limits, Mask, relative_excess


def masks(model: ModelSpec, cluster: ClusterSpec, scores: Scores, limits: Limits) -> list[Mask]:
    out = []
    if limits.max_power_kw is not None:
        cap, kw = limits.max_power_kw, scores.energy.avg_power_kw
        out.append(Mask("max_power", "energy", kw <= cap,
                        lambda i: f"draws {kw[i]:.1f} kW on average (with node overhead and PUE), above --max-power-kw {cap:g}",
                        relative_excess(kw, cap)))
    if limits.max_energy_per_token_j is not None:
        cap, jpt = limits.max_energy_per_token_j, scores.energy_j_per_token
        out.append(Mask("max_energy_per_token", "energy", jpt <= cap,
                        lambda i: f"uses {jpt[i]:.3g} J per token, above --max-energy-per-token {cap:g} J",
                        relative_excess(jpt, cap)))
    if limits.max_gpu_power_w is not None:
        cap, w = limits.max_gpu_power_w, scores.energy.gpu_power_w
        out.append(Mask("max_gpu_power", "energy", w <= cap,
                        lambda i: f"a GPU draws {w[i]:.0f} W while busy, above --max-gpu-power-w {cap:g} W",
                        relative_excess(w, cap)))
    return out
