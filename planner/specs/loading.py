"""Load GPU, cluster and model specs from YAML files or shipped names, strictly.

Every problem becomes a `SpecError` naming the file, the line, the field path and what was
expected; unknown keys get the nearest valid key suggested, and all problems of a file are
reported together (`SpecErrors`). Loading only reads: no input file is ever written.
"""
from __future__ import annotations

import difflib
import json
import os
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from planner.errors import MAX_ERRORS, SpecError, SpecErrors, clip, clip_file, shown
from planner.specs.hf import Imported, is_hf_config, name_for, parse_config, spec_from_hf
from planner.specs.shipped import KINDS, config_dir, shared_dir, shipped_names  # noqa: F401  (re-exported)
from planner.specs import ClusterSpec, GpuSpec, ModelSpec, StackSpec, is_plain_name
from planner.specs.yamlio import MAX_DEPTH, MAX_KEYS, MAX_NODES, LoadedYaml, load_yaml_file, read_bounded

T = TypeVar("T", bound=BaseModel)

# Software constants that GPU presets held before stack profiles existed.
MOVED_TO_STACK = ("layer_overhead_us", "step_overhead_s", "tp_overlap_exposed", "dp_overlap_exposed",
                  "elementwise_backward_factor")
FILE_KINDS = ("gpu", "cluster", "model", "stack", "layout", "plan", "sweep", "jobs", "runs", "profile")
SUGGEST_CHARS = 64  # names and keys longer than this get no "did you mean" (difflib is quadratic)


def close_match(name: object, names: list[str]) -> str | None:
    """The nearest of `names` (difflib), or None; long names are not compared."""
    if len(str(name)) > SUGGEST_CHARS:
        return None
    close = difflib.get_close_matches(str(name), names, n=1)
    return close[0] if close else None


def _unknown_name(what: str, name: str, names: list[str], file: str | None, or_what: str) -> SpecError:
    close = close_match(name, names)
    hint = f"; did you mean '{close}'?" if close else ""
    return SpecError(f"{what} {shown(name)}{hint}", file=file,
                     expected=f"{or_what} one of: {', '.join(names) or '(none shipped)'}")


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except (OSError, ValueError):  # a name too long, a NUL byte: no such file
        return False


def _shipped(path: Path) -> bool:
    """Whether a shipped spec of that name is there. One that is there but no regular readable file (a
    FIFO, a device, a symlink loop, an unreadable folder) counts: reading it then says what it is."""
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return False
    except OSError:  # EACCES on the folder, a name too long: the reader names it
        return True
    return True


def resolve(arg: str | os.PathLike, kind: str, base: Path | None = None) -> Path:
    """A path as given (relative to `base` when given), or the shipped spec of that (plain) name."""
    path = Path(arg)
    if base is not None and not path.is_absolute():
        path = base / path
    if _exists(path) or path.suffix in (".yaml", ".yml") or os.sep in str(arg) or "/" in str(arg):
        return path
    shipped = config_dir() / KINDS[kind] / f"{arg}.yaml"
    if is_plain_name(str(arg)) and _shipped(shipped):
        return shipped
    if kind == "model" and path.suffix == ".json" and _shipped(config_dir() / "hf" / path.name):
        return config_dir() / "hf" / path.name  # a shipped Hugging Face config.json (configs/hf/)
    raise _unknown_name(f"no {kind} file or shipped {kind} named", str(arg), shipped_names(kind), str(arg),
                        "a path to a YAML file or")


_EXPECTED = {
    "int_type": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "bool_type": "true or false",
    "string_type": "a string",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "finite_number": "a finite number",
}


def describe(value: Any) -> str:
    """How a YAML value reads to a user: `the string '96'`, `a list`, `true`."""
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, str):
        return f"the string {shown(value)}"
    if isinstance(value, (int, float)):
        return f"{value!r}"[:40]
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    # the Python API's other values (numpy's np.True_ and np.int64(8) read "a mapping"; so did a YAML date)
    return f"a {type(value).__module__}.{type(value).__qualname__} ({clip(repr(value), 40)})"


def _expected(err: dict) -> str | None:
    if "_expected" in err:
        return err["_expected"]
    ctx = err.get("ctx") or {}
    kind = err["type"]
    if kind in _EXPECTED:
        return _EXPECTED[kind]
    for key, op in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
        if key in ctx and kind.startswith(("greater", "less")):
            return f"a value {op} {ctx[key]}"
    if kind == "literal_error":
        return f"one of {ctx.get('expected')}"
    if kind == "value_error" and isinstance(ctx.get("expected"), str):  # a validator's PydanticCustomError
        return ctx["expected"]
    if kind == "string_too_short":
        return "a non-empty string" if ctx.get("min_length") == 1 else f"a string of at least {ctx.get('min_length')} characters"
    if kind == "string_too_long":
        return f"a string of at most {ctx.get('max_length'):,} characters"
    return None


