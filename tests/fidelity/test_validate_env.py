"""`plan validate` with a PLANNER_CONFIG_DIR lacking the stacks the published runs used (issue 38):
exit 2 naming the case, the folder and the missing stack, not exit 3 (a pydantic ValidationError)."""
from __future__ import annotations

import shutil
from pathlib import Path

from typer.testing import CliRunner

from planner.cli.main import app

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_validate_without_stacks_is_exit_2_naming_the_folder(tmp_path, monkeypatch):
    for kind in ("gpus", "clusters", "models"):
        shutil.copytree(CONFIGS / kind, tmp_path / kind)
    monkeypatch.setenv("PLANNER_CONFIG_DIR", str(tmp_path))
    r = CliRunner().invoke(app, ["validate"])
    assert r.exit_code == 2, r.output
    assert "internal error" not in r.stderr
    assert "cannot replay calibration case" in r.stderr and str(tmp_path) in r.stderr
    assert "unknown software stack" in r.stderr and "PLANNER_CONFIG_DIR" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
