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

from planner.costs.scan import scan_core_s, scan_traffic_bytes
from planner.specs.layers import (LayerKind, Matrix, attention_core_flops_per_seq, attention_dims, eager_clamp,
                                  expert_rows, flash_work_fraction, layer_kinds, micro_batch_tokens,
                                  window_work_fraction)
from planner.specs.precision import BF16, FP32_BYTES, Precision, precision
from planner.layout.space import RECOMPUTE_FULL, RECOMPUTE_SELECTIVE
from planner.specs import GpuSpec, ModelSpec, StackConstants
from planner.units import US


@dataclass(frozen=True)
class LayerCompute:
    """Seconds per layer per micro-batch on one GPU (arrays over layouts)."""

    fwd_s: np.ndarray
    bwd_s: np.ndarray
    recompute_s: np.ndarray  # extra forward work in backward, without its communication
    logits_fwd_bwd_s: np.ndarray  # output layer + loss, on the last pipeline stage
    attention_fwd_s: np.ndarray | float = 0.0  # the attention core alone (what context-parallel exchange hides behind)
    attention_bwd_s: np.ndarray | float = 0.0
    gpu_fwd_s: np.ndarray | float = 0.0  # GPU time of the forward before the launch floor
    gpu_bwd_s: np.ndarray | float = 0.0
    launch_s: float = 0.0  # the forward's launch floor

    def waiting_s(self, fwd_wait_s, bwd_wait_s) -> np.ndarray:
        """Extra time of one forward and one backward that wait `*_wait_s` on the GPU (a transfer
        outlasting the kernel it overlaps), through the same launch floor: monotone in every term."""
        fwd = _floor(self.gpu_fwd_s + fwd_wait_s, self.launch_s) - _floor(self.gpu_fwd_s, self.launch_s)
        bwd = _floor(self.gpu_bwd_s + bwd_wait_s, 2 * self.launch_s) - _floor(self.gpu_bwd_s, 2 * self.launch_s)
        return fwd, bwd


def routed_rows(model: ModelSpec, layouts) -> tuple:
    """(rows per local expert, local experts) of the grouped expert GEMMs on the busiest
    expert-parallel rank: expert_rows x MoeSpec.busiest_rank_load(ep), the rank holding the busiest
    expert (moe.imbalance). It sets the pace: the all-to-all waits for it, and it stores the most."""
    rows, local = expert_rows(model, layouts)
    return rows * model.moe.busiest_rank_load(layouts.ep), local


def peak_flops(gpu: GpuSpec, name: str) -> float:
    """Dense tensor-core FLOP/s the GEMMs of a precision run at."""
    return gpu.peak_flops(precision(name).peak)


def gemm_efficiency(gpu: GpuSpec, prec: Precision) -> float:
    """Fraction of the precision's peak that large GEMMs reach (FP8 GEMMs have their own; NVFP4 GEMMs
    theirs where the preset states one, else the FP8 one: no published NVFP4 training fit)."""
    eff = gpu.efficiency
    if prec.is_fp4 and eff.gemm_fp4 is not None:
        return eff.gemm_fp4
    return eff.gemm_fp8 if prec.is_fp8 and eff.gemm_fp8 is not None else eff.gemm


def gemm_s(m, k, n, peak: float, hbm_bytes_s: float, gpu: GpuSpec, operand_bytes: float = BF16.activation_bytes,
           groups=1, efficiency: float | None = None) -> np.ndarray:
    """Time of `groups` (m x k) @ (k x n) GEMMs launched as one (a grouped GEMM: its tiles share
    the waves) [s] (shape rules in the module docstring)."""
    eff = gpu.efficiency
    level = eff.gemm if efficiency is None else efficiency
    flops = 2.0 * m * k * n * groups
    nbytes = operand_bytes * (m * k + k * n + m * n) * groups
    issued = flops
    if gpu.sms is not None:
        # Every wave costs a full wave of tiles; cuBLAS's heuristics pick the tile that wastes least.
        issued = np.min([2.0 * k * tm * tn * gpu.sms * np.ceil(groups * np.ceil(m / tm) * np.ceil(n / tn) / gpu.sms)
                         for tm, tn in gpu.gemm_tiles], axis=0)
    half = eff.gemm_half_gflop * 1e9
    saturation = issued / (issued + half) if half > 0 else 1.0
    return issued / (peak * level * saturation) + nbytes / (hbm_bytes_s * eff.hbm)


