"""Pipeline ranks: what each rank of a layout holds and runs, as arrays over (rank, layout).

Ranks of one pipeline differ where the schedule makes them differ:
- layers: an uneven split puts the extra layers on the first ranks (Megatron-LM's default);
- the word (and position) embedding sits on the first rank, the output layer and the loss on the
  last (Narayanan et al. 2021 Sec. 2); but for the V schedules (zb-v, dualpipev), whose second chunks run
  back from rank p - 1 to rank 0 (chunk 1 of rank r is the micro-batch's stage 2p - 1 - r: torch.distributed.
  pipelining's stage_ids_this_rank style "v", DeepSeek's dualpipev.py), rank 0 holds both the first and the
  last stage, so the embedding and the loss;
- micro-batches in flight: Megatron's 1F1B warm-up runs p - r - 1 micro-batches ahead on rank r,
  so r holds min(m, p - r); with v chunks per rank, 2 (p - r - 1) + (v - 1) p chunks ahead, plus
  the one at work (Korthikanti et al. 2022 Sec. 4.2.3 for the first rank).

A `rank` argument is an int array of shape (k, n): k ranks of each of the n layouts, giving (k, n)
results (per-layout arrays broadcast along the first axis); a scalar (the default, rank 0) gives
(n,) results.

`bounding_ranks` (first and last) is what a full search evaluates: layers and in-flight work do
not grow with r and only the first and last ranks carry embeddings and logits, so no middle rank
is heavier than the first in time or memory (`tests/costs/test_pipeline_ranks.py` checks this against
`all_ranks` over random spaces). `all_ranks` evaluates every rank: per-stage power caps use it,
and splits that are not monotone (uneven stages chosen per rank) will need it.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from planner.layout.arrays import unique_rows
from planner.layout.axes import SCHEDULES, V_SCHEDULES
from planner.specs import ModelSpec
from planner.specs.hybrid import pattern_layers_before
from planner.specs.layers import layer_kinds


def bounding_ranks(layouts, model: ModelSpec | None = None) -> np.ndarray:
    """(2, n): the first and the last pipeline rank of each layout (both 0 when pp = 1). With MoE
    layers (3, n): also the first rank after the first whose layers are all MoE, which holds the
    most MoE layers when the first ranks hold the dense ones (checked against every rank for the shipped
    MoE models in tests/costs/test_pipeline_ranks.py)."""
    first, last = np.zeros(len(layouts), dtype=np.int64), layouts.pp - 1
    if model is not None and (model.layer_pattern is not None or is_v(layouts).any()):
        return _undominated_ranks(model, layouts)
    if model is not None and model.moe is not None:
        return np.stack([first, np.maximum(np.minimum(1, last), _first_all_moe_rank(model, layouts)), last])
    return np.stack([first, last])


def _first_all_moe_rank(model: ModelSpec, layouts) -> np.ndarray:
    """The rank holding the most MoE layers (then the most layers) under the default split, once
    per distinct (pp, vpp): DeepSeek-V3's 61 layers with 3 dense on 32 ranks put it at rank 2."""
    first, inverse = unique_rows([layouts.pp, layouts.vpp])  # a few values: one pass each (no V schedule here)
    rank = np.empty(len(first), dtype=np.int64)
    for i, (p, v) in enumerate(zip(layouts.pp[first].tolist(), layouts.vpp[first].tolist())):
        one = _OnePipeline(np.array([p]), np.array([v]), np.array([False]))
        ranks = np.arange(p)[:, None]
        moe, layers = rank_moe_layers(model, one, ranks)[:, 0], rank_layers(model, one, ranks)[:, 0]
        rank[i] = int(np.lexsort((-np.arange(p), layers, moe))[-1])
    return rank[inverse]


