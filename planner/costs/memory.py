"""Memory per GPU of each pipeline rank: weights, gradients, optimizer states, activations, other.

Sources:
- Mixed-precision Adam keeps weights, fp32 gradients (Megatron's main_grad) and fp32 master
  weights + two moments per parameter (planner/specs/precision.py: 18 bytes in bf16/fp16), which
  reproduces Korthikanti et al. 2022 Fig. 1 exactly. ZeRO stages shard them over dp (Rajbhandari
  et al. 2020, Sec. 5: stage 1 optimizer states, 2 + gradients, 3 + parameters).
- ZeRO-3 also holds the parameters it has gathered and gradients awaiting their reduce-scatter,
  by the stack's gathering granularity (zero3_transient_params).
- Activations per layer (Korthikanti et al. 2022, Eq. 2-6, Table 2, in bytes of 16-bit tensors
  and 1-byte masks): s b h (10 + 24/t + 5 a s/(h t)) with tp, s b h (34/t + 5 a s/(h t)) with
  tp + sp, the 5as/h term dropped by selective recomputation, 2 s b h (/t with sp) with full
  recomputation. Generalised here to GQA and SwiGLU by counting the stored tensors of Sec. 4.1.
- In-flight micro-batches and what each rank holds: planner/costs/pipeline_ranks.py.
The breakdown of a layout is that of its heaviest rank; `memory_per_rank` gives every rank asked for.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.specs.layers import LayerKind, attention_dims, eager_clamp, layer_kinds
from planner.specs.precision import BF16_BYTES, FP32_BYTES
from planner.layout.space import RECOMPUTE_FULL, RECOMPUTE_NONE, RECOMPUTE_SELECTIVE
from planner.specs import ModelSpec
from planner.units import GIB
from planner.costs import offload, recompute
from planner.costs.compute import op_level_sac, routed_rows
from planner.costs.context import JobContext
from planner.costs.schedules import activation_factor, parameter_copies
from planner.costs.pipeline_ranks import (PipelineRanks, default_in_flight, held_layers, heaviest, layers_in_flight, per_schedule, pick_each, pipeline_ranks,
                                          rank_param_split)

__all__ = ["MemoryBreakdown", "activation_bytes_per_layer", "cp_ring_backward_bytes", "layers_in_flight", "rank_params",
           "parameters_per_gpu", "expert_data_parallel",
           "memory_per_rank", "memory_breakdown"]


@dataclass(frozen=True)
class MemoryBreakdown:
    """GiB per GPU (arrays over layouts, or over (rank, layout))."""

    weights: np.ndarray
    gradients: np.ndarray
    optimizer: np.ndarray
    activations: np.ndarray
    other: np.ndarray
    # Host memory this GPU's offloaded states and activations take (planner/costs/offload.py): not in
    # `total`, which is the GPU's; 0 without offload.
    host: np.ndarray | float = 0.0
    # Layers whose activations go to the host (a count, not GiB; planner/costs/offload.py
    # offload_layer_count): 0 where the layout does not offload activations.
    offload_layers: np.ndarray | int = 0

    @property
    def total(self) -> np.ndarray:
        return self.weights + self.gradients + self.optimizer + self.activations + self.other


def activation_bytes_per_layer(model: ModelSpec, layouts, kind: LayerKind | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Stored activations of one layer for one micro-batch on one GPU [bytes], and those of the
    layer rebuilt during full recomputation. GEMM inputs are kept as the GEMMs read them (FP8:
    1 byte, NVFP4: 0.5625, Transformer Engine; 2 in layers a recipe keeps in BF16); context parallelism divides every per-token tensor by cp."""
    kind = kind or layer_kinds(model)[0]
    if kind.sublayer:
        return _sublayer_activation_bytes(model, layouts, kind)
    g = model.training.numerics.stored_gemm_input_bytes
    d = attention_dims(model)
    t, c = layouts.tp.astype(float), layouts.cp.astype(float)
    sp = layouts.sequence_parallel == 1
    s, h = model.seq_len, model.hidden
    sb = s * layouts.micro_batch.astype(float) / c
    # Outside the tensor-parallel region: 2 LN inputs (4), QKV and MLP inputs (2 GEMM inputs), 2 dropout masks (2).
    replicated = (6.0 + 2 * g) * sb * h
    # with sp / tp, but for the GEMM inputs where the stack saves them gathered (tp_saves_gathered_inputs)
    gemm_inputs = 2 * g * sb * h * (1.0 if model.training.stack.tp_saves_gathered_inputs else 1.0 / t)
    replicated = np.where(sp, 6.0 * sb * h / t + gemm_inputs, replicated)
    # Q, K, V (16-bit, for the attention kernel), the attention-output GEMM input, MLP intermediates: split over tp.
    mlp_width = kind.mlp_width
    tp_region = (2.0 * (d.q_width + d.k_width + d.v_width) + g * d.out_width + _mlp_bytes(model, g) * mlp_width) * sb / t
    if kind.is_moe:
        tp_region = tp_region + _expert_activations(model, layouts, kind, g)
    if model.mla is not None:
        # MLA's latents (the up projections' inputs), on every tp rank: the compressed query and
        # key/value and the decoupled RoPE key (DeepSeek-V2 Sec. 2.1)
        mla = model.mla
        replicated = replicated + g * ((mla.q_lora_rank or 0) + mla.kv_lora_rank + mla.qk_rope_head_dim) * sb
    # softmax output, dropout mask and output (standard attention only); a sliding window's s x s too:
    # the unfused path masks the scores, it does not drop them (planner/costs/compute.py)
    scores = 5.0 * d.heads * s * sb / t
    keep_scores = (layouts.recompute == RECOMPUTE_NONE) & (model.training.attention == "standard")
    selective = layouts.recompute == RECOMPUTE_SELECTIVE
    if "core_attn" not in model.training.recomputed:  # the scores stay unless core_attn is recomputed
        keep_scores = keep_scores | (selective & (model.training.attention == "standard"))
    dropped = _recomputed_bytes(model, layouts, kind, g, sb, mlp_width)
    per_layer = replicated + tp_region + np.where(keep_scores, scores, 0.0) - np.where(selective, dropped, 0.0)
    checkpoint = np.where(sp, 2.0 * sb * h / t, 2.0 * sb * h)
    # The layer rebuilt during full recomputation stores everything, scores included.
    rebuilt = replicated + tp_region + (scores if model.training.attention == "standard" else 0.0)
    if op_level_sac(model, kind):
        # The op-level policy keeps its saved outputs; the backward rebuilds the rest of one layer
        # at a time, `rebuilt` beyond them (added like full recomputation's, _activation_bytes).
        kept = _op_sac_bytes(model, layouts, kind, sb, mlp_width)
        per_layer = np.where(selective, kept, per_layer)
        return np.where(layouts.recompute == RECOMPUTE_FULL, checkpoint, per_layer), np.where(
            selective, np.maximum(rebuilt - kept, 0.0), rebuilt)
    if recompute.by_method(model):
        # --recompute-method (planner/costs/recompute.py): uniform stores a checkpoint per group of N
        # layers and rebuilds a group at once; block checkpoints a fraction f of a chunk's layers, the
        # others store all (as `rebuilt`: without recomputation).
        f = recompute.full_fraction(model, layouts)
        checkpoint = f * checkpoint * recompute.checkpoints_per_layer(model, layouts) + (1.0 - f) * rebuilt
        rebuilt = rebuilt * recompute.rebuilt_layers(model, layouts)
    return np.where(layouts.recompute == RECOMPUTE_FULL, checkpoint, per_layer), rebuilt


