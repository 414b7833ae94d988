"""Pipeline ranks: what each rank of a layout holds and runs, as arrays over (rank, layout).

Ranks of one pipeline differ where the schedule makes them differ:
- layers: an uneven split puts the extra layers on the first ranks (Megatron-LM's default);
- the word (and position) embedding sits on the first rank, the output layer and the loss on the
  last (Narayanan et al. 2021 Sec. 2);
- micro-batches in flight: Megatron's 1F1B warm-up runs p - r - 1 micro-batches ahead on rank r,
  so r holds min(m, p - r); with v chunks per rank, 2 (p - r - 1) + (v - 1) p chunks ahead, plus
  the one at work (Korthikanti et al. 2022 Sec. 4.2.3 for the first rank).

A `rank` argument is an int array of shape (k, n): k ranks of each of the n layouts, giving (k, n)
results (per-layout arrays broadcast along the first axis); a scalar (the default, rank 0) gives
(n,) results.

`bounding_ranks` (first and last) is what a full search evaluates: layers and in-flight work do
not grow with r and only the first and last ranks carry embeddings and logits, so no middle rank
is heavier than the first in time or memory (`tests/costs/test_stages.py` checks this against
`all_ranks` over random spaces). `all_ranks` evaluates every rank: per-stage power caps use it,
and splits that are not monotone (uneven stages chosen per rank) will need it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..specs import ModelSpec


def bounding_ranks(layouts, model: ModelSpec | None = None) -> np.ndarray:
    """(2, n): the first and the last pipeline rank of each layout (both 0 when pp = 1). With MoE
    layers (3, n): also the first rank after the first whose layers are all MoE, which holds the
    most MoE layers when the first ranks hold the dense ones (checked against every rank for the shipped
    MoE models in tests/costs/test_stages.py)."""
    first, last = np.zeros(len(layouts), dtype=np.int64), layouts.pp - 1
    if model is not None and model.moe is not None:
        return np.stack([first, np.maximum(np.minimum(1, last), _first_all_moe_rank(model, layouts)), last])
    return np.stack([first, last])


def _first_all_moe_rank(model: ModelSpec, layouts) -> np.ndarray:
    """The first rank whose layers all come after the dense prefix (it holds the most MoE layers of
    an uneven split: DeepSeek-V3's 61 layers with 3 dense on 32 ranks put them on rank 2)."""
    L, k = model.layers, model.moe.dense_layers
    degrees, inverse = np.unique(layouts.pp, return_inverse=True)  # a few pp values: one pass each
    rank = np.empty(degrees.size, dtype=np.int64)
    for i, p in enumerate(degrees.tolist()):
        start = [r * (L // p) + min(r, L % p) for r in range(p)]
        rank[i] = next((r for r in range(p) if start[r] >= k), p - 1)
    return rank[inverse.reshape(-1)]


def all_ranks(layouts) -> np.ndarray:
    """(max pp, n): every pipeline rank; shorter pipelines repeat their last rank, which leaves
    maxima unchanged (`valid_ranks` tells the distinct ones, for sums)."""
    width = int(layouts.pp.max(initial=1))
    return np.minimum(np.arange(width)[:, None], layouts.pp - 1)


def valid_ranks(layouts) -> np.ndarray:
    """(max pp, n) bool: which entries of `all_ranks` are distinct ranks."""
    width = int(layouts.pp.max(initial=1))
    return np.arange(width)[:, None] < layouts.pp


def rank_layers(model: ModelSpec, layouts, rank=0) -> np.ndarray:
    """Transformer layers held by rank r (all its virtual stages): L // p, one more on the first L % p."""
    p = layouts.pp
    return model.layers // p + (rank < model.layers % p)


def rank_moe_layers(model: ModelSpec, layouts, rank=0) -> np.ndarray:
    """MoE layers held by rank r: those among its layers (ModelSpec.moe_layers_before). Without
    interleaving rank r holds one run of layers; with v chunks, chunk j holds the (j p + r)-th
    L / (p v) layers (Megatron's interleaved assignment)."""
    if model.moe is None:
        return np.zeros(np.broadcast(np.asarray(rank), layouts.pp).shape)
    p, v, L = layouts.pp, layouts.vpp, model.layers
    start = rank * (L // p) + np.minimum(rank, L % p)
    plain = model.moe_layers_before(start + rank_layers(model, layouts, rank)) - model.moe_layers_before(start)
    if np.all(v == 1):
        return plain
    size = L // (p * v)
    chunked = np.zeros(np.broadcast(np.asarray(rank), p).shape, dtype=np.int64)
    for j in range(int(v.max())):
        first = (j * p + rank) * size
        chunked = chunked + np.where(j < v, model.moe_layers_before(first + size) - model.moe_layers_before(first), 0)
    return np.where(v > 1, chunked, plain)


def holds_embedding(rank=0) -> np.ndarray:
    return np.asarray(rank) == 0


def holds_logits(layouts, rank=0) -> np.ndarray:
    return np.asarray(rank) == layouts.pp - 1


def layers_in_flight(model: ModelSpec, layouts, rank=0, layers: np.ndarray | None = None) -> np.ndarray:
    """Layer-activations rank r holds at its peak (module docstring): 1F1B keeps min(m, p - r)
    micro-batches of its layers; interleaving keeps min(m v, 2 (p - r - 1) + (v - 1) p + 1)
    chunks of L / (p v) layers. `layers`: `rank_layers` of the same ranks, when already known."""
    p, v, m = layouts.pp, layouts.vpp, layouts.num_microbatches
    layers = rank_layers(model, layouts, rank) if layers is None else layers
    one_f_one_b = layers * np.minimum(m, p - rank)
    chunk_layers = model.layers / (p * v)
    interleaved = chunk_layers * np.minimum(m * v, 2 * (p - rank - 1) + (v - 1) * p + 1)
    return np.where(v > 1, interleaved, one_f_one_b)


@dataclass(frozen=True)
class PipelineRanks:
    """The ranks a cost model evaluates, with what they hold: (k, n) arrays."""

    rank: np.ndarray
    layers: np.ndarray  # transformer layers held
    moe_layers: np.ndarray  # of which mixture-of-experts layers
    first: np.ndarray  # holds the embedding
    last: np.ndarray  # holds the output layer and the loss


def pipeline_ranks(model: ModelSpec, layouts, rank: np.ndarray | None = None) -> PipelineRanks:
    """The ranks `rank` (default: the bounding ranks) of each layout."""
    rank = bounding_ranks(layouts, model) if rank is None else rank
    return PipelineRanks(rank, rank_layers(model, layouts, rank), rank_moe_layers(model, layouts, rank),
                         holds_embedding(rank), holds_logits(layouts, rank))


def heaviest(values: np.ndarray) -> np.ndarray:
    """Rank index (row) of the largest value per layout (the first on ties: the earlier rank)."""
    return np.argmax(values, axis=0)


def pick(values: np.ndarray, index: np.ndarray) -> np.ndarray:
    """values[index[n], n] for each layout n."""
    if values.shape[0] == 2:  # the common case, without fancy indexing
        return np.where(index == 0, values[0], values[1])
    return values[index, np.arange(values.shape[1])]
