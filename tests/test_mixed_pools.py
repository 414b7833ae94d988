"""`plan search` on a cluster of several pools (planner/mixed_pools.py): each pool alone, pipelines
across pools placed by CP-SAT (planner/cpsat/pool_placement.py), and the JSON contract `layout.stage_pools`."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from planner.cli.main import app
from planner.estimate import layout_of
from planner.specs.loading import load_cluster, load_model
from planner.cpsat.pool_placement import pool_instance, solve
from planner.score import score

TWIN = """name: twin-h100
pools:
  - {name: a, gpu: h100-sxm-80gb, nodes: 16, node: {gpus: 8, nvlink_gbps: 450, network_gbps: 50}}
  - {name: b, gpu: h100-sxm-80gb, nodes: 16, node: {gpus: 8, nvlink_gbps: 450, network_gbps: 50}}
inter_pool_gbps: 50
power: {pue: 1.1, node_overhead_w: 4600}
"""


@pytest.mark.parametrize("tp,pp,mb", [(8, 8, 1), (4, 16, 1), (8, 4, 2)])
def test_placement_prices_a_pipeline_like_the_search(tmp_path, tp, pp, mb):
    # Two identical pools of 128 H100s and the network of dgx-h100-1024 between them: a 256-GPU
    # pipeline must span both, and the placement's pipeline plus what lies outside it (exposed DP
    # communication, optimizer, overheads, from the search's own score) must price the step as
    # the search prices the same layout on one H100 cluster: both are m T_max + sum_r T_r - T_max
    # over the same per-layer times (Narayanan et al. 2021), within the p2p and overhead details.
    (tmp_path / "twin.yaml").write_text(TWIN)
    model, twin, one = load_model("gpt3-175b"), load_cluster(tmp_path / "twin.yaml"), load_cluster("dgx-h100-1024")
    lay = layout_of(model, 256, dict(tp=tp, pp=pp, micro_batch=mb, sequence_parallel=True, zero=1), gpus_said="test")
    placed = solve(pool_instance(model, twin, lay))
    assert placed.status == "OPTIMAL" and set(placed.stage_pools) == {"a", "b"}
    assert placed.stage_layers == (96 // pp,) * pp  # identical pools: an even split
    s = score(model, one, lay)
    t = s.time_s
    priced = placed.step_s + float(t.dp_comm[0] + t.optimizer[0] + t.overhead[0])
    assert priced == pytest.approx(float(s.step_time_s[0]), rel=0.03)


def test_search_json_on_a_mixed_cluster():
    result = CliRunner().invoke(app, ["search", "gpt3-175b", "mixed-h100-a100", "--json", "--top", "2"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    single = data["results"][0]["layout"]  # the best single pool's search
    assert single["stage_pools"] == [single["stage_pools"][0]] * single["pp"]  # one pool, every rank
    assert set(data["pools"]) == {"h100", "a100"}
    # `best` is the faster of the two plans: here the 1,024 GPUs across pools beat either pool's 512
    assert data["fastest"] == "mixed" and data["best"] == data["mixed"]
    assert data["best"]["step_time_s"] < data["results"][0]["step_time_s"]
    mixed = data["mixed"]["layout"]
    assert len(mixed["stage_pools"]) == len(mixed["stage_layers"]) == mixed["pp"]
    assert set(mixed["stage_pools"]) == {"h100", "a100"} and sum(mixed["stage_layers"]) == 96
    # the H100 (989 dense BF16 TFLOP/s against the A100's 312) holds more layers on every rank
    h100 = [k for q, k in zip(mixed["stage_pools"], mixed["stage_layers"]) if q == "h100"]
    a100 = [k for q, k in zip(mixed["stage_pools"], mixed["stage_layers"]) if q == "a100"]
    assert min(h100) > max(a100)
    assert data["mixed"]["solver"]["status"] == "OPTIMAL" and data["fastest"] in ("mixed", "h100", "a100")


def test_a_placement_inside_one_pool_is_not_reported_as_mixed():
    # 64 GPUs of GPT-3 1.3B fit one pool: the placement keeps every rank on the H100s, which is the
    # H100 pool's own layout (scored there with every term), so nothing spans pools
    result = CliRunner().invoke(app, ["search", "gpt3-1.3b", "mixed-h100-a100", "--gpus", "64", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["mixed"] is None and data["fastest"] == "h100"


def test_best_is_the_overall_best_plan_pools_included():
    # 768 GPUs: more than either pool's 512, so only a pipeline across pools runs; `best` was null
    result = CliRunner().invoke(app, ["search", "gpt3-175b", "mixed-h100-a100", "--gpus", "768", "--json", "--top", "1"])
    assert result.exit_code == 0, result.output[-800:]
    data = json.loads(result.stdout)
    assert data["pools"] == {"h100": None, "a100": None} and data["fastest"] == "mixed"
    assert data["best"] == data["mixed"] and data["best"]["gpus"] == 768
    assert set(data["best"]["layout"]["stage_pools"]) == {"h100", "a100"}
