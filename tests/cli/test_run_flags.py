"""Flags that state a model spec's training field on the command line, so the same JSON as the spec field:
`--offload-layers N` (plan estimate, plan search, plan sweep) and `offload_layers=` (planner.api), out-of-range
values refused before any work, exit 2 on one line naming the flag (issue 40 item 2); `--torch-compile/
--no-torch-compile` (plan estimate, plan search, plan sweep) and `torch_compile=`, the torchtitan export then saying
--compile.enable."""
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
# Llama 3 8B (32 layers) on one DGX H100, tp 1 pp 1 mb 1, ZeRO 1 (tests/costs/test_offload_layers.py)
LAYOUT = ["--gpus", "8", "--tp", "1", "--pp", "1", "--micro-batch", "1", "--zero", "1", "--offload", "activations"]


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


def test_estimate_flag_is_the_spec_field(tmp_path):
    stated = plan_json("estimate", model_file(tmp_path, offload_layers=6), "dgx-h100-1024", *LAYOUT)
    flagged = plan_json("estimate", model_file(tmp_path), "dgx-h100-1024", *LAYOUT, "--offload-layers", "6")
    assert flagged == stated
    # 6 layers of 1.125 GiB of stored activations each go to the host: 6 x 1.125 = 6.75 GiB
    assert flagged["layout"]["offload_layers"] == 6 and flagged["memory_gib"]["host"] == pytest.approx(6.75)
    # the flag overrides what the spec says: 12 x 1.125 = 13.5 GiB
    over = plan_json("estimate", model_file(tmp_path, offload_layers=6), "dgx-h100-1024", *LAYOUT,
                     "--offload-layers", "12")
    assert over["layout"]["offload_layers"] == 12 and over["memory_gib"]["host"] == pytest.approx(13.5)


def test_search_flag_is_the_spec_field(tmp_path):
    fixed = ["--gpus", "8", "--tp", "1", "--pp", "1", "--offload", "activations", "--top", "2"]
    stated = plan_json("search", model_file(tmp_path, offload_layers=5), "dgx-h100-1024", *fixed)
    flagged = plan_json("search", model_file(tmp_path), "dgx-h100-1024", *fixed, "--offload-layers", "5")
    for d in (stated, flagged):
        d["solver"].pop("wall_s")  # the solver's own time
    assert flagged == stated
    # every listed layout offloads activations, 5 of its 32 layers (at most 31 = 32 - 1 may go)
    assert flagged["results"] and all(row["layout"]["offload_layers"] == 5 for row in flagged["results"])


def test_sweep_flag_is_the_spec_field(tmp_path):
    stated = list(api.sweep(models=[model_file(tmp_path, offload_layers=7)], cluster="dgx-h100-1024", gpus=[8],
                            tp=1, pp=1, offload="activations"))
    flagged = list(api.sweep(models=[model_file(tmp_path)], cluster="dgx-h100-1024", gpus=[8], tp=1, pp=1,
                             offload="activations", offload_layers=7))
    free = list(api.sweep(models=[model_file(tmp_path)], cluster="dgx-h100-1024", gpus=[8], tp=1, pp=1,
                          offload="activations"))
    assert flagged == stated and flagged != free


def test_api_keyword_is_the_spec_field(tmp_path):
    layout = dict(gpus=8, tp=1, pp=1, micro_batch=1, zero=1, offload="activations")
    stated = api.estimate(model_file(tmp_path, offload_layers=6), "dgx-h100-1024", **layout)
    given = api.estimate(model_file(tmp_path), "dgx-h100-1024", offload_layers=6, **layout)
    assert given.to_dict() == stated.to_dict()
    found = api.search(model_file(tmp_path), "dgx-h100-1024", offload_layers=6, gpus=8, tp=1, pp=1,
                       offload="activations", top=1)
    assert found.to_dict()["best"]["layout"]["offload_layers"] == 6


