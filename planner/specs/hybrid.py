"""Hybrid models: a layer pattern of Mamba-2, gated DeltaNet, attention and MLP / MoE layers.

A hybrid model lists its layers as one character each (`ModelSpec.layer_pattern`), as Nemotron-H's
`hybrid_override_pattern` and Megatron-LM's --hybrid-layer-pattern (formerly
--hybrid-override-pattern; megatron/core/models/hybrid/hybrid_layer_allocation.py `Symbols`) do:
  M  a Mamba-2 mixer layer (Dao & Gu 2024, "Transformers are SSMs", SSD; Megatron-Core MambaMixer)
  D  a gated DeltaNet layer (Yang et al. 2024, "Gated Delta Networks", ICLR 2025; Megatron-Core
     GatedDeltaNet, whose Megatron symbol is G: D there is DeepSeek sparse attention)
  *  a self-attention layer
  -  an MLP layer, or a MoE layer when the model has a moe: section (Megatron's E)
Each character is one layer with its own pre-norm and residual: Nemotron-H-56B's 118 characters
are its 118 layers. A model whose HF layer is a mixer and an FFN together (Qwen3-Next: 48 layers,
`layer_types`) is written two characters a layer: 'D-D-D-*-' repeated, 96 pattern layers.

Parameters, tensor-parallel splits (Megatron-Core, megatron/core/ssm/mamba_mixer.py and
megatron/core/ssm/gated_delta_net/): the input projection is one column-parallel GEMM over the
heads (Mamba: z, x, B, C, dt; DeltaNet: q, k, v, z, beta, alpha), the output projection
row-parallel; conv1d, A, D, dt bias and the gated norm are per channel or head, split with them.
Megatron asserts nheads % tp == 0 and ngroups % tp == 0 (Mamba), heads % tp == 0 (DeltaNet).
"""
from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from planner.specs.base import Spec

# pattern characters (module docstring)
MAMBA, DELTANET, ATTENTION, MLP = "M", "D", "*", "-"
PATTERN_CHARS = (MAMBA, DELTANET, ATTENTION, MLP)


class MambaSpec(Spec):
    """Mamba-2 mixers (HF Nemotron-H mamba_num_heads, mamba_head_dim, ssm_state_size, n_groups,
    conv_kernel, chunk_size; Megatron --mamba-num-heads, --mamba-head-dim, --mamba-state-dim,
    --mamba-num-groups)."""

    heads: int = Field(gt=0, le=100_000, description="SSM heads (HF mamba_num_heads)")
    head_dim: int = Field(gt=0, le=100_000, description="channels per head P (HF mamba_head_dim); d_inner = heads x head_dim")
    state_dim: int = Field(gt=0, le=100_000, description="SSM state size N (HF ssm_state_size)")
    groups: int = Field(default=1, gt=0, le=100_000, description="B/C groups G shared by heads (HF n_groups)")
    conv_kernel: int = Field(default=4, gt=0, le=1024, description="causal conv1d width (HF conv_kernel)")
    chunk_size: int = Field(default=128, gt=0, le=100_000, description=(
        "SSD chunk length Q of the chunked scan (HF chunk_size; Megatron-Core MambaMixer chunk_size=128)"))

    @model_validator(mode="after")
    def _groups_divide(self) -> "MambaSpec":
        if self.heads % self.groups:
            raise ValueError(f"mamba.groups ({self.groups}) must divide mamba.heads ({self.heads}) (Megatron-Core MambaMixer)")
        return self

    @property
    def d_inner(self) -> int:
        return self.heads * self.head_dim

    @property
    def conv_channels(self) -> int:
        """x, B and C pass the conv1d: d_inner + 2 G N channels."""
        return self.d_inner + 2 * self.groups * self.state_dim

    @property
    def in_proj_width(self) -> int:
        """z, x, B, C, dt: 2 d_inner + 2 G N + H (mamba_mixer.py in_proj)."""
        return 2 * self.d_inner + 2 * self.groups * self.state_dim + self.heads

    @property
    def other_params(self) -> int:
        """conv1d weight and bias (conv_bias), A_log, D and dt_bias per head, the gated RMSNorm's scale."""
        return self.conv_channels * (self.conv_kernel + 1) + 3 * self.heads + self.d_inner

    def scan_flops_per_token(self) -> float:
        """Forward FLOPs of the chunked SSD scan per token (Dao & Gu 2024 Sec. 6, the four steps of the
        block decomposition with chunk Q), counting each Q x Q block whole as the kernels compute it:
        C B^T per group (G Q N multiply-adds a token), the masked scores times X per head (H Q P),
        the chunk states B^T X and the states' output C h (H N P each): 2 (G Q N + H Q P + 2 H N P)."""
        g, q, n, h, p = self.groups, self.chunk_size, self.state_dim, self.heads, self.head_dim
        return 2.0 * (g * q * n + h * q * p + 2 * h * n * p)


