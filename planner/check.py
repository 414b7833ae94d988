"""`plan check`: validate GPU, cluster, model, layout and plan files; pure functions, no printing.

A check produces `Finding`s. Each file is read strictly (planner.specs.yamlio), its kind detected,
validated against its spec, checked for physical plausibility and, for a plan file, for
feasibility with the cost models and constraints of `plan search`.
"""
from __future__ import annotations

import functools
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from planner.errors import MAX_MESSAGE_CHARS, SHOWN_CHARS, InfeasibleError, SpecError, SpecErrors, clip, clip_file
from planner.specs.loading import FILE_KINDS, spec_part, cluster_from_loaded, detect_kind, stack_from_loaded, gpu_from_loaded, model_from_loaded, load_spec_file, resolve, strip_kind, validate
from planner.specs import ClusterSpec, GpuSpec, ModelSpec
from planner.specs.yamlio import LoadedYaml

DEFAULT_HEADROOM = 0.05
UNREADABLE, INVALID = "unreadable", "invalid"  # codes of input problems: exit 2, not 1
_STRICT = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


def plan_layout_model(axes: tuple | None = None) -> type[BaseModel]:
    """The `layout:` of a plan file: every axis a plan gives (`Axis.given`), with its bounds
    (default: the layout axes, planner.layout.axes.AXES)."""
    from planner.layout.axes import AXES
    from planner.options import axis_field

    axes = AXES if axes is None else axes

    return create_model("PlanLayout", __config__=_STRICT, __doc__="The checked-in layout; dp defaults to gpus / (tp * pp).",
                        __module__=__name__, **{a.name: axis_field(a, optional=False) for a in axes if a.given is not None},
                        # as `plan search --json` writes a layout that offloads activations (training.offload_layers)
                        offload_layers=(int | None, Field(default=None, ge=1, le=10_000, description=(
                            "layers whose activations an offloading layout moves to the host (default: the fewest "
                            "that fit)"))))


PLAN_MODELS = ("PlanLayout", "PlanConstraints", "PlanFile")


@functools.cache
def plan_models() -> dict[str, type[BaseModel]]:
    """The models of a layout file and a plan file, built when one is first checked (or
    `planner.check.PlanFile` read): their fields come from the limits of planner.constraints, which
    imports numpy, and a check of a model or cluster file needs neither (numpy alone was 0.09 s of
    its 0.42 s of CPU; docs/speed.md)."""
    from planner.constraints import LIMIT_OPTIONS
    from planner.options import option_field

    layout = plan_layout_model()
    constraints = create_model(
        "PlanConstraints", __config__=_STRICT, __doc__="Limits the layout must meet; absent means unconstrained.",
        __module__=__name__, **{o.key: option_field(o, required_default=False) for o in LIMIT_OPTIONS if "plan" in o.where})
    plan = create_model(
        "PlanFile", __config__=_STRICT, __module__=__name__,
        __doc__="model + cluster + layout: `model`/`cluster` are shipped names, paths relative to the plan file, or inline.",
        name=(str | None, Field(default=None, min_length=1, max_length=128)),
        description=(str | None, Field(default=None, max_length=10_000)),
        model=(str | ModelSpec, ...),
        cluster=(str | ClusterSpec, ...),
        gpus=(int | None, Field(default=None, gt=0, le=10_000_000, description="GPUs used (default: the whole cluster)")),
        global_batch=(int | None, Field(default=None, gt=0, le=100_000_000, description="overrides the model's")),
        layout=(layout, ...),
        constraints=(constraints, constraints()))
    return {"PlanLayout": layout, "PlanConstraints": constraints, "PlanFile": plan}


def __getattr__(name: str) -> Any:
    """`planner.check.PlanFile` (PlanLayout, PlanConstraints): built on first use (plan_models)."""
    if name in PLAN_MODELS:
        return plan_models()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class Finding:
    file: str
    line: int | None
    severity: Literal["error", "warning"]
    code: str
    path: str | None
    message: str

    def to_dict(self) -> dict:
        return asdict(self)


