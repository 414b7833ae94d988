"""Memory per GPU on the most loaded GPU: weights, gradients, optimizer states, activations, other.

Sources:
- ZeRO-3 also holds two gathered layers and one layer of unsharded gradients (see _rank_memory).
- Mixed-precision Adam keeps 2 bytes of bf16/fp16 weights, 4 bytes of fp32 gradients (Megatron's
  main_grad) and 12 bytes of fp32 master weights + two moments per parameter: 18 bytes, which
  reproduces Korthikanti et al. 2022 Fig. 1 exactly. ZeRO stages shard them over dp (Rajbhandari
  et al. 2020, Sec. 5: stage 1 optimizer states, 2 + gradients, 3 + parameters).
- Activations per layer (Korthikanti et al. 2022, Eq. 2-6, Table 2): s b h (10 + 24/t + 5 a s/(h t))
  with tp, s b h (34/t + 5 a s/(h t)) with tp + sp, the 5as/h term dropped by selective
  recomputation, 2 s b h (/t with sp) with full recomputation. Generalised here to GQA and SwiGLU
  by counting the stored tensors of Sec. 4.1 one by one.
- In-flight micro-batches of the first stage: p for 1F1B (Narayanan et al. 2021 Sec. 2.2), and
  L (1 + (p-1)/(p v)) layers' worth for the interleaved schedule (Korthikanti et al. 2022 Sec. 4.2.3).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..space import RECOMPUTE_FULL, RECOMPUTE_NONE, Layouts
from ..specs import GpuSpec, ModelSpec

GIB = 2.0**30
WEIGHT_BYTES, GRAD_BYTES, OPTIMIZER_BYTES = 2, 4, 12


@dataclass(frozen=True)
class MemoryBreakdown:
    """GiB per GPU on the most loaded pipeline rank (arrays over layouts)."""

    weights: np.ndarray
    gradients: np.ndarray
    optimizer: np.ndarray
    activations: np.ndarray
    other: np.ndarray

    @property
    def total(self) -> np.ndarray:
        return self.weights + self.gradients + self.optimizer + self.activations + self.other


def layers_per_rank(model: ModelSpec, layouts: Layouts) -> tuple[np.ndarray, np.ndarray]:
    """(first/heaviest rank, last rank) layer counts; an uneven split puts the extra layers first."""
    p = layouts.pp
    return -(-model.layers // p), model.layers // p


def activation_bytes_per_layer(model: ModelSpec, layouts: Layouts) -> np.ndarray:
    """Stored activations of one layer for one micro-batch on one GPU [bytes]."""
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


def layers_in_flight(model: ModelSpec, layouts: Layouts, last_rank: bool = False) -> np.ndarray:
    """Layer-activations held at the peak by the first (or the last) pipeline rank. Megatron's
    warm-up runs p - r - 1 micro-batches ahead on rank r (1F1B), and 2(p - r - 1) + (v - 1) p
    chunks ahead with interleaving; one more is in flight."""
    p, v, m = layouts.pp, layouts.vpp, layouts.num_microbatches
    first, last = layers_per_rank(model, layouts)
    chunk_layers = model.layers / (p * v)
    if last_rank:
        one_f_one_b = last * np.minimum(m, 1)
        interleaved = chunk_layers * np.minimum(m * v, (v - 1) * p + 1)
    else:
        one_f_one_b = first * np.minimum(m, p)
        interleaved = chunk_layers * np.minimum(m * v, v * p + p - 1)
    return np.where(v > 1, interleaved, one_f_one_b)


def _rank_params(model: ModelSpec, layouts: Layouts) -> tuple[np.ndarray, np.ndarray]:
    """Unsharded parameters per GPU of the first and of the last pipeline rank. The word embedding
    and the output layer are vocab-parallel (/tp); a learned position embedding is replicated.
    Megatron keeps a copy of tied word embeddings on the last stage to compute the logits."""
    first, last = layers_per_rank(model, layouts)
    t = layouts.tp.astype(float)
    lp = model.layer_params()
    word = model.vocab * model.hidden
    position = model.embedding_params() - word
    first_p = (first * lp + word) / t + position
    last_p = (last * lp + (model.output_params() or word)) / t
    single = (model.layers * lp + word + model.output_params()) / t + position
    return np.where(layouts.pp == 1, single, first_p), np.where(layouts.pp == 1, single, last_p)


def parameters_per_gpu(model: ModelSpec, layouts: Layouts) -> np.ndarray:
    """Unsharded parameters of the rank holding the most (before ZeRO sharding)."""
    first_p, last_p = _rank_params(model, layouts)
    return np.maximum(first_p, last_p)


def _rank_memory(model: ModelSpec, gpu: GpuSpec, layouts: Layouts, params: np.ndarray, last_rank: bool) -> MemoryBreakdown:
    t = layouts.tp.astype(float)
    dp = layouts.dp.astype(float)
    z = layouts.zero
    weights = params * WEIGHT_BYTES / np.where(z >= 3, dp, 1.0)
    grads = params * GRAD_BYTES / np.where(z >= 2, dp, 1.0)
    optim = params * OPTIMIZER_BYTES / np.where(z >= 1, dp, 1.0)
    # ZeRO-3 gathers whole layers to use them: the layer at work and the one being prefetched
    # (the rate limiter of PyTorch FSDP, Zhao et al. 2023, VLDB, keeps two all-gathers in flight), plus one layer's
    # unsharded gradients before they are reduce-scattered (Rajbhandari et al. 2020 Sec. 5.3).
    layer = model.layer_params() / t
    weights = weights + np.where(z >= 3, 2 * layer * WEIGHT_BYTES, 0.0)
    grads = grads + np.where(z >= 3, layer * GRAD_BYTES, 0.0)

    stored, rebuilt = activation_bytes_per_layer(model, layouts)
    acts = stored * layers_in_flight(model, layouts, last_rank=last_rank)
    # Full recomputation rebuilds one layer's activations at a time during backward.
    acts = acts + np.where(layouts.recompute == RECOMPUTE_FULL, rebuilt, 0.0)

    other = np.full_like(acts, gpu.memory_reserve_gib * GIB)
    if last_rank:
        # Logits in bf16 plus their fp32 copy inside the vocab-parallel cross-entropy.
        other = other + 6.0 * model.seq_len * layouts.micro_batch * model.vocab / t
    return MemoryBreakdown(weights / GIB, grads / GIB, optim / GIB, acts / GIB, other / GIB)


def memory_breakdown(model: ModelSpec, gpu: GpuSpec, layouts: Layouts) -> MemoryBreakdown:
    """The breakdown of whichever of the first and the last pipeline rank needs more memory
    (with pp = 1 they are the same GPU, which holds the activations and the logits)."""
    first_p, last_p = _rank_params(model, layouts)
    single = layouts.pp == 1
    first = _rank_memory(model, gpu, layouts, first_p, last_rank=False)
    last = _rank_memory(model, gpu, layouts, last_p, last_rank=True)
    if np.any(single):
        # pp = 1: one GPU holds the first rank's activations and the last rank's logits.
        first = MemoryBreakdown(first.weights, first.gradients, first.optimizer, first.activations,
                                np.where(single, last.other, first.other))
    pick = first.total >= last.total
    return MemoryBreakdown(*(np.where(pick, getattr(first, f), getattr(last, f))
                             for f in ("weights", "gradients", "optimizer", "activations", "other")))
