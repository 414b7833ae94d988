"""`plan sweep --plot`: the five PNG figures exist, are not empty and have their documented size."""
from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner import sweep as sw
from planner.cli import app
from planner.errors import SpecError

# README, "Plots": figure -> (width, height) in pixels.
EXPECTED_PX = {
    "mfu_vs_gpus.png": (1000, 600),
    "tokens_per_s_vs_gpus.png": (1000, 600),
    "step_time_vs_params.png": (1000, 600),
    "energy_per_token_vs_params.png": (1000, 600),
    "layout_vs_gpus.png": (1500, 600),
}


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from the IHDR chunk (PNG spec, Sec. 11.2.2): bytes 16-24 of the file."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])


@pytest.fixture(scope="module")
def rows():
    # Two generated sizes x three GPU counts, and a 175B model that does not fit on 8 GPUs.
    spec = sw.SweepSpec.model_validate({"scale_model": {"base": "gpt3-1.3b", "params": [1e9, 1e10]},
                                        "models": ["gpt3-175b"], "gpus": [8, 64, 512]})
    return sw.run_sweep(sw.expand(spec)).rows


def test_plots_are_written_with_their_size(rows, tmp_path):
    pytest.importorskip("matplotlib")
    from planner.plots import write_plots

    assert any(r["status"] == "infeasible" for r in rows)
    paths = write_plots(rows, tmp_path / "plots")
    assert sorted(p.name for p in paths) == sorted(EXPECTED_PX)
    for p in paths:
        assert p.stat().st_size > 10_000, p  # a drawn figure, not an empty canvas
        assert png_size(p) == EXPECTED_PX[p.name], p.name


def test_plots_of_a_sweep_without_feasible_points_still_exist(rows, tmp_path):
    pytest.importorskip("matplotlib")
    from planner.plots import write_plots

    bad = [r for r in rows if r["status"] != "ok"]
    for p in write_plots(bad, tmp_path):
        assert p.stat().st_size > 0 and png_size(p) == EXPECTED_PX[p.name]


def test_the_cli_writes_plots(tmp_path):
    pytest.importorskip("matplotlib")
    res = CliRunner().invoke(app, ["sweep", "--models", "gpt3-1.3b", "--gpus", "8,16", "--plot", str(tmp_path / "p"),
                                   "--workers", "1"])
    assert res.exit_code == 0, res.output
    assert "5 plots in" in res.output
    assert all((tmp_path / "p" / name).stat().st_size > 0 for name in EXPECTED_PX)


def test_without_matplotlib_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    from planner.plots import require_matplotlib

    with pytest.raises(SpecError, match=r"pip install planner\[plot\]"):
        require_matplotlib()
    res = CliRunner().invoke(app, ["sweep", "--models", "gpt3-1.3b", "--gpus", "8", "--plot", "unused"])
    assert res.exit_code == 2 and "pip install planner[plot]" in res.output