# FlashAttention throughput saturates in the sequence length like s / (s + s_half)
# (`flash_half_seq`, a GPU constant); `flash_attention` is the efficiency at 2,048 tokens. It
# saturates the same way in the head dim (`flash_half_head_dim`): a tile's two GEMMs have inner size
# d while its softmax and rescaling cost per score, so small heads reach less of the peak;
# `flash_attention` is the efficiency at head dim 128.
FLASH_REFERENCE_SEQ = 2048.0
FLASH_REFERENCE_HEAD_DIM = 128.0


def _saturation(x: float, half: float, reference: float) -> float:
    """x / (x + half) relative to its value at `reference` (1 when half is 0: no dependence)."""
    if half <= 0:
        return 1.0
    return x / (x + half) / (reference / (reference + half))


def flash_sequence_factor(seq_len: float, half_seq: float) -> float:
    return _saturation(seq_len, half_seq, FLASH_REFERENCE_SEQ)


def flash_head_dim_factor(head_dim: float, half_dim: float) -> float:
    return _saturation(head_dim, half_dim, FLASH_REFERENCE_HEAD_DIM)


def _floor(gpu_s, launch_s):
    """The larger of GPU time and launch time, smoothly (an L6 norm: within 12 % of the max where they
    are equal, exact far from it), so that a refit can find a floor that starts below the GPU time."""
    if np.all(launch_s == 0):
        return gpu_s
    return (gpu_s**6 + launch_s**6) ** (1 / 6)


def split_shape(mat: Matrix, split) -> tuple:
    """(k, n) of a matrix on one GPU of a group of `split` ranks (column-parallel: n / split,
    row-parallel: k / split, replicated: whole)."""
    k = mat.k / split if mat.split == "row" else mat.k
    n = mat.n / split if mat.split == "col" else mat.n
    return k, n


def _gemm_set(mats: tuple[Matrix, ...], rows, split, gpu: GpuSpec, prec: Precision, groups=1) -> tuple:
    """Forward time of the GEMMs of `mats` over `rows` rows each on one GPU [s], and the bytes of
    casting their inputs (forward) and output gradients (backward) to FP8 / NVFP4 (0 in 16 bits).
    A recipe that keeps a share of the linear layers in BF16 (`bf16_gemm_share`) runs that share of
    the GEMMs at the BF16 peak, 16-bit operands and no cast: time and casts are the mean of the two."""
    low = _gemm_set_at(mats, rows, split, gpu, prec, groups)
    share = prec.bf16_gemm_share if prec.is_fp8 else 0.0
    if share == 0:
        return low
    high = _gemm_set_at(mats, rows, split, gpu, BF16, groups)
    return tuple((1 - share) * a + share * b for a, b in zip(low, high))


def _gemm_set_at(mats: tuple[Matrix, ...], rows, split, gpu: GpuSpec, prec: Precision, groups=1) -> tuple:
    """`_gemm_set` with every GEMM at `prec`."""
    peak, level = gpu.peak_flops(prec.peak), gemm_efficiency(gpu, prec)
    time = cast_in = cast_out = 0.0
    for mat in mats:
        k, n = split_shape(mat, split)
        time = time + gemm_s(rows, k, n, peak, gpu.hbm_bytes_per_s, gpu, prec.gemm_input_bytes, groups, level)
        cast_in = cast_in + groups * rows * k
        cast_out = cast_out + groups * rows * n
    return time, prec.quantize_bytes * cast_in, prec.quantize_bytes * cast_out


