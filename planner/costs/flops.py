"""FLOP counts of a decoder-only transformer, per sequence of `seq_len` tokens.

Source: Narayanan et al. 2021 (SC'21, "Efficient Large-Scale Language Model Training on GPU
Clusters Using Megatron-LM"), Sec. 5.1 and Korthikanti et al. 2022 (arXiv:2205.05198) Eq. 7:
model FLOPs = 72 B s l h^2 (1 + s/(6h) + V/(12 h l)) for GPT (ffn = 4h, kv = h). The per-GEMM
terms below reduce to that; they generalise it to GQA (kv < h) and SwiGLU (three MLP matrices).
"""
from __future__ import annotations

from ..specs import ModelSpec


def layer_gemm_flops_per_token(model: ModelSpec) -> float:
    """Forward FLOPs of the dense projections of one layer, per token: 2 x (weights)."""
    h, f, kv = model.hidden, model.ffn, model.kv_hidden
    mlp_mats = 3 if model.ffn_act == "swiglu" else 2
    return 2.0 * (h * (h + 2 * kv) + h * h + mlp_mats * h * f)


def layer_attention_flops_per_seq(model: ModelSpec) -> float:
    """Forward FLOPs of QK^T and attention-over-V for one sequence (no causal saving): 4 s^2 h."""
    return 4.0 * model.seq_len**2 * model.hidden


def logits_flops_per_token(model: ModelSpec) -> float:
    """Forward FLOPs of the output projection per token: 2 h V."""
    return 2.0 * model.hidden * model.vocab


def model_flops_per_seq(model: ModelSpec) -> float:
    """Model FLOPs (forward + backward = 3 x forward, no recomputation) of one sequence."""
    s = model.seq_len
    fwd = model.layers * (s * layer_gemm_flops_per_token(model) + layer_attention_flops_per_seq(model))
    fwd += s * logits_flops_per_token(model)
    return 3.0 * fwd


def model_flops_per_step(model: ModelSpec) -> float:
    return model.training.global_batch * model_flops_per_seq(model)