def _submodel(model: Any, loc: tuple) -> type[BaseModel] | None:
    """The (sub-)spec class at `loc`, or None where `loc` leaves the typed specs."""
    current = model
    for part in loc:
        if isinstance(part, int):  # an item of a list of specs (`jobs.0`): the item's class is the list's
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = current.model_fields.get(str(part))
        if field is None:
            return None
        ann = field.annotation
        args = getattr(ann, "__args__", ()) or (ann,)
        current = next((a for a in args if isinstance(a, type) and issubclass(a, BaseModel)), None)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _message(err: dict, loc: tuple) -> str:
    kind = err["type"]
    if kind == "missing":
        return f"missing required key '{loc[-1]}'" if loc else "a required key is missing"
    if kind in _EXPECTED and "input" in err:
        value = err["input"]
        if value is None:  # an empty value (`hidden:`) reads as null: present, so not a missing key
            return f"field '{loc[-1]}' is null" if loc and isinstance(loc[-1], str) else "null"
        msg = f"wrong type: got {describe(value)}"
        if isinstance(value, str) and kind in ("int_type", "float_type") and _is_number(value):
            msg += "; remove the quotes"
        if kind == "finite_number":
            msg = f"got {describe(value)}"
        return msg
    msg = err["msg"].removeprefix("Value error, ")
    if kind != "value_error" and "input" in err:
        msg += f", got {describe(err['input'])}"
    return msg


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _real_loc(loc: tuple, data: Any, kind: str) -> tuple:
    """`loc` without the member names pydantic adds for a union (`model.str`, `model.ModelSpec`)."""
    out, current = [], data
    for i, part in enumerate(loc):
        final = i == len(loc) - 1
        if isinstance(current, dict) and part in current:
            current = current[part]
        elif isinstance(current, list) and isinstance(part, int) and 0 <= part < len(current):
            current = current[part]
        elif final and isinstance(current, dict) and kind in ("missing", "extra_forbidden"):
            pass
        else:
            continue  # a union member's tag, not a key of the file
        out.append(part)
    return tuple(out)


def _merge_unions(errors: list[dict]) -> list[dict]:
    """One error per path: a value that fits no member of a union gets all members as expected."""
    merged: dict[tuple, dict] = {}
    for err in errors:
        seen = merged.get(err["loc"])
        if seen is None:
            merged[err["loc"]] = err
        elif seen["type"] in _EXPECTED and err["type"] in _EXPECTED:
            first, second = _expected(seen), _expected(err)
            if second not in first.split(" or "):
                seen["_expected"] = f"{first} or {second}"
    return list(merged.values())


def _to_spec_errors(exc: ValidationError, loaded: LoadedYaml, model: type[BaseModel], prefix: tuple) -> list[SpecError]:
    """The first MAX_ERRORS problems as `SpecError`s, then one that counts the others."""
    data = loaded.data
    for part in prefix:  # a key of a mapping or an index of a list (a runs file's runs.0.model)
        if isinstance(data, dict):
            data = data.get(part)
        else:
            data = data[part] if isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data) else None
    errors = _merge_unions([dict(err, loc=_real_loc(tuple(err["loc"]), data, err["type"]))
                            for err in exc.errors(include_url=False, include_context=True, include_input=True)])
    # A list whose items failed is counted after validation ("at least 1 item, not 0" for [foo]): its
    # items' errors say what is wrong, the count would say what is not.
    failed_items = {err["loc"][:-1] for err in errors if err["loc"] and isinstance(err["loc"][-1], int)}
    errors = [err for err in errors if not (err["type"] == "too_short" and err["loc"] in failed_items)]
    out = [_spec_error(err, loaded, model, prefix) for err in errors[:MAX_ERRORS]]
    if len(errors) > MAX_ERRORS:
        out.append(SpecError(f"and {len(errors) - MAX_ERRORS} more problems (the first {MAX_ERRORS} are shown)",
                             file=loaded.file, line=loaded.line_of(prefix + errors[MAX_ERRORS]["loc"])))
    return out


