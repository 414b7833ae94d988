"""MoE routing imbalance (moe.imbalance, issue 37 item 6): each term it prices, at 1.0 (unchanged)
and at a stated factor, against numbers derived by hand here (toy GPU and cluster of conftest.py:
HBM 1,000 GB/s at 50 %, NVLink 100 GB/s and network 8 GB/s achieved, 10 us latency).

The model: 8 experts, top 2, expert width 32, hidden 64, SwiGLU, BF16; a micro-batch of 2 x 64
tokens. With ep 4 each GPU holds n = 2 experts and the mean expert gets 2 x 64 x 2 x 4 / 8 = 128
rows. A busiest expert at f = 2 x the mean leaves (8 - 2) means to the other 7 experts, so its
rank holds 2 + 6/7 means over 2 experts: 10/7 of the mean rank's rows."""
from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError
from pytest import approx

from planner.costs.compute import _gemm_set, routed_rows
from planner.costs.context import job_context
from planner.costs.layer_times import balanced, ep_comm_s, kind_sums
from planner.costs.memory import activation_bytes_per_layer
from planner.layout.space import single_layout
from planner.specs.layers import expert_rows, layer_kinds

from .conftest import layer_compute_on

REL = 1e-9
MOE = dict(layers=3, hidden=64, heads=4, ffn_act="swiglu", vocab=100, seq_len=64,
           moe=dict(experts=8, top_k=2, expert_ffn_hidden=32, dense_layers=1))
BUSIEST = 10 / 7  # (2 + (2 - 1) (8 - 2) / (8 - 1)) / 2


def _model(make_model, imbalance=1.0, **moe):
    return make_model(**{**MOE, "moe": {**MOE["moe"], "imbalance": imbalance, **moe}})


def lay(**kw):
    return single_layout(**{"dp": 4, "tp": 1, "pp": 1, "micro_batch": 2, "num_microbatches": 1, "ep": 4, **kw})


@pytest.mark.parametrize("imbalance, ep, load", [
    (1.0, 4, 1.0),        # force-balanced: every rank the mean
    (2.0, 1, 1.0),        # one rank holds all 8 experts: it takes all its tokens whatever their split
    (2.0, 4, BUSIEST),    # 2 experts a rank: (2 + 6/7) / 2
    (2.0, 8, 2.0),        # one expert a rank: the busiest expert's rank is f
    (1.5, 2, (1.5 + 3 * 6.5 / 7) / 4),  # 4 experts a rank: (1.5 + 3 (8 - 1.5) / 7) / 4
])
def test_busiest_rank_load(make_model, imbalance, ep, load):
    assert _model(make_model, imbalance).moe.busiest_rank_load(np.array([ep]))[0] == approx(load, rel=REL)


def test_capacity_factor_bounds_the_imbalance(make_model):
    # drop-and-pad: every expert takes its capacity, whatever the routing
    model = _model(make_model, 2.0, capacity_factor=1.0)
    assert model.moe.busiest_rank_load(np.array([8]))[0] == 1.0
    assert routed_rows(model, lay())[0][0] == expert_rows(model, lay())[0][0] == 128


def test_imbalance_is_at_most_experts_over_top_k(make_model):
    # an expert takes each token once: all T tokens at most, against a mean of T x 2 / 8
    _model(make_model, 4.0)
    with pytest.raises(ValidationError, match="at most experts / top_k"):
        _model(make_model, 4.5)


def test_expert_gemm_rows_of_the_busiest_rank(make_model):
    rows, local = routed_rows(_model(make_model, 1.0), lay())
    assert rows[0] == 128 and local[0] == 2  # unchanged at 1.0: 2 x 64 x 2 x 4 / 8
    rows, local = routed_rows(_model(make_model, 2.0), lay())
    assert rows[0] == approx(128 * 10 / 7, rel=REL) and local[0] == 2


def test_expert_gemms_and_their_activation_take_the_busiest_rank_time(make_model, toy_gpu):
    even, skewed = _model(make_model, 1.0), _model(make_model, 2.0)
    kind = layer_kinds(skewed)[1]
    fwd_even, fwd_skewed = (layer_compute_on(m, toy_gpu, lay(), layer_kinds(m)[1]).fwd_s[0] for m in (even, skewed))
    # the grouped GEMMs over 2 experts of 128 x 10/7 rows instead of 128, and the SwiGLU reading two
    # and writing one 16-bit value per row and width 32: 6 x 2 x 128 x 3/7 x 32 B more at 500 GB/s
    etp, groups = np.array([1.0]), np.array([2.0])
    gemm = (_gemm_set(kind.expert, np.array([128 * 10 / 7]), etp, toy_gpu, skewed.training.numerics, groups=groups)[0]
            - _gemm_set(kind.expert, np.array([128.0]), etp, toy_gpu, skewed.training.numerics, groups=groups)[0])
    swiglu = 6 * 2 * 128 * (3 / 7) * 32 / 500e9
    assert gemm[0] > 0
    assert fwd_skewed - fwd_even == approx(gemm[0] + swiglu, rel=1e-6)


