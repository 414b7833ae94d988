"""`planner.search` and `planner.estimate`: the work of `plan search` and `plan estimate` (which call
them: planner/cli/layouts.py), arguments checked with the flags' messages, typed results returned."""
from __future__ import annotations

import os
from typing import Any, Mapping

from planner.api import arguments as args
from planner.api.inputs import OVERRIDES, framework_stack, prepare
from planner.api.tools import export_kind
from planner.errors import SpecError

_RUN = dict(global_batch=int, nvlink_domain_gpus=int,
            **{k: kind for k, (_, _, kind) in OVERRIDES.items()})  # keyword -> type (flag: --global-batch, ...)
_FLAGS = {"global_batch": "--global-batch", "nvlink_domain_gpus": "--nvlink-domain-gpus",
          **{k: flag for k, (_, flag, _) in OVERRIDES.items()},
          "stack": "--stack", "framework": "--framework", "objective": "--objective"}


def _typed_run(gpus, run: dict) -> None:
    from planner.options import GPUS

    args.typed(gpus, int, GPUS.flag)
    for key, value in run.items():
        args.typed(value, _RUN.get(key, str), _FLAGS[key])


def search(model: str | os.PathLike | Mapping | Any, cluster: str | os.PathLike | Mapping | Any, *,
           gpus: int | None = None, profile: Any = None, framework: str | None = None, objective: str = "time",
           top: int = 5, global_batch: int | None = None, seq_len: int | None = None, precision: str | None = None,
           nvlink_domain_gpus: int | None = None, stack: str | None = None, offload_layers: int | None = None,
           torch_compile: bool | None = None, frontier: bool = False,
           power_caps: bool | None = None, gpus_range: tuple[int, int] | None = None, export: str | None = None,
           **options: Any):
    """The best `top` layouts of `model` on `cluster`, as `plan search` finds them.

    `options`: fixed layout axes by name (`tp=8`, `recompute="selective"`), limits and search settings
    by their file keys (`max_step_time_s=20`, `memory_headroom=0.1`, `time_limit_s=5`). Returns a
    `Search`; a `PoolsSearch` on a cluster of several pools (unless `frontier`); a `GpuCounts` with
    `gpus_range=(lo, hi)`. `offload_layers`: layers an activation-offloading layout offloads, as if the
    model spec said training.offload_layers (`--offload-layers`); `torch_compile`: training.torch_compile
    (`--torch-compile`). `export`: the framework whose launch settings will be asked of the result
    (`planner.export`), checked before any work (against `framework`, and a cluster of one pool)."""
    from planner.layout.axes import fixable
    from planner.options import (GPUS, MAX_MICRO_BATCH, OFFLOAD_LAYERS, SPLIT_TOP, TIME_LIMIT, TOP, CRITICAL_BATCH,
                                 check_option, options_for)

    args.unknown("search", options, {o.key for o in options_for("search")} | {a.name for a in fixable()})
    stated = dict(seq_len=seq_len, precision=precision, offload_layers=offload_layers, torch_compile=torch_compile)
    _typed_run(gpus, dict(global_batch=global_batch, nvlink_domain_gpus=nvlink_domain_gpus, stack=stack,
                          framework=framework, objective=objective, **stated))
    args.typed(top, int, TOP.flag), args.typed(frontier, bool, "--frontier"), args.typed(power_caps, bool, "--power-caps")
    with args.numbers_checked():
        check_option(TOP, top)
        check_option(GPUS, gpus)
        check_option(OFFLOAD_LAYERS, offload_layers)
        stack_ = framework_stack(framework, stack, export_kind(export))
        values = {**args.option_values("search", options), **{a.name: options.get(a.name) for a in fixable()}}
        fixed = args.read_axes(values)
        _offload_layers_need_activations(offload_layers, fixed.get("offload"))
        args.check_degree_product(fixed)
        args.check_fixed_degrees(gpus, fixed)
        limits, split_top = args.read_limits(values, "search"), args.setting(values, SPLIT_TOP)
        from planner.layout.space import SpaceLimits

        common = dict(objective=objective, limits=limits,
                      space=SpaceLimits(max_micro_batch=args.setting(values, MAX_MICRO_BATCH)),
                      time_limit_s=args.setting(values, TIME_LIMIT), power_caps=power_caps,
                      critical_batch_tokens=args.read_options(values, "search").get(CRITICAL_BATCH.key),
                      framework=framework)
        span = None if gpus_range is None else _span(gpus_range)
        m, c = prepare(model, cluster, global_batch=global_batch, gpus=gpus, stack=stack_,
                       nvlink_domain_gpus=nvlink_domain_gpus, profile=profile, overrides=stated)
        if export is not None and span is None and len(c.pool_names) > 1:
            raise SpecError(f"{c.name} has {len(c.pool_names)} pools; launch settings are for one pool", path="--export",
                            expected="a cluster of one pool (e.g. one of its pools as its own cluster spec)")
        from planner.export.frameworks import framework_of_export, runs_uneven_split

        target = framework or (framework_of_export(export) if export is not None else None)
        if not runs_uneven_split(target, m):  # the split Megatron runs for a hybrid is the even one
            split_top = 0
        result = _searched(m, c, gpus, top, span, frontier, split_top, common)
        args.require_finite(result.to_dict())
    return result


