"""Hardware family alone (planner/constraints/hardware.py): memory, tp_in_nvlink_domain, gpu_count.

Rows are hand-built (layouts and memory figures chosen here) so every number in a message is
worked out by hand; the model and cluster are shipped specs: GPT-3 175B (Brown et al. 2020,
175B parameters) and Mixtral 8x7B (Jiang et al. 2024, 46.7B, 8 experts) on DGX A100 80 GB
(8 GPUs per NVLink domain, 1024 GPUs).
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from planner.constraints import Limits, hardware
from planner.constraints.base import Context
from planner.layout.space import Layouts, single_layout
from planner.score import score
from planner.specs.loading import load_cluster, load_model

BY_NAME = {c.name: c for c in hardware.CONSTRAINTS}


class Rows(SimpleNamespace):
    """Stand-in for planner.score.Scores: only the fields the constraints read."""

    def __len__(self):
        return len(self.layouts)


def layouts(**cols):
    return Layouts(**{k: np.asarray(v) for k, v in cols.items()})


def memory(total, activations=None):
    total = np.asarray(total, dtype=float)
    act = np.zeros_like(total) if activations is None else np.asarray(activations, dtype=float)
    states = total - act  # the rest, split evenly: only their sum matters to the tips
    return SimpleNamespace(total=total, activations=act, weights=states / 3, gradients=states / 3,
                           optimizer=states / 3)


@pytest.fixture(scope="module")
def gpt3():
    return load_model("gpt3-175b")


@pytest.fixture(scope="module")
def a100():
    return load_cluster("dgx-a100-1024")


def masks(name, rows, model, cluster, **limits):
    return BY_NAME[name].build(rows, Context(model, cluster, Limits(**limits)))


def test_memory_passes_under_the_usable_memory(gpt3, a100):
    # 80 GiB x (1 - 0.05) = 76 GiB usable: 76.0 passes (bound inclusive), 76.1 does not
    lay = layouts(dp=[1, 1], tp=[8, 8], pp=[8, 8], micro_batch=[1, 1], num_microbatches=[1536, 1536])
    [m] = masks("memory", Rows(layouts=lay, memory_gib=memory([76.0, 76.1])), gpt3, a100, memory_headroom=0.05)
    assert m.ok.tolist() == [True, False]
    assert (m.name, m.family) == ("memory", "hardware")
    assert m.excess[1] == pytest.approx(0.1 / 76)  # (76.1 - 76) / 76


def test_memory_below_the_state_floor_names_the_gpu_count(gpt3, a100):
    # 18 B x 175.2e9 = 3.154e12 B; 76 GiB = 8.160e10 B; 3.154e12 / 8.160e10 = 38.7 -> 39 GPUs
    lay = layouts(dp=[1], tp=[8], pp=[1], micro_batch=[1], num_microbatches=[1536])
    [m] = masks("memory", Rows(layouts=lay, memory_gib=memory([90.0])), gpt3, a100, memory_headroom=0.05)
    assert not m.ok[0]
    assert m.explain(0) == ("needs 90.0 GiB on 80 GiB (76.0 GiB usable with 5% headroom): the weights, gradients "
                            "and optimizer states alone (18 B x 175.2B parameters) need at least 39 GPUs, "
                            "this run has 8")
    assert m.excess[0] == pytest.approx(14 / 76)  # (90 - 76) / 76


def test_memory_without_headroom_uses_the_whole_gpu(gpt3, a100):
    # 3.154e12 B / (80 x 2^30 B) = 36.7 -> 37 GPUs; no "usable" clause without headroom
    lay = layouts(dp=[1], tp=[8], pp=[1], micro_batch=[1], num_microbatches=[1536])
    [m] = masks("memory", Rows(layouts=lay, memory_gib=memory([90.0])), gpt3, a100)
    assert m.explain(0).startswith("needs 90.0 GiB on 80 GiB: the weights, gradients and optimizer states alone")
    assert m.explain(0).endswith("need at least 37 GPUs, this run has 8")


def test_memory_tips_follow_the_layout(gpt3, a100):
    # 64 GPUs >= 39: the states fit in principle, so the message lists what to change, first three.
    # row 0: activations 60 of 90 GiB and 2048 % (4 x cp 1) == 0 -> --cp 2; selective -> full;
    #        dp 2 at ZeRO 1 -> --zero 2 (tp 4 without sp and mb 2 would come next)
    # row 1: full recompute, dp 1, mb 1 -> only sequence parallelism and more stages are left
    lay = layouts(dp=[2, 1], tp=[4, 8], pp=[8, 8], micro_batch=[2, 1], num_microbatches=[384, 1536],
                  recompute=[1, 2], zero=[1, 0], sequence_parallel=[0, 0])
    rows = Rows(layouts=lay, memory_gib=memory([90.0, 80.0], activations=[60.0, 10.0]))
    [m] = masks("memory", rows, gpt3, a100, memory_headroom=0.05)
    head = "GiB on 80 GiB (76.0 GiB usable with 5% headroom): try "
    assert m.explain(0) == f"needs 90.0 {head}--cp 2 or --recompute full or --zero 2"
    assert m.explain(1) == f"needs 80.0 {head}--sequence-parallel or more pipeline stages (--pp)"


def test_memory_of_a_moe_model_suggests_more_expert_parallelism(a100):
    # Mixtral 8x7B: 18 B x 46.7e9 / 76 GiB = 10.3 -> 11 GPUs, 64 is enough. States 70 of 90 GiB
    # (over half) and 8 experts % (2 x ep 1) == 0 -> --ep 2 comes first
    model = load_model("mixtral-8x7b")
    lay = layouts(dp=[8], tp=[8], pp=[1], micro_batch=[1], num_microbatches=[128], recompute=[2], zero=[3])
    [m] = masks("memory", Rows(layouts=lay, memory_gib=memory([90.0], activations=[20.0])), model, a100,
                memory_headroom=0.05)
    assert m.explain(0).endswith("try --ep 2 or --sequence-parallel or more pipeline stages (--pp)")


def test_tp_must_tile_the_nvlink_domain(a100, gpt3):
    # 8 GPUs per domain: tp 8 and 4 tile it; 16 leaves it; 3 does not divide 8
    lay = layouts(dp=[1, 2, 1, 1], tp=[8, 4, 16, 3], pp=[1, 1, 1, 1], micro_batch=[1] * 4, num_microbatches=[1] * 4)
    [m] = masks("tp_in_nvlink_domain", Rows(layouts=lay), gpt3, a100)
    assert m.ok.tolist() == [True, True, False, False]
    assert m.explain(2) == ("tp=16 does not fit the 8 GPUs of one NVLink domain "
                            "(tp groups must tile it; allow with --allow-cross-node-tp)")
    assert m.explain(3).startswith("tp=3 does not fit the 8 GPUs")
    assert m.excess[2] == pytest.approx(1.0)  # (16 - 8) / 8
    assert m.excess[3] == pytest.approx(0.5)  # rejected, so over by something: 3 / 2 - 1 (2 is the tp that tiles)
    assert masks("tp_in_nvlink_domain", Rows(layouts=lay), gpt3, a100, allow_cross_node_tp=True) == []
    # a tp the user fixed (--tp 16, or plan estimate's) is their choice: priced, not refused
    assert masks("tp_in_nvlink_domain", Rows(layouts=lay), gpt3, a100, fixed={"tp": 16}) == []


@pytest.mark.parametrize("domain, tps, excess", [
    # 8 GPUs, divisors 1 2 4 8; excess = tp / (largest divisor <= tp) - 1:
    # 1 2 4 8 tile it -> 0; 3 -> 3/2 - 1 = 0.5; 5 -> 5/4 - 1 = 0.25; 6 -> 6/4 - 1 = 0.5; 7 -> 7/4 - 1 = 0.75;
    # above the domain (12 - 8) / 8 = 0.5 and (24 - 8) / 8 = 2, as for any upper bound
    (8, [1, 2, 3, 4, 5, 6, 7, 8, 12, 24], [0, 0, 0.5, 0, 0.25, 0.5, 0.75, 0, 0.5, 2.0]),
    # a 72-GPU NVLink domain (GB200 NVL72), divisors 1 2 3 4 6 8 9 12 18 24 36 72:
    # 5 -> 5/4 - 1 = 0.25; 16 -> 16/12 - 1 = 1/3; 9 tiles it; 48 -> 48/36 - 1 = 1/3; 144 -> (144 - 72)/72 = 1
    (72, [5, 9, 16, 48, 144], [0.25, 0, 1 / 3, 1 / 3, 1.0]),
])
def test_tp_off_the_domain_is_over_by_its_distance_to_a_tiling_size(a100, gpt3, domain, tps, excess):
    """Found in review: tp 3 on 8 GPUs was rejected with excess 0, so "nearest" ranked it with the
    rows that pass. Over by something exactly when rejected."""
    cluster = a100.model_copy(update={"node": a100.node.model_copy(update={"nvlink_domain_gpus": domain})})
    n = len(tps)
    lay = layouts(dp=[1] * n, tp=tps, pp=[1] * n, micro_batch=[1] * n, num_microbatches=[1] * n)
    [m] = masks("tp_in_nvlink_domain", Rows(layouts=lay), gpt3, cluster)
    assert m.excess.tolist() == pytest.approx(excess)
    assert ((m.excess > 0) == ~m.ok).all()


def test_gpu_count_is_bounded_by_the_cluster(a100, gpt3):
    # 1024 GPUs: 8 x 8 x 16 = 1024 fits, 16 x 8 x 16 = 2048 does not
    lay = layouts(dp=[8, 16], tp=[8, 8], pp=[16, 16], micro_batch=[1, 1], num_microbatches=[192, 96])
    [m] = masks("gpu_count", Rows(layouts=lay), gpt3, a100)
    assert m.ok.tolist() == [True, False]
    assert m.explain(1) == "uses 2048 GPUs but the cluster has 1024"
    assert m.excess[1] == pytest.approx(1.0)  # (2048 - 1024) / 1024


def test_real_scores_of_175b_on_8_gpus_fail_memory_only(gpt3, a100):
    # the scored figures, not stand-ins: 18 B x 175.2e9 / 8 GPUs = 394 GB = 367 GiB of states per
    # GPU alone, far over 76 GiB; tp 8 tiles the domain and 8 <= 1024 GPUs
    s = score(gpt3, a100, single_layout(dp=1, tp=8, pp=1, micro_batch=1, num_microbatches=1536))
    ctx = Context(gpt3, a100, Limits(memory_headroom=0.05))
    got = {m.name: m for c in hardware.CONSTRAINTS for m in c.build(s, ctx)}
    assert {k: bool(m.ok[0]) for k, m in got.items()} == {"memory": False, "tp_in_nvlink_domain": True,
                                                           "gpu_count": True}
    assert s.memory_gib.total[0] > 367
    assert got["memory"].explain(0).endswith("need at least 39 GPUs, this run has 8")
