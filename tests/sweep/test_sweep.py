"""`plan sweep`: equals `plan search` point by point, resumes, runs in parallel, keeps failing points as rows."""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner import sweep as sw
from planner.cli.main import app
from planner.errors import SpecError
from planner.specs.loading import load_model
from planner.specs import ModelSpec

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]

# The documented contract (docs/sweeps.md, "Columns of --out"): other tools read these columns in this order.
HEADER = ("point_id,model,params,layers,hidden,heads,kv_heads,cluster,gpu,nodes,gpus,global_batch,seq_len,tokens,"
          "objective,status,reason,dp,tp,pp,cp,micro_batch,vpp,recompute,sequence_parallel,zero,ep,etp,schedule,offload,"
          "step_time_s,tokens_per_s,goodput_tokens_per_s,mfu,model_tflops_per_gpu,memory_gib,energy_j_per_token,"
          "avg_power_kw,time_to_train_days,energy_to_train_mwh,cost_usd_per_m_tokens,co2e_kg_per_m_tokens,planner_version").split(",")


def invoke(*args):
    result = runner.invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output
    return result


def small_spec(**update) -> sw.SweepSpec:
    data = dict(models=["gpt3-1.3b"], cluster="dgx-a100-1024", gpus=[8, 16, 32], objective=["time", "energy"])
    return sw.SweepSpec.model_validate({**data, **update})


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# --- the sweep equals plan search ----------------------------------------------------------------

@pytest.mark.parametrize("flags", [[], ["--global-batch", "256", "--max-bubble", "0.2", "--memory-headroom", "0.1"]])
def test_sweep_equals_plan_search_point_by_point(tmp_path, flags):
    out = tmp_path / "rows.jsonl"
    res = invoke("sweep", "--models", "gpt3-1.3b", "--cluster", "dgx-a100-1024", "--gpus", "8,16", "--gpus", "32",
                 "--objective", "time,energy", "--out", out, "--workers", "1", "--quiet", *flags)
    assert res.exit_code == 0, res.output
    rows = read_jsonl(out)
    assert [(r["gpus"], r["objective"]) for r in rows] == [(g, o) for g in (8, 16, 32) for o in ("time", "energy")]
    for r in rows:
        one = invoke("search", "gpt3-1.3b", "dgx-a100-1024", "--gpus", r["gpus"], "--objective", r["objective"],
                     "--json", *flags)
        assert one.exit_code == 0, one.output
        best = json.loads(one.stdout)["best"]
        assert r["status"] == "ok" and r["reason"] is None
        for k in ("dp", "tp", "pp", "micro_batch", "vpp", "recompute", "sequence_parallel", "zero"):
            assert r[k] == best["layout"][k], k
        for k in ("step_time_s", "tokens_per_s", "mfu", "model_tflops_per_gpu", "energy_j_per_token", "avg_power_kw"):
            assert r[k] == best[k], k
        assert r["memory_gib"] == best["memory_gib"]["total"]
        assert r["goodput_tokens_per_s"] == best.get("goodput_tokens_per_s")


def test_models_flag_takes_repeats_and_commas():
    a = sw.with_overrides(sw.SweepSpec(), {"models": ["gpt3-1.3b", "gpt3-2.7b"]})
    res_points = sw.expand(a)
    assert [p.model.name for p in res_points] == ["gpt3-1.3b", "gpt3-2.7b"]
    from planner.cli.sweep import split

    assert split(["gpt3-1.3b,gpt3-2.7b"]) == split(["gpt3-1.3b", "gpt3-2.7b"]) == ["gpt3-1.3b", "gpt3-2.7b"]


# --- resume, interrupt, parallel -----------------------------------------------------------------

def test_resume_skips_done_points_and_force_recomputes(tmp_path):
    points = sw.expand(small_spec())
    out = tmp_path / "rows.csv"
    first = sw.run_sweep(points, out=out)
    assert (first.computed, first.skipped) == (6, 0)
    again = sw.run_sweep(points, out=out)
    assert (again.computed, again.skipped) == (0, 6)
    assert again.rows == first.rows
    lines = out.read_text().splitlines()
    out.write_text("\n".join(lines[:3] + lines[4:]) + "\n")  # lose the third point's row
    partial = sw.run_sweep(points, out=out)
    assert (partial.computed, partial.skipped) == (1, 5)
    assert partial.rows == first.rows
    forced = sw.run_sweep(points, out=out, force=True)
    assert (forced.computed, forced.skipped) == (6, 0)
    assert len(sw.read_rows(out)) == 6


