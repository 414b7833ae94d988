"""A DeepSpeed config (ds_config JSON) of a layout: keys of deepspeedai/DeepSpeed v0.19.5
(deepspeed/runtime/constants.py, precision_config.py, zero/config.py, activation_checkpointing/config.py;
vendored in tests/data/frameworks/deepspeed.txt). The JSON stays valid: what it cannot say is in the
notes. DeepSpeed derives its data-parallel size from the model-parallel groups the training script
builds (Megatron-DeepSpeed's mpu), and checks train_batch_size = micro-batch x accumulation x dp."""
from __future__ import annotations

import json

from planner.errors import SpecError
from planner.export.common import Export, Launch, architecture_extras, is_even, runs, visible, window_pattern
from planner.specs import ModelSpec


def deepspeed_config(lay: Launch, model: ModelSpec) -> dict:
    t = model.training
    cfg: dict = {"train_batch_size": lay.global_batch, "train_micro_batch_size_per_gpu": lay.micro_batch,
                 "gradient_accumulation_steps": lay.accumulation,
                 "zero_optimization": {"stage": lay.zero}}
    if lay.offloads_optimizer:  # ZeRO-Offload: the optimizer states and DeepSpeedCPUAdam on the host
        cfg["zero_optimization"]["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if t.precision == "fp16":
        cfg["fp16"] = {"enabled": True}
    else:
        cfg["bf16"] = {"enabled": True}
    if t.grad_reduce_dtype == "bf16":
        cfg["communication_data_type"] = "bf16"  # gradients all-reduced / reduce-scattered in BF16
    if lay.recompute != "none":
        cfg["activation_checkpointing"] = {"partition_activations": False, "cpu_checkpointing": lay.offloads_activations,
                                           "contiguous_memory_optimization": False}
    return cfg


def deepspeed_notes(lay: Launch, model: ModelSpec) -> list[str]:
    """What the layout has that a ds_config cannot hold (the training script sets it). What DeepSpeed cannot run
    (cp, vpp, ZeRO-2/3 with pp, ZeRO-3 with native MoE) is refused before (planner/export/frameworks.py)."""
    notes = []
    if lay.tp > 1:
        notes.append(f"tp={lay.tp} is not a ds_config key: the model code sets it (Megatron-DeepSpeed "
                     "--tensor-model-parallel-size; DeepSpeed AutoTP's \"tensor_parallel\": {\"autotp_size\"} "
                     "is for Hugging Face models)")
    if lay.sequence_parallel:
        notes.append("sequence parallelism is not a ds_config key: the model code sets it (Megatron-DeepSpeed --sequence-parallel)")
    if lay.pp > 1:
        notes.append(f"pp={lay.pp} is not a ds_config key: deepspeed.pipe.PipelineModule(num_stages={lay.pp}) in the model code")
        if not is_even(lay.stage_layers):
            notes.append(f"the uneven split {runs(lay.stage_layers)} is PipelineModule's partition_method in the model code")
    if lay.ep > 1:
        notes.append(f"ep={lay.ep} is not a ds_config key: deepspeed.moe.layer.MoE(ep_size={lay.ep}) in the model code")
    t = model.training
    if model.moe is not None and t.moe_dispatcher == "flex":
        notes.append("moe_dispatcher flex (DeepEP/HybridEP) has no DeepSpeed equivalent: deepspeed.moe all-to-alls every routed copy")
    if model.moe is not None and t.moe_a2a_overlap:
        notes.append("moe_a2a_overlap (Megatron's combined 1F1B) has no DeepSpeed equivalent")
    if lay.recompute != "none":
        notes.append(f"recompute={lay.recompute}: activation_checkpointing configures deepspeed.checkpointing; "
                     "the model code chooses what it checkpoints (full: each layer)"
                     + ("; selective (Megatron's module recompute, core attention by default) has no DeepSpeed switch" if lay.recompute == "selective" else ""))
    if model.sliding_window is not None:
        notes.append(f"{window_pattern(model)}: not a ds_config key; the model's own code sets it "
                     "(DeepSpeed's sparse_attention local/sliding-window blocks are a different block-sparse attention)")
    extras = architecture_extras(model)
    if extras:
        notes.append(f"{', '.join(extras)}: not ds_config keys; the model's own code sets them")
    if t.cuda_graph_impl != "none":
        notes.append(f"cuda_graph_impl {t.cuda_graph_impl} is not a ds_config key: CUDA graphs of the model's step are "
                     "the training script's")
    if t.te_op_fuser:
        notes.append("te_op_fuser is not a ds_config key: Transformer Engine layers in the model code")
    if t.torch_compile:
        notes.append("torch_compile is not a ds_config switch: the training script calls engine.compile() (DeepSpeed "
                     "0.14 on); the plan prices it as the stack's kernels")
    if model.training.precision in ("fp8", "mxfp8"):
        notes.append(f"{model.training.precision} GEMMs are not a ds_config key: Transformer Engine layers in the model "
                     "code; the config sets their BF16 mixed precision")
    return notes


def deepspeed_settings(lay: Launch, model: ModelSpec) -> Export:
    if model.training.precision == "nvfp4":
        raise SpecError("DeepSpeed has no NVFP4 training: no ds_config precision section for it (fp16, bf16 only) "
                        "and no FP4 training kernels (its FP4 kernels are inference v2's)", path="--export deepspeed",
                        expected="--precision bf16, fp16, fp8 or mxfp8")
    # json.dumps escapes what a string holds; the notes go to stderr, one line each (visible)
    return Export(text=json.dumps(deepspeed_config(lay, model), indent=2),
                  notes=[visible(n) for n in deepspeed_notes(lay, model)])
