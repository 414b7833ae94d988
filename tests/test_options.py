"""Every limit and setting is declared once (planner/constraints/, planner/options.py) and every
command and file that takes it reads that declaration."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.layout.axes import fixable
from planner.check import PlanConstraints
from planner.cli.main import app
from planner.constraints import CONSTRAINTS, Limits, evaluate
from planner.errors import SpecError
from planner.layout.space import single_layout
from planner.options import (COMMAND_OPTIONS, GLOBAL_BATCH, OPTIONS, SEQ_LEN, check_option, flag_of,
                             spec_bounds)
from planner.score import score
from planner.specs import ModelSpec, TrainingSpec
from planner.specs.loading import load_cluster, load_model
from planner.specs.schema import json_schema
from planner.sweep import ConstraintsSpec

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()


def help_of(command: str) -> str:
    return runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"}).output


def test_flags_and_keys_are_unique():
    flags = [o.flag for o in OPTIONS] + [a.flag for a in fixable()]
    keys = [o.key for o in OPTIONS] + [a.name for a in fixable()]
    assert len(set(flags)) == len(flags) and len(set(keys)) == len(keys)


@pytest.mark.parametrize("key, flag, off", [
    ("max_step_time_s", "--max-step-time", None),
    ("min_mfu", "--min-mfu", None),
    ("max_power_kw", "--max-power-kw", None),
    ("max_global_batch_tokens", "--max-global-batch-tokens", None),
    ("memory_headroom", "--memory-headroom", 0.0),  # commands default to 0.05; Limits() keeps the whole GPU
    ("allow_cross_node_tp", "--allow-cross-node-tp", False),
])
def test_named_limits_have_their_flag_and_are_off_in_limits(key, flag, off):
    assert flag_of(key) == flag
    assert getattr(Limits(), key) == off and type(getattr(Limits(), key)) is type(off)


def test_default_limits_switch_on_only_the_hardware_checks():
    """Unconstrained by default: with Limits() only the checks no option switches on (memory,
    the NVLink domain, the GPU count) build masks; every bound waits for its option."""
    model, cluster = load_model("gpt3-1.3b"), load_cluster("dgx-a100-1024")
    s = score(model, cluster, single_layout(dp=8, tp=1, pp=1, micro_batch=1, num_microbatches=64))
    assert [m.name for m in evaluate(model, cluster, s, Limits())] == ["memory", "tp_in_nvlink_domain", "gpu_count"]
    on = evaluate(model, cluster, s, Limits(max_step_time_s=1e6, min_mfu=1e-9, max_power_kw=1e9))
    assert [m.name for m in on] == ["memory", "tp_in_nvlink_domain", "gpu_count", "max_step_time", "min_mfu",
                                    "max_power"]


@pytest.mark.parametrize("where, command", [("search", "search"), ("estimate", "estimate"), ("sweep", "sweep")])
def test_each_command_takes_the_options_declared_for_it(where, command):
    text = help_of(command)
    for o in OPTIONS:
        assert (o.flag in text) == (where in o.where), (command, o.flag)


def test_files_take_the_options_declared_for_them():
    plan_schema = json_schema("plan")["$defs"]["PlanConstraints"]["properties"]
    for o in OPTIONS:
        assert (o.key in PlanConstraints.model_fields) == ("plan" in o.where), o.key
        assert (o.key in plan_schema) == ("plan" in o.where), o.key
        assert (o.key in ConstraintsSpec.model_fields) == ("sweep" in o.where), o.key
        assert flag_of(o.key) == o.flag


def test_help_shows_units():
    # units in brackets survive rich's markup: "[s]" is text, not a style
    text = help_of("search")
    assert "upper bound on step time [s]" in text and "fix the micro-batch size [sequences]" in text


def test_sweep_help_names_the_defaults_a_file_can_override():
    text = help_of("sweep")
    assert "fraction of GPU memory kept free (default 0.05)" in text
    assert "largest micro-batch to enumerate (default 32)" in text


def test_every_flag_is_documented():
    """In docs/commands.md, the reference of every command's options."""
    doc = (ROOT / "docs" / "commands.md").read_text()
    for flag in [o.flag for o in OPTIONS] + [a.flag for a in fixable()]:
        assert flag in doc, flag