def exit_code(findings: list[Finding], strict: bool = False) -> int:
    """2 when a file could not be read, parsed or validated; 1 when a check failed; else 0."""
    if any(f.severity == "error" and f.code in (UNREADABLE, INVALID) for f in findings):
        return 2
    if any(f.severity == "error" or strict for f in findings):
        return 1
    return 0


def from_errors(exc: SpecError | SpecErrors, code: str) -> list[Finding]:
    """Findings of errors, each message and field path of bounded length (errors.clip)."""
    errors = exc.errors if isinstance(exc, SpecErrors) else [exc]
    def message(e: SpecError) -> str:
        return clip(e.message, MAX_MESSAGE_CHARS) + (f" (expected {clip(e.expected, MAX_MESSAGE_CHARS)})" if e.expected else "")

    return [Finding(e.file or "<input>", e.line, "error", code, None if e.path is None else clip(e.path, 2 * SHOWN_CHARS),
                    message(e)) for e in errors]


def yaml_files(paths: list[str]) -> tuple[list[str], list[Finding]]:
    """Files named, and `*.yaml`/`*.yml` under directories named (recursively, hidden ones skipped).
    A directory that cannot be listed is a finding: what it holds was not checked."""
    files, findings = [], []
    for arg in paths:
        if not os.path.isdir(arg):
            files.append(arg)
            continue
        found, unlisted = [], []
        for root, dirs, names in os.walk(arg, onerror=unlisted.append):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            found += [os.path.join(root, n) for n in sorted(names) if n.endswith((".yaml", ".yml")) and n[0] != "."]
        files += found
        for exc in unlisted:
            reason = "permission denied" if isinstance(exc, PermissionError) else (exc.strerror or str(exc))
            findings.append(Finding(os.fsdecode(exc.filename or arg), None, "error", UNREADABLE, None,
                                    f"cannot list this directory ({reason}): the files in it are not checked"))
        if not found and not unlisted:
            findings.append(Finding(arg, None, "error", UNREADABLE, None, "no *.yaml or *.yml files in this directory"))
    return list(dict.fromkeys(files)), findings


def check_paths(paths: list[str], *, headroom: float | None = None, against_best: float | None = None) -> tuple[list[str], list[Finding]]:
    files, findings = yaml_files(paths)
    for file in files:
        findings += check_file(file, headroom=headroom, against_best=against_best)
    return files, list(dict.fromkeys(findings))


def check_file(file: str, *, headroom: float | None = None, against_best: float | None = None) -> list[Finding]:
    try:
        loaded = load_spec_file(file)  # YAML, or JSON (a Hugging Face config.json)
    except (SpecError, SpecErrors) as exc:
        return from_errors(exc, UNREADABLE)
    kind = detect_kind(loaded.data)
    checks = {"gpu": _check_gpu, "cluster": _check_cluster, "model": _check_model, "layout": _check_layout,
              "sweep": _check_sweep, "stack": _check_stack, "jobs": _check_jobs, "runs": _check_runs,
              "profile": _check_profile}
    try:
        if kind == "plan":
            return check_plan(loaded, headroom=headroom, against_best=against_best)
        if kind in checks:
            return checks[kind](loaded)
        strip_kind(loaded.data, loaded, "gpu")  # an unknown `kind:` value gets its message here
        raise SpecError("cannot tell what this file is", file=file, line=1, expected=(
            f"a `kind:` key ({', '.join(FILE_KINDS[:-1])} or {FILE_KINDS[-1]}) or the keys of one of them"))
    except (SpecError, SpecErrors) as exc:
        return from_errors(exc, INVALID)


def _check_runs(loaded: LoadedYaml) -> list[Finding]:
    """A runs file of `plan calibrate`: its keys, every model and cluster it names, each layout
    scored (a run the planner calls infeasible is a warning: it trained, so the model is wrong)."""
    from planner.fidelity.own import _jobs
    from planner.fidelity.runs import runs_from_loaded

    out = []
    for job in _jobs(runs_from_loaded(loaded)):
        for v in job.scored.violations:
            out.append(Finding(loaded.file, job.run.line, "warning", v.constraint, "runs",
                               f"{job.run.name}: the planner calls this measured layout infeasible: {v.message}"))
    return out


