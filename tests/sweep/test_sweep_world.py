"""The world failing under a sweep (issue 31, items 4 and 6), as found: the disk fills (`ulimit -f`:
Python ignores SIGXFSZ, so a write fails with EFBIG, as ENOSPC would) and a worker is killed (out of
memory): once exit 3, now one line and exit 2, the rows written kept for the rerun; stderr on
/dev/full: once exit 1 for a complete sweep, now 0."""
from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

PLAN = [sys.executable, "-c", "from planner.cli.main import app; app()"]


def _file_size(limit: int):
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def _start(args: list[str], cwd: Path, **kw) -> subprocess.Popen:
    kw = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **kw}
    return subprocess.Popen(PLAN + ["sweep", *args], cwd=cwd, text=True, env={**os.environ, "COLUMNS": "200"}, **kw)


def _children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def test_a_full_disk_and_a_killed_worker(tmp_path):
    # The disk fills at the second row: the limit is the file as the first run left it (header and one
    # row, whatever their floats' printed length) plus 1 byte, so no row can fit. Once a fixed 1,024
    # bytes, which two rows came to exactly on another machine: the disk never filled, exit 0.
    one = ["--models", "gpt3-1.3b", "--gpus", "8", "--max-micro-batch", "1", "--workers", "1", "--out", "rows.csv"]
    first = _start(one + ["--objective", "time"], tmp_path)
    killed = _start(["--scale-model", "gpt3-1.3b", "--params", "1e9:1e10:30", "--gpus", "8,16,32,64", "--workers", "2",
                     "--out", "many.csv"], tmp_path)
    with open("/dev/full", "w") as dev_full:  # progress and summary unreadable: the sweep itself succeeded
        quiet_fail = _start(["--models", "gpt3-1.3b", "--gpus", "8", "--max-micro-batch", "1", "--workers", "1"],
                            tmp_path, stderr=dev_full)
    assert first.wait(timeout=120) == 0, first.stderr.read()
    kept = (tmp_path / "rows.csv").read_bytes()
    assert kept.count(b"\n") == 2  # the header and the time row
    full = _start(one + ["--objective", "time,energy"], tmp_path, preexec_fn=_file_size(len(kept) + 1))
    rows, deadline = tmp_path / "many.csv", time.monotonic() + 60
    while time.monotonic() < deadline and not (rows.exists() and rows.read_text().count("\n") >= 2):
        time.sleep(0.2)  # a row written: the pool runs
    os.kill(_children(killed.pid)[0], signal.SIGKILL)  # a worker of the sweep this test started
    (_, full_err), (_, killed_err) = full.communicate(timeout=120), killed.communicate(timeout=120)
    table, _ = quiet_fail.communicate(timeout=120)
    assert quiet_fail.returncode == 0 and "dp8" in table  # once: exit 1 for a complete sweep
    assert full.returncode == 2, full_err
    assert "rows.csv: --out: cannot write the rows: File too large" in full_err
    assert (tmp_path / "rows.csv").read_bytes()[:len(kept)] == kept  # the time row kept; at most 1 byte of the next
    assert killed.returncode == 2, killed_err
    assert "error: a worker process died (out of memory or killed)" in killed_err
    for err in (full_err, killed_err):
        assert "Traceback" not in err and "internal error" not in err
        assert len([line for line in err.splitlines() if line.startswith("error:")]) == 1, err
    assert rows.read_text().count("\n") >= 2  # the finished rows kept
    resumed = subprocess.run(PLAN + ["sweep", *one, "--objective", "time,energy"], cwd=tmp_path, capture_output=True,
                             text=True, timeout=120)  # room again: the rerun resumes
    assert resumed.returncode == 0 and "1 computed, 1 already in the output" in resumed.stderr, resumed.stderr