def _spec_error(err: dict, loaded: LoadedYaml, model: type[BaseModel], prefix: tuple) -> SpecError:
    loc = err["loc"]
    if err["type"] == "extra_forbidden":
        valid = list(getattr(_submodel(model, loc[:-1]), "model_fields", {}))
        close = close_match(loc[-1], valid)
        msg = f"unknown key {shown(loc[-1])}" + (f"; did you mean '{close}'?" if close else "")
        if str(loc[-1]) in MOVED_TO_STACK and "efficiency" in map(str, loc):
            msg = f"'{loc[-1]}' moved from the GPU preset to the software-stack profile (configs/stacks, training.stack)"
        return SpecError(msg, file=loaded.file, line=loaded.line_of(prefix + loc),
                         path=".".join(map(str, prefix + loc)), expected=f"one of: {', '.join(valid)}")
    if err["type"] == "value_error":  # a cross-field rule: point at the field it names first
        fields = getattr(_submodel(model, loc), "model_fields", {})
        first = err["msg"].removeprefix("Value error, ").split(" ")[0]
        if first in fields:
            loc += (first,)
    return SpecError(_message(err, loc), file=loaded.file, line=loaded.line_of(prefix + loc),
                     path=".".join(str(p) for p in prefix + loc) or None, expected=_expected(err))


def raise_all(errors: list[SpecError]) -> None:
    if errors:
        raise errors[0] if len(errors) == 1 else SpecErrors(errors)


def validate(model: type[T], data: Any, loaded: LoadedYaml, prefix: tuple = ()) -> T:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise_all(_to_spec_errors(exc, loaded, model, prefix))
        raise AssertionError("unreachable")  # pragma: no cover


# Keys that only a file of that kind has, in the order they are tried.
SIGNATURES = {"plan": {"model", "cluster", "layout"}, "cluster": {"nodes", "node", "pools"}, "model": {"layers", "hidden"},
              "gpu": {"peak_tflops", "hbm_gbps"}, "layout": {"layout", "dp", "tp", "pp"},
              "sweep": {"models", "scale_model", "batch_tokens"},
              "stack": {"tp_comm_overlap", "layer_overhead_us", "zero3_gather"}, "jobs": {"jobs"}, "runs": {"runs"},
              "profile": {"stack_constants"}}


def detect_kind(data: dict) -> str | None:
    """gpu, cluster, model, plan or layout: the `kind:` key, else the keys present."""
    if "kind" in data:
        return data["kind"] if isinstance(data["kind"], str) else None
    if is_hf_config(data):
        return "model"
    keys = set(data)
    if SIGNATURES["plan"] <= keys:
        return "plan"
    return next((kind for kind, sig in SIGNATURES.items() if kind != "plan" and keys & sig), None)


def strip_kind(data: dict, loaded: LoadedYaml, kind: str, prefix: tuple = ()) -> dict:
    """`data` without its `kind:` key, which must name `kind` when present."""
    if not isinstance(data, dict):
        return data
    if "kind" not in data:
        seems = detect_kind(data)
        if seems not in (None, kind) and not set(data) & SIGNATURES[kind]:
            raise SpecError(f"this looks like a {seems} file, but a {kind} spec is expected here", file=loaded.file,
                            line=loaded.line_of(prefix), path=".".join(map(str, prefix)) or None,
                            expected=f"a {kind} spec (or add `kind: {kind}` if it is one)")
        return data
    given = data["kind"]
    if given != kind:
        where = dict(file=loaded.file, line=loaded.line_of(prefix + ("kind",)), path=".".join(map(str, prefix + ("kind",))))
        if given in FILE_KINDS:
            raise SpecError(f"this is a {given} file, but a {kind} spec is expected here", **where,
                            expected=f"kind: {kind}")
        raise SpecError(f"unknown kind {given!r}", **where, expected=f"one of: {', '.join(FILE_KINDS)}")
    return {k: v for k, v in data.items() if k != "kind"}


def gpu_from_loaded(loaded: LoadedYaml, data: Any = None, prefix: tuple = ()) -> GpuSpec:
    data = loaded.data if data is None else data
    return validate(GpuSpec, strip_kind(data, loaded, "gpu", prefix), loaded, prefix)


def model_from_loaded(loaded: LoadedYaml, data: Any = None, prefix: tuple = ()) -> ModelSpec:
    data = loaded.data if data is None else data
    if is_hf_config(data):
        spec = hf_import(loaded, data, prefix)[1]
        return validate(ModelSpec, spec.data, spec)
    data = strip_kind(data, loaded, "model", prefix)
    training = data.get("training") if isinstance(data, dict) else None
    _no_own_runs(training.get("stack") if isinstance(training, dict) else None, loaded, prefix + ("training", "stack"))
    return validate(ModelSpec, data, loaded, prefix)


