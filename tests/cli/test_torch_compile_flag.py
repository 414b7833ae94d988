"""`--torch-compile/--no-torch-compile` (plan estimate, plan search) and `torch_compile=` (planner.api): the
model spec's training.torch_compile stated on the command line, so the same JSON as the spec field; the
torchtitan export then says --compile.enable."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from planner import api
from planner.cli.main import app
from planner.errors import SpecError

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
LAYOUT = ["--gpus", "8", "--tp", "1", "--pp", "1", "--micro-batch", "1", "--zero", "3", "--framework", "torchtitan"]


def model_file(tmp_path: Path, **training) -> str:
    data = yaml.safe_load((ROOT / "configs" / "models" / "llama3-8b.yaml").read_text())
    data["training"] = {**data["training"], **training}
    path = tmp_path / "llama3-8b.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def plan_json(*args) -> dict:
    r = runner.invoke(app, [*args, "--json"])
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout)


def test_flag_is_the_spec_field(tmp_path):
    for value, flag in ((True, "--torch-compile"), (False, "--no-torch-compile")):
        stated = plan_json("estimate", model_file(tmp_path, torch_compile=value), "dgx-h100-1024", *LAYOUT)
        flagged = plan_json("estimate", model_file(tmp_path, torch_compile=not value), "dgx-h100-1024", *LAYOUT, flag)
        assert flagged == stated
    # torchtitan's blocks run their norms, RoPE and SwiGLU product op by op without it: slower
    eager = plan_json("estimate", model_file(tmp_path), "dgx-h100-1024", *LAYOUT)
    compiled = plan_json("estimate", model_file(tmp_path), "dgx-h100-1024", *LAYOUT, "--torch-compile")
    assert eager["step_time_s"] > compiled["step_time_s"]


def test_search_exports_compile_enable(tmp_path):
    r = runner.invoke(app, ["search", model_file(tmp_path), "dgx-h100-1024", "--gpus", "8", "--framework", "torchtitan",
                            "--torch-compile", "--export", "torchtitan"])
    assert r.exit_code == 0, r.output
    assert "--compile.enable" in r.stdout.splitlines()
    r = runner.invoke(app, ["search", model_file(tmp_path), "dgx-h100-1024", "--gpus", "8", "--framework", "torchtitan",
                            "--export", "torchtitan"])
    assert r.exit_code == 0 and "compile" not in r.stdout


def test_api_takes_a_bool_only(tmp_path):
    a = api.estimate(model_file(tmp_path), "dgx-h100-1024", gpus=8, tp=1, pp=1, micro_batch=1, zero=3,
                     framework="torchtitan", torch_compile=True)
    assert a.step_time_s < api.estimate(model_file(tmp_path), "dgx-h100-1024", gpus=8, tp=1, pp=1, micro_batch=1, zero=3,
                                        framework="torchtitan").step_time_s
    with pytest.raises(SpecError, match="--torch-compile: got the string 'yes'") as exc:
        api.search(model_file(tmp_path), "dgx-h100-1024", gpus=8, torch_compile="yes")
    assert exc.value.exit_code == 2
