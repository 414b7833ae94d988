"""StackSpec.own_runs is what --profile sets from a profile's runs (planner/fidelity/profile.py apply_profile);
a spec file stating it, in a model's inline stack or a stack file, is refused by name. Before, a file's errors
rows were refused as 'Input should be a valid tuple, got a list' (YAML has no tuples), and with no errors rows
the file's own_runs was taken (its memory_errors_pct unbounded: -5, 1e308)."""
from __future__ import annotations

import yaml
from typer.testing import CliRunner

from planner.cli.main import app
from planner.specs.shipped import stack_file

OWN = {"profile": "fake", "gpu": "h100-sxm-80gb", "errors": [[8, 8.0, 0.0], [1024, 8.0, 0.0]],
       "measured": {"gpus": [8, 1024], "params_b": [1, 100], "seq_len": [1024, 8192], "precisions": ["bf16"]}}


def stack(**own) -> dict:
    data = yaml.safe_load(open(stack_file("megatron-core")))
    return {**data, "name": "mine", "own_runs": {**OWN, **own}}


def model(tmp_path, **own):
    path = tmp_path / "model.yaml"
    path.write_text(yaml.safe_dump({"name": "m", "layers": 4, "hidden": 1024, "heads": 8, "vocab": 32000, "seq_len": 2048,
                                    "training": {"global_batch": 64, "stack": stack(**own)}}))
    return path


def test_a_models_inline_stack_with_own_runs_is_refused(tmp_path):
    for own in ({}, {"errors": [], "memory_errors_pct": [0.0, -5.0, 1e308]}):
        path = model(tmp_path, **own)
        line = path.read_text().splitlines().index("    own_runs:") + 1
        for args in (["estimate", path, "dgx-h100-1024", "--gpus", "8", "--tp", "1", "--pp", "1", "--micro-batch", "1"],
                     ["check", path]):
            r = CliRunner().invoke(app, [str(a) for a in args])
            assert r.exit_code == 2, r.output
            assert f"{path}:{line}" in r.output and "training.stack.own_runs" in r.output
            assert "set by --profile" in r.output and "valid tuple" not in r.output


def test_a_stack_file_with_own_runs_is_refused(tmp_path):
    path = tmp_path / "stack.yaml"
    path.write_text(yaml.safe_dump({"kind": "stack", **stack()}))
    r = CliRunner().invoke(app, ["check", str(path)])
    assert r.exit_code == 2 and "own_runs: own_runs is set by --profile" in r.output, r.output


def test_a_dumped_spec_with_own_runs_null_still_loads(tmp_path):
    # a model written from ModelSpec.model_dump states training.stack.own_runs: null (tests/plots writes gpt3-1.3b so)
    from planner.specs.loading import load_model

    path = tmp_path / "dumped.yaml"
    path.write_text(yaml.safe_dump(load_model("gpt3-1.3b").model_dump(mode="json")))
    assert "own_runs: null" in path.read_text()
    assert load_model(str(path)).training.stack.own_runs is None
