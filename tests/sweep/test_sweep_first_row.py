"""The first row of a large sweep comes after one search, not after work for every point (issue 31,
item 1): `--params 1e9:1e12:1000 --gpus 1..56` (56,000 points) wrote its first row after 26 s on a
quiet machine and 45 s on a loaded one, having generated 1,000 models through 34,908 validated
candidates and hashed a key for every point first. Reproduced as found: the command line, its
output file, and the work counted before the first row."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from functools import cached_property
from pathlib import Path

import pytest

from planner import sweep as sw
from planner.sweep import family
from planner.sweep.points import Point

GPUS = list(range(1, 57))  # 56 GPU counts x 1,000 parameter counts = 56,000 points
PLAN = [sys.executable, "-c", "from planner.cli.main import app; app()"]


class FirstRow(Exception):
    pass


def _stop(row: dict) -> None:
    raise FirstRow(row)


def _large() -> sw.SweepSpec:
    return sw.with_overrides(sw.SweepSpec(), {"scale_model": {"base": "gpt3-1.3b", "params": "1e9:1e12:1000"},
                                              "gpus": GPUS})


def test_no_key_and_few_models_are_made_per_point_before_the_first_row(tmp_path, monkeypatch):
    made, keys = [], []
    shaped = family._shaped
    monkeypatch.setattr(family, "_shaped", lambda *a, **k: made.append(1) or shaped(*a, **k))
    original = Point.__dict__["key"].func
    key = cached_property(lambda p: keys.append(1) or original(p))
    key.__set_name__(Point, "key")
    monkeypatch.setattr(Point, "key", key)
    points = sw.expand(_large())
    # Each of the 1,000 models is validated once, plus two shapes (1 and 2 layers) per hidden size tried,
    # shared by every count: hidden steps by head_dim x 8 = 128 x 8 = 1,024 up to 2 x ideal, where
    # ideal = (1e12 x aspect / 12)^(1/3) with aspect = 2048 / 24 x 128 / aspect_trend(1.42e9) = 148.0,
    # so ideal = 23,105: 46,210 / 1,024 -> 45 sizes, 90 shapes.
    assert len(made) <= 1000 + 90  # before: 34,908 validated candidates (25 s)
    assert len(points) < 56_000  # shapes counted once
    assert keys == []  # before: 56,000 keys hashed (11 s) before the first search
    with pytest.raises(FirstRow):
        sw.run_sweep(points, out=tmp_path / "rows.csv", workers=1, on_row=_stop)
    assert len(keys) == 1  # the first point's: the rest are made as their points are reached


def test_a_normal_output_is_appended_to_without_a_rewrite_first(tmp_path):
    """Resuming, the output was rewritten before the first search (100,000 rows: 20 s); a file with
    nothing to drop is appended to as it is, and only the end rewrites it in order."""
    spec = sw.with_overrides(sw.SweepSpec(), {"models": ["gpt3-1.3b"], "gpus": [8, 16]})
    out = tmp_path / "rows.csv"
    points = sw.expand(spec)
    sw.run_sweep(points[:1], out=out)
    inode, one_row = out.stat().st_ino, out.read_bytes()
    seen = []
    with pytest.raises(FirstRow):
        sw.run_sweep(points, out=out, on_row=lambda row: seen.append(out.stat().st_ino) or _stop(row))
    assert seen == [inode]
    assert len(sw.read_rows(out)) == 2  # the old row and the new one
    torn = tmp_path / "torn.csv"
    torn.write_bytes(one_row + b"abc,1")  # a row cut short: the file is rewritten without it first
    seen.clear()
    with pytest.raises(FirstRow):
        sw.run_sweep(points, out=torn, on_row=lambda row: seen.append(torn.read_bytes()) or _stop(row))
    assert b"abc,1" not in seen[0]


def _startup_s(tmp_path: Path) -> float:
    """Seconds `plan --version` takes here and now: the unit of a machine's speed under its load."""
    started = time.monotonic()
    subprocess.run(PLAN + ["--version"], cwd=tmp_path, capture_output=True, timeout=60, check=True)
    return time.monotonic() - started


def test_the_first_row_of_56000_points_within_10_s(tmp_path):
    """As found: the command line, and the first row in --out. Before: 26 s here with `plan --version`
    at 1.3 s (20 startups), 45 s on a loaded machine; after: 4 s (3 startups), 11 s with the load
    average at 7 on the 2 cores. So: within 10 s, or within 6 startups when the machine is that loaded."""
    startup = _startup_s(tmp_path)
    out = tmp_path / "many.csv"
    started = time.monotonic()
    proc = subprocess.Popen(PLAN + ["sweep", "--scale-model", "gpt3-1.3b", "--params", "1e9:1e12:1000",
                                    "--gpus", ",".join(map(str, GPUS)), "--out", str(out)],
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        while time.monotonic() - started < 60 and proc.poll() is None:
            if out.exists() and out.read_text().count("\n") >= 2:  # the header and a row
                break
            time.sleep(0.05)
        seconds = time.monotonic() - started
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    assert "Traceback" not in err, err
    assert err.startswith("plan sweep: 56,000 points"), err
    assert seconds < 10 or seconds < 6 * startup, (seconds, startup, os.getloadavg())
