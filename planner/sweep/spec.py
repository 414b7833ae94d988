"""The sweep-file schema (`SweepSpec`), its loading, the parsing of GPU and parameter ranges, and
the flags of `plan sweep` on top of a file's keys."""
from __future__ import annotations

import math
import os
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator, model_validator

from planner.layout.axes import fixable
from planner.errors import SpecError
from planner.export.frameworks import FRAMEWORKS
from planner.options import axis_field, flag_of, option_field, options_for

DEFAULT_CLUSTER = "dgx-a100-1024"  # the same default as `plan search`
Objective = Literal["time", "energy", "cost", "carbon"]
Framework = Literal[FRAMEWORKS]  # type: ignore[valid-type]  # planner/export/frameworks.py
_STRICT = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)
MAX_SWEEP_GPUS = 10_000_000  # as plan search's --gpus (planner/options.py)
MAX_PARAM_COUNT = 1e16  # as parse_params's LO:HI bound
MAX_PARAM_TEXT = f"{MAX_PARAM_COUNT:.0e}".replace("e+", "e")  # 1e16, as a user writes it
# A list's items bounded as the string forms' are (parse_gpus, parse_params): `gpus: [-8]` was an error row
# (exit 1), `gpus: [1e20 as an int]` a ValueError row from divisors(), `params: [-1e9]` an internal error.
GpuCount = Annotated[int, Field(gt=0, le=MAX_SWEEP_GPUS)]
ParamCount = Annotated[float, Field(gt=0, lt=MAX_PARAM_COUNT)]


class ScaleSpec(BaseModel):
    """A generated family: `base` scaled to each parameter count (rule: `scale_model`)."""

    model_config = _STRICT
    base: str = Field(min_length=1, description="model spec to scale: a path or a shipped name")
    params: str | list[ParamCount] = Field(description="'LO:HI:N' (N log-spaced counts) or a list of parameter counts")


ConstraintsSpec = create_model(
    "ConstraintsSpec", __config__=_STRICT,
    __doc__="The constraints, search settings and fixed layout axes of `plan search`, under their file keys.",
    **{o.key: option_field(o, required_default=True) for o in options_for("sweep")},
    **{a.name: axis_field(a, optional=True) for a in fixable()})


class SweepSpec(BaseModel):
    """A sweep file (docs/sweeps.md, "The sweep file"); the flags of `plan sweep` override its keys."""

    model_config = _STRICT
    kind: Literal["sweep"] | None = Field(default=None, description="`kind: sweep` marks the file for `plan check`")
    name: str | None = Field(default=None, max_length=128)
    models: list[str] = Field(default=[], description="model specs: paths or shipped names")
    scale_model: ScaleSpec | None = None
    cluster: str | list[str] = DEFAULT_CLUSTER
    gpus: list[GpuCount] | str | None = Field(default=None, description="GPU counts, or 'LO:HI' for the powers of two")
    global_batch: int | None = Field(default=None, gt=0, le=100_000_000, description="sequences per step")
    batch_tokens: float | None = Field(default=None, gt=0, le=1e12, description="tokens per step (rule: batch_from_tokens)")
    tokens: float | None = Field(default=None, gt=0, le=1e16, description="token budget: time and energy to train")
    objective: Objective | list[Objective] = "time"
    framework: Framework | None = Field(default=None, description=(  # type: ignore[valid-type]
        "only layouts this framework runs, priced with its stack profile (as plan search --framework)"))
    constraints: ConstraintsSpec = ConstraintsSpec()  # type: ignore[valid-type]

    @field_validator("cluster", "objective", mode="before")
    @classmethod
    def _not_empty(cls, value):
        if isinstance(value, list) and not value:  # it would sweep nothing and look like success
            raise ValueError("an empty list")
        return value

    @model_validator(mode="after")
    def _one_batch_rule(self) -> "SweepSpec":
        if self.global_batch is not None and self.batch_tokens is not None:
            raise ValueError("global_batch and batch_tokens exclude each other: give one")
        return self


def parse_params(text: str, where: str = "--params") -> list[float]:
    """'LO:HI:N' -> N log-spaced counts from LO to HI; 'A,B,C' -> those counts."""
    expected = (f"LO:HI:N (N log-spaced counts, 1 <= N <= {MAX_PARAMS:,}, 0 < LO <= HI < {MAX_PARAM_TEXT}, e.g. "
                f"1e9:1e12:8) or a comma-separated list of counts in (0, {MAX_PARAM_TEXT})")
    try:
        if ":" in text:
            lo, hi, n = text.split(":")
            lo, hi, steps = float(lo), float(hi), int(n)
            if not (0 < lo <= hi < MAX_PARAM_COUNT and 1 <= steps <= MAX_PARAMS):
                raise ValueError
            values = [float(v) for v in np.geomspace(lo, hi, steps)]
        else:
            values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise SpecError(f"cannot read '{text}'", path=where, expected=expected) from None
    if not values or not all(0 < v < MAX_PARAM_COUNT for v in values):
        raise SpecError(f"cannot read '{text}'", path=where, expected=expected)
    return list(dict.fromkeys(values))  # 1e9:1e9:1000 is one count, not 1,000 identical points



def _count(text: str) -> bool:
    """ASCII digits of a count within MAX_SWEEP_GPUS ('²' is a digit to str.isdigit, not to int)."""
    return text.isascii() and text.isdigit() and len(text) <= 12 and int(text) <= MAX_SWEEP_GPUS


