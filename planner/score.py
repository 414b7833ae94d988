"""Score every candidate layout: one call of each cost model over the layout arrays.

Rows may sit at different power-cap levels (the `power_cap` axis): each level's rows are scored on
the GPU as that cap leaves it (planner/costs/power_caps.py) and the parts are put back in row order.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.layout.arrays import scatter
from planner.costs.compute import peak_flops
from planner.costs.energy import Energy, step_energy
from planner.costs.flops import model_flops_per_step
from planner.costs.context import job_context
from planner.costs.memory import MemoryBreakdown, memory_breakdown
from planner.costs.offload import FIT_HEADROOM
from planner.costs.pipeline import TimeBreakdown, step_time
from planner.costs.price import step_co2e_g, step_cost_usd
from planner.costs.power_caps import cap_levels, capped_cluster, uncapped
from planner.costs.pipeline_ranks import PipelineRanks
from planner.costs.reliability import (Reliability, TrainingTotals, batch_token_factor, checkpoint_bytes_per_gpu,
                                      reliability, training_totals)
from planner.fidelity.error_bands import ErrorBand
from planner.fidelity.own_bands import band
from planner.specs import ClusterSpec, ModelSpec, PowerCap
from planner.units import TERA


@dataclass(frozen=True)
class Scores:
    """Every figure of every scored layout (aligned arrays, one entry per row of `layouts`)."""

    layouts: object  # planner.layout.space.Layouts
    time_s: TimeBreakdown
    memory_gib: MemoryBreakdown
    energy: Energy
    step_time_s: np.ndarray
    tokens_per_s: np.ndarray
    model_tflops_per_gpu: np.ndarray
    mfu: np.ndarray  # against the 16-bit (BF16/FP16) peak, as published tables quote FP8 runs too
    reliability: Reliability
    error_band: ErrorBand  # expected |error| of step_time_s [%] (planner/fidelity/error_bands.py)
    statistical_efficiency: np.ndarray | None = None  # with a critical batch size (McCandlish et al. 2018)
    training: TrainingTotals | None = None  # with a token budget (`training.tokens`)
    power_caps: tuple[PowerCap, ...] | None = None  # the levels `layouts.power_cap` indexes, when caps were searched
    mfu_fp8_peak: np.ndarray | None = None  # FP8/MXFP8 runs: against the peak their GEMMs run at
    cost_usd_per_step: np.ndarray | None = None  # GPU-hours and electricity (planner/costs/price.py)
    co2e_g_per_step: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.layouts)

    @property
    def energy_j_per_token(self) -> np.ndarray:
        return self.energy.energy_j_per_step / (self.tokens_per_s * self.step_time_s)

    @property
    def power_cap_w(self) -> np.ndarray | None:
        """Each row's GPU power cap [W] (None when caps were not searched)."""
        if self.power_caps is None:
            return None
        return np.array([c.cap_w for c in self.power_caps], dtype=float)[self.layouts.power_cap]



def score(model: ModelSpec, cluster: ClusterSpec, layouts, *, cap: PowerCap | None = None,
          caps: list[PowerCap] | None = None, critical_batch_tokens: float | None = None,
          ranks: PipelineRanks | None = None, memory_headroom: float = FIT_HEADROOM) -> Scores:
    """`caps`: the power-cap levels the rows' `power_cap` axis indexes (planner/costs/power_caps.py;
    None: every row uncapped); `cap`: score every row under that one cap instead.
    `critical_batch_tokens`: McCandlish et al. 2018 B_crit for the statistical-efficiency factor.
    `ranks`: the pipeline ranks to evaluate (default: the bounding ranks of the default split; an
    explicit split gives every rank, planner/costs/pipeline_ranks.py split_ranks).
    `memory_headroom`: the fraction of GPU memory kept free (Limits.memory_headroom), which the
    offloaded layer count of an activation-offloading layout fits under (planner/costs/offload.py)."""
    if caps is None:
        return _score_under(model, cluster, layouts, cap, critical_batch_tokens, ranks, memory_headroom)
    levels = np.unique(layouts.power_cap)
    parts = []
    for level in levels:
        rows = np.flatnonzero(layouts.power_cap == level) if levels.size > 1 else np.arange(len(layouts))
        sub = layouts if levels.size == 1 else layouts.take(rows)
        parts.append((rows, _score_under(model, cluster, sub, caps[int(level)], critical_batch_tokens, ranks,
                                         memory_headroom)))
    scores = parts[0][1] if len(parts) == 1 else scatter(len(layouts), parts)
    return Scores(**{**scores.__dict__, "layouts": layouts, "power_caps": tuple(caps)})