def _attention_core(model: ModelSpec, gpu: GpuSpec, st: StackConstants, layouts, peak16: float) -> tuple:
    """(forward, backward) time of QK^T, softmax and attention-over-V on heads / tp and the
    sequence / cp queries of one GPU [s]. Context parallelism with causal load balancing gives each
    GPU 1 / cp of the work (Megatron-Core, 2 cp chunks per sequence)."""
    eff = gpu.efficiency
    d = attention_dims(model)
    t, c = layouts.tp.astype(float), layouts.cp.astype(float)
    b, s, act = layouts.micro_batch.astype(float), model.seq_len, BF16.activation_bytes
    attn_flops = attention_core_flops_per_seq(model, windowed=False) * b / (t * c)
    hbm = gpu.hbm_bytes_per_s * eff.hbm
    if model.training.attention == "flash":
        # Fused kernel in 16 bits; causal masking skips half the blocks, a sliding window the blocks
        # outside its band (flash_work_fraction). Backward recomputes the scores: ~2.5x.
        # Never fewer blocks than the window's pairs: the model FLOPs (planner/costs/flops.py
        # causal_attention_flops_per_seq) count those, and no kernel does them faster than the peak.
        # A windowed layer's tiles cost more each than a full layer's (flash_window_tile_cost, cuDNN).
        work = 0.5 * attn_flops * max(flash_work_fraction(model, eff.flash_window_tile_cost), window_work_fraction(model))
        # QK^T runs over qk_dim, attention-over-V over v_dim (MLA: 192 and 128): their mean.
        rate = flash_sequence_factor(s / c, eff.flash_half_seq) * flash_head_dim_factor(
            (d.qk_dim + d.v_dim) / 2, eff.flash_half_head_dim)
        if st.attention_kernel == "fa2":  # FlashAttention-2 where the preset's kernel is faster
            rate = rate * eff.flash_fa2_relative
        # The saturation factors are relative to 2,048 tokens and head dim 128, so above those they pass
        # 1: a long sequence of wide heads ran above the peak (issue 38). No kernel beats the peak.
        core_fwd = work / (peak16 * np.minimum(1.0, eff.flash_attention * rate))
        return core_fwd, 2.5 * core_fwd
    # The unfused path computes, masks and stores every score, a sliding window's too (Megatron-Core's
    # own DotProductAttention applies the window as an s x s mask: transformer/utils.py
    # get_sliding_window_causal_mask), so a window saves nothing here.
    scores_bytes = act * d.heads * s * (s / c) * b / t
    io = act * (b * s / c) * (d.q_width + d.k_width + d.v_width + d.out_width) / t
    gemm_part = attn_flops / (peak16 * eff.gemm) + (2 * scores_bytes + io) / hbm
    # softmax reads+writes the scores (2x), dropout reads, writes and stores a 1-byte mask (2.5x)
    softmax_dropout = 4.5 * scores_bytes / hbm
    return gemm_part + softmax_dropout, 2 * gemm_part + st.elementwise_backward_factor * softmax_dropout


def _mlp_traffic(model: ModelSpec, rows, width) -> np.ndarray:
    """Activation-function bytes of an MLP of `width` over `rows` rows: GeLU reads+writes, SwiGLU
    reads two and writes one (16-bit)."""
    return (6 if model.ffn_act == "swiglu" else 4) * rows * width


def eager_clamp_bytes(model: ModelSpec, rows, width) -> np.ndarray | float:
    """HBM bytes of an eager SwiGLU clamp (swiglu_limit, no op fuser): chunk, two clamps and a cat over the
    fc1 output (rows x 2 width, 16-bit), 4 passes: 16 B per row and width (_eager_expert_bytes)."""
    return 16.0 * rows * width if eager_clamp(model) else 0.0


