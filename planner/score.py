"""Score every candidate layout: one call of each cost model over the layout arrays."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .costs.compute import peak_flops
from .costs.energy import Energy, step_energy
from .costs.flops import model_flops_per_step
from .costs.memory import MemoryBreakdown, memory_breakdown
from .costs.pipeline import TimeBreakdown, step_time
from .space import Layouts
from .specs import ClusterSpec, ModelSpec


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


def score(model: ModelSpec, cluster: ClusterSpec, layouts: Layouts) -> Scores:
    times = step_time(model, cluster, layouts)
    step = times.total
    gpus = layouts.gpus
    flops = model_flops_per_step(model)
    tflops_per_gpu = flops / (step * gpus) / 1e12
    return Scores(
        layouts=layouts,
        time_s=times,
        memory_gib=memory_breakdown(model, cluster.gpu, layouts),
        energy=step_energy(cluster, times, gpus),
        step_time_s=step,
        tokens_per_s=model.training.global_batch * model.seq_len / step,
        model_tflops_per_gpu=tflops_per_gpu,
        mfu=tflops_per_gpu * 1e12 / peak_flops(cluster.gpu, model.training.precision),
    )
