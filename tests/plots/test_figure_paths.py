"""Where a picture goes is checked before the work it follows (issue 31: `search --plot FIFO` and
`estimate --timeline FIFO` ran the whole search, then waited on the FIFO for a reader)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli.main import app

ROOT = Path(__file__).resolve().parents[2]


def test_a_fifo_as_the_picture_is_refused_before_the_search(tmp_path):
    fifo = tmp_path / "frontier.png"
    os.mkfifo(fifo)
    r = subprocess.run([sys.executable, "-c", "from planner.cli.main import app; app()", "search", "gpt3-1.3b",
                        "dgx-a100-1024", "--gpus", "8", "--plot", str(fifo)],
                       capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 2 and "frontier.png: --plot: not a regular file (a FIFO)" in r.stderr and r.stdout == ""


def test_a_picture_in_a_missing_folder_is_refused_before_the_search(tmp_path):
    r = CliRunner().invoke(app, ["estimate", "gpt3-1.3b", "dgx-a100-1024", "--gpus", "8", "--tp", "1", "--pp", "1",
                                 "--micro-batch", "1", "--timeline", str(tmp_path / "no" / "t.png")])
    assert r.exit_code == 2 and "no folder" in r.stderr and "step" not in r.stdout


def test_a_fifo_as_the_sweeps_output_is_refused_before_the_points(tmp_path):
    # it exited 0, its rows written into the FIFO and gone
    fifo = tmp_path / "rows.csv"
    os.mkfifo(fifo)
    r = subprocess.run([sys.executable, "-c", "from planner.cli.main import app; app()", "sweep", "--models", "gpt3-1.3b",
                        "--cluster", "dgx-a100-1024", "--gpus", "8", "--quiet", "--workers", "1", "--out", str(fifo)],
                       capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 2 and "rows.csv: --out: not a regular file (a FIFO)" in r.stderr


def test_a_plot_folder_that_cannot_be_made_is_refused_before_the_points(tmp_path):
    # a 10,000-character name: every figure was drawn first, then "cannot create the folder"
    long = tmp_path / ("x" * 10_000)
    r = CliRunner().invoke(app, ["sweep", "--models", "gpt3-1.3b", "--cluster", "dgx-a100-1024", "--gpus", "8",
                                 "--workers", "1", "--plot", str(long)])
    assert r.exit_code == 2 and "cannot create the folder" in r.stderr
    assert "points on" not in r.stderr and "plan sweep (" not in r.stdout  # no point ran, no table


@pytest.mark.parametrize("name", ["sweep.png", "sweep.SVG", "figures.pdf", "a.jpg", "out/sweep.jpeg"])
def test_a_picture_name_as_the_sweeps_plot_folder_is_refused(tmp_path, monkeypatch, name):
    # `plan search --plot` and `estimate --timeline` take a file; `sweep --plot sweep.png` made a folder 'sweep.png'
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["sweep", "--models", "gpt3-1.3b", "--cluster", "dgx-a100-1024", "--gpus", "8",
                                 "--quiet", "--workers", "1", "--plot", name])
    assert r.exit_code == 2, r.output
    assert "--plot" in r.stderr and "takes a folder" in r.stderr
    assert list(tmp_path.iterdir()) == []  # no folder, no rows: refused before the points


def test_a_folder_as_the_sweeps_plot_still_gets_the_figures(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["sweep", "--models", "gpt3-1.3b", "--cluster", "dgx-a100-1024", "--gpus", "8",
                                 "--quiet", "--workers", "1", "--plot", "figures.d"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "figures.d" / "mfu_vs_gpus.png").is_file()