def _eager_expert_bytes(model: ModelSpec, rows, width) -> np.ndarray | float:
    """Expert-MLP ops PyTorch runs one by one when Transformer Engine's op fuser is off (Megatron-Core
    0.17, 2edffadb: fusions/fused_bias_geglu.py weighted_bias_quick_geglu_impl, moe/experts.py _apply_bias):
    - swiglu_limit: chunk, two clamps and a cat over the fc1 output (rows x 2 width, 16-bit): each
      clamp reads and writes its half, the cat reads and writes the whole: 4 passes, 16 B per row and width;
    - linear_bias: the fc2 bias added per local expert in a Python loop, cat(t + b * p): b * p writes,
      the add reads two and writes, the cat reads and writes: 6 passes over the fc2 output, 12 B per
      row and hidden unit in 16 bits; 28 B with the flex dispatcher, whose probabilities p are fp32
      (DeepEP and HybridEP take only fp32: token_dispatcher.py), so b * p writes 4, the add reads
      2 + 4 and writes 4, the cat reads and writes 4 each, and the cast back reads 4 and writes 2."""
    if model.training.te_op_fuser:
        return 0.0
    clamp = eager_clamp_bytes(model, rows, width)
    per_value = 28.0 if model.training.moe_dispatcher == "flex" else 12.0
    bias = per_value * rows * model.hidden if model.linear_bias else 0.0
    return clamp + bias


def _eager_rope_bytes(model: ModelSpec, tokens, t) -> np.ndarray | float:
    """RoPE beyond the fused kernel's one read and write when Megatron falls back to its eager path
    (mscale != 1: models/common/embeddings/rope_utils.py, 2edffadb): t * cos, the rotated half (negate,
    cat), * sin, the add and the final cat read 6.5 and write 5.5 times each element of q and k,
    20 B more than the fused kernel's 4 (16-bit). Not again where the stack's eager block ops count it."""
    if model.rope_mscale == 1.0 or eager_block_ops_on(model):
        return 0.0
    return _EAGER_ROPE_BYTES * _rope_elements(model, tokens, t)


def _rope_elements(model: ModelSpec, tokens, t) -> np.ndarray | float:
    """Elements of q and k one GPU rotates (0 without RoPE): MLA's rope part of each query head (split over
    tp) and its one shared rope key, whole on every tp rank (Megatron-Core multi_latent_attention.py)."""
    if model.position_embedding != "rope":
        return 0.0
    if model.mla is not None:
        rope = model.mla.qk_rope_head_dim
        return tokens * (model.heads * rope / t + rope)
    d = attention_dims(model)
    return tokens * (d.q_width + d.k_width) / t


def eager_block_ops_on(model: ModelSpec) -> bool:
    """Whether the stack's model code runs the block's elementwise ops one by one (StackSpec.eager_block_ops)
    and torch.compile does not fuse them."""
    return model.training.stack.eager_block_ops and not model.training.torch_compile


# Bytes per element of the eager ops of torchtitan's Llama block (torchtitan@9dec370, the Dec 2024
# benchmarks; 16-bit activations, fp32 where the code casts), beyond the fused kernels the other
# costs count (a norm's read and write, a SwiGLU's two reads and a write, RoPE's nothing):
# - RMSNorm (models/norms.py: self._norm(x.float()).type_as(x) * self.weight, _norm = x *
#   rsqrt(x.pow(2).mean(-1) + eps)): float() 2+4, pow 4+4, mean 4, x * rsqrt 4+4, type_as 4+2,
#   * weight 2+2 = 36 B, 32 over the fused 4. Its autograd backward: * weight 4 and the weight's
#   gradient 6+2, type_as 2+4, x * rsqrt 8 and the rsqrt's gradient 12+4, mean's expand 4, pow's
#   grad * (2 * x.pow(1)) 8+8+12, the two gradients of x summed 12, float() 4+2 = 92 B, 86 over a
#   fused backward's 6 (read x and the gradient, write the input gradient);
# - SwiGLU (model.py FeedForward: F.silu(w1(x)) * w3(x)): silu 2+2 then the product 4+2 = 10 B a
#   hidden unit, 4 over 6; backward: the product's two gradients 6 each, silu's 6 = 18, 12 over 6;
# - RoPE (model.py apply_rotary_emb: view_as_complex(x.float()) * freqs_cis, view_as_real,
#   type_as): float() 2+4, complex product 4+4, type_as 4+2 = 20 B per element of q and k, and as
#   many in backward (_eager_rope_bytes counts the same ops for Megatron's unfused path).
# torch.compile (one Inductor graph a block: parallelize_llama.py apply_compile) fuses them.
# repeat_kv's copies (K and V to every query head) stay with or without it: small, not counted.
_EAGER_NORM_BYTES, _EAGER_NORM_BWD_BYTES = 32.0, 86.0
_EAGER_SWIGLU_BYTES, _EAGER_SWIGLU_BWD_BYTES = 4.0, 12.0
_EAGER_ROPE_BYTES = 20.0