def test_a_changed_input_is_a_new_point(tmp_path):
    out = tmp_path / "rows.jsonl"
    sw.run_sweep(sw.expand(small_spec(gpus=[8])), out=out)
    run = sw.run_sweep(sw.expand(small_spec(gpus=[8], constraints={"memory_headroom": 0.2})), out=out)
    assert run.computed == 2
    assert len(read_jsonl(out)) == 4  # the rows of the other sweep are kept, after this one's


def test_interrupt_keeps_finished_rows(tmp_path):
    points = sw.expand(small_spec())
    out = tmp_path / "rows.jsonl"
    seen = []

    def stop_after_two(row):
        seen.append(row)
        if len(seen) == 2:
            raise KeyboardInterrupt

    with pytest.raises(sw.SweepInterrupted) as exc:
        sw.run_sweep(points, out=out, on_row=stop_after_two)
    assert len(exc.value.run.rows) == 2 and exc.value.total == 6
    assert [r["point_id"] for r in read_jsonl(out)] == [p.key for p in points[:2]]
    rest = sw.run_sweep(points, out=out)
    assert (rest.computed, rest.skipped) == (4, 2)


def test_ctrl_c_exits_130_with_rows_kept(tmp_path, monkeypatch):
    real, calls = sw.rows.run_point, []

    def interrupted_third(point):
        calls.append(point)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(point)

    monkeypatch.setattr(sw.rows, "run_point", interrupted_third)
    out = tmp_path / "rows.csv"
    res = invoke("sweep", "--models", "gpt3-1.3b", "--gpus", "8,16,32,64", "--out", out, "--workers", "1")
    assert res.exit_code == 130
    assert "interrupted: 2 of 4 points done" in res.output and "rerun to resume" in res.output
    assert len(sw.read_rows(out)) == 2


def test_parallel_equals_serial():
    points = sw.expand(small_spec())
    serial = sw.run_sweep(points, workers=1).rows
    parallel = sw.run_sweep(points, workers=2).rows
    assert parallel == serial
    assert [r["point_id"] for r in parallel] == [p.key for p in points]


# --- failing points are rows ---------------------------------------------------------------------

def test_a_model_too_big_for_the_gpus_is_a_row_with_the_reason():
    [row] = [sw.run_point(p) for p in sw.expand(small_spec(models=["gpt3-175b"], gpus=[8], objective="time"))]
    assert row["status"] == "infeasible"
    assert "memory" in row["reason"] and "nearest" in row["reason"]
    assert row["dp"] is None and row["step_time_s"] is None


def test_an_empty_layout_space_is_a_row_with_the_reason(tmp_path):
    # 7 GPUs, 2 layers, 512 sequences: tp must divide 16 heads (tp 1), pp <= 2 layers (pp 1), so dp 7,
    # which does not divide 512: no layout at all.
    model = load_model("gpt3-1.3b").model_copy(update={"layers": 2, "name": "two-layers"})
    path = tmp_path / "two.yaml"
    path.write_text(json.dumps(model.model_dump(mode="json")))
    [row] = [sw.run_point(p) for p in sw.expand(small_spec(models=[str(path)], gpus=[7], objective="time"))]
    assert row["status"] == "infeasible" and "no layout of 7 GPUs" in row["reason"]


def test_a_bug_at_one_point_is_an_error_row_and_is_retried(tmp_path, monkeypatch):
    import planner.search

    def broken(*a, **k):
        raise RuntimeError("boom")

    out = tmp_path / "rows.csv"
    points = sw.expand(small_spec(gpus=[8], objective="time"))
    monkeypatch.setattr(planner.search, "search", broken)
    [row] = sw.run_sweep(points, out=out).rows
    assert row["status"] == "error" and row["reason"] == "RuntimeError: boom"
    monkeypatch.undo()
    assert sw.run_sweep(points, out=out).computed == 1  # error rows are not kept as done


# --- columns -------------------------------------------------------------------------------------

def test_csv_and_jsonl_columns_are_stable(tmp_path):
    points = sw.expand(small_spec(gpus=[8], objective="time", tokens=3e11))
    for name in ("rows.csv", "rows.jsonl"):
        sw.run_sweep(points, out=tmp_path / name)
    with open(tmp_path / "rows.csv", newline="") as f:
        assert next(csv.reader(f)) == HEADER
    assert [list(r) for r in read_jsonl(tmp_path / "rows.jsonl")] == [HEADER]
    assert list(sw.COLUMN_NAMES) == HEADER
    assert sw.read_rows(tmp_path / "rows.csv") == sw.read_rows(tmp_path / "rows.jsonl")


