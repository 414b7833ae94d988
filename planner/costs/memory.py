"""Memory per GPU of each pipeline rank: weights, gradients, optimizer states, activations, other.

Sources:
- Mixed-precision Adam keeps weights, fp32 gradients (Megatron's main_grad) and fp32 master
  weights + two moments per parameter (planner/precision.py: 18 bytes in bf16/fp16), which
  reproduces Korthikanti et al. 2022 Fig. 1 exactly. ZeRO stages shard them over dp (Rajbhandari
  et al. 2020, Sec. 5: stage 1 optimizer states, 2 + gradients, 3 + parameters).
- ZeRO-3 also holds the parameters it has gathered and gradients awaiting their reduce-scatter,
  by the stack's gathering granularity (zero3_transient_params).
- Activations per layer (Korthikanti et al. 2022, Eq. 2-6, Table 2, in bytes of 16-bit tensors
  and 1-byte masks): s b h (10 + 24/t + 5 a s/(h t)) with tp, s b h (34/t + 5 a s/(h t)) with
  tp + sp, the 5as/h term dropped by selective recomputation, 2 s b h (/t with sp) with full
  recomputation. Generalised here to GQA and SwiGLU by counting the stored tensors of Sec. 4.1.
- In-flight micro-batches and what each rank holds: planner/costs/stages.py.
The breakdown of a layout is that of its heaviest rank; `memory_per_rank` gives every rank asked for.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..precision import FP32_BYTES, precision
from ..space import RECOMPUTE_FULL, RECOMPUTE_NONE
from ..specs import GpuSpec, ModelSpec
from ..units import GIB
from .stages import PipelineRanks, heaviest, layers_in_flight, pick, pipeline_ranks

__all__ = ["MemoryBreakdown", "activation_bytes_per_layer", "layers_in_flight", "rank_params", "parameters_per_gpu",
           "memory_per_rank", "memory_breakdown"]


@dataclass(frozen=True)
class MemoryBreakdown:
    """GiB per GPU (arrays over layouts, or over (rank, layout))."""

    weights: np.ndarray
    gradients: np.ndarray
    optimizer: np.ndarray
    activations: np.ndarray
    other: np.ndarray

    @property
    def total(self) -> np.ndarray:
        return self.weights + self.gradients + self.optimizer + self.activations + self.other


def activation_bytes_per_layer(model: ModelSpec, layouts) -> tuple[np.ndarray, np.ndarray]:
    """Stored activations of one layer for one micro-batch on one GPU [bytes], and those of the
    layer rebuilt during full recomputation."""
    t = layouts.tp.astype(float)
    sp = layouts.sequence_parallel == 1
    s, h, f, kv, a = model.seq_len, model.hidden, model.ffn, model.kv_hidden, model.heads
    sb = s * layouts.micro_batch.astype(float)
    # Outside the tensor-parallel region: 2 LN inputs (4), QKV and MLP inputs (4), 2 dropout masks (2).
    replicated = 10.0 * sb * h
    replicated = np.where(sp, replicated / t, replicated)
    mlp = (6.0 if model.ffn_act == "swiglu" else 4.0) * sb * f
    # Q, K, V, attention-output input, MLP intermediates: split over tp.
    tp_region = (4.0 * sb * h + 4.0 * sb * kv + mlp) / t
    scores = 5.0 * a * s * sb / t  # softmax output, dropout mask and output (standard attention only)
    keep_scores = (layouts.recompute == RECOMPUTE_NONE) & (model.training.attention == "standard")
    per_layer = replicated + tp_region + np.where(keep_scores, scores, 0.0)
    checkpoint = np.where(sp, 2.0 * sb * h / t, 2.0 * sb * h)
    # The layer rebuilt during full recomputation stores everything, scores included.
    rebuilt = replicated + tp_region + (scores if model.training.attention == "standard" else 0.0)
    return np.where(layouts.recompute == RECOMPUTE_FULL, checkpoint, per_layer), rebuilt


def rank_params(model: ModelSpec, layouts, rank=0, ranks: PipelineRanks | None = None) -> np.ndarray:
    """Unsharded parameters per GPU of rank r. The word embedding and the output layer are
    vocab-parallel (/tp); a learned position embedding is replicated. Megatron keeps a copy of tied
    word embeddings on the last rank to compute the logits (one matrix when a rank holds both)."""
    ranks = ranks or pipeline_ranks(model, layouts, rank)
    word = model.vocab * model.hidden
    position = model.embedding_params() - word
    output = model.output_params() or np.where(ranks.first, 0, word)
    held = ranks.layers * model.layer_params() + ranks.first * word + ranks.last * output
    return held / layouts.tp.astype(float) + ranks.first * position


def parameters_per_gpu(model: ModelSpec, layouts, ranks: PipelineRanks | None = None) -> np.ndarray:
    """Unsharded parameters of the rank holding the most (before ZeRO sharding)."""
    return rank_params(model, layouts, ranks=ranks or pipeline_ranks(model, layouts)).max(axis=0)


def zero3_transient_params(model: ModelSpec, layouts, stack) -> tuple[np.ndarray, np.ndarray]:
    """Unsharded parameters ZeRO-3 holds at once per GPU, and unsharded gradients awaiting their
    reduce-scatter, by the stack's gathering granularity.
    - layer (PyTorch FSDP, one block per unit): the units in flight (the rate limiter keeps two
      all-gathers in flight, Zhao et al. 2023 Sec. 4.4) and one unit's gradients;
    - module (DeepSpeed stage 3): the largest weight matrix in flight plus the prefetch bucket
      (stage3_prefetch_bucket_size), and one reduce bucket of gradients (reduce_bucket_size),
      never more than a layer (Rajbhandari et al. 2020 Sec. 5.3; DeepSpeed ZeRO config docs)."""
    t = layouts.tp.astype(float)
    layer = model.layer_params() / t
    if stack.zero3_gather == "layer":
        return stack.zero3_units_in_flight * layer, layer
    h, f = model.hidden, model.ffn
    up = (2 * f if model.ffn_act == "swiglu" else f) * h
    largest = max(up, h * (h + 2 * model.kv_hidden)) / t
    gathered = np.minimum(stack.zero3_units_in_flight * largest + stack.zero3_prefetch_params, layer)
    bucket = np.minimum(stack.zero3_reduce_bucket_params or layer, layer)
    return gathered, bucket * np.ones_like(t)


def memory_per_rank(model: ModelSpec, gpu: GpuSpec, layouts, ranks: PipelineRanks) -> MemoryBreakdown:
    """The breakdown of each rank of `ranks` ((k, n) arrays)."""
    prec = precision(model.training.precision)
    t = layouts.tp.astype(float)
    dp = layouts.dp.astype(float)
    z = layouts.zero
    params = rank_params(model, layouts, ranks=ranks)
    weights = params * prec.weight_bytes / np.where(z >= 3, dp, 1.0)
    grads = params * prec.grad_bytes / np.where(z >= 2, dp, 1.0)
    optim = params * prec.optimizer_state_bytes / np.where(z >= 1, dp, 1.0)
    gathered, bucket = zero3_transient_params(model, layouts, model.training.stack)
    weights = weights + np.where(z >= 3, gathered * prec.weight_bytes, 0.0)
    grads = grads + np.where(z >= 3, bucket * prec.grad_bytes, 0.0)

    stored, rebuilt = activation_bytes_per_layer(model, layouts)
    acts = stored * layers_in_flight(model, layouts, ranks.rank, ranks.layers)
    # Full recomputation rebuilds one layer's activations at a time during backward.
    acts = acts + np.where(layouts.recompute == RECOMPUTE_FULL, rebuilt, 0.0)

    # The last rank also holds the logits in 16 bits plus their fp32 copy inside the
    # vocab-parallel cross-entropy.
    logits = (prec.activation_bytes + FP32_BYTES) * model.seq_len * layouts.micro_batch * model.vocab / t
    other = gpu.memory_reserve_gib * GIB + np.where(ranks.last, logits, 0.0)
    return MemoryBreakdown(weights / GIB, grads / GIB, optim / GIB, acts / GIB, other / GIB)


def memory_breakdown(model: ModelSpec, gpu: GpuSpec, layouts, ranks: PipelineRanks | None = None) -> MemoryBreakdown:
    """The breakdown of each layout's heaviest rank among `ranks` (default: the first and the
    last, which bound the others; see planner/costs/stages.py)."""
    per_rank = memory_per_rank(model, gpu, layouts, ranks or pipeline_ranks(model, layouts))
    index = heaviest(per_rank.total)
    return MemoryBreakdown(*(pick(getattr(per_rank, f), index)
                             for f in ("weights", "gradients", "optimizer", "activations", "other")))