def _undominated_ranks(model: ModelSpec, layouts) -> np.ndarray:
    """(k, n): a hybrid pattern's stages hold different mixes of kinds, and a V schedule's default split
    does not shrink with the rank (`stage_starts`), so any rank may be the slowest or the fullest; a rank
    holding no more layers of any kind than an earlier one is no heavier than it (an earlier rank has as
    many micro-batches in flight or more, and the embedding if any), so the ranks kept are those no
    earlier rank dominates, and the last (the logits, but for a V schedule). Once per distinct (pp, vpp,
    V or not); shorter lists repeat their last rank (as all_ranks)."""
    v_shape = is_v(layouts)
    first, inverse = unique_rows([layouts.pp, layouts.vpp, v_shape])
    hybrid = model.layer_pattern is not None
    kept = []
    for p, v, vs in zip(layouts.pp[first].tolist(), layouts.vpp[first].tolist(), v_shape[first].tolist()):
        one, ranks = _OnePipeline(np.array([p]), np.array([v]), np.array([vs])), np.arange(p)[:, None]
        if hybrid:
            counts = np.stack([rank_pattern_layers(model, one, ranks, k.chars)[:, 0] for k in layer_kinds(model)], axis=1)
        else:
            moe = rank_moe_layers(model, one, ranks)[:, 0]
            counts = np.stack([rank_layers(model, one, ranks)[:, 0] - moe, moe], axis=1)
        # dominates[q, r]: rank q holds at least rank r's layers of every kind; keep r unless an earlier q does
        # (dominance is transitive, so the earlier ranks kept dominate whatever an earlier rank does)
        dominates = np.all(counts[:, None, :] >= counts[None, :, :], axis=2)
        keep = ~np.triu(dominates, k=1).any(axis=0)
        keep[-1] = True
        kept.append(np.flatnonzero(keep).tolist())
    width = max(len(k) for k in kept)
    table = np.array([k + [k[-1]] * (width - len(k)) for k in kept], dtype=np.int64).T
    return table[:, inverse]


@dataclass(frozen=True)
class _OnePipeline:
    pp: np.ndarray
    vpp: np.ndarray
    v_shape: np.ndarray  # a V schedule (is_v)


_V_INDEX = [SCHEDULES.index(name) for name in V_SCHEDULES]


def is_v(layouts) -> np.ndarray:
    """Whether each layout runs a V schedule (zb-v, dualpipev: chunk 1 of rank r is path stage 2p - 1 - r)."""
    if isinstance(layouts, _OnePipeline):
        return layouts.v_shape
    return np.isin(layouts.schedule, _V_INDEX)


def path_stage(p, chunk, rank, v_shape):
    """The stage (position on a micro-batch's path, the layers' order) of chunk j of rank r: j p + r
    (Megatron's interleaved assignment), but p + (p - 1 - r) for a V schedule's second chunk."""
    return np.where(np.asarray(v_shape) & (np.asarray(chunk) == 1), 2 * np.asarray(p) - 1 - rank, chunk * np.asarray(p) + rank)


def path_order(split, p: int, v_shape: bool) -> list[int]:
    """Per-stage values from schedule order (chunk j of rank r at j p + r) to path order, or back (the
    map is its own inverse): the same order, but for a V schedule, whose chunks 1 run back from rank p - 1."""
    split = list(split)
    return split[:p] + split[p:][::-1] if v_shape else split


def all_ranks(layouts) -> np.ndarray:
    """(max pp, n): every pipeline rank; shorter pipelines repeat their last rank, which leaves
    maxima unchanged (`valid_ranks` tells the distinct ones, for sums)."""
    width = int(layouts.pp.max(initial=1))
    return np.minimum(np.arange(width)[:, None], layouts.pp - 1)


def valid_ranks(layouts) -> np.ndarray:
    """(max pp, n) bool: which entries of `all_ranks` are distinct ranks."""
    width = int(layouts.pp.max(initial=1))
    return np.arange(width)[:, None] < layouts.pp


def stage_starts(model: ModelSpec, p, v, stage, v_shape=False) -> tuple[np.ndarray, np.ndarray]:
    """(first layer, layers) of path stage `stage` (`path_stage`) under the default split of L layers
    into S = p v virtual stages: L // S each, one more on the first L % S (Megatron-LM puts an uneven
    split's extra layers first; an explicit split comes from planner/cpsat/stage_split.py). A V
    schedule's rank 0 holds the first stage (the embedding) and the last (the loss): its extra layers
    go to stages 1 .. L % S instead, so that both of rank 0's stages are the short ones (while
    L % S < S - 1)."""
    S = p * v
    q, e = model.layers // S, model.layers % S
    plain = (stage * q + np.minimum(stage, e), q + (stage < e))
    vee = (stage * q + np.clip(stage - 1, 0, e), q + ((stage >= 1) & (stage <= e)))
    return tuple(np.where(v_shape, a, b) for a, b in zip(vee, plain))


