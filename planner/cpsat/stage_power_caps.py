"""Per-stage power caps chosen with CP-SAT (the energy-bloat idea of Perseus, Chung et al. SOSP'24).

In an imbalanced pipeline (the last stage also computes the logits; uneven layer splits) the
slowest stage sets the steady state of 1F1B and the other stages wait. Their steady-state
micro-batches can run at a lower cap without slowing the step, as long as each stays within the
slowest stage's time: the first micro-batch (pipeline fill and drain, which lie on the critical
path) keeps the base cap. Per stage r and cap k, per micro-batch and GPU:
  t_r(k) = c_r(k) + q_r  (compute under the cap, TP communication unchanged),
  E_r(k) = c_r(k) P_busy(k) + q_r P_comm(k) + (t_max - t_r(k)) P_idle,
feasible only if t_r(k) <= t_max, with t_max the slowest stage at the base cap. The model has one
Boolean per (stage, feasible cap), exactly one per stage, and minimises the sum of E_r(k) over the
(m - 1) steady micro-batches; an optional budget on the summed busy power of all GPUs couples
the stages. Step time: (m - 1) max_r t_r(k_r) + t_max + (sum_r t_r - t_max) / v, never above the
base step (the base pipeline term of planner/costs/pipeline.py).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from planner.costs.comm import tp_time_per_layer_s
from planner.costs.compute import layer_compute
from planner.costs.context import job_context
from planner.costs.power_caps import cap_levels, capped_gpu
from planner.costs.pipeline_ranks import all_ranks, holds_logits, rank_layers
from planner.cpsat.solve import solve_model
from planner.specs import ClusterSpec, ModelSpec, PowerCap

ENERGY_SCALE = 1_000_000  # energies become parts-per-million of the largest option


@dataclass(frozen=True)
class StageCapInstance:
    """Everything the CP-SAT model needs, in floats: stages x caps arrays."""

    caps: list[PowerCap]
    stage_time_s: np.ndarray  # [stage, cap] t_r(k) per micro-batch
    stage_energy_j: np.ndarray  # [stage, cap] E_r(k) per micro-batch per GPU
    busy_power_w: np.ndarray  # [cap]
    gpus_per_stage: int
    steady_microbatches: int  # m - 1
    vpp: int
    base: int  # cap index of the base (uniform) cap
    pue: float
    max_busy_power_w: float | None = None  # summed over all GPUs, optional coupling

    @property
    def t_max(self) -> float:
        return float(self.stage_time_s[:, self.base].max())

    def feasible(self) -> np.ndarray:
        return self.stage_time_s <= self.t_max * (1 + 1e-12)


@dataclass(frozen=True)
class StageCapResult:
    status: str
    choice: np.ndarray  # cap index per stage
    caps_w: list[float]
    energy_saved_j_per_step: float
    base_step_pipeline_s: float
    step_pipeline_s: float
    objective: int | None
    bound: float | None
    wall_s: float


def stage_instance(model: ModelSpec, cluster: ClusterSpec, layout, base_cap: PowerCap | None = None,
                   caps: list[PowerCap] | None = None, max_busy_power_w: float | None = None) -> StageCapInstance:
    """Per-stage times and energies of a one-row layout under each cap."""
    assert len(layout) == 1
    caps = cap_levels(cluster.gpu) if caps is None else caps
    base_cap = base_cap or caps[0]
    base = next(i for i, c in enumerate(caps) if c == base_cap)
    st = job_context(model, cluster, layout).stack
    ranks = all_ranks(layout)[:, 0]
    stage_layers = rank_layers(model, layout, ranks).astype(float)
    last = holds_logits(layout, ranks)
    tp_layer = float(tp_time_per_layer_s(cluster, model, st, layout)[0])
    # the stack's fixed cost per micro-batch and chunk waits like communication (costs/pipeline.py)
    micro = st.microbatch_overhead_s * float(layout.vpp[0])
    q = stage_layers * tp_layer + micro
    times, energies, busy = [], [], []
    for cap in caps:
        gpu = capped_gpu(cluster.gpu, cap)
        lc = layer_compute(model, gpu, st, layout)
        c = stage_layers * float(lc.fwd_s[0] + lc.bwd_s[0] + lc.recompute_s[0]) + last * float(lc.logits_fwd_bwd_s[0])
        times.append(c + q)
        energies.append((c, gpu.busy_w, gpu.comm_w))
        busy.append(gpu.busy_w)
    t = np.stack(times, axis=1)
    t_max = t[:, base].max()
    idle = cluster.gpu.idle_w
    e = np.stack([c * pb + q * pc + (t_max - (c + q)) * idle for c, pb, pc in energies], axis=1)
    return StageCapInstance(caps, t, e, np.array(busy), int(layout.dp[0] * layout.tp[0]),
                            max(int(layout.num_microbatches[0]) - 1, 0), int(layout.vpp[0]), base,
                            cluster.power.pue, max_busy_power_w)


def integer_energy(inst: StageCapInstance) -> np.ndarray:
    """The one place floats become integers: ppm of the largest feasible option's energy."""
    top = float(np.max(np.abs(inst.stage_energy_j))) or 1.0
    return np.rint(inst.stage_energy_j / top * ENERGY_SCALE).astype(np.int64)


