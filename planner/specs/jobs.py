"""The jobs file of `plan allocate`: its spec and its loading (each job's model, its token budget applied).

Kept apart from planner/allocate.py so that `plan schema jobs` and `plan check` of a jobs file do not
import the search and OR-Tools (planner/allocate.py re-exports these names).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from planner.errors import SpecError
from planner.specs.base import Spec
from planner.specs.loading import load_spec_file, model_from_loaded, resolve, strip_kind, validate
from planner.specs.model import ModelSpec
from planner.specs.yamlio import LoadedYaml, load_yaml_file


class JobSpec(Spec):
    """One training job of a jobs file."""

    name: str = Field(min_length=1, max_length=128)
    model: str = Field(min_length=1, max_length=4096, description="a shipped model name or a path relative to the jobs file")
    weight: float = Field(default=1.0, gt=0, le=1e6, description="weight of this job's useful work (throughput objective)")
    min_gpus: int = Field(gt=0, le=10_000_000)
    max_gpus: int = Field(gt=0, le=10_000_000)
    tokens: float | None = Field(default=None, gt=0, le=1e16, description="token budget (default: the model's training.tokens)")
    deadline_days: float | None = Field(default=None, gt=0, le=1e5, description="time to train the tokens must not exceed this [days]")

    @model_validator(mode="after")
    def _range(self) -> "JobSpec":
        if self.min_gpus > self.max_gpus:
            raise ValueError(f"min_gpus ({self.min_gpus}) must be at most max_gpus ({self.max_gpus})")
        return self


class JobsSpec(Spec):
    """A jobs file: the jobs to place on one cluster and an optional power budget."""

    kind: Literal["jobs"] | None = Field(default=None, description="`kind: jobs` marks the file for `plan check`")
    jobs: list[JobSpec] = Field(min_length=1, max_length=64)
    power_budget_kw: float | None = Field(default=None, gt=0, le=1e7, description="sum of the jobs' average power [kW]")

    @model_validator(mode="after")
    def _unique_names(self) -> "JobsSpec":
        names = [j.name for j in self.jobs]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"jobs must have distinct names; repeated: {', '.join(twice)}")
        return self


@dataclass(frozen=True)
class Jobs:
    """A loaded jobs file: the spec, each job's model (its token budget applied), where things are."""

    spec: JobsSpec
    models: tuple[ModelSpec, ...]
    loaded: LoadedYaml  # the file's name and the line of each key, for messages

    @property
    def file(self) -> str:
        return self.loaded.file

    def line_of(self, *path) -> int | None:
        return self.loaded.line_of(path)


def with_tokens(model: ModelSpec, tokens: float | None) -> ModelSpec:
    if tokens is None:
        return model
    return model.model_copy(update={"training": model.training.model_copy(update={"tokens": tokens})})


def _job_model(loaded: LoadedYaml, i: int, job: JobSpec) -> ModelSpec:
    """Job i's model: a path beside the jobs file or a shipped name; a bad name points at the job."""
    try:
        model = model_from_loaded(load_spec_file(resolve(job.model, "model", base=Path(loaded.file).parent)))
    except SpecError as exc:
        if exc.path is not None or exc.line is not None:  # the model file itself is broken
            raise
        message = exc.message if exc.file is None or exc.file in exc.message else f"{exc.message}: {exc.file}"
        raise SpecError(message, file=loaded.file, line=loaded.line_of(("jobs", i, "model")),
                        path=f"jobs.{i}.model", expected=exc.expected) from None
    return with_tokens(model, job.tokens)


def jobs_from_loaded(loaded: LoadedYaml) -> Jobs:
    spec = validate(JobsSpec, strip_kind(loaded.data, loaded, "jobs"), loaded)
    models = tuple(_job_model(loaded, i, job) for i, job in enumerate(spec.jobs))
    jobs = Jobs(spec, models, loaded)
    for i, (job, model) in enumerate(zip(spec.jobs, models)):
        if job.deadline_days is not None and model.training.tokens is None:
            raise SpecError(f"job '{job.name}' has a deadline but no token budget", file=jobs.file,
                            line=jobs.line_of("jobs", i, "deadline_days"), path=f"jobs.{i}.tokens",
                            expected="tokens: the tokens to train, e.g. 1.0e12")
    return jobs


def load_jobs(path: str | os.PathLike) -> Jobs:
    return jobs_from_loaded(load_yaml_file(path))