def rank_layers(model: ModelSpec, layouts, rank=0) -> np.ndarray:
    """Transformer layers held by rank r (all its virtual stages) under the default split: its v
    chunks of L // (p v), plus one for each of its chunks among the first L % (p v) virtual stages;
    a V schedule's rank r holds stages r and 2p - 1 - r, with an extra layer each among stages 1 .. L % S."""
    p, v = layouts.pp, layouts.vpp
    S = p * v
    e = model.layers % S
    extra = np.clip((e - rank + p - 1) // p, 0, v)
    v_extra = ((rank >= 1) & (rank <= e)).astype(np.int64) + ((2 * p - 1 - rank >= 1) & (2 * p - 1 - rank <= e))
    return (model.layers // S) * v + np.where(is_v(layouts), v_extra, extra)


def rank_moe_layers(model: ModelSpec, layouts, rank=0) -> np.ndarray:
    """MoE layers held by rank r: those among its layers (ModelSpec.moe_layers_before). Chunk j of
    rank r is virtual stage j p + r (Megatron's interleaved assignment; j = 0 only without
    interleaving). Computed once per distinct (pp, vpp, rank)."""
    if model.moe is None:
        return np.zeros(np.broadcast(np.asarray(rank), layouts.pp).shape)
    return _rank_layers_among(model, layouts, rank, model.moe_layers_before)


def rank_pattern_layers(model: ModelSpec, layouts, rank, chars: str) -> np.ndarray:
    """Layers of a hybrid pattern whose character is in `chars` held by rank r (as rank_moe_layers)."""
    return _rank_layers_among(model, layouts, rank, lambda n: pattern_layers_before(model, chars, n))


def _rank_layers_among(model: ModelSpec, layouts, rank, before) -> np.ndarray:
    """Layers held by rank r among those `before(n)` counts in the first n, once per distinct (pp, vpp, rank)."""
    shape = np.broadcast(np.asarray(rank), layouts.pp).shape
    p, v, r, vs = (np.broadcast_to(x, shape).reshape(-1) for x in (layouts.pp, layouts.vpp, np.asarray(rank), is_v(layouts)))
    first, inverse = unique_rows([p, v, r, vs])
    p, v, r, vs = p[first], v[first], r[first], vs[first]
    held = np.zeros(first.size, dtype=np.int64)
    for j in range(int(v.max(initial=1))):
        start, size = stage_starts(model, p, v, path_stage(p, j, r, vs), vs)
        held = held + np.where(j < v, before(start + size) - before(start), 0)
    return held[inverse].reshape(shape)


def holds_embedding(rank=0) -> np.ndarray:
    return np.asarray(rank) == 0


def holds_logits(layouts, rank=0) -> np.ndarray:
    """The last stage's rank: p - 1, but rank 0 for a V schedule (module docstring)."""
    return np.asarray(rank) == np.where(is_v(layouts), 0, layouts.pp - 1)


def layers_in_flight(model: ModelSpec, layouts, rank=0, layers: np.ndarray | None = None) -> np.ndarray:
    """Layer-activations rank r holds at its peak (module docstring): 1F1B keeps min(m, p - r)
    micro-batches of its layers; interleaving keeps min(m v, 2 (p - r - 1) + (v - 1) p + 1)
    chunks of its layers / v (exact for an even split; `inflight_chunks` counts them per chunk
    for an uneven one). `layers`: `rank_layers` of the same ranks, when already known."""
    p, v, m = layouts.pp, layouts.vpp, layouts.num_microbatches
    layers = rank_layers(model, layouts, rank) if layers is None else layers
    one_f_one_b = layers * np.minimum(m, p - rank)
    interleaved = layers / v * np.minimum(m * v, 2 * (p - rank - 1) + (v - 1) * p + 1)
    return np.where(v > 1, interleaved, one_f_one_b)


def default_in_flight(model: ModelSpec, layouts, ranks: "PipelineRanks") -> np.ndarray:
    """`layers_in_flight` of ranks under the default split (their layers follow pp, vpp and the
    rank), once per distinct (pp, vpp, micro-batches, ranks): a full space has a few hundred."""
    return per_schedule(layouts, ranks, lambda lay, r: [layers_in_flight(model, lay, r.rank, r.layers)])[0]


def per_schedule(layouts, ranks: "PipelineRanks", fn) -> list[np.ndarray]:
    """fn(layouts, ranks) -> a list of (k, n) arrays that follow the schedule alone (pp, vpp, the
    micro-batches, and the ranks with what they hold under the default split), evaluated once per
    distinct schedule and spread back over the rows (`ranks` fields broadcast to (k, n))."""
    shape = np.broadcast(ranks.rank, ranks.layers).shape
    full = PipelineRanks(*(np.broadcast_to(getattr(ranks, f), shape) for f in _RANK_FIELDS))
    if len(shape) != 2 or shape[1] != len(layouts):
        return fn(layouts, full)
    first, inverse = unique_rows([layouts.pp, layouts.vpp, layouts.num_microbatches, *full.rank])
    if first.size == len(layouts):
        return fn(layouts, full)
    few = fn(layouts.take(first), PipelineRanks(*(getattr(full, f)[:, first] for f in _RANK_FIELDS)))
    return [np.take(x, inverse, axis=1) for x in few]


def warmup_units(p: int, v: int, m: int, rank: int) -> int:
    """Forward (micro-batch, chunk) units rank r runs before its first backward: p - r - 1 under
    1F1B, 2 (p - r - 1) + (v - 1) p interleaved (Megatron-LM schedules.py), never more than m v."""
    w = p - rank - 1 if v == 1 else 2 * (p - rank - 1) + (v - 1) * p
    return min(w, m * v)


def inflight_chunks(p: int, v: int, m: int, rank: int) -> np.ndarray:
    """(k, v): micro-batches in flight per model chunk of rank r at each of its memory peaks (right
    after a forward). Forward unit u runs chunk (u // p) % v, backward unit u chunk v - 1 - (u // p) % v
    (Megatron-LM's get_model_chunk_id); after forward k, k - w backwards are done (w warm-up units).
    In steady state the counts repeat with period p v, so one period holds every peak."""
    units = m * v
    w = warmup_units(p, v, m, rank)
    last = min(units, w + p * v + 1)
    u = np.arange(last)
    fwd = np.zeros((last + 1, v), dtype=np.int64)
    bwd = np.zeros((last + 1, v), dtype=np.int64)
    np.add.at(fwd, (u + 1, (u // p) % v), 1)
    np.add.at(bwd, (u + 1, v - 1 - (u // p) % v), 1)
    fwd, bwd = np.cumsum(fwd, axis=0), np.cumsum(bwd, axis=0)
    k = np.arange(min(w, units - 1), last)  # peaks: after forward k, for k >= w (w - 1 < w is dominated)
    counts = fwd[k + 1] - bwd[np.maximum(k - w, 0)]
    return np.unique(counts, axis=0)


@dataclass(frozen=True)
class PipelineRanks:
    """The ranks a cost model evaluates, with what they hold: (k, n) arrays."""

    rank: np.ndarray
    layers: np.ndarray  # transformer layers held
    moe_layers: np.ndarray  # of which mixture-of-experts layers
    first: np.ndarray  # holds the embedding
    last: np.ndarray  # holds the output layer and the loss
    in_flight: np.ndarray | None = None  # layer-activations at the peak (None: layers_in_flight)
    in_flight_moe: np.ndarray | None = None  # of which of MoE layers (with in_flight)
    by_kind: tuple | None = None  # a hybrid model's layers held of each kind (layer_kinds order)


def held_layers(ranks: PipelineRanks, moe: list) -> list:
    """Layers each rank holds of each kind of layer (`moe`: whether each kind is MoE): a hybrid
    model's counts by kind, else the MoE layers and the others."""
    if ranks.by_kind is not None:
        return list(ranks.by_kind)
    return [ranks.moe_layers if is_moe else ranks.layers - ranks.moe_layers for is_moe in moe]


_RANK_FIELDS = ("rank", "layers", "moe_layers", "first", "last")


def cost_balanced(model: ModelSpec) -> bool:
    """Whether the stack splits this model's layers by cost (StackSpec.pipeline_split; dense, one kind)."""
    return (model.training.stack.pipeline_split == "cost_balanced" and model.moe is None
            and model.layer_pattern is None)


def splits_by_cost(model: ModelSpec, p: int, v: int, v_shape: bool) -> bool:
    """Whether a pipeline of p ranks, v chunks each (`v_shape`: a V schedule) takes the stack's cost-balanced
    split: nanotron's builds one chunk a rank under 1F1B; the rest keep the default."""
    return cost_balanced(model) and p > 1 and v == 1 and not v_shape


def cost_balanced_split(model: ModelSpec, p: int) -> list[int]:
    """Decoder layers per rank as nanotron's build_model splits them (src/nanotron/models/base.py, as of
    e24d248 and 2411b02): the pipeline blocks in order - the embedding, the layers, the final norm, the
    output layer - cost 0, 4 h^2 + 3 f h each (models/llama.py get_block_compute_costs: heads x head dim
    = h; f: ModelSpec.ffn, 4 h where ffn_hidden is left out), 0 and V h; a block goes to the current rank,
    which moves on once the running cost passes total x (r + 1) / p. Where the output layer lands before
    the last rank (a few layers under a large vocabulary on many ranks), nanotron leaves the ranks after it
    idle; the planner prices the output layer on the last rank, apart from the layers before it: optimistic
    by at most that rank's layers."""
    layer, head = 4 * model.hidden * model.hidden + 3 * model.ffn * model.hidden, model.vocab * model.hidden
    costs = [0] + [layer] * model.layers + [0, head]
    total, running, rank, held = sum(costs), 0, 0, [0] * p
    for i, c in enumerate(costs):
        running += c
        if 1 <= i <= model.layers:
            held[rank] += 1
        if running > total * ((rank + 1) / p):  # nanotron's threshold, in its order of operations
            rank = min(rank + 1, p - 1)
    return held


def pipeline_ranks(model: ModelSpec, layouts, rank: np.ndarray | None = None) -> PipelineRanks:
    """The ranks `rank` (default: the bounding ranks) of each layout. The bounding ranks and what
    they hold follow (pp, vpp) alone: computed once per distinct pair (a handful in a full space)
    and spread back over the rows, integers and booleans, so exactly as row by row."""
    if cost_balanced(model):
        return _balanced_ranks(model, layouts, rank)
    if rank is None:
        first, inverse = unique_rows([layouts.pp, layouts.vpp, is_v(layouts)])
        if first.size < len(layouts):
            few = _ranks_of(model, layouts.take(first), bounding_ranks(layouts.take(first), model))
            by_kind = None if few.by_kind is None else tuple(np.take(x, inverse, axis=1) for x in few.by_kind)
            return PipelineRanks(*(np.take(getattr(few, f), inverse, axis=1) for f in _RANK_FIELDS), by_kind=by_kind)
        rank = bounding_ranks(layouts, model)
    return _ranks_of(model, layouts, rank)


def _balanced_ranks(model: ModelSpec, layouts, rank: np.ndarray | None) -> PipelineRanks:
    """pipeline_ranks under the stack's cost-balanced split (`cost_balanced_split`) where it applies (pp > 1,
    vpp 1, no V schedule), as `split_ranks` prices an explicit split: every rank (or those of `rank`), with
    its in-flight layers; once per distinct (pp, vpp, V, micro-batches), shorter lists repeating their last rank."""
    v_shape = is_v(layouts)
    first, inverse = unique_rows([layouts.pp, layouts.vpp, v_shape, layouts.num_microbatches])
    parts = []
    for i, row in enumerate(first.tolist()):
        one = layouts.take(np.array([row]))
        wanted = None if rank is None else np.asarray(rank)[:, row] if np.ndim(rank) == 2 else np.atleast_1d(rank)
        p = int(one.pp[0])
        if splits_by_cost(model, p, int(one.vpp[0]), bool(v_shape[row])):
            split = cost_balanced_split(model, p)
            every = split_ranks(model, one, split)
            pick = _balanced_kept(split) if wanted is None else np.minimum(np.asarray(wanted, dtype=np.int64), p - 1)
            parts.append(PipelineRanks(*(getattr(every, f)[pick] for f in (*_RANK_FIELDS, "in_flight", "in_flight_moe"))))
        else:
            r = bounding_ranks(one, model) if wanted is None else np.asarray(wanted, dtype=np.int64).reshape(-1, 1)
            even = _ranks_of(model, one, r)
            flight = layers_in_flight(model, one, even.rank, even.layers)
            parts.append(replace(even, in_flight=flight, in_flight_moe=np.zeros_like(flight, dtype=float)))
    width = max(part.rank.shape[0] for part in parts)

    def padded(x: np.ndarray) -> np.ndarray:  # (k, 1) -> (width, 1), the last rank repeated
        return np.concatenate([x, np.repeat(x[-1:], width - x.shape[0], axis=0)], axis=0)

    fields = (*_RANK_FIELDS, "in_flight", "in_flight_moe")
    table = {f: np.concatenate([padded(np.asarray(getattr(part, f)).reshape(-1, 1)) for part in parts], axis=1) for f in fields}
    return PipelineRanks(**{f: np.take(table[f], inverse, axis=1) for f in fields})


def _balanced_kept(split: list[int]) -> np.ndarray:
    """The ranks of a cost-balanced split (one chunk a rank, 1F1B) that bound the others: each holding more
    layers than every earlier rank (an earlier rank of as many layers has as many micro-batches in flight or
    more, and the embedding if any), the last (the logits) and the one of fewest layers (the DP overlap's
    shortest backward). Every rank of 1,200 layers at pp 1,024 made (1,024, layouts) arrays: 6 GB, 22 s."""
    n = np.asarray(split)
    most_before = np.maximum.accumulate(np.concatenate([[-1], n[:-1]]))
    keep = n > most_before
    keep[[-1, int(np.argmin(n))]] = True
    return np.flatnonzero(keep)


def _ranks_of(model: ModelSpec, layouts, rank: np.ndarray) -> PipelineRanks:
    by_kind = None
    if model.layer_pattern is not None:
        by_kind = tuple(rank_pattern_layers(model, layouts, rank, k.chars) for k in layer_kinds(model))
    return PipelineRanks(rank, rank_layers(model, layouts, rank), rank_moe_layers(model, layouts, rank),
                         holds_embedding(rank), holds_logits(layouts, rank), by_kind=by_kind)


def rank_param_split(model: ModelSpec, layouts, ranks: PipelineRanks) -> tuple:
    """Unsharded parameters per GPU of each rank of `ranks`: (split over tp, routed experts split over ep*etp).
    The word embedding and the output layer are vocab-parallel (/tp); a learned position embedding
    is replicated. Megatron keeps a copy of tied word embeddings on the last rank to compute the
    logits (one matrix when a rank holds both)."""
    word = model.vocab * model.hidden
    position = model.embedding_params() - word
    output = model.output_params() or np.where(ranks.first, 0, word)
    if ranks.by_kind is not None:  # a hybrid model: each kind's layers held
        kinds = layer_kinds(model)
        tp_held = ranks.first * word + ranks.last * output + sum(n * k.tp_params for n, k in zip(ranks.by_kind, kinds))
        experts = sum(n * k.expert_params for n, k in zip(ranks.by_kind, kinds)) / (layouts.ep * layouts.etp).astype(float)
        return tp_held / layouts.tp.astype(float) + ranks.first * position, np.broadcast_to(experts, np.shape(tp_held))
    kinds = {k.name: k for k in layer_kinds(model)}
    dense, moe = kinds.get("dense"), kinds.get("moe")
    tp_held = (ranks.layers - ranks.moe_layers) * (dense.tp_params if dense else 0) + ranks.first * word + ranks.last * output
    experts = np.zeros(np.shape(tp_held))
    if moe is not None:
        tp_held = tp_held + ranks.moe_layers * moe.tp_params
        experts = ranks.moe_layers * moe.expert_params / (layouts.ep * layouts.etp).astype(float)
    return tp_held / layouts.tp.astype(float) + ranks.first * position, np.broadcast_to(experts, np.shape(tp_held))


def split_counts(layers: int, stages: int) -> list[int]:
    """`layers` over `stages` as stage_starts splits them: layers // stages each, one more first."""
    return [layers // stages + (s < layers % stages) for s in range(stages)]


def default_split(model: ModelSpec, p: int, v: int, v_shape: bool = False) -> list[int]:
    """Transformer layers per virtual stage in schedule order (stage j p + r is chunk j of rank r)
    under the default split (stage_starts; `v_shape`: a V schedule's, `is_v`), or the stack's own
    (`cost_balanced_split`)."""
    if splits_by_cost(model, p, v, v_shape):
        return cost_balanced_split(model, p)
    if not v_shape:
        return split_counts(model.layers, p * v)
    q, e = divmod(model.layers, p * v)
    return path_order([q + (1 <= s <= e) for s in range(p * v)], p, True)


def layout_default_split(model: ModelSpec, layout) -> list[int]:
    """default_split of a one-row layout (its pp, vpp and schedule)."""
    return default_split(model, int(layout.pp[0]), int(layout.vpp[0]), bool(is_v(layout)[0]))


def split_ranks(model: ModelSpec, layout, stage_layers, act_weights: tuple[float, float] = (1.0, 1.0)) -> PipelineRanks:
    """Every rank of a one-row layout under an explicit split (layers per virtual stage in schedule
    order): (p, 1) arrays, with the layer-activations in flight at each rank's peak counted chunk by
    chunk (`inflight_chunks`). `act_weights`: stored bytes of a dense and of a MoE layer, to tell
    which peak is highest when the chunks hold different kinds."""
    p, v, m = int(layout.pp[0]), int(layout.vpp[0]), int(layout.num_microbatches[0])
    v_shape = bool(is_v(layout)[0])
    n = np.asarray(stage_layers, dtype=np.int64)
    assert n.size == p * v and int(n.sum()) == model.layers, (n, p, v)
    path = np.asarray(path_order(n, p, v_shape), dtype=np.int64)  # the layers' order
    ends = np.cumsum(path)

    def held_among(before) -> np.ndarray:  # per stage in schedule order, of the layers `before` counts
        return np.asarray(path_order(before(ends) - before(ends - path), p, v_shape), dtype=np.int64).reshape(v, p).T

    moe = np.asarray(path_order(model.moe_layers_before(ends) - model.moe_layers_before(ends - path), p, v_shape),
                     dtype=np.int64)
    by_kind = None
    if model.layer_pattern is not None:  # each rank's layers of each kind (`_in_flight_by_kind` shares them out)
        by_kind = tuple(held_among(lambda x, c=k.chars: pattern_layers_before(model, c, x)).sum(axis=1)[:, None]
                        for k in layer_kinds(model))
    by_rank, moe_by_rank = n.reshape(v, p).T, moe.reshape(v, p).T  # [rank, chunk]
    if v == 1 and not v_shape:  # one chunk a rank under 1F1B: inflight_chunks is [[min(m, p - r)]], here at once
        ahead = np.minimum(m, p - np.arange(p))  # (a rank per call took 11 s of a 10,000-layer nanotron search)
        flight, flight_moe = by_rank[:, 0] * ahead, moe_by_rank[:, 0] * ahead
    else:
        flight, flight_moe = np.zeros(p), np.zeros(p)
        for r in range(p):
            counts = inflight_chunks(p, v, m, r)
            held, held_moe = counts @ by_rank[r], counts @ moe_by_rank[r]
            peak = int(np.argmax((held - held_moe) * act_weights[0] + held_moe * act_weights[1]))
            flight[r], flight_moe[r] = held[peak], held_moe[peak]
    rank = np.arange(p)[:, None]
    layers = by_rank.sum(axis=1)[:, None]
    if by_kind is not None:
        # memory.py shares a hybrid rank's in-flight layers out by the kinds it holds, from the in-flight
        # count of the default schedule's (`layers_in_flight` of these layers): exact for one chunk a rank
        return PipelineRanks(rank, layers, moe_by_rank.sum(axis=1)[:, None], rank == 0, holds_logits(layout, rank),
                             by_kind=by_kind)
    return PipelineRanks(rank, layers, moe_by_rank.sum(axis=1)[:, None], rank == 0,
                         holds_logits(layout, rank), flight[:, None], flight_moe[:, None])


def heaviest(values: np.ndarray) -> np.ndarray:
    """Rank index (row) of the largest value per layout (the first on ties: the earlier rank), as
    np.argmax(values, axis=0); for the few bounding ranks by comparing rows (argmax along the short
    axis of a (3, n) array took longer than the whole memory model's arithmetic)."""
    if values.ndim != 2 or not 2 <= values.shape[0] <= 4:
        return np.argmax(values, axis=0)
    best, index = values[0], np.zeros(values.shape[1], dtype=np.intp)
    for r in range(1, values.shape[0]):
        index = np.where(values[r] > best, r, index)  # strictly larger: the earlier rank keeps a tie
        best = np.maximum(best, values[r])
    return np.argmax(values, axis=0) if np.isnan(best).any() else index  # argmax returns the first NaN


def pick(values: np.ndarray, index: np.ndarray) -> np.ndarray:
    """values[index[n], n] for each layout n."""
    return pick_each([values], index)[0]


def pick_each(arrays: list[np.ndarray], index: np.ndarray) -> list[np.ndarray]:
    """`pick` of several (k, n) arrays with one index: one flat index, then a gather each."""
    n = index.shape[0]
    flat = index * n + np.arange(n)
    return [np.take(np.ascontiguousarray(a).reshape(-1), flat) for a in arrays]