def _sublayer_activation_bytes(model: ModelSpec, layouts, kind: LayerKind) -> tuple[np.ndarray, np.ndarray]:
    """activation_bytes_per_layer of a hybrid model's layer (planner/specs/hybrid.py): its pre-norm's
    input (2 B), the input projection's input (g) and the dropout mask (1) per s b h, / tp with
    sequence parallelism; split over tp, per token:
    - attention: Q, K, V for the kernel (2 B each), the output gate's sigmoid input with one (2 B
      per query channel), the output projection's input (g); scores with standard attention;
    - Mamba-2 / DeltaNet: the input projection's output (z, x, B, C, dt / q, k, v, z, beta, alpha;
      2 B), the conv1d's output (2 B), the scan's output y (2 B) and the output projection's input
      (g); mamba_ssm's and flash-linear-attention's autograd functions keep these and recompute the
      chunk states in the backward (the recurrent state is not stored);
    - MLP: its intermediates (as a transformer layer's), MoE: the experts' too.
    Full recomputation stores the layer's input, 2 s b h (/ tp with sp), and rebuilds one layer."""
    g = model.training.numerics.stored_gemm_input_bytes
    t, c = layouts.tp.astype(float), layouts.cp.astype(float)
    sp = layouts.sequence_parallel == 1
    s, h = model.seq_len, model.hidden
    sb = s * layouts.micro_batch.astype(float) / c
    replicated = np.where(sp, (3.0 + g) * sb * h / t, (3.0 + g) * sb * h)
    scores = 0.0
    if kind.mixer == "attention":
        d = attention_dims(model)
        gate = 2.0 * d.q_width if model.attention_output_gate else 0.0
        tp_region = (2.0 * (d.q_width + d.k_width + d.v_width) + gate + g * d.out_width) * sb / t
        if model.training.attention == "standard":
            scores = 5.0 * d.heads * s * sb / t
    elif kind.mixer in ("mamba", "deltanet"):
        m = model.mamba if kind.mixer == "mamba" else model.deltanet
        conv = m.conv_channels if kind.mixer == "mamba" else 2 * m.qk_dim + m.v_dim
        width = m.d_inner if kind.mixer == "mamba" else m.v_dim
        tp_region = (2.0 * m.in_proj_width + 2.0 * conv + (2.0 + g) * width) * sb / t
    else:
        tp_region = _mlp_bytes(model, g) * kind.mlp_width * sb / t
        if kind.is_moe:
            tp_region = tp_region + _expert_activations(model, layouts, kind, g)
    # standard attention's scores stay unless recomputed (selective: core_attn)
    keep_scores = (layouts.recompute == RECOMPUTE_NONE) | ((layouts.recompute == RECOMPUTE_SELECTIVE)
                                                          & ("core_attn" not in model.training.recomputed))
    per_layer = replicated + tp_region + np.where(keep_scores, scores, 0.0)
    rebuilt = replicated + tp_region + scores
    checkpoint = np.where(sp, 2.0 * sb * h / t, 2.0 * sb * h)
    return np.where(layouts.recompute == RECOMPUTE_FULL, checkpoint, per_layer), rebuilt


