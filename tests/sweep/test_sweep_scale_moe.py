"""Found in the adversarial re-run of issue 31 (item 3, exit 3 on valid-looking input): `plan sweep
--scale-model deepseek-v3 --params 1e11,2e11 --gpus 64` printed "internal error: ValidationError ...
moe.dense_layers (3) is more than the 1 layers": a family is grown from one- and two-layer shapes,
which a base with dense first layers cannot have. Now bad input naming scale_model.base, exit 2."""
from __future__ import annotations

import subprocess
import sys

PLAN = [sys.executable, "-c", "from planner.cli.main import app; app()"]


def test_scaling_a_base_with_dense_first_layers_is_bad_input(tmp_path):
    r = subprocess.run(PLAN + ["sweep", "--scale-model", "deepseek-v3", "--params", "1e11,2e11", "--gpus", "64"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr  # once: 3, "internal error: ValidationError"
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("error: scale_model.base: cannot scale deepseek-v3: its first 3 layers are dense"), last
