"""Constraints as named boolean masks over the scored layouts.

Each family module (hardware, performance, energy, scalability) turns `Limits` into masks; a mask
says which rows pass and how to tell a user why a given row fails, so the search can count what
each constraint removed and explain the nearest infeasible layout.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class Limits:
    """User limits; None means unconstrained."""

    memory_headroom: float = 0.0  # fraction of GPU memory kept free
    allow_cross_node_tp: bool = False
    max_step_time_s: float | None = None
    min_mfu: float | None = None
    max_bubble: float | None = None  # bubble time / step time
    max_power_kw: float | None = None
    max_energy_per_token_j: float | None = None
    max_gpu_power_w: float | None = None
    max_global_batch_tokens: float | None = None
    min_scaling_efficiency: float | None = None
    reference_tokens_per_s_per_gpu: float | None = None  # filled by the search for the above
    critical_batch_tokens: float | None = None  # McCandlish et al. 2018 B_crit: tokens needed x (1 + B/B_crit)
    fixed: dict = field(default_factory=dict)  # layout dimension -> required value ("--tp 8")


@dataclass(frozen=True)
class Mask:
    name: str  # e.g. "memory", "max_step_time"
    family: str  # hardware | performance | energy | scalability
    ok: np.ndarray  # bool per row
    explain: Callable[[int], str]  # why row i fails, in a user's words
    excess: np.ndarray | None = None  # how far each row is from passing (relative, >= 0), for "nearest"


def relative_excess(value: np.ndarray, limit: float, upper: bool = True) -> np.ndarray:
    """(value - limit) / limit for an upper bound, (limit - value) / limit for a lower one, >= 0."""
    gap = (value - limit) if upper else (limit - value)
    return np.maximum(gap, 0.0) / max(abs(limit), 1e-12)