def test_every_column_is_documented():
    doc = (ROOT / "docs" / "sweeps.md").read_text()
    for name in HEADER:
        assert f"| `{name}` |" in doc, name


def test_time_and_energy_to_train_follow_the_token_budget():
    [row] = [sw.run_point(p) for p in sw.expand(small_spec(gpus=[8], objective="time", tokens=3e11))]
    rate = row["goodput_tokens_per_s"] or row["tokens_per_s"]
    days = 3e11 / rate / 86400
    assert row["tokens"] == 3e11
    assert row["time_to_train_days"] == pytest.approx(days, rel=1e-12)
    assert row["energy_to_train_mwh"] == pytest.approx(row["avg_power_kw"] * days * 24 / 1000, rel=1e-12)
    [plain] = [sw.run_point(p) for p in sw.expand(small_spec(gpus=[8], objective="time"))]
    assert plain["time_to_train_days"] is None and plain["energy_to_train_mwh"] is None


def test_cost_and_carbon_per_million_tokens_follow_the_prices():
    # Shipped defaults (planner/specs.py PricingSpec, PowerSpec): $2 per GPU-hour, $0.10 per kWh, 429 gCO2e/kWh.
    # A million tokens take 1e6 / tokens_per_s seconds on `gpus` GPUs and 1e6 x energy_j_per_token joules.
    [row] = [sw.run_point(p) for p in sw.expand(small_spec(gpus=[8], objective="cost"))]
    seconds = 1e6 / row["tokens_per_s"]
    kwh = 1e6 * row["energy_j_per_token"] / 3.6e6
    assert row["cost_usd_per_m_tokens"] == pytest.approx(8 * seconds / 3600 * 2.0 + kwh * 0.10, rel=1e-9)
    assert row["co2e_kg_per_m_tokens"] == pytest.approx(kwh * 429 / 1000, rel=1e-9)


def test_a_count_above_the_cluster_enlarges_it():
    rows = [sw.run_point(p) for p in sw.expand(small_spec(gpus=[512, 2048], objective="time"))]
    # 8 GPUs per DGX node: the job's nodes are 512 / 8 = 64 (on the 128 of dgx-a100-1024) and 2048 / 8 = 256 (the
    # cluster enlarged to hold them)
    assert [(r["gpus"], r["nodes"]) for r in rows] == [(512, 64), (2048, 256)]
    assert {r["cluster"] for r in rows} == {"dgx-a100-1024"}


@pytest.mark.parametrize("gpus,nodes", [(8, 1), (4, 1), (12, 2), (64, 8)])
def test_nodes_are_the_jobs_not_the_clusters(gpus, nodes):
    # dgx-a100-1024: 128 nodes of 8 GPUs; a point of `gpus` spans ceil(gpus / 8) of them (4 -> 1, 12 -> 2, 64 -> 8).
    # Before: every row said 128, the cluster's count
    [row] = [sw.run_point(p) for p in sw.expand(small_spec(gpus=[gpus], objective="time"))]
    assert row["nodes"] == nodes


def test_a_resumed_file_reports_the_jobs_nodes_for_rows_written_before(tmp_path):
    # rows of a planner that wrote the cluster's node count (128) under `nodes`: kept as done on a resume, and
    # rewritten with the job's (8 GPUs on 8-GPU nodes: 1), so one column has one meaning in the file
    out = tmp_path / "rows.csv"
    points = sw.expand(small_spec(gpus=[8], objective="time"))
    sw.run_sweep(points, out=out, workers=1)
    rows = sw.read_rows(out)
    sw.write_rows(out, [{**r, "nodes": 128} for r in rows])
    again = sw.run_sweep(points, out=out, workers=1)
    assert again.computed == 0 and [r["nodes"] for r in sw.read_rows(out)] == [1]


# --- the scaling and batch rules -----------------------------------------------------------------

# GPT-3, Brown et al. 2020, Table 2.1: (parameters, d_model, n_layers).
GPT3_TABLE = [(760e6, 1536, 24), (1.3e9, 2048, 24), (2.7e9, 2560, 32), (6.7e9, 4096, 32), (13e9, 5140, 40),
              (175e9, 12288, 96)]


@pytest.mark.parametrize("params,d_model,layers", GPT3_TABLE)
def test_aspect_trend_follows_the_gpt3_table(params, d_model, layers):
    assert sw.aspect_trend(params) == pytest.approx(d_model / layers, rel=0.2)


