"""Cited bounds of every constant a calibration may fit (benchmarks/calibrate.py over the published
runs, `plan calibrate` over a user's own): one declaration for both. A fit never leaves these ranges;
a fit that lands on one says so."""
from __future__ import annotations

# Collective latencies are not fitted: they come from NCCL's own tuning model (the GPU presets).
# GEMM efficiency is bounded by what large, wave-aligned GEMMs reach in the vendors' own benchmarks
# (cuBLASLt: ~75-80 % of the dense peak in FP8 on Hopper and Blackwell): on a handful of runs the
# FP8 efficiency otherwise absorbs what the model lacks elsewhere (it went to 0.94 on Mixtral's).
# Collective and attention efficiencies are bounded below by what the published kernels reach: NCCL's
# large-message bus bandwidth is 75-95 % of the NVLink or NIC rate on DGX A100/H100 (nccl-tests
# PERFORMANCE.md and NVIDIA's published DGX figures; 0.7 and 0.6 leave room for RoCE and EFA
# fabrics), FlashAttention-2's forward 35-50 % of the H100's peak and 50-70 % of the A100's (Dao 2023,
# Fig. 5-6; 0.3 below both). Without these bounds, a refit with torchtitan's and NeMo's long-context
# runs put the H100's NVLink at 0.58, its network at 0.46 and flash attention at 0.26: what those
# runs lack was absorbed by the hardware and carried to every Megatron run on the H100.
HARDWARE = {
    "gemm": (0.3, 1.0), "gemm_fp8": (0.2, 0.8), "gemm_half_gflop": (0.0, 20.0), "hbm": (0.5, 0.95), "flash_attention": (0.3, 0.9),
    "nvlink": (0.7, 0.95), "network": (0.6, 0.95), "message_half_mb": (0.0, 8.0),
}
# The loss's passes over the logits are counted in each stack's code (its profile), not fitted: fitted,
# they ranged from 1 to 25 as they absorbed other errors, and carried 25 over to runs whose loss is large.
STACK = {"layer_overhead_us": (0.0, 300.0), "layer_launch_us": (0.0, 1000.0), "microbatch_overhead_us": (0.0, 5000.0),
         "step_overhead_s": (0.0, 1.0)}
# Megatron-Core's fixed cost a step is below its shortest published step: MLPerf Training's Llama 3.1
# 8B runs of 0.085-0.5 s a step (NeMo/Megatron-Core with CUDA graphs; issue 29). Fitted on the dgxc runs
# alone it reached 0.337 s, a third of a 1B model's step: what it stood in for was not per step.
STACK_EXTRA = {"megatron-core": {"tp_overlap_exposed": (0.0, 1.0), "step_overhead_s": (0.0, 0.085)},
               "pytorch-fsdp": {"zero3_unit_overhead_us": (0.0, 3000.0)},
               "torchtitan": {"zero3_unit_overhead_us": (0.0, 3000.0)},
               "deepspeed-zero3": {"zero3_unit_overhead_us": (0.0, 3000.0)}}
# Memory a GPU holds beside the states and activations (the GPU preset's memory_reserve_gib): the CUDA
# context (0.3-0.7 GiB), NCCL's buffers (NCCL_BUFFSIZE 4 MiB a channel a peer, NCCL's environment
# docs: 1-2 GiB on an 8-GPU node) and the caching allocator's fragmentation (PyTorch's CUDA memory
# notes: expandable_segments exists for the fragmentation of varying shapes). More than 16 GiB is a
# memory model that is wrong for this job, not a reserve.
MEMORY = {"memory_reserve_gib": (0.0, 16.0)}


def stack_bounds(stack: str) -> dict[str, tuple[float, float]]:
    """The stack constants a calibration may fit for a stack profile, with their bounds."""
    return {**STACK, **STACK_EXTRA.get(stack, {})}
