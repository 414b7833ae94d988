"""Software-stack profiles: the constants a training stack adds to the hardware, overall and per GPU."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, Strict, model_validator

from planner.specs.base import Spec
from planner.units import US


class StackConstants(Spec):
    """What a software stack does, as constants (planner/costs): per-GPU fitted values override
    the profile's own (`StackSpec.gpus`)."""

    layer_overhead_us: float = Field(ge=0, le=1e5, description="fixed time per transformer layer forward (launches, small ops) [us]")
    layer_launch_us: float = Field(default=0.0, ge=0, le=1e5, description=(
        "host time to launch one layer's forward kernels [us]: a layer's compute never takes less "
        "(small layers are launch-bound; backward launches twice as many)"))
    microbatch_overhead_us: float = Field(default=0.0, ge=0, le=1e6, description=(
        "fixed time per micro-batch per model chunk on a pipeline rank (schedule, p2p setup, hooks) [us]"))
    step_overhead_s: float = Field(ge=0, le=100, description="fixed time per optimizer step (data loading, grad norm, logging) [s]")
    elementwise_backward_factor: float = Field(default=1.0, gt=0, le=10, description="backward/forward ratio of memory-bound traffic (kernel fusion)")
    loss_fp32_passes: float = Field(default=3.0, gt=0, le=100, description=(
        "passes over the fp32 logits in the loss forward (read or write, each s x b x vocab / tp); the backward as many again"))
    tp_overlap_exposed: float = Field(default=1.0, ge=0, le=1, description="fraction of TP communication left exposed when tp_comm_overlap is on")
    dp_overlap_exposed: float = Field(default=0.1, ge=0, le=1, description="fraction of overlappable DP communication that stays exposed")
    optimizer_step_factor: float = Field(default=1.0, gt=0, le=100, description=(
        "optimizer-step HBM traffic relative to one fused Adam pass (unfused multi-tensor kernels: >1)"))
    zero3_unit_overhead_us: float = Field(default=0.0, ge=0, le=1e6, description=(
        "fixed time per ZeRO-3 gathering unit per pass (hooks, allocation, stream sync) [us]"))
    moe_a2a_overlap_hidden: float = Field(default=1.0, ge=0, le=1, description=(
        "share of the MoE all-to-alls that training.moe_a2a_overlap's combined 1F1B could hide behind the "
        "other micro-batch's compute that it does hide where a dropless MoE layer syncs the host (no "
        "full-iteration CUDA graph, no capacity factor); sync-free, all of it (1: all of it everywhere)"))
    moe_sync_us: float = Field(default=0.0, ge=0, le=1e6, description=(
        "GPU idle per forward of a dropless MoE layer [us]: the dispatcher reads the tokens per expert "
        "on the host (a blocking sync) before it can size and launch the rest of the layer"))
    # The kernels and exchanges the stack runs (settings, not fitted): here so that a cost model reads them
    # from the job's constants on this GPU (planner/costs/context.py JobContext.stack), not from the model.
    attention_kernel: Literal["fused", "fa2"] = Field(default="fused", description=(
        "the fused attention kernel: Transformer Engine's (cuDNN or FlashAttention-3 on Hopper, the GPU "
        "preset's flash_attention) or FlashAttention-2 (flash-attn 2, PyTorch SDPA's flash backend: "
        "the preset's flash_fa2_relative of that rate)"))
    cp_comm: Literal["p2p", "all_gather"] = Field(default="p2p", description=(
        "context-parallel K/V exchange (Megatron --cp-comm-type): a ring overlapped with attention, or an all-gather"))
    cp_kv_expanded: bool = Field(default=False, description=(
        "K/V exchanged between context-parallel ranks after grouped-query heads are repeated to every "
        "query head (heads / kv_heads times the bytes; torchtitan's repeat_kv before SDPA)"))

    @property
    def layer_overhead_s(self) -> float:
        return self.layer_overhead_us * US

    @property
    def microbatch_overhead_s(self) -> float:
        return self.microbatch_overhead_us * US


