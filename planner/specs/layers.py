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

from planner.specs.hybrid import ATTENTION, DELTANET, MAMBA, MLP

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

    name: Literal["dense", "moe", "mamba", "deltanet", "attention", "mlp"]
    count: int
    tp_matrices: tuple[Matrix, ...]
    expert: tuple[Matrix, ...] = ()
    experts: int = 0
    top_k: int = 0
    router: Matrix | None = None
    norm_params: int = 0
    # Hybrid models (ModelSpec.layer_pattern): the token mixer of this kind ("attention", "mamba",
    # "deltanet", or "none" for an MLP / MoE layer), the pattern character(s) it stands for, and
    # the mixer's parameters outside its GEMMs (conv1d, A, D, dt bias, gated norm): split over tp.
    mixer: Literal["attention", "mamba", "deltanet", "none"] = "attention"
    chars: str = ""
    mixer_params: int = 0

    @property
    def sublayer(self) -> bool:
        """A layer of a hybrid pattern: one norm, one mixer or one MLP, one residual (Megatron's
        MambaLayer / TransformerLayer with an identity half), not attention and MLP together."""
        return self.chars != ""

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def mlp_width(self) -> int:
        """The FFN width of the tp-split MLP (the dense MLP's, or the shared experts' together): the
        down projection's input; 0 without one (a MoE layer without shared experts, a mixer layer)."""
        return next((m.k for m in self.tp_matrices if m.name in ("mlp_down", "shared_down")), 0)

    @property
    def tp_params(self) -> int:
        """Parameters split over tp (or replicated: norms, router, MLA down projections)."""
        router = self.router.params if self.router else 0
        return sum(m.params for m in self.tp_matrices) + router + self.norm_params + self.mixer_params

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
    """The dense and the MoE layers of a model (kinds with no layer left out); of a hybrid model,
    one kind per character of its layer pattern (hybrid_kinds)."""
    if model.layer_pattern is not None:
        return hybrid_kinds(model)
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
    return 2.0 * (kind.active_params - kind.norm_params - kind.mixer_params - sum(m.n for m in kind.tp_matrices if m.bias))


def attention_core_flops_per_seq(model: Any, windowed: bool = True) -> float:
    """Forward FLOPs of QK^T and attention-over-V of one sequence of the model's mean layer, no causal
    saving: 2 s^2 heads (qk_dim + v_dim) (= 4 s^2 h for multi-head attention), times the share of
    full causal attention's work its sliding windows leave (`window_work_fraction`; 1 without, or
    with `windowed` false: what a kernel computing every score does)."""
    d = attention_dims(model)
    full = 2.0 * model.seq_len**2 * d.heads * (d.qk_dim + d.v_dim)
    return full * window_work_fraction(model) if windowed else full


# Sliding-window (local) attention: a query attends to itself and the w - 1 keys before it (HF
# `sliding_window` w: Mistral, Gemma 2/3, GPT-OSS; Megatron-Core --window-size w-1,0). Every n-th
# layer (1-based layer number % n == 0) keeps full attention: Megatron-Core's window_attn_skip_freq
# (megatron/core/transformer/utils.py is_layer_window_attention), HF Gemma 3's sliding_window_pattern.
# Costs take the mean over the layers: exact for a step when every pipeline rank holds the same mix;
# a rank whose share of layers is odd holds one windowed layer more or less than the mean says.

