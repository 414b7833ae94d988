"""`planner.sweep`: `plan sweep`'s points (a sweep file or mapping, and keywords that override its
keys as the flags do) run by the sweep machinery of planner/sweep/ on this machine, as rows."""
from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from planner.api import arguments as args
from planner.errors import SpecError

MAX_WORKERS = 256  # as `plan sweep --workers`


def _names(value, flag: str) -> list[str]:
    """A list of names, or one string of comma-separated names (as a repeated flag takes them)."""
    items = args.items(value, flag, (str, os.PathLike), "a name, a path or a list of them")
    for v in items:
        args.required(v, (str, os.PathLike), flag)
    return [v.strip() for text in items for v in os.fspath(text).split(",") if v.strip()]


def overrides(*, models, scale_model, params, cluster, gpus, global_batch, batch_tokens, tokens, objective,
              framework, constraints: dict) -> dict:
    """The sweep-file keys the keywords give, as `plan sweep`'s flags give them (None: not given, the
    file's value stands)."""
    from planner.sweep import parse_gpus, parse_params

    out = {k: v for k, v in dict(global_batch=global_batch, batch_tokens=batch_tokens, tokens=tokens).items()
           if v is not None}
    if models:
        out["models"] = _names(models, "--models")
    for key, value in (("cluster", cluster), ("objective", objective)):
        if value is not None:
            names = _names(value, f"--{key}")
            if not names:
                raise SpecError("an empty list", path=f"--{key}",
                                expected="time | energy | cost | carbon" if key == "objective" else "cluster specs")
            out[key] = names[0] if len(names) == 1 else names
    counts = [] if gpus is None else args.items(gpus, "--gpus", (str, int), "GPU counts")  # an empty list: not given
    if counts and gpus != "":
        out["gpus"] = parse_gpus(gpus if isinstance(gpus, str) else [",".join(map(str, counts))])
    if framework is not None:
        args.typed(framework, str, "--framework")
        from planner.api.inputs import framework_stack

        framework_stack(framework, None)  # an unknown name, said as `plan search` says it
        out["framework"] = framework
    if params is not None and not isinstance(params, str):
        params = ",".join(map(str, args.items(params, "--params", (int, float), "parameter counts")))
    scale = {k: v for k, v in dict(base=scale_model, params=None if params is None else parse_params(params)).items()
             if v is not None}
    if scale:
        out["scale_model"] = scale
    given = {**args.read_options(_file_defaults(constraints), "sweep"), **args.read_axes(constraints)}
    if given.get("allow_cross_node_tp") is False:
        given.pop("allow_cross_node_tp")  # a switch off leaves the file's value
    if given:
        out["constraints"] = given
    if global_batch is not None and batch_tokens is not None:
        raise SpecError("give one of them", path="--global-batch/--batch-tokens",
                        expected="--global-batch SEQUENCES or --batch-tokens TOKENS")
    return out


def _file_defaults(constraints: dict) -> dict:
    """The sweep options as `plan sweep` receives them: a switch off, the others None (the file's value
    or the option's default applies), the caller's values typed."""
    from planner.options import options_for

    return {o.key: args.typed(constraints[o.key], o.kind, o.flag) if constraints.get(o.key) is not None
            else (False if o.kind is bool else None) for o in options_for("sweep")}


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def worker_count(workers: int | None) -> int:
    """`workers` checked (1 to MAX_WORKERS) and capped by the cores this process may run on (256
    workers on 2 cores made no progress in 60 s)."""
    n = cores() if workers is None else args.typed(workers, int, "--workers")
    if not 1 <= n <= MAX_WORKERS:
        raise SpecError(f"must be 1 to {MAX_WORKERS}, got {str(n)[:20]}", path="--workers",
                        expected=f"an integer from 1 to {MAX_WORKERS} (processes)")
    return min(n, cores())


