"""What `planner.allocate` and `planner.replan` return: the engine's results (planner/allocate.py,
planner/replan.py) with a `to_dict()` that is the command's `--json`. Imported on first use: the engine
modules load numpy, which `plan check` and `--help` never need."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from planner.allocate import Allocation
from planner.replan import Replan
from planner.specs import ClusterSpec, ModelSpec


@dataclass(frozen=True)
class Allocated(Allocation):
    """`planner.allocate`: GPUs and a layout per job (`chosen`; empty and `feasible` False when no
    allocation exists, `solve.unserved` says why), the solver's status, objective and bound (`solve`)."""

    def to_dict(self) -> dict[str, Any]:
        """`plan allocate --json`: per job the scored-layout JSON of `plan search` plus name, model and GPUs;
        the totals; the solver's status, objective and bound; `unserved` when infeasible."""
        a = self
        data = {
            "cluster": a.cluster.name, "cluster_gpus": a.cluster.total_gpus, "objective": a.instance.objective,
            "power_budget_kw": a.instance.power_budget_kw,
            "jobs": [{"name": job.name, "model": model.name, "gpus": c.gpus, **c.layout.to_dict()}
                     for job, model, c in a.chosen],
            "gpus_used": a.gpus_used, "power_kw": a.power_kw,
            "model_tflops": sum(c.work_tflops for _, _, c in a.chosen),
            "solver": {"status": a.solve.status, "objective": a.solve.objective, "bound": a.solve.bound,
                       "wall_s": a.solve.wall_s},
            "candidates": a.candidates,
        }
        # the objective in its unit (the solver's is a scaled integer): weighted model work or the makespan
        key = "objective_makespan_days" if a.instance.objective == "makespan" else "objective_weighted_model_tflops"
        data[key] = a.objective_value
        if a.solve.unserved is not None:
            data["unserved"] = {"jobs": list(a.solve.unserved.jobs), "reason": a.solve.unserved.reason}
        return data


@dataclass(frozen=True)
class Replanned(Replan):
    """`planner.replan`: the running layout, the best one on the GPUs left (`new`), what the change costs
    and whether to shrink now or wait for spares (`decision`), with the model and cluster they were scored on."""

    model: ModelSpec | None = None
    cluster: ClusterSpec | None = None

    def to_dict(self) -> dict[str, Any]:
        """`plan replan --json` (docs/replan.md)."""
        r, d = self, self.decision
        return {
            "gpus": r.gpus, "lost_gpus": r.lost_gpus, "gpus_left": r.gpus_left, "new_gpus": r.new_gpus,
            "global_batch": r.global_batch, "new_global_batch": r.new_global_batch, "change_note": r.change_note,
            "running": r.running.to_dict(), "new": r.new.to_dict(),
            "tokens_per_s_lost": r.tokens_per_s_lost,
            "change": {**asdict(r.change), "total_s": r.change.total_s},
            "decision": {"winner": d.winner, "spares_in_h": d.spares_in_h, "spares_source": d.spares_source,
                         "horizon_h": d.horizon_h, "horizon_source": d.horizon_source,
                         "shrink_tokens": d.shrink_tokens, "wait_tokens": d.wait_tokens,
                         "margin_tokens": d.margin_tokens, "margin_h": r.margin_h,
                         "back": {**asdict(d.back), "total_s": d.back.total_s}},
        }