def eager_block_bytes(model: ModelSpec, layouts, kind: LayerKind) -> tuple:
    """(forward, backward) HBM bytes a layer's eager elementwise ops add on one GPU where the stack's
    model code runs them op by op (StackSpec.eager_block_ops) and torch.compile does not fuse them."""
    if not eager_block_ops_on(model):
        return 0.0, 0.0
    t, sp = layouts.tp.astype(float), layouts.sequence_parallel == 1
    tokens = micro_batch_tokens(model, layouts)
    norm_rows = np.where(sp, tokens / t, tokens)  # DTensor sequence parallelism shards the norms
    # RMSNorm (Llama-style, or not stated); torchtitan's "layernorm" is nn.LayerNorm, one fused kernel
    norms = 0.0 if model.normalization == "layernorm" else (1 if kind.sublayer else 2) * norm_rows * model.hidden
    fwd, bwd = _EAGER_NORM_BYTES * norms, _EAGER_NORM_BWD_BYTES * norms
    if model.ffn_act == "swiglu":
        # the dense or shared-expert MLP's hidden units, and torchtitan's grouped experts' silu(x @ w1) * (x @ w3)
        units = tokens / t * kind.mlp_width
        if kind.is_moe:
            rows, local = routed_rows(model, layouts)
            units = units + rows * local * kind.expert[-1].k / layouts.etp.astype(float)
        fwd, bwd = fwd + _EAGER_SWIGLU_BYTES * units, bwd + _EAGER_SWIGLU_BWD_BYTES * units
    if kind.mixer == "attention" and model.mla is None:
        rope = _EAGER_ROPE_BYTES * _rope_elements(model, tokens, t)
        fwd, bwd = fwd + rope, bwd + rope
    return fwd, bwd


def op_level_sac(model: ModelSpec, kind: LayerKind) -> bool:
    """Selective recomputation is the stack's op-level policy (torchtitan), for the dense multi-head/GQA
    layers it is written for (MoE, MLA and hybrid layers: the module count; planner/costs/memory.py)."""
    return model.training.stack.selective_ac == "op" and not kind.is_moe and not kind.sublayer and model.mla is None


def moe_syncs_host(model: ModelSpec) -> bool:
    """Whether a MoE layer's forward waits for the host: dropless dispatch reads the tokens per expert
    there (Megatron-Core token_dispatcher.py; DeepEP/HybridEP non_blocking=False), unless drop-and-pad
    or a full-iteration CUDA graph (static per-rank shapes) fixes the shapes beforehand."""
    return model.moe is not None and model.moe.capacity_factor is None and model.training.cuda_graph_impl != "full_iteration"


