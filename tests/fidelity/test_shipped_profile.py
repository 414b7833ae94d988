"""The shipped example profile is what `plan calibrate` writes from the shipped runs file now: a
change of the shipped constants that moves it says so here (regenerate with the command below)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from planner.fidelity.own import calibrate
from planner.fidelity.profile import profile_data
from planner.fidelity.runs import load_runs

ROOT = Path(__file__).resolve().parents[2]
REGENERATE = "plan calibrate configs/runs/dgxc-h100-gpt3.yaml -o configs/profiles/dgxc-h100-gpt3.yaml"


def test_the_shipped_profile_is_what_calibrate_writes_now():
    shipped = yaml.safe_load((ROOT / "configs" / "profiles" / "dgxc-h100-gpt3.yaml").read_text())
    now = profile_data(calibrate(load_runs(ROOT / "configs" / "runs" / "dgxc-h100-gpt3.yaml")), "dgxc-h100-gpt3")
    for group in ("hardware", "stack_constants", "memory"):
        for name, c in now[group].items():
            assert shipped[group][name]["value"] == pytest.approx(c["value"], rel=1e-4), f"{name}: {REGENERATE}"
    for a, b in zip(shipped["runs"], now["runs"]):
        assert a["fitted_step_time_s"] == pytest.approx(b["fitted_step_time_s"], rel=1e-4), REGENERATE
