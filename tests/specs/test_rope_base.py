"""A RoPE base below 1 is refused at load (issue 38). Found: `rope_theta: 0.5` was accepted and
`--export megatron` printed `--rotary-base 0` (Megatron's argument is an integer), exit 0."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from planner.cli.main import app
from planner.specs import ModelSpec

ROOT = Path(__file__).resolve().parents[2]


def _mixtral(tmp_path, theta) -> Path:
    data = yaml.safe_load((ROOT / "configs" / "models" / "mixtral-8x7b.yaml").read_text())
    data["rope_theta"] = theta
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("theta", [0.5, 0.999, 1e-9])
def test_a_rope_base_below_one_is_refused_naming_the_field(tmp_path, theta):
    r = CliRunner().invoke(app, ["search", str(_mixtral(tmp_path, theta)), "dgx-h100-1024", "--gpus", "8",
                                 "--export", "megatron"])
    assert r.exit_code == 2
    assert "rope_theta" in r.stderr and "at least 1" in r.stderr and "m.yaml:" in r.stderr
    assert "--rotary-base" not in r.stdout


@pytest.mark.parametrize("theta", [1, 10000, 1e6])
def test_bases_from_one_load(theta):
    data = yaml.safe_load((ROOT / "configs" / "models" / "mixtral-8x7b.yaml").read_text())
    assert ModelSpec.model_validate({**data, "rope_theta": theta}).rope_theta == theta


def test_the_schema_says_at_least_one():
    assert ModelSpec.model_json_schema()["properties"]["rope_theta"]["anyOf"][0]["minimum"] == 1