def cp_merge_bytes(model: ModelSpec, layouts) -> tuple:
    """(forward, backward) HBM bytes torch's ring attention (StackSpec.cp_ring_buffers) adds to a layer
    under context parallelism, in fp32 (torch.distributed.tensor.experimental._attention, Dec 2024).
    Forward: each of the cp - 1 steps after the first merges its partial output into the running one
    (_SDPAMerger, convert_to_f32: out - sigmoid(lse_b - lse) * (out - block_out)); fused by torch.compile
    (torchtitan compiles the block, the ring with it), it reads the block's 16-bit output and reads and
    writes the fp32 one, 10 B an output element; op by op, the cast 2+4, the difference 4+4+4, the
    product 4+4 and the update 4+4+4, 38 B. Backward: cp steps each add the query gradient and the
    (query-head-expanded) K and V gradients into fp32 accumulators, per accumulator 2 + 4 + 4 = 10 B
    fused, a cast 2+4 and an add 4+4+4 = 18 B op by op: 30 or 54 B an output element."""
    if not model.training.stack.cp_ring_buffers:
        return 0.0, 0.0
    fused = model.training.torch_compile
    cp = layouts.cp.astype(float)
    out = layouts.micro_batch * model.seq_len / cp * attention_dims(model).out_width / layouts.tp.astype(float)
    return (10.0 if fused else 38.0) * (cp - 1) * out, np.where(cp > 1, (30.0 if fused else 54.0) * cp * out, 0.0)


def _gemms_and_traffic(model: ModelSpec, gpu: GpuSpec, layouts, kind: LayerKind) -> tuple:
    """(forward GEMM time [s], forward memory-bound bytes, backward extra bytes) of one layer."""
    prec = model.training.numerics
    t, sp = layouts.tp.astype(float), layouts.sequence_parallel == 1
    tokens = micro_batch_tokens(model, layouts)  # rows; with sp all-gathered first
    gemm, cast_in, cast_out = _gemm_set(kind.tp_matrices, tokens, t, gpu, prec)
    traffic = _mlp_traffic(model, tokens / t, kind.mlp_width)
    # layer norms 2 x (read+write) and bias-dropout-add 2 x (two reads, write, mask): 22 bytes per
    # element of s b h, split over tp by sequence parallelism (Korthikanti et al. 2022 Sec. 4.2.2)
    if kind.sublayer:  # one norm and one bias-dropout-add: half of a transformer layer's
        traffic = traffic + np.where(sp, 11.0 * tokens * model.hidden / t, 11.0 * tokens * model.hidden)
        traffic = traffic + scan_traffic_bytes(model, kind, tokens / t)
    else:
        traffic = traffic + np.where(sp, 22.0 * tokens * model.hidden / t, 22.0 * tokens * model.hidden)
    if kind.mixer == "attention":
        traffic = traffic + _eager_rope_bytes(model, tokens, t)
    if kind.is_moe:
        rows, local = routed_rows(model, layouts)
        etp = layouts.etp.astype(float)
        g, ci, co = _gemm_set(kind.expert, rows, etp, gpu, prec, groups=local)
        slots = tokens / t * kind.top_k  # this GPU's routed token copies
        # Router (replicated, 16-bit) on this GPU's tokens; permute and unpermute read and write each
        # routed copy (Megatron-Core token dispatcher).
        router = gemm_s(tokens / t, kind.router.k, kind.router.n, gpu.peak_flops("bf16"), gpu.hbm_bytes_per_s, gpu)
        gemm = gemm + g + router
        cast_in, cast_out = cast_in + ci, cast_out + co
        width = kind.expert[-1].k / etp
        traffic = traffic + _mlp_traffic(model, rows * local, width) + 4 * BF16.activation_bytes * slots * model.hidden
        traffic = traffic + _eager_expert_bytes(model, rows * local, width)
    return gemm, traffic + cast_in, cast_out


