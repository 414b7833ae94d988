"""Specs in: a model, cluster or GPU given as a shipped name, a path, a mapping (a spec's content or
a Hugging Face config.json's) or a spec object; a profile as a path, a loaded profile or a
calibration; and the run stated beside them (batch, sequence length, precision, stack, profile)
applied and checked, for `planner.search`/`estimate` and for `plan search`/`plan estimate`, which call them."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Mapping

from planner.errors import SpecError

if TYPE_CHECKING:
    from planner.specs import ClusterSpec, GpuSpec, ModelSpec
    from planner.specs.profile import ProfileSpec

# The run stated beside a model, over its spec (`--seq-len`, `planner.search(seq_len=...)`): keyword -> (spec
# path, flag, type). prepare, with_run and the sweep's with_stated take them as one `overrides` mapping, so a new
# one is a line here, plus its keyword and flag where users give it (planner/api/plan.py, sweep.py, cli/).
OVERRIDES: dict[str, tuple[str, str, type]] = {
    "seq_len": ("seq_len", "--seq-len", int), "precision": ("training.precision", "--precision", str),
    "offload_layers": ("training.offload_layers", "--offload-layers", int),
    "torch_compile": ("training.torch_compile", "--torch-compile", bool)}
RUN_FLAGS = {path: flag for path, flag, _ in OVERRIDES.values()}  # spec path -> flag


def _loaded(data: Mapping, what: str):
    """A mapping as a spec file's content, with the bounds a file gets (no line numbers to name)."""
    from planner.specs.loading import check_bounds
    from planner.specs.yamlio import LoadedYaml

    loaded = LoadedYaml(data=dict(data), file=None, lines={})
    check_bounds(loaded)
    return loaded


def _spec(arg: Any, kind: str, spec_type: type, from_loaded, load) -> Any:
    if isinstance(arg, spec_type):
        return arg
    if isinstance(arg, Mapping):
        return from_loaded(_loaded(arg, kind))
    if isinstance(arg, (str, os.PathLike)):
        return load(arg)
    raise SpecError(f"a {type(arg).__name__}", path=kind,
                    expected=f"a shipped {kind} name, a path, a mapping or a {spec_type.__name__}")


def load_model(model: str | os.PathLike | Mapping | ModelSpec) -> ModelSpec:
    """A model spec from a shipped name (`"llama3-70b"`), a YAML path, a Hugging Face config.json
    (a path or its mapping), a spec mapping, or a `ModelSpec` (returned as it is)."""
    from planner.specs import ModelSpec
    from planner.specs.loading import load_model as load, model_from_loaded

    return _spec(model, "model", ModelSpec, model_from_loaded, load)


def load_cluster(cluster: str | os.PathLike | Mapping | ClusterSpec) -> ClusterSpec:
    """A cluster spec from a shipped name, a path, a mapping or a `ClusterSpec`."""
    from planner.specs import ClusterSpec
    from planner.specs.loading import cluster_from_loaded, load_cluster as load

    return _spec(cluster, "cluster", ClusterSpec, cluster_from_loaded, load)


def load_gpu(gpu: str | os.PathLike | Mapping | GpuSpec) -> GpuSpec:
    """A GPU spec from a shipped preset name (`"h100-sxm-80gb"`), a path, a mapping or a `GpuSpec`."""
    from planner.specs import GpuSpec
    from planner.specs.loading import gpu_from_loaded, load_gpu as load

    return _spec(gpu, "gpu", GpuSpec, gpu_from_loaded, load)


def load_profile(profile: str | os.PathLike | Any) -> ProfileSpec:
    """A calibration profile (`plan calibrate -o FILE`, kind: profile) from its path; a loaded
    profile is returned as it is, and the result of `planner.calibrate` becomes its profile."""
    from planner.fidelity.own import Calibration
    from planner.fidelity.profile import load_profile as load
    from planner.specs.profile import ProfileSpec

    if isinstance(profile, ProfileSpec):
        return profile
    if isinstance(profile, Calibration):
        from planner import version
        from planner.fidelity.profile import profile_data

        return ProfileSpec.model_validate(profile_data(profile, "profile", version()))
    if isinstance(profile, (str, os.PathLike)):
        return load(profile)
    raise SpecError(f"a {type(profile).__name__}", path="--profile",
                    expected="a profile file's path, a loaded profile or the result of planner.calibrate")


def check_stack_name(stack: str | None) -> None:
    """A stack names a shipped profile: a plain file name, never a path."""
    from planner.specs import is_plain_name
    from planner.specs.shipped import shipped_names

    if stack is not None and not is_plain_name(stack):
        raise SpecError(f"'{stack[:40]}{'...' if len(stack) > 40 else ''}' is not a stack name", path="--stack",
                        expected=f"one of: {', '.join(shipped_names('stack'))}")


