"""`plan import` and `plan search` of a Qwen3-Next or Nemotron-H config.json with missing or malformed hybrid
keys (planner/specs/hf_hybrid.py): exit 2 naming the file and the key, never an internal error (exit 3)."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from planner.cli.main import app

from .test_hybrid import QWEN3_NEXT_HF


def _run(tmp_path, *args, drop=(), **keys):
    config = {k: v for k, v in {**QWEN3_NEXT_HF, **keys}.items() if k not in drop}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config, indent=2))
    r = CliRunner().invoke(app, [args[0], str(path), *args[1:]])
    return r, path


@pytest.mark.parametrize("command", [("import",), ("search", "dgx-h100-1024", "--gpus", "64", "--top", "1")])
def test_no_layer_types_and_no_interval_takes_qwen3nexts_default(tmp_path, command):
    # Before: TypeError ('NoneType' object is not iterable), exit 3. Qwen3NextConfig's full_attention_interval
    # defaults to 4: 48 layers -> 12 full-attention (*) and 36 DeltaNet (D) mixers, each with its MoE (-) layer.
    r, _ = _run(tmp_path, *command, drop=("full_attention_interval",))
    assert r.exit_code == 0, r.output
    if command[0] == "import":
        assert "full_attention_interval = 4, defaulted from Qwen3NextConfig" in r.output
        assert '"' + "D-D-D-*-" * 12 + '"' in r.output


@pytest.mark.parametrize("value", [0, -1, -4])
def test_a_full_attention_interval_below_one_is_refused(tmp_path, value):
    # Before: 0 was read as the default 4 (`every or 4`); -1 made every layer full attention ((i + 1) % -1 == 0).
    r, path = _run(tmp_path, "import", full_attention_interval=value)
    assert r.exit_code == 2, r.output
    assert f"{path}:" in r.output and "full_attention_interval: got " + str(value) in r.output
    assert "an integer >= 1" in r.output


def test_a_null_full_attention_interval_is_refused(tmp_path):
    r, path = _run(tmp_path, "import", full_attention_interval=None)
    assert r.exit_code == 2, r.output
    assert f"{path}:" in r.output and "field 'full_attention_interval' is null" in r.output


@pytest.mark.parametrize("act, said", [("", "got ''"), ("silu", "got 'silu'")])
def test_a_nemotron_h_activation_other_than_relu2_is_quoted(tmp_path, act, said):
    # Before: "mlp_hidden_act: got  (expected relu2 ...)": an empty string printed as nothing
    from .test_hybrid import NEMOTRON_H_HF

    path = tmp_path / "config.json"
    path.write_text(json.dumps({**NEMOTRON_H_HF, "mlp_hidden_act": act}, indent=2))
    r = CliRunner().invoke(app, ["import", str(path)])
    assert r.exit_code == 2, r.output
    assert f"{path}:" in r.output and f"mlp_hidden_act: {said} (expected relu2" in r.output