def layer_compute(model: ModelSpec, gpu: GpuSpec, st: StackConstants, layouts, kind: LayerKind | None = None) -> LayerCompute:
    """One layer of `kind` (default: the model's first kind, dense when it has any); `st`: the
    stack's constants on this GPU (planner/costs/context.py)."""
    kind = kind or layer_kinds(model)[0]
    eff = gpu.efficiency
    peak16 = gpu.peak_flops("fp16" if model.training.precision == "fp16" else "bf16")
    hbm = gpu.hbm_bytes_per_s * eff.hbm
    dense, traffic, cast_out = _gemms_and_traffic(model, gpu, layouts, kind)
    if kind.mixer == "attention":
        core_fwd, core_bwd = _attention_core(model, gpu, st, layouts, peak16)
    else:  # a hybrid model's Mamba-2 / DeltaNet scan, or no mixer (its MLP layers)
        core_fwd, core_bwd = scan_core_s(model, gpu, layouts, kind, peak16)
    elem_s = traffic / hbm

    overhead = st.layer_overhead_s
    # The host launches a layer's kernels no faster than layer_launch_us (PyTorch eager); a
    # full-iteration CUDA graph replays them without the host.
    graphed = model.training.cuda_graph_impl == "full_iteration"
    extra = model.training.stack.tp_layer_launch_us  # the TP linears' host work, where the stack counts it
    launch_us = st.layer_launch_us + (np.where(layouts.tp > 1, extra, 0.0) if extra else 0.0)
    launch_s = 0.0 if graphed else launch_us * US
    eager_fwd, eager_bwd = eager_block_bytes(model, layouts, kind)
    merge_fwd, merge_bwd = cp_merge_bytes(model, layouts) if kind.mixer == "attention" else (0.0, 0.0)
    gpu_fwd = dense + core_fwd + elem_s + (eager_fwd + merge_fwd) / hbm
    gpu_bwd = 2 * dense + core_bwd + st.elementwise_backward_factor * elem_s + (cast_out + eager_bwd + merge_bwd) / hbm
    # Dropless dispatch sizes its buffers and grouped GEMMs from the tokens per expert, read on the
    # host (Megatron-Core token_dispatcher.py, DeepEP/HybridEP non_blocking=False): the GPU drains
    # once per forward of a MoE layer. Drop-and-pad shapes are static (transformer_config.py: "moe
    # cuda graph is only supported with drop-padding MoE"), and so are a full-iteration graph's.
    sync_s = st.moe_sync_us * US if kind.is_moe and moe_syncs_host(model) else 0.0
    fwd = _floor(gpu_fwd, launch_s) + overhead + sync_s
    bwd = _floor(gpu_bwd, 2 * launch_s) + 2 * overhead

    rc = layouts.recompute
    if op_level_sac(model, kind):  # every op but the saved matmuls and SDPA (the ring's merge inside) again
        selective = _op_sac_gemms_s(model, gpu, layouts, kind) + elem_s + eager_fwd / hbm
    else:
        selective = _selective_s(model, gpu, layouts, kind, core_fwd, hbm)
    # A checkpointed layer's forward runs again behind the checkpoint function's own host work (RNG states
    # saved and restored, inputs detached, a re-entrant backward): the stack's checkpoint_host_us
    checkpoint_s = 0.0 if graphed else model.training.stack.checkpoint_host_us * US
    full = _floor(gpu_fwd, launch_s + checkpoint_s) + overhead + sync_s  # the forward's own when 0
    recompute = np.where(rc == RECOMPUTE_FULL, full, np.where(rc == RECOMPUTE_SELECTIVE, selective, 0.0))
    return LayerCompute(fwd_s=fwd, bwd_s=bwd, recompute_s=recompute,
                        logits_fwd_bwd_s=_logits_s(model, gpu, st, layouts, peak16),
                        attention_fwd_s=core_fwd if kind.mixer == "attention" else 0.0,
                        attention_bwd_s=core_bwd if kind.mixer == "attention" else 0.0, gpu_fwd_s=gpu_fwd, gpu_bwd_s=gpu_bwd, launch_s=launch_s)


