"""A finished sweep on a full disk (issue 38), as found: every point's row already in `--out`, the disk full (`ulimit
-f` below the file's size: the rewrite in the points' order fails with EFBIG, as ENOSPC would). It said "room on the
disk; rerun to resume" at every rerun, though a rerun computes nothing: now the disk is named as what to fix."""
from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

PLAN = [sys.executable, "-c", "from planner.cli.main import app; app()"]
ARGS = ["sweep", "--models", "gpt3-1.3b", "--gpus", "8", "--max-micro-batch", "1", "--workers", "1",
        "--objective", "time,energy", "--out", "rows.csv", "--quiet"]


def _plan(cwd: Path, limit: int | None = None) -> subprocess.CompletedProcess:
    limited = None if limit is None else (lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))
    return subprocess.run(PLAN + ARGS, cwd=cwd, capture_output=True, text=True, timeout=120, preexec_fn=limited,
                          env={**os.environ, "COLUMNS": "200"})


def test_a_finished_sweep_on_a_full_disk_names_the_disk_not_a_resume(tmp_path):
    first = _plan(tmp_path)
    assert first.returncode == 0, first.stderr
    kept = (tmp_path / "rows.csv").read_bytes()
    assert kept.count(b"\n") == 3  # the header, the time row and the energy row: every point computed
    for _ in range(2):  # the same answer at every rerun, none of them "rerun to resume"
        full = _plan(tmp_path, limit=len(kept) // 2)  # no copy of the file fits
        assert full.returncode == 2, full.stderr
        assert "rows.csv: --out: every point is computed and its row is in the file" in full.stderr
        assert "File too large" in full.stderr and "the disk, not the sweep, is what to fix" in full.stderr
        assert "resume" not in full.stderr and "Traceback" not in full.stderr
        assert (tmp_path / "rows.csv").read_bytes() == kept  # the rows untouched
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".rows.csv.") and p.name.endswith(".tmp")]
    again = _plan(tmp_path)  # room again: nothing to compute
    assert again.returncode == 0 and again.stdout.count("dp8") == 2
