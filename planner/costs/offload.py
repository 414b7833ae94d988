"""Host-memory offload of optimizer states and of activations (the `offload` axis): what leaves the
GPU, what it costs in time over the host link and on the CPU, and what it takes of host memory.

Optimizer offload (ZeRO-Offload, Ren et al. 2021 Sec. 4; Megatron Core's HybridDeviceOptimizer,
--optimizer-cpu-offload --optimizer-offload-fraction 1.0; DeepSpeed zero_optimization.offload_optimizer):
the fp32 master weights and Adam moments of this GPU's shard (12 B per parameter under mixed precision,
sharded as the ZeRO stage says) live in host memory beside an fp32 copy of the gradients the CPU step
reads (4 B). Each step moves the shard's gradients GPU -> host and its updated 16-bit weights host -> GPU
over the host link, and runs Adam on the CPU. The three overlap per parameter group (Megatron
--overlap-cpu-optimizer-d2h-h2d; ZeRO-Offload's pipelined CPU step), so the step pays the slowest of them.
The gradients stay on the GPU, where the data-parallel reduce runs (Megatron's main_grad buffers).

Activation offload (Megatron Core / Transformer Engine --cpu-offloading, DeepSpeed cpu_checkpointing):
each layer's stored activations go to host memory during its forward and come back for its backward,
asynchronously: a layer's copy hides behind that layer's compute up to the link's bandwidth, so a
micro-batch pays max(0, bytes / bandwidth - forward) + max(0, bytes / bandwidth - backward) per
offloaded layer. As the frameworks run it, a NUMBER of layers is offloaded (TransformerConfig
cpu_offloading_num_layers, at most num_layers - 1; Megatron-Bridge's Llama 3 70B FP8 recipes on 64
GB300/GB200 offload 20/40 of 80): a rank of L layers offloading N keeps (L - N) / L of its stored
activations. Unless the model states the count (training.offload_layers), it is the fewest layers that
bring the rank holding the most under the GPU's memory less the job's memory headroom (offload_layer_count;
the user's --memory-headroom, FIT_HEADROOM where the caller states none).
"""
from __future__ import annotations

import numpy as np

from planner.specs.precision import FP32_BYTES
from planner.units import GB

OPTIMIZER, ACTIVATIONS, BOTH = 1, 2, 3  # stored values of the axis (planner/layout/axes.py OFFLOADS)

# Pinned-memory copies over PCIe reach about 0.85 of the quoted per-direction rate: 128b/130b encoding
# is in the 63 of Gen5's "64 GB/s", TLP headers on 256-B payloads leave 256/280 = 0.91, DMA gaps the
# rest (~50-55 GB/s measured on Gen5 x16, ~26 on Gen4 x16). Bounds: 0.7-0.95.
HOST_LINK_EFFICIENCY = 0.85
# Bytes the CPU's Adam step moves per parameter: reads the fp32 gradient, master weight and two moments
# (16 B), writes the weight and the moments (12 B) and the 16-bit weight the GPU gets back (2 B).
# The step is bound by host memory bandwidth (AVX-512 FMAs outpace DDR5 at 4 flops / 30 B).
CPU_ADAM_BYTES_PER_PARAM = 30.0
# Host memory the job cannot use: the OS, data-loader workers, pinned staging buffers, page cache.
HOST_MEMORY_RESERVE = 0.1
# The headroom the offloaded layer count leaves free on the GPU when the caller states none (a job
# context's memory_headroom; calibration and benchmark replays): the memory constraint's default
# (planner/constraints/hardware.py, --memory-headroom 0.05). Search, estimate, plan files, sweeps and
# replan pass the user's --memory-headroom, so the count fits the limit the constraint checks.
FIT_HEADROOM = 0.05


def count_headroom(memory_headroom: float) -> float:
    """The headroom the offloaded-layer count leaves: the user's --memory-headroom, or FIT_HEADROOM
    where it is off (0: a library call with a bare Limits()), the default a bare score() uses too."""
    return memory_headroom if memory_headroom else FIT_HEADROOM


