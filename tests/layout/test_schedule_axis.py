"""The `schedule` axis (issue 40 item 3): its rules, its default and a search fixed to it."""
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from planner.cli import app
from planner.layout.axes import RULES, SCHEDULES, SpaceContext

runner = CliRunner()
RULE = next(r for r in RULES if r.name == "schedule_fits")
CTX = SpaceContext(gpus=64, layers=96, heads=96, kv_heads=96, global_batch=64)


@pytest.mark.parametrize("schedule, pp, vpp, ok", [
    ("1f1b", 1, 1, True), ("1f1b", 8, 1, True), ("1f1b", 8, 2, False),
    ("interleaved", 8, 2, True), ("interleaved", 8, 1, False),
    ("zb-h1", 8, 1, True), ("zb-h1", 1, 1, False), ("zb-h1", 8, 3, False),
    ("zb-v", 8, 2, True), ("zb-v", 8, 4, False), ("zb-v", 8, 1, False),
    ("interleaved-zb", 8, 3, True), ("interleaved-zb", 8, 1, False),
    ("dualpipe", 8, 1, True), ("dualpipe", 6, 1, True), ("dualpipe", 3, 1, False), ("dualpipe", 8, 2, False),
    ("dualpipev", 8, 2, True), ("dualpipev", 3, 2, True), ("dualpipev", 8, 1, False),
])
def test_schedule_rule(schedule, pp, vpp, ok):
    v = {"schedule": np.array([SCHEDULES.index(schedule)]), "pp": np.array([pp]), "vpp": np.array([vpp])}
    assert bool(RULE.ok(v, CTX)[0]) is ok
    if not ok:
        assert schedule in RULE.message({"schedule": schedule, "pp": pp, "vpp": vpp}, CTX)


def test_search_fixed_to_a_schedule_keeps_to_it():
    r = runner.invoke(app, ["search", "gpt3-175b", "dgx-a100-1024", "--gpus", "64", "--global-batch", "64",
                            "--schedule", "zb-h1", "--top", "3", "--json"])
    assert r.exit_code == 0, r.output
    best = json.loads(r.output)["results"]
    assert best and all(b["layout"]["schedule"] == "zb-h1" and b["layout"]["vpp"] == 1 for b in best)


def test_search_json_names_the_default_schedule():
    r = runner.invoke(app, ["search", "gpt3-175b", "dgx-a100-1024", "--gpus", "64", "--global-batch", "64",
                            "--top", "3", "--json"])
    assert r.exit_code == 0, r.output
    for b in json.loads(r.output)["results"]:
        assert b["layout"]["schedule"] == ("interleaved" if b["layout"]["vpp"] > 1 else "1f1b")


def test_unknown_schedule_is_bad_input():
    r = runner.invoke(app, ["search", "--schedule", "gpipe"])
    assert r.exit_code == 2 and "gpipe" in r.output


MICRO = next(r for r in RULES if r.name == "schedule_microbatches")


@pytest.mark.parametrize("schedule, dp, mb, pp, ok", [
    # global batch 64: m = 64 / (dp x mb). dualpipe: m even and >= 2 pp; dualpipev: m >= 2 pp (dualpipe.py)
    ("dualpipe", 2, 2, 8, True),    # m = 16 = 2 x 8
    ("dualpipe", 4, 2, 8, False),   # m = 8 < 16
    ("dualpipe", 1, 1, 2, True),    # m = 64
    ("dualpipev", 2, 2, 8, True),   # m = 16
    ("dualpipev", 2, 4, 8, False),  # m = 8
    ("1f1b", 8, 8, 8, True),        # m = 1: 1F1B runs any count
])
def test_dualpipe_needs_its_micro_batches(schedule, dp, mb, pp, ok):
    v = {"schedule": np.array([SCHEDULES.index(schedule)]), "dp": np.array([dp]), "micro_batch": np.array([mb]),
         "pp": np.array([pp])}
    assert bool(MICRO.ok(v, CTX)[0]) is ok
    if not ok:
        assert MICRO.message({"schedule": schedule, "dp": dp, "micro_batch": mb, "pp": pp}, CTX) == (
            f"schedule {schedule} needs {'an even number of ' if schedule == 'dualpipe' else ''}micro-batches of "
            f"at least 2 pp = {2 * pp} per step (got {64 // (dp * mb)})")


def test_dualpipe_odd_micro_batch_count_is_refused():
    # m = 64 / (2 x ... ) can be odd only with an odd global batch share: global batch 48, dp 2, mb 8: m = 3
    ctx = SpaceContext(gpus=64, layers=96, heads=96, kv_heads=96, global_batch=48)
    v = {"schedule": np.array([SCHEDULES.index("dualpipe")]), "dp": np.array([2]), "micro_batch": np.array([1]),
         "pp": np.array([2])}
    assert bool(MICRO.ok(v, ctx)[0])  # m = 24: even, >= 4
    v["micro_batch"] = np.array([8])  # m = 3: odd
    assert not bool(MICRO.ok(v, ctx)[0])