@pytest.mark.parametrize("command", ["estimate", "search", "sweep"])
@pytest.mark.parametrize("value", ["0", "-1", "10001", "1e30", "x"])
def test_bad_values_exit_2_naming_the_flag(command, value):
    base = {"estimate": ["estimate", "llama3-8b", "dgx-h100-1024", *LAYOUT],
            "search": ["search", "llama3-8b", "dgx-h100-1024", "--gpus", "8"],
            "sweep": ["sweep", "--models", "llama3-8b", "--cluster", "dgx-h100-1024", "--gpus", "8", "--quiet"]}
    r = runner.invoke(app, [*base[command], "--offload-layers", value])
    assert r.exit_code == 2 and "--offload-layers" in r.output and "Traceback" not in r.output, r.output
    if value in ("0", "-1", "10001"):  # ours (typer's own parser refuses a non-integer in its box)
        assert r.output.strip().count("\n") == 0, r.output
        # bounds: >= 1 (a layout offloading activations offloads some), <= 10,000 (the bound on `layers`)
        assert "expected an integer >= 1 and <= 10,000" in r.output


@pytest.mark.parametrize("value, problem", [(0, "out of range"), (-1, "out of range"), (10**30, "out of range"),
                                            ("6", "got"), (True, "got"), (6.0, "got")])
def test_api_bad_values_are_refused_before_any_work(value, problem):
    """Before the model is read: a model that does not exist is not what the error names."""
    for call in (lambda: api.estimate("no-such-model", "dgx-h100-1024", tp=1, pp=1, micro_batch=1,
                                      offload_layers=value),
                 lambda: api.search("no-such-model", "dgx-h100-1024", offload_layers=value),
                 lambda: api.sweep(models=["no-such-model"], cluster="dgx-h100-1024", offload_layers=value)):
        with pytest.raises(SpecError) as exc:
            call()
        assert exc.value.path == "--offload-layers" and problem in exc.value.message


@pytest.mark.parametrize("command, offload", [("estimate", "none"), ("estimate", "optimizer"), ("search", "optimizer")])
def test_a_count_beside_an_offload_that_moves_no_activations_is_refused(command, offload):
    # the same contradiction a model file's training.offload_layers beside training.offload none is refused for
    argv = [command, "llama3-8b", "dgx-h100-1024", "--gpus", "8", "--offload", offload, "--offload-layers", "5"]
    if command == "estimate":
        argv += ["--tp", "1", "--pp", "1", "--micro-batch", "1", "--zero", "1"]
    r = runner.invoke(app, argv)
    assert r.exit_code == 2, r.output
    assert f"--offload-layers 5 counts layers whose activations move to the host, and --offload {offload} moves none" in r.output
    with pytest.raises(SpecError, match="--offload-layers"):
        getattr(api, command)("llama3-8b", "dgx-h100-1024", gpus=8, offload=offload, offload_layers=5,
                              **(dict(tp=1, pp=1, micro_batch=1, zero=1) if command == "estimate" else {}))


# torchtitan's FSDP on one DGX H100, tp 1 pp 1 mb 1
TITAN = ["--gpus", "8", "--tp", "1", "--pp", "1", "--micro-batch", "1", "--zero", "3", "--framework", "torchtitan"]


def test_torch_compile_flag_is_the_spec_field(tmp_path):
    for value, flag in ((True, "--torch-compile"), (False, "--no-torch-compile")):
        stated = plan_json("estimate", model_file(tmp_path, torch_compile=value), "dgx-h100-1024", *TITAN)
        flagged = plan_json("estimate", model_file(tmp_path, torch_compile=not value), "dgx-h100-1024", *TITAN, flag)
        assert flagged == stated
    # torchtitan's blocks run their norms, RoPE and SwiGLU product op by op without it: slower
    eager = plan_json("estimate", model_file(tmp_path), "dgx-h100-1024", *TITAN)
    compiled = plan_json("estimate", model_file(tmp_path), "dgx-h100-1024", *TITAN, "--torch-compile")
    assert eager["step_time_s"] > compiled["step_time_s"]


def test_search_exports_compile_enable(tmp_path):
    r = runner.invoke(app, ["search", model_file(tmp_path), "dgx-h100-1024", "--gpus", "8", "--framework", "torchtitan",
                            "--torch-compile", "--export", "torchtitan"])
    assert r.exit_code == 0, r.output
    assert "--compile.enable" in r.stdout.splitlines()
    r = runner.invoke(app, ["search", model_file(tmp_path), "dgx-h100-1024", "--gpus", "8", "--framework", "torchtitan",
                            "--export", "torchtitan"])
    assert r.exit_code == 0 and "compile" not in r.stdout