def parse_gpus(values: list[str] | str, where: str = "--gpus") -> list[int]:
    """'64,256,1024' (and repeats) -> those counts; 'LO:HI' -> the powers of two in [LO, HI]."""
    out: list[int] = []
    for text in [values] if isinstance(values, str) else values:
        for part in (p.strip() for p in str(text).split(",") if p.strip()):
            lo, sep, hi = part.partition(":")
            if not (_count(lo) and (not sep or _count(hi))) or int(lo) <= 0 or (sep and int(hi) < int(lo)):
                raise SpecError(f"cannot read '{part[:40]}'", path=where, expected=(
                    f"positive GPU counts up to {MAX_SWEEP_GPUS:,} like 64,256,1024 or LO:HI (powers of two), e.g. 8:16384"))
            out += [1 << k for k in range(0, 40) if int(lo) <= 1 << k <= int(hi)] if sep else [int(lo)]
    if not out:
        raise SpecError("no GPU count", path=where, expected="e.g. 64,256,1024 or 8:16384")
    return list(dict.fromkeys(out))


MAX_POINTS = 100_000  # points of one sweep, checked before any is made (a 266 KB file held 160 million)
MAX_PARAMS = 1000  # parameter counts of a generated family


def _grid(spec: SweepSpec) -> dict[str, int]:
    """Sizes of the grid's axes by the keys that set them, from the spec alone (nothing loaded)."""
    counts = spec.scale_model.params if spec.scale_model is not None else []
    counts = parse_params(counts, "scale_model.params") if isinstance(counts, str) else counts
    if len(counts) > MAX_PARAMS:  # each is a model to generate (~25 ms)
        raise SpecError(f"{len(counts):,} parameter counts", path="scale_model.params",
                        expected=f"at most {MAX_PARAMS:,}, as LO:HI:N allows")
    gpus = spec.gpus if not isinstance(spec.gpus, str) else parse_gpus(spec.gpus, "gpus")
    names = [spec.cluster] if isinstance(spec.cluster, str) else spec.cluster
    objectives = [spec.objective] if isinstance(spec.objective, str) else spec.objective
    return {"models/scale_model.params": len(dict.fromkeys(spec.models)) + len(dict.fromkeys(counts)),
            "cluster": len(dict.fromkeys(names)), "gpus": len(dict.fromkeys(gpus or [None])),
            "objective": len(dict.fromkeys(objectives))}


def check_size(spec: SweepSpec) -> int:
    """The number of points of `spec`; more than MAX_POINTS is bad input naming the keys."""
    grid = _grid(spec)
    total = math.prod(grid.values())
    if total > MAX_POINTS:
        sizes = " x ".join(f"{n:,} ({key})" for key, n in grid.items())
        raise SpecError(f"{total:,} points: {sizes}", path=", ".join(k for k, n in grid.items() if n > 1),
                        expected=f"at most {MAX_POINTS:,} points: fewer values, or several sweeps")
    return total


def _largest_axis_line(spec: SweepSpec, loaded) -> int:
    try:
        axes = sorted(_grid(spec).items(), key=lambda kv: -kv[1])
    except SpecError:  # too many parameter counts
        axes = [("models/scale_model.params", 0)]
    scaled = "scale_model" in loaded.data
    keys = [("scale_model", "params") if k.startswith("models") and scaled else (k.split("/")[0],) for k, _ in axes]
    return next((loaded.line_of(k) for k in keys if k[0] in loaded.data), 1)


def load_sweep(path: str | os.PathLike, overrides: dict | None = None) -> SweepSpec:
    """The sweep file, validated with file locations, then with the flags' `overrides` on top."""
    from planner.specs.loading import validate
    from planner.specs.yamlio import load_yaml_file

    loaded = load_yaml_file(path)
    spec = with_overrides(validate(SweepSpec, loaded.data, loaded), overrides or {})
    try:
        check_size(spec)
    except SpecError as exc:  # at the line of the file's largest axis (a flag may have set it: then line 1)
        raise SpecError(exc.message, file=loaded.file, line=_largest_axis_line(spec, loaded), path=exc.path,
                        expected=exc.expected) from None
    return spec


def with_overrides(spec: SweepSpec, overrides: dict) -> SweepSpec:
    """`spec` with flag values on top; a bad value names its flag (`--global-batch`)."""
    data = spec.model_dump(exclude_unset=True)
    constraints = {**data.pop("constraints", {}), **overrides.get("constraints", {})}
    scale = {**data.pop("scale_model", {}), **overrides.get("scale_model", {})}
    data.update({k: v for k, v in overrides.items() if k not in ("constraints", "scale_model")})
    if overrides.get("global_batch") is not None:
        data.pop("batch_tokens", None)
    if overrides.get("batch_tokens") is not None:
        data.pop("global_batch", None)
    if scale:
        if "base" not in scale or "params" not in scale:
            raise SpecError("a generated family needs a base model and parameter counts", path="--scale-model/--params",
                            expected="--scale-model BASE --params LO:HI:N")
        data["scale_model"] = scale
    try:
        return SweepSpec.model_validate({**data, "constraints": constraints})
    except ValidationError as exc:
        e = exc.errors()[0]
        key = next((str(p) for p in e["loc"] if p != "constraints"), "sweep")
        raise SpecError(e["msg"].removeprefix("Value error, "), path=flag_of(key)) from None