def _no_own_runs(stack: Any, loaded: LoadedYaml, where: tuple) -> None:
    """A stack mapping in a file may not state own_runs: --profile sets it from a profile's runs (StackSpec.own_runs),
    and a file's own would price bands from errors no run measured (its lists were refused as 'not a valid tuple')."""
    if isinstance(stack, dict) and stack.get("own_runs") is not None:  # null: a spec's dump (model_dump) states it
        raise SpecError("own_runs is set by --profile from a profile's runs, never in a spec file",
                        file=loaded.file, line=loaded.line_of(where + ("own_runs",)),
                        path=".".join(map(str, where + ("own_runs",))),
                        expected="no own_runs: calibrate on your runs (plan calibrate RUNS -o profile.yaml) and "
                        "predict with --profile profile.yaml")


def hf_import(loaded: LoadedYaml, config: dict, prefix: tuple = (), name: str | None = None,
              **training) -> tuple[Imported, LoadedYaml]:
    """A Hugging Face config (planner/specs/hf.py) as a model spec whose fields keep the lines of the
    config keys they came from; `training`: spec_from_hf's seq_len, global_batch, precision, overlay."""
    line = lambda path: loaded.line_of(prefix + tuple(path))  # noqa: E731
    try:
        imported = spec_from_hf(config, name=name or name_for(config, loaded.file), **training)
    except SpecError as exc:
        where = tuple(exc.path.split(".")) if exc.path else ()
        raise SpecError(exc.message, file=loaded.file, line=line(where), path=".".join(map(str, prefix + where)) or None,
                        expected=exc.expected) from None
    lines = {(): line(())} | {spec_path: line(hf_path) for spec_path, hf_path in imported.sources.items()}
    return imported, LoadedYaml(data=imported.spec, file=loaded.file,
                                lines={k: v for k, v in lines.items() if v is not None})


def load_spec_file(path: str | os.PathLike) -> LoadedYaml:
    """A YAML spec file, or a `.json` file (a Hugging Face config.json, or a spec written as JSON)."""
    if Path(path).suffix.lower() != ".json":
        return load_yaml_file(path)
    file = os.fsdecode(path)
    raw = read_bounded(path)  # a regular file of at most MAX_FILE_BYTES
    try:
        text = raw.removeprefix(b"\xef\xbb\xbf").decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(f"not valid UTF-8 at offset {exc.start}", file=file, expected="a UTF-8 JSON file") from None
    try:  # the bounds first, on C-parsed data: the line pass of parse_config takes 10 s for 100,000 values
        check_bounds(LoadedYaml(data=json.loads(text), file=file, lines={(): 1}))
    except (ValueError, RecursionError):  # malformed: parse_config says where
        pass
    loaded = parse_config(text, file)
    check_bounds(loaded)
    if not is_hf_config(loaded.data) and detect_kind(loaded.data) is None:
        raise SpecError("neither a Hugging Face config.json (no model_type or architectures key) nor a spec",
                        file=file, line=1, expected="a Hugging Face config.json or a model spec")
    return loaded


def check_bounds(loaded: LoadedYaml) -> None:
    """A JSON file gets the bounds the YAML reader applies (planner/specs/yamlio.py): values, nesting
    and keys of one mapping, so a `.json` input is no way around them."""
    seen, todo = 0, [(loaded.data, ())]
    while todo:
        value, path = todo.pop()
        seen += 1
        where = dict(file=loaded.file, line=loaded.line_of(path), path=".".join(map(str, path[:8])) or None)
        if seen > MAX_NODES:
            raise SpecError(f"document too large: more than {MAX_NODES} values", file=loaded.file,
                            expected="a small spec or config.json")
        if len(path) >= MAX_DEPTH:
            raise SpecError(f"nesting deeper than {MAX_DEPTH} levels", **where, expected="a spec's few levels")
        if isinstance(value, dict) and len(value) > MAX_KEYS:
            raise SpecError(f"a mapping with more than {MAX_KEYS} keys", **where,
                            expected="a spec's few keys (is this file a spec?)")
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        todo.extend((v, path + (k,)) for k, v in items)


def stack_from_loaded(loaded: LoadedYaml, data: Any = None, prefix: tuple = ()) -> StackSpec:
    data = strip_kind(loaded.data if data is None else data, loaded, "stack", prefix)
    _no_own_runs(data, loaded, prefix)
    return validate(StackSpec, data, loaded, prefix)