def build_model(inst: StageCapInstance):
    model = cp_model.CpModel()
    ok = inst.feasible()
    cost = integer_energy(inst)
    n_caps = len(inst.caps)
    pick: dict[tuple[int, int], cp_model.IntVar] = {}
    for r in range(ok.shape[0]):
        for k in np.flatnonzero(ok[r]):
            pick[r, int(k)] = model.new_bool_var(f"stage_{r}_cap_{inst.caps[k].cap_w:g}w")
        model.add_exactly_one([pick[r, int(k)] for k in np.flatnonzero(ok[r])])
    if inst.max_busy_power_w is not None:
        watts = np.rint(inst.busy_power_w).astype(np.int64) * inst.gpus_per_stage
        model.add(sum(int(watts[k]) * v for (r, k), v in pick.items()) <= int(np.floor(inst.max_busy_power_w)))
    # energy first, then prefer the higher cap (lower index) on ties: unique optimum
    model.minimize(sum((int(cost[r, k]) * n_caps + k) * v for (r, k), v in pick.items()))
    return model, pick


def pipeline_s(inst: StageCapInstance, choice: np.ndarray) -> float:
    """Pipeline part of the step with steady micro-batches at `choice` (module docstring)."""
    t = inst.stage_time_s
    base = t[:, inst.base]
    steady = t[np.arange(t.shape[0]), choice].max() if inst.steady_microbatches else 0.0
    return inst.steady_microbatches * steady + inst.t_max + (base.sum() - inst.t_max) / inst.vpp


def energy_saved_j(inst: StageCapInstance, choice: np.ndarray) -> float:
    """Energy per step saved against the base cap on every stage [J], facility power included."""
    r = np.arange(inst.stage_energy_j.shape[0])
    per_gpu = (inst.stage_energy_j[r, inst.base] - inst.stage_energy_j[r, choice]).sum()
    return float(per_gpu * inst.gpus_per_stage * inst.steady_microbatches * inst.pue)


def solve(inst: StageCapInstance, *, time_limit_s: float = 5.0, seed: int = 0) -> StageCapResult:
    started = time.perf_counter()
    model, pick = build_model(inst)
    solver, status, name = solve_model(model, time_limit_s, seed)
    base_choice = np.full(inst.stage_time_s.shape[0], inst.base)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return StageCapResult(name, base_choice, [], 0.0, pipeline_s(inst, base_choice), pipeline_s(inst, base_choice),
                              None, None, time.perf_counter() - started)
    choice = base_choice.copy()
    for (r, k), v in pick.items():
        if solver.value(v):
            choice[r] = k
    return StageCapResult(name, choice, [float(inst.caps[k].cap_w) for k in choice], energy_saved_j(inst, choice),
                          pipeline_s(inst, base_choice), pipeline_s(inst, choice), int(solver.objective_value),
                          float(solver.best_objective_bound), time.perf_counter() - started)


def stage_caps(model: ModelSpec, cluster: ClusterSpec, layout, base_cap: PowerCap | None = None,
               max_busy_power_w: float | None = None) -> StageCapResult:
    """Per-stage caps for a one-row layout whose uniform cap is `base_cap` (default: uncapped)."""
    return solve(stage_instance(model, cluster, layout, base_cap, max_busy_power_w=max_busy_power_w))
