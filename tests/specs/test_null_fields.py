"""A key given as null is not a missing key (issue 31, item 8): `plan import` said "missing key
'hidden_size'" for `"hidden_size": null`, which is there. Where null is no value transformers can
build with, it is refused as null; where transformers reads null as absent or off (DeepSeek's
q_lora_rank: no query LoRA; sliding_window: full attention; rope_scaling: none) it keeps that meaning.
The YAML and JSON spec loaders say the same of a required field left empty."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from planner.cli.main import app

from .test_hf import _app

ROOT = Path(__file__).resolve().parents[2]
HF = ROOT / "tests" / "data" / "hf"


def _write(tmp_path: Path, fixture: str, text: dict | None = None, **keys) -> Path:
    config = json.loads((HF / f"{fixture}.json").read_text())
    if text is not None:
        config["text_config"] = {**config["text_config"], **text}
    config.update(keys)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config, indent=2))
    return path


def _line(path: Path, key: str) -> int:
    return next(i for i, t in enumerate(path.read_text().splitlines(), 1) if f'"{key}"' in t)


@pytest.mark.parametrize("fixture, text, key", [
    ("llama", None, "hidden_size"),
    ("qwen3_moe", None, "num_experts"),  # required for a MoE (experts)
    ("gemma3", {"num_hidden_layers": None}, "num_hidden_layers"),  # in the nested text_config
])
def test_a_required_key_given_as_null_is_said_to_be_null(tmp_path, fixture, text, key):
    config = _write(tmp_path, fixture, text, **({} if text else {key: None}))
    r = CliRunner().invoke(_app(), ["import", str(config)])
    lines = r.output.strip().splitlines()
    assert r.exit_code == 2 and len(lines) == 1, r.output
    where = f"text_config.{key}" if text else key
    assert lines[0].startswith(f"error: {config}:{_line(config, key)}: {where}: field '{key}' is null"), r.output
    assert "expected an integer" in lines[0] and "missing" not in lines[0]  # once: "missing key"


def test_yarn_factor_null_is_null_not_missing(tmp_path):
    config = _write(tmp_path, "deepseek_v3", rope_scaling={"type": "yarn", "factor": None, "mscale": 1})
    r = CliRunner().invoke(_app(), ["import", str(config)])
    assert r.exit_code == 2, r.output
    assert "rope_scaling.factor: field 'factor' is null (expected YaRN's scaling factor, a number)" in r.output


@pytest.mark.parametrize("keys, field, value", [
    ({"q_lora_rank": None}, ("mla", "q_lora_rank"), None),  # DeepSeek-V2-Lite: a plain query projection
    ({"rope_scaling": None}, ("rope_mscale",), None),  # no YaRN: cos and sin unscaled (the spec's default)
])
def test_null_that_transformers_reads_as_absent_keeps_that_meaning(tmp_path, keys, field, value):
    out = tmp_path / "ds.yaml"
    r = CliRunner().invoke(_app(), ["import", str(_write(tmp_path, "deepseek_v3", **keys)), "-o", str(out)])
    assert r.exit_code == 0, r.output
    spec = yaml.safe_load(out.read_text())
    for part in field:
        spec = spec.get(part) if isinstance(spec, dict) else None
    assert spec is value


@pytest.mark.parametrize("suffix, text", [(".yaml", "hidden:"), (".yaml", "hidden: null"), (".json", None)])
def test_a_spec_file_with_a_required_field_null_says_null(tmp_path, suffix, text):
    source = (ROOT / "configs" / "models" / "gpt3-1.3b.yaml").read_text()
    path = tmp_path / f"m{suffix}"
    if text is not None:
        path.write_text("\n".join(text if t.startswith("hidden:") else t for t in source.splitlines()) + "\n")
    else:
        data = {**yaml.safe_load(source), "hidden": None}
        path.write_text(json.dumps(data, indent=2))
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if t.lstrip().startswith(("hidden", '"hidden"')))
    r = CliRunner().invoke(app, ["check", str(path)])
    assert r.exit_code == 2, r.output
    assert f"m{suffix}:{line}: hidden: field 'hidden' is null (expected an integer)" in r.output  # once: "wrong type: got null"
    assert "Traceback" not in r.output
    # (an absent key is still "missing key": tests/specs/test_hf.py)
