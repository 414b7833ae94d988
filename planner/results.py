"""Typed results: one scored layout, and what a search found. JSON and terminal text are two
functions of these in planner/report.py; `plan estimate`, `plan check` and `plan sweep` read them."""
from __future__ import annotations

import math

import numpy as np
from dataclasses import dataclass
from typing import Any

from planner.layout.arrays import row
from planner.costs.energy import Energy
from planner.costs.memory import MemoryBreakdown
from planner.costs.pipeline import PARTS_OF_TERMS, TimeBreakdown
from planner.costs.reliability import Reliability, TrainingTotals
from planner.errors import SpecError
from planner.fidelity.error_bands import ErrorBand


@dataclass(frozen=True)
class Violation:
    constraint: str  # a constraint's or a space rule's name
    message: str
    family: str | None = None  # hardware | performance | energy | scalability; None for a space rule


@dataclass(frozen=True)
class PowerCapLevel:
    power_cap_w: float
    power_cap_speed: float


@dataclass(frozen=True)
class ScoredLayout:
    """One layout with every figure the planner predicts for it (floats, not arrays)."""

    layout: dict[str, Any]  # axis name -> JSON value (planner.layout.axes), the JSON `layout` object
    violations: tuple[Violation, ...]
    step_time_s: float
    time_breakdown_s: TimeBreakdown
    memory_gib: MemoryBreakdown
    tokens_per_s: float
    model_tflops_per_gpu: float
    mfu: float
    energy: Energy
    energy_j_per_token: float
    reliability: Reliability
    error_band: ErrorBand  # expected |error| of step_time_s [%], and its basis
    statistical_efficiency: float | None = None
    training: TrainingTotals | None = None
    power_cap: PowerCapLevel | None = None  # when power caps were searched
    mfu_fp8_peak: float | None = None  # FP8/MXFP8 runs: MFU against the FP8 peak (`mfu` is against BF16)
    cost_usd_per_step: float | None = None  # GPU-hours plus electricity (planner/costs/price.py)
    co2e_g_per_step: float | None = None
    # The model's multi-token-prediction layers: an uneven split's Megatron layout string places them
    # (planner/export/megatron.py megatron_layout), so the shown split matches the export's
    mtp_layers: int = 0
    # A hybrid model (layer_pattern): Megatron-LM runs it with pretrain_mamba.py, whose MambaStack reads no
    # pipeline layout (planner/export/megatron.py): an uneven split has no Megatron flags to show
    hybrid: bool = False
    # The split is the stack's own (StackSpec.pipeline_split cost_balanced: nanotron balances layers by cost),
    # which no flag sets: not shown as Megatron flags
    stack_split: bool = False

    @property
    def megatron_schedule(self) -> bool:
        """Whether Megatron Core runs the layout's schedule (1F1B, interleaved; planner/export/frameworks.py):
        only then has its split Megatron flags (a V schedule's stages are not in Megatron's order)."""
        return (self.layout.get("schedule") or "1f1b") in ("1f1b", "interleaved")

    @property
    def cost_usd_per_m_tokens(self) -> float | None:
        """[$ per million tokens trained]"""
        if self.cost_usd_per_step is None:
            return None
        return self.cost_usd_per_step / (self.tokens_per_s * self.step_time_s) * 1e6

    @property
    def feasible(self) -> bool:
        return not self.violations

    @property
    def step_time_error_pct(self) -> float:
        return self.error_band.pct

    @property
    def energy_j_per_step(self) -> float:
        return self.energy.energy_j_per_step

    @property
    def avg_power_kw(self) -> float:
        return self.energy.avg_power_kw

    @property
    def goodput_tokens_per_s(self) -> float:
        return self.reliability.goodput_tokens_per_s

    def to_dict(self) -> dict[str, Any]:
        """The JSON of one scored layout, as `plan estimate --json` prints it (docs/commands.md, "JSON
        of one scored layout"): plain dicts, lists, numbers and strings."""
        from dataclasses import asdict

        # Offload's terms (host memory, exposed copies) only where the layout offloads (planner/costs/offload.py).
        memory = {k: round(v, 4) for k, v in asdict(self.memory_gib).items()
                  if (k != "host" or v) and k != "offload_layers"}  # the count is in the layout
        memory["total"] = round(self.memory_gib.total, 4)
        times = {k: v for k, v in asdict(self.time_breakdown_s).items() if k != "offload" or v}
        band = self.error_band
        terms = {k: v for k, v in times.items() if k not in PARTS_OF_TERMS}  # they sum to step_time_s
        out = {
            "layout": dict(self.layout), "feasible": self.feasible,
            "violations": [{"constraint": v.constraint, "message": v.message} for v in self.violations],
            "step_time_s": self.step_time_s, "step_time_error_pct": round(band.pct, 2),
            "step_time_error_basis": band.basis, "time_breakdown_s": terms,
            # parts of the terms above (not added to the step): the MoE routing imbalance's share
            "time_parts_s": {k: v for k, v in times.items() if k in PARTS_OF_TERMS},
            "memory_gib": memory, **({} if band.memory_pct is None else {"memory_error_pct": round(band.memory_pct, 2)}),
            "tokens_per_s": self.tokens_per_s, "model_tflops_per_gpu": self.model_tflops_per_gpu, "mfu": self.mfu,
            **({} if self.mfu_fp8_peak is None else {"mfu_fp8_peak": self.mfu_fp8_peak}),
            "energy_j_per_step": self.energy.energy_j_per_step, "energy_j_per_token": self.energy_j_per_token,
            "avg_power_kw": self.energy.avg_power_kw,
            **({} if self.cost_usd_per_step is None else {
                "cost_usd_per_step": self.cost_usd_per_step, "cost_usd_per_m_tokens": self.cost_usd_per_m_tokens,
                "co2e_g_per_step": self.co2e_g_per_step}),
            **asdict(self.reliability),
        }
        if self.statistical_efficiency is not None:
            out["statistical_efficiency"] = self.statistical_efficiency
        if self.training is not None:
            out.update(asdict(self.training))
        if self.power_cap is not None:
            out.update(asdict(self.power_cap))
        split = self.layout.get("stage_layers")
        if split is not None and not self.hybrid and self.megatron_schedule:
            from planner.export.megatron import megatron_pipeline_args

            args = megatron_pipeline_args(split, self.layout["pp"], self.layout.get("vpp", 1), self.mtp_layers)
            if args:
                out["megatron_pipeline_args"] = args
        return out