class StackGpuConstants(Spec):
    """Constants of one stack fitted on one GPU type, and the sources they were fitted on."""

    fitted_on: tuple[str, ...] = Field(default=(), strict=False, max_length=64)
    error_cases: tuple[Annotated[tuple[Annotated[float, Field(ge=1)], Annotated[float, Field(gt=0)],
                                      Annotated[float, Field(ge=0, le=1000)]], Strict(False)], ...] = Field(default=(), strict=False, max_length=100_000, description=(
        "calibration runs measured on this GPU: (GPUs, parameters [billions], leave-one-source-out "
        "|error| [%]), for the error bands (planner/fidelity/error_bands.py)"))
    layer_overhead_us: float | None = Field(default=None, ge=0, le=1e5)
    layer_launch_us: float | None = Field(default=None, ge=0, le=1e5)
    microbatch_overhead_us: float | None = Field(default=None, ge=0, le=1e6)
    step_overhead_s: float | None = Field(default=None, ge=0, le=100)
    elementwise_backward_factor: float | None = Field(default=None, gt=0, le=10)
    loss_fp32_passes: float | None = Field(default=None, gt=0, le=100)
    tp_overlap_exposed: float | None = Field(default=None, ge=0, le=1)
    dp_overlap_exposed: float | None = Field(default=None, ge=0, le=1)
    optimizer_step_factor: float | None = Field(default=None, gt=0, le=100)
    zero3_unit_overhead_us: float | None = Field(default=None, ge=0, le=1e6)
    moe_sync_us: float | None = Field(default=None, ge=0, le=1e6)


AxisValue = int | bool | str


def layout_value_problem(key: str, value) -> str | None:
    """Why `value` is no value of layout axis `key` as a profile writes it (None: it is one): its kind and
    choices, a degree or count > 0; stage_layers a list of counts, offload_layers >= 0."""
    from planner.layout.axes import AXES

    axes = {a.name: a for a in AXES}
    a = axes.get(key)
    if key == "stage_layers":
        ok, expected = isinstance(value, list) and all(n >= 0 for n in value), "a list of layer counts"
    elif a is None and key != "offload_layers":
        ok, expected = False, "a layout axis (" + ", ".join(axes) + ")"
    elif a is not None and a.choices:
        ok, expected = value in a.choices and type(value) is type(a.choices[0]), f"one of {a.choices}"
    elif a is not None and a.kind is bool:
        ok, expected = isinstance(value, bool), "true or false"
    else:  # a degree or count (offload_layers: the layers offloaded)
        ok, expected = type(value) is int and value >= (0 if a is None else 1), a.expected if a else "an integer >= 0"
    return None if ok else f"{value!r} is not {expected}"


class MeasuredRange(Spec):
    """What a profile's runs covered (plan calibrate): predictions outside it get wider bands."""

    gpus: tuple[int, int] = Field(strict=False, description="fewest and most GPUs measured")
    params_b: tuple[float, float] = Field(strict=False, description="smallest and largest model measured [billions]")
    seq_len: tuple[int, int] = Field(strict=False, description="shortest and longest sequence measured [tokens]")
    precisions: tuple[str, ...] = Field(strict=False, max_length=16)
    axes: dict[str, Annotated[tuple[AxisValue, ...], Field(strict=False, max_length=1000)]] = Field(default_factory=dict, max_length=32, description=(
        "each layout axis and the values the runs had (one value: never varied)"))

    @model_validator(mode="after")
    def _ranges(self):
        """Positive, lowest first, values of their axes: the bands scale by log2 of the ratio to them (a hand-edited
        gpus: [0, 0] made every band infinite, an axis value 'abc' was 'internal error: ValueError')."""
        for key in ("gpus", "params_b", "seq_len"):
            lo, hi = getattr(self, key)
            if not 0 < lo <= hi:
                raise ValueError(f"{key} {lo:g}-{hi:g} is no measured range: fewest > 0, then most")
        for key, values in self.axes.items():
            problem = next((p for p in map(lambda v: layout_value_problem(key, v), values) if p), None)
            if problem:
                raise ValueError(f"axes {key}: {problem}")
        return self


