"""Score one given layout (the `plan estimate` command) with the same models and constraints."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from planner.layout.axes import AXES, SpaceContext, filling, given_gpus
from planner.constraints import Limits, evaluate
from planner.options import check_axis
from planner.results import ScoredLayout, Violation, scored_layout
from planner.score import score
from planner.layout.space import derive_dp, rule_violations, single_layout
from planner.costs.pipeline_ranks import default_split, split_ranks
from planner.errors import SpecError
from planner.specs import ClusterSpec, ModelSpec


def layout_of(model: ModelSpec, gpus: int, given: dict[str, Any], *, gpus_said: str, in_file: bool = False):
    """A one-row Layouts from the axis values a user gave (JSON values; dp may be None: derived
    from the GPU count). Values out of an axis's domain are bad input (exit 2); a valid value
    that breaks a rule of the space is a violation, reported by `estimate_layout`."""
    values = {a.name: given.get(a.name, a.default) for a in AXES if a.given is not None}
    for a in AXES:
        if a.given is not None:
            check_axis(a, values[a.name])
    values[filling().name] = derive_dp(gpus, values, gpus_said=gpus_said, in_file=in_file)
    derived = {a.name: a.derive(values, _context(model, gpus)) for a in AXES if a.role == "derived"}
    return single_layout(**values, **derived)


def _context(model: ModelSpec, gpus: int) -> SpaceContext:
    return SpaceContext(gpus=gpus, layers=model.layers, heads=model.heads, kv_heads=model.num_kv_heads,
                        global_batch=model.training.global_batch, seq_len=model.seq_len,
                        experts=model.moe.experts if model.moe else 0,
                        fp8_param_gather=model.training.fp8_param_gather)


def estimate_layout(model: ModelSpec, cluster: ClusterSpec, *, gpus: int | None = None, limits: Limits = Limits(),
                    gpus_said: str | None = None, in_file: bool = False, stage_layers: list[int] | None = None,
                    **given) -> ScoredLayout:
    """`given`: axis values by name (tp, pp and micro_batch at least); dp defaults to
    gpus / (the other degrees), gpus to the product of the degrees when all are given, else to
    the cluster's. `stage_layers`: transformer layers per virtual stage in schedule order
    (default: the default split, planner/costs/pipeline_ranks.py)."""
    implied = given_gpus({a.name: given.get(a.name, a.default) for a in AXES if a.role == "degree"})
    total = gpus or implied or cluster.total_gpus
    lay = layout_of(model, total, given, gpus_said=gpus_said or f"--gpus is {total}", in_file=in_file)
    _check_expert_groups(lay, in_file)
    structural = [Violation(name, message) for name, message in rule_violations(lay, _context(model, total))]
    p, v = int(lay.pp[0]), int(lay.vpp[0])
    ranks = None
    if stage_layers is not None:
        check_split(model, p, v, stage_layers)
        ranks = split_ranks(model, lay, stage_layers)
    scores = score(model, cluster, lay, ranks=ranks)
    masks = evaluate(model, cluster, scores, limits)
    violations = structural + [Violation(m.name, m.explain(0), m.family) for m in masks if not bool(np.asarray(m.ok)[0])]
    return scored_layout(scores, 0, tuple(violations), stage_layers or default_split(model, p, v))


def _check_expert_groups(lay, in_file: bool) -> None:
    """An expert group (ep*etp GPUs) lies within a stage's tp*cp*dp GPUs; a larger one leaves no
    expert data-parallel replica (edp 0: every expert figure a division by zero). Bad input."""
    tp, cp, dp, ep, etp = (int(getattr(lay, name)[0]) for name in ("tp", "cp", "dp", "ep", "etp"))
    if ep * etp > tp * cp * dp:
        raise SpecError(f"ep*etp = {ep}*{etp} = {ep * etp} GPUs per expert group is more than the tp*cp*dp = "
                        f"{tp}*{cp}*{dp} = {tp * cp * dp} GPUs of a pipeline stage",
                        path="ep/etp" if in_file else "--ep/--etp", expected="ep*etp dividing tp*cp*dp")


def check_split(model: ModelSpec, pp: int, vpp: int, stage_layers: list[int]) -> None:
    """An explicit split names pp*vpp virtual stages that hold every layer once."""
    if len(stage_layers) != pp * vpp or any(k < 0 for k in stage_layers) or sum(stage_layers) != model.layers:
        raise SpecError(f"{len(stage_layers)} stages holding {sum(stage_layers)} layers",
                        path="--stage-layers", expected=f"pp*vpp = {pp * vpp} counts >= 0 that sum to the "
                        f"{model.layers} layers, in schedule order (chunk j of rank r at j*pp + r)")


def estimate_defaults(given: dict, gpus: int | None, cluster: ClusterSpec) -> dict:
    """The axes not given that default as search picks (Axis.estimate_default: sequence parallelism
    when tp > 1, ZeRO 1 when dp*cp > 1), from the degrees given and the GPU count."""
    unset = [a for a in AXES if a.estimate_default is not None and given.get(a.name) is None]
    if not unset:
        return given
    degrees = {a.name: given.get(a.name) if given.get(a.name) is not None else a.default
               for a in AXES if a.role == "degree"}
    if degrees["dp"] is None:  # as estimate_layout derives it; a mismatch is reported there
        total = gpus or given_gpus(degrees) or cluster.total_gpus
        others = math.prod(v for k, v in degrees.items() if k != "dp")
        degrees["dp"] = total // others if total % others == 0 else 1
    return {**given, **{a.name: a.estimate_default(degrees) for a in unset}}
