"""NVFP4 (issue 40 item 1) in each framework's own words, read back through the vendored parser texts
(tests/data/frameworks/: Megatron-LM core_v0.15.0 arguments.py --fp4-format choices ['e2m1'] and --fp4-recipe
choices ['nvfp4']; Megatron-Bridge v0.6.0 training/mixed_precision.py's @register'ed bf16_with_nvfp4_mixed; NeMo
v2.4.0 with Megatron Core core_v0.15.0's TransformerConfig fp4 / fp4_recipe), or refused where the framework has
no NVFP4 training (torchtitan v0.2.2, DeepSpeed)."""
from __future__ import annotations

import argparse
import shlex

import pytest

from planner.errors import SpecError
from planner.estimate import estimate_layout
from planner.export import export_settings
from planner.specs.loading import load_cluster, load_model

from .test_export import nemo_paths
from .test_roundtrip import megatron_model, parse_bridge, parse_megatron

LAYOUT = dict(gpus=64, tp=2, pp=1, micro_batch=2, zero=1)


def _nvfp4(name: str = "llama3.1-8b"):
    m = load_model(name)
    m = m.model_copy(update={"training": m.training.model_copy(update={"precision": "nvfp4"})})
    c = load_cluster("dgx-b200-1024")
    return m, c, estimate_layout(m, c, **LAYOUT)


def test_megatron_parses_the_fp4_flags_and_the_model():
    m, c, scored = _nvfp4()
    ns = parse_megatron(export_settings("megatron", scored, m, c).text)
    assert (ns.fp4, ns.fp4_recipe, ns.fp8, ns.bf16) == ("e2m1", "nvfp4", None, True)
    assert ns.fp4_param is False  # BF16 parameters with TE's NVFP4 copies, as priced
    assert {k: getattr(ns, k) for k in megatron_model(m)} == megatron_model(m)


def test_megatron_refuses_a_format_it_does_not_have():
    m, c, scored = _nvfp4()
    text = export_settings("megatron", scored, m, c).text
    with pytest.raises(argparse.ArgumentError, match="invalid choice"):
        parse_megatron(text.replace("--fp4-recipe nvfp4", "--fp4-recipe mxfp4"))


def test_megatron_bridge_names_its_nvfp4_recipe():
    m, c, scored = _nvfp4()
    export = export_settings("megatron-bridge", scored, m, c)
    recipe, got = parse_bridge(export.text)  # the reader checks the name against the vendored @register list
    assert recipe == "llama31_8b_pretrain_config" and got["mixed_precision"] == "bf16_with_nvfp4_mixed"
    assert any("fp4_param_gather" in n for n in export.notes)
    with pytest.raises(AssertionError):
        parse_bridge(export.text.replace("bf16_with_nvfp4_mixed", "bf16_with_mxfp4_mixed"))


def test_nemo_sets_megatron_cores_fp4_fields():
    m, c, scored = _nvfp4()
    lines = [shlex.split(line)[0] for line in export_settings("nemo", scored, m, c).text.splitlines()
             if not line.startswith("#")]
    assert "model.config.fp4=e2m1" in lines and "model.config.fp4_recipe=nvfp4" in lines
    assert "trainer.plugins.precision=bf16-mixed" in lines
    assert {"fp4", "fp4_recipe"} <= nemo_paths()["model.config"]  # TransformerConfig fields of core_v0.15.0
    assert "fp4" not in nemo_paths()["trainer.plugins"]  # MegatronMixedPrecision has none: hence model.config


@pytest.mark.parametrize("kind", ["torchtitan", "torchtitan@main"])
def test_torchtitan_converts_nvfp4_in_its_config_function(kind):
    m, c, scored = _nvfp4()
    export = export_settings(kind, estimate_layout(m, c, **{**LAYOUT, "zero": 3}), m, c)
    assert "--model.converters" not in export.text
    assert any(n.startswith("nvfp4 GEMMs:") and "NVFP4LinearConverter" in n for n in export.notes)


@pytest.mark.parametrize("kind, says", [("torchtitan@0.2", "torchtitan v0.2.2 has no NVFP4 training"),
                                        ("deepspeed", "DeepSpeed has no NVFP4 training")])
def test_frameworks_without_nvfp4_refuse_it(kind, says):
    m, c, _ = _nvfp4()
    scored = estimate_layout(m, c, **{**LAYOUT, "zero": 3 if kind.startswith("torchtitan") else 1})
    with pytest.raises(SpecError, match=says):
        export_settings(kind, scored, m, c)
