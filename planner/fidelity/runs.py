"""A runs file (`kind: runs`): training runs measured on the user's own cluster, the input of
`plan calibrate` (planner/fidelity/own.py).

Each run names a model and a cluster as a plan file does (a shipped name, a path relative to the
runs file, or inline), the GPUs, the layout as `plan estimate`'s flags spell it (an axis left out
takes estimate's default) and what was measured: the step time, or tokens per second of the whole
job or per GPU, and optionally the peak memory (max allocated) of the busiest GPU.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from planner.errors import SpecError, SpecErrors
from planner.export.frameworks import FRAMEWORK_STACK
from planner.layout.axes import AXES
from planner.options import axis_field
from planner.specs import ClusterSpec, ModelSpec
from planner.specs.loading import cluster_from_loaded, model_from_loaded, raise_all, spec_part, strip_kind, validate
from planner.specs.model import RECOMPUTE_MODULES
from planner.specs.precision import PRECISIONS
from planner.specs.yamlio import LoadedYaml

_STRICT = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)
MAX_RUNS = 1000
PRECISION_NAMES = tuple(PRECISIONS)

RunLayout = create_model(
    "RunLayout", __config__=_STRICT, __module__=__name__,
    __doc__="The measured layout, as plan estimate's flags; an axis left out takes estimate's default.",
    recompute_modules=(Optional[tuple[Literal[RECOMPUTE_MODULES], ...]], Field(  # type: ignore[valid-type]
        default=None, strict=False, max_length=16, description="Megatron's --recompute-modules of a selective run")),
    **{a.name: axis_field(a, optional=True) for a in AXES if a.given is not None})


class Measured(BaseModel):
    """What the run measured: one time figure (averaged over steps after warm-up), memory optional."""

    model_config = _STRICT
    step_time_s: float | None = Field(default=None, gt=0, le=1e6, description="seconds per optimizer step")
    tokens_per_s: float | None = Field(default=None, gt=0, le=1e13, description="tokens per second of the whole job")
    tokens_per_s_per_gpu: float | None = Field(default=None, gt=0, le=1e9, description="tokens per second per GPU")
    peak_memory_gib: float | None = Field(default=None, gt=0, le=4096, description=(
        "peak memory of the busiest GPU [GiB] (Megatron's 'max allocated', torch.cuda.max_memory_allocated)"))

    @model_validator(mode="after")
    def _one_time(self):
        given = [k for k in ("step_time_s", "tokens_per_s", "tokens_per_s_per_gpu") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"step_time_s: give exactly one of step_time_s, tokens_per_s, tokens_per_s_per_gpu "
                             f"({len(given)} given)")
        return self


class RunEntry(BaseModel):
    """One measured run."""

    model_config = _STRICT
    name: str | None = Field(default=None, min_length=1, max_length=128)
    model: str | dict = Field(description="a shipped model name, a path relative to this file, or inline")
    cluster: str | dict = Field(description="a shipped cluster name, a path relative to this file, or inline")
    gpus: int = Field(gt=0, le=10_000_000)
    global_batch: int | None = Field(default=None, gt=0, le=100_000_000, description="sequences a step (default: the model's)")
    seq_len: int | None = Field(default=None, gt=0, le=100_000_000, description="tokens a sequence (default: the model's)")
    precision: Literal[PRECISION_NAMES] | None = None  # type: ignore[valid-type]
    stack: str | None = Field(default=None, min_length=1, max_length=128, description="a shipped stack profile (default: the model's)")
    torch_compile: bool | None = Field(default=None, description=(
        "the blocks ran under torch.compile (torchtitan --compile.enable; default: the model's training.torch_compile)"))
    fp8_recipe: Literal["delayed", "tensorwise", "blockwise"] | None = Field(default=None, description=(
        "how FP8 was scaled (Megatron --fp8-recipe; default: the model's training.fp8_recipe)"))
    layout: RunLayout  # type: ignore[valid-type]
    measured: Measured
    source: dict[str, str | int | float] | None = Field(default=None, max_length=32, description=(
        "where the run was read from (plan runs import): framework, log file, steps used"))


class RunsFile(BaseModel):
    """A runs file: the runs of one cluster and software stack to calibrate on."""

    model_config = _STRICT
    name: str | None = Field(default=None, min_length=1, max_length=128)
    description: str | None = Field(default=None, max_length=10_000)
    runs: list[RunEntry] = Field(min_length=1, max_length=MAX_RUNS)


@dataclass(frozen=True)
class MeasuredRun:
    """One run, resolved: the model as it trained (batch, sequence, precision, stack), the cluster,
    the layout's axis values and the measured figures in base units."""

    name: str
    model: ModelSpec
    cluster: ClusterSpec
    gpus: int
    given: dict[str, Any]  # axis values stated (plan estimate's names); the others take estimate's defaults
    step_time_s: float
    peak_memory_gib: float | None
    file: str | None = None
    line: int | None = None

    @property
    def params_b(self) -> float:
        return self.model.total_params() / 1e9


