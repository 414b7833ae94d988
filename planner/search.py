"""The search: enumerate the layout space, score it, apply the constraints, give the best rows an
uneven stage split (CP-SAT, planner/refine.py), sort the feasible rows (planner/choose.py)."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import partial

import numpy as np

from planner.layout.axes import AXES, RULES, SpaceContext
from planner.constraints import Limits, Mask, evaluate
from planner.costs.compute import eager_block_ops_on
from planner.costs.offload import count_headroom
from planner.costs.power_caps import cap_levels
from planner.costs.pipeline_ranks import layout_default_split
from planner.costs.pipeline_ranks import cost_balanced
from planner.refine import SPLIT_TIME_LIMIT, SPLIT_TOP, refine
from planner.errors import InfeasibleError, SpecError, SpecErrors
from planner.frontier import pareto_front
from planner.offload_search import offload_space, with_offload
from planner.results import ScoredLayout, Violation, scored_layout
from planner.score import Scores, score
from planner.choose import TIE_PCT, SolveResult, choose, contenders, simplest_within, simplicity_keys
from planner.layout.space import SpaceLimits, enumerate_layouts, tiebreak_rank
from planner.specs.shipped import shipped_names, stack_data, unknown_stack_message
from planner.specs.precision import PRECISIONS
from planner.specs import TrainingSpec, ClusterSpec, ModelSpec
from planner.cpsat.stage_power_caps import StageCapResult, stage_caps
from planner.costs.price import step_co2e_g, step_cost_usd

OBJECTIVES = ("time", "energy", "cost", "carbon")


@dataclass(frozen=True)
class SearchResult:
    model: ModelSpec
    cluster: ClusterSpec
    gpus: int
    objective: str
    scores: Scores
    masks: list[Mask]
    feasible: np.ndarray  # bool per row
    chosen: np.ndarray  # row indices, best first
    solver: SolveResult
    frontier: np.ndarray | None = None  # rows on the time vs energy-per-token Pareto frontier (--frontier)
    power_caps: bool = False  # whether rows include capped variants (the power_cap axis)
    stage_caps: StageCapResult | None = None  # per-stage caps of the best row, when caps were searched
    splits: dict[int, tuple[int, ...]] = field(default_factory=dict)  # row -> uneven split (planner/refine.py)
    split_solves: dict = field(default_factory=dict)  # row -> the stage-split CP-SAT answer, rows tried
    pool: str | None = None  # the pool searched, on a cluster of several (planner/mixed_pools.py)
    simplest: int | None = None  # the simplest row within TIE_PCT of the best (planner/choose.py), if not the best
    compiled_step_time_s: float | None = None  # the best row under torch.compile, where the stack runs eager ops and it is off

    @property
    def simplest_within_tie(self) -> ScoredLayout | None:
        return None if self.simplest is None else self._scored(self.simplest)

    def stage_layers(self, i: int) -> tuple[int, ...]:
        """Transformer layers per virtual stage of row i, in schedule order."""
        i = int(i)
        if i in self.splits:
            return self.splits[i]
        lay = self.scores.layouts
        return tuple(layout_default_split(self.model, lay.take(np.array([i]))))

    def _scored(self, i: int, violations: tuple = ()) -> ScoredLayout:
        s = scored_layout(self.scores, int(i), violations, self.stage_layers(i), self.model.mtp_layers or 0,
                          self.model.layer_pattern is not None, cost_balanced(self.model) and int(i) not in self.splits)
        if self.pool is not None:  # every pipeline rank in the one pool searched
            s.layout["stage_pools"] = [self.pool] * int(self.scores.layouts.pp[int(i)])
        return s

    @property
    def rejected(self) -> dict[str, int]:
        return {m.name: int((~m.ok).sum()) for m in self.masks}

    def nearest_infeasible(self) -> int | None:
        """The row that fails the fewest constraints, and by the least."""
        if not len(self.scores):
            return None
        fails = np.zeros(len(self.scores))
        excess = np.zeros(len(self.scores))
        for m in self.masks:
            fails += ~m.ok
            if m.excess is not None:
                excess += np.where(m.ok, 0.0, m.excess)
        return int(np.lexsort((excess, fails))[0])

    def violations(self, i: int) -> list[Violation]:
        return [Violation(m.name, m.explain(i), m.family) for m in self.masks if not m.ok[i]]

    def scored(self, i: int) -> ScoredLayout:
        """Row i as a typed result, with its violations."""
        return self._scored(i, tuple(self.violations(int(i))))

    @property
    def results(self) -> list[ScoredLayout]:
        """The chosen layouts, best first."""
        return [self._scored(i) for i in self.chosen]

    @property
    def best(self) -> ScoredLayout | None:
        return self._scored(self.chosen[0]) if self.chosen.size else None

    @property
    def placement(self) -> dict | None:
        """How the best layout's ranks fill a rack-scale NVLink domain (planner.costs.comm.placement);
        None on clusters whose NVLink domain is a node, or with no feasible layout."""
        if not self.chosen.size:
            return None
        from planner.costs.comm import placement

        return placement(self.cluster, self.scores.layouts.take(np.array([int(self.chosen[0])])))

    @property
    def nearest(self) -> ScoredLayout | None:
        """The nearest infeasible layout (when nothing is feasible), with what it lacks."""
        if self.chosen.size:
            return None
        near = self.nearest_infeasible()
        return None if near is None else self.scored(near)

    @property
    def frontier_results(self) -> list[ScoredLayout] | None:
        return None if self.frontier is None else [self._scored(i) for i in self.frontier]


def with_global_batch(model: ModelSpec, global_batch: int | None) -> ModelSpec:
    if global_batch is None:
        return model
    if global_batch <= 0:
        raise SpecError("global batch must be positive", path="--global-batch", expected="an integer > 0")
    return model.model_copy(update={"training": model.training.model_copy(update={"global_batch": global_batch})})


def with_run(model: ModelSpec, *, seq_len: int | None = None, precision: str | None = None,
             recompute_modules: tuple[str, ...] | None = None, offload_layers: int | None = None,
             torch_compile: bool | None = None, fp8_recipe: str | None = None,
             flags: dict[str, str], file: str | None = None, line: int | None = None) -> ModelSpec:
    """`model` as if its spec said `seq_len`, `training.precision`, `training.recompute_modules`,
    `training.offload_layers`, `training.torch_compile` and `training.fp8_recipe`,
    validated by the spec's own rules (bounds, choices, cross-field checks); a problem is said under
    what set the field (`flags`: spec path -> flag or field path), at `file`/`line` when given."""
    from planner.specs.loading import validate
    from planner.specs.yamlio import LoadedYaml

    values = {"seq_len": seq_len, "training.precision": precision, "training.recompute_modules": recompute_modules,
              "training.offload_layers": offload_layers, "training.torch_compile": torch_compile,
              "training.fp8_recipe": fp8_recipe}
    given = {path: flags[path] for path, v in values.items() if v is not None}
    if not given:
        return model
    # Only the fields the spec set (exclude_unset): `--stack` keeps telling a stated setting from a
    # stack default, as with_stack does.
    data = model.model_dump(exclude_unset=True)
    for path in given:
        if path == "seq_len":
            data["seq_len"] = seq_len
        else:
            data["training"] = {**data.get("training", {}), path.split(".")[1]: values[path]}
    try:
        return validate(ModelSpec, data, LoadedYaml(data=data, file=None, lines={}))
    except SpecErrors as exc:
        raise SpecErrors([_said_under(e, given, file, line) for e in exc.errors]) from None
    except SpecError as exc:
        raise _said_under(exc, given, file, line) from None


def _said_under(exc: SpecError, given: dict[str, str], file: str | None, line: int | None) -> SpecError:
    """The spec's error about an overridden field under what set it; a cross-field one (fp8_param_gather
    with --precision bf16) under everything given."""
    flag = given.get(exc.path or "") or "/".join(given.values())
    message = exc.message if exc.path in given or not exc.path else f"{exc.path}: {exc.message}"
    return SpecError(message, path=flag, expected=exc.expected, file=file, line=line)


def with_stack(model: ModelSpec, stack: str | None) -> ModelSpec:
    """The model trained with another software stack (`--stack`); settings the model file states
    itself (attention, overlaps) stay as overrides."""
    if stack is None:
        return model
    if stack_data(stack) is None:
        raise SpecError(unknown_stack_message(stack, with_names=False), path="--stack",
                        expected=f"one of: {', '.join(shipped_names('stack'))}")
    stated = model.training.model_dump(include=model.training.model_fields_set - {"stack"})
    training = TrainingSpec.model_validate({**stated, "stack": stack})
    return model.model_copy(update={"training": training})


def objective_cost(cluster: ClusterSpec, scores: Scores, objective: str) -> np.ndarray:
    if objective == "time":
        return scores.step_time_s
    if objective == "energy":
        return scores.energy.energy_j_per_step
    if objective == "cost":
        return step_cost_usd(cluster, scores.layouts.gpus, scores.step_time_s, scores.energy.energy_j_per_step)
    if objective == "carbon":
        return step_co2e_g(cluster, scores.energy.energy_j_per_step)
    raise SpecError(f"unknown objective '{objective}'", path="--objective", expected=" | ".join(OBJECTIVES))


def choice_keys(cluster: ClusterSpec, scores: Scores, objective: str, rows: np.ndarray) -> list[np.ndarray]:
    """The order of layouts (planner/choose.py): the objective, then step time (or, for time, the
    energy per step), then fewest GPUs, then the tie-break rank."""
    second = scores.energy.energy_j_per_step if objective == "time" else scores.step_time_s
    return [objective_cost(cluster, scores, objective)[rows], second[rows], scores.layouts.gpus[rows],
            tiebreak_rank(scores.layouts.take(rows))]


def check_precision(model: ModelSpec, cluster: ClusterSpec, file: str | None = None, line: int | None = None) -> None:
    """The model's training precision needs a peak on the cluster's GPU (FP8 on an A100 does not run)."""
    prec = model.training.numerics
    if getattr(cluster.gpu.peak_tflops, prec.peak) is None:
        have = [k for k, v in cluster.gpu.peak_tflops.model_dump().items() if v is not None and k in PRECISIONS]
        why = "; FP4 tensor cores came with Blackwell: Hopper and Ampere have none" if prec.is_fp4 else ""
        raise SpecError(f"precision {prec.name} needs a {prec.peak} peak, and the {cluster.gpu.name} preset has none "
                        f"(cluster {cluster.name}{why})", file=file, line=line, path="training.precision",
                        expected=" | ".join(have))


def check_fixed_axes(model: ModelSpec, gpus: int, fixed: dict) -> None:
    """Axis values fixed on the command line that break a rule of the space on their own (--ep 7
    with 8 experts, --cp 3 with a 4,096-token sequence) are bad input, not an empty search."""
    ctx = SpaceContext(gpus=gpus, layers=model.layers, heads=model.heads, kv_heads=model.num_kv_heads,
                       global_batch=model.training.global_batch, seq_len=model.seq_len,
                       experts=model.moe.experts if model.moe else 0, min_cp_tokens=1,
                       fp8_param_gather=model.training.fp8_param_gather, mixer_heads=model.tp_split_heads)
    by_name = {a.name: a for a in AXES}
    for rule in RULES:
        if not set(rule.axes) <= set(fixed):
            continue
        stored = {k: np.int64(by_name[k].to_stored(v)) for k, v in fixed.items()}
        if not bool(rule.ok(stored, ctx)):
            row = {k: by_name[k].to_json(v) for k, v in stored.items()}
            raise SpecError(rule.message(row, ctx), path="/".join(by_name[k].flag for k in rule.axes),
                            expected="values that obey the rule")


def space_for(model: ModelSpec, gpus: int, space: SpaceLimits = SpaceLimits(), cap_levels: int = 1,
              fixed: dict | None = None):
    """The layouts a search scores; `fixed` (Limits.fixed) values are tried wherever the rules allow
    them, beyond the values a search tries of its own (an uneven vpp, a micro-batch above
    max_micro_batch): every layout `plan estimate` accepts is in the space with its axes fixed."""
    return enumerate_layouts(gpus=gpus, layers=model.layers, heads=model.heads, kv_heads=model.num_kv_heads,
                             global_batch=model.training.global_batch, seq_len=model.seq_len,
                             experts=model.moe.experts if model.moe else 0, limits=space,
                             cap_levels=cap_levels, fp8_param_gather=model.training.fp8_param_gather,
                             include=fixed, mixer_heads=model.tp_split_heads)


def search(
    model: ModelSpec,
    cluster: ClusterSpec,
    *,
    gpus: int | None = None,
    objective: str = "time",
    top_k: int = 5,
    limits: Limits = Limits(),
    space: SpaceLimits = SpaceLimits(),
    time_limit_s: float = 10.0,
    power_caps: bool | None = None,
    frontier: bool = False,
    critical_batch_tokens: float | None = None,
    split_top: int = SPLIT_TOP,
    framework: str | None = None,
) -> SearchResult:
    """`power_caps`: also try the GPU preset's power-cap levels (None: when the objective is not
    time, with --frontier, or with an energy limit); `frontier`: also return the Pareto frontier;
    `critical_batch_tokens`: McCandlish et al. 2018 B_crit for time to train; `split_top`: rows
    of the vectorised pass given an uneven stage split by CP-SAT (planner/refine.py; 0: none);
    `framework`: only the layouts that framework runs (planner/export/frameworks.py)."""
    gpus = cluster.total_gpus if gpus is None else gpus  # 0 is a mistake, not "the whole cluster"
    if gpus <= 0:
        raise SpecError("GPU count must be positive", path="--gpus", expected="an integer > 0")
    check_precision(model, cluster)
    if objective not in OBJECTIVES:
        objective_cost(cluster, None, objective)  # raises the error
    caps = caps_searched(cluster, objective, frontier, limits, power_caps)
    levels = cap_levels(cluster.gpu) if caps else None
    space = offload_space(model, cluster, space, limits)
    check_fixed_axes(model, gpus, {**limits.fixed, **{a.name: getattr(space, a.name) for a in AXES
                                                    if getattr(space, a.name, None) is not None}})
    layouts = space_for(model, gpus, space, len(levels) if caps else 1, limits.fixed)
    if not len(layouts):
        raise InfeasibleError(empty_space_reason(model, gpus))
    layouts = framework_layouts(framework, layouts, model) if framework is not None else layouts
    scaled = limits.min_scaling_efficiency is not None and gpus >= 2
    reference = _reference_rate(model, cluster, gpus // 2, limits, space) if scaled else None
    scored = partial(score, model, cluster, caps=levels, critical_batch_tokens=critical_batch_tokens,
                     memory_headroom=count_headroom(limits.memory_headroom))  # the offloaded layer count fits the user's headroom
    layouts, scores, masks = with_offload(model, cluster, layouts, scored(layouts), limits, space, scored,
                                          reference, framework)
    refined, masks = _refined(model, cluster, scores, objective, limits, reference, levels, critical_batch_tokens,
                              split_top, time_limit_s, masks)
    scores = refined.scores
    feasible = np.ones(len(scores), dtype=bool)
    for m in masks:
        feasible &= m.ok
    result, chosen = _choose(cluster, scores, objective, feasible, top_k)
    front = None
    if frontier:
        front = pareto_front(scores.step_time_s, scores.energy_j_per_token, np.flatnonzero(feasible),
                             tiebreak_rank(scores.layouts))
    return SearchResult(model, cluster, gpus, objective, scores, masks, feasible, chosen, result,
                        frontier=front, power_caps=caps, stage_caps=_stage_caps(model, cluster, scores, chosen, levels),
                        splits=refined.splits,
                        split_solves=refined.solves, simplest=_tie(scores, feasible, chosen, objective),
                        compiled_step_time_s=_compiled(model, cluster, scores, chosen, levels))


def _stage_caps(model: ModelSpec, cluster: ClusterSpec, scores: Scores, chosen: np.ndarray, levels) -> StageCapResult | None:
    """Per-stage power caps of the best row, when caps were searched and it is a pipeline."""
    if levels is None or not chosen.size or scores.layouts.pp[chosen[0]] <= 1:
        return None
    i = int(chosen[0])
    return stage_caps(model, cluster, scores.layouts.take(np.array([i])), levels[int(scores.layouts.power_cap[i])])


def _compiled(model: ModelSpec, cluster: ClusterSpec, scores: Scores, chosen: np.ndarray, levels) -> float | None:
    """The best row's step time with training.torch_compile, where the stack's blocks run their elementwise
    ops one by one without it (StackSpec.eager_block_ops) and the model does not compile them: what
    --torch-compile would give. Its stage split is the default one (the change scales the row's time)."""
    if not chosen.size or not eager_block_ops_on(model):
        return None
    row = scores.layouts.take(chosen[:1])
    compiled = model.model_copy(update={"training": model.training.model_copy(update={"torch_compile": True})})
    eager_s, compiled_s = (float(score(m, cluster, row, caps=levels).step_time_s[0]) for m in (model, compiled))
    return float(scores.step_time_s[chosen[0]]) * compiled_s / eager_s


def _tie(scores: Scores, feasible: np.ndarray, chosen: np.ndarray, objective: str) -> int | None:
    """The simplest feasible row predicted within TIE_PCT of the fastest (planner/choose.py)."""
    if objective != "time" or not chosen.size:
        return None
    return simplest_within(scores.step_time_s, np.flatnonzero(feasible), int(chosen[0]), TIE_PCT,
                           lambda rows: simplicity_keys(scores.layouts.take(rows)))


def framework_layouts(framework: str, layouts, model: ModelSpec):
    """The rows `framework` runs of `model`. None: bad input (SpecError, exit 2) when the model's own
    settings rule out layouts the framework would otherwise run (torchtitan with an FP16 model), else an
    InfeasibleError naming what ruled out the most."""
    from collections import Counter

    from planner.errors import printable
    from planner.export.frameworks import framework_mask

    ok, reason = framework_mask(framework, layouts, model)
    if not ok.any():
        common, n = Counter(r for r in reason.tolist() if r).most_common(1)[0]
        if framework_mask(framework, layouts)[0].any():  # the layouts alone would run: the model is refused
            raise SpecError(f"{framework} cannot train {printable(model.name)} as given: {common}",
                            path="--framework", expected=f"a model {framework} trains (or another --framework)")
        raise InfeasibleError(f"{framework} runs none of the {len(layouts):,} layouts of the space; "
                              f"{n:,} because {common}")
    return layouts if ok.all() else layouts.take(np.flatnonzero(ok))


def _choose(cluster, scores, objective, feasible, top_k) -> tuple[SolveResult, np.ndarray]:
    """The best `top_k` feasible rows (choice_keys' order): (the answer, indices into the feasible
    rows; the chosen rows). Only rows whose objective can make the top k are sorted."""
    rows = np.flatnonzero(feasible)
    near = contenders(objective_cost(cluster, scores, objective)[rows], top_k)
    result = choose(choice_keys(cluster, scores, objective, rows[near]), top_k)
    result = replace(result, chosen=near[result.chosen])
    return result, rows[result.chosen]


def _refined(model, cluster, scores, objective, limits, reference, levels, critical_batch_tokens, split_top,
             time_limit_s, masks=None):
    """The vectorised pass's constraints (`masks`, when already evaluated on `scores`), then uneven stage
    splits for its best rows (planner/refine.py)."""
    if masks is None:
        masks = evaluate(model, cluster, scores, limits, reference)
    # a stack that splits by its own cost (nanotron) has no split to choose: no CP-SAT split
    refined = refine(model, cluster, scores, masks, lambda s: objective_cost(cluster, s, objective), limits,
                     top=0 if cost_balanced(model) else split_top, reference=reference, levels=levels, critical_batch_tokens=critical_batch_tokens,
                     time_limit_s=min(time_limit_s, SPLIT_TIME_LIMIT), in_place=True)  # search drops `scores`
    if refined.splits:
        masks = evaluate(model, cluster, refined.scores, limits, reference)
    return refined, masks


def caps_searched(cluster: ClusterSpec, objective: str, frontier: bool, limits: Limits, power_caps: bool | None) -> bool:
    if not cluster.gpu.power_caps:
        return False
    if power_caps is not None:
        return power_caps
    energy_limits = (limits.max_power_kw, limits.max_energy_per_token_j, limits.max_gpu_power_w)
    return objective != "time" or frontier or any(v is not None for v in energy_limits)


@dataclass(frozen=True)
class GpuCountResult:
    """`plan search --gpus-range`: the best layout per GPU count and the recommended count."""

    counts: list[int]
    results: list[SearchResult | None]  # None where no layout was feasible
    reasons: list[str | None]
    scaling_efficiency: list[float | None]  # goodput per GPU against the smallest feasible count
    recommended: int | None


def gpu_counts(cluster: ClusterSpec, lo: int, hi: int) -> list[int]:
    """Every power of two in [lo, hi] that the cluster has GPUs for."""
    if lo <= 0 or hi < lo:
        raise SpecError(f"bad range {lo}:{hi}", path="--gpus-range", expected="LO:HI with 0 < LO <= HI, e.g. 256:8192")
    counts = [1 << k for k in range(0, 31) if lo <= (1 << k) <= min(hi, cluster.total_gpus)]
    if not counts:
        raise SpecError(f"no power of two in {lo}:{hi} fits the {cluster.total_gpus} GPUs of {cluster.name}",
                        path="--gpus-range", expected=f"a range within 1:{cluster.total_gpus}")
    return counts


def search_gpu_counts(model: ModelSpec, cluster: ClusterSpec, lo: int, hi: int, *, objective: str = "time",
                      limits: Limits = Limits(), **kwargs) -> GpuCountResult:
    """Search each GPU count (a handful), then recommend one: the best per-training figure of the
    objective (time: highest goodput; energy/carbon: least energy per useful token; cost: least cost
    per useful token) among counts whose scaling efficiency (goodput per GPU against the smallest
    feasible count) meets --min-scaling-efficiency."""
    counts = gpu_counts(cluster, lo, hi)
    per_count = replace(limits, min_scaling_efficiency=None)
    results, reasons = [], []
    for n in counts:
        try:
            r = search(model, cluster, gpus=n, objective=objective, top_k=1, limits=per_count, **kwargs)
        except InfeasibleError as exc:
            results.append(None), reasons.append(str(exc))
            continue
        results.append(r if r.chosen.size else None)
        reasons.append(None if r.chosen.size else "no feasible layout: " + ", ".join(
            f"{k} removed {v}" for k, v in r.rejected.items() if v))
    rate = [None if r is None else float(r.scores.reliability.goodput_tokens_per_s[r.chosen[0]] / n)
            for r, n in zip(results, counts)]
    ref = next((x for x in rate if x is not None), None)
    eff = [None if x is None else x / ref for x in rate]
    best, best_value = None, np.inf
    for n, r, e in zip(counts, results, eff):
        if r is None or (limits.min_scaling_efficiency is not None and e < limits.min_scaling_efficiency):
            continue
        i = r.chosen[0]
        goodput = r.scores.reliability.goodput_tokens_per_s[i]
        ettr_i = r.scores.reliability.ettr[i]
        value = {"time": -goodput, "energy": r.scores.energy_j_per_token[i] / ettr_i,
                 "carbon": r.scores.energy_j_per_token[i] / ettr_i,
                 "cost": objective_cost(cluster, r.scores, "cost")[i] / (r.scores.step_time_s[i] * goodput)}[objective]
        if value < best_value:
            best, best_value = n, value
    return GpuCountResult(counts, results, reasons, eff, best)


def _reference_rate(model, cluster, gpus, limits, space) -> float | None:
    try:
        ref = search(model, cluster, gpus=gpus, objective="time", top_k=1,
                     limits=replace(limits, min_scaling_efficiency=None, max_step_time_s=None), space=space)
    except InfeasibleError:
        return None
    if not ref.chosen.size:
        return None
    i = ref.chosen[0]
    return float(ref.scores.tokens_per_s[i] / ref.scores.layouts.gpus[i])


def empty_space_reason(model: ModelSpec, gpus: int) -> str:
    b = model.training.global_batch
    product = "*".join(a.name for a in AXES if a.role == "degree")
    return (
        f"no layout of {gpus} GPUs is valid for {model.name}: {product} must equal {gpus}, tp must divide "
        f"heads ({model.heads}) and kv_heads ({model.num_kv_heads}), pp at most {model.layers} layers, and dp "
        f"must divide the global batch ({b}); try --gpus with a divisor-friendly count or --global-batch"
    )
