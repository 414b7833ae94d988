"""The world failing at the CLI's edge (issue 31, items 4 and 6), reproduced as found: real `/dev/full`,
a stdout closed by the shell (`>&-`), terminals that cannot encode `±`, an unreadable folder of shipped
specs. Each is one line on stderr and a documented exit status, never a traceback or exit 0 with the
output gone. The processes run side by side to keep the file fast."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLAN = [sys.executable, "-c", "from planner.cli.main import app; app()"]
SMALL = ["search", "gpt3-1.3b", "dgx-a100-1024", "--gpus", "8", "--top", "1"]
HF = str(next((ROOT / "configs" / "hf").glob("*.json")))

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")


def _start(args: list[str], *, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env: dict | None = None,
           closed_stdout: bool = False, cwd=None) -> subprocess.Popen:
    cmd = PLAN + args
    if closed_stdout:  # exactly the shell's `>&-`: fd 1 is not open when Python starts
        cmd = ["sh", "-c", 'exec "$@" >&-', "sh"] + cmd
    return subprocess.Popen(cmd, stdout=stdout, stderr=stderr, text=True, cwd=cwd,
                            env={**os.environ, "COLUMNS": "200", **(env or {})})


def _finish(procs: dict) -> dict:
    done = {}
    for name, p in procs.items():
        out, err = p.communicate(timeout=120)
        done[name] = (p.returncode, out or "", err or "")
    return done


def _one_line(err: str) -> None:
    assert "Traceback" not in err and "internal error" not in err, err
    assert len(err.strip().splitlines()) == 1, err


# `LC_ALL=C` alone gives UTF-8 (PEP 538/540 coerce the C locale); these keep it ASCII, as older systems do.
C_LOCALE = {"LC_ALL": "C", "LANG": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0", "PYTHONIOENCODING": ""}
UNREADABLE = """import io, os, sys
from planner.cli.main import app
sys.stderr = io.StringIO()
app(['search', '/nonexistent/x.yaml'], standalone_mode=False)  # every module of the path read while we may
sys.stderr = sys.__stderr__
if os.geteuid() == 0:  # root reads every folder: drop to nobody
    os.setgid(65534)
    os.setuid(65534)
app(['search', 'gpt3-1.3b', '--gpus', '8'])
"""


def _config_dir() -> Path:
    """Shipped specs (in /tmp, which nobody may enter) whose models/ folder the user cannot read."""
    base = Path(tempfile.mkdtemp(dir="/tmp"))
    os.chmod(base, 0o755)
    for kind in ("gpus", "clusters", "stacks"):
        shutil.copytree(ROOT / "configs" / kind, base / kind)
    (base / "models").mkdir()
    shutil.copy(ROOT / "configs" / "models" / "gpt3-1.3b.yaml", base / "models")
    os.chmod(base / "models", 0o000 if os.geteuid() else 0o700)
    return base


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every process of this file, started at once (each spends a second importing)."""
    out = tmp_path_factory.mktemp("out") / "spec.yaml"
    config = _config_dir()
    try:
        with open("/dev/full", "w") as full:
            procs = {f"full {a[0]}": _start(a, stdout=full) for a in (["--help"], ["--version"], SMALL + ["--json"])}
            procs["stderr full"] = _start(["search", "missing.yaml"], stderr=full)
            procs.update({f"closed {a[0]}": _start(a, closed_stdout=True) for a in (["schema"], SMALL, ["import", HF])})
            procs["closed import -o"] = _start(["import", HF, "-o", str(out)], closed_stdout=True)
            procs["ascii"] = _start(SMALL, env={"PYTHONIOENCODING": "ascii"})
            procs["C"] = _start(["estimate", "gpt3-1.3b", "dgx-a100-1024", "--tp", "1", "--pp", "1", "--micro-batch",
                                 "1", "--gpus", "8"], env=C_LOCALE)
            procs["unreadable"] = subprocess.Popen([sys.executable, "-c", UNREADABLE], stdout=subprocess.PIPE,
                                                   stderr=subprocess.PIPE, text=True, cwd="/tmp",
                                                   env={**os.environ, "PLANNER_CONFIG_DIR": str(config)})
            done = _finish(procs)
    finally:
        os.chmod(config / "models", 0o755)
        shutil.rmtree(config)
    done["written"] = out.read_text() if out.exists() else ""
    return done


def test_full_or_closed_stdout_is_one_line_and_exit_2(runs):
    for name in ("full --help", "full --version", "full search", "closed schema", "closed search", "closed import"):
        rc, _, err = runs[name]
        assert rc == 2, (name, rc, err)  # the output is gone: never exit 0, never a traceback (exit 1 or 3)
        _one_line(err)
        assert "cannot write the output to stdout" in err, err
        assert ("closed" if name.startswith("closed") else "No space left") in err, err


def test_full_stderr_keeps_the_exit_status(runs):
    assert runs["stderr full"][0] == 2  # the error was said where it could not be read; the status stands


def test_a_file_output_works_with_stdout_closed(runs):
    rc, _, err = runs["closed import -o"]
    assert rc == 0, err  # nothing was meant for stdout: closing it loses nothing
    assert runs["written"].strip()


def test_terminals_that_cannot_encode(runs):
    """`plan sweep` under the C locale: tests/sweep/test_sweep_bounds.py."""
    for name in ("ascii", "C"):
        rc, out, err = runs[name]
        assert rc == 0, (name, err)
        assert "Traceback" not in err and "UnicodeEncodeError" not in err, (name, err)
        out.encode("ascii")  # what reached the terminal is what it can show
        assert "+/-" in out and "\\xb1" not in out  # `step time ±` spelled in ASCII


def test_unreadable_folder_of_shipped_specs(runs):
    """PLANNER_CONFIG_DIR/models/ the user may not read: one line and exit 2, not PermissionError."""
    rc, _, err = runs["unreadable"]
    assert rc == 2, err
    _one_line(err)
    assert "models/gpt3-1.3b.yaml" in err and "permission denied" in err.lower()
