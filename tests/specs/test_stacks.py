"""Software-stack profiles: shipped files, `training.stack`, overrides, `--stack`, bad names."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli.main import app
from planner.errors import SpecError, SpecErrors
from planner.specs.loading import load_model, load_stack, shipped_names
from planner.search import with_stack
from planner.specs import ModelSpec

STACKS = ("deepspeed-zero3", "megatron-core", "megatron-deepspeed", "megatron-lm-2022", "pytorch-fsdp")


def test_the_five_stacks_of_the_issue_are_shipped_and_valid():
    assert set(STACKS) <= set(shipped_names("stack"))
    for name in STACKS:
        assert load_stack(name).name == name


def test_a_model_without_a_stack_runs_on_megatron_core():
    model = ModelSpec.model_validate(dict(name="m", layers=2, hidden=64, heads=4, vocab=128, seq_len=16,
                                          training=dict(global_batch=4)))
    assert model.training.stack.name == "megatron-core"
    # megatron-core: flash attention, TP and DP overlap (configs/stacks/megatron-core.yaml)
    assert (model.training.attention, model.training.tp_comm_overlap, model.training.dp_comm_overlap) == ("flash", True, True)


def test_the_stack_sets_kernels_and_overlap_and_the_model_file_overrides():
    base = dict(name="m", layers=2, hidden=64, heads=4, vocab=128, seq_len=16)
    old = ModelSpec.model_validate({**base, "training": dict(global_batch=4, stack="megatron-lm-2022")})
    assert (old.training.attention, old.training.tp_comm_overlap, old.training.dp_comm_overlap) == ("standard", False, False)
    mixed = ModelSpec.model_validate({**base, "training": dict(global_batch=4, stack="megatron-lm-2022", attention="flash")})
    assert mixed.training.attention == "flash" and mixed.training.tp_comm_overlap is False


def test_with_stack_keeps_what_the_model_file_states():
    base = dict(name="m", layers=2, hidden=64, heads=4, vocab=128, seq_len=16)
    model = ModelSpec.model_validate({**base, "training": dict(global_batch=4, attention="standard")})
    moved = with_stack(model, "pytorch-fsdp")
    assert moved.training.stack.name == "pytorch-fsdp"
    assert moved.training.attention == "standard"  # stated in the file: kept
    assert moved.training.tp_comm_overlap is False  # not stated: the new stack's (pytorch-fsdp: no TP overlap)
    assert with_stack(model, None) is model


def test_unknown_stack_in_a_model_file_names_file_line_and_choices(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("name: m\nlayers: 2\nhidden: 64\nheads: 4\nvocab: 128\nseq_len: 16\n"
                    "training:\n  global_batch: 4\n  stack: megatron-cor\n")
    with pytest.raises((SpecError, SpecErrors)) as exc:
        load_model(str(path))
    text = str(exc.value)
    assert "megatron-cor" in text and "did you mean 'megatron-core'" in text and ":9" in text


def test_cli_stack_option_and_its_errors():
    runner = CliRunner()
    res = runner.invoke(app, ["search", "gpt3-1.3b", "dgx-a100-40gb-64", "--stack", "pytorch-fsdp", "--json", "--top", "1"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["stack"] == "pytorch-fsdp"
    bad = runner.invoke(app, ["search", "--stack", "fsdp"])
    assert bad.exit_code == 2 and "--stack" in bad.output and "pytorch-fsdp" in bad.output
    assert "Traceback" not in bad.output


def test_search_json_carries_an_error_band():
    res = CliRunner().invoke(app, ["search", "gpt3-1.3b", "dgx-a100-40gb-64", "--json", "--top", "1"])
    best = json.loads(res.stdout)["best"]
    # megatron-core was calibrated on A100 80GB and H100, not on the 40GB part: its runs there, widened
    assert 0 < best["step_time_error_pct"] < 100
    assert "megatron-core" in best["step_time_error_basis"]


def test_plan_check_accepts_a_stack_file(tmp_path):
    from planner.check import check_file

    path = tmp_path / "s.yaml"
    path.write_text("kind: stack\nname: mine\nlayer_overhead_us: 10\nstep_overhead_s: 0.1\n")
    assert check_file(str(path)) == []
    path.write_text("kind: stack\nname: mine\nlayer_overhead_us: -1\nstep_overhead_s: 0.1\n")
    assert check_file(str(path))[0].path == "layer_overhead_us"


def test_an_old_gpu_preset_is_told_where_its_software_constants_went(tmp_path):
    from planner.specs.loading import load_gpu

    text = (Path(__file__).resolve().parents[2] / "configs" / "gpus" / "a100-sxm-80gb.yaml").read_text()
    path = tmp_path / "old.yaml"
    path.write_text(text.replace("efficiency:\n", "efficiency:\n  layer_overhead_us: 83\n", 1))
    with pytest.raises((SpecError, SpecErrors)) as exc:
        load_gpu(str(path))
    assert "moved from the GPU preset to the software-stack profile" in str(exc.value)


def test_loss_passes_are_counted_in_the_stacks_code_not_fitted():
    # Megatron's vocab_parallel_cross_entropy per fp32 logit: forward cast 2 + 4, max 4, subtract
    # 4 + 4, exp 4 + 4, sum 4, normalise 4 + 4 = 38 B; backward scale 4 + 4, cast 4 + 2 = 14 B. The
    # planner charges passes x 4 B forward and as many backward: 52 / (2 x 4) = 6.5 passes.
    megatron = (38 + 14) / (2 * 4)
    # llm-foundry's fused_crossentropy (flash-attn Triton): 16-bit logits read forward (2 B), read and
    # gradient written backward (2 + 2 B): 6 / (2 x 4) = 0.75
    fused = (2 + 2 + 2) / (2 * 4)
    for name, passes in (("megatron-core", megatron), ("megatron-lm-2022", megatron),
                         ("megatron-deepspeed", megatron), ("deepspeed-zero3", megatron), ("pytorch-fsdp", fused)):
        stack = load_stack(name)
        for gpu in ("a100-sxm-80gb", "h100-sxm-80gb", "gb200"):
            assert stack.for_gpu(gpu).loss_fp32_passes == passes, (name, gpu)