def _op_sac_gemms_s(model: ModelSpec, gpu: GpuSpec, layouts, kind: LayerKind):
    """The matmuls torchtitan's op-level checkpointing runs again (parallelize_llama.py@9dec370
    _apply_ac_to_transformer_block, "op"): it keeps every other aten.mm output of a layer, in call order
    wq, wk, wv, wo, w1, w3, w2 (SwiGLU; w1, w2 without the gate), so wk, wo and w3 (w2) run again, with
    the other ops (their traffic: the caller); SDPA's output is kept. planner/costs/memory.py
    _op_sac_bytes stores the others."""
    d, h = attention_dims(model), model.hidden
    width = next((m.k for m in kind.tp_matrices if m.name == "mlp_down"), 0)
    rerun = (Matrix("wk", h, d.k_width, "col"), Matrix("wo", d.out_width, h, "row"),
             Matrix("w3", h, width, "col") if model.ffn_act == "swiglu" else Matrix("w2", width, h, "row"))
    tokens = micro_batch_tokens(model, layouts)
    return _gemm_set(rerun, tokens, layouts.tp.astype(float), gpu, model.training.numerics)[0]


def _selective_s(model: ModelSpec, gpu: GpuSpec, layouts, kind: LayerKind, core_fwd, hbm: float):
    """Forward time of the modules selective recomputation runs again before the backward
    (Megatron-Core --recompute-modules, TrainingSpec.recompute_modules; default core_attn)."""
    modules, prec = model.training.recomputed, model.training.numerics
    t, sp = layouts.tp.astype(float), layouts.sequence_parallel == 1
    tokens = micro_batch_tokens(model, layouts)
    out = core_fwd if "core_attn" in modules and kind.mixer == "attention" else 0.0

    def gemms(prefix: str):  # GEMMs named prefix_* of the tp matrices, and their activation's traffic
        mats = tuple(m for m in kind.tp_matrices if m.name.split("_")[0] == prefix)
        width = next((m.k for m in mats if m.name.endswith("_down")), 0)
        return _gemm_set(mats, tokens, t, gpu, prec)[0] + _mlp_traffic(model, tokens / t, width) / hbm if mats else 0.0

    if "layernorm" in modules and kind.is_moe:  # the pre-MLP norm: read and write s b h in 16 bits
        out = out + np.where(sp, 4.0 * tokens * model.hidden / t, 4.0 * tokens * model.hidden) / hbm
    if "mlp" in modules and not kind.is_moe:
        out = out + gemms("mlp")
    if "shared_experts" in modules and kind.is_moe:
        out = out + gemms("shared")
    if "moe_act" in modules and kind.is_moe:
        # the activation function again, an eager clamp's passes with it (it runs inside the checkpoint)
        rows, local = routed_rows(model, layouts)
        width = kind.expert[-1].k / layouts.etp.astype(float)
        out = out + (_mlp_traffic(model, rows * local, width) + eager_clamp_bytes(model, rows * local, width)) / hbm
    if "mla_up_proj" in modules and model.mla is not None:
        ups = tuple(m for m in kind.tp_matrices if m.name in ("q_up", "kv_up"))
        out = out + _gemm_set(ups, tokens, t, gpu, prec)[0]
    return out


def _logits_s(model: ModelSpec, gpu: GpuSpec, st: StackConstants, layouts, peak16: float) -> np.ndarray:
    """Output layer (vocab-parallel, 16-bit) and cross-entropy in fp32 over s b V / (tp cp) logits."""
    t = layouts.tp.astype(float)
    tokens = micro_batch_tokens(model, layouts)
    v, hbm = model.vocab, gpu.hbm_bytes_per_s
    logits_gemm = gemm_s(tokens, model.hidden, v / t, peak16, hbm, gpu)
    # The loss reads and writes the fp32 logits a number of times that depends on the kernels: an
    # unfused vocab-parallel cross-entropy (cast, max, exp, sum, log, gather, softmax) makes many
    # passes, a fused one few (Megatron --cross-entropy-loss-fusion); the stack says how many.
    ce_bytes = st.loss_fp32_passes * FP32_BYTES * tokens * v / t
    return 3 * logits_gemm + (1 + st.elementwise_backward_factor) * ce_bytes / (hbm * gpu.efficiency.hbm)