def _op_sac_bytes(model: ModelSpec, layouts, kind: LayerKind, sb, mlp_width: int):
    """Stored bytes of one layer under torchtitan's op-level selective checkpointing
    (torchtitan/parallelisms/parallelize_llama.py@9dec370 _apply_ac_to_transformer_block, "op"):
    the outputs of aten.mm are saved except every second one in a layer, and those of SDPA and of
    the reduce-scatters; the checkpointed block keeps its input. The layer's matmuls run in the
    order wq, wk, wv, wo, w1, w3, w2 (SwiGLU; w1, w2 without the gate: models/llama/model.py), so
    wq, wv, w1 and w2 are kept: with tp, the column-parallel outputs over tp, the row-parallel w2
    output a full-width partial sum. SDPA keeps its output and fp32 log-sum-exp per head."""
    d = attention_dims(model)
    t, sp = layouts.tp.astype(float), layouts.sequence_parallel == 1
    h = model.hidden
    ffn = [(mlp_width, True), (mlp_width, True), (h, False)] if model.ffn_act == "swiglu" else [(mlp_width, True), (h, False)]
    mms = [(d.q_width, True), (d.k_width, True), (d.v_width, True), (h, False)] + ffn
    kept = sum(w / t if split else w * np.ones_like(t) for w, split in mms[::2])
    block_input = np.where(sp, h / t, h)
    scatters = np.where(sp & (t > 1), 2.0 * h / t, 0.0)  # the attention's and MLP's reduce-scatter outputs
    act = model.training.numerics.activation_bytes
    return act * sb * (kept + d.out_width / t + block_input + scatters) + FP32_BYTES * sb * d.heads / t


