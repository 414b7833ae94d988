"""plan sweep --executor ray (issue 39): on a local Ray instance of 2 CPUs the rows equal the local
executor's, a stopped sweep resumes, a killed worker's points are run again and written once; without
Ray, or with an address that does not answer, exit 2 naming what to do."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from planner.errors import SpecError
from planner.sweep import Executor, SweepInterrupted, run_sweep
from planner.sweep.points import Point  # noqa: F401  (the points the sweeps run)
from planner.sweep.ray_executor import ray_compute

ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'llm-layout-planner[ray]'")

RAY = Executor("ray")


@pytest.fixture(scope="module")
def local_ray():
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True, configure_logging=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def points():
    from planner.sweep import SweepSpec, expand, with_overrides

    spec = with_overrides(SweepSpec(), {"models": ["gpt3-1.3b", "llama3.1-8b"], "cluster": ["dgx-h100-1024"],
                                        "gpus": [8, 16, 32]})
    return list(expand(spec, None))


def _same(a: list[dict], b: list[dict]) -> bool:
    """Every column of every row equal, in the points' order (a row holds no timing of its own)."""
    return a == b


def test_ray_rows_equal_the_local_rows_and_a_stopped_sweep_resumes(local_ray, points, tmp_path):
    local = run_sweep(points, workers=1)
    assert _same(run_sweep(points, workers=2, executor=RAY).rows, local.rows)
    # Ctrl-C after the second row: the finished rows are kept, the rerun computes only the rest
    out = tmp_path / "rows.jsonl"
    seen = []

    def stop_after_two(row):
        seen.append(row)
        if len(seen) == 2:
            raise KeyboardInterrupt

    with pytest.raises(SweepInterrupted) as info:
        run_sweep(points, out=out, workers=2, executor=RAY, on_row=stop_after_two)
    kept = len(info.value.run.rows)
    assert kept >= 2
    again = run_sweep(points, out=out, workers=2, executor=RAY)
    assert again.skipped == kept and again.computed == len(points) - kept
    assert _same(again.rows, local.rows)


def test_a_killed_worker_is_run_again_and_its_rows_written_once(local_ray, points, tmp_path):
    marker = tmp_path / "killed"

    def dies_once(p):  # the first point run kills its worker process outright (as an OOM kill would)
        from planner.sweep import rows

        if not marker.exists():
            marker.write_text("x")
            os._exit(1)
        return rows.run_point(p)

    rows = list(ray_compute(points, workers=2, run=dies_once))
    assert marker.exists()
    assert sorted(r["point_id"] for r in rows) == sorted(p.key for p in points)  # every point, each once


def test_without_ray_the_flag_says_how_to_install_it():
    code = ("import sys; sys.modules['ray'] = None; from planner.cli import app; "
            "sys.argv = ['plan', 'sweep', '--models', 'gpt3-1.3b', '--cluster', 'dgx-h100-1024', '--gpus', '8', "
            "'--executor', 'ray', '--quiet']; app()")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Ray is not installed" in r.stderr and "llm-layout-planner[ray]" in r.stderr


def test_an_address_that_does_not_answer_is_exit_2_within_30_s():
    start = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "planner.cli", "sweep", "--models", "gpt3-1.3b", "--cluster",
                        "dgx-h100-1024", "--gpus", "8", "--executor", "ray", "--ray-address", "127.0.0.1:1", "--quiet"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "127.0.0.1:1 does not answer" in r.stderr
    assert time.monotonic() - start < 30


def test_a_local_ray_that_cannot_start_is_bad_input_not_an_internal_error(points, monkeypatch):
    # Ray's own message on a loaded machine, raised as a plain Exception by ray.init. Before: exit 3.
    def times_out(**kwargs):
        raise Exception("The current node timed out during startup. This could happen because some of the raylet "
                        "failed to startup or the GCS has become overloaded.")

    shut = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", times_out)
    monkeypatch.setattr(ray, "shutdown", lambda: shut.append(True))  # a module fixture's instance is left alone
    with pytest.raises(SpecError, match="cannot start or reach a local Ray instance \\(The current node timed out") as exc:
        list(ray_compute(points, workers=1))
    assert exc.value.path == "--executor" and shut == [True]  # what part of it started is shut down
