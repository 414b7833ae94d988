"""The time vs energy-per-token Pareto frontier (planner/frontier.py) and `plan search --frontier`,
`--gpus-range` and `--objective carbon` at the CLI."""
from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from planner.cli.main import app
from planner.frontier import dominated, pareto_front
from planner.specs.loading import load_cluster, load_model
from planner.search import search, search_gpu_counts

runner = CliRunner()


def brute_force_front(t, e, rows):
    keep = [i for i in rows if not dominated(t, e, i, np.array([j for j in rows if j != i]))]
    # of exact duplicates only one is kept
    out, seen = [], set()
    for i in sorted(keep, key=lambda i: (t[i], e[i], i)):
        if (t[i], e[i]) not in seen:
            seen.add((t[i], e[i]))
            out.append(i)
    return out


@pytest.mark.parametrize("seed", range(5))
def test_frontier_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    t = rng.integers(1, 30, 300).astype(float)  # integer grid: ties in time and duplicates occur
    e = rng.integers(1, 30, 300).astype(float)
    rows = np.flatnonzero(rng.random(300) < 0.7)
    front = pareto_front(t, e, rows)
    assert sorted(front.tolist()) == sorted(brute_force_front(t, e, rows.tolist()))
    assert np.all(np.diff(t[front]) > 0) and np.all(np.diff(e[front]) < 0)


def test_frontier_of_an_empty_set():
    assert pareto_front(np.zeros(3), np.zeros(3), np.array([], dtype=int)).size == 0


@pytest.fixture(scope="module")
def small():
    model = load_model("gpt3-175b").model_copy(update={"layers": 8, "name": "tiny-175b-width"})
    return model, load_cluster("dgx-a100-1024")


def test_search_frontier_is_non_dominated_and_spans_fastest_to_most_frugal(small):
    model, cluster = small
    r = search(model, cluster, gpus=32, frontier=True)
    s, front, feasible = r.scores, r.frontier, np.flatnonzero(r.feasible)
    t, e = s.step_time_s, s.energy_j_per_token
    assert r.power_caps and front.size >= 2 and np.all(r.feasible[front])
    for i in front:
        assert not dominated(t, e, int(i), feasible)
    assert t[front[0]] == t[feasible].min()
    assert e[front[-1]] == e[feasible].min()
    assert np.all(np.diff(t[front]) > 0) and np.all(np.diff(e[front]) < 0)


def test_cli_frontier_json_lists_scored_layouts():
    result = runner.invoke(app, ["search", "gpt3-1.3b", "dgx-a100-1024", "--gpus", "16", "--frontier", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert isinstance(data["frontier"], list) and data["frontier"]
    for row in data["frontier"]:
        assert {"layout", "step_time_s", "energy_j_per_token", "power_cap_w", "goodput_tokens_per_s", "ettr"} <= set(row)
    times = [r["step_time_s"] for r in data["frontier"]]
    assert times == sorted(times)


def test_cli_frontier_table_and_carbon_objective():
    result = runner.invoke(app, ["search", "gpt3-1.3b", "dgx-a100-1024", "--gpus", "16", "--frontier",
                                 "--objective", "carbon"])
    assert result.exit_code == 0, result.output
    assert "Pareto frontier" in result.output and "objective: carbon" in result.output
    assert "ETTR" in result.output


def test_gpus_range_recommends_a_count(small):
    model, cluster = small
    r = search_gpu_counts(model, cluster, 8, 64)
    assert r.counts == [8, 16, 32, 64]
    assert r.recommended in r.counts
    # with a floor on scaling efficiency, no count below it is recommended
    strict = search_gpu_counts(model, cluster, 8, 64, limits=__import__("planner.constraints", fromlist=["Limits"]).Limits(min_scaling_efficiency=0.99))
    effs = dict(zip(strict.counts, strict.scaling_efficiency))
    assert strict.recommended is None or effs[strict.recommended] >= 0.99


def test_cli_gpus_range_json_and_bad_range():
    ok = runner.invoke(app, ["search", "gpt3-1.3b", "dgx-a100-1024", "--gpus-range", "8:32", "--json"])
    assert ok.exit_code == 0, ok.output
    data = json.loads(ok.output)
    assert [c["gpus"] for c in data["counts"]] == [8, 16, 32] and data["recommended_gpus"] in (8, 16, 32)
    bad = runner.invoke(app, ["search", "--gpus-range", "64-8"])
    assert bad.exit_code == 2 and "--gpus-range" in bad.output
