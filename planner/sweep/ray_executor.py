"""Sweep points as Ray tasks (`plan sweep --executor ray [--ray-address ADDR]`): for sweeps that
outgrow one machine, on the Ray cluster a team already runs (KubeRay, Anyscale, `ray start`).

Points go out in batches of BATCH (one search is 0.05-0.7 s; a task costs a few ms of scheduling),
at most IN_FLIGHT batches per CPU of the cluster at a time, and their rows come back in the order
the batches finish, into the same resumable, locked output as the local pool's (planner/sweep/run.py):
a row is written once, when its batch's result arrives. A task whose worker dies is run again by Ray
(MAX_RETRIES); Ctrl-C cancels the outstanding tasks and keeps every finished row. Without an address
a local Ray instance of `workers` CPUs is started for the sweep and stopped after it.
"""
from __future__ import annotations

import os
import socket
from itertools import islice
from typing import Callable, Iterable, Iterator
from urllib.parse import urlparse

from planner.errors import SpecError

BATCH = 8  # points a task
IN_FLIGHT = 2  # batches a CPU at a time: the next is queued while one runs
MAX_RETRIES = 3  # runs of a task whose worker died (Ray's retry of system failures)
CONNECT_TIMEOUT_S = 10.0  # an address that does not answer: exit 2 within this (the issue: 30 s)
WAIT_S = 1.0  # how often the wait returns to check for a signal [s]
INSTALL = "pip install 'llm-layout-planner[ray]' (or pip install ray)"


def _ray():
    try:
        import ray
    except ImportError as exc:
        raise SpecError(f"Ray is not installed ({exc})", path="--executor", expected=f"ray installed: {INSTALL}") from None
    return ray


def check_address(address: str) -> None:
    """An address that does not take a TCP connection within CONNECT_TIMEOUT_S is bad input, named:
    ray.init would otherwise wait on it for minutes. `auto` (RAY_ADDRESS or a local `ray start`)
    is left to Ray."""
    if address == "auto":
        return
    parsed = urlparse(address if "://" in address else f"ray://{address}")
    try:
        host, port = parsed.hostname, parsed.port
    except ValueError:
        host, port = None, None
    if not host or not port:
        raise SpecError(f"cannot read the Ray address '{address[:80]}'", path="--ray-address",
                        expected="HOST:PORT (a GCS address, e.g. 10.0.0.1:6379), ray://HOST:PORT (Ray Client) or auto")
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        raise SpecError(f"the Ray cluster at {address[:80]} does not answer ({exc.strerror or exc})", path="--ray-address",
                        expected=f"a running Ray cluster's address (tried for {CONNECT_TIMEOUT_S:g} s)") from None


def _init(ray, address: str | None, workers: int) -> None:
    """ray.init; a Ray that cannot start or connect (on a loaded machine: "The current node timed out
    during startup", a plain Exception) is the environment's failure, said in one line (exit 2)."""
    try:
        ray.init(address=address, num_cpus=None if address else workers, include_dashboard=False,
                 log_to_driver=False, ignore_reinit_error=True, configure_logging=False)
    except Exception as exc:  # noqa: BLE001 - Ray raises Exception, ConnectionError, RuntimeError, ...
        try:
            ray.shutdown()  # whatever part of the local instance did start
        except Exception:  # noqa: BLE001
            pass
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        where = f"the Ray cluster at {address[:80]}" if address else "a local Ray instance"
        raise SpecError(f"cannot start or reach {where} ({first[:200]})", path="--ray-address" if address else "--executor",
                        expected="a Ray that starts here (rerun: a loaded machine can time out), or --executor local") from None


def _rows_of(batch: list, run: Callable | None) -> list[dict]:
    """A task: the rows of a batch of points (run on a Ray worker)."""
    from planner.sweep import rows

    return [(run or rows.run_point)(p) for p in batch]


def _result(ray, ref) -> list[dict]:
    """A batch's rows; a task that failed MAX_RETRIES + 1 times (its worker killed each time, the cluster
    lost) is a failing environment, said in one line (exit 2), the rows before it kept."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SpecError(f"a Ray task failed {MAX_RETRIES + 1} times ({first[:200]})", path="--executor",
                        expected="a Ray cluster whose workers stay up; rerun to resume, the rows written are kept") from None


def ray_compute(points: Iterable, *, workers: int, address: str | None = None, guard=None,
                run: Callable | None = None) -> Iterator[dict]:
    """Rows of `points` as Ray tasks finish (`run`: the point's function, planner.sweep.rows.run_point
    unless a test gives its own)."""
    ray = _ray()
    if address is not None:
        check_address(address)
    started = not ray.is_initialized()
    if started:
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a local instance for this sweep alone
        _init(ray, address, workers)
    task = ray.remote(max_retries=MAX_RETRIES)(_rows_of)
    cpus = max(1, int(ray.cluster_resources().get("CPU", workers)))
    todo, running = iter(points), []
    try:
        while True:
            while len(running) < IN_FLIGHT * cpus:
                batch = list(islice(todo, BATCH))
                if not batch:
                    break
                running.append(task.remote(batch, run))
            if not running:
                return
            done, running = ray.wait(running, num_returns=1, timeout=WAIT_S)
            for ref in done:
                if guard is not None:
                    guard.check()
                yield from _result(ray, ref)
    except BaseException:  # Ctrl-C, SIGTERM, the consumer stopping: the outstanding tasks are dropped
        for ref in running:
            try:
                ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001  (finished meanwhile, or the cluster gone: nothing to cancel)
                pass
        raise
    finally:
        if started:
            ray.shutdown()
