"""The grid of a sweep expanded into `Point`s, each with the canonical key of its inputs."""
from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from functools import cached_property, lru_cache
from pathlib import Path

from planner.layout.axes import fixable
from planner.constraints import Limits
from planner.errors import SpecError
from planner.options import limits_from
from planner.layout.space import SpaceLimits
from planner.specs import ClusterSpec, ModelSpec
from planner.sweep.family import batch_from_tokens, params_label, scale_model
from planner.sweep.spec import (MAX_PARAMS, MAX_POINTS, ConstraintsSpec, SweepSpec, check_size,  # noqa: F401
                                parse_gpus, parse_params)

KEY_VERSION = 1  # part of every point's key: bump when a row's meaning changes, so old rows are recomputed


# --- points ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Point:
    model: ModelSpec  # with the point's global batch and token budget
    cluster: ClusterSpec  # enlarged to hold `gpus` when the named cluster is smaller
    cluster_label: str  # the cluster as named in the sweep
    gpus: int
    objective: str
    limits: Limits  # type: ignore[valid-type]
    space: SpaceLimits  # type: ignore[valid-type]
    time_limit_s: float
    critical_batch_tokens: float | None = None
    framework: str | None = None  # only the layouts it runs (planner/export/frameworks.py); None: every layout

    def inputs(self) -> dict:
        # The search settings sit inside `limits`, as in the rows written before they left `Limits`,
        # so that those outputs still resume (the key of KEY_VERSION 1). `framework` is there only when
        # given: a point without one keeps the key it had before there was a framework.
        limits = {**asdict(self.limits), "critical_batch_tokens": self.critical_batch_tokens,
                  "reference_tokens_per_s_per_gpu": None}
        framework = {} if self.framework is None else {"framework": self.framework}
        return {"version": KEY_VERSION, "model": self.model.model_dump(mode="json"),
                "cluster": self.cluster.model_dump(mode="json"), "cluster_label": self.cluster_label,
                **framework, "gpus": self.gpus, "objective": self.objective, "limits": limits,
                "space": asdict(self.space), "time_limit_s": self.time_limit_s}

    @property
    def job_nodes(self) -> int:
        """Nodes the job spans: ceil(gpus / GPUs per node) (8 GPUs on a 128-node DGX cluster: 1)."""
        return math.ceil(self.gpus / self.cluster.node.gpus)

    @cached_property  # kept with the point (and sent with it to a worker)
    def key(self) -> str:
        """sha256 of the canonical JSON of every input of the point (first 16 hex digits): the text of
        `inputs()`, assembled from parts kept per model, cluster and limits (a dump each costs ~1 ms,
        so 96,000 points took 100 s before the first search)."""
        parts = {"version": _json(KEY_VERSION), "cluster_label": _json(self.cluster_label),
                 "gpus": _json(self.gpus), "objective": _json(self.objective),
                 "time_limit_s": _json(self.time_limit_s), "model": _canonical(self.model, _dump),
                 "cluster": _canonical(self.cluster, _dump), "space": _canonical(self.space, asdict),
                 "limits": _canonical(self.limits, lambda lim: {**asdict(lim), "reference_tokens_per_s_per_gpu": None,
                                      "critical_batch_tokens": self.critical_batch_tokens}, self.critical_batch_tokens)}
        if self.framework is not None:
            parts["framework"] = _json(self.framework)
        text = "{" + ",".join(f'"{k}":{parts[k]}' for k in _KEY_ORDER if k in parts) + "}"
        return hashlib.sha256(text.encode()).hexdigest()[:16]


_KEY_ORDER = ("cluster", "cluster_label", "framework", "gpus", "limits", "model", "objective", "space", "time_limit_s", "version")
_PARTS: dict[tuple, tuple[object, str]] = {}  # (id, extra) -> (the object, kept so the id stays its own; its JSON)


_json = lru_cache(maxsize=4096, typed=True)(json.dumps)  # the few labels, GPU counts and objectives of a sweep


def _dump(spec) -> dict:
    return spec.model_dump(mode="json")