def _searched(m, c, gpus, top, span, frontier, split_top, common):
    """The search `plan search` runs for these arguments: over GPU counts, over pools, or one."""
    from dataclasses import replace

    from planner.api.results import GpuCounts, PoolsSearch, Search, _from
    from planner.mixed_pools import search_pools
    from planner.search import search as engine, search_gpu_counts

    if span is not None:
        counts = search_gpu_counts(m, c, *span, **common)
        return _from(GpuCounts, replace(counts, results=[None if r is None else _from(Search, r) for r in counts.results]))
    if len(c.pool_names) > 1 and not frontier:
        pools = search_pools(m, c, gpus=gpus, top_k=top, split_top=split_top, **common)
        return _from(PoolsSearch, pools, framework=common["framework"])
    result = engine(m, c, gpus=gpus, top_k=top, frontier=frontier, split_top=split_top, **common)
    return _from(Search, result, framework=common["framework"])


def _span(gpus_range) -> tuple[int, int]:
    """(lo, hi) from a pair or from `plan search --gpus-range`'s text "LO:HI"."""
    if isinstance(gpus_range, str):
        lo, sep, hi = gpus_range.partition(":")
        if sep and all(0 < len(x.strip()) <= 12 and x.strip().isascii() and x.strip().isdigit() for x in (lo, hi)):
            return int(lo), int(hi)
    elif isinstance(gpus_range, (tuple, list)) and len(gpus_range) == 2 and all(
            isinstance(x, int) and not isinstance(x, bool) for x in gpus_range):
        return int(gpus_range[0]), int(gpus_range[1])
    raise SpecError(f"cannot read '{str(gpus_range)[:40]}'", path="--gpus-range", expected="LO:HI, e.g. 256:8192")


def estimate(model: str | os.PathLike | Mapping | Any, cluster: str | os.PathLike | Mapping | Any, *,
             gpus: int | None = None, profile: Any = None, framework: str | None = None,
             global_batch: int | None = None, seq_len: int | None = None, precision: str | None = None,
             nvlink_domain_gpus: int | None = None, stack: str | None = None, offload_layers: int | None = None,
             torch_compile: bool | None = None, stage_layers: list[int] | str | None = None, export: str | None = None,
             **axes: Any):
    """One layout of `model` on `cluster` scored, as `plan estimate` scores it: `tp`, `pp` and
    `micro_batch` are required, the other axes take `plan estimate`'s defaults (sequence parallelism
    when tp > 1, ZeRO 1 when dp x cp > 1; torchtitan's own ZeRO 3 for `framework` or `export`
    torchtitan); limits by their file keys (`memory_headroom=0.1`). `export`: the framework whose
    launch settings will be asked of the result, checked first. Returns an `Estimate`; an infeasible
    layout is a result (`feasible` False, `violations` say why). `offload_layers`, `torch_compile`: as for `search`."""
    from planner.layout.axes import AXES
    from planner.options import GPUS, OFFLOAD_LAYERS, check_option

    args.layout_keywords("estimate", axes)
    stated = dict(seq_len=seq_len, precision=precision, offload_layers=offload_layers, torch_compile=torch_compile)
    _typed_run(gpus, dict(global_batch=global_batch, nvlink_domain_gpus=nvlink_domain_gpus, stack=stack,
                          framework=framework, **stated))
    with args.numbers_checked():
        check_option(GPUS, gpus)
        check_option(OFFLOAD_LAYERS, offload_layers)
        stack_ = framework_stack(framework, stack, export_kind(export))
        given = {a.name: axes.get(a.name, None if a.estimate_default is not None else a.default)
                 for a in AXES if a.given is not None}
        args.check_degree_product(args.read_axes(given))
        _offload_layers_need_activations(offload_layers, given.get("offload"))
        limits = args.read_limits(args.option_values("estimate", axes), "estimate", fix=False)
        split = parse_split(stage_layers)
        m, c = prepare(model, cluster, global_batch=global_batch, gpus=None, stack=stack_,
                       nvlink_domain_gpus=nvlink_domain_gpus, profile=profile, overrides=stated)
        result = _estimated(m, c, gpus, limits, split, given, framework, export)
        args.require_finite(result.to_dict())
    return result


