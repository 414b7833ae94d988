"""Score one given layout (the `plan estimate` command) with the same models and constraints."""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from planner.layout.axes import AXES, SpaceContext, filling, given_gpus
from planner.constraints import Limits, evaluate
from planner.costs.offload import count_headroom
from planner.options import check_axis
from planner.results import ScoredLayout, Violation, scored_layout
from planner.score import score
from planner.layout.space import derive_dp, rule_violations, single_layout
from planner.costs.pipeline_ranks import cost_balanced, layout_default_split, split_ranks
from planner.errors import SpecError
from planner.specs import ClusterSpec, ModelSpec


def layout_of(model: ModelSpec, gpus: int, given: dict[str, Any], *, gpus_said: str, in_file: bool = False):
    """A one-row Layouts from the axis values a user gave (JSON values; dp may be None: derived
    from the GPU count). Values out of an axis's domain are bad input (exit 2); a valid value
    that breaks a rule of the space is a violation, reported by `estimate_layout`."""
    # a value left unset (None) takes the axis default, but dp, which the GPU count fills
    values = {a.name: a.default if given.get(a.name) is None and not a.fills else given.get(a.name)
              for a in AXES if a.given is not None}
    for a in AXES:
        if a.default_from is not None and given.get(a.name) is None:
            values[a.name] = a.to_json(a.default_from(values))
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
                        fp8_param_gather=model.training.fp8_param_gather, mixer_heads=model.tp_split_heads)


def estimate_layout(model: ModelSpec, cluster: ClusterSpec, *, gpus: int | None = None, limits: Limits = Limits(),
                    gpus_said: str | None = None, in_file: bool = False, stage_layers: list[int] | None = None,
                    **given) -> ScoredLayout:
    """`given`: axis values by name (tp, pp and micro_batch at least); dp defaults to
    gpus / (the other degrees), gpus to the product of the degrees when all are given, else to
    the cluster's. `stage_layers`: transformer layers per virtual stage in schedule order
    (default: the default split, planner/costs/pipeline_ranks.py)."""
    from planner.offload_search import check_offload

    if given.get("offload") is None:  # not given: the model's own offload, else none
        given = {**given, "offload": model.training.offload or "none"}
        check_offload(cluster, given["offload"], "training.offload")
    check_offload(cluster, given.get("offload"), "layout.offload" if in_file else "--offload")
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
    scores = score(model, cluster, lay, ranks=ranks, memory_headroom=count_headroom(limits.memory_headroom))
    # an estimate's tp is the user's choice, as a search's fixed tp is (search equals estimate)
    masks = evaluate(model, cluster, scores, replace(limits, fixed={**limits.fixed, "tp": int(lay.tp[0])}))
    violations = structural + [Violation(m.name, m.explain(0), m.family) for m in masks if not bool(np.asarray(m.ok)[0])]
    split = stage_layers or layout_default_split(model, lay)
    return scored_layout(scores, 0, tuple(violations), split, model.mtp_layers or 0, model.layer_pattern is not None,
                         stage_layers is None and cost_balanced(model))


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


def estimate_defaults(given: dict, gpus: int | None, cluster: ClusterSpec, framework: str | None = None) -> dict:
    """The axes not given that default as search picks (Axis.estimate_default: sequence parallelism
    when tp > 1, ZeRO 1 when dp*cp > 1), from the degrees given and the GPU count. For torchtitan,
    which has no ZeRO-1, a defaulted ZeRO 1 is its own default instead: FSDP over every data-parallel
    rank (data_parallel_shard_degree -1, torchtitan's job config), ZeRO 3."""
    unset = [a for a in AXES if a.estimate_default is not None and given.get(a.name) is None]
    if not unset:
        return given
    degrees = {a.name: given.get(a.name) if given.get(a.name) is not None else a.default
               for a in AXES if a.role == "degree"}
    if degrees["dp"] is None:  # as estimate_layout derives it; a mismatch is reported there
        total = gpus or given_gpus(degrees) or cluster.total_gpus
        others = math.prod(v for k, v in degrees.items() if k != "dp")
        degrees["dp"] = total // others if total % others == 0 else 1
    filled = {**given, **{a.name: a.estimate_default({**given, **degrees}) for a in unset}}
    if framework is not None and framework.startswith("torchtitan") and given.get("zero") is None and filled.get("zero") == 1:
        filled["zero"] = 3
    return filled


