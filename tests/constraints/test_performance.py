"""Performance family alone (planner/constraints/performance.py): max_step_time, min_mfu, max_bubble.

Hand-built rows (figures chosen here) give exact messages; one layout scored by planner.score
checks the family reads the real scores, against a bound worked out from the paper's numbers.
"""
from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest

from planner.constraints import Limits, performance
from planner.constraints.base import Context
from planner.layout.space import Layouts, single_layout
from planner.score import score
from planner.specs.loading import load_cluster, load_model

BY_NAME = {c.name: c for c in performance.CONSTRAINTS}


class Rows(SimpleNamespace):
    """Stand-in for planner.score.Scores: only the fields the constraints read."""

    def __len__(self):
        return len(self.layouts)


def rows(step_time_s, mfu=None, bubble_s=None):
    n = len(step_time_s)
    lay = Layouts(dp=np.ones(n, int), tp=np.ones(n, int), pp=np.ones(n, int), micro_batch=np.ones(n, int),
                  num_microbatches=np.ones(n, int))
    return Rows(layouts=lay, step_time_s=np.asarray(step_time_s, dtype=float),
                mfu=None if mfu is None else np.asarray(mfu, dtype=float),
                time_s=SimpleNamespace(bubble=None if bubble_s is None else np.asarray(bubble_s, dtype=float)))


def masks(name, scores, **limits):
    return BY_NAME[name].build(scores, Context(None, None, Limits(**limits)))


def test_no_limit_no_mask():
    s = rows([1.0], mfu=[0.5], bubble_s=[0.1])
    assert [m for c in performance.CONSTRAINTS for m in c.build(s, Context(None, None, Limits()))] == []


def test_max_step_time():
    # limit 10 s: 10.0 passes (inclusive), 12.5 fails by (12.5 - 10) / 10 = 25 %
    [m] = masks("max_step_time", rows([9.0, 10.0, 12.5]), max_step_time_s=10.0)
    assert m.ok.tolist() == [True, True, False]
    assert (m.name, m.family) == ("max_step_time", "performance")
    assert m.explain(2) == "step takes 12.5 s, above --max-step-time 10 s"
    assert m.excess.tolist() == pytest.approx([0.0, 0.0, 0.25])


def test_min_mfu():
    # a lower bound: 0.4 passes, 0.35 misses it by (0.4 - 0.35) / 0.4 = 12.5 %
    [m] = masks("min_mfu", rows([1.0, 1.0], mfu=[0.4, 0.35]), min_mfu=0.4)
    assert m.ok.tolist() == [True, False]
    assert m.explain(1) == "MFU 35.0% is below --min-mfu 40.0%"
    assert m.excess[1] == pytest.approx(0.125)


def test_max_bubble_is_a_share_of_the_step():
    # 1 s of 10 s = 10 % passes; 3 s of 12 s = 25 % fails a 20 % bound
    [m] = masks("max_bubble", rows([10.0, 12.0], bubble_s=[1.0, 3.0]), max_bubble=0.2)
    assert m.ok.tolist() == [True, False]
    assert m.explain(1) == "pipeline bubble is 25.0% of the step, above --max-bubble 20.0%"
    assert m.excess[1] == pytest.approx(0.25)  # (0.25 - 0.2) / 0.2


def test_real_scores_of_175b_on_8_gpus():
    # 6 N D FLOP per step (Kaplan et al. 2020): 6 x 175.2e9 x (1536 x 2048 = 3,145,728 tokens)
    # = 3.307e18 FLOP; 8 A100s at their 312 TFLOP/s BF16 peak = 2.496e15 FLOP/s -> at least 1,324 s.
    # pp 1: no pipeline, no bubble, so max_bubble 0 passes; MFU < 100 % fails a 1.0 floor.
    model, cluster = load_model("gpt3-175b"), load_cluster("dgx-a100-1024")
    s = score(model, cluster, single_layout(dp=1, tp=8, pp=1, micro_batch=1, num_microbatches=1536))
    ctx = Context(model, cluster, Limits(max_step_time_s=1300.0, min_mfu=1.0, max_bubble=0.0))
    got = {m.name: m for c in performance.CONSTRAINTS for m in c.build(s, ctx)}
    assert {k: bool(m.ok[0]) for k, m in got.items()} == {"max_step_time": False, "min_mfu": False,
                                                           "max_bubble": True}
    step = re.fullmatch(r"step takes (\S+) s, above --max-step-time 1300 s", got["max_step_time"].explain(0))
    assert float(step.group(1)) >= 1324
    assert re.fullmatch(r"MFU \d+\.\d% is below --min-mfu 100\.0%", got["min_mfu"].explain(0))
