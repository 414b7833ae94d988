"""Issue 38: pictures took exit 3 (an internal error). As found: a model named with `$...$` in
`--plot`/`--timeline` (matplotlib's mathtext parsed the name and failed on `$\\frac{x$`), `MPLBACKEND`
set to Jupyter's inline backend or to any bad value, a matplotlib that raises on import. Now names are
drawn as spelled, no backend is involved (figures on the Agg canvas, planner/plots/canvas.py), and a
broken matplotlib is `error: cannot draw: ...`, exit 2. Every picture path is run through the CLI in
a subprocess, as a user runs it."""
from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from planner.cli.main import app
from planner.specs.loading import load_model

ROOT = Path(__file__).resolve().parents[2]
PLAN = [sys.executable, "-c", "from planner.cli.main import app; app()"]
# Fails in mathtext ("Expected \frac{num}{den}"); "$x^2$" alone would parse and draw x squared.
BAD_NAME = "bad $\\frac{x$ and $x^2$ model"
# Each picture path of the CLI: arguments after the model, the picture(s) and their documented size in
# pixels (docs/pictures.md: timeline 1600 x 1000, frontier 1500 x 650; docs/sweeps.md: MFU 1000 x 600).
PATHS = {
    "search --plot": (["dgx-a100-1024", "--gpus", "8", "--plot", "f.png"], "f.png", (1500, 650)),
    "estimate --timeline": (["dgx-a100-1024", "--gpus", "8", "--tp", "1", "--pp", "2", "--micro-batch", "1", "--vpp", "2",
                             "--timeline", "t.png"], "t.png", (1600, 1000)),
    "sweep --plot": (["--gpus", "8", "--workers", "1", "--quiet", "--plot", "pl"], "pl/mfu_vs_gpus.png", (1000, 600)),
}


def command(path: str, model: str) -> list[str]:
    verb = path.split()[0]
    args, _, _ = PATHS[path]
    return [verb, model, *args] if verb != "sweep" else [verb, "--models", model, *args]


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from the IHDR chunk (PNG spec, Sec. 11.2.2): bytes 16-24 of the file."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])


@pytest.fixture(scope="module")
def named(tmp_path_factory) -> Path:
    """gpt3-1.3b under a name mathtext cannot parse."""
    spec = load_model("gpt3-1.3b").model_dump(mode="json")
    path = tmp_path_factory.mktemp("model") / "named.yaml"
    path.write_text(yaml.safe_dump({**spec, "name": BAD_NAME}))
    return path


def plan(args: list[str], cwd: Path, **env) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    environ.update({"PYTHONPATH": str(ROOT), "COLUMNS": "200", **env})
    return subprocess.run(PLAN + args, cwd=cwd, capture_output=True, text=True, timeout=180, env=environ)


@pytest.mark.skipif(not __import__("importlib").util.find_spec("matplotlib"), reason="no matplotlib")
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("world", ["plain", "MPLBACKEND=nonsense", "MPLBACKEND=inline", "matplotlibrc usetex"])
def test_a_picture_of_a_dollar_name_in_any_environment_is_drawn(named, tmp_path, path, world):
    env = {"plain": {}, "MPLBACKEND=nonsense": {"MPLBACKEND": "nonsense"},
           "MPLBACKEND=inline": {"MPLBACKEND": "module://matplotlib_inline.backend_inline"},
           "matplotlibrc usetex": {"MPLCONFIGDIR": str(tmp_path)}}[world]
    # A user's matplotlibrc asking for LaTeX (absent here) and tight boxes: neither reaches the pictures.
    (tmp_path / "matplotlibrc").write_text("text.usetex: True\nsavefig.bbox: tight\n")
    r = plan(command(path, str(named)), tmp_path, **env)
    assert r.returncode == 0, r.stderr
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr
    _, picture, size = PATHS[path]
    assert png_size(tmp_path / picture) == size


@pytest.mark.parametrize("path", PATHS)
def test_a_matplotlib_that_fails_to_import_cannot_draw_exit_2(tmp_path, path):
    stub = tmp_path / "stub" / "matplotlib"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text('raise RuntimeError("broken on import")\n')
    r = plan(command(path, "gpt3-1.3b"), tmp_path, PYTHONPATH=f"{stub.parent}{os.pathsep}{ROOT}")
    assert r.returncode == 2, r.stderr
    [line] = [line for line in r.stderr.splitlines() if line.strip()]
    assert line.startswith("error: cannot draw: matplotlib fails to import (RuntimeError: broken on import)"), line
    assert r.stdout == ""  # said before the work, not after it


def test_names_are_drawn_as_spelled_and_only_the_timeline_subscripts_are_math(named, tmp_path, monkeypatch):
    """Every text drawn through the three paths, as matplotlib decides whether it is math (its
    _preprocess_math: the one place that does): a text holding the name never is."""
    pytest.importorskip("matplotlib")
    from matplotlib.text import Text

    seen: list[tuple[str, bool]] = []
    decide = Text._preprocess_math

    def spy(self, s):
        out = decide(self, s)
        seen.append((s, out[1]))
        return out

    monkeypatch.setattr(Text, "_preprocess_math", spy)
    monkeypatch.chdir(tmp_path)
    for path in PATHS:
        r = CliRunner().invoke(app, command(path, str(named)))
        assert r.exit_code == 0, r.output
    with_name = [math for s, math in seen if "x^2" in s]
    assert len(with_name) >= 3 and not any(with_name)  # titles, legend, tick labels: literal
    math = {s for s, is_math in seen if is_math}
    assert math and all(s.startswith("$") and "_{" in s for s in math)  # "$3_{1}$": micro-batch 3, chunk 1