def with_memory_hint(result: ScoredLayout, model: ModelSpec, cluster: ClusterSpec, *, gpus: int | None,
                     limits: Limits, given: dict, in_file: bool = False) -> ScoredLayout:
    """`result` with its memory violation's tips replaced by a change of settings that fits, found by
    scoring each (one setting changed, then two, then three; the fastest that fits), or said to be none.
    The change is spelled as options (`--pp 4`) or, `in_file`, as a plan file's layout keys (`pp: 4`)."""
    from dataclasses import replace

    from planner.constraints.hardware import has_memory_tips, with_memory_hint as hinted

    if not has_memory_tips(result.violations):  # fits, or below the floor of the states alone
        return result
    found = memory_fix(result, model, cluster, gpus=gpus, limits=limits, given=given, in_file=in_file)
    return replace(result, violations=hinted(result.violations, found, moe=model.moe is not None, in_file=in_file))


def _hint_choices(lay: dict, moe: bool) -> dict:
    """Axis -> values to try, from the layout scored (the degrees keep the GPU count)."""
    choices = {
        "cp": [lay["cp"] * 2, lay["cp"] * 4],
        "pp": [lay["pp"] * 2],
        "tp": [lay["tp"] * 2],
        "recompute": {"none": ["selective", "full"], "selective": ["full"], "full": []}[lay["recompute"]],
        "zero": list(range(lay["zero"] + 1, 4)),
        "sequence_parallel": [True] if not lay["sequence_parallel"] else [],
        "micro_batch": sorted({1, lay["micro_batch"] // 2} - {0}) if lay["micro_batch"] > 1 else [],
        "ep": [lay["ep"] * 2] if moe else [],
    }
    return {k: v for k, v in choices.items() if v}


def spelled_change(name: str, value: Any, in_file: bool) -> str:
    """One changed setting as a user writes it: `--pp 4`, `--sequence-parallel`; in a plan file `pp: 4`."""
    from planner.layout.axes import axis

    if in_file:
        return f"{name}: {str(value).lower() if isinstance(value, bool) else value}"
    return axis(name).as_option(value)


def memory_fix(result: ScoredLayout, model: ModelSpec, cluster: ClusterSpec, *, gpus: int | None, limits: Limits,
               given: dict, in_file: bool = False):
    """([changes], its scored layout) of the fastest change of at most HINT_CHANGES settings that makes
    the layout fit in memory without breaking anything else; None when none does."""
    from itertools import combinations, product

    from planner.constraints.hardware import HINT_CHANGES

    lay = result.layout
    total = int(lay["dp"] * lay["tp"] * lay["pp"] * lay["cp"])
    others = {v.constraint for v in result.violations} - {"memory"}
    choices = _hint_choices(lay, model.moe is not None)
    base = {k: lay[k] for k in given if k in lay}
    for n in range(1, HINT_CHANGES + 1):
        fits = []
        for names in combinations(choices, n):
            for values in product(*(choices[k] for k in names)):
                change = dict(zip(names, values))
                trial = {**base, **change}
                if {"cp", "pp", "tp"} & set(change):
                    trial["dp"] = None  # the other degrees keep the GPU count
                try:
                    scored = estimate_layout(model, cluster, gpus=gpus or total, limits=limits, **trial)
                except SpecError:  # a degree that does not divide the GPUs, an expert group too large
                    continue
                if {v.constraint for v in scored.violations} <= others:
                    if in_file and given.get("dp") is not None and "dp" in trial and trial["dp"] is None:
                        change["dp"] = scored.layout["dp"]  # a file that spells dp keeps the GPU count by it
                    fits.append((scored.step_time_s, [spelled_change(k, v, in_file) for k, v in change.items()], scored))
        if fits:
            _, spelled, scored = min(fits, key=lambda f: f[0])
            return spelled, scored
    return None
