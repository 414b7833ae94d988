"""nanotron's pipeline split (StackSpec.pipeline_split cost_balanced; src/nanotron/models/base.py build_model):
each decoder layer costs 4 h^2 + 3 f h, the output layer V h, and a rank takes blocks until the running cost
passes its share. Worked out by hand; search and estimate price the same split."""
from __future__ import annotations

import numpy as np
from pytest import approx

from planner.costs.pipeline_ranks import cost_balanced_split
from planner.specs import ModelSpec


def model(layers=16, hidden=2048, ffn=8192, vocab=128256, stack="nanotron"):
    return ModelSpec.model_validate(dict(name="m", layers=layers, hidden=hidden, heads=16, ffn_hidden=ffn, vocab=vocab,
                                         seq_len=4096, ffn_act="swiglu", training=dict(global_batch=64, stack=stack)))


def test_the_output_layer_takes_a_share_of_the_last_rank():
    # layer: 4 x 2048^2 + 3 x 8192 x 2048 = 16,777,216 + 50,331,648 = 67,108,864; head 128,256 x 2048 = 262,668,288
    # total 16 x 67,108,864 + 262,668,288 = 1,336,410,112; pp 4 thresholds: 334.1M, 668.2M, 1,002.3M, 1,336.4M.
    # rank 0 takes layers until the running cost passes 334.1M: layer 5 (335.5M) is its last -> 5 layers;
    # rank 1 to 671.1M (layer 10) -> 5; rank 2 to 1,006.6M (layer 15) -> 5; rank 3: layer 16 and the head -> 1
    assert cost_balanced_split(model(), 4) == [5, 5, 5, 1]
    # pp 2: threshold 668.2M: rank 0 takes 10 layers (671.1M), rank 1 the 6 others and the head
    assert cost_balanced_split(model(), 2) == [10, 6]


def test_search_prices_the_split_estimate_prices():
    from planner.api import estimate, search
    m = model()
    best = search(m, "dgx-h100-1024", gpus=64, pp=4, top=1).best
    assert best.layout["stage_layers"] == [5, 5, 5, 1] and best.stack_split
    given = {k: best.layout[k] for k in ("dp", "tp", "pp", "cp", "micro_batch", "zero", "recompute")}
    same = estimate(m, "dgx-h100-1024", gpus=64, **given)
    assert same.step_time_s == approx(best.step_time_s, rel=1e-12) and same.layout["stage_layers"] == [5, 5, 5, 1]
    # Megatron's stack splits evenly by default: 4 layers a rank (an uneven split is its flags' choice, CP-SAT's)
    even = estimate(model(stack="megatron-core"), "dgx-h100-1024", gpus=64, **given)
    assert even.layout["stage_layers"] == [4, 4, 4, 4] and not even.stack_split


def test_the_bound_ranks_are_few_and_bound_every_rank():
    from planner.costs.pipeline_ranks import pipeline_ranks
    from planner.layout.space import single_layout
    # [5, 5, 5, 1] (above): rank 0 holds more than any before it; ranks 1 and 2 hold no more than rank 0 and
    # have fewer micro-batches in flight; rank 3 is the last (the logits) and holds the fewest -> ranks 0 and 3
    layout = single_layout(dp=1, tp=1, pp=4, micro_batch=1, num_microbatches=16)
    ranks = pipeline_ranks(model(), layout)
    assert ranks.rank[:, 0].tolist() == [0, 3] and ranks.layers[:, 0].tolist() == [5, 1]
    # 1,200 layers on 1,024 ranks: every rank was kept, (1,024, layouts) arrays (a search took 6 GB and 22 s);
    # the split holds 1 or 2 layers a rank or none, so at most 2 ranks above the first, the last and the fewest
    big = model(layers=1200)
    layout = single_layout(dp=1, tp=1, pp=1024, micro_batch=1, num_microbatches=1024)
    split = cost_balanced_split(big, 1024)
    ranks = pipeline_ranks(big, layout)
    assert ranks.rank.shape[0] <= 4
    assert ranks.layers.max() == max(split) and ranks.layers.min() == min(split) and ranks.last.any()


def test_a_model_without_ffn_hidden_takes_its_default_width():
    # ffn_hidden left out is 4 h (ModelSpec.ffn): gpt3-1.3b (24 layers, h 2048) under nanotron raised
    # "internal error: TypeError" in every search and every estimate at pp > 1. A layer 4 h^2 + 3 (4 h) h = 16 h^2
    # = 67,108,864, the head 51,200 x 2048 = 104,857,600; total 24 x 67.1M + 104.9M = 1,715,470,336, half
    # 857,735,168: 12 layers are 805.3M, the 13th passes half (872.4M) -> [13, 11]
    from planner.specs.loading import load_model
    from planner.search import with_stack
    assert cost_balanced_split(with_stack(load_model("gpt3-1.3b"), "nanotron"), 2) == [13, 11]


def test_search_and_estimate_of_a_model_without_ffn_hidden(tmp_path):
    from typer.testing import CliRunner
    from planner.cli.main import app
    for args in (["search", "gpt3-1.3b", "dgx-h100-1024", "--gpus", "64", "--pp", "2"],
                 ["estimate", "gpt3-1.3b", "dgx-h100-1024", "--gpus", "8", "--tp", "1", "--pp", "2", "--micro-batch", "1"]):
        r = CliRunner().invoke(app, args + ["--stack", "nanotron"])
        assert r.exit_code == 0 and "internal error" not in r.output, r.output


def test_one_chunk_a_rank_counts_its_micro_batches_in_flight_at_once(monkeypatch):
    # 1F1B holds min(m, p - r) micro-batches of rank r's layers at its peak: [5, 5, 5, 1] at pp 4, m 2 -> ranks 0-2
    # hold min(2, 4 - r) = 2 micro-batches of 5 layers = 10, rank 3 min(2, 1) = 1 of 1 = 1. Counted rank by rank
    # (inflight_chunks, a call each), a 10,000-layer nanotron search took 8.5 s (megatron-core: 1.1 s)
    import planner.costs.pipeline_ranks as pr
    from planner.layout.space import single_layout

    def per_rank(*args):
        raise AssertionError("inflight_chunks called for one chunk a rank")

    monkeypatch.setattr(pr, "inflight_chunks", per_rank)
    layout = single_layout(dp=1, tp=1, pp=4, micro_batch=1, num_microbatches=2)
    ranks = pr.split_ranks(model(), layout, [5, 5, 5, 1])
    assert ranks.in_flight[:, 0].tolist() == [10, 10, 10, 1]