@pytest.mark.parametrize("base", ["gpt3-1.3b", "llama3-8b"])
def test_generated_family_validates_and_hits_its_parameter_counts(base):
    b = load_model(base)
    for target in sw.parse_params("1e9:1e12:8"):
        m = sw.scale_model(b, target)
        ModelSpec.model_validate(m.model_dump())  # a valid spec, not only a copied one
        assert abs(m.total_params() / target - 1) <= 0.03
        assert m.hidden // m.heads == b.hidden // b.heads  # head size kept
        assert m.heads % 8 == 0 and m.heads // m.num_kv_heads == b.heads // b.num_kv_heads
        assert m.ffn / m.hidden == pytest.approx(b.ffn / b.hidden, rel=0.05)
        assert (m.vocab, m.seq_len, m.ffn_act, m.training) == (b.vocab, b.seq_len, b.ffn_act, b.training)
    big = sw.scale_model(b, 1e12)
    assert 100 <= big.layers <= 200 and 16384 <= big.hidden <= 32768  # Megatron's 1T: 128 x 25600


def test_scaling_below_the_embeddings_is_a_clear_error():
    with pytest.raises(SpecError, match="cannot scale llama3-8b"):
        sw.scale_model(load_model("llama3-8b"), 1e8)  # its 128256 x 4096 x 2 embeddings alone are 1.05B


@pytest.mark.parametrize("tokens,seq_len,expected", [
    (4194304, 2048, 2048),  # 2^22 / 2^11: exact
    (3e6, 2048, 1408),  # R = 1464.8, granule 2^floor(log2(183.1)) = 128, 11.4 -> 11 x 128
    (1e6, 2048, 480),  # R = 488.3, granule 2^floor(log2(61.0)) = 32, 15.3 -> 15 x 32
    (5 * 2048, 2048, 5),  # R = 5 < 8: granule 1
])
def test_batch_from_tokens(tokens, seq_len, expected):
    assert sw.batch_from_tokens(tokens, seq_len) == expected


def test_batch_rule_stays_within_a_sixteenth_and_divides_by_a_large_power_of_two():
    for raw in range(8, 20000, 37):
        b = sw.batch_from_tokens(raw * 1000.0, 1000)
        assert abs(b / raw - 1) <= 1 / 16
        assert b % (1 << math.floor(math.log2(raw / 8))) == 0


def test_parse_gpus_and_params():
    assert sw.parse_gpus(["64,256", "1024"]) == [64, 256, 1024]
    assert sw.parse_gpus("8:64") == [8, 16, 32, 64]
    assert sw.parse_params("1e9:1e12:4") == pytest.approx([1e9, 1e10, 1e11, 1e12])
    for bad in ("abc", "0", "64:8"):
        with pytest.raises(SpecError, match="--gpus"):
            sw.parse_gpus(bad)
    for bad in ("1e12:1e9:4", "1e9:1e12", "x"):
        with pytest.raises(SpecError, match="--params"):
            sw.parse_params(bad)


# --- the sweep file and the CLI edge -------------------------------------------------------------

def test_the_shipped_sweep_file_expands():
    spec = sw.load_sweep(ROOT / "configs" / "sweeps" / "gpt3-family.yaml")
    points = sw.expand(spec)
    assert len(points) == 8 * 12
    assert {p.model.training.global_batch for p in points} == {2048}  # 4194304 tokens / 2048


def test_flags_override_the_sweep_file():
    spec = sw.load_sweep(ROOT / "configs" / "sweeps" / "gpt3-family.yaml",
                         {"gpus": [64], "global_batch": 256, "scale_model": {"params": [2e9]}})
    [point] = sw.expand(spec)
    assert point.gpus == 64 and point.model.training.global_batch == 256