def scored_layout(scores, i: int, violations: tuple[Violation, ...] = (), stage_layers=None,
                  mtp_layers: int = 0, hybrid: bool = False, stack_split: bool = False) -> ScoredLayout:
    """Row i of `scores` (planner.score.Scores) as a ScoredLayout. `stage_layers`: transformer
    layers per virtual stage in schedule order (JSON `layout.stage_layers`); `mtp_layers`: the model's."""
    i = int(i)
    layout = scores.layouts.row(i)
    offloaded = int(np.broadcast_to(scores.memory_gib.offload_layers, (len(scores),))[i])
    if offloaded:  # layers whose activations go to the host (planner/costs/offload.py), as the exports set them
        layout["offload_layers"] = offloaded
    if stage_layers is not None:
        layout["stage_layers"] = [int(x) for x in stage_layers]
    cap = None
    if scores.power_caps is not None:
        level = scores.power_caps[int(scores.layouts.power_cap[i])]
        cap = PowerCapLevel(float(level.cap_w), float(level.speed))
    stat = scores.statistical_efficiency
    return ScoredLayout(
        layout=layout,
        violations=tuple(violations),
        step_time_s=float(scores.step_time_s[i]),
        time_breakdown_s=row(scores.time_s, i),
        memory_gib=row(scores.memory_gib, i),
        tokens_per_s=float(scores.tokens_per_s[i]),
        model_tflops_per_gpu=float(scores.model_tflops_per_gpu[i]),
        mfu=float(scores.mfu[i]),
        mfu_fp8_peak=None if scores.mfu_fp8_peak is None else float(scores.mfu_fp8_peak[i]),
        energy=row(scores.energy, i),
        energy_j_per_token=float(scores.energy_j_per_token[i]),
        reliability=row(scores.reliability, i),
        error_band=row(scores.error_band, i),
        statistical_efficiency=None if stat is None else float(stat[i]),
        training=None if scores.training is None else row(scores.training, i),
        power_cap=cap,
        cost_usd_per_step=None if scores.cost_usd_per_step is None else float(scores.cost_usd_per_step[i]),
        co2e_g_per_step=None if scores.co2e_g_per_step is None else float(scores.co2e_g_per_step[i]),
        mtp_layers=int(mtp_layers),
        hybrid=bool(hybrid),
        stack_split=bool(stack_split),
    )


# --- non-finite figures ------------------------------------------------------------------------

def _non_finite(data: Any, path: str) -> tuple[str, float, Any] | None:
    """(JSON path, value, the mapping holding it) of the first NaN or infinity in `data`."""
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, (list, tuple)) else ()
    for key, value in items:
        where = f"{path}.{key}" if path and isinstance(key, str) else f"{path}[{key}]" if path else str(key)
        if isinstance(value, float) and not math.isfinite(value):
            return where, value, data
        found = _non_finite(value, where) if isinstance(value, (dict, list, tuple)) else None
        if found is not None:
            return found
    return None


def non_finite_error(data: Any) -> SpecError | None:
    """The error (exit 2) for JSON-ready `data` holding NaN or an infinity, naming the field, or None.
    Goodput 0 (ETTR 0: failures outpace checkpoints and restarts) is the usual cause: it names the
    cluster's reliability fields."""
    found = _non_finite(data, "")
    if found is None:
        return None
    path, value, holder = found
    value = "infinite" if math.isinf(value) else "not a number"
    if isinstance(holder, dict) and holder.get("ettr") == 0 and "mtti_h" in holder:
        s = lambda x: f"{x:,.0f}" if x >= 10 else f"{x:.3g}"  # noqa: E731
        return SpecError(f"{path} is {value}: the job never progresses (ETTR 0: a failure every "
                         f"{s(holder['mtti_h'] * 3600)} s, a checkpoint write of {s(holder['checkpoint_write_s'])} s, "
                         f"a restart of {s(holder['restart_s'])} s)", path="reliability",
                         expected="reliability figures under which a job makes progress: gpu_mtbf_h, restart_s, "
                                  "storage_write_gbps of the cluster")
    return SpecError(f"{path} is {value}", expected="inputs within the planner's range")