def _canonical(obj, data, extra=None) -> str:
    """Canonical JSON (sorted keys, no spaces) of `data(obj)`, computed once per object (and `extra`)."""
    key = (id(obj), extra)
    hit = _PARTS.get(key)
    if hit is None or hit[0] is not obj:
        if len(_PARTS) > 10_000:
            _PARTS.clear()
        hit = _PARTS[key] = (obj, json.dumps(data(obj), sort_keys=True, separators=(",", ":")))
    return hit[1]


def enlarged(cluster: ClusterSpec, gpus: int) -> ClusterSpec:
    """The cluster with nodes = ceil(gpus / gpus per node) when it has fewer GPUs than `gpus`."""
    if gpus <= cluster.total_gpus:
        return cluster
    return cluster.model_copy(update={"nodes": math.ceil(gpus / cluster.node.gpus)})


def limits_of(c: ConstraintsSpec) -> tuple[Limits, SpaceLimits]:  # type: ignore[valid-type]
    """The search's limits (with the fixed axes) and enumeration limits of a sweep's `constraints:`."""
    fixed = {a.name: getattr(c, a.name) for a in fixable() if getattr(c, a.name) is not None}
    return limits_from(c.model_dump(), fixed), SpaceLimits(max_micro_batch=c.max_micro_batch)


def _load(arg: str, kind: str, base_dir: Path | None):
    """A spec by path (relative to the sweep file's folder when it is there, else to the working
    directory) or shipped name."""
    from planner.specs.loading import cluster_from_loaded, load_spec_file, model_from_loaded, resolve

    local = base_dir is not None and not Path(arg).is_absolute() and (base_dir / arg).is_file()
    path = base_dir / arg if local else resolve(arg, kind)
    return (model_from_loaded if kind == "model" else cluster_from_loaded)(load_spec_file(path))


def sweep_models(spec: SweepSpec, base_dir: Path | None = None) -> list[ModelSpec]:
    models = [_load(m, "model", base_dir) for m in dict.fromkeys(spec.models)]
    if spec.scale_model is not None:
        base = _load(spec.scale_model.base, "model", base_dir)
        counts = spec.scale_model.params
        counts = parse_params(counts, "scale_model.params") if isinstance(counts, str) else counts
        models += [_scaled(base, p) for p in dict.fromkeys(counts)]
    if not models:
        raise SpecError("nothing to sweep: no model", path="models",
                        expected="a SWEEP.yaml with models: or scale_model:, or --models / --scale-model with --params")
    return models


def _scaled(base: ModelSpec, params: float) -> ModelSpec:
    """`scale_model` of a base whose layers differ in a period (planner/sweep/family.py grows a family one
    layer at a time, from the sizes of its one- and two-layer shapes). Full-attention layers among
    windowed ones (full_attention_every) hold the same parameters: the family is grown without them and
    they are put back, a size with fewer layers than the period refused by name (issue 38: every size of
    gpt-oss-120b was exit 3, its one-layer shape invalid). MoE layers every n-th layer do not hold the
    same parameters: refused by name (llama4-maverick's 'nearest shape' blamed the embeddings)."""
    if base.moe is not None and base.moe.layer_every > 1:
        raise SpecError(f"cannot scale {base.name}: one layer in {base.moe.layer_every} is MoE (moe.layer_every {base.moe.layer_every}), "
                        "and a family is grown one layer at a time", path="scale_model.base",
                        expected="a base model whose layers are all alike (a dense model, or a MoE whose every layer is MoE)")
    every = base.full_attention_every
    if every is None:
        return scale_model(base, params)
    model = scale_model(base.model_copy(update={"full_attention_every": None}), params)
    if model.layers < every:
        raise SpecError(f"cannot scale {base.name} to {params_label(params)} parameters: the shape has {model.layers} "
                        f"layers, fewer than full_attention_every ({every}), so no layer would keep full attention",
                        path="scale_model.params", expected=f"counts whose shape has at least {every} layers")
    return ModelSpec.model_validate({**model.model_dump(), "full_attention_every": every})