def runs_from_loaded(loaded: LoadedYaml) -> list[MeasuredRun]:
    """Every run of a runs file, each model and cluster loaded; all problems at once (exit 2)."""
    data = strip_kind(loaded.data, loaded, "runs")
    shell = data
    if isinstance(data, dict) and isinstance(data.get("runs"), list):
        shell = {**data, "runs": [{k: (v if k not in ("model", "cluster") or not isinstance(v, dict) else {})
                                   for k, v in r.items()} if isinstance(r, dict) else r for r in data["runs"]]}
    spec = validate(RunsFile, shell, loaded)
    runs, errors = [], []
    for i, entry in enumerate(spec.runs):
        where = ("runs", i)
        try:
            model = spec_part(loaded, where + ("model",), "model", model_from_loaded)[0]
            cluster = spec_part(loaded, where + ("cluster",), "cluster", cluster_from_loaded)[0]
            runs.append(_resolved(entry, model, cluster, loaded, where))
        except SpecErrors as exc:
            errors += exc.errors
        except SpecError as exc:
            errors.append(exc)
    raise_all(errors)
    return runs


def _resolved(entry: RunEntry, model: ModelSpec, cluster: ClusterSpec, loaded: LoadedYaml, where: tuple) -> MeasuredRun:
    from planner.search import with_global_batch, with_run, with_stack

    at = dict(file=loaded.file, line=loaded.line_of(where))
    lay = entry.layout.model_dump(exclude_none=True)
    missing = [a for a in AXES if a.given == "required" and a.name not in lay]
    if missing:  # plan estimate's required axes: a log that does not print them (NeMo 2, torchtitan under pp)
        logged = " (its log does not print it: fill it in)" if entry.source and "framework" in entry.source else ""
        raise SpecError(f"the run does not state {', '.join(a.name for a in missing)}{logged}",
                        path=".".join(map(str, where + ("layout", missing[0].name))),
                        expected="; ".join(f"layout.{a.name}: the {a.doc} the run trained with" for a in missing),
                        file=loaded.file, line=loaded.line_of(where + ("layout",)) or at["line"])
    modules = lay.pop("recompute_modules", None)
    model = with_run(model, seq_len=entry.seq_len, precision=entry.precision,
                     recompute_modules=modules, torch_compile=entry.torch_compile,
                     fp8_recipe=entry.fp8_recipe, flags=_run_paths(where), **at)
    model = with_stack(with_global_batch(model, entry.global_batch), entry.stack)
    if entry.gpus > cluster.total_gpus:
        raise SpecError(f"{entry.gpus} GPUs is more than the {cluster.total_gpus} of {cluster.name}",
                        path=".".join(map(str, where + ("gpus",))), expected=f"at most {cluster.total_gpus}",
                        file=loaded.file, line=loaded.line_of(where + ("gpus",)))
    m = entry.measured
    tokens = model.training.global_batch * model.seq_len
    step = m.step_time_s or (tokens / m.tokens_per_s if m.tokens_per_s else tokens / (m.tokens_per_s_per_gpu * entry.gpus))
    if not math.isfinite(step) or step <= 0:
        raise SpecError("the measured time gives no finite step time", path=".".join(map(str, where + ("measured",))),
                        expected="a positive, finite figure", **at)
    name = entry.name or f"run {where[1] + 1}"
    return MeasuredRun(name, model, cluster, entry.gpus, lay, float(step), m.peak_memory_gib, **at)


