"""Score every candidate layout: one call of each cost model over the layout arrays."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .costs.compute import peak_flops
from .costs.energy import Energy, step_energy
from .costs.flops import model_flops_per_step
from .costs.memory import MemoryBreakdown, memory_breakdown
from .costs.pipeline import TimeBreakdown, step_time
from .costs.power_caps import capped_cluster
from .costs.reliability import batch_token_factor, reliability_extras, training_totals
from .space import Layouts
from .specs import ClusterSpec, ModelSpec, PowerCap


@dataclass(frozen=True)
class Scores:
    layouts: Layouts
    time_s: TimeBreakdown
    memory_gib: MemoryBreakdown
    energy: Energy
    step_time_s: np.ndarray
    tokens_per_s: np.ndarray
    model_tflops_per_gpu: np.ndarray
    mfu: np.ndarray
    extras: dict = field(default_factory=dict)  # name -> array, reported per layout (extension point)

    def __len__(self) -> int:
        return len(self.layouts)

    @property
    def energy_j_per_token(self) -> np.ndarray:
        return self.energy.energy_j_per_step / (self.tokens_per_s * self.step_time_s)


def score(model: ModelSpec, cluster: ClusterSpec, layouts: Layouts, *, cap: PowerCap | None = None,
          critical_batch_tokens: float | None = None) -> Scores:
    """`cap`: score under that power cap (planner/costs/power_caps.py); None: uncapped.
    `critical_batch_tokens`: McCandlish et al. 2018 B_crit for the statistical-efficiency factor."""
    run = cluster if cap is None else capped_cluster(cluster, cap)
    times = step_time(model, run, layouts)
    step = times.total
    gpus = layouts.gpus
    flops = model_flops_per_step(model)
    tflops_per_gpu = flops / (step * gpus) / 1e12
    fraction = None
    if run.gpu.power.full_power_compute_fraction is not None:
        fraction = flops / (gpus * (times.compute + times.recompute)) / peak_flops(run.gpu, model.training.precision)
    memory = memory_breakdown(model, cluster.gpu, layouts)
    energy = step_energy(run, times, gpus, compute_fraction=fraction)
    tokens_per_s = model.training.global_batch * model.seq_len / step
    extras = reliability_extras(cluster, layouts, memory, tokens_per_s)
    batch_tokens = float(model.training.global_batch * model.seq_len)
    factor = batch_token_factor(batch_tokens, critical_batch_tokens)
    if critical_batch_tokens is not None:
        extras["statistical_efficiency"] = np.full(step.shape, 1.0 / factor)
    if model.training.tokens is not None:
        extras.update(training_totals(cluster, model.training.tokens, extras["goodput_tokens_per_s"], gpus,
                                      energy.avg_power_kw, factor))
    return Scores(
        layouts=layouts,
        time_s=times,
        memory_gib=memory,
        energy=energy,
        step_time_s=step,
        tokens_per_s=tokens_per_s,
        model_tflops_per_gpu=tflops_per_gpu,
        mfu=tflops_per_gpu * 1e12 / peak_flops(cluster.gpu, model.training.precision),
        extras=extras,
    )
