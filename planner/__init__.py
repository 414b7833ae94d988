"""planner: plan the parallel layout of a large-model training run (the `plan` command).

The distribution is `llm-layout-planner` (the name "planner" on PyPI is another project's)."""
from __future__ import annotations

DISTRIBUTION = "llm-layout-planner"


def version() -> str:
    """The installed distribution's version (the source tree's pyproject when not installed)."""
    from importlib.metadata import PackageNotFoundError, version as installed

    try:
        return installed(DISTRIBUTION)
    except PackageNotFoundError:
        return "unknown (not installed)"