def _run_paths(where: tuple) -> dict[str, str]:
    """Spec paths a run overrides -> the runs file's field path that sets them (for error messages)."""
    base = ".".join(map(str, where))
    return {"seq_len": f"{base}.seq_len", "training.precision": f"{base}.precision",
            "training.recompute_modules": f"{base}.layout.recompute_modules",
            "training.torch_compile": f"{base}.torch_compile", "training.fp8_recipe": f"{base}.fp8_recipe"}


def load_runs(path) -> list[MeasuredRun]:
    from planner.specs.loading import load_yaml_file

    return runs_from_loaded(load_yaml_file(path))


MAX_LOG_BYTES = 256 * 2**20  # a training log of a long run; more is not a log to read whole
# The frameworks whose log alone tells the stack it ran: torchtitan's model code and FSDP2, not Megatron's
# (configs/stacks/torchtitan.yaml). The others leave it to the model: a Megatron-LM log may be of any revision
# (megatron-core, megatron-lm-2022), and a DeepSpeed log may be Megatron-DeepSpeed's (megatron-deepspeed),
# not the ZeRO-3 engine FRAMEWORK_STACK prices DeepSpeed exports with.
LOG_STATES_STACK = ("torchtitan",)


def read_runs(paths: list, *, cluster: str | None = None, model: str | None = None) -> list[MeasuredRun]:
    """The runs of runs files (`*.yaml`, `*.yml`) and of training logs (any other file: Megatron-LM,
    NeMo / Megatron-Bridge, torchtitan, DeepSpeed; planner/fidelity/logs.py). A log names no cluster:
    `cluster` (a shipped name or a path) is its cluster, `model` its model where the log states none."""
    from pathlib import Path

    runs: list[MeasuredRun] = []
    for path in paths:
        if Path(path).suffix.lower() in (".yaml", ".yml"):
            runs += load_runs(path)
        else:
            runs += runs_from_log(path, cluster=cluster, model=model)
    if len(runs) > MAX_RUNS:
        raise SpecError(f"{len(runs)} runs", path="RUNS", expected=f"at most {MAX_RUNS} runs")
    return runs


def log_entries(path, *, cluster: str | None, model: str | None, flag_unstated: bool = False) -> dict:
    """A runs file's content (kind: runs) of one training log, as `plan runs import` writes it. What the log
    does not print and plan calibrate needs (`unstated`): refused, saying how to supply it; with
    `flag_unstated` (plan runs import), written as null for the user to fill in."""
    import os

    from planner.fidelity.logs import parse_log
    from planner.specs.yamlio import read_bounded

    file = os.fsdecode(path)
    raw = read_bounded(path, MAX_LOG_BYTES)
    text = raw.decode("utf-8", errors="replace")
    run = parse_log(text, file)
    entry = {k: v for k, v in run.items() if k in RunEntry.model_fields and v is not None and k not in ("model",)}
    framework = run["source"]["framework"]
    if framework in LOG_STATES_STACK:
        entry.setdefault("stack", FRAMEWORK_STACK[framework])
    if model is not None:
        _same_dimensions(run.get("model") or {}, model, file, (run.get("layout") or {}).get("tp") or 1)
        entry["model"] = model
    elif run.get("model"):
        entry["model"] = _log_model(run, file)
    else:
        raise SpecError("the log does not state the model's dimensions", file=file, path="--model",
                        expected="--model NAME (a shipped name or a path)")
    if cluster is None:
        raise SpecError("a training log names no cluster", file=file, path="--cluster",
                        expected="--cluster NAME (a shipped name or a path)")
    entry["cluster"] = _from_anywhere(cluster, "cluster")
    if isinstance(entry.get("model"), str):
        entry["model"] = _from_anywhere(entry["model"], "model")
    first = ("name", "model", "cluster", "gpus")
    entry = {**{k: entry[k] for k in first if k in entry}, **{k: v for k, v in entry.items() if k not in first}}
    m = entry.get("measured", {})
    entry["measured"] = {k: float(f"{v:.6g}") for k, v in m.items()}  # a mean of logged figures: 6 digits
    gaps = unstated(entry)
    if gaps and not flag_unstated:
        said = [k[-1] if k[0] == "layout" else f"the {doc}" for k, doc in gaps]
        expected = _fill_in_recipe(file, cluster, model, gaps)
        if any(k[0] == "model" for k, _ in gaps):  # a model: a --model of the log's dimensions supplies the rest
            dims = ", ".join(f"{k} {v}" for k, v in run["model"].items() if k != "name")
            expected = (f"--model NAME with the log's dimensions ({dims}): it supplies what the log does not print; "
                        f"or {expected}")
        raise SpecError(f"the log does not print {_listed(said)}, which plan calibrate needs", file=file,
                        expected=expected)
    return {"kind": "runs", "runs": [flagged(entry, gaps)]}


