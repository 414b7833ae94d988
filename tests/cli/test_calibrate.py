"""`plan calibrate`, `plan runs import` and `--profile` as a user types them: exit codes, messages,
the profile file and the bands it gives."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli.main import app

runner = CliRunner()
LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"

RUNS = """kind: runs
runs:
  - name: eight
    model: llama3.1-8b
    cluster: dgx-h100-1024
    gpus: 8
    global_batch: 128
    layout: {tp: 1, pp: 1, micro_batch: 1}
    measured: {step_time_s: 15.0, peak_memory_gib: 60}
  - name: sixteen
    model: llama3.1-8b
    cluster: dgx-h100-1024
    gpus: 16
    global_batch: 128
    layout: {tp: 2, pp: 1, micro_batch: 1}
    measured: {step_time_s: 7.9, peak_memory_gib: 40}
  - name: seventy
    model: llama3.1-70b
    cluster: dgx-h100-1024
    gpus: 64
    global_batch: 128
    layout: {tp: 8, pp: 2, micro_batch: 1, vpp: 5}
    measured: {step_time_s: 17.5}
"""


def invoke(*args):
    result = runner.invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output
    return result


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    folder = tmp_path_factory.mktemp("calibrate")
    (folder / "runs.yaml").write_text(RUNS)
    result = invoke("calibrate", folder / "runs.yaml", "-o", folder / "mine.yaml")
    assert result.exit_code == 0, result.output
    return folder / "mine.yaml", result


def test_calibrate_prints_each_run_and_writes_a_profile(profile):
    path, result = profile
    for name in ("eight", "sixteen", "seventy"):
        assert name in result.stdout
    assert "left out" in result.stdout and "constants (prior -> fitted" in result.stdout
    assert "wrote" in result.stderr and "--profile" in result.stderr
    text = path.read_text()
    assert text.startswith("kind: profile\nname: mine\ngpu: h100-sxm-80gb\nstack: megatron-core\n")


def test_calibrate_json_is_the_profile(tmp_path, profile):
    (tmp_path / "runs.yaml").write_text(RUNS)
    result = invoke("calibrate", tmp_path / "runs.yaml", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["kind"] == "profile" and len(data["runs"]) == 3
    assert data["measured"]["gpus"] == [8, 64]
    # each run's error is its fitted time against its measured one
    for run in data["runs"]:
        assert run["error_pct"] == pytest.approx(100 * (run["fitted_step_time_s"] / run["measured_step_time_s"] - 1), abs=2e-3)


def test_search_and_estimate_with_a_profile_say_where_the_band_comes_from(profile):
    path, _ = profile
    result = invoke("estimate", "llama3.1-8b", "dgx-h100-1024", "--gpus", 16, "--global-batch", 128, "--tp", 2, "--pp", 1,
                    "--micro-batch", 1, "--profile", path, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["step_time_error_basis"].startswith("3 runs of profile mine")
    assert "memory_error_pct" in data
    result = invoke("search", "llama3.1-70b", "dgx-h100-1024", "--gpus", 256, "--profile", path, "--top", 1)
    assert result.exit_code == 0, result.output
    assert "runs of profile mine" in result.stdout and "GPUs outside the 8-64 measured" in result.stdout


def test_a_profile_of_another_gpu_or_stack_is_refused(profile):
    path, _ = profile
    result = invoke("search", "llama3.1-8b", "dgx-a100-1024", "--gpus", 8, "--profile", path)
    assert result.exit_code == 2 and "measured on h100-sxm-80gb" in result.stderr
    result = invoke("search", "llama3.1-8b", "dgx-h100-1024", "--gpus", 8, "--profile", path, "--stack", "torchtitan")
    assert result.exit_code == 2 and "fitted with stack megatron-core" in result.stderr


def test_a_runs_file_with_a_missing_measurement_is_exit_2_with_file_and_line(tmp_path):
    bad = RUNS.replace("measured: {step_time_s: 17.5}", "measured: {peak_memory_gib: 70}")
    (tmp_path / "runs.yaml").write_text(bad)
    result = invoke("calibrate", tmp_path / "runs.yaml")
    assert result.exit_code == 2
    line = bad.splitlines().index("    measured: {peak_memory_gib: 70}") + 1
    assert f"runs.yaml:{line}:" in result.stderr and "runs.2.measured" in result.stderr


def test_a_layout_that_does_not_fill_the_gpus_is_exit_2(tmp_path):
    (tmp_path / "runs.yaml").write_text(RUNS.replace("gpus: 64", "gpus: 60"))
    result = invoke("calibrate", tmp_path / "runs.yaml")
    assert result.exit_code == 2 and "seventy" in result.stderr


def test_a_profile_file_that_is_not_one_is_exit_2(tmp_path):
    (tmp_path / "p.yaml").write_text(RUNS)
    result = invoke("search", "llama3.1-8b", "dgx-h100-1024", "--profile", tmp_path / "p.yaml")
    assert result.exit_code == 2 and "not a profile file" in result.stderr


def test_runs_import_reads_a_megatron_log_into_a_runs_file_calibrate_takes(tmp_path):
    result = invoke("runs", "import", LOGS / "megatron.log", "--cluster", "dgx-h100-1024", "-o", tmp_path / "runs.yaml")
    assert result.exit_code == 0, result.output
    text = (tmp_path / "runs.yaml").read_text()
    assert text.startswith("kind: runs\nruns:\n- name: megatron\n")
    result = invoke("calibrate", tmp_path / "runs.yaml")
    assert result.exit_code == 0, result.output
    assert "from 1 run" in result.stdout and "one run: no leave-one-out error" in result.stdout


def test_a_log_needs_a_cluster(tmp_path):
    result = invoke("calibrate", LOGS / "megatron.log")
    assert result.exit_code == 2 and "--cluster" in result.stderr


def test_a_file_that_is_no_log_is_exit_2_naming_the_line(tmp_path):
    (tmp_path / "notes.txt").write_text("hello\nworld\n")
    result = invoke("calibrate", tmp_path / "notes.txt", "--cluster", "dgx-h100-1024")
    assert result.exit_code == 2 and "notes.txt:" in result.stderr


def test_validate_replays_a_profiles_runs_as_it_fitted_them(profile):
    path, _ = profile
    result = invoke("validate", "--profile", path, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [r["name"] for r in data["runs"]] == ["eight", "sixteen", "seventy"]
    for r in data["runs"]:  # shipped model and cluster: predicted again, as the fit did
        assert r["predicted_now_s"] == pytest.approx(r["fitted_s"], rel=1e-5)


def test_a_sweep_with_a_profile_prices_every_point_with_it(profile, tmp_path):
    path, _ = profile
    args = ("sweep", "--models", "llama3.1-8b", "--cluster", "dgx-h100-1024", "--gpus", "16", "--global-batch", "128",
            "--quiet", "--out")
    plain = invoke(*args, tmp_path / "plain.jsonl")
    mine = invoke(*args, tmp_path / "mine.jsonl", "--profile", path)
    assert plain.exit_code == 0 and mine.exit_code == 0, mine.output
    a = json.loads((tmp_path / "plain.jsonl").read_text().splitlines()[0])
    b = json.loads((tmp_path / "mine.jsonl").read_text().splitlines()[0])
    assert a["step_time_s"] != b["step_time_s"]
    result = invoke("sweep", "--models", "llama3.1-8b", "--cluster", "dgx-a100-1024", "--gpus", "8", "--quiet",
                    "--profile", path)
    assert result.exit_code == 2 and "measured on h100-sxm-80gb" in result.stderr


def test_runs_of_an_inline_stack_make_no_profile_exit_2(tmp_path):
    # --profile prices with a shipped stack (ProfileSpec's validator). Before: -o wrote `stack: mine`, a profile
    # every command then refused; then, with the validator alone, a pydantic ValidationError (exit 3)
    import yaml

    stack = yaml.safe_load((Path(__file__).resolve().parents[2] / "configs" / "stacks" / "megatron-core.yaml").read_text())
    stack["name"] = "mine"
    model = {"name": "tiny", "layers": 4, "hidden": 1024, "heads": 16, "vocab": 32000, "seq_len": 2048,
             "training": {"global_batch": 128, "stack": stack}}
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(model))
    (tmp_path / "runs.yaml").write_text(RUNS.replace("model: llama3.1-8b", "model: tiny.yaml")
                                        .replace("model: llama3.1-70b", "model: tiny.yaml"))
    r = runner.invoke(app, ["calibrate", str(tmp_path / "runs.yaml"), "-o", str(tmp_path / "p.yaml")])
    assert r.exit_code == 2, r.output
    assert "unknown software stack 'mine'" in r.stderr and not (tmp_path / "p.yaml").exists()


def test_one_log_never_writes_its_memory_leftover_as_the_reserve(tmp_path):
    # A UX review: the sample Megatron-LM log (one run, 'max allocated' 63488 MB = 62.0 GiB) printed
    # `memory_reserve_gib 2.5 -> 16 (at bound)` and wrote it into the profile every --profile search then used.
    # One run leaves no left-out memory error: the H100 preset's 2.5 GiB stays, and the note says why.
    result = invoke("calibrate", LOGS / "megatron.log", "--cluster", "dgx-h100-1024", "-o", tmp_path / "p.yaml")
    assert result.exit_code == 0, result.output
    assert "memory_reserve_gib keeps its prior 2.5 GiB" in result.stdout and "of 62.0 measured" in result.stdout
    assert "(at bound)" not in result.stdout
    import yaml

    reserve = yaml.safe_load((tmp_path / "p.yaml").read_text())["memory"]["memory_reserve_gib"]
    assert reserve["value"] == 2.5 and reserve["fitted"] is False


def test_the_constants_note_reads_without_contradiction_and_no_empty_memory_column(tmp_path):
    # The shipped runs file: five gpt3-175b runs that state no memory. A UX review: "1 constant (gemm; at most 3
    # of 5 runs)" read as a contradiction, and the `mem GiB meas/fit` column was always empty. ceil(5 / 2) = 3
    result = invoke("calibrate", Path(__file__).resolve().parents[2] / "configs" / "runs" / "dgxc-h100-gpt3.yaml")
    assert result.exit_code == 0, result.output
    assert "1 constant fitted (gemm): 5 runs fit at most 3 constants, and no other constant moves" in result.stdout
    assert "at most 3 of 5" not in result.stdout and "mem GiB" not in result.stdout
    # runs that state memory keep the column (the fixture's two of three)
    (tmp_path / "runs.yaml").write_text(RUNS)
    assert "mem GiB meas/fit" in invoke("calibrate", tmp_path / "runs.yaml").stdout


@pytest.mark.parametrize("log, missing", [("nemo.log", ["micro_batch"]), ("deepspeed.log", ["tp", "pp"])])
def test_a_log_that_does_not_print_a_layout_axis_says_how_to_supply_it(tmp_path, log, missing):
    # A UX review: NeMo 2's log prints no micro-batch, the DeepSpeed one no tp or pp, and plan calibrate said
    # "(expected layout.micro_batch (plan estimate's --micro-batch))": a flag plan calibrate has not.
    # plan calibrate LOG refuses, naming what the log lacks and the way in: runs import, fill in, calibrate
    result = invoke("calibrate", LOGS / log, "--cluster", "dgx-h100-1024", "--model", "llama3-8b")
    assert result.exit_code == 2
    assert f"the log does not print {' and '.join(missing)}, which plan calibrate needs" in result.stderr
    assert f"plan runs import {LOGS / log} --cluster dgx-h100-1024 --model llama3-8b -o runs.yaml" in result.stderr
    assert "--micro-batch" not in result.stderr and "--tp" not in result.stderr
    # the recipe works: runs import writes the run with the missing axes null and says so
    runs = tmp_path / "runs.yaml"
    result = invoke("runs", "import", LOGS / log, "--cluster", "dgx-h100-1024", "--model", "llama3-8b", "-o", runs)
    assert result.exit_code == 0, result.output
    for axis in missing:
        assert f"fill in: runs.0.layout.{axis}:" in result.stderr and f"{axis}: null" in runs.read_text()
    # unfilled: calibrate names the field and the layout's line
    line = [l.startswith("  layout:") for l in runs.read_text().splitlines()].index(True) + 1
    result = invoke("calibrate", runs)
    assert result.exit_code == 2
    assert f"runs.yaml:{line}: runs.0.layout.{missing[0]}: the run does not state" in result.stderr
    assert "its log does not print it" in result.stderr
    # filled in (NeMo: 128 sequences on dp 1 = 8 / (tp 4 x pp 2) at micro-batch 1; DeepSpeed: tp 1, pp 1, dp 16)
    runs.write_text(runs.read_text().replace(": null", ": 1"))
    result = invoke("calibrate", runs)
    assert result.exit_code == 0, result.output
    assert "from 1 run" in result.stdout


def test_a_bridge_log_without_model_says_it_does_not_print_the_vocabulary(tmp_path):
    # A UX review: without --model the sample Megatron-Bridge log failed with "runs.0.model.vocab: missing
    # required key 'vocab'", a path the user never wrote. Its config summary prints 16 layers, hidden 2048,
    # 32 heads (8 KV), FFN 8192 and no vocabulary size.
    result = invoke("calibrate", LOGS / "megatron-bridge.log", "--cluster", "dgx-h100-1024")
    assert result.exit_code == 2
    assert "the log does not print the vocabulary size, which plan calibrate needs" in result.stderr
    assert "--model NAME with the log's dimensions (layers 16, hidden 2048, heads 32, ffn_hidden 8192" in result.stderr
    assert "missing required key" not in result.stderr and "runs.0" not in result.stderr
    # a --model of other dimensions stays refused (llama3-8b: 32 layers, hidden 4096)
    result = invoke("calibrate", LOGS / "megatron-bridge.log", "--cluster", "dgx-h100-1024", "--model", "llama3-8b")
    assert result.exit_code == 2 and "layers 16 (the log) against 32 (--model)" in result.stderr
    # or the runs file: the vocabulary null, to fill in (Llama 3's 128,256 here), then calibrate
    runs = tmp_path / "runs.yaml"
    result = invoke("runs", "import", LOGS / "megatron-bridge.log", "--cluster", "dgx-h100-1024", "-o", runs)
    assert result.exit_code == 0, result.output
    assert "fill in: runs.0.model.vocab:" in result.stderr and "    vocab: null\n" in runs.read_text()
    assert invoke("calibrate", runs).exit_code == 2
    runs.write_text(runs.read_text().replace("vocab: null", "vocab: 128256"))
    result = invoke("calibrate", runs)
    assert result.exit_code == 0, result.output
    assert "from 1 run" in result.stdout


def test_a_model_path_is_found_wherever_the_log_and_the_runs_file_are(tmp_path, monkeypatch):
    # --model and --cluster paths are relative to where the command runs; a runs file's are relative to the runs
    # file, and the check of a log's run resolved them against the log's folder: from out/, 'runs import
    # ../nemo.log --model ../m.yaml' looked for ../../m.yaml ("file not found", exit 2), and a runs file written
    # to another folder named a model that was not there. Now the runs file states the path absolute.
    (tmp_path / "out").mkdir()
    (tmp_path / "nemo.log").write_text((LOGS / "nemo.log").read_text())
    (tmp_path / "m.yaml").write_text((Path(__file__).resolve().parents[2] / "configs" / "models" / "llama3-8b.yaml").read_text())
    monkeypatch.chdir(tmp_path / "out")
    r = runner.invoke(app, ["runs", "import", "../nemo.log", "--cluster", "dgx-h100-1024", "--model", "../m.yaml",
                            "-o", "runs.yaml"])
    assert r.exit_code == 0, r.output
    text = (tmp_path / "out" / "runs.yaml").read_text()
    assert f'model: "{tmp_path / "m.yaml"}"' in text and "cluster: dgx-h100-1024" in text  # a shipped name as given
    (tmp_path / "out" / "deeper").mkdir()
    (tmp_path / "out" / "deeper" / "runs.yaml").write_text(text.replace("micro_batch: null", "micro_batch: 1"))
    r = runner.invoke(app, ["calibrate", "deeper/runs.yaml"])
    assert r.exit_code == 0 and "calibrated megatron-core" in r.output, r.output
