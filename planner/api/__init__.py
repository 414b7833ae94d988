"""The planner as a library: what `plan` does, as functions that return typed results.

`import planner` stays cheap: these are imported on first use (planner/__init__.py). The reference,
with examples that tests run, is docs/api.md."""
from __future__ import annotations

from planner.api.catalog import list_specs, validate
from planner.api.hf import import_hf, schema
from planner.api.inputs import load_cluster, load_gpu, load_model, load_profile
from planner.api.operations import allocate, replan
from planner.api.plan import estimate, search
from planner.api.sweep import sweep
from planner.api.tools import calibrate, check, export, import_runs

__all__ = ["search", "estimate", "sweep", "check", "export", "calibrate", "import_runs", "allocate", "replan", "validate",
           "list_specs", "import_hf", "schema", "load_model", "load_cluster", "load_gpu", "load_profile"]