def _from_anywhere(arg: str, kind: str) -> str:
    """A --model or --cluster as a runs file states it: a shipped name as given, a path (relative to where the
    command ran) made absolute, since a runs file's paths are relative to the runs file (and the check of a log's
    run to the log): 'runs import ../run.log --model ../m.yaml' looked for ../../m.yaml."""
    import os
    from pathlib import Path

    from planner.specs.loading import resolve

    try:
        path = resolve(arg, kind)
    except SpecError:
        return arg  # an unknown name: the runs file's check names it
    return os.path.abspath(path) if path == Path(arg) else arg  # else a shipped name, resolved to its file


def flagged(entry: dict, gaps: list) -> dict:
    """`entry` with each gap null, for the user to fill in (plan calibrate names it until then); a model
    dimension before the model's training, a layout axis where no layout was read in a layout of its own."""
    entry = dict(entry)
    for keys, _ in gaps:
        part = entry.get(keys[0]) or {}
        entry[keys[0]] = {**{k: v for k, v in part.items() if k != "training"}, keys[1]: None,
                          **{k: v for k, v in part.items() if k == "training"}}
    return entry


# A model spec's required dimensions a log may leave out (ModelSpec; name, seq_len and training the import sets)
LOG_MODEL_DIMS = {"layers": "number of transformer layers", "hidden": "hidden size", "heads": "number of attention heads",
                  "vocab": "vocabulary size"}


def unstated(entry: dict) -> list[tuple[tuple[str, str], str]]:
    """What a run read from a log lacks that plan calibrate needs, and what it is: (keys in the run, doc).
    plan estimate's required axes (NeMo 2 prints no micro-batch, DeepSpeed no tp or pp); a null there is
    one `plan runs import` wrote for the user to fill in. And of the model a log prints, the dimensions a
    model spec requires (Megatron-Bridge prints no vocabulary size)."""
    lay, model = entry.get("layout") or {}, entry.get("model")
    dims = [(("model", k), doc) for k, doc in LOG_MODEL_DIMS.items() if isinstance(model, dict) and model.get(k) is None]
    return dims + [(("layout", a.name), a.doc) for a in AXES if a.given == "required" and lay.get(a.name) is None]


