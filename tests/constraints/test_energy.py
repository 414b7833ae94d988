"""Energy family alone (planner/constraints/energy.py): max_power, max_energy_per_token, max_gpu_power.

Hand-built rows (figures chosen here) give exact messages; one layout scored by planner.score
checks the family reads the real scores.
"""
from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest

from planner.constraints import Limits, energy
from planner.constraints.base import Context
from planner.layout.space import Layouts, single_layout
from planner.score import score
from planner.specs.loading import load_cluster, load_model

BY_NAME = {c.name: c for c in energy.CONSTRAINTS}


class Rows(SimpleNamespace):
    """Stand-in for planner.score.Scores: only the fields the constraints read."""

    def __len__(self):
        return len(self.layouts)


def rows(avg_power_kw=(0.0,), j_per_token=(0.0,), gpu_power_w=(0.0,)):
    n = len(avg_power_kw)
    lay = Layouts(dp=np.ones(n, int), tp=np.ones(n, int), pp=np.ones(n, int), micro_batch=np.ones(n, int),
                  num_microbatches=np.ones(n, int))
    return Rows(layouts=lay, energy_j_per_token=np.asarray(j_per_token, dtype=float),
                energy=SimpleNamespace(avg_power_kw=np.asarray(avg_power_kw, dtype=float),
                                       gpu_power_w=np.asarray(gpu_power_w, dtype=float)))


def masks(name, scores, **limits):
    return BY_NAME[name].build(scores, Context(None, None, Limits(**limits)))


def test_no_limit_no_mask():
    s = rows([1.0], [1.0], [1.0])
    assert [m for c in energy.CONSTRAINTS for m in c.build(s, Context(None, None, Limits()))] == []


def test_max_power():
    # 500 kW budget: 499.9 passes, 512.34 fails by 12.34 / 500 = 2.468 %
    [m] = masks("max_power", rows(avg_power_kw=[499.9, 512.34]), max_power_kw=500.0)
    assert m.ok.tolist() == [True, False]
    assert (m.name, m.family) == ("max_power", "energy")
    assert m.explain(1) == "draws 512.3 kW on average (with node overhead and PUE), above --max-power-kw 500"
    assert m.excess[1] == pytest.approx(0.02468)


def test_max_energy_per_token():
    # 3.0e6 J per step over 1536 x 2048 = 3,145,728 tokens = 0.9537 J/token, over a 0.5 J bound;
    # 1.5e6 J over the same tokens = 0.4768 J/token passes
    tokens = 1536 * 2048
    [m] = masks("max_energy_per_token", rows([0.0, 0.0], j_per_token=[1.5e6 / tokens, 3.0e6 / tokens]),
                max_energy_per_token_j=0.5)
    assert m.ok.tolist() == [True, False]
    assert m.explain(1) == "uses 0.954 J per token, above --max-energy-per-token 0.5 J"


def test_max_gpu_power():
    # a 300 W bound: an A100 at its 400 W TDP fails, one capped at 300 W passes (inclusive)
    [m] = masks("max_gpu_power", rows([0.0, 0.0], gpu_power_w=[300.0, 400.0]), max_gpu_power_w=300.0)
    assert m.ok.tolist() == [True, False]
    assert m.explain(1) == "a GPU draws 400 W while busy, above --max-gpu-power-w 300 W"
    assert m.excess[1] == pytest.approx(1 / 3)  # (400 - 300) / 300


def test_real_scores_of_175b_on_8_gpus():
    # A100 SXM: 400 W TDP (NVIDIA data sheet), so a 400 W bound passes; any run of 8 GPUs draws
    # more than 1 W and spends more than 1 mJ per token
    model, cluster = load_model("gpt3-175b"), load_cluster("dgx-a100-1024")
    s = score(model, cluster, single_layout(dp=1, tp=8, pp=1, micro_batch=1, num_microbatches=1536))
    ctx = Context(model, cluster, Limits(max_power_kw=0.001, max_energy_per_token_j=0.001, max_gpu_power_w=400.0))
    got = {m.name: m for c in energy.CONSTRAINTS for m in c.build(s, ctx)}
    assert {k: bool(m.ok[0]) for k, m in got.items()} == {"max_power": False, "max_energy_per_token": False,
                                                           "max_gpu_power": True}
    assert re.fullmatch(r"draws \d+\.\d kW on average \(with node overhead and PUE\), above --max-power-kw 0\.001",
                        got["max_power"].explain(0))
    assert re.fullmatch(r"uses \S+ J per token, above --max-energy-per-token 0\.001 J",
                        got["max_energy_per_token"].explain(0))