def executor_of(kind: Any = "local", address: str | None = None):
    """The `Executor` the points run on: "local" or "ray" (Ray tasks on the cluster at `address`, or a
    local instance), or an `Executor`; checked before any work (Ray's presence and the address too)."""
    from planner.sweep import Executor

    if isinstance(kind, Executor):
        kind, address = kind.kind, kind.address if address is None else address
    args.typed(kind, str, "--executor"), args.typed(address, str, "--ray-address")
    if kind not in ("local", "ray"):
        raise SpecError(f"unknown executor '{kind[:40]}'", path="--executor", expected="local | ray")
    if address is not None and kind != "ray":
        raise SpecError("--ray-address is for --executor ray", path="--ray-address", expected="--executor ray")
    if kind == "ray":
        from planner.sweep.ray_executor import _ray, check_address

        _ray()
        if address is not None:
            check_address(address)
    return Executor(kind, address)


def make_folder(folder: Path, flag: str) -> None:
    """Create the folder an output goes to; say plainly when that is impossible."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecError(f"cannot create the folder: {exc.strerror}", file=str(folder), path=flag,
                        expected="a writable folder") from None


def check_out(out: str | os.PathLike | None) -> Path | None:
    """The output file checked before the work (its format, pyarrow for parquet, a FIFO or a device
    that would take the rows and lose them), its folder made."""
    if out is None:
        return None
    from planner.atomic import check_output
    from planner.sweep import output_format

    out = Path(out)
    output_format(out)
    make_folder(out.parent, "--out")
    check_output(out, "--out")
    return out


def sweep_spec(spec, given: dict):
    """(SweepSpec, the folder its relative paths are read from) of a file, a mapping or nothing."""
    from planner.sweep import SweepSpec, load_sweep, with_overrides

    if spec is None:
        return with_overrides(SweepSpec(), given), None
    if isinstance(spec, Mapping):
        from planner.specs.loading import validate
        from planner.specs.yamlio import LoadedYaml
        from planner.sweep.spec import check_size

        data = dict(spec)
        result = with_overrides(validate(SweepSpec, data, LoadedYaml(data=data, file=None, lines={})), given)
        check_size(result)
        return result, None
    return load_sweep(spec, given), Path(spec).resolve().parent


def sweep_points(spec, base_dir: Path | None, *, nvlink_domain_gpus=None, profile=None,
                 overrides: Mapping[str, Any] | None = None) -> list:
    """The points of a checked sweep spec, with the run stated beside it applied (`with_stated`;
    `overrides`: keywords of planner/api/inputs.py OVERRIDES)."""
    from planner.sweep import expand

    overrides = dict(overrides or {})
    check_offload_layers(overrides.get("offload_layers"))
    args.typed(overrides.get("torch_compile"), bool, "--torch-compile")
    return with_stated(expand(spec, base_dir), spec, nvlink_domain_gpus=nvlink_domain_gpus, profile=profile,
                       overrides=overrides)


def check_offload_layers(offload_layers: Any) -> None:
    """`offload_layers` (--offload-layers) typed and within its bounds, before any point is made."""
    from planner.options import OFFLOAD_LAYERS, check_option

    check_option(OFFLOAD_LAYERS, args.typed(offload_layers, int, OFFLOAD_LAYERS.flag))


def with_stated(points: list, spec, *, nvlink_domain_gpus=None, profile=None,
                overrides: Mapping[str, Any] | None = None) -> list:
    """The points with the `overrides` (seq_len, precision, training.offload_layers, ...: planner/api/inputs.py
    OVERRIDES) and the NVLink segment applied as if each spec said so, and a profile's constants in (the key
    of each point holds them); points that become identical run once."""
    from planner.api.inputs import load_profile, with_nvlink_segment, with_run
    from planner.fidelity.profile import apply_profile
    from planner.search import check_precision
    from planner.sweep.family import batch_from_tokens

    if profile is not None:
        prof, done = load_profile(profile), {}
        for p in points:
            done.setdefault((id(p.model), id(p.cluster)), (p, apply_profile(p.model, p.cluster, prof)))
        points = [replace(p, model=done[(id(p.model), id(p.cluster))][1][0],
                          cluster=done[(id(p.model), id(p.cluster))][1][1]) for p in points]
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    if nvlink_domain_gpus is None and not given:
        return points
    models, clusters, unique = {}, {}, {}
    for p in points:
        if id(p.model) not in models:
            m = with_run(p.model, given)
            if "seq_len" in given and spec.global_batch is None and spec.batch_tokens is not None:
                batch = batch_from_tokens(spec.batch_tokens, m.seq_len)
                m = m.model_copy(update={"training": m.training.model_copy(update={"global_batch": batch})})
            models[id(p.model)] = (p.model, m)
        if id(p.cluster) not in clusters:
            clusters[id(p.cluster)] = (p.cluster, with_nvlink_segment(p.cluster, nvlink_domain_gpus))
        q = replace(p, model=models[id(p.model)][1], cluster=clusters[id(p.cluster)][1])
        if "precision" in given:
            try:
                check_precision(q.model, q.cluster)
            except SpecError as exc:
                raise SpecError(exc.message, path="--precision", expected=exc.expected) from None
        unique.setdefault(q.key, q)
    return list(unique.values())


def sweep(spec: str | os.PathLike | Mapping | None = None, *, models=None, scale_model: str | None = None,
          params=None, cluster=None, gpus=None, global_batch: int | None = None, batch_tokens: float | None = None,
          tokens: float | None = None, objective=None, framework: str | None = None, seq_len: int | None = None,
          precision: str | None = None, nvlink_domain_gpus: int | None = None, profile: Any = None,
          offload_layers: int | None = None, torch_compile: bool | None = None, out: str | os.PathLike | None = None,
          workers: int | None = 1, force: bool = False,
          executor: Any = "local", ray_address: str | None = None, on_row: Callable[[dict], None] | None = None,
          **constraints: Any) -> Iterator[dict]:
    """The best layout of every point of a sweep, one row (a dict of planner.sweep.COLUMNS) a point.

    `spec`: a sweep file or its content; the keywords override its keys as `plan sweep`'s flags do.
    Without `out`, rows come as each point finishes (in order with one worker). With `out` (.csv,
    .jsonl, .parquet) points already there are skipped and every row is written as it finishes, the
    output locked, and the rows are given in the points' order once the sweep is done. `executor`:
    "local" (`workers` processes) or "ray" (Ray tasks, on the cluster at `ray_address` or a local
    instance), or a `planner.sweep.Executor`; `on_row`: called with each row as it finishes (a
    progress bar). Checked on the call, before any point runs."""
    from planner.layout.axes import fixable
    from planner.options import options_for

    args.unknown("sweep", constraints, {o.key for o in options_for("sweep")} | {a.name for a in fixable()})
    if spec is not None and not isinstance(spec, Mapping):
        args.typed(spec, (str, os.PathLike), "SWEEP")
    args.typed(out, (str, os.PathLike), "--out"), args.typed(force, bool, "--force")
    if on_row is not None and not callable(on_row):
        raise TypeError(f"on_row must be callable, got {type(on_row).__name__}")
    ex = executor_of(executor, ray_address)
    n = worker_count(workers)
    check_offload_layers(offload_layers)
    args.typed(torch_compile, bool, "--torch-compile")
    given = overrides(models=models, scale_model=scale_model, params=params, cluster=cluster, gpus=gpus,
                      global_batch=global_batch, batch_tokens=batch_tokens, tokens=tokens, objective=objective,
                      framework=framework, constraints=constraints)
    sweep_spec_, base_dir = sweep_spec(spec, given)
    out = check_out(out)
    points = sweep_points(sweep_spec_, base_dir, nvlink_domain_gpus=nvlink_domain_gpus, profile=profile,
                          overrides=dict(seq_len=seq_len, precision=precision, offload_layers=offload_layers,
                                         torch_compile=torch_compile))
    return _rows(points, out, n, force, on_row, ex)


def run(points: list, *, out: Path | None = None, workers: int = 1, force: bool = False,
        on_row: Callable[[dict], None] | None = None, executor=None):
    """Run checked points (`sweep_points`) into `out` as `plan sweep` does: a `SweepRun` (rows in the
    points' order, how many computed and skipped); Ctrl-C or SIGTERM raise `SweepInterrupted` with
    the finished rows written."""
    from planner.sweep import run_sweep

    return run_sweep(points, out=out, workers=workers, force=force, on_row=on_row,
                     **({} if executor is None else {"executor": executor}))


def _rows(points, out: Path | None, workers: int, force: bool, on_row, executor) -> Iterator[dict]:
    from planner.sweep import compute

    if out is None:
        for row in compute(points, workers, executor=executor):
            if on_row is not None:
                on_row(row)
            yield row
        return
    yield from run(points, out=out, workers=workers, force=force, on_row=on_row, executor=executor).rows
