"""`plan sweep`: the best layout over a grid of models, clusters, GPU counts and objectives.

Pure logic, no printing. A sweep file (or the equivalent flags) is validated into a `SweepSpec`,
expanded into `Point`s, and each point runs the same `planner.search.search` as `plan search`
(top_k=1). Every point becomes one flat row with the stable columns of `COLUMNS`; an infeasible
point is a row with its reason. Rows are appended to the output as they finish, so a rerun skips
the points already there (keyed by a hash of the point's inputs); Ctrl-C and SIGTERM keep them, a
row cut short is run again, one sweep at a time writes an output, and workers die with the parent.

Modules, one concern each: `spec` (the sweep file and the flags), `family` (scale_model, the batch
rule), `points` (the grid and its keys), `rows` (the columns, one point's row), `store` (output
files), `lock` (one writer per output), `lifetime` (signals, workers that die with the parent) and
`run` (serial and pool running, resume, stopping). The names below are the public API.
"""
from __future__ import annotations

from planner.sweep.family import SCALE_TOLERANCE, aspect_trend, batch_from_tokens, params_label, scale_model
from planner.sweep.points import KEY_VERSION, Point, Points, enlarged, expand, limits_of, sweep_models
from planner.sweep.lifetime import Stopped
from planner.sweep.lock import lock_path, output_lock
from planner.sweep.rows import COLUMN_NAMES, COLUMNS, STATUSES, infeasible_reason, is_complete, layout_columns, run_point
from planner.sweep.run import Executor, SweepInterrupted, SweepRun, compute, run_sweep
from planner.sweep.spec import (
    DEFAULT_CLUSTER,
    ConstraintsSpec,
    Objective,
    ScaleSpec,
    SweepSpec,
    flag_of,
    load_sweep,
    parse_gpus,
    parse_params,
    with_overrides,
)
from planner.sweep.store import FORMATS, output_format, read_rows, write_rows

__all__ = [
    "KEY_VERSION", "DEFAULT_CLUSTER", "SCALE_TOLERANCE", "Objective",
    "ScaleSpec", "ConstraintsSpec", "SweepSpec", "load_sweep", "with_overrides", "flag_of", "parse_params", "parse_gpus",
    "aspect_trend", "scale_model", "params_label", "batch_from_tokens",
    "Point", "Points", "enlarged", "limits_of", "sweep_models", "expand",
    "COLUMNS", "COLUMN_NAMES", "STATUSES", "is_complete", "layout_columns", "infeasible_reason", "run_point",
    "FORMATS", "output_format", "read_rows", "write_rows", "lock_path", "output_lock",
    "SweepRun", "SweepInterrupted", "Stopped", "compute", "run_sweep", "Executor",
]
