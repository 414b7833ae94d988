"""Megatron FSDP (ZeRO-2/3) and TP overlap before Blackwell (StackSpec.fsdp_serializes_tp_overlap): FSDP needs
CUDA_DEVICE_MAX_CONNECTIONS > 1 where TP overlap wants 1 (Megatron-LM arguments.py core_v0.15.0 lines 934-947),
so on a GPU before sm_version 100 a ZeRO-2/3 layout's TP communication is priced unhidden."""
from __future__ import annotations

from pytest import approx

from planner.costs.comm import tp_time_per_layer_s
from planner.layout.space import single_layout

from .conftest import TOY_STACK


def test_zero2_loses_tp_overlap_before_blackwell_only(make_model, make_cluster, toy_gpu_data):
    stack = dict(TOY_STACK, tp_comm_overlap=True, fsdp_serializes_tp_overlap=True)  # tp_overlap_exposed 0.5
    model = make_model(training=dict(stack=stack))
    st = model.training.stack.for_gpu("toy")

    def tp_s(sm, zero):
        cluster = make_cluster(toy_gpu_data(sm_version=sm))
        lay = single_layout(dp=2, tp=4, pp=1, micro_batch=1, zero=zero, sequence_parallel=True, num_microbatches=4)
        return float(tp_time_per_layer_s(cluster, model, st, lay)[0])

    # Hopper (90): ZeRO-1 keeps half of it exposed (0.5), ZeRO-2 all of it: twice ZeRO-1's
    assert tp_s(90, 2) == approx(2 * tp_s(90, 1), rel=1e-12)
    assert tp_s(90, 3) == approx(2 * tp_s(90, 1), rel=1e-12)
    # Blackwell (100): no conflict, ZeRO-2 as ZeRO-1; a GPU that states no sm_version: none assumed
    assert tp_s(100, 2) == approx(tp_s(100, 1), rel=1e-12)
    assert tp_s(None, 2) == approx(tp_s(None, 1), rel=1e-12)