def cluster_from_loaded(loaded: LoadedYaml, data: Any = None, prefix: tuple = ()) -> ClusterSpec:
    """A cluster whose `gpu:` is a mapping or a shipped preset name; reports all problems at once."""
    data = strip_kind(loaded.data if data is None else data, loaded, "cluster", prefix)
    if not isinstance(data, dict):
        return validate(ClusterSpec, data, loaded, prefix)
    data, errors, failed = dict(data), [], set()

    def preset(holder: dict, loc: tuple) -> None:  # a GPU preset name becomes the preset's mapping
        if not isinstance(holder.get("gpu"), str):
            return
        try:
            holder["gpu"] = load_gpu_data(holder["gpu"])
        except SpecError as exc:
            if exc.file is not None:  # the preset file itself is broken
                raise
            errors.append(SpecError(exc.message, file=loaded.file, line=loaded.line_of(prefix + loc + ("gpu",)),
                                    path=".".join(map(str, prefix + loc + ("gpu",))), expected=exc.expected))
            failed.add(".".join(map(str, prefix + loc + ("gpu",))))
            holder.pop("gpu")

    preset(data, ())
    if isinstance(data.get("pools"), list):
        data["pools"] = [dict(p) if isinstance(p, dict) else p for p in data["pools"]]
        for i, pool in enumerate(data["pools"]):
            if isinstance(pool, dict):
                preset(pool, ("pools", i))
        if ".".join(map(str, prefix + ("pools", 0, "gpu"))) in failed and "gpu" not in data:
            failed.add(".".join(map(str, prefix + ("gpu",))))  # the cluster's gpu is the first pool's
    try:
        cluster = validate(ClusterSpec, data, loaded, prefix)
    except SpecErrors as exc:
        errors += [e for e in exc.errors if e.path not in failed]
    except SpecError as exc:
        errors += [exc] if exc.path not in failed else []
    raise_all(errors)
    return cluster


def load_gpu_data(name: str) -> dict:
    """A shipped GPU preset as a plain mapping (validated with the cluster it sits in). A preset is
    named, never a path: `gpu: ../models/x` must not read another file as a GPU."""
    if not is_plain_name(name):
        raise SpecError(f"GPU preset {shown(name)} is not a shipped preset name (a plain name of at most 128 "
                        "characters, not a path)",
                        expected=f"a mapping with the GPU's fields, or one of: {', '.join(shipped_names('gpu'))}")
    shipped = config_dir() / "gpus" / f"{name}.yaml"
    if not _shipped(shipped):
        raise _unknown_name("unknown GPU preset", name, shipped_names("gpu"), None, "a mapping or")
    loaded = load_yaml_file(shipped)
    gpu_from_loaded(loaded)  # a broken preset is reported against its own file
    return strip_kind(loaded.data, loaded, "gpu")


def load_gpu(arg: str | os.PathLike) -> GpuSpec:
    return gpu_from_loaded(load_yaml_file(resolve(arg, "gpu")))


def load_model(arg: str | os.PathLike) -> ModelSpec:
    """A model spec: a shipped name, a YAML file, or a Hugging Face config.json (default training fields)."""
    return model_from_loaded(load_spec_file(resolve(arg, "model")))


def load_stack(arg: str | os.PathLike) -> StackSpec:
    return stack_from_loaded(load_yaml_file(resolve(arg, "stack")))


def load_cluster(arg: str | os.PathLike) -> ClusterSpec:
    return cluster_from_loaded(load_yaml_file(resolve(arg, "cluster")))


def precision_line(arg: str | os.PathLike) -> tuple[str | None, int | None]:
    """(file, line of training.precision) of a model spec, for errors that need the cluster too."""
    try:
        loaded = load_spec_file(resolve(arg, "model"))
    except SpecError:
        return None, None
    return loaded.file, loaded.line_of(("training", "precision"))


def spec_part(loaded: LoadedYaml, where: tuple, kind: str, build) -> tuple[Any, LoadedYaml, tuple]:
    """(spec, the file it was read from, its path there) of the model or cluster at `where` in `loaded`:
    inline, a path relative to `loaded`'s file, or a shipped name. An unknown name or a missing file
    is said at `where` (file, line, field path)."""
    value = loaded.data
    for k in where:
        value = value[k]
    try:
        if isinstance(value, dict):
            return build(loaded, value, where), loaded, where
        path = resolve(value, kind, base=Path(loaded.file).parent)
        sub = load_spec_file(path)
        return build(sub), sub, ()
    except SpecError as exc:
        if exc.path is None and exc.line is None:  # unknown shipped name, missing file
            shown_file = "" if exc.file is None or exc.file in exc.message else f": {clip_file(exc.file)}"
            raise SpecError(exc.message + shown_file, file=loaded.file, line=loaded.line_of(where),
                            path=".".join(map(str, where)), expected=exc.expected) from None
        raise