def test_api_torch_compile_takes_a_bool_only(tmp_path):
    a = api.estimate(model_file(tmp_path), "dgx-h100-1024", gpus=8, tp=1, pp=1, micro_batch=1, zero=3,
                     framework="torchtitan", torch_compile=True)
    assert a.step_time_s < api.estimate(model_file(tmp_path), "dgx-h100-1024", gpus=8, tp=1, pp=1, micro_batch=1, zero=3,
                                        framework="torchtitan").step_time_s
    with pytest.raises(SpecError, match="--torch-compile: got the string 'yes'") as exc:
        api.search(model_file(tmp_path), "dgx-h100-1024", gpus=8, torch_compile="yes")
    assert exc.value.exit_code == 2


def test_search_says_what_torch_compile_would_give(tmp_path):
    # torchtitan's eager blocks: the best layout priced eager, and compiled beside it; with the default stage
    # split (split_top 0) the compiled figure is plan estimate --torch-compile of that layout
    found = api.search(model_file(tmp_path), "dgx-h100-1024", gpus=8, framework="torchtitan", split_top=0, top=1)
    best = found.best.layout
    compiled = api.estimate(model_file(tmp_path), "dgx-h100-1024", gpus=8, framework="torchtitan", torch_compile=True,
                            **{k: best[k] for k in ("tp", "pp", "cp", "micro_batch", "recompute", "zero", "vpp")})
    assert found.to_dict()["torch_compile_step_time_s"] == pytest.approx(compiled.step_time_s, rel=1e-9)
    assert compiled.step_time_s < found.best.step_time_s
    # already compiled, or a stack whose blocks are fused kernels: nothing to say
    assert "torch_compile_step_time_s" not in api.search(model_file(tmp_path), "dgx-h100-1024", gpus=8, framework="torchtitan",
                                                         torch_compile=True, top=1).to_dict()
    assert "torch_compile_step_time_s" not in api.search(model_file(tmp_path), "dgx-h100-1024", gpus=8, top=1).to_dict()
    r = runner.invoke(app, ["search", model_file(tmp_path), "dgx-h100-1024", "--gpus", "8", "--framework", "torchtitan"])
    assert r.exit_code == 0 and "torch.compile: " in r.stdout and "faster; --torch-compile" in r.stdout


def test_sweep_torch_compile_is_the_spec_field(tmp_path):
    common = dict(cluster="dgx-h100-1024", gpus=[8], framework="torchtitan", tp=1, pp=1)
    stated = list(api.sweep(models=[model_file(tmp_path, torch_compile=True)], **common))
    flagged = list(api.sweep(models=[model_file(tmp_path)], torch_compile=True, **common))
    eager = list(api.sweep(models=[model_file(tmp_path)], **common))
    assert flagged == stated and flagged[0]["step_time_s"] < eager[0]["step_time_s"]
    r = runner.invoke(app, ["sweep", "--models", model_file(tmp_path), "--cluster", "dgx-h100-1024", "--gpus", "8",
                            "--framework", "torchtitan", "--torch-compile", "--quiet"])
    assert r.exit_code == 0, r.output
    with pytest.raises(SpecError, match="--torch-compile"):
        api.sweep(models=[model_file(tmp_path)], torch_compile="yes", **common)


def test_json_says_the_training_settings_it_priced(tmp_path):
    # every flag that changes the training job is echoed, so a script needs no spec file to know what was priced
    r = runner.invoke(app, ["search", model_file(tmp_path), "dgx-h100-1024", "--gpus", "8", "--framework", "torchtitan",
                            "--seq-len", "2048", "--global-batch", "64", "--torch-compile", "--top", "1", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["training"] == {"seq_len": 2048, "global_batch": 64, "precision": "bf16",
                                                "stack": "torchtitan", "torch_compile": True}
    r = runner.invoke(app, ["estimate", model_file(tmp_path), "dgx-h100-1024", "--gpus", "8", "--tp", "1", "--pp", "1",
                            "--micro-batch", "1", "--precision", "fp8", "--json"])
    assert r.exit_code in (0, 1), r.output  # 1: infeasible, the JSON printed all the same
    training = json.loads(r.stdout)["training"]
    assert (training["precision"], training["fp8_recipe"], training["torch_compile"]) == ("fp8", "delayed", False)