def score_with_caps(model: ModelSpec, cluster: ClusterSpec, layouts, caps: list[PowerCap] | None = None,
                    **score_kwargs) -> Scores:
    """Every (layout, cap) pair: the rows of cap level j are rows j*n .. (j+1)*n - 1."""
    caps = cap_levels(cluster.gpu) if caps is None else caps
    n = len(layouts)
    cols = {k: np.tile(v, len(caps)) for k, v in layouts.columns().items()}
    cols["power_cap"] = np.repeat(np.arange(len(caps), dtype=np.int64), n)
    return score(model, cluster, type(layouts)(**cols), caps=caps, **score_kwargs)


def _score_under(model: ModelSpec, cluster: ClusterSpec, layouts, cap: PowerCap | None,
                 critical_batch_tokens: float | None, ranks: PipelineRanks | None = None,
                 memory_headroom: float = FIT_HEADROOM) -> Scores:
    run = cluster if cap is None or cap == uncapped(cluster.gpu) else capped_cluster(cluster, cap)
    job = job_context(model, run, layouts, ranks, memory_headroom=memory_headroom)  # one for time and memory
    prec = job.numerics
    times = step_time(job)
    step = times.total
    gpus = layouts.gpus
    flops = model_flops_per_step(model)
    tflops_per_gpu = flops / (step * gpus) / TERA
    fraction = None
    if run.gpu.power.full_power_compute_fraction is not None:
        fraction = flops / (gpus * (times.compute + times.recompute)) / peak_flops(run.gpu, model.training.precision)
    memory = memory_breakdown(job)
    energy = step_energy(run, times, gpus, compute_fraction=fraction)
    tokens_per_s = model.training.global_batch * model.seq_len / step
    rel = reliability(cluster, layouts, checkpoint_bytes_per_gpu(job), tokens_per_s)
    batch_tokens = float(model.training.global_batch * model.seq_len)
    factor = batch_token_factor(batch_tokens, critical_batch_tokens)
    stat = np.full(step.shape, 1.0 / factor) if critical_batch_tokens is not None else None
    totals = None
    if model.training.tokens is not None:
        totals = training_totals(cluster, model.training.tokens, rel.goodput_tokens_per_s, gpus,
                                 energy.avg_power_kw, factor)
    return Scores(
        layouts=layouts,
        time_s=times,
        memory_gib=memory,
        energy=energy,
        step_time_s=step,
        tokens_per_s=tokens_per_s,
        model_tflops_per_gpu=tflops_per_gpu,
        mfu=tflops_per_gpu * TERA / cluster.gpu.peak_flops(prec.mfu_peak or prec.peak),
        mfu_fp8_peak=tflops_per_gpu * TERA / cluster.gpu.peak_flops(prec.peak) if prec.is_fp8 else None,
        reliability=rel,
        error_band=band(model, cluster.gpu.name, gpus, layouts),
        statistical_efficiency=stat,
        training=totals,
        cost_usd_per_step=step_cost_usd(cluster, gpus, step, energy.energy_j_per_step),
        co2e_g_per_step=step_co2e_g(cluster, energy.energy_j_per_step),
    )
