"""Load GPU, cluster and model specs from YAML files or shipped names, strictly.

Every problem becomes a `SpecError` naming the file, the line, the field path and what was
expected; unknown keys get the nearest valid key suggested.
"""
from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from .errors import SpecError, SpecErrors
from .specs import ClusterSpec, GpuSpec, ModelSpec
from .yamlio import LoadedYaml, load_yaml_file

T = TypeVar("T", bound=BaseModel)

KINDS = {"gpu": "gpus", "cluster": "clusters", "model": "models"}


def config_dir() -> Path:
    """Shipped specs: $PLANNER_CONFIG_DIR, else `configs/` beside the package (editable install)."""
    env = os.environ.get("PLANNER_CONFIG_DIR")
    return Path(env) if env else Path(__file__).resolve().parent.parent / "configs"


def shipped_names(kind: str) -> list[str]:
    folder = config_dir() / KINDS[kind]
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []


def resolve(arg: str | os.PathLike, kind: str) -> Path:
    """A path as given, or the shipped spec of that name."""
    path = Path(arg)
    if path.exists() or path.suffix in (".yaml", ".yml") or os.sep in str(arg):
        return path
    shipped = config_dir() / KINDS[kind] / f"{arg}.yaml"
    if shipped.is_file():
        return shipped
    names = shipped_names(kind)
    close = difflib.get_close_matches(str(arg), names, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    raise SpecError(
        f"no {kind} file or shipped {kind} named '{arg}'{hint}",
        file=str(arg),
        expected=f"a path to a YAML file or one of: {', '.join(names) or '(none shipped)'}",
    )


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
    "missing": "this required field",
}


def _expected(err: dict) -> str | None:
    ctx = err.get("ctx") or {}
    kind = err["type"]
    if kind in _EXPECTED:
        return _EXPECTED[kind]
    for key, op in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
        if key in ctx and kind.startswith(("greater", "less")):
            return f"a value {op} {ctx[key]}"
    if kind == "literal_error":
        return f"one of {ctx.get('expected')}"
    if kind in ("string_too_short", "string_too_long"):
        return "a non-empty string of at most 128 characters"
    return None


def _fields_at(model: type[BaseModel], loc: tuple) -> list[str]:
    """Valid keys of the (sub-)spec at `loc`, for suggesting a near miss."""
    current: Any = model
    for part in loc:
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return []
        field = current.model_fields.get(str(part))
        if field is None:
            return []
        ann = field.annotation
        args = getattr(ann, "__args__", ()) or (ann,)
        current = next((a for a in args if isinstance(a, type) and issubclass(a, BaseModel)), None)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return list(current.model_fields)
    return []


def _to_spec_errors(exc: ValidationError, loaded: LoadedYaml, model: type[BaseModel], prefix: tuple) -> list[SpecError]:
    out = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        path = ".".join(str(p) for p in prefix + loc) or None
        line = loaded.line_of(prefix + loc)
        if err["type"] == "extra_forbidden":
            valid = _fields_at(model, loc[:-1])
            close = difflib.get_close_matches(str(loc[-1]), valid, n=1)
            msg = f"unknown key '{loc[-1]}'" + (f"; did you mean '{close[0]}'?" if close else "")
            out.append(SpecError(msg, file=loaded.file, line=line, path=path, expected=f"one of: {', '.join(valid)}"))
            continue
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] not in ("missing", "value_error") and "input" in err:
            msg += f", got {err['input']!r}"[:120]
        out.append(SpecError(msg, file=loaded.file, line=line, path=path, expected=_expected(err)))
    return out


def validate(model: type[T], data: Any, loaded: LoadedYaml, prefix: tuple = ()) -> T:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = _to_spec_errors(exc, loaded, model, prefix)
        raise (errors[0] if len(errors) == 1 else SpecErrors(errors)) from None


def load_gpu(arg: str | os.PathLike) -> GpuSpec:
    loaded = load_yaml_file(resolve(arg, "gpu"))
    return validate(GpuSpec, loaded.data, loaded)


def load_model(arg: str | os.PathLike) -> ModelSpec:
    loaded = load_yaml_file(resolve(arg, "model"))
    return validate(ModelSpec, loaded.data, loaded)


def cluster_from_loaded(loaded: LoadedYaml) -> ClusterSpec:
    data = dict(loaded.data)
    gpu = data.get("gpu")
    if isinstance(gpu, str):
        try:
            data["gpu"] = load_gpu_data(gpu)
        except SpecError as exc:
            raise SpecError(
                exc.message, file=loaded.file, line=loaded.line_of(("gpu",)), path="gpu", expected=exc.expected
            ) from None
    return validate(ClusterSpec, data, loaded)


def load_gpu_data(name: str) -> dict:
    """A shipped GPU preset as a plain mapping (validated with the cluster it sits in)."""
    shipped = config_dir() / "gpus" / f"{name}.yaml"
    if not shipped.is_file():
        names = shipped_names("gpu")
        close = difflib.get_close_matches(name, names, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise SpecError(f"unknown GPU preset '{name}'{hint}", expected=f"one of: {', '.join(names)}, or a mapping")
    loaded = load_yaml_file(shipped)
    validate(GpuSpec, loaded.data, loaded)  # a broken preset is reported against its own file
    return loaded.data


def load_cluster(arg: str | os.PathLike) -> ClusterSpec:
    return cluster_from_loaded(load_yaml_file(resolve(arg, "cluster")))
