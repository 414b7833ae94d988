"""The token mixers of a hybrid model's Mamba-2 and gated DeltaNet layers (planner/specs/hybrid.py):
their chunked scan's time, the memory-bound traffic around it, and its context-parallel exchange.

The chunked scans (Mamba-2's SSD, Dao & Gu 2024 Sec. 6-7; the chunkwise gated delta rule, Yang et
al. 2024 Sec. 3) are tiled matrix products within each chunk and a short recurrence over the chunk
states, fused in Triton kernels (mamba_ssm mamba_chunk_scan_combined; flash-linear-attention
chunk_gated_delta_rule): priced like a fused attention kernel, their FLOPs at the 16-bit peak times
the GPU's FlashAttention efficiency, the backward 2.5x the forward (it recomputes the chunk
states, as FlashAttention recomputes the scores). An assumption, not a fit: no hybrid step time
is among the calibration cases.

Context parallelism (Megatron-Core megatron/core/ssm/mamba_context_parallel.py, gdn.py): the
sequence-split input projections are exchanged all-to-all to a head split before the conv1d and
the scan (all_to_all_sp2hp) and back after it (all_to_all_hp2sp), nothing overlapped.
"""
from __future__ import annotations

import numpy as np

from planner.costs.collectives import all_gather_s
from planner.layout.space import RECOMPUTE_FULL
from planner.specs import GpuSpec, ModelSpec
from planner.specs.layers import LayerKind, micro_batch_tokens
from planner.specs.precision import BF16


def _mixer(model: ModelSpec, kind: LayerKind):
    return model.mamba if kind.mixer == "mamba" else model.deltanet


def scan_core_s(model: ModelSpec, gpu: GpuSpec, layouts, kind: LayerKind, peak16: float) -> tuple:
    """(forward, backward) time of the chunked scan on heads / tp and the tokens / cp of one GPU [s]
    (0 for a layer without a scan: a hybrid model's MLP and MoE layers)."""
    if kind.mixer not in ("mamba", "deltanet"):
        return 0.0, 0.0
    tokens = micro_batch_tokens(model, layouts)
    flops = _mixer(model, kind).scan_flops_per_token() * tokens / layouts.tp.astype(float)
    fwd = flops / (peak16 * gpu.efficiency.flash_attention)
    return fwd, 2.5 * fwd


def scan_traffic_bytes(model: ModelSpec, kind: LayerKind, rows) -> np.ndarray | float:
    """Memory-bound bytes of a mixer around its GEMMs over `rows` tokens on one GPU, 16-bit,
    channels split over tp (rows already / tp: the same per-GPU total): the causal conv1d reads and
    writes its channels (4 B each), the scan reads x, B, C (or q, k, v), dt / beta and alpha and
    writes y (2 B each), the gated RMSNorm reads y and z and writes its output (6 B per channel)."""
    if kind.mixer == "mamba":
        m = model.mamba
        conv, heads, width = m.conv_channels, m.heads, m.d_inner
    elif kind.mixer == "deltanet":
        d = model.deltanet
        conv, heads, width = 2 * d.qk_dim + d.v_dim, 2 * d.value_heads, d.v_dim
    else:
        return 0.0
    return rows * (4.0 * conv + 2.0 * (conv + heads + width) + 6.0 * width)


def exchanged_width(model: ModelSpec, kind: LayerKind) -> int:
    """Channels of a token a mixer's context-parallel all-to-alls move: the input projection's
    outputs the scan reads (Mamba: z, x, B, C, dt; DeltaNet: q, k, v, z, beta, alpha), and the
    scan's output back."""
    m = _mixer(model, kind)
    out = m.d_inner if kind.mixer == "mamba" else m.v_dim
    return m.in_proj_width + out


def scan_cp_s(model: ModelSpec, layouts, kind: LayerKind, links_of) -> np.ndarray:
    """Context-parallel all-to-alls of one Mamba / DeltaNet layer per micro-batch, all passes [s]:
    forward and backward each move this GPU's `exchanged_width` channels of its s b / cp tokens
    (/ tp); an all-to-all of B bytes a rank in a group of cp moves (cp - 1) / cp of them, as an
    all-gather of B does (planner/costs/collectives.py). `links_of(nbytes)`: the cp group's links."""
    cp = layouts.cp.astype(float)
    nbytes = (BF16.activation_bytes * layouts.micro_batch * model.seq_len / cp * exchanged_width(model, kind)
              / layouts.tp.astype(float))
    one = all_gather_s(nbytes, cp, links_of(nbytes))
    passes = 2.0 + (layouts.recompute == RECOMPUTE_FULL)
    return np.where(layouts.cp > 1, passes * one, 0.0)
