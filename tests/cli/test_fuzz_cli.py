"""Every argument and option of every `plan` command, fed hostile values through the real CLI
(issue #15): the exit status is 0, 1 or 2 (never 3, never a traceback), 2 for a number beyond an
option's bounds (NaN, infinities, 1e30, 2**63), the output stays small and every call returns quickly.

The commands and their parameters are read from the typer app, so a new command or option is
fuzzed without editing this file (a new command needs a cheap base invocation in BASE, which a
test asks for). Values that name files get file-specific hostile values as well: a directory, a
missing file, and a FIFO (in a subprocess with a timeout: opening a FIFO can block for ever).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import typer.main
import typer.testing
from typer.testing import CliRunner

from planner.cli.main import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
GROUP = typer.main.get_command(app)
COMMANDS = {name: GROUP.get_command(None, name) for name in GROUP.list_commands(None)}  # each loaded (lazily) now

HOSTILE = ("0", "-1", "nan", "inf", "-inf", "1e30", str(2**63), "1" + "0" * 400, "", "x" * 10_000,
           "[red]x[/red]", ":fire:", "a\nb", "../../etc/passwd")
# Beyond every numeric option's bounds (all are finite and below 1e30): bad input, exit 2.
OUT_OF_RANGE = ("nan", "inf", "-inf", "1e30", str(2**63), "1" + "0" * 400)
# For a file or folder, numbers are just names: the values that stress a path instead (and, in
# the test, a directory, a file in a missing folder and a missing file).
PATH_HOSTILE = ("", "x" * 10_000, "[red]x[/red]", ":fire:\na", "../../etc/passwd")
MAX_OUTPUT = 20_000  # bytes of stdout + stderr
MAX_SECONDS = 20.0  # per call: catches a hang, not a slow machine (drawing sweep plots takes ~3-6 s under load)

# A cheap invocation of each command: its positional arguments by name, then options.
BASE: dict[str, tuple[dict, list[str]]] = {
    "search": ({"model": "gpt3-1.3b", "cluster": "dgx-a100-1024"}, ["--gpus", "8", "--top", "2"]),
    "estimate": ({"model": "gpt3-1.3b", "cluster": "dgx-a100-1024"},
                 ["--gpus", "8", "--tp", "1", "--pp", "1", "--micro-batch", "1"]),
    "validate": ({}, []),
    "check": ({"paths": str(CONFIGS / "models" / "gpt3-1.3b.yaml")}, []),
    "schema": ({"kind": "model"}, []),
    "list": ({"kind": "models"}, []),
    "sweep": ({}, ["--models", "gpt3-1.3b", "--cluster", "dgx-a100-1024", "--gpus", "8", "--quiet", "--workers", "1"]),
    "allocate": ({"jobs_file": str(CONFIGS / "jobs" / "three-jobs.yaml"), "cluster": "dgx-a100-1024"}, []),
    "import": ({"config": str(CONFIGS / "hf" / "qwen3-30b-a3b.json")}, []),
    # one logged run: a one-constant fit (the shipped runs file has five, ~3 s a call)
    "calibrate": ({"runs": str(ROOT / "tests" / "data" / "logs" / "megatron.log")}, ["--cluster", "dgx-h100-1024"]),
    "replan": ({"model": "gpt3-1.3b", "cluster": "dgx-a100-1024"},
               ["--gpus", "16", "--lost-gpus", "8", "--tp", "1", "--pp", "1", "--micro-batch", "1"]),
    "runs": ({}, ["import", str(ROOT / "tests" / "data" / "logs" / "megatron.log"), "--cluster", "dgx-h100-1024"]),
}
# Parameters whose value names a file or folder (besides those typed Path): (read or write, FIFO name).
FILE_PARAMS = {"model": "fifo.yaml", "cluster": "fifo.yaml", "paths": "fifo.yaml", "jobs_file": "fifo.yaml",
               "sweep_file": "fifo.yaml", "config": "fifo.json", "overlay": "fifo.yaml", "output": "fifo.yaml",
               "out_file": "fifo.csv", "plot": "fifo.png", "timeline": "fifo.png", "runs": "fifo.yaml",
               "profile": "fifo.yaml"}
# `plan sweep` belongs to another change (planner/sweep/, planner/cli/sweep.py); what it still fails:


def params(command: str):
    """(name, flags or None for an argument, its annotation) of every parameter that takes a value."""
    for p in COMMANDS[command].params:
        if getattr(p, "is_flag", False):
            continue  # a switch takes no value
        flags = [o for o in p.opts if o.startswith("-")]
        yield p.name, (flags[-1] if flags else None), p.type_descriptor.annotation


def argv(command: str, name: str, value: str) -> list[str]:
    """The base invocation of `command` with parameter `name` set to `value`."""
    positional, options = BASE[command]
    args = [value if p.name == name else positional[p.name] for p in COMMANDS[command].params
            if p.name in positional or (p.name == name and not any(o.startswith("-") for o in p.opts))]
    flag = next((f for n, f, _ in params(command) if n == name), None)
    if flag is not None:  # drop the base's own value of this option ("--gpus 8")
        opts = list(options)
        if flag in opts:
            i = opts.index(flag)
            del opts[i:i + 2]
        return [command, *args, *opts, flag, value]
    return [command, *args, *options]


def is_file_param(name: str, annotation) -> bool:
    return name in FILE_PARAMS or annotation is Path


CASES = [pytest.param(c, n, id=f"{c}-{f or n}") for c in COMMANDS for n, f, _ in params(c)]


def test_every_command_has_a_base_invocation(plan_once):
    assert set(COMMANDS) == set(BASE), "add a cheap invocation of the new command to BASE"
    for c in COMMANDS:
        args = argv(c, "", "")
        # `plan validate` takes no value to fuzz; its one run is shared with the tests that read it
        r = plan_once(*args) if args == ["validate"] else runner.invoke(app, args)
        assert r.exit_code in (0, 1), (c, r.output)


@pytest.fixture
def deep_cwd(tmp_path, monkeypatch):
    """A working folder three levels down in tmp_path: outputs named by the fuzz land there, and
    '../../etc/passwd' is tmp_path/a/etc/passwd (its folder missing), never a system file.
    typer's runner rebuilds the command tree on every call (9 ms, a third of a refused call):
    the fuzz reuses the one built above."""
    cwd = tmp_path / "a" / "b" / "c"
    cwd.mkdir(parents=True)
    monkeypatch.chdir(cwd)
    if hasattr(typer.testing, "_get_command"):
        monkeypatch.setattr(typer.testing, "_get_command", lambda _: GROUP)
    return cwd


@pytest.mark.parametrize("command, name", CASES)
def test_hostile_values_exit_0_1_or_2(deep_cwd, command, name):
    annotation = next(a for n, _, a in params(command) if n == name)
    values = list(HOSTILE)
    if is_file_param(name, annotation):
        values = [*PATH_HOSTILE, str(deep_cwd), str(deep_cwd / "missing" / "file.yaml"), str(deep_cwd / "missing.yaml")]
    failures = []
    for value in values:
        args = argv(command, name, value)
        started = time.perf_counter()
        r = runner.invoke(app, args)
        seconds = time.perf_counter() - started
        size = len(r.stdout_bytes) + len(r.stderr_bytes)
        refused = annotation not in (int, float) or value not in OUT_OF_RANGE or r.exit_code == 2
        if r.exit_code not in (0, 1, 2) or "Traceback" in r.output or size > MAX_OUTPUT or seconds > MAX_SECONDS \
                or not refused:
            failures.append(f"{value[:30]!r}: exit {r.exit_code}, {size} bytes, {seconds:.1f} s: {r.output[-300:]!r}")
    assert not failures, "\n".join(failures)


# Runs in a child process: each case is announced before it runs, so a hang names its case.
FIFO_RUNNER = """
import json, sys
from typer.testing import CliRunner
from planner.cli.main import app
for label, args in json.loads(sys.stdin.read()):
    print("start", label, flush=True)
    r = CliRunner().invoke(app, args)
    print("end", label, r.exit_code, "Traceback" in r.output, flush=True)
