"""The refinement pass (planner/refine.py) solves its stage splits in threads: the answers must be
those of the plain loop, in row order, and a solve's exception must reach the caller."""
from __future__ import annotations

import dataclasses
import threading
import time

import numpy as np
import pytest

from planner import refine
from planner.errors import SpecError
from planner.specs.loading import load_cluster, load_model
from planner.search import search
from planner.cpsat.stage_split import solve

# Shipped cases whose refinement changes splits (feasible rows made faster, memory-failing rows made
# to fit) and, for Llama 4 Maverick, stops one solve at its deterministic limit (FEASIBLE): the
# answer most likely to change if threads made a solve depend on the others.
CASES = [("llama3-8b", "dgx-a100-40gb-64", None), ("qwen3-30b-a3b", "dgx-h100-1024", 64),
         ("llama4-maverick", "dgx-h100-1024", None)]


def _search(monkeypatch, case, workers: int):
    """The search of `case` with `workers` split solves at once, and the threads the solves ran in."""
    threads = []

    def traced(*args, **kwargs):
        threads.append(threading.current_thread().name)
        return solve(*args, **kwargs)

    monkeypatch.setattr(refine, "solve", traced)
    monkeypatch.setattr(refine, "split_workers", lambda: workers)  # a pool even on a one-core machine
    model, cluster, gpus = case
    result = search(load_model(model), load_cluster(cluster), gpus=gpus)
    return result, threads


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}")
def test_pool_gives_the_serial_answers(monkeypatch, case):
    serial, serial_threads = _search(monkeypatch, case, 1)
    pooled, pooled_threads = _search(monkeypatch, case, 4)
    assert set(serial_threads) == {threading.main_thread().name}
    assert len(pooled_threads) > 1 and all(t.startswith("stage-split") for t in pooled_threads)
    assert serial.splits and pooled.splits == serial.splits  # the case exercises the re-scoring
    assert list(pooled.split_solves) == list(serial.split_solves)  # row order kept

    def timeless(r):
        return dataclasses.replace(r, wall_s=0.0)  # the only field that may differ: wall time

    assert {i: timeless(r) for i, r in pooled.split_solves.items()} == \
        {i: timeless(r) for i, r in serial.split_solves.items()}
    assert np.array_equal(pooled.scores.step_time_s, serial.scores.step_time_s, equal_nan=True)
    assert np.array_equal(pooled.feasible, serial.feasible) and np.array_equal(pooled.chosen, serial.chosen)


def test_results_come_back_in_instance_order(monkeypatch):
    # the first instance finishes last: an order by completion would put it at the end
    def slow_first(k, **kwargs):
        time.sleep(0.05 if k == 0 else 0.0)
        return k

    monkeypatch.setattr(refine, "solve", slow_first)
    assert refine.solve_splits([0, 1, 2, 3], [None] * 4, 0.05, workers=2) == [0, 1, 2, 3]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_solve_error_reaches_the_caller(monkeypatch, workers):
    def fails_on_two(k, **kwargs):
        if k == 2:
            raise RuntimeError("solve 2 failed")
        return k

    monkeypatch.setattr(refine, "solve", fails_on_two)
    with pytest.raises(RuntimeError, match="solve 2 failed"):
        refine.solve_splits([0, 1, 2, 3], [None] * 4, 0.05, workers=workers)


@pytest.mark.parametrize("text, expected", [("1", 1), (" 1 ", 1), ("10000", None), (None, None)])
def test_workers_from_the_environment(monkeypatch, text, expected):
    # the cores this process may use (its CPU affinity), which may be fewer than the machine's
    cores = len(refine.os.sched_getaffinity(0)) if hasattr(refine.os, "sched_getaffinity") else refine.os.cpu_count()
    if text is None:
        monkeypatch.delenv(refine.WORKERS_ENV, raising=False)
    else:
        monkeypatch.setenv(refine.WORKERS_ENV, text)
    assert refine.split_workers() == (cores if expected is None else expected)


@pytest.mark.parametrize("text", ["0", "-1", "two", ""])
def test_bad_workers_in_the_environment(monkeypatch, text):
    monkeypatch.setenv(refine.WORKERS_ENV, text)
    with pytest.raises(SpecError, match=refine.WORKERS_ENV):
        refine.split_workers()
