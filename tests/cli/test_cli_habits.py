"""CLI habits (issue 14, item 4), seen the way a shell sees them: real processes, real pipes.

Results go to stdout and diagnostics to stderr for every command; a reader that leaves a pipe
early is not an error; `plan --version` names the distribution; a missing optional extra is a
one-line hint."""
from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLAN = [sys.executable, "-c", "from planner.cli.main import app; app()"]


def plan(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "150"}
    return subprocess.run(PLAN + list(args), capture_output=True, text=True, timeout=240, cwd=cwd, env=env)


def test_version_names_the_distribution_and_its_version():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["name"] == "llm-layout-planner"  # "planner" on PyPI is an unrelated project
    r = plan("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"plan {meta['version']} (llm-layout-planner)"


@pytest.mark.parametrize("args", [["search", "--top", "40"], ["search", "--json", "--top", "60"], ["validate"]])
def test_a_reader_that_leaves_early_is_not_an_error(args):
    # `plan search | head -1`: read one line, close the pipe, and the command must still exit 0. The
    # output must outgrow the pipe's 64 KiB buffer, or every version passes: 60 layouts of JSON do.
    proc = subprocess.Popen(PLAN + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = proc.stdout.readline()
    proc.stdout.close()
    _, stderr = proc.communicate(timeout=240)
    assert first.strip() and proc.returncode == 0, stderr
    assert "Traceback" not in stderr and "Broken pipe" not in stderr


CASES = {
    # command -> (exit status, a fragment of stdout)
    "search": (["search", "--top", "2"], 0, "objective: time"),
    "search infeasible": (["search", "--max-step-time", "0.001"], 1, "no feasible layout"),
    "estimate": (["estimate", "gpt3-175b", "dgx-a100-1024", "--gpus", "64", "--global-batch", "64", "--tp", "8",
                  "--pp", "8", "--micro-batch", "1", "--recompute", "selective", "--sequence-parallel"], 0, "step"),
    "validate": (["validate"], 0, "figures: mean |error|"),
    "schema": (["schema", "gpu"], 0, '"properties"'),
    "check unreadable": (["check", "bad.yaml"], 2, "bad.yaml"),
    "allocate": (["allocate", str(ROOT / "configs/jobs/three-jobs.yaml"), "dgx-h100-1024"], 0, "total:"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_results_on_stdout_and_nothing_but_diagnostics_on_stderr(name, tmp_path):
    args, code, fragment = CASES[name]
    # a model spec whose layers are not a number: plan check reports it on stdout, exit 2
    (tmp_path / "bad.yaml").write_text("name: bad\nlayers: many\nhidden: 1024\nheads: 8\nvocab: 1000\nseq_len: 128\n"
                                       "training:\n  global_batch: 8\n")
    r = plan(*args, cwd=tmp_path)
    assert r.returncode == code, r.stderr
    assert fragment in r.stdout
    assert fragment not in r.stderr and "Traceback" not in r.stderr


def test_sweep_table_on_stdout_progress_and_summary_on_stderr(tmp_path):
    r = plan("sweep", str(ROOT / "configs/sweeps/gpt3-family.yaml"), "--params", "1.3e9", "--gpus", "8",
             "--objective", "cost", "--quiet", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    header = next(line for line in r.stdout.splitlines() if "layout" in line)
    # ZeRO stage and recompute are columns of the table, and the cost objective shows its cost
    assert {"recompute", "zero", "$/Mtok"} <= set(header.split())
    assert "layout" not in r.stderr


def test_calibrate_without_scipy_is_a_one_line_hint():
    code = ("import sys, runpy; sys.modules['scipy'] = None; sys.modules['scipy.optimize'] = None; "
            "sys.argv = ['calibrate.py']; runpy.run_path('benchmarks/calibrate.py', run_name='__main__')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == ["error: benchmarks/calibrate.py needs scipy: "
                                             "pip install -e '.[calibrate]' (or pip install scipy)"]


def test_ctrl_c_while_a_module_imports_is_an_interruption_not_a_bug():
    # Ctrl-C in the first second surfaced as "internal error: ImportError: initialization failed" (exit 3)
    import typer

    from planner.cli.common import run

    def importing():
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise ImportError("initialization failed")

    with pytest.raises(typer.Exit) as exc:
        run(importing)
    assert exc.value.exit_code == 130