def _recomputed_bytes(model: ModelSpec, layouts, kind: LayerKind, g: float, sb, mlp_width: int):
    """Stored bytes a layer drops when selective recomputation rebuilds its modules (beyond
    core_attn's scores): the pre-MLP norm's output of a MoE layer (the experts' and router's input;
    a dense layer's norms are fused into the next GEMM, which keeps its input), a dense MLP's or the
    shared experts' intermediates, the experts' activation output (their fc2 input), MLA's
    up-projected Q, K and V (the latents stay)."""
    modules = model.training.recomputed
    t, sp = layouts.tp.astype(float), layouts.sequence_parallel == 1
    out = 0.0
    if "layernorm" in modules and kind.is_moe:
        out = out + np.where(sp, g * sb * model.hidden / t, g * sb * model.hidden)
    if ("mlp" in modules and not kind.is_moe) or ("shared_experts" in modules and kind.is_moe):
        out = out + _mlp_bytes(model, g) * mlp_width * sb / t
    if "moe" in modules and kind.is_moe:  # the whole MoE layer: only its input (the norm's output) stays
        out = out + _mlp_bytes(model, g) * mlp_width * sb / t + _expert_activations(model, layouts, kind, g)
    if "moe_act" in modules and kind.is_moe:
        # The activation runs under CheckpointWithoutOutput (Megatron-Core moe/experts.py
        # TEGroupedMLP.forward, activation_recompute): its input, the fc1 output, is kept; its output
        # (the fc2 input) is discarded after fc2, and nothing the function saves inside is stored,
        # an eager clamp's copies included (_expert_activations).
        rows, local = routed_rows(model, layouts)
        width = kind.expert[-1].k / layouts.etp.astype(float)
        out = out + rows * local * width * (g + _clamp_kept_bytes(model))
    if "mla_up_proj" in modules and model.mla is not None:
        d = attention_dims(model)
        out = out + 2.0 * (d.q_width + d.k_width + d.v_width) * sb / t
    return out


def _clamp_kept_bytes(model: ModelSpec) -> float:
    """Stored bytes per routed row and unit of expert width an eager SwiGLU clamp adds: the fc1 output kept for
    the clamps' backward beside the clamped copy the activation saves (2 x width 16-bit values)."""
    return 4.0 if eager_clamp(model) else 0.0


def _mlp_bytes(model: ModelSpec, gemm_input_bytes: float) -> float:
    """Stored bytes per row per unit of FFN width: the up (and gate) outputs in 16 bits and the
    down projection's input as its GEMM reads it (GeLU: 2 + 2, SwiGLU: 4 + 2 in BF16)."""
    return (4.0 if model.ffn_act == "swiglu" else 2.0) + gemm_input_bytes


def _expert_activations(model: ModelSpec, layouts, kind: LayerKind, g: float) -> np.ndarray:
    """Routed experts' stored tensors on one GPU: per routed row its dispatched input (a GEMM input),
    MLP intermediates over expert_ffn / etp and its output, kept for the weighted combine."""
    rows, local = routed_rows(model, layouts)
    width = kind.expert[-1].k / layouts.etp.astype(float)
    # An eager SwiGLU clamp (planner/costs/compute.py _eager_expert_bytes) keeps the fc1 output for
    # the clamps' backward beside the clamped copy the activation saves: 2 x width more 16-bit values.
    clamp = _clamp_kept_bytes(model) * width
    return rows * local * ((g + 2.0) * model.hidden + (_mlp_bytes(model, g) * width + clamp))


def cp_ring_backward_bytes(model: ModelSpec, layouts, stack, act_bytes: float) -> np.ndarray:
    """What context parallelism's attention backward holds on one GPU beyond the attention kernel's own
    buffers [bytes] (0 without cp), as torch's ring attention allocates them
    (torch/distributed/tensor/experimental/_attention.py, torch 2.6 / Dec 2024,
    _templated_ring_attention_backward, the rotate method torchtitan's context_parallel_rotate_method
    default "allgather" selects): with n = s b / cp tokens of this rank and the K/V widths over tp
    (repeated to every query head where the stack exchanges them so, cp_kv_expanded):
    - kv_rotater (_AllGatherRotater): torch.cat of the local K and V, all-gathered once from the cp ranks:
      (cp + 1) n (k + v) in the activations' dtype;
    - grad_query = zeros_like(query, float32) (_cp_options.convert_to_f32): 4 n q;
    - the K/V gradients in fp32 passed round the ring (dkv_rotater, ALL_TO_ALL permute_tensor): the
      received buffer they are accumulated into, its torch.cat sent on and the next one arriving,
      3 x 4 n (k + v)."""
    t, c = layouts.tp.astype(float), layouts.cp.astype(float)
    if not any(k.mixer == "attention" for k in layer_kinds(model)):  # a hybrid without attention layers
        return np.zeros_like(t)
    d = attention_dims(model)
    n = model.seq_len * layouts.micro_batch.astype(float) / c
    kv = (d.k_width + d.v_width) / t * (d.heads / d.kv_heads if stack.cp_kv_expanded else 1.0)
    ring = act_bytes * (c + 1) * n * kv + FP32_BYTES * n * d.q_width / t + 3 * FP32_BYTES * n * kv
    return np.where(c > 1, ring, 0.0)


