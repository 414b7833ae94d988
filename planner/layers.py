"""What a transformer layer is made of: its weight matrices, how tensor and expert parallelism split
them, and the mix of dense and mixture-of-experts layers of a model.

Pure functions of a model spec (read by attribute, so that planner.specs can use them without an
import cycle). Splits follow Megatron-LM (Shoeybi et al. 2019 Sec. 3): QKV and MLP-up are
column-parallel (output split over tp), attention-out and MLP-down row-parallel (input split).
Routed experts are split the same way over the expert-tensor-parallel group (etp) and held by one
expert-parallel rank; the router is replicated (Megatron-Core MoE). Multi-head latent attention
(DeepSeek-V2 Sec. 2.1): the down projections are replicated and the up projections
column-parallel, as in Megatron-Core's MLASelfAttention.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Split = Literal["col", "row", "none"]


@dataclass(frozen=True)
class Matrix:
    """One weight matrix: `k` inputs, `n` outputs, its tensor-parallel split and whether it has a bias."""

    name: str
    k: int
    n: int
    split: Split
    bias: bool = False

    @property
    def params(self) -> int:
        return self.k * self.n + (self.n if self.bias else 0)


@dataclass(frozen=True)
class AttentionDims:
    """Heads and head widths of the attention core (QK^T over qk_dim, attention-over-V over v_dim)."""

    heads: int
    kv_heads: int
    qk_dim: int
    v_dim: int

    @property
    def q_width(self) -> int:
        return self.heads * self.qk_dim

    @property
    def k_width(self) -> int:
        return self.kv_heads * self.qk_dim

    @property
    def v_width(self) -> int:
        return self.kv_heads * self.v_dim

    @property
    def out_width(self) -> int:
        return self.heads * self.v_dim


def attention_dims(model: Any) -> AttentionDims:
    mla = model.mla
    if mla is not None:
        return AttentionDims(model.heads, model.heads, mla.qk_nope_head_dim + mla.qk_rope_head_dim, mla.v_head_dim)
    return AttentionDims(model.heads, model.num_kv_heads, model.head_width, model.head_width)


def attention_matrices(model: Any) -> tuple[Matrix, ...]:
    h, d = model.hidden, attention_dims(model)
    mla = model.mla
    if mla is None:
        # GPT-style biases on QKV and the output, as Megatron's default (add_bias_linear).
        return (Matrix("qkv", h, d.q_width + d.k_width + d.v_width, "col", bias=True),
                Matrix("attn_out", d.out_width, h, "row", bias=True))
    q = ((Matrix("q_down", h, mla.q_lora_rank, "none"), Matrix("q_up", mla.q_lora_rank, d.q_width, "col"))
         if mla.q_lora_rank else (Matrix("q", h, d.q_width, "col"),))
    return (*q,
            Matrix("kv_down", h, mla.kv_lora_rank + mla.qk_rope_head_dim, "none"),
            Matrix("kv_up", mla.kv_lora_rank, model.heads * (mla.qk_nope_head_dim + mla.v_head_dim), "col"),
            Matrix("attn_out", d.out_width, h, "row"))


def mlp_matrices(model: Any, width: int, name: str = "mlp", bias: bool | None = None) -> tuple[Matrix, ...]:
    """A GeLU MLP (up, down) or a SwiGLU one (gate and up fused, down) of FFN width `width`."""
    h = model.hidden
    if model.ffn_act == "swiglu":
        return (Matrix(f"{name}_up", h, 2 * width, "col", bias=bool(bias)), Matrix(f"{name}_down", width, h, "row", bias=bool(bias)))
    b = True if bias is None else bias
    return (Matrix(f"{name}_up", h, width, "col", bias=b), Matrix(f"{name}_down", width, h, "row", bias=b))


@dataclass(frozen=True)
class LayerKind:
    """Layers of one kind: `count` of them, the tensor-parallel matrices (attention, and the dense
    MLP or the shared experts), one routed expert's matrices and the router (MoE only)."""

    name: Literal["dense", "moe"]
    count: int
    tp_matrices: tuple[Matrix, ...]
    expert: tuple[Matrix, ...] = ()
    experts: int = 0
    top_k: int = 0
    router: Matrix | None = None
    norm_params: int = 0

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def tp_params(self) -> int:
        """Parameters split over tp (or replicated: norms, router, MLA down projections)."""
        router = self.router.params if self.router else 0
        return sum(m.params for m in self.tp_matrices) + router + self.norm_params

    @property
    def expert_params(self) -> int:
        """Parameters of all routed experts of one layer (split over ep x etp)."""
        return self.experts * sum(m.params for m in self.expert)

    @property
    def params(self) -> int:
        return self.tp_params + self.expert_params

    @property
    def active_params(self) -> int:
        """Parameters one token passes through: the top_k routed experts, not all."""
        return self.tp_params + self.top_k * sum(m.params for m in self.expert)


def layer_norm_params(model: Any) -> int:
    # two layer norms (scale and bias); MLA also normalises its latents (DeepSeek-V2 Sec. 2.1.2)
    mla = model.mla
    extra = 0 if mla is None else (mla.q_lora_rank or 0) + mla.kv_lora_rank
    return 4 * model.hidden + extra


def layer_kinds(model: Any) -> tuple[LayerKind, ...]:
    """The dense and the MoE layers of a model (kinds with no layer left out)."""
    attn = attention_matrices(model)
    kinds = []
    dense = model.layers - model.moe_layers
    if dense:
        kinds.append(LayerKind("dense", dense, attn + mlp_matrices(model, model.ffn), norm_params=layer_norm_params(model)))
    moe = model.moe
    if moe is not None and model.moe_layers:
        shared = mlp_matrices(model, moe.shared_experts * moe.shared_ffn, "shared", bias=False) if moe.shared_experts else ()
        kinds.append(LayerKind("moe", model.moe_layers, attn + shared, mlp_matrices(model, moe.expert_ffn_hidden, "expert", bias=False),
                               experts=moe.experts, top_k=moe.top_k, router=Matrix("router", model.hidden, moe.experts, "none"),
                               norm_params=layer_norm_params(model)))
    return tuple(kinds)


def gemm_flops_per_token(kind: LayerKind) -> float:
    """Forward FLOPs of a layer's projections per token: 2 x the weights a token passes through."""
    return 2.0 * (kind.active_params - kind.norm_params - sum(m.n for m in kind.tp_matrices if m.bias))


def attention_core_flops_per_seq(model: Any) -> float:
    """Forward FLOPs of QK^T and attention-over-V of one sequence, no causal saving:
    2 s^2 heads (qk_dim + v_dim) (= 4 s^2 h for multi-head attention)."""
    d = attention_dims(model)
    return 2.0 * model.seq_len**2 * d.heads * (d.qk_dim + d.v_dim)