class DeltaNetSpec(Spec):
    """Gated DeltaNet mixers (HF Qwen3-Next linear_num_key_heads, linear_num_value_heads,
    linear_key_head_dim, linear_value_head_dim, linear_conv_kernel_dim; Megatron --linear-*)."""

    key_heads: int = Field(gt=0, le=100_000, description="query/key heads (HF linear_num_key_heads)")
    value_heads: int = Field(gt=0, le=100_000, description="value heads (HF linear_num_value_heads)")
    key_head_dim: int = Field(gt=0, le=100_000, description="HF linear_key_head_dim")
    value_head_dim: int = Field(gt=0, le=100_000, description="HF linear_value_head_dim")
    conv_kernel: int = Field(default=4, gt=0, le=1024, description="causal conv1d width (HF linear_conv_kernel_dim)")
    chunk_size: int = Field(default=64, gt=0, le=100_000, description=(
        "chunk length C of the chunked delta rule (flash-linear-attention chunk_gated_delta_rule: 64)"))

    @model_validator(mode="after")
    def _heads_divide(self) -> "DeltaNetSpec":
        if self.value_heads % self.key_heads:
            raise ValueError(f"deltanet.key_heads ({self.key_heads}) must divide deltanet.value_heads ({self.value_heads})")
        return self

    @property
    def qk_dim(self) -> int:
        return self.key_heads * self.key_head_dim

    @property
    def v_dim(self) -> int:
        return self.value_heads * self.value_head_dim

    @property
    def in_proj_width(self) -> int:
        """q, k, v, the output gate z, beta and alpha: 2 qk_dim + 2 v_dim + 2 value_heads (gdn.py in_proj)."""
        return 2 * self.qk_dim + 2 * self.v_dim + 2 * self.value_heads

    @property
    def other_params(self) -> int:
        """conv1d over q, k and v (no bias: HF Qwen3NextGatedDeltaNet), A_log and dt_bias per value
        head, the gated RMSNorm's scale over one value head."""
        return (2 * self.qk_dim + self.v_dim) * self.conv_kernel + 2 * self.value_heads + self.value_head_dim

    def scan_flops_per_token(self) -> float:
        """Forward FLOPs of the chunkwise gated delta rule per token (Yang et al. 2024 Sec. 3, the WY
        form of DeltaNet's chunkwise algorithm, keys repeated to every value head): per value head,
        within a chunk K K^T, Q K^T and the WY factor times K (C d_k each), times V and the scores
        times the pseudo-values (C d_v each); across chunks W S, Q S and the state update K^T U
        (d_k d_v each): 2 Hv (C (3 d_k + 2 d_v) + 3 d_k d_v). The triangular solve (C^2 / 3 per
        token and head, under 2 % at C = 64, d = 128) is left out."""
        c, dk, dv = self.chunk_size, self.key_head_dim, self.value_head_dim
        return 2.0 * self.value_heads * (c * (3 * dk + 2 * dv) + 3 * dk * dv)


def pattern_error(model: Any) -> str | None:
    """What is wrong with a model's layer pattern and its sections, or None."""
    pattern = model.layer_pattern
    if pattern is None:
        for name in ("mamba", "deltanet"):
            if getattr(model, name) is not None:
                return f"a {name}: section needs a layer_pattern (which layers are {name} layers)"
        return None
    if "|" in pattern:
        return ("layer_pattern: '|' (Megatron's pipeline stage boundaries) is not a layer: the planner chooses "
                "the stage split itself; give the pattern without it")
    bad = sorted(set(pattern) - set(PATTERN_CHARS))
    if bad:
        return (f"layer_pattern has {', '.join(repr(c) for c in bad)}: expected one character a layer, "
                "M (Mamba-2), D (gated DeltaNet), * (attention), - (MLP, or MoE with a moe: section)")
    if len(pattern) != model.layers:
        return f"layer_pattern has {len(pattern)} layers, layers is {model.layers}: give one character a layer"
    for char, name in ((MAMBA, "mamba"), (DELTANET, "deltanet")):
        if (char in pattern) != (getattr(model, name) is not None):
            return (f"layer_pattern has {char} layers but no {name}: section" if char in pattern else
                    f"a {name}: section needs {char} layers in layer_pattern")
    if model.moe is not None and (model.moe.dense_layers or model.moe.layer_every != 1):
        return "with a layer_pattern every '-' layer is MoE: leave moe.dense_layers and moe.layer_every out"
    unsupported = [k for k in ("mla", "sliding_window") if getattr(model, k) is not None]
    if unsupported:
        return f"{unsupported[0]} is not supported with a layer_pattern (hybrid models here use plain attention)"
    if model.mtp_layers:
        return "mtp_layers is not supported with a layer_pattern"
    return None


def pattern_layers_before(model: Any, chars: str, n):
    """Layers among the first n of the pattern whose character is in `chars` (n an int or an array)."""
    import numpy as np
    hits = np.concatenate([[0], np.cumsum([c in chars for c in model.layer_pattern])])
    return hits[np.clip(np.asarray(n), 0, len(model.layer_pattern))]