def rank_params(model: ModelSpec, layouts, ranks: PipelineRanks) -> np.ndarray:
    """Unsharded parameters per GPU of each rank of `ranks` (rank_param_split, both parts)."""
    dense, experts = rank_param_split(model, layouts, ranks)
    return dense + experts


def parameters_per_gpu(model: ModelSpec, layouts) -> np.ndarray:
    """Unsharded parameters of the rank holding the most under the default split (before ZeRO
    sharding): its first and last ranks bound the others."""
    return rank_params(model, layouts, pipeline_ranks(model, layouts)).max(axis=0)


def expert_data_parallel(layouts) -> np.ndarray:
    """edp: replicas of each expert shard, tp*cp*dp / (ep*etp) (Megatron-Core parallel folding)."""
    return layouts.tp * layouts.cp * layouts.dp // (layouts.ep * layouts.etp)


def zero3_transient_params(model: ModelSpec, layouts, stack) -> tuple[np.ndarray, np.ndarray]:
    """Unsharded parameters ZeRO-3 holds at once per GPU, and unsharded gradients awaiting their
    reduce-scatter, by the stack's gathering granularity.
    - layer (PyTorch FSDP, one block per unit): the units in flight (the rate limiter keeps two
      all-gathers in flight, Zhao et al. 2023 Sec. 4.4) and one unit's gradients;
    - module (DeepSpeed stage 3): the largest weight matrix in flight plus the prefetch bucket
      (stage3_prefetch_bucket_size), and one reduce bucket of gradients (reduce_bucket_size),
      never more than a layer (Rajbhandari et al. 2020 Sec. 5.3; DeepSpeed ZeRO config docs)."""
    t = layouts.tp.astype(float)
    layer = np.max([k.tp_params / t + k.expert_params / (layouts.ep * layouts.etp) for k in layer_kinds(model)], axis=0)
    if stack.zero3_gather == "layer":
        return stack.zero3_units_in_flight * layer, layer
    largest = max(m.k * m.n for k in layer_kinds(model) for m in k.tp_matrices) / t
    gathered = np.minimum(stack.zero3_units_in_flight * largest + stack.zero3_prefetch_params, layer)
    bucket = np.minimum(stack.zero3_reduce_bucket_params or layer, layer)
    return gathered, bucket * np.ones_like(t)


def fsdp_held_params(model: ModelSpec, layouts, ranks: PipelineRanks, params: tuple, stack, gathered, bucket) -> tuple:
    """ZeRO-3's gathered parameters and unsharded gradients per GPU of each rank, with what FSDP2
    holds beyond its units in flight (stack settings):
    - zero3_root_unsharded: the root unit's embedding, final norm and output layer, which FSDP2
      does not reshard after the forward (torch.distributed _composable/fsdp _fsdp_state.py
      _lazy_init: "For the root, do not reshard after forward"), gathered forward through backward;
    - zero3_pp_unsharded, pp > 1: every parameter of the rank stays gathered (torchtitan apply_fsdp:
      reshard_after_forward=False with PP) and the gradients accumulate unsharded over the
      micro-batches (pipelining stage.py backward_maybe_with_nosync: set_requires_gradient_sync(False)
      until the last backward; FSDPParam.to_accumulated_grad_if_needed keeps them in reduce_dtype)."""
    if stack.zero3_root_unsharded:
        word = model.vocab * model.hidden
        output = model.output_params() or np.where(ranks.first, 0, word)  # as rank_param_split
        root = (ranks.first * word + ranks.last * output) / layouts.tp.astype(float) + ranks.first * (model.embedding_params() - word)
        gathered = gathered + root
    if stack.zero3_pp_unsharded:
        whole = params[0] + params[1]
        staged = layouts.pp > 1
        gathered, bucket = np.where(staged, np.maximum(gathered, whole), gathered), np.where(staged, whole, bucket)
    return gathered, bucket


def _shards(dense, experts, layouts) -> tuple:
    """(all parameters, their shards): dense parameters over dp*cp (Megatron's distributed
    optimizer), experts over their edp replicas; summed once for the three ZeRO stages."""
    return dense + experts, dense / (layouts.dp * layouts.cp) + experts / expert_data_parallel(layouts)