def test_a_bad_sweep_file_exits_2_with_its_location(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("modles: [gpt3-1.3b]\ngpus: [8]\n")
    res = invoke("sweep", path)
    assert res.exit_code == 2
    assert f"{path}:1: modles: unknown key 'modles'; did you mean 'models'?" in res.output


@pytest.mark.parametrize("key", ["objective", "cluster"])
def test_an_empty_list_in_a_sweep_file_exits_2(tmp_path, key):
    path = tmp_path / "empty.yaml"
    path.write_text(f"models: [gpt3-1.3b]\ngpus: [8]\n{key}: []\n")
    res = invoke("sweep", path)
    assert res.exit_code == 2 and f"{path}:3: {key}: an empty list" in res.output, res.output


@pytest.mark.parametrize("args,message", [
    (["--global-batch", "64", "--batch-tokens", "1e6"], "--global-batch/--batch-tokens"),
    (["--gpus", "eight"], "--gpus: cannot read 'eight'"),
    (["--out", "rows.xlsx"], "--out: unknown output format '.xlsx'"),
    (["--objective", "speed"], "--objective"),
    (["--objective", ""], "--objective: an empty list"),  # issue 15: it ran zero points and exited 0
    (["--cluster", ","], "--cluster: an empty list"),
    (["--max-micro-batch", "0"], "--max-micro-batch"),  # exit 2, as in `plan search`
    (["--min-mfu", "2"], "--min-mfu"),
    (["--workers", "0"], "--workers: must be 1 to 256"),
    (["--scale-model", "gpt3-1.3b"], "--scale-model/--params"),
])
def test_bad_flags_exit_2(args, message):
    res = invoke("sweep", "--models", "gpt3-1.3b", *args)
    assert res.exit_code == 2 and message in res.output, res.output


def test_parquet_without_pyarrow_says_how_to_get_it(tmp_path):
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        res = invoke("sweep", "--models", "gpt3-1.3b", "--gpus", "8", "--out", tmp_path / "r.parquet")
        assert res.exit_code == 2 and "pip install pyarrow" in res.output
    else:
        res = invoke("sweep", "--models", "gpt3-1.3b", "--gpus", "8", "--out", tmp_path / "r.parquet", "--quiet")
        assert res.exit_code == 0 and len(sw.read_rows(tmp_path / "r.parquet")) == 1


def test_the_documented_example_runs(tmp_path):
    res = invoke("sweep", "--scale-model", "gpt3-1.3b", "--params", "1e9:1e10:2", "--gpus", "8,64",
                 "--batch-tokens", "1048576", "--tokens", "3e11", "--out", tmp_path / "rows.csv", "--quiet")
    assert res.exit_code == 0, res.output
    assert "gpt3-1.3b-scaled-1B" in res.stdout and "gpt3-1.3b-scaled-10B" in res.stdout
    assert len(sw.read_rows(tmp_path / "rows.csv")) == 4


def test_nothing_to_sweep_exits_2():
    res = invoke("sweep")
    assert res.exit_code == 2 and "nothing to sweep" in res.output


def test_paths_in_a_sweep_file_are_relative_to_it(tmp_path, monkeypatch):
    model = load_model("gpt3-1.3b").model_copy(update={"name": "local-1.3b"})
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "m.yaml").write_text(json.dumps(model.model_dump(mode="json")))
    (tmp_path / "sub" / "sweep.yaml").write_text("models: [m.yaml]\ngpus: [8]\n")
    monkeypatch.chdir(tmp_path)
    [point] = sw.expand(sw.load_sweep(tmp_path / "sub" / "sweep.yaml"), tmp_path / "sub")
    assert point.model.name == "local-1.3b"


def test_out_in_a_new_folder_is_created_and_an_impossible_one_is_bad_input(tmp_path):
    out = tmp_path / "new" / "deeper" / "rows.csv"
    res = invoke("sweep", "--models", "gpt3-1.3b", "--gpus", "8", "--out", out, "--quiet")
    assert res.exit_code == 0, res.output
    assert len(sw.read_rows(out)) == 1
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    res = invoke("sweep", "--models", "gpt3-1.3b", "--gpus", "8", "--out", blocker / "rows.csv", "--quiet")
    assert res.exit_code == 2 and "cannot create the folder" in res.output and "Traceback" not in res.output


def test_a_name_a_spreadsheet_would_run_is_written_as_text_and_read_back_whole(tmp_path):
    # OWASP's CSV injection: a cell starting with = + - @ (or a tab, a carriage return) is a formula in Excel,
    # LibreOffice and Sheets. Such names are written behind a ' (shown as text); a name starting with ' gets one
    # more, so reading back drops exactly one and every name round-trips, as JSONL keeps them
    points = sw.expand(small_spec(gpus=[8], objective="time", tokens=3e11))
    sw.run_sweep(points, out=tmp_path / "rows.csv")
    (row,) = sw.read_rows(tmp_path / "rows.csv")[:1]
    names = ["=HYPERLINK(\"http://x\")", "+1", "-2", "@SUM(A1)", "'quoted", "'=both", "plain"]
    rows = [{**row, "point_id": f"p{i}", "model": name} for i, name in enumerate(names)]
    sw.write_rows(tmp_path / "named.csv", rows)
    with open(tmp_path / "named.csv", newline="") as f:
        cells = [r[HEADER.index("model")] for r in list(csv.reader(f))[1:]]
    assert cells == ["'=HYPERLINK(\"http://x\")", "'+1", "'-2", "'@SUM(A1)", "''quoted", "''=both", "plain"]
    assert [r["model"] for r in sw.read_rows(tmp_path / "named.csv")] == names