def causal_pairs(seq_len: int, window: int | None = None) -> float:
    """(query, key) pairs of causal attention per head and sequence: the sum over query positions
    i = 1..s of min(i, w) keys = s w - w (w - 1) / 2 with a window w < s, s (s + 1) / 2 without."""
    w = seq_len if window is None else min(window, seq_len)
    return float(seq_len * w - w * (w - 1) // 2)


def windowed_layers(model: Any) -> int:
    """Layers with the sliding window: all, or all but every `full_attention_every`-th."""
    if model.sliding_window is None:
        return 0
    n = model.full_attention_every
    return model.layers - (model.layers // n if n else 0)


def _layer_mean(model: Any, work, cap: float = float("inf")) -> float:
    """Mean over the layers of work(s, window) / work(s, None) (at most `cap`): 1 for a full-attention layer."""
    s, k = model.seq_len, windowed_layers(model)
    if k == 0 or model.sliding_window >= s:
        return 1.0
    ratio = min(cap, work(s, model.sliding_window) / work(s, None))
    return ((model.layers - k) + k * ratio) / model.layers


def window_work_fraction(model: Any) -> float:
    """Mean over the layers of a layer's causal pairs / full causal attention's (1.0 without a window)."""
    return _layer_mean(model, causal_pairs)


# FlashAttention skips a key block only when the window or the causal mask masks all of it; a block
# it touches is computed whole. FA2 runs head dims up to 64 in 128 x 128 tiles (flash_fwd_launch_
# template.h, run_mha_fwd_hdim64: Flash_fwd_kernel_traits<64, 128, 128, ...>); FA3 in 192 x 128.
FLASH_BLOCK_TOKENS = 128


def flash_tiles(seq_len: int, window: int | None = None, block: int = FLASH_BLOCK_TOKENS) -> float:
    """Tiles (query block, key block) a causal flash kernel computes per head and sequence: query
    block i reaches key blocks floor((i B - w + 1) / B) .. i (0 .. i without a window)."""
    import numpy as np  # here: a model file's check loads this module and scores nothing

    i = np.arange(-(-seq_len // block))
    first = 0 if window is None else np.maximum((i * block - window + 1) // block, 0)
    return float(np.sum(i - first + 1))


def flash_work_fraction(model: Any, window_tile_cost: float = 1.0) -> float:
    """Mean over the layers of the flash tiles of a layer / those of full causal attention (1.0
    without a window): time follows the blocks computed (w = 128 at s = 4,096: 63 / 528 tiles,
    about twice the 6.2 % of the pairs), a windowed layer's at `window_tile_cost` times a full
    layer's tile (GpuEfficiency.flash_window_tile_cost), never more than the full layer."""
    return _layer_mean(model, lambda s, w: flash_tiles(s, w) * (1.0 if w is None else window_tile_cost),
                       cap=1.0)


def micro_batch_tokens(model: Any, layouts):
    """Tokens of one micro-batch on one GPU: b s / cp (a context-parallel rank's share of the sequence),
    the rows of its layers' GEMMs before tp or sequence parallelism splits them."""
    return layouts.micro_batch * model.seq_len / layouts.cp.astype(float)


def expert_rows(model: Any, layouts) -> tuple:
    """(rows per local expert, local experts) of a GPU's grouped expert GEMMs per micro-batch.
    The tp*cp*dp GPUs route dp*b*s*top_k token slots; each expert's slots split over its edp
    replicas: b s top_k ep etp / (experts tp cp) rows per expert, times the busiest rank's load
    (dropless), or padded to the capacity (Megatron --moe-pad-expert-input-to-capacity)."""
    moe = model.moe
    ep, etp = layouts.ep.astype(float), layouts.etp.astype(float)
    mean = layouts.micro_batch * model.seq_len * moe.top_k * ep * etp / (moe.experts * layouts.tp * layouts.cp)
    load = moe.capacity_factor if moe.capacity_factor is not None else moe.load_imbalance
    return mean * load, moe.experts / ep


def eager_clamp(model: Any) -> bool:
    """Whether the experts' SwiGLU clamp runs as separate PyTorch ops (swiglu_limit, no op fuser)."""
    return model.swiglu_limit is not None and not model.training.te_op_fuser


def hybrid_kinds(model: Any) -> tuple:
    """One LayerKind per character kind of the pattern, in the order M, D, *, - (those present)."""
    pattern, h = model.layer_pattern, model.hidden
    norm = 2 * h  # one pre-norm (scale and bias, as layer_norm_params counts them)
    kinds = []
    if MAMBA in pattern:
        m = model.mamba
        kinds.append(LayerKind("mamba", pattern.count(MAMBA), (Matrix("ssm_in", h, m.in_proj_width, "col"),
                                                                 Matrix("ssm_out", m.d_inner, h, "row")),
                               norm_params=norm, mixer="mamba", chars=MAMBA, mixer_params=m.other_params))
    if DELTANET in pattern:
        d = model.deltanet
        kinds.append(LayerKind("deltanet", pattern.count(DELTANET), (Matrix("ssm_in", h, d.in_proj_width, "col"),
                                                                       Matrix("ssm_out", d.v_dim, h, "row")),
                               norm_params=norm, mixer="deltanet", chars=DELTANET, mixer_params=d.other_params))
    if ATTENTION in pattern:
        a = attention_dims(model)
        # the output gate (Qwen3-Next, Megatron --attention-output-gate) doubles the query projection
        q = a.q_width * (2 if model.attention_output_gate else 1)
        qk_norm = 2 * a.qk_dim if model.qk_norm else 0
        kinds.append(LayerKind("attention", pattern.count(ATTENTION),
                               (Matrix("qkv", h, q + a.k_width + a.v_width, "col"), Matrix("attn_out", a.out_width, h, "row")),
                               norm_params=norm + qk_norm, mixer="attention", chars=ATTENTION))
    if MLP in pattern:
        count, moe = pattern.count(MLP), model.moe
        if moe is None:
            kinds.append(LayerKind("mlp", count, mlp_matrices(model, model.ffn, bias=False), norm_params=norm,
                                   mixer="none", chars=MLP))
        else:
            shared = mlp_matrices(model, moe.shared_experts * moe.shared_ffn, "shared", bias=False) if moe.shared_experts else ()
            kinds.append(LayerKind("moe", count, shared, mlp_matrices(model, moe.expert_ffn_hidden, "expert", bias=False),
                                   experts=moe.experts, top_k=moe.top_k, router=Matrix("router", h, moe.experts, "none"),
                                   norm_params=norm, mixer="none", chars=MLP))
    return tuple(kinds)