def _offload_layers_need_activations(offload_layers: int | None, offload: Any) -> None:
    """--offload-layers counts layers whose activations move to the host: refused beside an --offload that
    moves none (as training.offload_layers beside training.offload none or optimizer, planner/specs/model.py)."""
    if offload_layers is not None and offload in ("none", "optimizer"):
        raise SpecError(f"--offload-layers {offload_layers} counts layers whose activations move to the host, and "
                        f"--offload {offload} moves none", path="--offload-layers",
                        expected="--offload activations or both with it, or no --offload-layers")


def _estimated(m, c, gpus, limits, split, given, framework, export=None):
    from planner.api.results import Estimate, _from
    from planner.estimate import estimate_defaults, estimate_layout, with_memory_hint

    given = estimate_defaults(given, gpus, c, framework or export)  # torchtitan's settings: its own defaults
    result = estimate_layout(m, c, gpus=gpus, limits=limits, stage_layers=split, **given)
    _check_framework_runs(framework, result, m)
    result = with_memory_hint(result, m, c, gpus=gpus, limits=limits, given=given)
    return _from(Estimate, result, model=m, cluster=c, framework=framework)


def parse_split(stage_layers) -> list[int] | None:
    """Layers per virtual stage: a list of counts, or `plan estimate --stage-layers`'s text `7,8x14,7`."""
    if stage_layers is None:
        return None
    if isinstance(stage_layers, (list, tuple)):
        if len(stage_layers) <= 100_000 and all(isinstance(k, int) and not isinstance(k, bool) and 0 <= k < 10**12
                                                 for k in stage_layers):
            return [int(k) for k in stage_layers]
        stage_layers = ",".join(map(str, stage_layers))
    out: list[int] = []
    for part in str(stage_layers).split(","):  # spaces around a part only: '12 12' is two numbers, not 1212
        part = part.strip(" ")
        count, x, times = part.partition("x")
        if not _digits(count) or (x and not (_digits(times) and int(times))) or len(out) + int(times or 1) > 100_000:
            raise SpecError(f"cannot read '{part[:40]}'", path="--stage-layers",
                            expected="comma-separated layer counts or runs COUNTxTIMES, e.g. 7,8x14,7")
        out.extend([int(count)] * int(times or 1))
    return out


def _digits(text: str) -> bool:
    return 0 < len(text) <= 12 and text.isascii() and text.isdigit()


def _check_framework_runs(framework: str | None, result, model) -> None:
    """The layout is one the framework runs with this model, else a SpecError saying which rule."""
    if framework is None:
        return
    from planner.export.frameworks import framework_mask
    from planner.layout.axes import AXES
    from planner.layout.space import single_layout

    ok, reason = framework_mask(framework, single_layout(**{a.name: result.layout[a.name] for a in AXES
                                                            if a.name in result.layout}), model)
    if not bool(ok[0]):
        raise SpecError(f"{framework} cannot run this layout: {reason[0]}", path="--framework",
                        expected="a layout the framework runs (planner/export/frameworks.py)")
