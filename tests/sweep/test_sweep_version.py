"""Issue 38: a sweep resumed onto rows another planner version wrote, keeping their numbers as done;
no row said which version computed it. Now every row carries `planner_version` and a resume onto rows
of another version (or of none: rows from before the column) is refused, exit 2, in one line naming
both versions and the file; `--force` recomputes every point. CSV, JSONL and parquet alike."""
from __future__ import annotations

import csv
import json
from importlib.metadata import version

import pytest
from typer.testing import CliRunner

from planner import sweep as sw
from planner.cli.main import app
from planner.errors import SpecError
from planner.sweep import rows as point_rows

OLD = "0.1.0"  # another release: what a planner before an upgrade wrote
THIS = version("llm-layout-planner")  # the installed distribution, read here apart from the planner's own lookup
SWEEP = ["sweep", "--models", "gpt3-1.3b", "--gpus", "8", "--objective", "time,energy", "--max-micro-batch", "1",
         "--workers", "1", "--quiet"]
FORMATS = ["rows.csv", "rows.jsonl", "rows.parquet"]


def plan(*args):
    res = CliRunner().invoke(app, [str(a) for a in args])
    assert "Traceback" not in res.output and "internal error" not in res.output, res.output
    return res


def error_lines(res) -> list[str]:
    return [line for line in res.output.splitlines() if line.startswith("error:")]


def written_by(monkeypatch, name: str, tmp_path):
    """`name` as a sweep of planner OLD left it."""
    monkeypatch.setattr(point_rows, "planner_version", lambda: OLD)
    out = tmp_path / name
    assert plan(*SWEEP, "--out", out).exit_code == 0
    monkeypatch.undo()
    return out


def strip_version(out):
    """The file as a planner before rows carried a version wrote it: the same columns but the last."""
    if out.suffix == ".csv":
        with open(out, newline="") as f:
            records = [r[:-1] for r in csv.reader(f)]
        with open(out, "w", newline="") as f:
            csv.writer(f).writerows(records)
    elif out.suffix == ".jsonl":
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        out.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "planner_version"}) + "\n" for r in rows))
    else:
        import pyarrow.parquet as pq

        pq.write_table(pq.read_table(out).drop_columns(["planner_version"]), out)


@pytest.mark.parametrize("name", FORMATS)
def test_every_row_carries_the_version_that_computed_it(tmp_path, name):
    out = tmp_path / name
    assert plan(*SWEEP, "--out", out).exit_code == 0
    rows = sw.read_rows(out)
    assert len(rows) == 2 and {r["planner_version"] for r in rows} == {THIS}
    if name == "rows.csv":  # the last column of the header and of each row
        with open(out, newline="") as f:
            assert [r[-1] for r in csv.reader(f)] == ["planner_version", THIS, THIS]


@pytest.mark.parametrize("name", FORMATS)
def test_a_resume_onto_rows_of_another_version_is_refused(tmp_path, monkeypatch, name):
    out = written_by(monkeypatch, name, tmp_path)
    before = out.read_bytes()
    res = plan(*SWEEP, "--out", out)  # the upgraded planner, same command: once exit 0, both points skipped
    assert res.exit_code == 2, res.output
    [line] = error_lines(res)
    assert line.startswith(f"error: {out}: --out: its rows were computed by planner {OLD}; this is planner {THIS}"), line
    assert "--force" in line
    assert out.read_bytes() == before  # nothing appended, nothing rewritten
    assert plan(*SWEEP, "--out", out, "--force").exit_code == 0  # the refusal let go of the output's lock


@pytest.mark.parametrize("name", FORMATS)
def test_rows_from_before_the_version_column_are_refused(tmp_path, name):
    out = tmp_path / name
    assert plan(*SWEEP, "--out", out).exit_code == 0
    strip_version(out)
    before = out.read_bytes()
    res = plan(*SWEEP, "--out", out)
    assert res.exit_code == 2, res.output
    [line] = error_lines(res)
    assert line.startswith(f"error: {out}: --out: its rows were computed by a planner that wrote no version"), line
    assert f"this is planner {THIS}" in line
    assert out.read_bytes() == before


@pytest.mark.parametrize("name", FORMATS)
def test_force_recomputes_rows_of_another_version(tmp_path, monkeypatch, name):
    out = written_by(monkeypatch, name, tmp_path)
    res = plan(*SWEEP, "--out", out, "--force")
    assert res.exit_code == 0, res.output
    rows = sw.read_rows(out)
    assert len(rows) == 2 and {r["planner_version"] for r in rows} == {THIS}
    assert plan(*SWEEP, "--out", out).exit_code == 0  # and then it resumes


def test_one_row_of_another_version_among_this_versions_is_refused(tmp_path):
    """Two sweeps into one file, the second after an upgrade: one foreign row is enough."""
    out = tmp_path / "rows.csv"
    assert plan(*SWEEP, "--out", out).exit_code == 0
    with open(out, newline="") as f:
        header, first, second = csv.reader(f)
    with open(out, "w", newline="") as f:
        csv.writer(f).writerows([header, first, second[:-1] + [OLD]])
    points = sw.expand(sw.SweepSpec.model_validate({"models": ["gpt3-1.3b"], "gpus": [8], "objective": "time"}))
    with pytest.raises(SpecError) as caught:
        sw.run_sweep(points, out=out)
    assert f"planner {OLD}; this is planner {THIS}" in str(caught.value)
    assert str(caught.value).startswith(f"{out}: --out:")


def test_a_torn_last_row_still_resumes(tmp_path):
    """The version check reads whole rows only: a row cut short (no newline) is run again, as before."""
    out = tmp_path / "rows.jsonl"
    assert plan(*SWEEP, "--out", out).exit_code == 0
    whole = out.read_text()
    out.write_text(whole + whole.splitlines()[0][:40])  # a third row cut short by a kill
    points = sw.expand(sw.SweepSpec.model_validate({"models": ["gpt3-1.3b"], "gpus": [8], "objective": ["time", "energy"],
                                                    "constraints": {"max_micro_batch": 1}}))
    run = sw.run_sweep(points, out=out)
    assert (run.computed, run.skipped) == (0, 2) and out.read_text() == whole
