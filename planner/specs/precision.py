"""Bytes per value of each training precision, in one record instead of constants in formulas.

Mixed-precision Adam (Micikevicius et al. 2018; Megatron-LM's main_grad and distributed optimizer):
2-byte bf16/fp16 weights used by the GEMMs, 4-byte fp32 gradients accumulated across micro-batches,
4-byte fp32 master weights and two 4-byte fp32 Adam moments: 18 bytes per parameter, which
reproduces Korthikanti et al. 2022 Fig. 1 exactly. Activations are stored in 16 bits.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

FP32_BYTES = 4  # what loss kernels keep in fp32 (the logits' copy inside the cross-entropy)
BF16_BYTES = 2


@dataclass(frozen=True)
class Precision:
    name: str
    peak: str  # which `peak_tflops` field the GEMMs run at
    weight_bytes: int  # model weights the kernels read
    grad_bytes: int  # gradients as accumulated and reduced (fp32 main_grad; 2 with grad_reduce_dtype bf16)
    master_bytes: int  # fp32 master copy of the weights
    optimizer_bytes: int  # Adam's first and second moments
    activation_bytes: int  # stored and communicated activations, GEMM outputs
    gemm_input_bytes: float = 2  # GEMM operands as the tensor cores read them, and as stored for backward
    weight_cache_bytes: float = 0  # low-precision weight copies kept beside the 16-bit weights
    quantize_bytes: float = 0  # HBM traffic to cast one GEMM input element (read 16-bit, write 8-bit copies)
    mfu_peak: str = ""  # the peak MFU is quoted against (published tables: BF16 for FP8 runs)
    param_gather_bytes: float = 2  # what the distributed optimizer's parameter all-gather moves per parameter
    bf16_gemm_share: float = 0.0  # share of the linear layers' GEMM FLOPs a low-precision recipe keeps in BF16

    @property
    def is_fp8(self) -> bool:
        """GEMMs below 16 bits (FP8, MXFP8 and NVFP4: the low-precision GEMM path of compute.py)."""
        return self.gemm_input_bytes < 2

    @property
    def is_fp4(self) -> bool:
        return self.gemm_input_bytes < 1

    @property
    def stored_gemm_input_bytes(self) -> float:
        """Bytes of a GEMM input saved for backward, over the linear layers: the low-precision copy where
        the recipe quantizes, 16 bits in the layers it keeps in BF16 (`bf16_gemm_share`)."""
        return (1 - self.bf16_gemm_share) * self.gemm_input_bytes + self.bf16_gemm_share * BF16_BYTES

    @property
    def optimizer_state_bytes(self) -> int:
        """What the optimizer shards hold per parameter: master weights and moments (12 B)."""
        return self.master_bytes + self.optimizer_bytes

    @property
    def state_bytes(self) -> int:
        """Weights (and FP8 weight copies), gradients and optimizer states per parameter (18 B in
        BF16, Korthikanti et al. 2022)."""
        return self.weight_bytes + self.weight_cache_bytes + self.grad_bytes + self.optimizer_state_bytes

    @property
    def adam_step_bytes(self) -> int:
        """HBM traffic of one Adam step per parameter: read master, moments and gradient, write
        master and moments back and the new 16-bit weights (2 x 12 + 4 + 2 = 30 B)."""
        return 2 * self.optimizer_state_bytes + self.grad_bytes + self.weight_bytes


BF16 = Precision("bf16", peak="bf16", weight_bytes=2, grad_bytes=4, master_bytes=4, optimizer_bytes=8,
                 activation_bytes=2)
FP16 = Precision("fp16", peak="fp16", weight_bytes=2, grad_bytes=4, master_bytes=4, optimizer_bytes=8,
                 activation_bytes=2)
# FP8 training with Transformer Engine (Micikevicius et al. 2022, "FP8 Formats for Deep Learning";
# TE's Linear/LayerNormLinear): GEMMs read FP8 operands; the 16-bit weights stay (the optimizer's
# fp32 master is unchanged) and TE caches their FP8 copy across the micro-batches of a step
# (1 byte per parameter; Hopper's transposed copy for the backward GEMMs is cast-transposed there,
# transiently); GEMM inputs are saved for backward in FP8 (1 byte). Casting an input reads it in 16
# bits and writes the row-wise and transposed FP8 copies (2 + 1 + 1 bytes; the amax reduction is
# fused into the cast). MXFP8 (OCP Microscaling spec v1.0, Blackwell): a shared 8-bit scale per 32
# values adds 1/32 byte to each copy, and the row- and column-wise copies (both cached) replace the
# transpose. Attention, norms and communication stay in BF16.
FP8 = Precision("fp8", peak="fp8", weight_bytes=2, grad_bytes=4, master_bytes=4, optimizer_bytes=8,
                activation_bytes=2, gemm_input_bytes=1, weight_cache_bytes=1, quantize_bytes=4, mfu_peak="bf16")
MXFP8 = Precision("mxfp8", peak="mxfp8", weight_bytes=2, grad_bytes=4, master_bytes=4, optimizer_bytes=8,
                  activation_bytes=2, gemm_input_bytes=1 + 1 / 32, weight_cache_bytes=2 * (1 + 1 / 32),
                  quantize_bytes=2 + 2 * (1 + 1 / 32), mfu_peak="bf16")
# NVFP4 training with Transformer Engine's NVFP4BlockScaling recipe (TE >= 2.7; Megatron-LM --fp4-format e2m1
# --fp4-recipe nvfp4) as NVIDIA's "Pretraining Large Language Models with NVFP4" (arXiv 2509.25149, Sec. 4)
# describes it: the three GEMMs of every linear layer (fprop, dgrad, wgrad) read E2M1 values (half a byte) with an
# E4M3 scale per 16 values (1/16 byte) and one FP32 scale per tensor (negligible): 0.5625 bytes per operand
# element. Attention (QK^T, softmax, attention-over-V), norms, the embedding, the output layer and the MoE router
# stay in BF16, as they do for FP8 here; master weights, gradients and Adam states are unchanged (FP32). TE caches
# the quantized weight across the micro-batches of a step in both orientations (2-D 16 x 16 block scales, so
# row- and column-wise copies agree): 2 x 0.5625 bytes per parameter beside the BF16 weights (without
# --fp4-param-gather). GEMM inputs are saved for backward quantized (0.5625 bytes). Casting an input reads it in
# 16 bits and writes the row-wise copy (fprop / dgrad); the column-wise copy the wgrad GEMM reads first goes
# through the 16-point random Hadamard transform (the paper's Sec. 4.2: Wgrad inputs only), priced as a second
# elementwise pass that reads the 16-bit tensor again: 2 x (2 + 0.5625) = 5.125 bytes per element (TE's fused
# RHT-cast kernel would save one 2-byte read: the price is the unfused upper bound). The paper keeps ~16 % of the
# linear layers in BF16 (its 12B run: the first 2 and last 8 of 62 blocks) and torchtitan's NVFP4 recipe the last
# 15 % of decoder blocks; Megatron-LM and Megatron-Bridge's bf16_with_nvfp4_mixed keep none by default (the
# recipe of their published NVFP4 throughput tables): `nvfp4` prices that default, bf16_gemm_share 0.
NVFP4_OPERAND_BYTES = 0.5 + 1 / 16
NVFP4 = Precision("nvfp4", peak="nvfp4", weight_bytes=2, grad_bytes=4, master_bytes=4, optimizer_bytes=8,
                  activation_bytes=2, gemm_input_bytes=NVFP4_OPERAND_BYTES, weight_cache_bytes=2 * NVFP4_OPERAND_BYTES,
                  quantize_bytes=2 * (BF16_BYTES + NVFP4_OPERAND_BYTES), mfu_peak="bf16")
PRECISIONS: dict[str, Precision] = {p.name: p for p in (BF16, FP16, FP8, MXFP8, NVFP4)}


# training.grad_reduce_dtype: bytes of a main_grad value. fp16: Megatron-LM sets
# accumulate_allreduce_grads_in_fp32 only for --bf16 (megatron/training/arguments.py), and Megatron-Core
# DDP's grad buffer is torch.float if grad_reduce_in_fp32 else param.dtype (distributed_data_parallel.py):
# an --fp16 run without --accumulate-allreduce-grads-in-fp32 keeps 2-byte gradients.
GRAD_REDUCE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


# Per-tensor FP8 scaling recipes (Megatron --fp8-recipe): delayed scales by the amax history and reads a
# tensor once to cast it; tensorwise (current scaling) first reads it for its amax, "a significant overhead
# compared to other recipes" (Transformer Engine docs/features/low_precision_training/fp8_current_scaling.rst):
# 2 bytes more a 16-bit element; blockwise (1x128 / 128x128) reduces each tile's amax inside the cast (one read).
FP8_RECIPE_EXTRA_READ_BYTES = {"delayed": 0.0, "tensorwise": 2.0, "blockwise": 0.0}


def precision(name: str, fp8_param_gather: bool = False, grad_reduce_dtype: str = "fp32",
              fp8_recipe: str = "delayed", amax_fused: bool = False) -> Precision:
    """The record of a training precision. With `fp8_param_gather` (Megatron --fp8-param-gather) the
    parameters themselves are FP8: 1 byte each instead of the 16-bit copy; MXFP8 still keeps its
    column-wise copy (1 + 1/32 bytes). Only per-tensor FP8 is gathered in FP8 (1 byte): Megatron-Core
    gathers MXFP8 parameters in BF16 into the reused gradient buffer, 2 bytes (Megatron-LM
    core_r0.17.0 megatron/core/distributed/param_and_grad_buffer.py, reuse_grad_buf_for_mxfp8_param_ag:
    "only half of the buffer is used to store params in bf16"). `grad_reduce_dtype` bf16 (Megatron-Core
    DDP grad_reduce_in_fp32=False, Megatron-LM --grad-reduce-in-bf16): the main_grad buffer and the
    data-parallel reduce(-scatter) are BF16, 2 bytes per parameter instead of 4. `amax_fused`: the
    recipe's amax read is fused into the cast (torch.compile over torchao's current scaling), so the
    cast reads the tensor once whatever the recipe."""
    rec = PRECISIONS[name]
    extra_read_bytes = 0.0 if amax_fused else FP8_RECIPE_EXTRA_READ_BYTES[fp8_recipe]
    if rec.name == "fp8" and extra_read_bytes:
        rec = replace(rec, quantize_bytes=rec.quantize_bytes + extra_read_bytes)
    if grad_reduce_dtype != "fp32":
        rec = replace(rec, grad_bytes=GRAD_REDUCE_BYTES[grad_reduce_dtype])
    if not fp8_param_gather or not rec.is_fp8:
        return rec
    if rec.name == "fp8":
        return replace(rec, weight_bytes=1, weight_cache_bytes=rec.weight_cache_bytes - 1, param_gather_bytes=1)
    return replace(rec, weight_bytes=1, weight_cache_bytes=1 + 1 / 32)
