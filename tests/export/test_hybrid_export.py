"""Exports of hybrid models (planner/specs/hybrid.py): Megatron-LM core_v0.15.0's pretrain_mamba.py flags for
Nemotron-H, and a clear refusal (exit 2) where the framework has no equivalent."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from planner.cli.main import app
from planner.export.frameworks import framework_mask
from planner.layout.space import single_layout
from planner.specs.loading import load_model


def _export(model: str, kind: str, *extra: str):
    return CliRunner().invoke(app, ["search", model, "dgx-h100-1024", "--gpus", "64", "--export", kind, *extra])


def test_nemotron_h_megatron_flags():
    out = _export("nemotron-h-56b", "megatron", "--pp", "2").output
    for flag in ("--spec megatron.core.models.mamba.mamba_layer_specs mamba_stack_spec", "--is-hybrid-model",
                 "--mamba-num-heads 256", "--mamba-head-dim 64", "--mamba-state-dim 256", "--mamba-num-groups 8",
                 "--squared-relu", "--hybrid-override-pattern 'M-M-M-M*-M",
                 "--position-embedding-type none"):  # Nemotron-H has no position embedding (Bridge's providers: none)
        assert flag in out, (flag, out)
    assert "pretrain_mamba.py" in out and "rope" not in out


@pytest.mark.parametrize("model, kind, message", [
    ("nemotron-h-56b", "torchtitan", "torchtitan has no Mamba-2 or gated DeltaNet layers"),
    ("nemotron-h-56b", "deepspeed", "deepspeed has no Mamba-2 or gated DeltaNet layers"),
    ("nemotron-h-56b", "megatron-bridge", "not hybrid ones"),
    ("nemotron-h-56b", "nemo", "not hybrid ones"),
    ("qwen3-next-80b-a3b", "megatron", "no gated DeltaNet layer"),
])
def test_frameworks_without_the_layers_refuse(model, kind, message):
    result = _export(model, kind)
    assert result.exit_code == 2 and message in result.output, result.output


def test_megatron_splits_a_pattern_evenly_without_interleaving():
    # core_v0.15.0 MambaStack: num_layers // pp layers a rank, no vpp: 118 layers run at pp 2, not at pp 4
    m = load_model("nemotron-h-56b")
    ok = [bool(framework_mask("megatron", single_layout(tp=1, pp=p, vpp=v, dp=1, micro_batch=1, num_microbatches=8), m)[0][0])
          for p, v in ((2, 1), (4, 1), (2, 2))]
    assert ok == [True, False, False]


def _estimate(*extra: str):
    return CliRunner().invoke(app, ["estimate", "nemotron-h-56b", "dgx-h100-1024", "--gpus", "64", "--tp", "4",
                                    "--micro-batch", "1", *extra])


def test_an_uneven_split_of_a_pattern_is_priced_and_not_exported_to_megatron():
    # --stage-layers of a hybrid model is priced (each stage by the kinds it holds) ...
    priced = _estimate("--pp", "2", "--stage-layers", "58,60", "--recompute", "full")
    assert priced.exit_code == 0 and "58 60" in priced.output, priced.output
    # ... but core_v0.15.0's MambaStack gives each rank num_layers // pp = 59 layers: no flags for 58 + 60
    refused = _estimate("--pp", "2", "--stage-layers", "58,60", "--recompute", "full", "--export", "megatron")
    assert refused.exit_code == 2 and "the uneven split 58 60 of a hybrid model" in refused.output, refused.output
    # Megatron-LM main would take the split as '|' in the pattern: the first 58 characters, then the other 60
    pattern = load_model("nemotron-h-56b").layer_pattern
    assert pattern[:58] + "|" + pattern[58:] in refused.output.replace("\n", "")
    # the even split exports as before
    even = _estimate("--pp", "2", "--stage-layers", "59,59", "--recompute", "full", "--export", "megatron")
    assert even.exit_code == 0 and "--hybrid-override-pattern" in even.output and "--decoder-first" not in even.output


def test_the_shown_split_of_a_hybrid_names_no_megatron_layout():
    # the default split of 118 layers on pp 4 is 30 30 29 29: Megatron's --pipeline-model-parallel-layout
    # is not read by pretrain_mamba.py, so the text says so instead of giving it
    out = _estimate("--pp", "4").output
    assert "30x2 29x2" in out and "--pipeline-model-parallel-layout" not in out and "MambaStack" in out


def test_a_search_for_megatron_keeps_a_patterns_even_split():
    # without an export the search splits Nemotron-H pp 2 unevenly (CP-SAT, planner/refine.py: 60 58, the
    # logits' rank lighter); for Megatron-LM, which runs the even split only, it keeps 59 59
    free = CliRunner().invoke(app, ["search", "nemotron-h-56b", "dgx-h100-1024", "--gpus", "64", "--pp", "2", "--json"])
    assert free.exit_code == 0, free.output
    assert json.loads(free.output)["best"]["layout"]["stage_layers"] == [60, 58]
    out = _export("nemotron-h-56b", "megatron", "--pp", "2")
    assert out.exit_code == 0 and "--hybrid-override-pattern" in out.output