def test_all_to_all_waits_for_the_busiest_receiver(make_model, make_cluster):
    cluster = make_cluster()
    even, skewed = _model(make_model, 1.0), _model(make_model, 2.0)
    kind = layer_kinds(skewed)[1]
    # ep 4 in a node: 2 x 64 x 2 routed copies of 64 BF16 values = 32,768 B, 3/4 of it for the other
    # three GPUs over NVLink; two all-to-alls forward and two backward
    def four(nbytes):
        return 4 * (nbytes * 3 / 4 / 100e9 + 10e-6)
    assert ep_comm_s(cluster, even, lay(), kind)[0] == approx(four(32768), rel=REL)
    # the busiest rank receives (and sends back) 10/7 of it
    assert ep_comm_s(cluster, skewed, lay(), kind)[0] == approx(four(32768 * 10 / 7), rel=REL)
    # rows of different ep priced each at their own rank's load (ep 8: one expert a rank, f = 2; 7/8 of
    # the copies leave the GPU)
    a, b = (single_layout(dp=8, tp=1, pp=1, micro_batch=2, num_microbatches=1, ep=ep).columns() for ep in (4, 8))
    both = type(lay())(**{k: np.concatenate([a[k], b[k]]) for k in a})
    got = ep_comm_s(cluster, skewed, both, kind)
    assert got[0] == approx(four(32768 * 10 / 7), rel=REL)
    assert got[1] == approx(4 * (2 * 32768 * 7 / 8 / 100e9 + 10e-6), rel=REL)


def test_busiest_rank_stores_more_expert_activations(make_model):
    even, skewed = _model(make_model, 1.0), _model(make_model, 2.0)
    # per routed row: its dispatched input and output (2 + 2 B) x 64, SwiGLU's up/gate outputs (4 B)
    # and fc2 input (2 B) x 32 = 448 B; 2 experts x 128 rows at 1.0, x 10/7 at 2.0
    moe_even = activation_bytes_per_layer(even, lay(), layer_kinds(even)[1])[0][0]
    moe_skewed = activation_bytes_per_layer(skewed, lay(), layer_kinds(skewed)[1])[0][0]
    assert moe_skewed - moe_even == approx(448 * 2 * 128 * 3 / 7, rel=REL) == approx(49152, rel=REL)
    # the dense layer is untouched
    assert activation_bytes_per_layer(skewed, lay(), layer_kinds(skewed)[0])[0][0] == \
        activation_bytes_per_layer(even, lay(), layer_kinds(even)[0])[0][0]


def test_step_states_what_the_imbalance_costs(make_model, make_cluster):
    cluster = make_cluster()
    skewed = _model(make_model, 2.0)
    job = job_context(skewed, cluster, lay())
    sums, _ = kind_sums(skewed, cluster, job.stack, lay())
    even, _ = kind_sums(balanced(skewed), cluster, job.stack, lay())
    assert balanced(skewed).moe.imbalance == 1.0 and skewed.moe.imbalance == 2.0
    # two MoE layers, each the busier rank's longer layer: the sum of the differences of each kind
    assert sums.imbalance[0] == approx(sums.layer[0] - even.layer[0], rel=REL)
    assert sums.imbalance[0] > 0
    assert even.imbalance == 0.0  # priced only when stated


def test_breakdown_states_the_imbalance_as_a_part_not_a_term(make_model, make_cluster):
    from planner.costs.pipeline import step_time

    cluster = make_cluster()
    skewed = _model(make_model, 2.0)
    layouts = lay(dp=2, pp=2, num_microbatches=4, ep=2)
    job = job_context(skewed, cluster, layouts)
    sums, _ = kind_sums(skewed, cluster, job.stack, layouts)
    t = step_time(job)
    # averaged over the pipeline's GPUs as compute is: m x (per micro-batch sum) / p = 4 / 2 x the sum
    assert t.moe_imbalance[0] == approx(4 / 2 * sums.imbalance[0], rel=REL)
    assert t.moe_imbalance[0] > 0
    # a part of compute and ep_comm: the step's total does not count it again
    terms = (t.compute + t.recompute + t.tp_comm + t.cp_comm + t.ep_comm + t.pp_comm + t.dp_comm + t.bubble
             + t.optimizer + t.overhead)
    assert t.total[0] == approx(terms[0], rel=REL)
    assert step_time(job_context(balanced(skewed), cluster, layouts)).moe_imbalance[0] == 0.0
