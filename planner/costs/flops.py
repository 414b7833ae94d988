"""FLOP counts of a decoder-only transformer, per sequence of `seq_len` tokens.

Source: Narayanan et al. 2021 (SC'21, "Efficient Large-Scale Language Model Training on GPU
Clusters Using Megatron-LM"), Sec. 5.1 and Korthikanti et al. 2022 (arXiv:2205.05198) Eq. 7:
model FLOPs = 72 B s l h^2 (1 + s/(6h) + V/(12 h l)) for GPT (ffn = 4h, kv = h). The per-GEMM
terms below reduce to that; they generalise it to GQA (kv < h) and SwiGLU (three MLP matrices).
"""
from __future__ import annotations

from planner.specs.layers import LayerKind, attention_core_flops_per_seq, gemm_flops_per_token, layer_kinds
from planner.specs import ModelSpec
from planner.specs.hybrid import ATTENTION, DELTANET, MAMBA


def layer_gemm_flops_per_token(model: ModelSpec) -> float:
    """Forward FLOPs of the dense projections of one dense layer, per token: 2 x (weights)."""
    h, f, kv = model.hidden, model.ffn, model.kv_hidden
    mlp_mats = 3 if model.ffn_act == "swiglu" else 2
    return 2.0 * (h * (h + 2 * kv) + h * h + mlp_mats * h * f)


def layer_attention_flops_per_seq(model: ModelSpec) -> float:
    """Forward FLOPs of QK^T and attention-over-V for one sequence (no causal saving): 4 s^2 h
    for multi-head attention (planner/specs/layers.py: 2 s^2 heads (qk_dim + v_dim) in general). With
    sliding-window layers, the mean layer's: scaled by their causal pairs, s w - w (w - 1) / 2
    instead of s (s + 1) / 2 (planner/specs/layers.py window_work_fraction)."""
    return attention_core_flops_per_seq(model)


def logits_flops_per_token(model: ModelSpec) -> float:
    """Forward FLOPs of the output projection per token: 2 h V."""
    return 2.0 * model.hidden * model.vocab


def causal_attention_flops_per_seq(model: ModelSpec) -> float:
    """Forward FLOPs of QK^T and attention-over-V of one sequence of the mean layer under a causal
    mask: half of `layer_attention_flops_per_seq`'s square, 2 s^2 h for multi-head attention (the
    s / 2 pairs of the diagonal left out, as Megatron-LM's num_floating_point_operations halves it).
    What a causal kernel must compute: FlashAttention skips the masked blocks (planner/costs/compute.py
    prices half the square, and a window's blocks at least the pairs its window keeps)."""
    return 0.5 * layer_attention_flops_per_seq(model)


def dropped_expert_flops_per_token(model: ModelSpec, kind: LayerKind) -> float:
    """Forward FLOPs per token of the routed-expert GEMMs that a capacity factor below 1 drops: an
    expert takes at most capacity_factor x its even share of the routed copies (Megatron-Core
    --moe-expert-capacity-factor, drop-and-pad), so at least 1 - capacity_factor of them pass no
    expert (Fedus et al. 2021, Switch Transformer Sec. 2.2). Dropped tokens are not model FLOPs."""
    moe = model.moe
    if not kind.is_moe or moe.capacity_factor is None or moe.capacity_factor >= 1:
        return 0.0
    per_copy = 2.0 * sum(m.params for m in kind.expert)
    return kind.top_k * per_copy * (1.0 - moe.capacity_factor)


def model_flops_per_seq(model: ModelSpec) -> float:
    """Model FLOPs (forward + backward = 3 x forward, no recomputation) of one sequence: the work
    the model needs, which no step can do faster than at the GPUs' peak. A mixture-of-experts layer
    counts the parameters a token passes through: its top_k routed experts (less those a capacity
    factor below 1 drops), the shared experts and the router (Megatron-LM's
    num_floating_point_operations); MLA counts its down and up projections and the attention core
    over qk_dim + v_dim. The attention core counts the causal half only
    (`causal_attention_flops_per_seq`), not the s^2 of Korthikanti et al.'s Eq. 7
    (`published_model_flops_per_seq`): with the whole square, a long sequence's MFU passed 100 %."""
    s = model.seq_len
    fwd = sum(k.count * s * (gemm_flops_per_token(k) - dropped_expert_flops_per_token(model, k))
              for k in layer_kinds(model))
    fwd += mixer_layers(model) * causal_attention_flops_per_seq(model) + s * logits_flops_per_token(model)
    return 3.0 * (fwd + s * scan_flops_per_token(model))


def published_model_flops_per_seq(model: ModelSpec) -> float:
    """Model FLOPs as the published tables count them (Korthikanti et al. 2022 Eq. 7, Narayanan et al.
    2021, PaLM's MFU): the attention core over the whole s^2 square and every routed copy, dropped or
    not. For comparing with a published MFU; planner outputs use `model_flops_per_seq`."""
    s = model.seq_len
    fwd = sum(k.count * s * gemm_flops_per_token(k) for k in layer_kinds(model))
    fwd += mixer_layers(model) * layer_attention_flops_per_seq(model) + s * logits_flops_per_token(model)
    return 3.0 * (fwd + s * scan_flops_per_token(model))


def mixer_layers(model: ModelSpec) -> int:
    """Layers with an attention core: all of a transformer, a hybrid pattern's * layers."""
    return model.layers if model.layer_pattern is None else model.layer_pattern.count(ATTENTION)


def scan_flops_per_token(model: ModelSpec) -> float:
    """Forward FLOPs per token of a hybrid model's chunked scans, summed over its Mamba-2 and gated
    DeltaNet layers (planner/specs/hybrid.py); 0 for a transformer."""
    if model.layer_pattern is None:
        return 0.0
    out = 0.0
    for char, mixer in ((MAMBA, model.mamba), (DELTANET, model.deltanet)):
        if mixer is not None:
            out += model.layer_pattern.count(char) * mixer.scan_flops_per_token()
    return out


def model_flops_per_step(model: ModelSpec) -> float:
    return model.training.global_batch * model_flops_per_seq(model)


def published_model_flops_per_step(model: ModelSpec) -> float:
    return model.training.global_batch * published_model_flops_per_seq(model)
