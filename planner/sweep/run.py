"""Running the points: serially or in a process pool, appending rows as they finish, resuming from the
output, and keeping the finished rows on Ctrl-C."""
from __future__ import annotations

import os
import signal
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from ..errors import SpecError
from . import rows as point_rows
from .points import Point
from .store import _RowWriter, output_format, read_rows, write_rows

# --- running -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class SweepRun:
    rows: list[dict]  # one per point, in the points' order (missing ones when interrupted)
    computed: int  # points run now
    skipped: int  # points whose rows were already in the output


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C during a sweep: the rows finished so far are written."""

    def __init__(self, run: SweepRun, total: int) -> None:
        super().__init__(f"{len(run.rows)} of {total} points done")
        self.run, self.total = run, total


def _worker_init() -> None:
    """Ctrl-C is the parent's to handle: a worker leaves the terminal's process group, so the
    SIGINT the terminal sends to that group does not reach it (CP-SAT installs its own SIGINT
    handler during a solve, so ignoring the signal is not enough), and ignores SIGINT anyway."""
    if hasattr(os, "setpgrp"):
        os.setpgrp()
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def compute(points: list[Point], workers: int = 1) -> Iterator[dict]:
    """Rows of `points` as they finish: in order when serial, in completion order in a pool."""
    run_point = point_rows.run_point  # looked up when called, so a replaced `planner.sweep.rows.run_point` is run

    if workers <= 1 or len(points) <= 1:
        for p in points:
            yield run_point(p)
        return
    pool = ProcessPoolExecutor(max_workers=min(workers, len(points)), initializer=_worker_init)
    try:
        futures = [pool.submit(run_point, p) for p in points]
        for future in as_completed(futures):
            yield future.result()
    finally:  # also on Ctrl-C and when the consumer stops early: drop the queued points
        pool.shutdown(wait=True, cancel_futures=True)


def run_sweep(points: list[Point], *, out: Path | None = None, workers: int = 1, force: bool = False,
              on_row: Callable[[dict], None] | None = None) -> SweepRun:
    """Run the points not already in `out` (all with `force`); append each row to `out` as it
    finishes, and finally rewrite `out` in the points' order (rows of other points kept after)."""
    fmt = output_format(out) if out is not None else None
    try:
        old = read_rows(out) if out is not None else []
    except SpecError:
        if not force:
            raise
        old = []
    have = {row["point_id"]: row for row in old}  # the last row of a key wins
    done = {} if force else {k: r for k, r in have.items() if r["status"] != "error"}
    todo = [p for p in points if p.key not in done]
    keys = [p.key for p in points]
    new: dict[str, dict] = {}

    def finish() -> SweepRun:
        rows = {**done, **new}
        ordered = [rows[k] for k in keys if k in rows]
        if out is not None:
            wanted = set(keys)
            write_rows(out, ordered + [r for k, r in have.items() if k not in wanted])
        return SweepRun(ordered, len(new), len(points) - len(todo))

    if out is not None:
        write_rows(out, list(have.values()))  # normalise: drops a half-written last line before appending
    try:
        with open(out if fmt in ("csv", "jsonl") else os.devnull, "a", newline="", encoding="utf-8") as handle:
            sink = _RowWriter(handle, fmt or "none", header=False)
            with closing(compute(todo, workers)) as rows:
                for row in rows:
                    new[row["point_id"]] = row
                    sink.write(row)
                    if on_row is not None:
                        on_row(row)
    except KeyboardInterrupt:
        raise SweepInterrupted(finish(), len(points)) from None
    except BaseException:  # e.g. a worker killed (out of memory): keep the finished rows, in order
        finish()
        raise
    return finish()
