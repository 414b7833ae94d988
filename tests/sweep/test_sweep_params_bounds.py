"""`--params LO:HI:N` beyond its bounds says which bounds (planner/sweep/spec.py parse_params): before, N =
100,000,000 was refused as "cannot read" with the example 1e9:1e12:8 and no bound, though it reads fine."""
from __future__ import annotations

import pytest
from typer.testing import CliRunner

from planner.cli.main import app


@pytest.mark.parametrize("params", ["1e9:1e12:100000000", "1e9:1e12:1001", "1e9:1e17:8", "0:1e9:8"])
def test_params_out_of_bounds_name_the_bounds(tmp_path, params):
    r = CliRunner().invoke(app, ["sweep", "--scale-model", "gpt3-1.3b", "--params", params, "--gpus", "8",
                                 "--cluster", "dgx-a100-1024", "--out", str(tmp_path / "rows.csv")])
    assert r.exit_code == 2, r.output
    assert f"--params: cannot read '{params}'" in r.output
    assert "1 <= N <= 1,000, 0 < LO <= HI < 1e16" in r.output
    assert not (tmp_path / "rows.csv").exists()
