"""ZeRO-3 of a MoE layer: the dense part gathered over dp x cp, this rank's routed experts over the
expert-data-parallel group (comm.zero3_layer_comm_s), worked out by hand on the toy GPU (conftest)."""
from __future__ import annotations

from pytest import approx

from planner.costs.comm import zero3_layer_comm_s
from planner.layout.space import single_layout
from planner.specs.precision import precision

from .conftest import TOY_STACK

H, E, F = 1024, 8, 512
# The MoE layer's dense part: attention 4h^2 + 4h, norms 4h, the router h x E (no bias)
DENSE = 4 * H * H + 4 * H + 4 * H + H * E  # 4,210,688
# Its routed experts: E x (2 h f + f + h), up and down projections with biases
EXPERTS = E * (2 * H * F + F + H)  # 8,400,896


def test_experts_gather_their_own_shard_over_the_expert_data_group(make_model, make_cluster):
    # 4 nodes of 1 GPU at 0.01 GB/s x 0.8 = 8e6 B/s: the bytes dominate (latencies ~1e-5 of them).
    cluster = make_cluster(gpus_per_node=1, nodes=4, network_gbps=0.01)
    model = make_model(moe=dict(experts=E, top_k=2, expert_ffn_hidden=F), training=dict(stack=dict(TOY_STACK)))
    prec = precision("bf16")
    layout = single_layout(dp=4, tp=1, pp=1, micro_batch=1, zero=3, ep=2, num_microbatches=1)
    gather, reduce = zero3_layer_comm_s(cluster, model, layout, prec, model.training.stack)
    # dense over dp 4: 3/4 x 2 B x DENSE / 8e6 = 0.78950 s; this rank's 4 of 8 experts over edp = 4 / 2 = 2
    # ranks: 1/2 x 2 B x EXPERTS / 2 / 8e6 = 0.52506 s (before: every expert over dp 4, 2.3647 s)
    assert gather[0] == approx(0.75 * 2 * DENSE / 8e6 + 0.5 * 2 * EXPERTS / 2 / 8e6, rel=1e-3)
    # fp32 gradients reduce-scattered the same way: 3/4 x 4 B x DENSE + 1/2 x 4 B x EXPERTS / 2, / 8e6
    assert reduce[0] == approx(0.75 * 4 * DENSE / 8e6 + 0.5 * 4 * EXPERTS / 2 / 8e6, rel=1e-3)
    # ep 1: every expert on every rank, gathered over all 4 (edp = dp): the whole layer over dp
    whole = single_layout(dp=4, tp=1, pp=1, micro_batch=1, zero=3, ep=1, num_microbatches=1)
    g1, _ = zero3_layer_comm_s(cluster, model, whole, prec, model.training.stack)
    assert g1[0] == approx(0.75 * 2 * (DENSE + EXPERTS) / 8e6, rel=1e-3)