def _sharded(shards: tuple, stage: int, from_stage) -> np.ndarray:
    """Parameters-to-be of a state with ZeRO stage >= `stage` sharding it (dense + experts either
    way: the same sums as adding the selected dense and expert parts)."""
    whole, shard = shards
    return np.where(from_stage >= stage, shard, whole)


def _deepspeed_fp16_grad_bytes(shards: tuple, z) -> np.ndarray:
    """Gradient bytes of the DeepSpeed engine's fp16 optimizers (ZeRO 0-2), v0.5.10 (January 2022):
    - the model's fp16 param.grad, accumulated over the micro-batches: every parameter below ZeRO-2,
      the partition with it (stage_1_and_2.py partition_gradients);
    - ZeRO-1/2 step (stage_1_and_2.py step): the fp16 gradients outside the partition freed
      (free_grad_in_param_list(params_not_in_partition)), then self.flatten(averaged_gradients).to(fp32):
      the partition's fp16 gradients, a flat fp16 copy and its fp32 cast, 2 + 2 + 4 B over dp;
    - ZeRO-0 step (fp16/fused_optimizer.py FP16_Optimizer.step): _flatten_dense_tensors([p.grad.to(fp32)
      for p in group]) before p.grad = None: the fp16 gradients, an fp32 copy of each and their flat fp32
      concatenation, 2 + 4 + 4 B a parameter.
    The larger of the backward's and the step's, beside the activations (whose blocks the caching
    allocator keeps at the step)."""
    whole, shard = shards
    backward = 2.0 * np.where(z >= 2, shard, whole)
    return np.maximum(backward, np.where(z == 0, 10.0 * whole, 8.0 * shard))


def memory_per_rank(job: JobContext) -> MemoryBreakdown:
    """The breakdown of each rank of `job.ranks` ((k, n) arrays)."""
    *parts, host = _bytes_per_rank(job)
    return MemoryBreakdown(*(x / GIB for x in parts), host=host / GIB, offload_layers=offload_layers_of(job))


def _bytes_per_rank(job: JobContext, offload_activations: bool = True, movable: bool = False) -> tuple:
    """(weights, gradients, optimizer, activations, other, host) of each rank of `job.ranks` [bytes]:
    the parameter split and the layer rows are the ones the step time reads (job context).
    `offload_activations`: False gives the activations before their offload (what sets its count); `movable`:
    a 7th item, the stored layers' activations (what offload moves: a rebuilt layer stays on the GPU)."""
    model, gpu, layouts, ranks, prec = job.model, job.gpu, job.layouts, job.ranks, job.numerics
    z = layouts.zero
    # DualPipe holds both directions' stages: two copies of the parameters (planner/costs/schedules.py).
    shards = tuple(x * parameter_copies(layouts.schedule) for x in _shards(*job.params, layouts))
    # FP8 weight copies (planner/specs/precision.py) sit beside the 16-bit weights and shard with them,
    # where the stack caches them (fp8_weight_cache).
    weight_bytes = prec.weight_bytes + (prec.weight_cache_bytes if job.profile.fp8_weight_cache else 0.0)
    weights = _sharded(shards, 3, z) * weight_bytes
    if job.profile.zero3_master_is_param:
        # FSDP keeps the shard in full precision, the master the optimizer states count (torch
        # fsdp MixedPrecision: "Outside forward and backward, the sharded parameters are kept in full
        # precision"; FSDP2's MixedPrecisionPolicy casts at the all-gather): no 16-bit shard.
        weights = np.where(z >= 3, 0.0, weights)
    grads = _sharded(shards, 2, z) * prec.grad_bytes
    if job.profile.deepspeed_fp16_grads and prec.name == "fp16":
        grads = np.where(z >= 3, grads, _deepspeed_fp16_grad_bytes(shards, z))
    optim = _sharded(shards, 1, z) * prec.optimizer_state_bytes
    gathered, unit = zero3_transient_params(model, layouts, job.profile)
    gathered, bucket = fsdp_held_params(model, layouts, ranks, job.params, job.profile, gathered, unit)
    weights = weights + np.where(z >= 3, gathered * weight_bytes, 0.0)
    grads = grads + np.where(z >= 3, bucket * prec.grad_bytes, 0.0)
    if job.profile.zero3_grad_copy_in:
        # FSDP2 foreach_reduce: the reduce-scatter input (reduce_dtype fp32, one unit) is filled from the
        # unit's gradients, freed "Only after the copy-in finishes": beside the fp32 input (bucket above)
        # the 16-bit autograd gradients; under pp the input beside the accumulated fp32 gradients
        staged = job.profile.zero3_pp_unsharded & (layouts.pp > 1)
        grads = grads + np.where(z >= 3, unit * np.where(staged, prec.grad_bytes, BF16_BYTES), 0.0)
    stored, rebuilt = _activation_bytes(model, layouts, ranks, job.rows, split=True)
    factor = activation_factor(layouts.schedule, layouts.pp, layouts.vpp)
    acts = (stored + rebuilt) * factor
    stored = stored * factor
    held = _loss_and_ring_bytes(job)
    other = gpu.memory_reserve_gib * GIB + held
    host = np.zeros(len(layouts))
    off_optim, off_acts = offload.optimizer_offloaded(layouts), offload.activations_offloaded(layouts)
    if off_optim.any():  # the optimizer states on the host; the GPU keeps weights and gradients
        host = host + np.where(off_optim, offload.host_optimizer_bytes(_sharded(shards, 1, z), prec), 0.0)
        optim = np.where(off_optim, 0.0, optim)
    if off_acts.any() and offload_activations:  # the offloaded layers' share of each rank's activations on the host
        layers = np.maximum(ranks.layers, 1)
        moved = np.where(off_acts, stored * offload.offloaded_layers(offload_layers_of(job), layers) / layers, 0.0)
        host = host + moved
        acts = acts - moved
    return (weights, grads, optim, acts, other, host) + ((stored,) if movable else ())