def test_every_constraint_names_its_family_and_unit_or_switch():
    families = {"hardware", "performance", "energy", "scalability"}
    for c in CONSTRAINTS:
        assert c.family in families
        if c.bound is not None:  # a bound is stated with the option that sets it
            assert c.option is not None and "{flag}" in c.message


@pytest.mark.parametrize("args, fragment", [
    (["search", "--min-mfu", "2"], "--min-mfu: out of range: got 2 (expected a value > 0 and <= 1)"),
    (["search", "--max-step-time", "-1"], "--max-step-time: out of range"),
    (["estimate", "gpt3-175b", "dgx-a100-1024", "--tp", "8", "--pp", "8", "--micro-batch", "1",
      "--max-bubble", "1.5"], "--max-bubble: out of range"),
    (["sweep", "--models", "gpt3-1.3b", "--min-scaling-efficiency", "0"], "--min-scaling-efficiency"),
    (["search", "--time-limit", "0"], "--time-limit: out of range"),
    (["estimate", "gpt3-175b", "dgx-a100-1024", "--tp", "8", "--pp", "8", "--micro-batch", "1", "--gpus", "-64"],
     "--gpus: out of range: got -64 (expected an integer > 0 and <= 10,000,000)"),
    (["search", "--gpus", "0"], "--gpus: out of range: got 0 (expected an integer > 0 and <= 10,000,000)"),
])
def test_bounds_hold_on_the_command_line(args, fragment):
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and fragment in r.output, r.output


# --- bounds of every option (issue #15) -------------------------------------------------------------

ALL_OPTIONS = OPTIONS + COMMAND_OPTIONS


@pytest.mark.parametrize("option", [o for o in ALL_OPTIONS if o.kind is not bool], ids=lambda o: o.flag)
def test_every_option_has_finite_bounds_on_both_sides(option):
    """A bound on each side, both finite: NaN, infinities and 1e30 are out of every option."""
    assert {"gt", "ge"} & set(option.bounds) and {"lt", "le"} & set(option.bounds), option.flag
    assert all(math.isfinite(b) for b in option.bounds.values())
    for value in (math.nan, math.inf, -math.inf, 1e30, -1e30):
        assert option.problem(value) is not None, (option.flag, value)
    if option.kind is int:
        assert option.problem(10**400) is not None and option.problem(-(10**400)) is not None


def test_overridden_spec_fields_keep_the_spec_bounds():
    """--global-batch and --seq-len override spec fields: the same bounds as in a model file."""
    assert GLOBAL_BATCH.bounds == {"gt": 0, "le": 100_000_000} == spec_bounds(TrainingSpec, "global_batch")
    assert SEQ_LEN.bounds == spec_bounds(ModelSpec, "seq_len")


@pytest.mark.parametrize("value, shown", [(10**400, "1.000e+400"), (2**63, "9.223e+18"), (float("nan"), "nan"),
                                          (-5, "-5"), (1e30, "1e+30"), (-(10**30), "-1e+30")])
def test_out_of_range_messages_show_any_number(value, shown):
    """A 400-digit integer is reported, not an OverflowError from formatting it as a float."""
    with pytest.raises(SpecError, match=re.escape(f"out of range: got {shown} (expected an integer > 0 and <= 100,000,000)")):
        check_option(GLOBAL_BATCH, value)


@pytest.mark.parametrize("flag", [o.flag for o in OPTIONS if o.kind is float and "search" in o.where])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_float_options_refuse_nan_and_infinities(flag, value):
    """Found by the tester: `--max-step-time nan` exited 1 (nothing fit a NaN limit) and
    `--critical-batch-tokens nan` printed bare NaN in the JSON with solver OPTIMAL."""
    r = runner.invoke(app, ["search", "gpt3-1.3b", "dgx-a100-1024", "--gpus", "8", "--json", flag, value])
    assert r.exit_code == 2, r.output
    assert f"{flag}: out of range: got {value}" in r.stderr
    # --json: the error as JSON on stdout, naming the flag (nothing else: no layout was scored)
    assert json.loads(r.stdout)["error"]["errors"] == [
        {"message": f"out of range: got {value}", "file": None, "line": None, "path": flag,
         "expected": json.loads(r.stdout)["error"]["errors"][0]["expected"]}]
