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


@pytest.mark.parametrize("lines, message", [
    # the list forms bounded as the string forms are; before: an error row and exit 1 ([-8]; [10**20]: a ValueError
    # from divisors()), or exit 3 ([-1e9]: a NaN shape)
    ("gpus: [-8]\nmodels: [gpt3-1.3b]", "2: gpus.0: Input should be greater than 0, got -8"),
    ("gpus: [100000000000000000000]\nmodels: [gpt3-1.3b]",
     "2: gpus.0: Input should be less than or equal to 10000000, got 100000000000000000000"),
    ("gpus: [8]\nscale_model: {base: gpt3-1.3b, params: [-1.0e9]}",
     "3: scale_model.params.0: Input should be greater than 0, got -1000000000.0"),
    ("gpus: [8]\nscale_model: {base: gpt3-1.3b, params: [1.0e16]}",
     "3: scale_model.params.0: Input should be less than 10000000000000000, got 1e+16"),
])
def test_list_counts_out_of_bounds_are_bad_input_at_their_line(tmp_path, lines, message):
    path = tmp_path / "sweep.yaml"
    path.write_text("kind: sweep\n" + lines + "\n")
    r = CliRunner().invoke(app, ["sweep", str(path), "--cluster", "dgx-a100-1024", "--out", str(tmp_path / "rows.csv")])
    assert r.exit_code == 2, r.output
    assert f"{path}:{message}" in " ".join(r.output.split())
    assert not (tmp_path / "rows.csv").exists()
