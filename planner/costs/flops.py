"""FLOP counts of a decoder-only transformer, per sequence of `seq_len` tokens.

Source: Narayanan et al. 2021 (SC'21, "Efficient Large-Scale Language Model Training on GPU
Clusters Using Megatron-LM"), Sec. 5.1 and Korthikanti et al. 2022 (arXiv:2205.05198) Eq. 7:
model FLOPs = 72 B s l h^2 (1 + s/(6h) + V/(12 h l)) for GPT (ffn = 4h, kv = h). The per-GEMM
terms below reduce to that; they generalise it to GQA (kv < h) and SwiGLU (three MLP matrices).
"""
from __future__ import annotations

from planner.specs.layers import attention_core_flops_per_seq, gemm_flops_per_token, layer_kinds
from planner.specs import ModelSpec


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


def model_flops_per_seq(model: ModelSpec) -> float:
    """Model FLOPs (forward + backward = 3 x forward, no recomputation) of one sequence. A
    mixture-of-experts layer counts the parameters a token passes through: its top_k routed
    experts, the shared experts and the router (Megatron-LM's num_floating_point_operations); MLA
    counts its down and up projections and the attention core over qk_dim + v_dim."""
    s = model.seq_len
    fwd = sum(k.count * s * gemm_flops_per_token(k) for k in layer_kinds(model))
    fwd += model.layers * layer_attention_flops_per_seq(model) + s * logits_flops_per_token(model)
    return 3.0 * fwd


def model_flops_per_step(model: ModelSpec) -> float:
    return model.training.global_batch * model_flops_per_seq(model)
