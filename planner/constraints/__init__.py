"""The four constraint families of the planning guideline, applied as named masks.

Every constraint is declared once in its family module (name, family, option, unit, message);
`CONSTRAINTS` is their order, which is the order of the masks and of `rejected` counts.
"""
from __future__ import annotations

from planner.constraints import energy, hardware, performance, scalability
from planner.constraints.base import Constraint, Context, Mask, Option, limits_class, relative_excess

FAMILIES = (hardware, performance, energy, scalability)
CONSTRAINTS: tuple[Constraint, ...] = tuple(c for family in FAMILIES for c in family.CONSTRAINTS)
LIMIT_OPTIONS: tuple[Option, ...] = tuple(c.option for c in CONSTRAINTS if c.option is not None)
Limits = limits_class(list(LIMIT_OPTIONS))


def evaluate(model, cluster, scores, limits, reference_tokens_per_s_per_gpu: float | None = None) -> list[Mask]:
    """Every active constraint's masks over `scores`, in declaration order."""
    ctx = Context(model, cluster, limits, reference_tokens_per_s_per_gpu)
    return [m for c in CONSTRAINTS for m in c.build(scores, ctx)]


def constraint_of_option(key: str) -> Constraint | None:
    return next((c for c in CONSTRAINTS if c.option is not None and c.option.key == key), None)


__all__ = ["Limits", "Mask", "Option", "Constraint", "CONSTRAINTS", "LIMIT_OPTIONS", "FAMILIES", "evaluate",
           "relative_excess", "constraint_of_option"]