def _check_profile(loaded: LoadedYaml) -> list[Finding]:
    from planner.specs.profile import ProfileSpec

    validate(ProfileSpec, loaded.data, loaded)  # its stack a shipped one, as --profile needs
    return []


def _check_jobs(loaded: LoadedYaml) -> list[Finding]:
    """A jobs file of `plan allocate`: its keys and every model it names (no search)."""
    from planner.specs.jobs import jobs_from_loaded  # not planner.allocate: that imports OR-Tools

    jobs_from_loaded(loaded)
    return []


def _check_stack(loaded: LoadedYaml) -> list[Finding]:
    stack_from_loaded(loaded)
    return []


def _check_sweep(loaded: LoadedYaml) -> list[Finding]:
    """A sweep file: its keys, and every model, generated model and cluster it names (no search)."""
    from planner.sweep import expand, load_sweep

    expand(load_sweep(loaded.file), Path(loaded.file).parent)
    return []


def _check_gpu(loaded: LoadedYaml) -> list[Finding]:
    return gpu_warnings(gpu_from_loaded(loaded), loaded)


def _check_model(loaded: LoadedYaml) -> list[Finding]:
    return model_warnings(model_from_loaded(loaded), loaded)


def _check_cluster(loaded: LoadedYaml) -> list[Finding]:
    cluster = cluster_from_loaded(loaded)
    inline_gpu = isinstance(loaded.data.get("gpu"), dict)
    return cluster_warnings(cluster, loaded) + (gpu_warnings(cluster.gpu, loaded, ("gpu",)) if inline_gpu else [])


def _check_layout(loaded: LoadedYaml) -> list[Finding]:
    data = strip_kind(loaded.data, loaded, "layout")
    prefix = ("layout",) if set(data) == {"layout"} else ()
    validate(plan_models()["PlanLayout"], data["layout"] if prefix else data, loaded, prefix)
    return []


# Plausibility: values a spec accepts but no real hardware or job has; most are unit slips.
Rule = tuple[str, str, Callable[[Any], bool], Callable[[Any], str]]
GPU_RULES: list[Rule] = [
    ("memory_gib", "gpu-memory", lambda g: g.memory_gib > 512 or g.memory_gib < 1,
     lambda g: f"{g.memory_gib:g} GiB of memory per GPU is outside 1-512 GiB; is the unit GiB?"),
    ("tdp_w", "gpu-tdp", lambda g: not 50 <= g.tdp_w <= 3000,
     lambda g: f"TDP of {g.tdp_w:g} W is outside the 50-3000 W of training GPUs; is the unit W?"),
    ("hbm_gbps", "gpu-hbm", lambda g: not 100 <= g.hbm_gbps <= 50_000,
     lambda g: f"HBM bandwidth of {g.hbm_gbps:g} GB/s is outside 100-50000 GB/s; is the unit GB/s (not TB/s)?"),
    ("peak_tflops.bf16", "gpu-tflops", lambda g: not 1 <= g.peak_tflops.bf16 <= 20_000,
     lambda g: f"{g.peak_tflops.bf16:g} dense BF16 TFLOP/s is outside 1-20000; is the unit TFLOP/s (dense)?"),
    ("peak_tflops.tf32", "gpu-tflops", lambda g: (g.peak_tflops.tf32 or 0) > g.peak_tflops.bf16,
     lambda g: f"TF32 ({g.peak_tflops.tf32:g}) faster than BF16 ({g.peak_tflops.bf16:g}) TFLOP/s"),
    ("peak_tflops.fp8", "gpu-tflops", lambda g: g.peak_tflops.fp8 is not None and g.peak_tflops.fp8 < g.peak_tflops.bf16,
     lambda g: f"FP8 ({g.peak_tflops.fp8:g}) slower than BF16 ({g.peak_tflops.bf16:g}) TFLOP/s"),
]
CLUSTER_RULES: list[Rule] = [
    ("node.network_gbps", "network-faster-than-nvlink", lambda c: c.node.network_gbps > c.node.nvlink_gbps,
     lambda c: f"network ({c.node.network_gbps:g} GB/s) faster than NVLink ({c.node.nvlink_gbps:g} GB/s) per GPU"),
    ("node.network_gbps", "bandwidth-unit", lambda c: c.node.network_gbps > 100,
     lambda c: f"{c.node.network_gbps:g} GB/s per GPU is faster than any NIC; NICs are rated in Gb/s: "
               f"{c.node.network_gbps:g} Gb/s is {c.node.network_gbps / 8:g} GB/s"),
    ("node.nvlink_gbps", "bandwidth-unit", lambda c: c.node.nvlink_gbps > 2000,
     lambda c: f"{c.node.nvlink_gbps:g} GB/s per GPU per direction is beyond any NVLink; "
               f"if it is Gb/s, write {c.node.nvlink_gbps / 8:g}"),
    ("power.pue", "pue", lambda c: not 1 <= c.power.pue <= 3,
     lambda c: f"PUE {c.power.pue:g} is outside 1-3 (it is facility power / IT power, never below 1)"),
]
MODEL_RULES: list[Rule] = [
    ("heads", "head-dim", lambda m: m.mla is None and not 16 <= m.head_width <= 512,
     lambda m: f"head dimension {'head_dim' if m.head_dim else 'hidden/heads'} = {m.head_width} is outside 16-512"),
]