def optimizer_offloaded(layouts) -> np.ndarray:
    return (layouts.offload == OPTIMIZER) | (layouts.offload == BOTH)


def activations_offloaded(layouts) -> np.ndarray:
    return (layouts.offload == ACTIVATIONS) | (layouts.offload == BOTH)


def host_link_bytes_per_s(node, gpus) -> np.ndarray:
    """Achieved GPU <-> host bandwidth per GPU per direction [B/s]: the link's, or the node's host memory
    bandwidth shared by the job's GPUs on it (`gpus`: the job's, per layout) copying both ways at once,
    whichever is less (8 H100s on Gen5 x16 would move 8 x 2 x 54 = 870 GB/s, more than the DGX H100's
    614 GB/s of DDR5)."""
    per_node = np.minimum(node.gpus, gpus)
    return np.minimum(node.host_link_gbps * GB * HOST_LINK_EFFICIENCY, node.host_memory_gbps * GB / (2 * per_node))


def optimizer_step_s(shard_params, node, gpus, prec) -> np.ndarray:
    """Seconds of an offloaded optimizer step of `shard_params` parameters per GPU: the slowest of the
    gradients' copy to the host, the CPU Adam step (the node's memory bandwidth shared by its GPUs of
    the job, `gpus` per layout) and the weights' copy back, which overlap per parameter group."""
    link = host_link_bytes_per_s(node, gpus)
    per_node = np.minimum(node.gpus, gpus)
    d2h = shard_params * prec.grad_bytes / link
    h2d = shard_params * prec.weight_bytes / link
    cpu = shard_params * CPU_ADAM_BYTES_PER_PARAM / (node.host_memory_gbps * GB / per_node)
    return np.maximum(np.maximum(d2h, h2d), cpu)


def host_optimizer_bytes(shard_params, prec) -> np.ndarray:
    """Host bytes of an offloaded optimizer shard: master weights and moments, and the fp32 gradients."""
    return shard_params * (prec.optimizer_state_bytes + FP32_BYTES)


def activation_exposed_s(layer_bytes, fwd_s, bwd_s, node, gpus) -> np.ndarray:
    """Seconds per layer per micro-batch an offloaded layer's copies add: each direction's copy
    hides behind that layer's forward (to the host) or backward (back to the GPU)."""
    copy_s = layer_bytes / host_link_bytes_per_s(node, gpus)
    return np.maximum(copy_s - fwd_s, 0.0) + np.maximum(copy_s - bwd_s, 0.0)


def offloaded_layers(count, layers) -> np.ndarray:
    """Layers a rank of `layers` layers offloads when the layout offloads `count`: at most all but
    one (Megatron Core asserts cpu_offloading_num_layers < num_layers, transformer_config.py)."""
    return np.clip(np.minimum(count, layers - 1), 0, None)


def offload_layer_count(total_bytes, act_bytes, layers, usable_bytes) -> np.ndarray:
    """The fewest layers to offload so that every rank fits `usable_bytes` ((k, n) ranks by layouts,
    before activation offload): a rank sheds act_bytes / layers per layer offloaded, so it needs
    ceil(excess / that); the layout's count is its ranks' most, between 1 (an offloading layout
    offloads something; none is another layout) and the most layers a rank holds - 1."""
    layers = np.maximum(layers, 1)
    per_layer = act_bytes / layers
    excess = np.maximum(total_bytes - usable_bytes, 0.0)
    need = np.ceil(np.divide(excess, per_layer, out=np.zeros(np.broadcast(excess, per_layer).shape),
                             where=per_layer > 0))
    need = np.atleast_2d(np.broadcast_to(need, np.broadcast(need, layers).shape))
    most = np.atleast_2d(np.broadcast_to(layers, need.shape)).max(axis=0)
    return np.clip(need.max(axis=0), 1, np.maximum(most - 1, 1)).astype(np.int64)
