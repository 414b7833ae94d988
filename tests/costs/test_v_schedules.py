"""The V schedules (zb-v, dualpipev) in the cost models: chunk 1 of rank r is stage 2p - 1 - r of the
micro-batch's path (torch.distributed.pipelining stage_ids_this_rank style "v"), so rank 0 holds the first
stage (the embedding) and the last (the output layer, the logits and the loss), and the default split
puts the short stages there (planner/costs/pipeline_ranks.py)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.costs.context import job_context
from planner.costs.memory import memory_breakdown, memory_per_rank
from planner.costs.pipeline import rank_time_s, step_time
from planner.costs.pipeline_ranks import (all_ranks, bounding_ranks, default_split, holds_embedding, holds_logits,
                                          path_order, pipeline_ranks, rank_layers, split_ranks)
from planner.layout.axes import SCHEDULES
from planner.layout.space import SpaceLimits, enumerate_layouts, single_layout
from planner.timeline import path_layers

FP32_BYTES, BF16_BYTES = 4, 2


def lay(**kw):
    kw.setdefault("dp", 1)
    kw.setdefault("tp", 1)
    kw.setdefault("micro_batch", 1)
    return single_layout(**kw)


@pytest.mark.parametrize("schedule", ["zb-v", "dualpipev"])
def test_rank_zero_holds_the_embedding_and_the_loss(make_model, schedule):
    # 30 layers over 2 x 4 = 8 stages: 30 // 8 = 3 each and 30 % 8 = 6 extra. The V's extra layers go
    # to path stages 1..6, so the path is 3 4 4 4 4 4 4 3: both short stages on rank 0, which holds path
    # stages 0 and 7 (3 + 3 = 6 layers); rank r holds path stages r and 7 - r: 4 + 4 = 8 layers.
    model = make_model(layers=30, hidden=64, heads=8, vocab=100, seq_len=16)
    layout = lay(pp=4, vpp=2, schedule=schedule, num_microbatches=8)
    ranks = all_ranks(layout)
    assert rank_layers(model, layout, ranks)[:, 0].tolist() == [6, 8, 8, 8]
    assert holds_logits(layout, ranks)[:, 0].tolist() == [True, False, False, False]
    assert holds_embedding(ranks)[:, 0].tolist() == [True, False, False, False]
    # schedule order (chunk j of rank r at j p + r): chunk 1 of rank r is path stage 7 - r
    split = default_split(model, 4, 2, v_shape=True)
    assert split == [3, 4, 4, 4, 3, 4, 4, 4]
    assert path_layers(schedule, split, 4) == path_order(split, 4, True) == [3, 4, 4, 4, 4, 4, 4, 3]
    # the explicit split of the same layers is the default one, rank by rank
    explicit = split_ranks(model, layout, split)
    assert explicit.layers[:, 0].tolist() == [6, 8, 8, 8]
    assert explicit.last[:, 0].tolist() == [True, False, False, False]
    # an interleaved 1F1B of the same degrees keeps Megatron's order: the loss on the last rank,
    # the extra layers on the first 6 stages (rank r: stages r and 4 + r -> 4 + 4, 4 + 4, 4 + 3, 4 + 3)
    plain = lay(pp=4, vpp=2, schedule="interleaved", num_microbatches=8)
    assert holds_logits(plain, ranks)[:, 0].tolist() == [False, False, False, True]
    assert rank_layers(model, plain, ranks)[:, 0].tolist() == [8, 8, 7, 7]
    assert default_split(model, 4, 2) == [4, 4, 4, 4, 4, 4, 3, 3]


def test_v_prices_the_logits_on_rank_zero(make_model, make_cluster):
    # 32 layers over 8 stages: 4 each, every rank 8 layers; zb-v puts the logits on rank 0.
    model = make_model(layers=32, hidden=256, heads=8, vocab=1000, seq_len=128)
    cluster = make_cluster()
    layout = lay(pp=4, vpp=2, schedule="zb-v", num_microbatches=8)
    job = job_context(model, cluster, layout, pipeline_ranks(model, layout, all_ranks(layout)))
    t = rank_time_s(job.kinds, job.ranks)[:, 0]
    layer, logits = float(job.kinds[0].layer[0]), float(job.kinds[0].lc.logits_fwd_bwd_s[0])
    assert logits > 0
    # rank 0: 8 layers + the logits; ranks 1-3: 8 layers
    assert t == pytest.approx([8 * layer + logits, 8 * layer, 8 * layer, 8 * layer], rel=1e-12)
    # memory: the logits in 16 bits and their fp32 copy (seq 128 x micro-batch 1 x vocab 1000 / tp 1)
    # sit on rank 0, with the memory reserve on every rank: other = reserve + 128 x 1000 x (2 + 4) bytes
    other = memory_per_rank(job).other[:, 0]
    reserve = cluster.gpu.memory_reserve_gib
    assert other == pytest.approx([reserve + 128 * 1000 * (BF16_BYTES + FP32_BYTES) / 2**30, reserve, reserve, reserve])


def test_v_step_time_takes_the_loss_rank(make_model, make_cluster):
    # 30 layers, zb-v, pp 4: rank 0 holds 6 layers and the logits, ranks 1-3 hold 8 layers. With the
    # logits below 2 layers the slowest rank is a rank of 8 layers (before: rank 3, 7 layers + logits).
    model = make_model(layers=30, hidden=256, heads=8, vocab=1000, seq_len=128)
    cluster = make_cluster()
    layout = lay(pp=4, vpp=2, schedule="zb-v", num_microbatches=8)
    job = job_context(model, cluster, layout)
    layer, logits = float(job.kinds[0].layer[0]), float(job.kinds[0].lc.logits_fwd_bwd_s[0])
    assert logits < 2 * layer
    every = job_context(model, cluster, layout, pipeline_ranks(model, layout, all_ranks(layout)))
    assert rank_time_s(every.kinds, every.ranks)[:, 0].max() == pytest.approx(8 * layer, rel=1e-12)
    assert step_time(job).total[0] == step_time(every).total[0]


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # the builders hold no state
@given(layers=st.integers(4, 40), gpus=st.sampled_from([4, 8, 16]), batch=st.sampled_from([16, 64]),
       tied=st.booleans(), schedule=st.sampled_from(["zb-v", "dualpipev"]))
def test_bounding_ranks_bound_every_rank_of_v_schedules(make_model, make_cluster, layers, gpus, batch, tied, schedule):
    # The V's default split does not shrink with the rank: the ranks kept (no earlier rank holds as
    # many layers, and the last) give the heaviest memory and the step of every rank.
    model = make_model(layers=layers, hidden=256, heads=8, vocab=1000, seq_len=128, tied_embeddings=tied,
                       training=dict(global_batch=batch))
    cluster = make_cluster()
    space = enumerate_layouts(gpus=gpus, layers=layers, heads=8, kv_heads=8, global_batch=batch,
                              limits=SpaceLimits(schedule=schedule))
    assert np.all(space.schedule == SCHEDULES.index(schedule))
    if not len(space):
        return
    every = pipeline_ranks(model, space, all_ranks(space))
    assert bounding_ranks(space, model).shape[0] <= 4
    assert np.array_equal(memory_per_rank(job_context(model, cluster, space, every)).total.max(axis=0),
                          memory_breakdown(job_context(model, cluster, space)).total)
    assert np.allclose(step_time(job_context(model, cluster, space, every)).total,
                       step_time(job_context(model, cluster, space)).total, rtol=1e-12)


def test_a_v_split_names_no_megatron_layout():
    # Megatron Core runs 1F1B and interleaved 1F1B only, and a V's stages are not in its order: the
    # uneven V split of Llama 3 405B (126 layers on 64 x 2 stages: rank 0 holds the two empty ends)
    # is shown without Megatron flags, and JSON has no megatron_pipeline_args
    from planner.estimate import estimate_layout
    from planner.specs.loading import load_cluster, load_model

    model, cluster = load_model("llama3-405b"), load_cluster("dgx-h100-16384")
    scored = estimate_layout(model, cluster, gpus=2048, tp=8, pp=64, vpp=2, schedule="zb-v", micro_batch=1)
    assert scored.layout["stage_layers"] == [0] + [1] * 63 + [0] + [1] * 63
    assert not scored.megatron_schedule and "megatron_pipeline_args" not in scored.to_dict()
    plain = estimate_layout(model, cluster, gpus=2048, tp=8, pp=64, vpp=2, micro_batch=1)
    assert plain.megatron_schedule and "megatron_pipeline_args" in plain.to_dict()
