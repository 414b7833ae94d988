"""CLI habits (issue 14, item 4).

Results go to stdout and diagnostics to stderr for every command; a reader that leaves a pipe
early is not an error; `plan --version` names the distribution; a missing optional extra is a
one-line hint.

A reader leaving a pipe is about the process (its exit status once stdout is closed), so those
run as real processes with real pipes, side by side; the rest run in-process through typer's
CliRunner, which keeps stdout and stderr apart as a shell does (a real process costs a second of
imports per call)."""
from __future__ import annotations

import runpy
import subprocess
import sys
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
PLAN = [sys.executable, "-c", "from planner.cli.main import app; app()"]


def plan(*args: str):
    """`plan ARGS` in-process, on a 150-column terminal, stdout and stderr apart."""
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "150"}, terminal_width=150)


def test_version_names_the_distribution_and_its_version():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["name"] == "llm-layout-planner"  # "planner" on PyPI is an unrelated project
    r = plan("--version")
    assert r.exit_code == 0 and r.stdout.strip() == f"plan {meta['version']} (llm-layout-planner)"


SMALL = ["search", "gpt3-1.3b", "dgx-a100-1024", "--gpus", "8"]
EARLY = {"search": [*SMALL, "--top", "40"], "search json": [*SMALL, "--json", "--top", "60"], "validate": ["validate"]}


def _read_one_line_and_leave(args: list[str]) -> tuple[str, int, str]:
    proc = subprocess.Popen(PLAN + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = proc.stdout.readline()
    proc.stdout.close()
    _, stderr = proc.communicate(timeout=240)
    return first, proc.returncode, stderr


@pytest.fixture(scope="module")
def left_early():
    """The three readers, each in a thread of its own: every process starts at once and each reader
    still closes its pipe as soon as the first line arrives (the processes share the cores, not a queue)."""
    pool = ThreadPoolExecutor(len(EARLY))
    yield {name: pool.submit(_read_one_line_and_leave, args) for name, args in EARLY.items()}
    pool.shutdown(wait=True)


@pytest.mark.parametrize("name", list(EARLY))
def test_a_reader_that_leaves_early_is_not_an_error(left_early, name):
    # `plan search | head -1`: read one line, close the pipe, and the command must still exit 0. The
    # output must outgrow the pipe's 64 KiB buffer, or every version passes: 60 layouts of JSON do
    # (105 KiB for gpt3-1.3b on 8 GPUs).
    first, returncode, stderr = left_early[name].result(timeout=300)
    assert first.strip() and returncode == 0, stderr
    assert "Traceback" not in stderr and "Broken pipe" not in stderr


CASES = {
    # command -> (exit status, a fragment of stdout)
    "search": ([*SMALL, "--top", "2"], 0, "objective: time"),
    "search infeasible": ([*SMALL, "--max-step-time", "0.001"], 1, "no feasible layout"),
    "estimate": (["estimate", "gpt3-175b", "dgx-a100-1024", "--gpus", "64", "--global-batch", "64", "--tp", "8",
                  "--pp", "8", "--micro-batch", "1", "--recompute", "selective", "--sequence-parallel"], 0, "step"),
    "validate": (["validate"], 0, "figures: mean |error|"),
    "schema": (["schema", "gpu"], 0, '"properties"'),
    "check unreadable": (["check", "bad.yaml"], 2, "bad.yaml"),
    "allocate": (["allocate", str(ROOT / "configs/jobs/three-jobs.yaml"), "dgx-h100-1024"], 0, "total:"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_results_on_stdout_and_nothing_but_diagnostics_on_stderr(name, tmp_path, monkeypatch, plan_once):
    args, code, fragment = CASES[name]
    # a model spec whose layers are not a number: plan check reports it on stdout, exit 2
    (tmp_path / "bad.yaml").write_text("name: bad\nlayers: many\nhidden: 1024\nheads: 8\nvocab: 1000\nseq_len: 128\n"
                                       "training:\n  global_batch: 8\n")
    monkeypatch.chdir(tmp_path)
    # `plan validate` (seconds of replaying measurements) is run once for the tests that read it
    r = plan_once(*args) if args == ["validate"] else plan(*args)
    assert r.exit_code == code, r.stderr
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception  # in-process: no traceback printed
    assert fragment in r.stdout
    assert fragment not in r.stderr and "Traceback" not in r.stderr


def test_sweep_table_on_stdout_progress_and_summary_on_stderr(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = plan("sweep", str(ROOT / "configs/sweeps/gpt3-family.yaml"), "--params", "1.3e9", "--gpus", "8",
             "--objective", "cost", "--quiet")
    assert r.exit_code == 0, r.stderr
    header = next(line for line in r.stdout.splitlines() if "layout" in line)
    # ZeRO stage and recompute are columns of the table, and the cost objective shows its cost
    assert {"recompute", "zero", "$/Mtok"} <= set(header.split())
    assert "layout" not in r.stderr


def test_calibrate_without_scipy_is_a_one_line_hint(monkeypatch, capsys):
    # run as `python benchmarks/calibrate.py` runs it, in this process: scipy made unimportable
    monkeypatch.setitem(sys.modules, "scipy", None)
    monkeypatch.setitem(sys.modules, "scipy.optimize", None)
    monkeypatch.setattr(sys, "argv", ["calibrate.py"])
    monkeypatch.setattr(sys, "path", list(sys.path))  # the script puts the repository first on it
    monkeypatch.chdir(ROOT)
    with pytest.raises(SystemExit) as exc:  # any other exception is a traceback: it fails the test
        runpy.run_path("benchmarks/calibrate.py", run_name="__main__")
    out, err = capsys.readouterr()
    assert exc.value.code == 2 and "Traceback" not in err and out == ""
    assert err.strip().splitlines() == ["error: benchmarks/calibrate.py needs scipy: "
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