def _apply(rules: list[Rule], spec: Any, loaded: LoadedYaml, prefix: tuple) -> list[Finding]:
    out = []
    for path, code, bad, message in rules:
        if bad(spec):
            full = prefix + tuple(path.split("."))
            out.append(Finding(loaded.file, loaded.line_of(full), "warning", code, ".".join(full), message(spec)))
    return out


def gpu_warnings(gpu: GpuSpec, loaded: LoadedYaml, prefix: tuple = ()) -> list[Finding]:
    return _apply(GPU_RULES, gpu, loaded, prefix)


def cluster_warnings(cluster: ClusterSpec, loaded: LoadedYaml, prefix: tuple = ()) -> list[Finding]:
    return _apply(CLUSTER_RULES, cluster, loaded, prefix)


def model_warnings(model: ModelSpec, loaded: LoadedYaml, prefix: tuple = ()) -> list[Finding]:
    return _apply(MODEL_RULES, model, loaded, prefix)


def _part(loaded: LoadedYaml, key: str, kind: str, build: Callable) -> tuple[Any, list[Finding]]:
    """The plan's model or cluster (inline, a path beside the plan, or shipped), with its findings."""
    try:
        spec, sub, prefix = spec_part(loaded, (key,), kind, build)
    except (SpecError, SpecErrors) as exc:
        return None, from_errors(exc, INVALID)
    warn = {"model": model_warnings, "cluster": cluster_warnings}[kind](spec, sub, prefix)
    return spec, warn




def check_plan(loaded: LoadedYaml, *, headroom: float | None = None, against_best: float | None = None) -> list[Finding]:
    data = strip_kind(loaded.data, loaded, "plan")
    shell = {k: (v if k not in ("model", "cluster") or not isinstance(v, dict) else "inline") for k, v in data.items()}
    findings: list[Finding] = []
    try:
        plan = validate(plan_models()["PlanFile"], shell, loaded)
    except (SpecError, SpecErrors) as exc:
        findings, plan = from_errors(exc, INVALID), None
    if not isinstance(data.get("model"), (str, dict)) or not isinstance(data.get("cluster"), (str, dict)):
        return findings
    model, model_findings = _part(loaded, "model", "model", model_from_loaded)
    cluster, cluster_findings = _part(loaded, "cluster", "cluster", cluster_from_loaded)
    findings += model_findings + cluster_findings
    if plan is None or model is None or cluster is None:
        return findings
    return findings + feasibility(plan, model, cluster, loaded, headroom=headroom, against_best=against_best)


def _stated_key(constraint: str) -> str | None:
    """The `constraints:` key of a plan file that sets a constraint (None: none does)."""
    from planner.constraints import CONSTRAINTS

    c = next((c for c in CONSTRAINTS if c.name == constraint), None)
    return c.option.key if c is not None and c.option is not None and "plan" in c.option.where else None