def _point_model(model: ModelSpec, spec: SweepSpec) -> ModelSpec:
    training = {}
    if spec.global_batch is not None:
        training["global_batch"] = spec.global_batch
    elif spec.batch_tokens is not None:
        training["global_batch"] = batch_from_tokens(spec.batch_tokens, model.seq_len)
    if spec.tokens is not None:
        training["tokens"] = spec.tokens
    if not training:
        return model
    return model.model_copy(update={"training": model.training.model_copy(update=training)})


def _framework_model(model: ModelSpec, spec: SweepSpec) -> ModelSpec:
    """The model priced with the framework's stack profile, as `plan search --framework` without
    `--stack` does (a sweep has no stack of its own to give)."""
    if spec.framework is None:
        return model
    from planner.export.frameworks import FRAMEWORK_STACK
    from planner.search import with_stack

    return with_stack(model, FRAMEWORK_STACK[spec.framework])


def _unique(specs: list) -> list:
    """Specs once each (a spec loaded under two names, counts scaled to one shape). Equal specs share a
    name, so only specs of one name are compared, by their canonical JSON (each costs ~0.6 ms)."""
    names = Counter(s.name for s in specs)
    once: dict[tuple[str, str], object] = {}
    for s in specs:
        once.setdefault((s.name, _canonical(s, _dump) if names[s.name] > 1 else ""), s)
    return list(once.values())


class Points(Sequence):
    """The points of a sweep: models x (cluster, GPU count) x objectives, in that order, each made when
    it is read (made up front, 100,000 points took 1 s and their keys 3 s before the first search)."""

    def __init__(self, models: list[ModelSpec], sized: list[tuple[ClusterSpec, int, ClusterSpec]],
                 objectives: list[str], settings: dict) -> None:
        self._models, self._sized, self._objectives, self._settings = models, sized, objectives, settings
        self._per_model = len(sized) * len(objectives)

    def __len__(self) -> int:
        return len(self._models) * self._per_model

    def _point(self, model: ModelSpec, sized: tuple, objective: str) -> Point:
        cluster, gpus, big = sized
        return Point(model, big, cluster.name, gpus, objective, **self._settings)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        m, rest = divmod(i % len(self), self._per_model)
        s, o = divmod(rest, len(self._objectives))
        return self._point(self._models[m], self._sized[s], self._objectives[o])

    def __iter__(self) -> Iterator[Point]:
        return (self._point(m, s, o) for m in self._models for s in self._sized for o in self._objectives)


def expand(spec: SweepSpec, base_dir: Path | None = None) -> Points:
    """Every point of the sweep, in a stable order: model, then cluster, GPU count, objective. Its size
    is checked first; identical points (equal parameter counts, models that scale to one shape) once:
    points are told apart by their models and clusters, not by hashing each point (a key is made when
    its point runs; 56,000 keys took 11 s before the first search)."""
    check_size(spec)
    models = _unique([_framework_model(_point_model(m, spec), spec) for m in sweep_models(spec, base_dir)])
    names = [spec.cluster] if isinstance(spec.cluster, str) else list(dict.fromkeys(spec.cluster))
    clusters = _unique([_load(c, "cluster", base_dir) for c in names])
    objectives = [spec.objective] if isinstance(spec.objective, str) else list(dict.fromkeys(spec.objective))
    gpus = None if spec.gpus is None else parse_gpus(spec.gpus, "gpus") if isinstance(spec.gpus, str) else spec.gpus
    limits, space = limits_of(spec.constraints)
    settings = dict(limits=limits, space=space, time_limit_s=spec.constraints.time_limit_s,
                    critical_batch_tokens=spec.constraints.critical_batch_tokens, framework=spec.framework)
    sized = [(c, g, enlarged(c, g)) for c in clusters for g in dict.fromkeys(gpus or [c.total_gpus])]  # one copy each
    if len({c.name for c in clusters}) < len(clusters):  # two clusters of one name may enlarge to one
        once: dict[tuple, tuple] = {}
        for c, g, big in sized:
            once.setdefault((c.name, g, _canonical(big, _dump)), (c, g, big))
        sized = list(once.values())
    return Points(models, sized, objectives, settings)
