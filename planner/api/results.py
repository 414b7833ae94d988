"""What the API returns: the planner's own typed, frozen results with a `to_dict()` that is the JSON
`plan ... --json` prints (docs/commands.md). Each type here is the engine's result (a `SearchResult`,
a `ScoredLayout`, ...) with what a later call needs beside it (the framework searched for) and its
JSON; nothing is recomputed."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from planner.api.checking import CheckReport, check_summary  # noqa: F401 (planner.api.results.CheckReport)
from planner.choose import TIE_PCT
from planner.fidelity import own
from planner.mixed_pools import PoolSearch
from planner.results import ScoredLayout
from planner.search import GpuCountResult, SearchResult
from planner.specs import ClusterSpec, ModelSpec


def _from(cls, base, **extra):
    """`base` (a dataclass) as an instance of its subclass `cls`, with `extra` fields."""
    return cls(**{f.name: getattr(base, f.name) for f in fields(base)}, **extra)


@dataclass(frozen=True)
class Search(SearchResult):
    """`planner.search`: the best layouts of a model on a cluster (`results`, `best`; `best` is None
    and `nearest` says why when no layout is feasible)."""

    framework: str | None = None  # the framework the layouts were restricted to

    def to_dict(self) -> dict[str, Any]:
        """`plan search --json`."""
        return search_dict(self)


def training_dict(model: ModelSpec) -> dict[str, Any]:
    """The training settings the layouts were priced with, after every flag (--seq-len, --precision,
    --global-batch, --torch-compile, a profile's stack): a script reading the JSON needs no spec file."""
    t = model.training
    out = {"seq_len": model.seq_len, "global_batch": t.global_batch, "precision": t.precision,
           "stack": t.stack.name, "torch_compile": t.torch_compile}
    if t.precision == "fp8":
        out["fp8_recipe"] = t.fp8_recipe  # delayed | tensorwise | blockwise: only FP8's scaling has one
    return out


def search_dict(r: SearchResult) -> dict[str, Any]:
    results = [s.to_dict() for s in r.results]
    s = r.solver
    out = {
        "model": r.model.name, "stack": r.model.training.stack.name, "cluster": r.cluster.name, "gpus": r.gpus,
        "training": training_dict(r.model),
        "objective": r.objective, "best": results[0] if results else None, "results": results,
        "solver": {"status": s.status, "method": s.method, "wall_s": s.wall_s, "objective": s.objective,
                   "bound": s.bound},
        "candidates": {"total": len(r.scores), "feasible": int(r.feasible.sum())},
        "rejected": r.rejected,
    }
    if r.nearest is not None:
        out["nearest"] = r.nearest.to_dict()
    if r.placement is not None:
        out["placement"] = r.placement
    if r.power_caps:
        out["power_caps_searched"] = True
    if r.stage_caps is not None:
        c = r.stage_caps
        out["stage_caps"] = {"status": c.status, "caps_w": c.caps_w, "energy_saved_j_per_step": c.energy_saved_j_per_step,
                             "base_pipeline_s": float(c.base_step_pipeline_s), "pipeline_s": float(c.step_pipeline_s),
                             "wall_s": c.wall_s}
    if r.frontier is not None:
        out["frontier"] = [x.to_dict() for x in r.frontier_results]
    if r.compiled_step_time_s is not None:
        out["torch_compile_step_time_s"] = r.compiled_step_time_s
    simple = r.simplest_within_tie
    if simple is not None:
        out["simplest_within_tie"] = {**simple.to_dict(), "tie_pct": TIE_PCT, "slower_than_best_pct":
                                      100 * (simple.step_time_s / r.best.step_time_s - 1)}
    return out


@dataclass(frozen=True)
class PoolsSearch(PoolSearch):
    """`planner.search` on a cluster of several GPU pools: each pool alone (`per_pool`), the best
    single pool's search (`best`) and the best pipeline across pools (`mixed`)."""

    framework: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """`plan search --json` on a cluster with pools: `best` is the overall best plan."""
        out = search_dict(self.best) if self.best is not None else {"best": None, "results": []}
        out["pools"] = {name: None if r is None else {"gpus": r.gpus, "best": r.best.to_dict()}
                        for name, r in self.per_pool.items()}
        out["mixed"] = None if self.mixed is None else _mixed_dict(self.mixed)
        out["placements_tried"] = [{"status": p.status, "step_s": p.step_s, "wall_s": p.wall_s} for p in self.tried]
        out["fastest"] = self.fastest
        if self.mixed is not None and self.fastest == "mixed":
            out["best"] = _mixed_dict(self.mixed)
            out.pop("simplest_within_tie", None)  # measured against one pool's best, not this one
        return out


def _mixed_dict(m) -> dict[str, Any]:
    p = m.placement
    return {"layout": m.layout, "gpus": m.gpus, "step_time_s": m.step_time_s, "pipeline_s": m.pipeline_s,
            "outside_pipeline_s": m.outside_pipeline_s, "tokens_per_s": m.tokens_per_s,
            "solver": {"status": p.status, "objective": p.objective, "bound": p.bound, "wall_s": p.wall_s}}


@dataclass(frozen=True)
class GpuCounts(GpuCountResult):
    """`planner.search(..., gpus_range=(lo, hi))`: the best layout per power-of-two GPU count and the
    recommended count (None: no count meets the constraints)."""

    def to_dict(self) -> dict[str, Any]:
        """`plan search --gpus-range LO:HI --json`."""
        rows = []
        for n, res, why, eff in zip(self.counts, self.results, self.reasons, self.scaling_efficiency):
            row = {"gpus": n, "feasible": res is not None, "scaling_efficiency": eff}
            if res is not None:
                row["best"] = res.best.to_dict()
            else:
                row["reason"] = why
            rows.append(row)
        return {"counts": rows, "recommended_gpus": self.recommended}


@dataclass(frozen=True)
class Estimate(ScoredLayout):
    """`planner.estimate`: one layout scored (`feasible`, `violations` say whether and why not), with
    the model and cluster it was scored on (what `planner.export` needs)."""

    model: ModelSpec | None = None
    cluster: ClusterSpec | None = None
    framework: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """`plan estimate --json`: ScoredLayout's, with the training settings it was priced with."""
        out = super().to_dict()
        if self.model is not None:
            out["training"] = training_dict(self.model)
        return out


@dataclass(frozen=True)
class Calibration(own.Calibration):
    """`planner.calibrate`: the fitted constants, each run fitted and left out, and notes. Pass it as
    `profile=` to `planner.search`/`estimate`, or `write` it as a profile file."""

    sources: tuple[str, ...] = ()  # the runs files and logs it was fitted to: `write` never replaces one

    def to_dict(self, name: str = "profile") -> dict[str, Any]:
        """`plan calibrate --json` (the profile file's content), named `name`."""
        from planner import version
        from planner.fidelity.profile import profile_data

        return profile_data(self, name, version())

    def write(self, path, name: str | None = None) -> None:
        """Write the profile file (YAML, kind: profile) whole or not at all, as `plan calibrate -o`;
        `name` defaults to the file's stem when it is a plain name. A symbolic link, a non-regular
        file or one of the runs files or logs it was fitted to is refused (SpecError), not replaced."""
        from pathlib import Path

        from planner.atomic import check_output, write_atomic
        from planner.specs.yamlio import dump_yaml

        path = Path(path)
        check_output(path, "--output", self.sources)
        data = self.to_dict(name or profile_name(path))
        write_atomic(path, dump_yaml(data), "--output", self.sources)


def profile_name(path) -> str:
    """A profile's name from the file it goes to: the file's stem when it is a plain name, else 'profile'."""
    from pathlib import Path

    from planner.specs import is_plain_name

    stem = "profile" if path is None else Path(path).stem
    return stem if is_plain_name(stem) else "profile"
