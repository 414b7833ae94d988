"""Running the points: serially or in a process pool, appending rows as they finish, resuming from the
output, and keeping the finished rows when stopped (Ctrl-C, SIGTERM, a worker killed)."""
from __future__ import annotations

import os
import signal
import time
import threading
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import closing, contextmanager, nullcontext
from dataclasses import dataclass
from itertools import chain, islice
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

from planner.errors import SpecError
from planner.sweep import rows as point_rows
from planner.sweep.lifetime import StopSignals, signals_blocked, stop_signals, worker_init
from planner.sweep.lock import output_lock
from planner.sweep.points import Point
from planner.sweep.store import _RowWriter, is_normal, other_version, output_format, read_rows, write_rows

IN_FLIGHT = 4  # points submitted per worker at a time
THREAD_CHECK_S = 1.0  # how often a pool's wait looks for a thread of the pool that died [s]
PARQUET_SAVE_S = 1.0  # a parquet output is rewritten (atomically) at most this often while a sweep runs [s]

# --- running -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class SweepRun:
    rows: list[dict]  # one per point, in the points' order (missing ones when interrupted)
    computed: int  # points run now
    skipped: int  # points whose rows were already in the output


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM: `signum`) during a sweep: the rows finished so far are written."""

    def __init__(self, run: SweepRun, total: int, signum: int = signal.SIGINT) -> None:
        super().__init__(f"{len(run.rows)} of {total} points done")
        self.run, self.total, self.signum = run, total, signum


def _context():
    """Workers forked from the sweep itself: their parent-death signal and watchdog then watch the
    sweep. Under forkserver (Python 3.14's default on Linux) they would watch the fork server, which
    outlives a killed sweep, and so would they."""
    import multiprocessing

    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else methods[0])


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """End the running points now (SIGTERM to each worker) rather than wait for them."""
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        if process.is_alive():
            process.terminate()


@dataclass(frozen=True)
class Executor:
    """Where the points run: `local` (this process, or a pool of `workers` processes) or `ray` (Ray
    tasks, on the cluster at `address`, or a local Ray instance of `workers` CPUs; planner/sweep/ray_executor.py)."""

    kind: str = "local"
    address: str | None = None


LOCAL = Executor()


def compute(points: Iterable[Point], workers: int = 1, guard: StopSignals | None = None,
            executor: Executor = LOCAL) -> Iterator[dict]:
    """Rows of `points` (read as they are needed) as they finish: in order when serial, in completion
    order in a pool or on Ray. `guard`: the sweep's signal handlers, re-armed before each serial point
    and checked after it."""
    if executor.kind == "ray":
        from planner.sweep.ray_executor import ray_compute

        yield from ray_compute(points, workers=workers, address=executor.address, guard=guard)
        return
    run_point = point_rows.run_point  # looked up when called, so a replaced `planner.sweep.rows.run_point` is run

    todo = iter(points)
    first = list(islice(todo, 2)) if workers > 1 else []
    if workers <= 1 or len(first) <= 1:
        for p in chain(first, todo):
            if guard is not None:
                guard.arm()
            row = run_point(p)
            if guard is not None:
                guard.check()  # a signal whose exception was lost on the way: the row is not trusted
            yield row
        return
    head = first + list(islice(todo, workers - 2))  # a pool no larger than the sweep
    pool = ProcessPoolExecutor(max_workers=len(head), initializer=worker_init, mp_context=_context())
    todo, running = chain(head, todo), set()
    try:
        with _pool_threads_watched() as died:
            yield from _pooled(pool, todo, running, workers, guard, died)
    except BaseException:  # Ctrl-C, SIGTERM, the consumer stopping early: drop the running points
        _stop_workers(pool)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


@contextmanager
def _pool_threads_watched() -> Iterator[list[BaseException]]:
    """The exceptions of threads that die while the pool runs. Under a memory limit the pool's own
    threads fail to start ("can't start new thread") and its futures never finish: the sweep hung."""
    died: list[BaseException] = []
    previous = threading.excepthook
    threading.excepthook = lambda args: died.append(args.exc_value)
    try:
        yield died
    finally:
        threading.excepthook = previous


def _pooled(pool: ProcessPoolExecutor, todo: Iterator[Point], running: set, workers: int,
            guard: StopSignals | None, died: list[BaseException]) -> Iterator[dict]:
    run_point = point_rows.run_point
    while True:
        # A few points per worker in flight: the first rows come after one search, not after
        # every point is pickled (96,000 of them took a minute).
        with signals_blocked():  # workers are forked on submit: every one recorded before a signal acts
            running.update(pool.submit(run_point, p) for p in islice(todo, IN_FLIGHT * workers - len(running)))
        if not running:
            return
        done, running = wait(running, timeout=THREAD_CHECK_S, return_when=FIRST_COMPLETED)
        if died:
            raise BrokenProcessPool(f"a thread of the worker pool died ({type(died[0]).__name__}: {died[0]}; "
                                    "out of memory?)")
        for future in done:
            if guard is not None:
                guard.check()
            yield future.result()


class _Output:
    """The rows of one run: those found in `out`, those computed now, and how they reach the file.
    A point's key is made when the point is reached (`todo`), not for every point before the first runs."""

    def __init__(self, points: Sequence[Point], out: Path | None, force: bool) -> None:
        self.out, self.fmt = out, output_format(out) if out is not None else None
        try:
            old = read_rows(out) if out is not None else []
        except SpecError:
            if not force:
                raise
            old, out_read = [], False
        else:
            out_read = out is not None
            versions = {row["planner_version"] for row in old}
            if versions - {point_rows.planner_version()}:
                if not force:
                    raise other_version(out, versions)
                old, out_read = [], False  # every row recomputed by this version, the others dropped
        self.have = {row["point_id"]: row for row in old}  # the last row of a key wins
        # no row dropped (cut short, mistyped, a key twice): appended to as it is
        self.normal = out_read and is_normal(out, len(self.have))
        self.done = {} if force else {k: r for k, r in self.have.items() if r["status"] != "error"}
        self.points, self.total = points, len(points)
        self.keys: list[str] = []  # of the points reached so far, in order
        self.skipped = 0
        self.new: dict[str, dict] = {}
        self.written: set[str] = set()  # keys of rows computed now that reached the file
        self.saved_at = time.monotonic()

    def todo(self) -> Iterator[Point]:
        """The points whose rows are not in the output yet, as they are reached."""
        for p in self.points:
            self.keys.append(p.key)
            if p.key in self.done:
                self.skipped += 1
                # rows written before `nodes` was the job's (it was the cluster's): the same column, one meaning
                self.done[p.key]["nodes"] = p.job_nodes
            else:
                yield p

    def reach_rest(self) -> None:
        """Keys of the points not reached yet, when their rows may be in the output (a resumed run
        stopped early): they are this sweep's rows, counted and kept in order."""
        if self.done and len(self.keys) < self.total:
            self.keys += [p.key for p in self.points[len(self.keys):]]

    def ordered(self) -> list[dict]:
        rows = {**self.done, **self.new}
        return [rows[k] for k in self.keys if k in rows]

    def save(self, rows: list[dict] | None = None) -> None:
        """Rewrite the output: the points' rows in order, the rows of other points after them."""
        if self.out is not None:
            wanted = set(self.keys)
            write_rows(self.out, rows if rows is not None else
                       self.ordered() + [r for k, r in self.have.items() if k not in wanted])
            self.saved_at = time.monotonic()
            if rows is None:
                self.written |= set(self.new)

    def add(self, row: dict, sink: _RowWriter) -> None:
        self.new[row["point_id"]] = row
        sink.write(row)  # CSV and JSONL: appended with its newline, flushed
        if self.fmt != "parquet":
            self.written.add(row["point_id"])
        # parquet cannot be appended to: the whole file is rewritten, at the first row, then at most every PARQUET_SAVE_S
        if self.fmt == "parquet" and (len(self.new) == 1 or time.monotonic() - self.saved_at >= PARQUET_SAVE_S):
            self.save()

    def result(self) -> SweepRun:
        return SweepRun(self.ordered(), len(self.new), self.skipped)

    def all_in_file(self) -> bool:
        """Whether every point's row is in the output already (found there, or appended now): nothing is
        left for a rerun to compute, whatever a rewrite of the file did."""
        if len(self.done) + len(self.written) < self.total:
            return False
        return all(p.key in self.done or p.key in self.written for p in self.points)


def _run(output: _Output, workers: int, guard: StopSignals, on_row: Callable[[dict], None] | None,
         executor: Executor = LOCAL) -> SweepRun:
    text = output.fmt in ("csv", "jsonl")
    try:
        if not output.normal:
            output.save(list(output.have.values()))  # normalise: drops rows cut short before appending
        with open(output.out if text else os.devnull, "a", newline="", encoding="utf-8") as handle:
            sink = _RowWriter(handle, output.fmt if text else "none", header=False)
            with closing(compute(output.todo(), workers, guard, executor)) as rows:
                for row in rows:
                    output.add(row, sink)
                    if on_row is not None:
                        on_row(row)
        output.save()
    except KeyboardInterrupt as exc:  # later signals are only recorded: this save runs to its end
        output.reach_rest()
        output.save()
        raise SweepInterrupted(output.result(), output.total, getattr(exc, "signum", signal.SIGINT)) from None
    except BaseException:  # e.g. a worker killed (out of memory): keep the finished rows, in order
        output.save()
        raise
    return output.result()


def run_sweep(points: Sequence[Point], *, out: Path | None = None, workers: int = 1, force: bool = False,
              on_row: Callable[[dict], None] | None = None, executor: Executor = LOCAL) -> SweepRun:
    """Run the points not already in `out` (all with `force`); append each row to `out` as it
    finishes, and finally rewrite `out` in the points' order (rows of other points kept after).
    While it runs, `out` is locked (another sweep on it is a `SpecError`) and SIGINT or SIGTERM
    raise `SweepInterrupted` once the finished rows are written."""
    output = None
    try:
        with output_lock(out) if out is not None else nullcontext(), stop_signals() as guard:
            output = _Output(points, out, force)
            return _run(output, workers, guard, on_row, executor)
    except BrokenPipeError:
        raise
    except OSError as exc:  # a full disk, `ulimit -f`: the rows written before are kept, the rerun resumes
        if out is None:
            raise
        if output is not None and output.all_in_file():  # a rerun would compute nothing and fail the same way
            raise SpecError(f"every point is computed and its row is in the file, but the file could not be "
                            f"rewritten in the points' order: {exc.strerror or exc}", file=os.fsdecode(out),
                            path="--out", expected="room on its disk for a copy of the file (or --out on another "
                            "disk); the disk, not the sweep, is what to fix") from None
        raise SpecError(f"cannot write the rows: {exc.strerror or exc}", file=os.fsdecode(out), path="--out",
                        expected="room on the disk; rerun to resume, the rows written are kept") from None