def _loss_and_ring_bytes(job: JobContext) -> np.ndarray:
    """What each rank of `job.ranks` holds beside its layers' activations [bytes]: the loss's logits on
    the last rank, torch's ring-attention buffers under context parallelism (cp_ring_buffers)."""
    model, layouts, ranks, prec = job.model, job.layouts, job.ranks, job.numerics
    t = layouts.tp.astype(float)
    # The last rank also holds the logits in 16 bits plus their fp32 copy inside the
    # vocab-parallel cross-entropy (positive: times `last` is where(last, logits, 0), faster),
    # or what the stack's loss holds at its peak (loss_logit_bytes).
    per_logit = job.profile.loss_logit_bytes or (prec.activation_bytes + FP32_BYTES)
    if job.profile.loss_parallel_logit_bytes:
        per_logit = np.where(layouts.tp > 1, job.profile.loss_parallel_logit_bytes, per_logit)
    logits = per_logit * model.seq_len * layouts.micro_batch * model.vocab / (t * layouts.cp)
    if job.profile.tp_saves_gathered_inputs:
        # the output layer's ColwiseParallel(input_layouts=Shard(1)) gathers the final norm's output and saves it
        gathered = (layouts.sequence_parallel == 1) & (layouts.tp > 1)
        logits = logits + np.where(gathered, prec.activation_bytes * model.seq_len * layouts.micro_batch * model.hidden / layouts.cp, 0.0)
    held = logits * ranks.last
    if job.profile.cp_ring_buffers:
        # The ring's buffers live in a layer's backward; the loss's logits in the loss's backward before
        # it: the last rank holds the larger of the two, the others the ring's
        ring = cp_ring_backward_bytes(model, layouts, job.profile, prec.activation_bytes)
        held = np.where(ranks.last, np.maximum(logits, ring), ring)
    return held


def offload_layers_of(job: JobContext) -> np.ndarray:
    """activation_offload_layers(job), computed once per job: the memory and the step's copies both read it."""
    if "offload_layers" not in job.derived:
        job.derived["offload_layers"] = activation_offload_layers(job)
    return job.derived["offload_layers"]


def activation_offload_layers(job: JobContext) -> np.ndarray:
    """Layers each layout offloads the activations of (0 where it does not): the model's
    training.offload_layers, or the fewest that fit the GPU's memory less the job's memory headroom."""
    off = offload.activations_offloaded(job.layouts)
    count = np.zeros(len(job.layouts), dtype=np.int64)
    if not off.any():
        return count
    stated = job.model.training.offload_layers
    if stated is not None:  # at most the layers - 1 of the rank holding the most (Megatron's bound)
        most = np.broadcast_to(job.ranks.layers, np.broadcast(job.ranks.layers, count).shape)
        most = np.atleast_2d(most).max(axis=0)
        count[off] = np.maximum(np.minimum(stated, most - 1), 0)[off]
        return count
    weights, grads, optim, acts, other, _, stored = _bytes_per_rank(job, offload_activations=False, movable=True)
    usable = job.gpu.memory_gib * (1.0 - job.memory_headroom) * GIB
    need = offload.offload_layer_count(weights + grads + optim + acts + other, stored, job.ranks.layers, usable)
    count[off] = need[off]
    return count