def feasibility(plan: BaseModel, model: ModelSpec, cluster: ClusterSpec, loaded: LoadedYaml, *,
                headroom: float | None = None, against_best: float | None = None) -> list[Finding]:
    """The plan's layout scored with the cost models of `plan search`; one finding per broken rule."""
    from planner.constraints import LIMIT_OPTIONS
    from planner.estimate import estimate_defaults, estimate_layout, with_memory_hint
    from planner.layout.axes import AXES, given_gpus
    from planner.options import limits_from
    from planner.search import with_global_batch

    model = with_global_batch(model, plan.global_batch)
    lay, c = plan.layout, plan.constraints
    if lay.offload_layers is not None:
        model = model.model_copy(update={"training": model.training.model_copy(update={"offload_layers": lay.offload_layers})})
    # the axes the file leaves out default as `plan estimate` fills them (sequence parallelism at tp > 1,
    # ZeRO 1 at dp*cp > 1), so one spelled layout is one layout in both
    spelled = {a.name: getattr(lay, a.name) for a in AXES if a.given is not None and a.name in lay.model_fields_set}
    gpus = plan.gpus or given_gpus({a.name: getattr(lay, a.name) for a in AXES if a.given is not None}) \
        or cluster.total_gpus
    given = estimate_defaults(spelled, gpus, cluster)

    def error(code: str, path: tuple, message: str) -> Finding:
        return Finding(loaded.file, loaded.line_of(path), "error", code, ".".join(path), message)

    if lay.offload_layers is not None and "offload" in lay.model_fields_set and lay.offload in ("none", "optimizer"):
        return [error(INVALID, ("layout", "offload_layers"), f"offload_layers counts layers whose activations move "
                      f"to the host, and offload {lay.offload} moves none (expected offload activations or both, or no "
                      "offload_layers)")]

    values = {o.key: getattr(c, o.key) for o in LIMIT_OPTIONS if "plan" in o.where}
    if headroom is not None:
        values["memory_headroom"] = headroom
    elif values.get("memory_headroom") is None:
        values["memory_headroom"] = DEFAULT_HEADROOM
    limits = limits_from(values)
    try:
        data = estimate_layout(model, cluster, gpus=gpus, limits=limits, gpus_said=f"the plan uses {gpus} GPUs",
                               in_file=True, **given)
    except SpecError as exc:  # the degrees do not multiply to the GPUs
        return [error("layout", ("layout",), f"{exc.message} (expected {exc.expected})")]
    # a memory hint is a change that fits when scored, as plan estimate's (not a list of untried tips)
    data = with_memory_hint(data, model, cluster, gpus=gpus, limits=limits, given=given, in_file=True)
    out = []
    for v in data.violations:
        key = _stated_key(v.constraint)
        value = None if key is None else getattr(c, key)
        stated = value is not None and value is not False  # else the layout is to blame (0.0 is stated)
        out.append(error(v.constraint, ("constraints", key) if stated else ("layout",), v.message))
    tp, domain = int(data.layout["tp"]), cluster.node.nvlink_domain
    if not limits.allow_cross_node_tp and (tp > domain or domain % tp):
        # it trains (vTrain measured tp 16 over two 8-GPU nodes), so a warning: priced, never chosen by a search
        out.append(Finding(loaded.file, loaded.line_of(("layout",)), "warning", "tp_in_nvlink_domain", "layout",
                           f"tp={tp} does not tile the {domain} GPUs of one NVLink domain: its collectives run partly "
                           f"over the network (priced so; a search does not choose it unless --tp is fixed)"))
    if against_best is not None:
        out += _against_best(model, cluster, gpus, limits, data, against_best, error)
    return out


def _against_best(model, cluster, gpus, limits, data, pct, error) -> list[Finding]:
    from planner.layout.axes import layout_assignments
    from planner.search import search

    try:
        best = search(model, cluster, gpus=gpus, objective="time", top_k=1, limits=limits).best
    except InfeasibleError:
        return []
    if best is None or data.step_time_s <= best.step_time_s * (1 + pct / 100):
        return []
    slower = data.step_time_s / best.step_time_s - 1
    return [error("slower-than-best", ("layout",),
                  f"{data.step_time_s:.3f} s/step is {slower:.1%} slower than the best layout plan search finds "
                  f"({best.step_time_s:.3f} s/step, allowed {pct:g}%): {layout_assignments(best.layout)}")]
