"""The Python API (planner/api/, docs/api.md): the same JSON as `plan ... --json`, the same errors as
the command line, a cheap `import planner`, a public surface the changelog names, and every example
of docs/api.md run."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import planner
from planner.cli.main import app
from planner.errors import InfeasibleError, SpecError

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("typer", "rich", "matplotlib", "ortools")


def plan(*argv: str):
    return CliRunner().invoke(app, [str(a) for a in argv])


def timeless(data):
    """`data` without wall-clock times (keys ending in wall_s): they are not predictions."""
    if isinstance(data, dict):
        return {k: None if k.endswith("wall_s") else timeless(v) for k, v in data.items()}
    if isinstance(data, list):
        return [timeless(v) for v in data]
    return data


# --- the same JSON as the command line -----------------------------------------------------------

SEARCHES = [  # (CLI arguments after `plan search MODEL CLUSTER`, the API's keywords)
    (["--gpus", "8"], dict(gpus=8)),
    (["--gpus", "64", "--top", "3", "--tp", "8"], dict(gpus=64, top=3, tp=8)),
    (["--gpus", "64", "--objective", "energy", "--frontier"], dict(gpus=64, objective="energy", frontier=True)),
    (["--gpus", "8", "--max-step-time", "0.001"], dict(gpus=8, max_step_time_s=0.001)),  # nothing feasible: nearest
    (["--gpus-range", "8:32"], dict(gpus_range=(8, 32))),
    (["--gpus", "8", "--framework", "torchtitan"], dict(gpus=8, framework="torchtitan")),
]


@pytest.mark.parametrize("cli,kwargs", SEARCHES, ids=[" ".join(c) for c, _ in SEARCHES])
def test_search_json_is_the_cli_json(cli, kwargs):
    shown = plan("search", "gpt3-1.3b", "dgx-a100-1024", *cli, "--json")
    assert shown.exit_code in (0, 1), shown.output
    result = planner.search("gpt3-1.3b", "dgx-a100-1024", **kwargs)
    assert timeless(result.to_dict()) == timeless(json.loads(shown.stdout))


def test_search_json_on_pools_is_the_cli_json():
    shown = plan("search", "gpt3-1.3b", "mixed-h100-a100", "--top", "2", "--json")
    result = planner.search("gpt3-1.3b", "mixed-h100-a100", top=2)
    assert isinstance(result, planner.PoolsSearch)
    assert timeless(result.to_dict()) == timeless(json.loads(shown.stdout))


ESTIMATES = [
    (["--gpus", "8", "--tp", "2", "--pp", "1", "--micro-batch", "4"], dict(gpus=8, tp=2, pp=1, micro_batch=4)),
    # does not fit: the memory hint scores changes of settings
    (["--gpus", "8", "--tp", "1", "--pp", "1", "--micro-batch", "64", "--global-batch", "512"],
     dict(gpus=8, tp=1, pp=1, micro_batch=64, global_batch=512)),
    (["--gpus", "16", "--tp", "2", "--pp", "2", "--micro-batch", "1", "--vpp", "2", "--stage-layers", "5,7,6,6",
      "--recompute", "selective"],
     dict(gpus=16, tp=2, pp=2, micro_batch=1, vpp=2, stage_layers=[5, 7, 6, 6], recompute="selective")),
    # a framework's own defaults (torchtitan: FSDP, ZeRO 3, where estimate would take ZeRO 1)
    (["--gpus", "8", "--tp", "2", "--pp", "1", "--micro-batch", "4", "--framework", "torchtitan"],
     dict(gpus=8, tp=2, pp=1, micro_batch=4, framework="torchtitan")),
]


@pytest.mark.parametrize("cli,kwargs", ESTIMATES, ids=[" ".join(c) for c, _ in ESTIMATES])
def test_estimate_json_is_the_cli_json(cli, kwargs):
    shown = plan("estimate", "gpt3-1.3b", "dgx-a100-1024", *cli, "--json")
    assert shown.exit_code in (0, 1), shown.output
    result = planner.estimate("gpt3-1.3b", "dgx-a100-1024", **kwargs)
    assert result.to_dict() == json.loads(shown.stdout)
    assert result.feasible == (shown.exit_code == 0)


def test_check_json_is_the_cli_json():
    files = ["configs/models/gpt3-1.3b.yaml", "configs/clusters/dgx-a100-1024.yaml"]
    shown = plan("check", *[ROOT / f for f in files], "--format", "json")
    report = planner.check([ROOT / f for f in files])
    assert report.to_dict() == json.loads(shown.stdout)
    assert report.ok and report.exit_code == shown.exit_code == 0


def test_calibrate_json_is_the_cli_json_and_prices_a_search():
    runs = ROOT / "configs/runs/dgxc-h100-gpt3.yaml"
    shown = plan("calibrate", runs, "--json")
    cal = planner.calibrate([runs])
    assert cal.to_dict() == json.loads(shown.stdout)
    with_file = planner.search("gpt3-175b", "dgx-h100-16384", gpus=4096, top=1, profile=cal)
    assert "runs of profile" in with_file.best.error_band.basis


def test_sweep_rows_are_the_cli_rows(tmp_path):
    out = tmp_path / "rows.jsonl"
    shown = plan("sweep", "--models", "gpt3-1.3b", "--gpus", "8,16", "--workers", "1", "--quiet", "--out", out)
    assert shown.exit_code == 0, shown.output
    cli_rows = [json.loads(line) for line in out.read_text().splitlines()]
    rows = list(planner.sweep(models=["gpt3-1.3b"], gpus=[8, 16]))
    assert [timeless(r) for r in rows] == [timeless(r) for r in cli_rows]
    again = list(planner.sweep(models="gpt3-1.3b", gpus="8,16", out=out))  # resumed: every row was there
    assert [r["point_id"] for r in again] == [r["point_id"] for r in cli_rows]


def test_sweep_arguments_of_the_wrong_type_or_without_end_are_bad_input(tmp_path):
    # Before: range(1, 10**12) GPU counts were joined into one string for minutes (an endless generator:
    # forever), and these were TypeErrors from deep inside (os.fspath, iteration, slicing).
    import itertools

    for kwargs, message in [
        (dict(gpus=range(1, 10**12)), "--gpus: more than 1,000,000 values"),
        (dict(models=itertools.repeat("gpt3-1.3b")), "--models: more than 1,000,000 values"),
        (dict(models=5), "--models: got 5"),
        (dict(models=["gpt3-1.3b", None]), "--models: got None"),
        (dict(objective=3), "--objective: got 3"),
        (dict(framework=3), "--framework: got 3"),
        (dict(out=5), "--out: got 5"),
        (dict(force="yes"), "--force: got the string 'yes'"),
    ]:
        with pytest.raises(SpecError, match=message):
            planner.sweep(**{"models": "gpt3-1.3b", "gpus": [8], **kwargs})
    with pytest.raises(SpecError, match="SWEEP: got 5"):
        planner.sweep(5)
    # one GPU count as an int is the list of that count, as `search(gpus=8)` takes it
    assert [r["gpus"] for r in planner.sweep(models="gpt3-1.3b", gpus=8)] == [8]


def test_what_the_command_line_needs_of_the_api(tmp_path):
    # an export kind chooses estimate's defaults (torchtitan: ZeRO 3), as `plan estimate --export torchtitan`
    est = planner.estimate("gpt3-1.3b", "dgx-a100-1024", gpus=8, tp=2, pp=1, micro_batch=4, export="torchtitan")
    assert est.layout["zero"] == 3
    assert planner.estimate("gpt3-1.3b", "dgx-a100-1024", gpus=8, tp=2, pp=1, micro_batch=4).layout["zero"] == 1
    with pytest.raises(SpecError, match="unknown framework"):
        planner.estimate("gpt3-1.3b", "dgx-a100-1024", gpus=8, tp=2, pp=1, micro_batch=4, export="mxnet")
    # a row callback (the progress bar) and the executor (`--executor`), checked on the call
    seen = []
    rows = list(planner.sweep(models="gpt3-1.3b", gpus=[8], on_row=seen.append, executor="local"))
    assert seen == rows and len(rows) == 1
    with pytest.raises(SpecError, match="--ray-address is for --executor ray"):
        planner.sweep(models="gpt3-1.3b", gpus=[8], ray_address="localhost:6379")
    # a calibration never writes over one of the files it was fitted to
    runs = tmp_path / "runs.yaml"
    runs.write_text((ROOT / "configs/runs/dgxc-h100-gpt3.yaml").read_text())
    cal = planner.calibrate([runs])
    with pytest.raises(SpecError, match="--output"):
        cal.write(runs)
    assert runs.read_text() == (ROOT / "configs/runs/dgxc-h100-gpt3.yaml").read_text()


def test_export_is_the_cli_export():
    shown = plan("search", "gpt3-1.3b", "dgx-a100-1024", "--gpus", "8", "--export", "megatron")
    assert planner.export(planner.search("gpt3-1.3b", "dgx-a100-1024", gpus=8), "megatron").text.rstrip("\n") \
        == shown.stdout.rstrip("\n")


# --- the same errors as the command line ---------------------------------------------------------

BAD = [  # (CLI arguments, the API call)
    (["search", "gpt3-1.3b", "dgx-a100-1024", "--gpus", "0"], lambda: planner.search("gpt3-1.3b", "dgx-a100-1024", gpus=0)),
    (["search", "gpt3-1.3b", "dgx-a100-1024", "--top", "0"], lambda: planner.search("gpt3-1.3b", "dgx-a100-1024", top=0)),
    (["search", "gpt3-1.3b", "dgx-a100-1024", "--tp", "3"], lambda: planner.search("gpt3-1.3b", "dgx-a100-1024", tp=3)),
    (["search", "gpt3-1.3bb", "dgx-a100-1024"], lambda: planner.search("gpt3-1.3bb", "dgx-a100-1024")),
    (["search", "gpt3-1.3b", "dgx-a100-1024", "--gpus", "4096"],
     lambda: planner.search("gpt3-1.3b", "dgx-a100-1024", gpus=4096)),
    (["search", "gpt3-1.3b", "dgx-a100-1024", "--stack", "../x"],
     lambda: planner.search("gpt3-1.3b", "dgx-a100-1024", stack="../x")),
    (["search", "gpt3-1.3b", "dgx-a100-1024", "--framework", "jax"],
     lambda: planner.search("gpt3-1.3b", "dgx-a100-1024", framework="jax")),
    (["search", "gpt3-1.3b", "dgx-a100-1024", "--precision", "fp8"],
     lambda: planner.search("gpt3-1.3b", "dgx-a100-1024", precision="fp8")),
    (["search", "gpt3-1.3b", "dgx-a100-1024", "--memory-headroom", "2"],
     lambda: planner.search("gpt3-1.3b", "dgx-a100-1024", memory_headroom=2.0)),
    (["search", "gpt3-1.3b", "dgx-a100-1024", "--objective", "speed"],
     lambda: planner.search("gpt3-1.3b", "dgx-a100-1024", objective="speed")),
    (["search", "gpt3-1.3b", "dgx-a100-1024", "--gpus-range", "8-32"],
     lambda: planner.search("gpt3-1.3b", "dgx-a100-1024", gpus_range="8-32")),
    (["estimate", "gpt3-1.3b", "dgx-a100-1024", "--tp", "100000", "--pp", "100000", "--micro-batch", "1", "--cp", "1000"],
     lambda: planner.estimate("gpt3-1.3b", "dgx-a100-1024", tp=100000, pp=100000, micro_batch=1, cp=1000)),
    (["estimate", "gpt3-1.3b", "dgx-a100-1024", "--tp", "2", "--pp", "2", "--micro-batch", "1", "--stage-layers", "1,2x"],
     lambda: planner.estimate("gpt3-1.3b", "dgx-a100-1024", tp=2, pp=2, micro_batch=1, stage_layers="1,2x")),
    (["estimate", "gpt3-1.3b", "dgx-a100-1024", "--tp", "2", "--pp", "1", "--micro-batch", "1", "--framework",
      "deepspeed", "--vpp", "2"],
     lambda: planner.estimate("gpt3-1.3b", "dgx-a100-1024", tp=2, pp=1, micro_batch=1, framework="deepspeed", vpp=2)),
    (["check", "configs/models/gpt3-1.3b.yaml", "--memory-headroom", "-1"],
     lambda: planner.check("configs/models/gpt3-1.3b.yaml", memory_headroom=-1.0)),
    (["calibrate", "configs/runs/dgxc-h100-gpt3.yaml", "--stack", "a/b"],
     lambda: planner.calibrate(["configs/runs/dgxc-h100-gpt3.yaml"], stack="a/b")),
    (["sweep", "--models", "gpt3-1.3b", "--workers", "0"], lambda: planner.sweep(models="gpt3-1.3b", workers=0)),
    (["sweep", "--models", "gpt3-1.3b", "--objective", ""], lambda: planner.sweep(models="gpt3-1.3b", objective="")),
]


@pytest.mark.parametrize("cli,call", BAD, ids=[" ".join(c) for c, _ in BAD])
def test_bad_input_is_the_cli_message(cli, call, monkeypatch):
    monkeypatch.chdir(ROOT)
    shown = plan(*cli)
    assert shown.exit_code == 2, shown.output
    with pytest.raises(SpecError) as caught:
        call()
    assert f"error: {caught.value}" in shown.stderr.splitlines()


def test_types_a_parser_would_refuse_are_spec_errors():
    with pytest.raises(SpecError, match=r"--gpus: got the string '64' \(expected an integer\)"):
        planner.search("gpt3-1.3b", "dgx-a100-1024", gpus="64")
    with pytest.raises(SpecError, match=r"--tp: got 8.0 \(expected an integer\)"):
        planner.search("gpt3-1.3b", "dgx-a100-1024", tp=8.0)
    with pytest.raises(SpecError, match="--recompute"):
        planner.search("gpt3-1.3b", "dgx-a100-1024", recompute=True)


def test_a_numpy_scalar_is_named_as_one_not_as_a_mapping():
    # np.int64(8) and np.True_ (a notebook's np.arange or mask) are no int or bool: refused as any other type, but
    # the message said "got a mapping"
    import numpy as np

    with pytest.raises(SpecError, match=r"--gpus: got a numpy\.int64 \(np\.int64\(8\)\) \(expected an integer\)"):
        planner.search("gpt3-1.3b", "dgx-a100-1024", gpus=np.int64(8))
    with pytest.raises(SpecError, match=r"--torch-compile: got a numpy\.bool_? \(np\.True_\) \(expected true or false\)"):
        planner.estimate("gpt3-1.3b", "dgx-a100-1024", gpus=8, tp=1, pp=1, micro_batch=1, torch_compile=np.bool_(True))


def test_mistyped_keywords_are_type_errors_with_the_nearest_name():
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_step_time'; did you mean 'max_step_time_s'"):
        planner.search("gpt3-1.3b", "dgx-a100-1024", max_step_time=3)
    with pytest.raises(TypeError, match="missing required keyword arguments: 'pp', 'micro_batch'"):
        planner.estimate("gpt3-1.3b", "dgx-a100-1024", tp=2)


def test_export_of_nothing_feasible_or_of_another_framework_is_refused():
    nothing = planner.search("gpt3-1.3b", "dgx-a100-1024", gpus=8, max_step_time_s=0.001)
    assert nothing.best is None and nothing.nearest is not None
    with pytest.raises(InfeasibleError, match="no feasible layout: .*max_step_time removed"):
        planner.export(nothing, "megatron")
    titan = planner.search("gpt3-1.3b", "dgx-a100-1024", gpus=8, framework="torchtitan", top=1)
    with pytest.raises(SpecError, match="--export megatron with --framework torchtitan"):
        planner.export(titan, "megatron")


def test_specs_from_mappings_and_objects():
    model = planner.load_model("gpt3-1.3b")
    data = model.model_dump(mode="json", exclude_unset=True)
    assert planner.load_model(data) == model and planner.load_model(model) is model
    hf = json.loads((ROOT / "configs/hf/qwen3-30b-a3b.json").read_text())
    assert planner.load_model(hf).moe is not None
    assert planner.load_gpu("a100-sxm-80gb").memory_gib == 80
    with pytest.raises(SpecError, match="layers"):
        planner.load_model({**data, "layers": -1})


def test_results_are_frozen():
    result = planner.estimate("gpt3-1.3b", "dgx-a100-1024", gpus=8, tp=2, pp=1, micro_batch=4)
    with pytest.raises(AttributeError):
        result.step_time_s = 1.0


# --- import, surface, modules --------------------------------------------------------------------

def test_import_planner_loads_no_cli_plotting_or_solver_library():
    code = ("import planner, sys; print(sorted(m for m in sys.modules if m.split('.')[0] in "
            f"{HEAVY!r}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.stdout.strip() == "[]"


def test_every_public_name_resolves_and_the_changelog_names_it():
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert len(set(planner.__all__)) == len(planner.__all__)
    missing = [n for n in planner.__all__ if f"planner.{n}" not in changelog]
    assert not missing, f"CHANGELOG.md does not name the public {missing}: say what was added (or removed)"
    for name in planner.__all__:
        assert getattr(planner, name) is not None


def test_modules_named_like_api_functions_stay_modules():
    import planner.search as engine
    from planner import sweep as sw

    assert planner.search is engine and callable(planner.search)
    assert sw.rows.run_point and planner.check.check_paths and planner.estimate.estimate_layout
    assert "gpus" in str(__import__("inspect").signature(planner.search))


# --- docs/api.md -----------------------------------------------------------------------------------

def _examples() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / "docs/api.md").read_text(), flags=re.S)


def test_docs_api_examples_run(monkeypatch, tmp_path):
    blocks = _examples()
    assert len(blocks) >= 5
    monkeypatch.chdir(ROOT)
    scope = {"TMP": tmp_path}
    for block in blocks:  # one namespace: later examples use earlier ones' names, as a reader would
        exec(compile(block, "docs/api.md", "exec"), scope)


# --- allocate and replan ---------------------------------------------------------------------------

def test_allocate_and_replan_are_the_commands_json(tmp_path):
    from typer.testing import CliRunner

    from planner.cli.main import app

    runner = CliRunner()
    jobs = str(ROOT / "configs" / "jobs" / "three-jobs.yaml")
    alloc = planner.allocate(jobs, "dgx-h100-1024")
    r = runner.invoke(app, ["allocate", jobs, "dgx-h100-1024", "--json"])
    assert r.exit_code == 0, r.output
    cli, lib = json.loads(r.stdout), json.loads(json.dumps(alloc.to_dict()))
    cli["solver"].pop("wall_s"), lib["solver"].pop("wall_s")  # the solver's own clock
    assert cli == lib
    # the three jobs share at most the cluster's 1,024 GPUs
    assert alloc.feasible and sum(job["gpus"] for job in alloc.to_dict()["jobs"]) <= 1024
    after = planner.replan("gpt3-175b", "dgx-a100-1024", gpus=1024, lost_gpus=16, tp=8, pp=4, micro_batch=4, vpp=12)
    r = runner.invoke(app, ["replan", "gpt3-175b", "dgx-a100-1024", "--gpus", "1024", "--lost-gpus", "16", "--tp", "8",
                            "--pp", "4", "--micro-batch", "4", "--vpp", "12", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == json.loads(json.dumps(after.to_dict()))
    assert after.gpus_left == 1024 - 16 and after.new_gpus <= 1008 and after.model.name == "gpt3-175b"
    # the engines' modules are still reachable under the functions' names
    from planner.allocate import Allocation
    from planner.replan import Replan

    assert isinstance(alloc, Allocation) and isinstance(after, Replan)


def test_replan_refuses_what_the_command_refuses():
    with pytest.raises(planner.SpecError, match="--lost-gpus: got the string '16'") as exc:
        planner.replan("gpt3-175b", "dgx-a100-1024", gpus=1024, lost_gpus="16", tp=8, pp=4, micro_batch=4)
    assert exc.value.exit_code == 2
    with pytest.raises(TypeError, match="missing required keyword argument: 'micro_batch'"):
        planner.replan("gpt3-175b", "dgx-a100-1024", gpus=1024, lost_gpus=16, tp=8, pp=4)
    with pytest.raises(TypeError, match="unexpected keyword argument 'tpp'"):
        planner.replan("gpt3-175b", "dgx-a100-1024", gpus=1024, lost_gpus=16, tpp=8, pp=4, micro_batch=4)
    with pytest.raises(planner.SpecError, match="--objective"):
        planner.allocate(str(ROOT / "configs" / "jobs" / "three-jobs.yaml"), "dgx-h100-1024", objective=3)
    # None for an argument the command requires is bad input naming it (a TypeError from a comparison before)
    for kwargs, flag in ((dict(gpus=None, lost_gpus=16), "--gpus"), (dict(gpus=1024, lost_gpus=None), "--lost-gpus")):
        with pytest.raises(planner.SpecError, match=f"{flag}: got None"):
            planner.replan("gpt3-175b", "dgx-a100-1024", tp=8, pp=4, micro_batch=4, **kwargs)
    with pytest.raises(planner.SpecError, match="JOBS_FILE: got None"):
        planner.allocate(None, "dgx-h100-1024")


def test_import_runs_is_plan_runs_import(tmp_path):
    import yaml
    from typer.testing import CliRunner

    from planner.cli.main import app

    log = ROOT / "tests" / "data" / "logs" / "torchtitan.log"
    data = planner.import_runs(log, cluster="dgx-h100-1024")
    r = CliRunner().invoke(app, ["runs", "import", str(log), "--cluster", "dgx-h100-1024"])
    assert r.exit_code == 0, r.output
    assert yaml.safe_load(r.stdout) == data and data["kind"] == "runs" and len(data["runs"]) == 1
    # what `plan calibrate` reads: the run's torchtitan stack, as the log's "Compiling each TransformerBlock" says
    assert data["runs"][0]["stack"] == "torchtitan" and data["runs"][0]["torch_compile"] is True
    with pytest.raises(planner.SpecError, match="--cluster: got 8 \\(expected a string\\)") as exc:
        planner.import_runs(log, cluster=8)
    assert exc.value.exit_code == 2
    with pytest.raises(planner.SpecError, match="names no cluster"):
        planner.import_runs([log])


def test_import_runs_writes_what_a_log_does_not_print_as_null(tmp_path):
    # NeMo 2's log prints tp 4 and pp 2 in its parallel-group ranks but no micro-batch: imported, not refused,
    # with layout.micro_batch None for the user to fill in; what else calibrate checks still is (--cluster)
    log = ROOT / "tests" / "data" / "logs" / "nemo.log"
    data = planner.import_runs(log, cluster="dgx-h100-1024", model="llama3-8b")
    assert data["runs"][0]["layout"] == {"cp": 1, "tp": 4, "pp": 2, "micro_batch": None}
    small = (ROOT / "configs" / "clusters" / "dgx-h100-1024.yaml").read_text().replace("nodes: 128", "nodes: 1")
    (tmp_path / "one-node.yaml").write_text(small.replace("name: dgx-h100-1024", "name: one-node").replace("gpus: 8", "gpus: 4"))
    with pytest.raises(planner.SpecError, match="8 GPUs is more than the 4"):  # 1 node x 4 GPUs
        planner.import_runs(log, cluster=str(tmp_path / "one-node.yaml"), model="llama3-8b")


def test_list_specs_and_validate_are_the_commands_json():
    from typer.testing import CliRunner

    from planner.cli.main import app

    runner = CliRunner()
    r = runner.invoke(app, ["list", "gpus", "--json"])
    assert r.exit_code == 0, r.output
    gpus = planner.list_specs("gpus")
    assert json.loads(r.stdout) == {"kind": "gpus", "items": gpus}
    assert "h100-sxm-80gb" in [g["name"] for g in gpus]
    profile = str(ROOT / "configs" / "profiles" / "dgxc-h100-gpt3.yaml")
    r = runner.invoke(app, ["validate", "--profile", profile, "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == json.loads(json.dumps(planner.validate(profile)))
    # every replayed figure: error = predicted / measured - 1
    rows = planner.validate()
    assert rows and all(r["error"] == pytest.approx(r["predicted"] / r["measured"] - 1, rel=1e-9, abs=1e-12) for r in rows)
    assert all(r["error_pct"] == pytest.approx(100 * (r["predicted"] / r["measured"] - 1), rel=1e-9, abs=1e-10) for r in rows)
    with pytest.raises(planner.SpecError, match="KIND: unknown kind 'model'"):
        planner.list_specs("model")


def test_import_hf_and_schema_are_the_commands_output():
    from typer.testing import CliRunner

    from planner.cli.main import app

    runner = CliRunner()
    config = str(ROOT / "configs" / "hf" / "qwen3-30b-a3b.json")
    r = runner.invoke(app, ["import", config, "--seq-len", "4096"])
    assert r.exit_code == 0, r.output
    made = planner.import_hf(config, seq_len=4096)
    assert r.stdout.startswith(made.text) and "qwen3_moe family" in made.summary
    r = runner.invoke(app, ["schema", "cluster"])
    assert r.exit_code == 0 and json.loads(r.stdout) == planner.schema("cluster")
    with pytest.raises(planner.SpecError, match="--seq-len: got the string '4096'"):
        planner.import_hf(config, seq_len="4096")


def test_runs_and_logs_arguments_are_bad_input_not_type_errors():
    # one path, a list of them, or a SpecError naming the argument (a number was a TypeError from list())
    with pytest.raises(planner.SpecError, match="LOGS: got 5"):
        planner.import_runs(5, cluster="dgx-h100-1024")
    with pytest.raises(planner.SpecError, match="RUNS: got 5"):
        planner.calibrate(5)


def test_every_declared_override_is_a_keyword_of_the_api_and_a_spec_field():
    # OVERRIDES (planner/api/inputs.py) is threaded as one mapping; each must stay a keyword users can give
    import inspect

    from planner.api.inputs import OVERRIDES, with_run
    from planner.specs.loading import load_model

    for fn in (planner.search, planner.estimate, planner.sweep):
        assert set(OVERRIDES) <= set(inspect.signature(fn).parameters), fn.__name__
    model = load_model("gpt3-1.3b")
    for key, (path, flag, kind) in OVERRIDES.items():
        node = type(model)
        for part in path.split("."):  # seq_len, training.torch_compile, ...: a field of the model spec
            assert part in node.model_fields, path
            node = node.model_fields[part].annotation
        assert flag.startswith("--") and kind in (int, str, bool)
    assert with_run(model, {"seq_len": 4096, "torch_compile": None}).seq_len == 4096
    with pytest.raises(TypeError, match="fp8_recipe"):  # not declared: a caller's mistake
        with_run(model, {"fp8_recipe": "tensorwise"})