"""


def _fifo_cases(tmp_path: Path) -> list[tuple[str, list[str]]]:
    cases = []
    for command in COMMANDS:
        for name, flag, annotation in params(command):
            if is_file_param(name, annotation):
                fifo = str(tmp_path / FILE_PARAMS.get(name, "fifo"))
                cases.append((f"{command}:{flag or name}", argv(command, name, fifo)))
    return cases


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_a_fifo_in_place_of_a_file_never_hangs(tmp_path):
    """Every file parameter given a FIFO (opening one blocks until the other end opens): the
    cases run one after another in a child process with a deadline, each answering 0, 1 or 2."""
    for fifo in set(FILE_PARAMS.values()) | {"fifo"}:
        os.mkfifo(tmp_path / fifo)
    work = tmp_path / "work"
    work.mkdir()
    cases = _fifo_cases(tmp_path)
    assert len(cases) >= 12
    p = subprocess.Popen([sys.executable, "-c", FIFO_RUNNER], cwd=work, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = p.communicate(json.dumps(cases), timeout=40)
    except subprocess.TimeoutExpired:
        p.kill()
        stdout, stderr = p.communicate()
    lines = [line.split() for line in stdout.splitlines()]
    ended = {w[1]: (int(w[2]), w[3] == "True") for w in lines if w[0] == "end"}
    hung = [w[1] for w in lines if w[0] == "start" and w[1] not in ended]
    assert not hung, f"{hung[0]} did not return: a hang ({stderr[-300:]})"
    assert set(ended) == {label for label, _ in cases}, stderr[-300:]
    bad = {label: v for label, v in ended.items() if v[0] not in (0, 1, 2) or v[1]}
    assert not bad, bad
