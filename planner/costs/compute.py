"""Per-GPU compute time of one transformer layer (and of the logits) for one micro-batch.

GEMMs use a soft roofline: time = FLOPs / (peak x eff) + bytes / (HBM x eff_hbm) (roofline of
Williams et al. 2009; summing instead of taking the max charges the part of the memory traffic
that tiles do not hide). The GEMM's shape after the tp split and the micro-batch sets `eff`:
- wave quantisation: the output is cut into tiles (`gpu.gemm_tiles`, the one wasting least) that
  run in waves of one tile per SM, so a GEMM of 1.1 waves takes as long as one of 2 (NVIDIA, "Matrix Multiplication
  Background User's Guide", Deep Learning Performance docs, sections on tile and wave quantisation);
- a saturating curve eff = gemm x W / (W + W_half) in the GEMM's work W: fixed costs of a kernel
  (launch, prologue, the last partial wave's tail) amortise over its work (Hockney's n_1/2 form).
Memory-bound kernels (layer norm, bias-dropout-add, GeLU/SwiGLU, softmax, dropout) are counted by
the bytes they read and write; the tensors and their sizes are those of Korthikanti et al. 2022
Sec. 4.1 (34 s b h + 5 a s^2 b bytes of stored activations per layer). Backward GEMMs do twice the
forward FLOPs (data and weight gradients; Narayanan et al. 2021 Sec. 5.1).

Shapes with tp: QKV and MLP-up are column-parallel, out-proj and MLP-down row-parallel
(Shoeybi et al. 2019, Megatron-LM Sec. 3). Sequence parallelism divides the layer-norm and
dropout work by tp (Korthikanti et al. 2022 Sec. 4.2.2).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..precision import BF16, FP32_BYTES, precision
from ..space import RECOMPUTE_FULL, RECOMPUTE_SELECTIVE
from ..specs import GpuSpec, ModelSpec
from ..units import US


@dataclass(frozen=True)
class LayerCompute:
    """Seconds per layer per micro-batch on one GPU (arrays over layouts)."""

    fwd_s: np.ndarray
    bwd_s: np.ndarray
    recompute_s: np.ndarray  # extra forward work in backward, without its communication
    logits_fwd_bwd_s: np.ndarray  # output layer + loss, on the last pipeline stage


def peak_flops(gpu: GpuSpec, name: str) -> float:
    """Dense tensor-core FLOP/s the GEMMs of a precision run at."""
    return gpu.peak_flops(precision(name).peak)


def gemm_s(m, k, n, peak: float, hbm_bytes_s: float, gpu: GpuSpec, operand_bytes: int = BF16.activation_bytes) -> np.ndarray:
    """Time of an (m x k) @ (k x n) GEMM [s] (shape rules in the module docstring)."""
    eff = gpu.efficiency
    flops = 2.0 * m * k * n
    nbytes = operand_bytes * (m * k + k * n + m * n)
    issued = flops
    if gpu.sms is not None:
        # Every wave costs a full wave of tiles; cuBLAS's heuristics pick the tile that wastes least.
        issued = np.min([2.0 * k * tm * tn * gpu.sms * np.ceil(np.ceil(m / tm) * np.ceil(n / tn) / gpu.sms)
                         for tm, tn in gpu.gemm_tiles], axis=0)
    half = eff.gemm_half_gflop * 1e9
    saturation = issued / (issued + half) if half > 0 else 1.0
    return issued / (peak * eff.gemm * saturation) + nbytes / (hbm_bytes_s * eff.hbm)


# FlashAttention throughput saturates in the sequence length like s / (s + s_half)
# (`flash_half_seq`, a GPU constant); `flash_attention` is the efficiency at 2,048 tokens.
FLASH_REFERENCE_SEQ = 2048.0


def flash_sequence_factor(seq_len: float, half_seq: float) -> float:
    if half_seq <= 0:
        return 1.0
    ref = FLASH_REFERENCE_SEQ / (FLASH_REFERENCE_SEQ + half_seq)
    return seq_len / (seq_len + half_seq) / ref


def _floor(gpu_s, launch_s):
    """The larger of GPU time and launch time, smoothly (an L6 norm: within 12 % of the max where they
    are equal, exact far from it), so that a refit can find a floor that starts below the GPU time."""
    if np.all(launch_s == 0):
        return gpu_s
    return (gpu_s**6 + launch_s**6) ** (1 / 6)


def layer_compute(model: ModelSpec, gpu: GpuSpec, layouts) -> LayerCompute:
    eff = gpu.efficiency
    st = model.training.stack.for_gpu(gpu.name)
    prec = precision(model.training.precision)
    act = prec.activation_bytes
    peak = peak_flops(gpu, prec.name)
    hbm = gpu.hbm_bytes_per_s
    t = layouts.tp.astype(float)
    b = layouts.micro_batch.astype(float)
    s, h, f, kv, a = model.seq_len, model.hidden, model.ffn, model.kv_hidden, model.heads
    tokens = b * s  # GEMM rows; with sequence parallelism they are all-gathered first
    sbh = tokens * h

    mlp_up = 2 * f if model.ffn_act == "swiglu" else f
    dense = (
        gemm_s(tokens, h, (h + 2 * kv) / t, peak, hbm, gpu, act)  # QKV, column-parallel
        + gemm_s(tokens, h / t, h, peak, hbm, gpu, act)  # attention output, row-parallel
        + gemm_s(tokens, h, mlp_up / t, peak, hbm, gpu, act)  # MLP up (and gate)
        + gemm_s(tokens, f / t, h, peak, hbm, gpu, act)  # MLP down
    )

    # Attention core: QK^T, softmax, dropout, attention-over-V, on a/t heads.
    attn_flops = 4.0 * b * s * s * h / t
    if model.training.attention == "flash":
        # Fused kernel; causal masking skips half the blocks. Backward recomputes the scores: ~2.5x.
        core_fwd = 0.5 * attn_flops / (peak * eff.flash_attention * flash_sequence_factor(s, eff.flash_half_seq))
        core_bwd = 2.5 * core_fwd
    else:
        scores_bytes = act * a * s * s * b / t
        gemm_part = attn_flops / (peak * eff.gemm) + (2 * scores_bytes + act * 4 * sbh / t) / (hbm * eff.hbm)
        # softmax reads+writes the scores (2x), dropout reads, writes and stores a 1-byte mask (2.5x)
        softmax_dropout = 4.5 * scores_bytes / (hbm * eff.hbm)
        core_fwd = gemm_part + softmax_dropout
        core_bwd = 2 * gemm_part + st.elementwise_backward_factor * softmax_dropout

    # Memory-bound traffic outside attention [bytes]: GeLU reads+writes s b f (SwiGLU reads two,
    # writes one); layer norms 2 x (read+write) and bias-dropout-add 2 x (two reads, write, mask).
    act_fn = (6 if model.ffn_act == "swiglu" else 4) * tokens * f / t
    sp_region = 22.0 * sbh
    sp_region = np.where(layouts.sequence_parallel == 1, sp_region / t, sp_region)
    elem_s = (act_fn + sp_region) / (hbm * eff.hbm)

    overhead = st.layer_overhead_s
    # The host launches a layer's kernels no faster than layer_launch_us (PyTorch eager; CUDA graphs remove it).
    launch_s = st.layer_launch_us * US
    fwd = _floor(dense + core_fwd + elem_s, launch_s) + overhead
    bwd = _floor(2 * dense + core_bwd + st.elementwise_backward_factor * elem_s, 2 * launch_s) + 2 * overhead

    rc = layouts.recompute
    recompute = np.where(rc == RECOMPUTE_FULL, fwd, np.where(rc == RECOMPUTE_SELECTIVE, core_fwd, 0.0))

    # Output layer (vocab-parallel) and cross-entropy in fp32 over s b V / t logits.
    v = model.vocab
    logits_gemm = gemm_s(tokens, h, v / t, peak, hbm, gpu, act)
    # The loss reads and writes the fp32 logits a number of times that depends on the kernels: an
    # unfused vocab-parallel cross-entropy (cast, max, exp, sum, log, gather, softmax) makes many
    # passes, a fused one few (Megatron --cross-entropy-loss-fusion); the stack says how many.
    ce_bytes = st.loss_fp32_passes * FP32_BYTES * tokens * v / t
    logits = 3 * logits_gemm + (1 + st.elementwise_backward_factor) * ce_bytes / (hbm * eff.hbm)
    return LayerCompute(fwd_s=fwd, bwd_s=bwd, recompute_s=recompute, logits_fwd_bwd_s=logits)
