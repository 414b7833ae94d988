"""The four constraint families of the planning guideline, applied as named masks."""
from __future__ import annotations

from ..score import Scores
from ..specs import ClusterSpec, ModelSpec
from . import energy, hardware, performance, scalability
from .base import Limits, Mask

FAMILIES = (hardware, performance, energy, scalability)


def evaluate(model: ModelSpec, cluster: ClusterSpec, scores: Scores, limits: Limits) -> list[Mask]:
    return [m for family in FAMILIES for m in family.masks(model, cluster, scores, limits)]


__all__ = ["Limits", "Mask", "evaluate", "FAMILIES"]
