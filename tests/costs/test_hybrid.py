"""Cost models of hybrid models (planner/specs/hybrid.py, planner/costs/scan.py): model FLOPs,
the kinds' communication, stored activations, and what each pipeline rank holds."""
from __future__ import annotations

import numpy as np
import pytest

from planner.costs.context import job_context
from planner.costs.flops import model_flops_per_seq
from planner.costs.layer_times import kind_times
from planner.costs.memory import activation_bytes_per_layer
from planner.costs.pipeline_ranks import all_ranks, pipeline_ranks, rank_param_split
from planner.layout.space import single_layout
from planner.specs.layers import layer_kinds
from planner.specs.loading import load_cluster, load_model


def test_nemotron_h_model_flops_by_hand():
    # Forward FLOPs per token of Nemotron-H-56B (s = 8192), 2 x the GEMM weights a token passes:
    mamba = 2 * (8192 * 37_120 + 16_384 * 8192)  # in_proj and out_proj: 876,609,536
    attention = 2 * (8192 * (8192 + 2 * 1024) + 8192 * 8192)  # QKV (8 kv heads of 128) and out: 301,989,888
    mlp = 2 * 2 * 8192 * 32_768  # squared-ReLU up and down: 1,073,741,824
    logits = 2 * 8192 * 131_072
    scan = 21_495_808  # per Mamba layer (tests/specs/test_hybrid.py)
    core = 8192 * 64 * 256  # causal attention core per token: s heads (qk + v) / 2 x 2 = 134,217,728
    per_token = 54 * (mamba + scan) + 10 * (attention + core) + 54 * mlp + logits
    assert model_flops_per_seq(load_model("nemotron-h-56b")) == pytest.approx(3 * 8192 * per_token, rel=1e-12)


def test_mamba_activations_by_hand():
    # tp 1, no sp, no recomputation, bf16 (GEMM inputs 2 B), one sequence of 8192 tokens, per token:
    # norm input 2 + in_proj input 2 + dropout mask 1 = 5 B x 8192 = 40,960; in_proj output 2 x 37,120,
    # conv output 2 x 20,480, y 2 x 16,384 and out_proj input 2 x 16,384: 74,240 + 40,960 + 65,536 = 180,736
    m = load_model("nemotron-h-56b")
    lay = single_layout(tp=1, pp=1, dp=1, micro_batch=1, num_microbatches=8, sequence_parallel=False, recompute="none")
    mamba = next(k for k in layer_kinds(m) if k.name == "mamba")
    stored, _ = activation_bytes_per_layer(m, lay, mamba)
    assert stored[0] == pytest.approx(8192 * (40_960 + 180_736), rel=1e-12)


def test_each_rank_holds_its_patterns_layers():
    # pp 2 splits the 118 layers 59 / 59 (Megatron's default, as a transformer's): each rank's kinds are
    # those of its half of the pattern, and the rank parameters sum to the model's less the final norm (2 h)
    m = load_model("nemotron-h-56b")
    lay = single_layout(tp=1, pp=2, dp=1, micro_batch=1, num_microbatches=8)
    ranks = pipeline_ranks(m, lay)
    halves = (m.layer_pattern[:59], m.layer_pattern[59:])
    for i, kind in enumerate(layer_kinds(m)):
        assert ranks.by_kind[i][:, 0].tolist() == [halves[0].count(kind.chars), halves[1].count(kind.chars)]
    dense, experts = rank_param_split(m, lay, ranks)
    assert float(dense[:, 0].sum() + experts[:, 0].sum()) == m.total_params() - 2 * m.hidden


def test_qwen3_next_moe_layers_per_rank():
    # every second pattern layer is MoE: a rank of 24 pattern layers (pp 4) holds 12
    m = load_model("qwen3-next-80b-a3b")
    lay = single_layout(tp=1, pp=4, dp=1, micro_batch=1, num_microbatches=8, ep=8)
    ranks = pipeline_ranks(m, lay, all_ranks(lay))
    assert ranks.moe_layers[:, 0].tolist() == [12, 12, 12, 12]


def test_kinds_communicate_as_megatron_splits_them():
    m = load_model("nemotron-h-56b")
    cluster = load_cluster("dgx-h100-1024")
    lay = single_layout(tp=4, pp=1, dp=1, cp=2, micro_batch=1, num_microbatches=8, sequence_parallel=True)
    job = job_context(m, cluster, lay)
    times = {k.name: t for k, t in zip(layer_kinds(m), kind_times(m, cluster, job.stack, lay))}
    # one row-parallel output each: the same TP collective pair for a Mamba, an attention and an MLP layer
    assert times["mamba"].tp[0] == times["attention"].tp[0] == times["mlp"].tp[0] > 0
    # cp: attention exchanges K/V, Mamba its all-to-alls, the MLP layer nothing
    assert times["mamba"].cp[0] > 0 and times["mlp"].cp[0] == 0
    no_cp = single_layout(tp=4, pp=1, dp=2, cp=1, micro_batch=1, num_microbatches=8, sequence_parallel=True)
    assert all(float(t.cp[0]) == 0 for t in kind_times(m, cluster, job.stack, no_cp))


def test_every_rank_holds_the_pattern_once():
    m = load_model("nemotron-h-56b")
    lay = single_layout(tp=4, pp=8, dp=1, micro_batch=1, num_microbatches=8)
    ranks = pipeline_ranks(m, lay, all_ranks(lay))
    assert ranks.rank[:, 0].tolist() == list(range(8))
    assert np.sum([x[:, 0] for x in ranks.by_kind]) == 118


@pytest.mark.parametrize("name", ["nemotron-h-56b", "qwen3-next-80b-a3b"])
def test_kept_ranks_bound_every_rank(name):
    # the ranks bounding_ranks keeps (no earlier rank holds as many of every kind) give the same slowest
    # rank time and the same fullest memory as evaluating every rank
    from planner.costs.memory import memory_per_rank
    from planner.costs.pipeline import rank_time_s
    from planner.costs.pipeline_ranks import all_ranks
    from planner.search import space_for
    m, cluster = load_model(name), load_cluster("dgx-h100-1024")
    lay = space_for(m, 256)
    lay = lay.take(np.flatnonzero(lay.pp > 1)[::97])
    kept, every = pipeline_ranks(m, lay), pipeline_ranks(m, lay, all_ranks(lay))
    assert kept.rank.shape[0] < every.rank.shape[0]
    for ranks in (kept, every):
        job = job_context(m, cluster, lay, ranks)
        ranks_time = rank_time_s(job.kinds, ranks).max(axis=0)
        mem = memory_per_rank(job).total.max(axis=0)
        if ranks is kept:
            t_kept, mem_kept = ranks_time, mem
    np.testing.assert_allclose(t_kept, ranks_time, rtol=1e-12)
    np.testing.assert_allclose(mem_kept, mem, rtol=1e-12)
