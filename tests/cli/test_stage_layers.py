"""`--stage-layers` reads comma-separated counts and COUNTxTIMES runs, nothing else (issue 38): '12 12' was read
as 1212 (the spaces dropped) and '4x' as 4 (an empty TIMES as one); both are bad input now, exit 2 naming the flag."""
from __future__ import annotations

import pytest
from typer.testing import CliRunner

from planner.cli.main import app, parse_split

# gpt3-1.3b: 24 layers; pp 2 gives 2 stages of 12
ESTIMATE = ["estimate", "gpt3-1.3b", "dgx-a100-1024", "--gpus", "2", "--tp", "1", "--pp", "2", "--micro-batch", "1"]


@pytest.mark.parametrize("text", ["12 12", "4x", "x4", "12x", "1 2,12", "12,,12", "12;12", "12x2x1", "12x 2", "12x0",
                                  "-12,36", "12.0,12", "", " "])
def test_anything_but_counts_and_runs_is_refused_naming_the_flag(text):
    out = CliRunner().invoke(app, ESTIMATE + ["--stage-layers", text])
    assert out.exit_code == 2, (text, out.stdout)
    assert "--stage-layers: cannot read" in out.stderr and "comma-separated layer counts" in out.stderr
    assert out.stdout == ""


@pytest.mark.parametrize("text,counts", [("12,12", [12, 12]), (" 12 , 12 ", [12, 12]), ("12x2", [12, 12]),
                                         ("11,13", [11, 13]), ("7,8x14,7", [7] + [8] * 14 + [7])])
def test_counts_and_runs_are_read_as_written(text, counts):
    assert parse_split(text) == counts


def test_an_even_split_spelled_as_a_run_scores_as_the_default():
    plain = CliRunner().invoke(app, ESTIMATE + ["--json"])
    split = CliRunner().invoke(app, ESTIMATE + ["--stage-layers", "12x2", "--json"])
    assert plain.exit_code == split.exit_code == 0 and plain.stdout == split.stdout
