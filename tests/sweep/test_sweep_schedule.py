"""The pipeline schedule is a column of `plan sweep --out` (after etp, as the axes are ordered) and a sweep fixes
it as it fixes the other layout axes (`--schedule`, or `constraints: schedule:` in the file): each row is the
`plan search --schedule` best of its point."""
from __future__ import annotations

import csv
import json
from pathlib import Path

from typer.testing import CliRunner

from planner.cli.main import app
from planner.sweep.rows import COLUMN_NAMES

runner = CliRunner()


def invoke(*args):
    result = runner.invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output
    return result


def test_schedule_is_the_column_after_etp():
    assert COLUMN_NAMES[COLUMN_NAMES.index("etp") + 1] == "schedule"


def test_a_row_carries_its_layouts_schedule_and_a_sweep_fixes_it(tmp_path):
    out = tmp_path / "rows.jsonl"
    base = ["sweep", "--models", "gpt3-1.3b", "--cluster", "dgx-a100-1024", "--gpus", "32", "--workers", "1", "--quiet",
            "--pp", "4"]
    assert invoke(*base, "--out", out).exit_code == 0
    free = json.loads(out.read_text().splitlines()[0])
    # not fixed: the schedule vpp gives (1f1b, interleaved at vpp > 1), as plan search picks
    assert free["schedule"] == ("interleaved" if free["vpp"] > 1 else "1f1b")

    fixed = tmp_path / "zb.jsonl"
    assert invoke(*base, "--schedule", "zb-h1", "--out", fixed).exit_code == 0
    row = json.loads(fixed.read_text().splitlines()[0])
    one = invoke("search", "gpt3-1.3b", "dgx-a100-1024", "--gpus", "32", "--pp", "4", "--schedule", "zb-h1", "--json")
    best = json.loads(one.stdout)["best"]
    assert row["status"] == "ok" and row["schedule"] == best["layout"]["schedule"] == "zb-h1"
    assert row["step_time_s"] == best["step_time_s"]
    assert row["point_id"] != free["point_id"]  # a fixed schedule is another point


def test_a_sweep_file_fixes_the_schedule_and_the_csv_reads_back(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text("models: [gpt3-1.3b]\ngpus: [32]\nconstraints:\n  pp: 4\n  vpp: 2\n  schedule: interleaved-zb\n")
    out = tmp_path / "rows.csv"
    res = invoke("sweep", spec, "--workers", "1", "--quiet", "--out", out)
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader(out.open()))
    assert [r["schedule"] for r in rows] == ["interleaved-zb"] and rows[0]["vpp"] == "2"
    # resuming reads the column back: the point is done, nothing reruns
    again = invoke("sweep", spec, "--workers", "1", "--out", out)
    assert again.exit_code == 0 and list(csv.DictReader(out.open())) == rows


def test_an_unknown_schedule_in_a_sweep_file_is_exit_2(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text("models: [gpt3-1.3b]\ngpus: [32]\nconstraints:\n  schedule: zb-x\n")
    res = invoke("sweep", spec, "--workers", "1", "--quiet")
    assert res.exit_code == 2 and "schedule" in res.output