class OwnRuns(Spec):
    """The leave-one-out errors of a profile's runs, which a profiled stack's bands come from
    (planner/fidelity/error_bands.py); set by --profile, never written in a stack file by hand."""

    profile: str = Field(min_length=1, max_length=128)
    gpu: str = Field(min_length=1, max_length=128)
    errors: tuple[tuple[Annotated[float, Field(ge=1)], Annotated[float, Field(gt=0)],
                        Annotated[float, Field(ge=0, le=1e6)]], ...] = Field(
        strict=False, max_length=10_000, description="(GPUs, parameters [billions], leave-one-out |error| [%]) per run")
    memory_errors_pct: tuple[float, ...] = Field(default=(), strict=False, max_length=10_000)
    measured: MeasuredRange
    shipped_error_cases: dict[str, tuple[tuple[Annotated[float, Field(ge=1)], Annotated[float, Field(gt=0)],
                                               Annotated[float, Field(ge=0, le=1000)]], ...]] = Field(
        default_factory=dict, strict=False, max_length=1000, description=(
            "the shipped calibration's cases of this stack by GPU, as its error_cases ((GPUs, parameters [B], "
            "|error| %) rows): the band a profile's never goes below beyond its runs"))


class StackSpec(StackConstants):
    """A software-stack profile (configs/stacks/*.yaml): the kernels it runs, what it overlaps and how
    well, its fixed overheads and how ZeRO-3/FSDP gathers parameters. The GPU preset keeps what the
    hardware does."""

    name: str = Field(min_length=1, max_length=128)
    description: str = Field(default="", max_length=2000)
    attention: Literal["flash", "standard"] = "flash"
    tp_comm_overlap: bool = False
    dp_comm_overlap: bool = True
    tp_layer_launch_us: float = Field(default=0.0, ge=0, le=1e5, description=(
        "host work a layer's forward adds at tp > 1, beyond layer_launch_us: the tensor-parallel linears' "
        "collective calls and their buffers' ops [us] (nanotron's async TP: ~42 calls and 4 collectives)"))
    checkpoint_host_us: float = Field(default=0.0, ge=0, le=1e5, description=(
        "host work full recomputation adds to a layer beside its forward run again: the checkpoint function's "
        "RNG states saved and restored, inputs detached, its re-entrant backward [us] (DeepSpeed's "
        "CheckpointFunction: ~18 calls); counted where the stack's code was read, else 0"))
    pipeline_split: Literal["even", "cost_balanced"] = Field(default="even", description=(
        "how the stack splits layers over pipeline ranks when no split is given: even (Megatron-LM's default, "
        "extra layers first) or cost_balanced (nanotron's build_model, models/base.py: each decoder layer costs "
        "4 h^2 + 3 f h, the output layer V h, a rank takes blocks until the running cost passes its share; "
        "dense models at vpp 1; its split is not a knob, so no CP-SAT split is searched)"))
    fsdp_serializes_tp_overlap: bool = Field(default=False, description=(
        "ZeRO-2/3 (the stack's FSDP) needs CUDA_DEVICE_MAX_CONNECTIONS > 1 and TP communication overlap 1 on GPUs "
        "before sm_version 100: with both, TP communication is priced unhidden and the export drops the "
        "overlap flag (Megatron-LM arguments.py core_v0.15.0 lines 934-947: 'Try not to using them together'; "
        "without FSDP it asserts the variable is 1)"))
    zero1_dp_overlap: bool = Field(default=True, description=(
        "with ZeRO-1 the gradients' reduction overlaps the backward as without it; false: the stack "
        "reduces them in one collective after the backward (nanotron: no DDP under ZeRO-1, "
        "trainer.py make_ddp, the fp32 buffer all-reduced before the sharded optimizer step)"))
    zero3_gather: Literal["layer", "module"] = Field(default="layer", description=(
        "ZeRO-3 gathering unit: a whole transformer layer (FSDP wrapping per block) or one weight "
        "matrix at a time (DeepSpeed stage-3 hooks per submodule)"))
    zero3_units_in_flight: int = Field(default=2, ge=1, le=64, description=(
        "gathered units held at once (the one at work and the prefetched ones)"))
    zero3_prefetch_params: float = Field(default=0.0, ge=0, le=1e12, description=(
        "parameters prefetched beyond the units in flight (DeepSpeed stage3_prefetch_bucket_size)"))
    zero3_reduce_bucket_params: float = Field(default=0.0, ge=0, le=1e12, description=(
        "gradient elements bucketed before a reduce-scatter (DeepSpeed reduce_bucket_size; 0: one unit)"))
    zero3_grad_reduce: Literal["reduce_scatter", "all_reduce"] = Field(default="reduce_scatter", description=(
        "how ZeRO-3 reduces a gradient bucket: a reduce-scatter of the main gradients, or (DeepSpeed 0.3-0.4, "
        "reduce_scatter false by default from PR #971, April 2021) an all-reduce of the 16-bit gradients"))
    zero3_recompute_gathers: bool = Field(default=False, description=(
        "the recomputed forward of a checkpointed layer gathers its parameters again: a third gather per "
        "step besides forward and backward (DeepSpeed's per-submodule forward hooks fire in the recompute)"))
    zero3_gather_copy_passes: float = Field(default=0.0, ge=0, le=10, description=(
        "HBM passes over each gathered tensor besides the collective's own writes: DeepSpeed <= 0.5 "
        "zero-fills the buffer (one write) and PyTorch's list all_gather copies it back from its flat "
        "buffer (one read, one write): 3"))
    zero3_reduce_copy_passes: float = Field(default=0.0, ge=0, le=10, description=(
        "HBM passes over each reduce bucket's 16-bit gradients besides the collective's own: DeepSpeed 0.3.16's "
        "ZeRO-3 without contiguous_gradients (its stage-3 default) flattens the bucket (a read, a write), "
        "divides it by the world size in place (a read, a write) and copies it back into the gradients "
        "(a read, a write): 6"))
    zero3_offload_sync_reduce: bool = Field(default=False, description=(
        "with the optimizer offloaded, each reduce-scattered gradient partition is copied to the host's fp32 "
        "buffer with a blocking copy (DeepSpeed 0.6.2 stage3.py __partition_grads, fp32_grad_tensor.copy_ "
        "non_blocking=False): the host waits out every reduce-scatter, which then hides behind nothing"))
    zero3_gather_rank_us: float = Field(default=0.0, ge=0, le=1e3, description=(
        "host time per gathered unit per rank of the group [us]: DeepSpeed <= 0.5 gathers into a list of one "
        "view per rank, which PyTorch's ProcessGroupNCCL::allgather copies back one copy_ per rank"))
    zero3_root_unsharded: bool = Field(default=False, description=(
        "the root unit (embedding, final norm, output layer) stays gathered from the forward through the "
        "backward (FSDP2 fully_shard on the root: post_forward_mesh_info None, no reshard after forward)"))
    zero3_pp_unsharded: bool = Field(default=False, description=(
        "under pipeline parallelism a stage's parameters stay gathered for the whole step and its gradients "
        "accumulate unsharded, at the gradients' bytes, until the last micro-batch's backward (torchtitan: "
        "reshard_after_forward=False with PP; torch.distributed.pipelining's FSDP no-sync backward)"))
    zero3_master_is_param: bool = Field(default=False, description=(
        "with ZeRO-3 the sharded parameter is the fp32 master the optimizer updates, no 16-bit shard beside it "
        "(PyTorch FSDP mixed precision: the shard stays in full precision, cast to param_dtype at each "
        "all-gather); false: a 16-bit shard and an fp32 master shard (DeepSpeed stage 3)"))
    deepspeed_fp16_grads: bool = Field(default=False, description=(
        "fp16 runs keep 16-bit gradients in param.grad (the DeepSpeed engine, not Megatron's fp32 main_grad) "
        "and the optimizer step casts what this rank updates to fp32: ZeRO-1/2 the partition's flat fp16 "
        "and fp32 copies (stage_1_and_2.py), ZeRO-0 an fp32 copy per parameter and their flat one "
        "(fp16/fused_optimizer.py)"))
    zero3_grad_copy_in: bool = Field(default=False, description=(
        "a unit's gradients are copied into a reduce-scatter buffer in reduce_dtype allocated on the "
        "reduce-scatter stream, and freed only after the copy-in (FSDP2 foreach_reduce): the 16-bit "
        "gradients (or, accumulated unsharded under pp, the fp32 ones) and the fp32 copy at once"))
    cp_ring_buffers: bool = Field(default=False, description=(
        "context parallelism's attention backward holds, beside the kernel's own, the K/V all-gathered from "
        "every cp rank with the local copy sent into it, fp32 accumulators of the query gradient and the "
        "K/V gradients passed round the ring (torch.distributed.tensor.experimental._attention "
        "_templated_ring_attention_backward, convert_to_f32); live in a layer's backward, not beside the loss. "
        "In time, torch's ring merges each step's partial output into an fp32 one and sends the K/V gradients "
        "round in fp32 (planner/costs/compute.py cp_merge_bytes, planner/costs/comm.py cp_comm_per_layer_s)"))
    tp_saves_gathered_inputs: bool = Field(default=False, description=(
        "with sequence parallelism the column-parallel linears save the all-gathered, full-sequence input "
        "for their backward (DTensor TP: PrepareModuleInput to Replicate, then the matmul saves it), not "
        "Megatron's shard re-gathered in the backward: a layer's QKV and MLP inputs and the output layer's"))
    eager_block_ops: bool = Field(default=False, description=(
        "the model code runs a block's RMSNorms, RoPE and SwiGLU product as separate PyTorch ops, each a "
        "pass over HBM, unless training.torch_compile fuses them (torchtitan's Llama: norms.py RMSNorm, "
        "model.py apply_rotary_emb and FeedForward; planner/costs/compute.py eager_block_bytes); false: "
        "fused kernels (Transformer Engine, Apex)"))
    selective_ac: Literal["modules", "op"] = Field(default="modules", description=(
        "what recompute: selective keeps: modules (Megatron --recompute-modules, training.recomputed) or "
        "op (torchtitan's op-level policy: the outputs of every other matmul, of SDPA and of the "
        "reduce-scatters; the rest rebuilt one layer at a time in the backward)"))
    fp8_weight_cache: bool = Field(default=True, description=(
        "low-precision GEMMs keep a cached FP8 copy of each weight across the step's micro-batches "
        "(Transformer Engine); false: cast on every use, nothing kept (torchao Float8Linear)"))
    loss_logit_bytes: float | None = Field(default=None, gt=0, le=64, description=(
        "bytes per logit held at the loss's peak (None: the 16-bit logits and their fp32 copy, Megatron's "
        "vocab-parallel cross-entropy, which works in place on that copy)"))
    loss_parallel_logit_bytes: float | None = Field(default=None, gt=0, le=64, description=(
        "the same with tp > 1, where the stack's loss runs vocab-parallel another way (None: as loss_logit_bytes)"))
    carried_over_error_pct: float = Field(default=25.0, ge=0, le=1000, description=(
        "expected |error| where this stack was never calibrated on any GPU [%] (benchmarks/calibrate.py "
        "measures it: sources predicted with constants carried over from other stacks)"))
    source_bias_pct: float = Field(default=0.0, ge=0, le=1000, description=(
        "RMS over the calibration sources of each one's mean error when left out [%]: how far a new "
        "source's runs sit from the planner as a whole, which its neighbours cannot show "
        "(benchmarks/calibrate.py; planner/fidelity/error_bands.py adds it to every band)"))
    gpus: dict[str, StackGpuConstants] = Field(default_factory=dict, description=(
        "constants fitted on a GPU type (benchmarks/calibrate.py); other GPUs carry the profile's over"))
    own_runs: OwnRuns | None = Field(default=None, description=(
        "set by --profile: the user's own runs, whose leave-one-out errors give the bands"))

    def for_gpu(self, gpu_name: str) -> StackConstants:
        """The constants on `gpu_name`: the fitted ones where this GPU was calibrated."""
        fitted = self.gpus.get(gpu_name)
        base = {k: getattr(self, k) for k in StackConstants.model_fields}
        if fitted is not None:
            base.update({k: v for k, v in fitted.model_dump().items() if k in base and v is not None})
        return StackConstants(**base)