def _listed(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _fill_in_recipe(file: str, cluster: str, model: str | None, gaps: list) -> str:
    """How to supply what a log does not print: plan calibrate has no flag for it, a runs file has a field."""
    import shlex

    cmd = f"plan runs import {shlex.quote(file)} --cluster {shlex.quote(cluster)}" + (
        f" --model {shlex.quote(model)}" if model is not None else "") + " -o runs.yaml"
    fields = "; ".join(f"{'.'.join(k)}: the {doc}" for k, doc in gaps)
    return (f"a runs file that states {'it' if len(gaps) == 1 else 'them'}: {cmd}, fill in the run's {fields}, "
            "then plan calibrate runs.yaml")


def _count(value) -> int | None:
    """`value` if a log's value is an integer (True is an int to Python, not a count), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def checked_entries(data: dict, file: str) -> None:
    """Check a log's runs file content as plan calibrate will read it, the values left to fill in (null) aside:
    each given 1, which every check takes (a degree of 1 divides any layout and batch; a dimension of 1 is a
    positive count), but heads the printed kv_heads and a hidden size the heads, which must divide them (a log
    without hidden_size was refused for 'heads (32) must divide hidden (1)', one without the heads for 'kv_heads
    (8) must divide heads (1)': a 1 the user never wrote): a fill-in is the user's, the rest must already be right."""
    runs = []
    for entry in data["runs"]:
        entry = dict(entry)
        for keys, _ in unstated(entry):
            part = entry[keys[0]]
            fill = {("model", "heads"): _count(part.get("kv_heads")),
                    ("model", "hidden"): _count(part.get("heads")) or _count(part.get("kv_heads"))}.get(keys)
            entry[keys[0]] = {**part, keys[1]: fill or 1}
        runs.append(entry)
    runs_from_loaded(LoadedYaml(data={**data, "runs": runs}, file=file, lines={}))


# The shape a log prints that a --model must match (seq_len is the run's, stated apart; vocab below)
ARCHITECTURE = ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden")
VOCAB_PAD = 128  # Megatron-LM pads the vocabulary to a multiple of 128 x tp (--make-vocab-size-divisible-by)


def _same_dimensions(stated: dict, model: str, file: str, tp: int = 1) -> None:
    """Refuse a --model whose architecture differs from what the log prints: the fit would run on the
    --model's shapes while the measured times are the log's (a UX review: hidden 2048 and 16 layers in a
    Megatron-Bridge log fitted as an 8B model, the GEMM constant moved 7 % with no word). A printed
    vocabulary may be Megatron's padded one (training/tokenizer/tokenizer.py _vocab_size_with_padding): any
    from the model's to the next multiple of 128 x tp agrees."""
    import math

    from planner.specs.loading import load_model

    spec = load_model(model)
    # what a spec leaves out is its default (kv_heads = heads, ffn 4 h, head_dim h / heads): compared as None,
    # a multi-head --model passed against a log's 8 query groups and a 4 h one against a log's 14336
    ours = {k: getattr(spec, k, None) for k in ARCHITECTURE} | {
        "kv_heads": spec.num_kv_heads, "ffn_hidden": spec.ffn, "head_dim": spec.head_width}
    differ = [f"{k} {stated[k]} (the log) against {ours[k]} (--model)" for k in ARCHITECTURE
              if _count(stated.get(k)) is not None and isinstance(ours[k], int) and ours[k] != stated[k]]
    vocab, step = _count(stated.get("vocab")), VOCAB_PAD * max(int(tp or 1), 1)
    if vocab is not None and not spec.vocab <= vocab <= math.ceil(spec.vocab / step) * step:
        differ.append(f"vocab {vocab} (the log) against {spec.vocab} (--model; padded to at most "
                      f"{math.ceil(spec.vocab / step) * step} at tp {tp})")
    if differ:
        raise SpecError(f"--model {model} is not the model the log trained: " + "; ".join(differ), file=file,
                        path="--model", expected="a --model with the log's dimensions (it supplies what the log "
                        "does not print, e.g. the vocabulary), or no --model")


def _log_model(run: dict, file: str) -> dict:
    """An inline model spec of the dimensions a log prints (named after the log)."""
    from pathlib import Path

    dims = dict(run["model"])
    name = dims.pop("name", None) or Path(file).stem[:100] or "model"
    if run.get("seq_len"):
        dims["seq_len"] = run["seq_len"]  # a model spec states its sequence; the run's overrides it the same
    training = {"global_batch": run.get("global_batch") or 1}
    if run.get("precision"):
        training["precision"] = run["precision"]
    return {"name": name, **dims, "training": training}


def runs_from_log(path, *, cluster: str | None, model: str | None) -> list[MeasuredRun]:
    import os

    data = log_entries(path, cluster=cluster, model=model)
    return runs_from_loaded(LoadedYaml(data=data, file=os.fsdecode(path), lines={}))
