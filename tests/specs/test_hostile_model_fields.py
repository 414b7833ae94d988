"""Model files a careless user writes for the hybrid and recomputation fields (planner/specs/model.py,
the messages of planner/specs/loading.py): exit 2, the file, the line, the field path, what was expected,
and nothing that is not so."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from planner.cli.main import app

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
runner = CliRunner()


def _search(tmp_path, base: str, edit) -> tuple[int, str, Path]:
    spec = yaml.safe_load((CONFIGS / "models" / f"{base}.yaml").read_text())
    edit(spec)
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    r = runner.invoke(app, ["search", str(path), "dgx-h100-1024", "--gpus", "8", "--top", "1"])
    return r.exit_code, r.output, path


def _line_of(path: Path, key: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if line.lstrip().startswith(key))


def test_an_empty_layer_pattern_says_non_empty_not_128_characters(tmp_path):
    # Before: "expected a non-empty string of at most 128 characters" (the names' bound; the pattern's is 10,000)
    code, out, path = _search(tmp_path, "nemotron-h-56b", lambda s: s.update(layer_pattern=""))
    assert code == 2
    assert f"{path}:{_line_of(path, 'layer_pattern:')}: layer_pattern:" in out
    assert "expected a non-empty string)" in out and "128" not in out


def test_a_layer_pattern_longer_than_its_bound_names_its_bound(tmp_path):
    # 10,001 layers: 'M-' x 5000 + 'M' is one past the pattern's 10,000 characters (layers is refused too)
    code, out, _ = _search(tmp_path, "nemotron-h-56b", lambda s: s.update(layer_pattern="M-" * 5000 + "M", layers=10_001))
    assert code == 2
    assert "expected a string of at most 10,000 characters" in out and "128" not in out


@pytest.mark.parametrize("modules, bad", [(["foo"], "'foo'"), ([1], "got 1"), (["Core_Attn"], "'Core_Attn'")])
def test_an_unknown_recompute_module_is_one_error(tmp_path, modules, bad):
    # Before: a second, false error followed: "Tuple should have at least 1 item after validation, not 0"
    code, out, path = _search(tmp_path, "llama3-8b", lambda s: s["training"].update(recompute_modules=modules))
    assert code == 2
    assert "training.recompute_modules.0:" in out and bad in out and "'core_attn'" in out
    assert "at least 1 item" not in out and out.count("error:") == 1


@pytest.mark.parametrize("modules", [["core_attn", "core_attn"], ["mlp", "layernorm", "mlp"], ["core_attn"] * 8])
def test_a_recompute_module_named_twice_is_refused(tmp_path, modules):
    # Before: [core_attn, core_attn] passed (priced once); eight core_attn said "at most 7 items"
    code, out, path = _search(tmp_path, "llama3-8b", lambda s: s["training"].update(recompute_modules=modules))
    assert code == 2
    twice = next(m for i, m in enumerate(modules) if m in modules[:i])
    assert f"{path}:{_line_of(path, 'recompute_modules:')}: training.recompute_modules:" in out
    assert f"recompute_modules lists '{twice}' twice" in out


@pytest.mark.parametrize("offload", ["none", "optimizer"])
def test_offload_layers_without_activation_offload_is_refused(tmp_path, offload):
    # Before: training.offload none (or optimizer) with offload_layers 5 passed and the count was ignored
    code, out, path = _search(tmp_path, "nemotron-h-56b",
                              lambda s: s["training"].update(offload=offload, offload_layers=5))
    assert code == 2
    assert f"{path}:{_line_of(path, 'offload_layers:')}: training.offload_layers:" in out
    assert f"offload {offload} moves none" in out


def test_a_plan_file_with_offload_layers_and_no_activation_offload_is_refused(tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text("kind: plan\nmodel: llama3-8b\ncluster: dgx-h100-1024\ngpus: 8\n"
                    "layout: {tp: 1, pp: 1, micro_batch: 1, offload: none, offload_layers: 5}\n")
    r = runner.invoke(app, ["check", str(plan)])
    assert r.exit_code == 2, r.output
    assert f"{plan}:5: layout.offload_layers:" in r.output and "offload none moves none" in r.output