def framework_stack(framework: str | None, stack: str | None, export: str | None = None) -> str | None:
    """The stack a framework's search prices with (its profile unless `stack` is given); an export of
    another framework's settings is refused."""
    if framework is None:
        return stack
    from planner.export.frameworks import FRAMEWORK_EXPORT, FRAMEWORK_STACK, framework_names

    if framework not in framework_names():
        raise SpecError(f"no framework named '{framework[:40]}'", path="--framework",
                        expected=f"one of: {', '.join(framework_names())}")
    if export is not None and export != FRAMEWORK_EXPORT[framework]:
        raise SpecError(f"--export {export} with --framework {framework}", path="--export",
                        expected=f"{FRAMEWORK_EXPORT[framework]} (or no --framework)")
    return stack if stack is not None else FRAMEWORK_STACK[framework]


def with_run(model: ModelSpec, overrides: Mapping[str, Any]) -> ModelSpec:
    """`model` with the `overrides` given (keywords of OVERRIDES; None: not given) as if its spec said them."""
    from planner.search import with_run as run_as

    unknown = sorted(set(overrides) - set(OVERRIDES))
    if unknown:  # a caller's mistake, not the user's
        raise TypeError(f"not a declared override (planner/api/inputs.py OVERRIDES): {', '.join(unknown)}")
    return run_as(model, **overrides, flags=RUN_FLAGS)


def with_nvlink_segment(cluster: ClusterSpec, gpus: int | None, flag: str = "--nvlink-domain-gpus") -> ClusterSpec:
    """The cluster with node.nvlink_segment_gpus = `gpus`, within its NVLink domain."""
    if gpus is None:
        return cluster
    if cluster.pools:
        raise SpecError(f"{cluster.name} has {len(cluster.pool_names)} pools", path=flag,
                        expected="a cluster of one pool (each pool states its own NVLink domain)")
    domain = cluster.node.nvlink_domain
    if not 1 <= gpus <= domain:
        raise SpecError(f"got {gpus}, and an NVLink domain of {cluster.name} has {domain} GPUs", path=flag,
                        expected=f"GPUs from 1 to {domain}")
    return cluster.model_copy(update={"node": cluster.node.model_copy(update={"nvlink_segment_gpus": gpus})})


def with_profile(model: ModelSpec, cluster: ClusterSpec, profile: Any, stack: str | None):
    """The model and cluster priced with a calibration profile; a stack other than its own is refused."""
    from planner.fidelity.profile import apply_profile

    prof = load_profile(profile)
    if stack is not None and stack != prof.stack:
        raise SpecError(f"the profile was fitted with stack {prof.stack}, --stack or --framework asks for {stack}",
                        path="--profile", expected=f"no --stack, or --stack {prof.stack} (or a profile of {stack})")
    return apply_profile(model, cluster, prof)


def prepare(model: Any, cluster: Any, *, global_batch: int | None, gpus: int | None, stack: str | None,
            nvlink_domain_gpus: int | None, profile: Any, overrides: Mapping[str, Any] | None = None):
    """(model, cluster) as `plan search`/`plan estimate` load them: options checked, the run stated
    (`overrides`: keywords of OVERRIDES) applied, the profile's constants in, the precision checked
    against the GPU, `gpus` within the cluster."""
    from planner.options import GLOBAL_BATCH, GPUS, OFFLOAD_LAYERS, check_option
    from planner.search import check_precision, with_global_batch, with_stack
    from planner.specs.loading import precision_line

    check_option(GPUS, gpus)
    check_option(GLOBAL_BATCH, global_batch)
    overrides = dict(overrides or {})
    check_option(OFFLOAD_LAYERS, overrides.get("offload_layers"))
    check_stack_name(stack)
    m = with_run(load_model(model), overrides)
    m = with_stack(with_global_batch(m, global_batch), stack)
    c = with_nvlink_segment(load_cluster(cluster), nvlink_domain_gpus)
    if profile is not None:
        m, c = with_profile(m, c, profile, stack)
    try:
        check_precision(m, c, *(precision_line(model) if isinstance(model, (str, os.PathLike)) else (None, None)))
    except SpecError as exc:
        if overrides.get("precision") is None:
            raise
        raise SpecError(exc.message, path="--precision", expected=exc.expected) from None
    total = sum(c.pool_cluster(n).total_gpus for n in c.pool_names)
    if gpus is not None and gpus > total:
        raise SpecError(f"--gpus {gpus} is more than the {total} GPUs of {c.name}", path="--gpus",
                        expected=f"at most {total}")
    return m, c
