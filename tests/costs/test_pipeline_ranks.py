"""Pipeline ranks (planner/costs/pipeline_ranks.py): what each rank holds, by hand, and the claim that the
first and last rank bound every other one (so a full search evaluates two ranks, not pp)."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.costs.memory import memory_breakdown, memory_per_rank
from planner.costs.pipeline import rank_time_s, step_time
from planner.costs.pipeline_ranks import (PipelineRanks, all_ranks, bounding_ranks, holds_logits, layers_in_flight,
                                  pipeline_ranks, rank_layers, valid_ranks)
from planner.layout.space import enumerate_layouts, single_layout
from planner.costs.context import job_context


def lay(**kw):
    kw.setdefault("dp", 1)
    kw.setdefault("tp", 1)
    kw.setdefault("micro_batch", 1)
    return single_layout(**kw)


def test_uneven_split_and_what_each_rank_holds(make_model):
    model = make_model(layers=10, hidden=64, heads=8, vocab=100, seq_len=16)
    layout = lay(pp=4, num_microbatches=8)
    ranks = all_ranks(layout)
    # 10 layers on 4 ranks: 10 // 4 = 2 each, the first 10 % 4 = 2 ranks one more
    assert rank_layers(model, layout, ranks)[:, 0].tolist() == [3, 3, 2, 2]
    assert holds_logits(layout, ranks)[:, 0].tolist() == [False, False, False, True]
    # 1F1B: rank r holds min(m, p - r) = 4, 3, 2, 1 micro-batches of its layers -> 12, 9, 4, 2 layers
    assert layers_in_flight(model, layout, ranks)[:, 0].tolist() == [12, 9, 4, 2]


def test_interleaved_in_flight_per_rank(make_model):
    model = make_model(layers=16, hidden=64, heads=8, vocab=100, seq_len=16)
    layout = lay(pp=4, vpp=2, num_microbatches=8)
    # chunks of 16 / (4 x 2) = 2 layers; rank r holds min(m v, 2 (p - r - 1) + (v - 1) p + 1) chunks:
    # r0: min(16, 6 + 4 + 1) = 11, r1: 9, r2: 7, r3: 5 -> 22, 18, 14, 10 layers.
    # Rank 0 matches Korthikanti et al. 2022 Sec. 4.2.3: L (1 + (p - 1)/(p v)) = 16 x 11/8 = 22.
    assert layers_in_flight(model, layout, all_ranks(layout))[:, 0].tolist() == [22, 18, 14, 10]


def test_padding_of_shorter_pipelines_repeats_their_last_rank():
    layout = single_layout(dp=1, tp=1, pp=1, micro_batch=1, num_microbatches=1)
    two = single_layout(dp=1, tp=1, pp=3, micro_batch=1, num_microbatches=1)
    both = type(layout).concat([layout, two])
    assert all_ranks(both).tolist() == [[0, 0], [0, 1], [0, 2]]
    assert valid_ranks(both).tolist() == [[True, True], [False, True], [False, True]]
    assert bounding_ranks(both).tolist() == [[0, 0], [0, 2]]


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # the builders hold no state
@given(layers=st.integers(2, 40), gpus=st.sampled_from([4, 8, 16, 32]), batch=st.sampled_from([8, 16, 64]),
       attention=st.sampled_from(["flash", "standard"]), tied=st.booleans())
def test_first_and_last_rank_bound_every_rank(make_model, make_cluster, layers, gpus, batch, attention, tied):
    model = make_model(layers=layers, hidden=256, heads=8, vocab=1000, seq_len=128, tied_embeddings=tied,
                       training=dict(global_batch=batch, attention=attention))
    cluster = make_cluster()
    space = enumerate_layouts(gpus=gpus, layers=layers, heads=8, kv_heads=8, global_batch=batch)
    every = pipeline_ranks(model, space, all_ranks(space))
    bound = pipeline_ranks(model, space)
    mem_all = memory_per_rank(job_context(model, cluster, space, every)).total
    assert np.array_equal(memory_breakdown(job_context(model, cluster, space, every)).total,
                          memory_breakdown(job_context(model, cluster, space, bound)).total)
    assert np.array_equal(mem_all.max(axis=0), memory_breakdown(job_context(model, cluster, space)).total)
    kinds = job_context(model, cluster, space).kinds
    assert np.array_equal(rank_time_s(kinds, every).max(axis=0), rank_time_s(kinds, bound).max(axis=0))
    # and the step time is the same whichever set of ranks it is given
    assert np.array_equal(step_time(job_context(model, cluster, space, every)).total, step_time(job_context(model, cluster, space)).total)


def test_a_middle_rank_can_be_the_heaviest(make_model, make_cluster):
    # An uneven split that is not monotone (4 layers on rank 1, 1 on the others): the breakdown is
    # that of rank 1, which holds 3 micro-batches (p - r = 3) of 4 layers = 12 layer-activations.
    model = make_model(layers=7, hidden=256, heads=8, vocab=1000, seq_len=128)
    cluster = make_cluster()
    layout = lay(pp=4, num_microbatches=8)
    rank = np.arange(4)[:, None]
    ranks = PipelineRanks(rank, np.array([[1], [4], [1], [1]]), np.zeros((4, 1)), rank == 0, holds_logits(layout, rank))
    per_rank = memory_per_rank(job_context(model, cluster, layout, ranks))
    assert int(np.argmax(per_rank.total[:, 0])) == 1
    assert layers_in_flight(model, layout, rank, ranks.layers)[:, 0].tolist() == [4, 12, 2, 1]
    assert memory_breakdown(job_context(model, cluster, layout, ranks)).activations[0] == per_rank.activations[1, 0]


def test_bounding_ranks_bound_every_rank_of_the_shipped_moe_models():
    # Dense layers first (DeepSeek-V3: 3 of 61), MoE every second layer (Llama 4 Maverick): the four
    # bounding ranks give the same heaviest memory and step time as every rank (a sample of each space).
    from planner.specs.loading import load_cluster, load_model
    from planner.search import space_for
    from planner.layout.space import SpaceLimits

    cluster = load_cluster("dgx-h100-1024")
    for name, gpus in (("deepseek-v3", 256), ("llama4-maverick", 128)):
        model = load_model(name)
        space = space_for(model, gpus, SpaceLimits(zero=1, recompute="none"))
        space = space.take(np.arange(0, len(space), max(1, len(space) // 500)))
        every = pipeline_ranks(model, space, all_ranks(space))
        assert np.array_equal(memory_breakdown(job_context(model, cluster, space, every)).total,
                              memory_breakdown(job_context(model, cluster, space)).total), name
        assert np.allclose(step_time(job_context(model, cluster, space, every)).total, step_time(job_context(model, cluster, space)).total,
                           rtol=1e-12), name
