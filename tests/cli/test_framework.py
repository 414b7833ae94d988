"""`--framework` on search and estimate (issue 30): only layouts the framework runs, priced with its
stack, and never another framework's settings."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from planner.cli.main import app
from planner.export.frameworks import FRAMEWORK_STACK, framework_mask
from planner.search import search
from planner.specs.loading import load_cluster, load_model
from planner.search import with_stack


def run(*args):
    return CliRunner().invoke(app, list(args))


@pytest.mark.parametrize("model,gpus", [("deepseek-v3", "512"), ("qwen3-30b-a3b", "64"), ("mixtral-8x7b", "64"),
                                        ("llama3.1-8b", "64")])
def test_a_torchtitan_search_lists_and_exports_only_what_torchtitan_runs(model, gpus):
    m = with_stack(load_model(model), FRAMEWORK_STACK["torchtitan"])
    r = search(m, load_cluster("dgx-h100-1024"), gpus=int(gpus), top_k=3, framework="torchtitan", split_top=0)
    ok, reason = framework_mask("torchtitan", r.scores.layouts)
    assert ok.all(), set(reason.tolist())  # every scored row, chosen or not
    # ... and its settings are printed (exit 0), never refused (exit 2) as unrunnable by torchtitan
    out = run("search", model, "dgx-h100-1024", "--gpus", gpus, "--framework", "torchtitan", "--export", "torchtitan")
    assert out.exit_code == 0, out.stderr
    assert "--parallelism.expert_parallel_degree" in out.stdout or model == "llama3.1-8b"


def test_the_framework_sets_the_stack_unless_stack_is_given():
    out = run("search", "llama3.1-8b", "dgx-h100-1024", "--gpus", "8", "--framework", "torchtitan", "--top", "1")
    assert out.exit_code == 0 and "stack: torchtitan" in out.stdout
    out = run("search", "llama3.1-8b", "dgx-h100-1024", "--gpus", "8", "--framework", "torchtitan", "--stack",
              "pytorch-fsdp", "--top", "1")
    assert out.exit_code == 0 and "stack: pytorch-fsdp" in out.stdout


def test_another_frameworks_export_or_an_unknown_framework_is_bad_input():
    out = run("search", "llama3.1-8b", "dgx-h100-1024", "--gpus", "8", "--framework", "torchtitan", "--export", "megatron")
    assert out.exit_code == 2 and "--export megatron with --framework torchtitan" in out.stderr
    out = run("search", "llama3.1-8b", "dgx-h100-1024", "--gpus", "8", "--framework", "jax")
    assert out.exit_code == 2 and "no framework named 'jax'" in out.stderr


def test_estimate_refuses_a_layout_the_framework_cannot_run():
    # DeepSpeed's pipeline engine refuses ZeRO 2/3 (runtime/pipe/engine.py, v0.19.5): pp 2 with ZeRO 3
    args = ["estimate", "llama3.1-8b", "dgx-h100-1024", "--gpus", "16", "--tp", "1", "--pp", "2", "--micro-batch", "1"]
    out = run(*args, "--zero", "3", "--framework", "deepspeed")
    assert out.exit_code == 2 and "deepspeed cannot run this layout" in out.stderr
    assert run(*args, "--zero", "1", "--framework", "deepspeed").exit_code in (0, 1)  # runs: scored


# Restrictions that read the model (issue 38): torchtitan has no FP16, DeepSpeed refuses native MoE with ZeRO-3.
# Found as a user meets them: a --framework search that proposed what the framework stops on at start-up.
def test_a_torchtitan_search_of_an_fp16_model_is_refused_naming_the_precision():
    out = run("search", "llama3.1-8b", "dgx-h100-1024", "--gpus", "8", "--framework", "torchtitan", "--precision", "fp16")
    assert out.exit_code == 2, out.stdout
    assert "--framework" in out.stderr and "no FP16" in out.stderr and out.stdout == ""
    # estimate of a layout torchtitan would run in bf16
    args = ["estimate", "llama3.1-8b", "dgx-h100-1024", "--gpus", "8", "--tp", "1", "--pp", "1", "--micro-batch", "1",
            "--zero", "2", "--framework", "torchtitan"]
    assert run(*args).exit_code in (0, 1)
    out = run(*args, "--precision", "fp16")
    assert out.exit_code == 2 and "torchtitan cannot run this layout" in out.stderr and "no FP16" in out.stderr


@pytest.mark.parametrize("model", ["mixtral-8x7b", "qwen3-30b-a3b"])
def test_a_deepspeed_search_of_a_moe_model_never_proposes_zero3(model):
    # without the model's restriction, ZeRO-3 was 17 of Mixtral's first 100 layouts and 47 of Qwen3-30B-A3B's
    out = run("search", model, "dgx-h100-1024", "--gpus", "64", "--framework", "deepspeed", "--top", "100", "--json")
    assert out.exit_code == 0, out.stderr
    zeros = [r["layout"]["zero"] for r in json.loads(out.stdout)["results"]]
    assert len(zeros) == 100 and 3 not in zeros
    # ZeRO-3 asked for: no layout in a search (--zero is a constraint, exit 1), DeepSpeed's refusal in estimate
    out = run("search", model, "dgx-h100-1024", "--gpus", "64", "--framework", "deepspeed", "--zero", "3")
    assert out.exit_code == 1 and "no feasible layout" in out.stdout
    out = run("estimate", model, "dgx-h100-1024", "--gpus", "64", "--framework", "deepspeed", "--zero", "3", "--tp", "2",
              "--pp", "1", "--ep", "8", "--micro-batch", "1")
    assert out.exit_code == 2 and "refuses its native MoE layers with ZeRO-3" in out.stderr
    # a dense model keeps ZeRO-3
    out = run("search", "llama3.1-8b", "dgx-h100-1024", "--gpus", "64", "--framework", "deepspeed", "--zero", "3",
              "--top", "1", "--json")
    assert out.exit_code == 0 and json.loads(out.stdout)["best"]["layout"]["zero"] == 3


@pytest.mark.parametrize("flag", [("--export", "torchtitan"), ("--framework", "torchtitan")])
def test_estimate_for_torchtitan_defaults_zero_to_fsdp(flag):
    # torchtitan has no ZeRO-1: with dp 16 and no --zero, estimate's default is torchtitan's own
    # (FSDP over every data-parallel rank: data_parallel_shard_degree 16), not a refusal
    out = run("estimate", "llama3.1-8b", "dgx-h100-1024", "--gpus", "16", "--tp", "1", "--pp", "1", "--micro-batch", "1",
              *flag, *(["--json"] if flag[0] == "--framework" else []))
    assert out.exit_code == 0, out.stderr
    if flag[0] == "--export":
        assert "--parallelism.data_parallel_shard_degree=16" in out.stdout
    else:
        assert json.loads(out.stdout)["layout"]["zero"] == 3
