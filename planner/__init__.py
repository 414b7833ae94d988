"""planner: plan the parallel layout of a large-model training run, as a library (docs/api.md) and
as the `plan` command.

    import planner
    result = planner.search("llama3-70b", "dgx-h100-1024", gpus=64, top=3)
    result.best.step_time_s, result.to_dict()   # to_dict(): what `plan search --json` prints

`import planner` loads none of the CLI, plotting or solver libraries: every name of `__all__` is
imported on first use (PEP 562). Seven of them, `search`, `estimate`, `sweep`, `check`, `export`,
`allocate` and `replan`, are also the names of the planner's own modules (planner/search.py, ...); those modules are made
callable, so `planner.search(...)` is the API function while `planner.search.SearchResult` and
`from planner.search import ...` keep reaching the module.

The distribution is `llm-layout-planner` (the name "planner" on PyPI is another project's)."""
from __future__ import annotations

import sys
from types import ModuleType

DISTRIBUTION = "llm-layout-planner"

# The public surface. A test (tests/test_api.py) fails when it changes and CHANGELOG.md does not name it.
__all__ = [
    # functions (planner/api/)
    "search", "estimate", "sweep", "check", "export", "calibrate", "import_runs", "allocate", "replan", "validate", "list_specs", "import_hf", "schema",
    "load_model", "load_cluster", "load_gpu", "load_profile", "version",
    # results (planner/api/results.py, planner/results.py)
    "Search", "PoolsSearch", "GpuCounts", "Estimate", "ScoredLayout", "CheckReport", "Finding", "Calibration",
    "MeasuredRun", "Export", "Allocated", "Replanned", "ImportedModel",
    # errors (planner/errors.py)
    "PlannerError", "SpecError", "SpecErrors", "InfeasibleError",
    "DISTRIBUTION",
]

_CALLABLE_MODULES = ("search", "estimate", "sweep", "check", "export", "allocate", "replan")  # modules that are also API functions
_HOMES = {
    **{name: "planner.api" for name in ("calibrate", "import_runs", "validate", "list_specs", "import_hf", "schema", "load_model", "load_cluster", "load_gpu", "load_profile")},
    **{name: "planner.api.results" for name in ("Search", "PoolsSearch", "GpuCounts", "Estimate", "Calibration")},
    "CheckReport": "planner.api.checking",
    "ScoredLayout": "planner.results", "Finding": "planner.check", "MeasuredRun": "planner.fidelity.runs",
    "Export": "planner.export.common",
    **{name: "planner.api.operation_results" for name in ("Allocated", "Replanned")},
    "ImportedModel": "planner.api.hf",
    **{name: "planner.errors" for name in ("PlannerError", "SpecError", "SpecErrors", "InfeasibleError")},
}


def version() -> str:
    """The installed distribution's version (the source tree's pyproject when not installed)."""
    from importlib.metadata import PackageNotFoundError, version as installed

    try:
        return installed(DISTRIBUTION)
    except PackageNotFoundError:
        return "unknown (not installed)"


class _CallableModule(ModuleType):
    """A planner module whose name is also an API function: calling the module calls the function."""

    def __call__(self, *args, **kwargs):
        return getattr(_api(), self.__name__.rpartition(".")[2])(*args, **kwargs)

    @property
    def __signature__(self):  # inspect.signature(planner.search) and help tools: the function's
        import inspect

        return inspect.signature(getattr(_api(), self.__name__.rpartition(".")[2]))


def _api() -> ModuleType:
    import importlib

    return importlib.import_module("planner.api")  # on first call: `import planner` stays cheap


class _Package(ModuleType):
    """The `planner` package: a submodule bound under an API function's name is made callable."""

    def __setattr__(self, name: str, value) -> None:
        if name in _CALLABLE_MODULES and type(value) is ModuleType:
            value.__class__ = _CallableModule
        super().__setattr__(name, value)


def __getattr__(name: str):
    import importlib

    if name in _CALLABLE_MODULES:
        return importlib.import_module(f"{__name__}.{name}")  # bound (and made callable) by the import
    if name in _HOMES:
        value = getattr(importlib.import_module(_HOMES[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


sys.modules[__name__].__class__ = _Package
for _name in _CALLABLE_MODULES:  # imported before this ran (never, unless reloaded): made callable too
    if type(sys.modules.get(f"{__name__}.{_name}")) is ModuleType:
        setattr(sys.modules[__name__], _name, sys.modules[f"{__name__}.{_name}"])
