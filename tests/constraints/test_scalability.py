"""Scalability family alone (planner/constraints/scalability.py): max_global_batch_tokens,
min_scaling_efficiency and the fixed layout dimensions (fixed_<axis>).

GPT-3 175B (Brown et al. 2020): a global batch of 1536 sequences of 2048 tokens = 3,145,728 tokens.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from planner.constraints import Limits, scalability
from planner.constraints.base import Context
from planner.layout.space import Layouts
from planner.specs.loading import load_cluster, load_model

BY_NAME = {c.name: c for c in scalability.CONSTRAINTS}


class Rows(SimpleNamespace):
    """Stand-in for planner.score.Scores: only the fields the constraints read."""

    def __len__(self):
        return len(self.layouts)


def layouts(**cols):
    return Layouts(**{k: np.asarray(v) for k, v in cols.items()})


@pytest.fixture(scope="module")
def gpt3():
    return load_model("gpt3-175b")


def one_row():
    return Rows(layouts=layouts(dp=[8], tp=[8], pp=[1], micro_batch=[1], num_microbatches=[192]))


def test_max_global_batch_tokens(gpt3):
    ok = BY_NAME["max_global_batch_tokens"].build(one_row(), Context(gpt3, None, Limits(max_global_batch_tokens=3_145_728)))
    assert ok[0].ok.tolist() == [True]  # the bound is inclusive
    [m] = BY_NAME["max_global_batch_tokens"].build(one_row(), Context(gpt3, None, Limits(max_global_batch_tokens=2e6)))
    assert m.ok.tolist() == [False]
    assert (m.name, m.family) == ("max_global_batch_tokens", "scalability")
    assert m.explain(0) == "global batch of 3.15e+06 tokens exceeds --max-global-batch-tokens 2e+06"
    assert m.excess[0] == pytest.approx(0.572864)  # (3,145,728 - 2,000,000) / 2,000,000


def test_min_scaling_efficiency_against_half_the_gpus():
    # reference: 1,000 tokens/s per GPU on half the GPUs. 64,000 tokens/s on 64 GPUs = 1,000 per
    # GPU = 100 %; 48,000 on 64 = 750 per GPU = 75 %, under an 80 % floor by (0.8 - 0.75) / 0.8
    rows = Rows(layouts=layouts(dp=[8, 8], tp=[8, 8], pp=[1, 1], micro_batch=[1, 1], num_microbatches=[192, 192]),
                tokens_per_s=np.array([64_000.0, 48_000.0]))
    [m] = BY_NAME["min_scaling_efficiency"].build(rows, Context(None, None, Limits(min_scaling_efficiency=0.8), 1000.0))
    assert m.ok.tolist() == [True, False]
    assert (m.name, m.family) == ("min_scaling_efficiency", "scalability")
    assert m.explain(1) == ("scaling efficiency 75.0% against the best layout on half the GPUs is below "
                            "--min-scaling-efficiency 80%")
    assert m.excess[1] == pytest.approx(0.0625)


def test_min_scaling_efficiency_needs_a_reference():
    # no feasible layout on half the GPUs (or no limit): nothing to compare with, no mask
    rows = Rows(layouts=one_row().layouts, tokens_per_s=np.array([1.0]))
    build = BY_NAME["min_scaling_efficiency"].build
    assert build(rows, Context(None, None, Limits(min_scaling_efficiency=0.8), None)) == []
    assert build(rows, Context(None, None, Limits(), 1000.0)) == []


def test_fixed_dimensions_are_one_mask_each():
    # tp fixed to 8 and recompute to full: row 0 obeys both, row 1 neither
    rows = Rows(layouts=layouts(dp=[8, 16], tp=[8, 4], pp=[1, 1], micro_batch=[1, 1], num_microbatches=[192, 96],
                                recompute=[2, 1]))
    got = BY_NAME["fixed"].build(rows, Context(None, None, Limits(fixed={"tp": 8, "recompute": "full"})))
    assert [(m.name, m.family) for m in got] == [("fixed_tp", "scalability"), ("fixed_recompute", "scalability")]
    tp, rc = got
    assert tp.ok.tolist() == [True, False] and rc.ok.tolist() == [True, False]
    assert tp.explain(1) == "tp=4, but --tp 8 was asked for"
    assert rc.explain(1) == "recompute=selective, but --recompute full was asked for"
    assert BY_NAME["fixed"].build(rows, Context(None, None, Limits())) == []


def test_the_family_in_declaration_order(gpt3):
    # all three at once, as planner.constraints.evaluate applies them: one mask per active limit
    rows = Rows(layouts=layouts(dp=[8], tp=[8], pp=[1], micro_batch=[1], num_microbatches=[192]),
                tokens_per_s=np.array([64_000.0]))
    ctx = Context(gpt3, load_cluster("dgx-a100-1024"),
                  Limits(max_global_batch_tokens=4e6, min_scaling_efficiency=0.5, fixed={"pp": 2}), 1000.0)
    got = [m for c in scalability.CONSTRAINTS for m in c.build(rows, ctx)]
    assert [(m.name, bool(m.ok[0])) for m in got] == [("max_global_batch_tokens", True),
                                                     ("min_scaling_efficiency", True), ("fixed_pp", False)]
    assert got[2].explain(0) == "pp=1, but --pp 2 was asked for"
