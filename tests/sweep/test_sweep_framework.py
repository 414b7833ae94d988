"""`plan sweep --framework` and a sweep file's `framework:` (as `plan search --framework`): each point searches
only what the framework runs, priced with its stack profile; the framework is part of a point's resume key, and
a point without one keeps the key it had before there was a framework."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner import sweep as sw
from planner.cli.main import app
from planner.export.frameworks import FRAMEWORK_STACK, framework_mask
from planner.layout.axes import AXES
from planner.layout.space import single_layout

LAYOUT = ("dp", "tp", "pp", "cp", "micro_batch", "vpp", "recompute", "sequence_parallel", "zero", "ep", "etp",
          "schedule")
# The inputs a point's key was made of before there was a framework (KEY_VERSION 1)
OLD_INPUTS = {"version", "model", "cluster", "cluster_label", "gpus", "objective", "limits", "space", "time_limit_s"}


def invoke(*args):
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output
    return result


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def small(**update) -> sw.SweepSpec:
    return sw.SweepSpec.model_validate({"models": ["gpt3-1.3b"], "cluster": "dgx-a100-1024", "gpus": [8],
                                        "objective": ["time", "energy"], **update})


# --- (1) each point as plan search --framework -------------------------------------------------------------

def test_a_torchtitan_sweep_gives_each_point_the_best_layout_of_plan_search_with_torchtitan(tmp_path):
    # Mixtral's experts: torchtitan main has no expert tensor parallelism and needs ep | dp_shard*cp*tp
    out = tmp_path / "rows.jsonl"
    res = invoke("sweep", "--models", "mixtral-8x7b", "--cluster", "dgx-h100-1024", "--gpus", "16,64",
                 "--framework", "torchtitan", "--out", out, "--workers", "1", "--quiet")
    assert res.exit_code == 0, res.output
    assert "framework torchtitan" in res.stdout  # the table's title says what was searched
    rows = read_jsonl(out)
    assert [r["gpus"] for r in rows] == [16, 64]
    for r in rows:
        one = invoke("search", "mixtral-8x7b", "dgx-h100-1024", "--gpus", r["gpus"], "--framework", "torchtitan",
                     "--top", "1", "--json")
        assert one.exit_code == 0, one.output
        best = json.loads(one.stdout)["best"]
        assert r["status"] == "ok", r["reason"]
        assert {k: r[k] for k in LAYOUT} == {k: best["layout"][k] for k in LAYOUT}
        for k in ("step_time_s", "tokens_per_s", "mfu", "energy_j_per_token", "avg_power_kw"):
            assert r[k] == best[k], k  # priced alike: with torchtitan's stack profile
        ok, reason = framework_mask("torchtitan", single_layout(**{a.name: best["layout"][a.name] for a in AXES
                                                                  if a.name in best["layout"]}))
        assert ok.all(), reason


def test_the_file_key_and_the_flag_make_the_same_points(tmp_path):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text("kind: sweep\nmodels: [gpt3-1.3b]\ngpus: [8, 16]\nframework: deepspeed\n")
    from_file = sw.expand(sw.load_sweep(sweep), tmp_path)
    from planner.cli.sweep import overrides_of

    flags = dict(models=["gpt3-1.3b"], scale_model=None, params=None, cluster=None, gpus=["8,16"], global_batch=None,
                 batch_tokens=None, tokens=None, objective=None, framework="deepspeed")
    from_flag = sw.expand(sw.with_overrides(sw.SweepSpec(), overrides_of(flags, {})))
    assert [p.key for p in from_file] == [p.key for p in from_flag]
    assert all(p.framework == "deepspeed" for p in from_file)
    assert all(p.model.training.stack.name == FRAMEWORK_STACK["deepspeed"] for p in from_file)
    # the flag overrides the file's key
    other = sw.expand(sw.load_sweep(sweep, {"framework": "megatron"}), tmp_path)
    assert {p.framework for p in other} == {"megatron"}


# --- (2) resuming -------------------------------------------------------------------------------------------

def test_rows_of_one_framework_are_not_taken_as_done_for_another(tmp_path):
    out = tmp_path / "rows.csv"
    megatron = sw.expand(small(framework="megatron"))
    first = sw.run_sweep(megatron, out=out)
    assert (first.computed, first.skipped) == (2, 0)
    titan = sw.run_sweep(sw.expand(small(framework="torchtitan")), out=out)
    assert (titan.computed, titan.skipped) == (2, 0)
    plain = sw.run_sweep(sw.expand(small()), out=out)  # no framework is a third sweep, not either of them
    assert (plain.computed, plain.skipped) == (2, 0)
    again = sw.run_sweep(megatron, out=out)
    assert (again.computed, again.skipped) == (0, 2) and again.rows == first.rows
    assert len(sw.read_rows(out)) == 6


def test_an_output_written_without_a_framework_still_resumes(tmp_path):
    out = tmp_path / "rows.jsonl"
    points = sw.expand(small())
    assert all(p.framework is None and set(p.inputs()) == OLD_INPUTS for p in points)  # the old key's inputs
    first = invoke("sweep", "--models", "gpt3-1.3b", "--gpus", "8", "--objective", "time,energy", "--out", out,
                   "--workers", "1", "--quiet")
    assert first.exit_code == 0, first.output
    assert [r["point_id"] for r in read_jsonl(out)] == [p.key for p in points]
    again = sw.run_sweep(points, out=out)
    assert (again.computed, again.skipped) == (0, 2)
    with_one = sw.expand(small(framework="torchtitan"))
    assert set(with_one[0].inputs()) == OLD_INPUTS | {"framework"}
    assert not {p.key for p in with_one} & {p.key for p in points}


# --- (3) bad input ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["jax", "TorchTitan", ""])
def test_an_unknown_framework_flag_is_bad_input_naming_it(name):
    res = invoke("sweep", "--models", "gpt3-1.3b", "--gpus", "8", "--framework", name)
    assert res.exit_code == 2
    assert res.stderr.count("\n") == 1 and res.stdout == ""
    assert f"--framework: no framework named '{name}'" in res.stderr and "torchtitan@0.2" in res.stderr


@pytest.mark.parametrize("value, shown", [("jax", "'jax'"), ("3", "got 3"), ("[torchtitan]", "torchtitan")])
def test_an_unknown_framework_in_a_sweep_file_is_bad_input_at_its_line(tmp_path, value, shown):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"kind: sweep\nmodels: [gpt3-1.3b]\ngpus: [8]\nframework: {value}\n")
    for args in (["sweep", sweep], ["check", sweep]):
        res = invoke(*args)
        assert res.exit_code == 2, res.output
        line = next(t for t in res.output.splitlines() if "framework" in t)
        assert f"sweep.yaml:4: framework: " in line and shown in line
    assert invoke("sweep", sweep).stderr.count("\n") == 1
