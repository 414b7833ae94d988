"""`plan calibrate` of a run whose measured step is absurd against the shipped constants (planner/fidelity/own.py
MAX_MEASURED_RATIO): exit 2 naming the runs file, the run's line and `measured`. Before, 1e-300 s passed
the runs file's bounds (> 0) and the profile's own check failed inside the fit: "internal error:
ValidationError: 2 validation errors for ProfileSpec" (exit 3)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli.main import app

runner = CliRunner()
LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"
RUN = """kind: runs
runs:
  - name: eight
    model: gpt3-1.3b
    cluster: dgx-h100-1024
    gpus: 8
    global_batch: 64
    layout: {{tp: 1, pp: 1, micro_batch: 1}}
    measured: {{step_time_s: {step}}}
"""


@pytest.mark.parametrize("step, said", [("1e-300", "times faster than"), ("1e-4", "times faster than"),
                                        ("4000", "times slower than")])
def test_a_step_five_hundred_times_off_the_prediction_is_bad_input(tmp_path, step, said):
    # gpt3-1.3b on 8 H100s, batch 64: the shipped constants price about 0.5 s a step (a few tenths of a second:
    # 6 x 1.3e9 x 64 x 2048 FLOP = 1.0e15 FLOP over 8 x 989e12 FLOP/s at ~30-50 % of peak); 0.1 ms and 4,000 s
    # (the step in ms written as s) are each more than 500x away from it
    runs = tmp_path / "runs.yaml"
    runs.write_text(RUN.format(step=step))
    r = runner.invoke(app, ["calibrate", str(runs)])
    assert r.exit_code == 2, r.output
    assert f"{runs}:3: measured: eight: measured step" in r.output and said in r.output
    assert "internal error" not in r.output


def test_a_step_whose_ratio_underflows_is_bad_input(tmp_path):
    # The smallest subnormal step, 5e-324 s, against a prediction of several seconds (batch 1024: 16 x the
    # ~0.5 s of batch 64 above): 5e-324 / 8 rounds to 0.0, and saying "how many times faster" divided by
    # it (ZeroDivisionError, exit 3, before; `plan check` of the file too).
    runs = tmp_path / "runs.yaml"
    runs.write_text(RUN.format(step="5e-324").replace("global_batch: 64", "global_batch: 1024"))
    for command in (["calibrate", str(runs)], ["check", str(runs)]):
        r = runner.invoke(app, command)
        assert r.exit_code == 2, r.output
        assert "measured step 4.94e-324 s, inf times faster than" in r.output and "internal error" not in r.output


def test_a_plausible_step_still_calibrates(tmp_path):
    runs = tmp_path / "runs.yaml"
    runs.write_text(RUN.format(step="0.6"))
    r = runner.invoke(app, ["calibrate", str(runs)])
    assert r.exit_code == 0, r.output


def test_a_log_of_tiny_step_times_is_bad_input(tmp_path):
    # Megatron's "elapsed time per iteration (ms): 1e-300" on every step: 1e-303 s
    log = tmp_path / "train.log"
    log.write_text(re.sub(r"elapsed time per iteration \(ms\): [0-9.]+", "elapsed time per iteration (ms): 1e-300",
                          (LOGS / "megatron.log").read_text()))
    r = runner.invoke(app, ["calibrate", str(log), "--cluster", "dgx-h100-1024"])
    assert r.exit_code == 2, r.output
    assert str(log) in r.output and "measured step 1e-303 s" in r.output and "internal error" not in r.output


def test_an_inline_model_without_its_sequence_names_the_key(tmp_path):
    # was "internal error: IndexError" (exit 3): the missing key's path was dropped on the inline model
    runs = tmp_path / "runs.yaml"
    runs.write_text(RUN.format(step="0.6").replace("model: gpt3-1.3b",
                                                   "model: {name: m, layers: 4, hidden: 256, heads: 4, vocab: 1000, "
                                                   "training: {global_batch: 8}}"))
    r = runner.invoke(app, ["calibrate", str(runs)])
    assert r.exit_code == 2, r.output
    assert f"{runs}:4: runs.0.model.seq_len: missing required key 'seq_len'" in r.output


def test_a_torchtitan_log_without_a_model_calibrates(tmp_path):
    # was "internal error: IndexError" (exit 3): the model the log prints had no sequence; its FeedForward width
    # is read from multiple_of and ffn_dim_multiplier, its stack is torchtitan's
    r = runner.invoke(app, ["runs", "import", str(LOGS / "torchtitan.log"), "--cluster", "dgx-h100-1024"])
    assert r.exit_code == 0, r.output
    assert "stack: torchtitan" in r.stdout and "ffn_hidden: 14336" in r.stdout and "torch_compile: true" in r.stdout
    r = runner.invoke(app, ["calibrate", str(LOGS / "torchtitan.log"), "--cluster", "dgx-h100-1024"])
    assert r.exit_code == 0, r.output  # its micro-batch from "local batch size 2" (was an internal error too)


def test_a_log_without_its_micro_batch_says_so(tmp_path):
    # NeMo 2's log prints no micro-batch size: plan estimate's required axis, named (was an internal error, then
    # "runs.0.layout.micro_batch: ... (plan estimate's --micro-batch)", a path and a flag plan calibrate has not)
    r = runner.invoke(app, ["calibrate", str(LOGS / "nemo.log"), "--cluster", "dgx-h100-1024", "--model", "llama3-8b"])
    assert r.exit_code == 2, r.output
    assert "nemo.log: the log does not print micro_batch, which plan calibrate needs" in r.output
    assert "--micro-batch" not in r.output and "runs.0" not in r.output


def test_a_run_says_how_fp8_was_scaled(tmp_path):
    # Megatron --fp8-recipe tensorwise (current scaling) on the run, delayed on the shipped model: the run's own
    from planner.fidelity.runs import load_runs

    runs = tmp_path / "runs.yaml"
    runs.write_text(RUN.format(step="0.6").replace("    gpus: 8\n", "    gpus: 8\n    precision: fp8\n    fp8_recipe: tensorwise\n"))
    (run,) = load_runs(runs)
    assert (run.model.training.precision, run.model.training.fp8_recipe) == ("fp8", "tensorwise")
    runs.write_text(RUN.format(step="0.6").replace("    gpus: 8\n", "    gpus: 8\n    fp8_recipe: per-block\n"))
    r = runner.invoke(app, ["calibrate", str(runs)])
    assert r.exit_code == 2 and "runs.0.fp8_recipe" in r.output and "internal error" not in r.output, r.output


def test_a_log_run_without_any_layout_gets_each_required_axis_to_fill_in():
    # a parser that reads no layout at all: tp, pp and micro_batch (plan estimate's required axes) each null
    # in a layout of their own, not a KeyError; a model's missing vocabulary goes before its training
    from planner.fidelity.runs import flagged, unstated

    entry = {"name": "x", "model": {"name": "m", "layers": 2, "hidden": 64, "heads": 4, "training": {"global_batch": 8}},
             "gpus": 8}
    out = flagged(entry, unstated(entry))
    assert out["layout"] == {"tp": None, "pp": None, "micro_batch": None}
    assert list(out["model"]) == ["name", "layers", "hidden", "heads", "vocab", "training"] and out["model"]["vocab"] is None
    assert "layout" not in entry  # the entry given is left as it was


def test_a_run_name_of_terminal_escapes_is_printed_escaped(tmp_path):
    # A run's name is the log's file stem or the runs file's name: ESC [31m (red) and ESC ]0;...BEL (the terminal's
    # title) reached the terminal raw in calibrate's table, runs import's "fill in:" line and validate --profile's
    # table; each is printed as the visible \x1b, as the planner prints file names (planner/errors.py printable)
    hostile = "r\x1b[31mRED\x1b]0;title\x07"
    runs, profile = tmp_path / "runs.yaml", tmp_path / "profile.yaml"
    runs.write_text(RUN.format(step=0.5).replace("name: eight", 'name: "r\\e[31mRED\\e]0;title\\a"'))
    log = tmp_path / f"{hostile}.log"
    log.write_text((LOGS / "megatron-bridge.log").read_text())
    for command in (["calibrate", str(runs), "-o", str(profile)], ["validate", "--profile", str(profile)],
                    ["runs", "import", str(log), "--cluster", "dgx-h100-1024"]):
        r = runner.invoke(app, command)
        assert r.exit_code == 0, r.output
        assert "\x1b" not in r.output and "\x07" not in r.output
        assert "r\\x1b[31mRED\\x1b]0;title\\x07" in r.output, r.output


@pytest.mark.parametrize("value, said", [("abc", "'abc' is not an integer > 0"), ("[1, 2]", "[1, 2] is not an integer > 0"),
                                         ("true", "True is not an integer > 0")])
def test_a_hand_edited_profile_layout_is_bad_input(tmp_path, value, said):
    # plan validate --profile replays each run's layout through plan estimate: tp 'abc' was "internal error:
    # TypeError: '<=' not supported between instances of 'str' and 'int'" (exit 3)
    runs, profile = tmp_path / "runs.yaml", tmp_path / "profile.yaml"
    runs.write_text(RUN.format(step=0.5))
    assert runner.invoke(app, ["calibrate", str(runs), "-o", str(profile)]).exit_code == 0
    text = profile.read_text()
    assert "\n    tp: 1\n" in text
    profile.write_text(text.replace("\n    tp: 1\n", f"\n    tp: {value}\n", 1))
    line = text.splitlines().index("  layout:") + 1
    for command in (["validate", "--profile", str(profile)], ["check", str(profile)]):
        r = runner.invoke(app, command)
        assert r.exit_code == 2, r.output
        assert f"{profile}:{line}: runs.0.layout: layout tp: {said}" in r.output.replace("error ", "error: "), r.output


@pytest.mark.parametrize("old, new, said", [
    # gpus [0, 0]: every band log2(64 / 0) wide, 'step_time_error_pct is infinite' naming no file or field
    ("  gpus: [8, 8]\n", "  gpus: [0, 0]\n", "measured.gpus: gpus 0-0 is no measured range"),
    ("  gpus: [8, 8]\n", "  gpus: [16, 8]\n", "measured.gpus: gpus 16-8 is no measured range"),
    # an axis value the band reads as its axis's: 'internal error: ValueError' (int('abc'), tuple.index)
    ("    tp: [1]\n", "    tp: [abc]\n", "measured.axes: axes tp: 'abc' is not an integer > 0"),
    ("    recompute: [none]\n", "    recompute: [bogus]\n", "measured.axes: axes recompute: 'bogus' is not one of"),
    # a left-out error the run's bounds allow (<= 1e6 %) was refused by --profile's own copy of it (<= 1000):
    # 'internal error: ValidationError: 1 validation error for OwnRuns'
    ("  loo_error_pct: null\n", "  loo_error_pct: 1000000\n", None),
])
def test_a_hand_edited_profile_range_is_bad_input(tmp_path, old, new, said):
    runs, profile = tmp_path / "runs.yaml", tmp_path / "profile.yaml"
    runs.write_text(RUN.format(step=0.5))
    assert runner.invoke(app, ["calibrate", str(runs), "-o", str(profile)]).exit_code == 0
    text = profile.read_text()
    assert old in text
    profile.write_text(text.replace(old, new, 1))
    r = runner.invoke(app, ["estimate", "gpt3-1.3b", "dgx-h100-1024", "--gpus", "64", "--tp", "1", "--pp", "1",
                            "--micro-batch", "1", "--profile", str(profile)])
    assert "internal error" not in r.output and r.exit_code == (0 if said is None else 2), r.output
    if said is not None:
        at = "  axes:" if "axes" in said else old.rstrip("\n")  # the line of the field the message names
        line = text.splitlines().index(at) + 1
        assert f"{profile}:{line}: {said}" in r.output, r.output