def _activation_bytes(model: ModelSpec, layouts, ranks: PipelineRanks, rows: tuple | None = None,
                      split: bool = False) -> np.ndarray | tuple:
    """Stored activations of each rank [bytes]: each kind's layers in flight, and the layer rebuilt
    by full recomputation. `rows`: (first, inverse) of rows alike in tp, cp, micro-batch, sequence
    parallelism, recomputation, ep and etp (all a layer's activations read): computed on the first."""
    acts = 0.0
    rebuilt_max = 0.0
    kinds = layer_kinds(model)
    flying = _in_flight_by_kind(model, layouts, ranks, kinds)
    holding = held_layers(ranks, [k.is_moe for k in kinds])
    for kind, in_flight, held in zip(kinds, flying, holding):
        if rows is None or rows[0].size == len(layouts):
            stored, rebuilt = activation_bytes_per_layer(model, layouts, kind)
        else:
            few = activation_bytes_per_layer(model, layouts.take(rows[0]), kind)
            stored, rebuilt = (x[rows[1]] for x in few)
        if len(kinds) == 1:
            acts, rebuilt_max = stored * in_flight, rebuilt
            break
        acts = acts + stored * in_flight
        rebuilt_max = np.maximum(rebuilt_max, np.where(held > 0, rebuilt, 0.0))
    # Full recomputation rebuilds one layer's activations at a time during backward (so does an
    # op-level selective policy, beyond what it keeps).
    rebuilds = layouts.recompute == RECOMPUTE_FULL
    if any(op_level_sac(model, k) for k in kinds):
        rebuilds = rebuilds | (layouts.recompute == RECOMPUTE_SELECTIVE)
    rebuilt = np.where(rebuilds, rebuilt_max, 0.0)
    return (acts, rebuilt) if split else acts + rebuilt


def _in_flight_by_kind(model: ModelSpec, layouts, ranks: PipelineRanks, kinds) -> list[np.ndarray]:
    """Layer-activations in flight at each rank's peak, per kind of layer (one kind: all of them).
    An explicit split counts them chunk by chunk; the default split shares a rank's out over its
    kinds of layer, once per distinct schedule (planner/costs/pipeline_ranks.py per_schedule)."""
    if ranks.by_kind is not None and ranks.in_flight is None:  # a hybrid model: shared out by each kind's layers
        in_flight = default_in_flight(model, layouts, ranks)
        return [in_flight * held / np.maximum(ranks.layers, 1) for held in ranks.by_kind]
    if ranks.in_flight is not None:
        if len(kinds) == 1:
            return [ranks.in_flight]
        return [ranks.in_flight_moe if k.is_moe else ranks.in_flight - ranks.in_flight_moe for k in kinds]

    def shares(lay, r: PipelineRanks) -> list[np.ndarray]:
        in_flight = layers_in_flight(model, lay, r.rank, r.layers)
        if len(kinds) == 1:
            return [in_flight]
        return [in_flight * (r.moe_layers if k.is_moe else r.layers - r.moe_layers) / np.maximum(r.layers, 1)
                for k in kinds]

    return per_schedule(layouts, ranks, shares)


def memory_breakdown(job: JobContext) -> MemoryBreakdown:
    """The breakdown of each layout's heaviest rank among `job.ranks` (by default the first and
    the last, which bound the others; see planner/costs/pipeline_ranks.py)."""
    *parts, host = _bytes_per_rank(job)
    parts = np.broadcast_arrays(*parts)
    weights, grads, optim, acts, other = parts
    # In bytes, then GiB: dividing by a power of two is exact, so the heaviest rank and the picked
    # values are those of memory_per_rank's totals, with 5 divisions of (n,) instead of (k, n).
    index = heaviest(weights + grads + optim + acts + other)
    # Host bytes: the most any rank of the layout offloads (every GPU of a node may hold that rank).
    host = np.broadcast_to(host, weights.shape).max(axis=0) if np.ndim(host) == 2 else host
    return MemoryBreakdown(*(x / GIB for x in pick_each(parts, index)), host=host / GIB,
                           offload_layers=offload_layers_of(job))
