"""Megatron-Bridge launch line of a layout: `scripts/training/run_recipe.py --recipe NAME` and trailing KEY=VALUE
ConfigContainer overrides (NVIDIA-NeMo/Megatron-Bridge v0.6.0, 51885cf132; override paths vendored with their
Megatron-LM submodule's dataclasses, cd4afffa64, in tests/data/frameworks/megatron-bridge.txt). Values are written
as OmegaConf reads them (true/false, null). The recipe is the shipped one of the same model where Bridge has it,
else vanilla_gpt_pretrain_config; either way the overrides state the layout and the model fields the Megatron export
states, so the recipe's own choices do not decide what trains. What an override cannot set (a Callable, a tuple,
MLA ranks outside GPTModelProvider) is a note."""
from __future__ import annotations

import re

from planner.export.common import Export, Launch, is_even, shell_export, torch_compile_note, visible, window_pattern
from planner.export.megatron import megatron_first_last, moe_layer_pattern
from planner.specs import ModelSpec

Overrides = list[tuple[str, object]]
TAG = "v0.6.0"
# planner model -> Megatron-Bridge v0.6.0 recipe (src/megatron/bridge/recipes/*/__init__.py exports); the -128k
# variants are the same models, their sequence length an override
RECIPES = {
    "llama3-8b": "llama3_8b_pretrain_config", "llama3-70b": "llama3_70b_pretrain_config",
    "llama3.1-8b": "llama31_8b_pretrain_config", "llama3.1-8b-128k": "llama31_8b_pretrain_config",
    "llama3.1-70b": "llama31_70b_pretrain_config", "llama3.1-70b-128k": "llama31_70b_pretrain_config",
    "llama3.1-405b": "llama31_405b_pretrain_config", "llama3.1-405b-128k": "llama31_405b_pretrain_config",
    "deepseek-v3": "deepseek_v3_pretrain_config", "kimi-k2": "kimi_k2_pretrain_config",
    "qwen3-30b-a3b": "qwen3_30b_a3b_pretrain_config", "qwen3-235b-a22b": "qwen3_235b_a22b_pretrain_config",
    "gpt-oss-120b": "gpt_oss_120b_pretrain_config",
}
GENERIC = "vanilla_gpt_pretrain_config"
# recipes that set optimizer.use_precision_aware_optimizer = True (recipes/deepseek/h100/deepseek_v3.py)
PRECISION_AWARE = {"deepseek_v3_pretrain_config"}
MIXED = {"bf16": "bf16_mixed", "fp16": "fp16_mixed", "mxfp8": "bf16_with_mxfp8_mixed",
         "nvfp4": "bf16_with_nvfp4_mixed"}  # training/mixed_precision.py @register names (fp8: FP8_RECIPES)
FP8_RECIPES = {"delayed": "bf16_with_fp8_delayed_scaling_mixed", "tensorwise": "bf16_with_fp8_current_scaling_mixed",
               "blockwise": "bf16_with_fp8_subchannel_scaling_mixed"}  # the same file: per-tensor FP8 by its scaling


def _value(v: object) -> str:
    """A value as Hydra's override grammar (run_recipe.py's parse_hydra_overrides) reads it: true/false, null,
    numbers, lists `[a,b]` of those and of plain names. Any other string is refused: quoted, Hydra would still
    resolve `${...}` interpolations in it, and no Bridge setting the planner writes needs one."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, list):
        return "[" + ",".join(_value(x) for x in v) + "]"
    if isinstance(v, str) and not re.fullmatch(r"[A-Za-z_]\w*", v, re.ASCII):
        raise ValueError(f"'{visible(v)[:80]}' is no plain name: no Megatron-Bridge override value the planner writes")
    return str(v)


def bridge_layout(lay: Launch, model: ModelSpec, tp_overlap_off: bool = False) -> tuple[Overrides, list[str]]:
    """Parallel sizes (ModelParallelConfig fields of model), the split, recompute, ZeRO and the overlaps, as the
    Megatron export writes them (planner/export/megatron.py parallel_args, memory_args)."""
    m, notes = "model.", []
    o: Overrides = [(m + "tensor_model_parallel_size", lay.tp), (m + "pipeline_model_parallel_size", lay.pp),
                    (m + "virtual_pipeline_model_parallel_size", lay.vpp if lay.vpp > 1 else None),
                    (m + "context_parallel_size", lay.cp), (m + "sequence_parallel", lay.sequence_parallel)]
    if model.moe is not None:
        o += [(m + "expert_model_parallel_size", lay.ep), (m + "expert_tensor_parallel_size", lay.etp)]
    o += bridge_split(lay, model)
    full = lay.recompute == "full"
    o += [(m + "recompute_granularity", None if lay.recompute == "none" else lay.recompute),
          (m + "recompute_method", model.training.recompute_method if full else None),
          (m + "recompute_num_layers", model.training.recompute_num_layers if full else None)]
    if lay.recompute == "selective" and model.training.recompute_modules is not None:
        o.append((m + "recompute_modules", list(model.training.recompute_modules)))
    o += bridge_optimizer(lay)
    t = model.training
    if t.dp_comm_overlap and lay.dp * lay.cp > 1:
        o += [("ddp.overlap_grad_reduce", True), ("ddp.overlap_param_gather", lay.zero == 1)]
    if tp_overlap_off and lay.tp > 1:  # a recipe's own true must not survive (planner/export/__init__.py says why)
        o.append((m + "tp_comm_overlap", False))
    elif t.tp_comm_overlap and lay.tp > 1:
        o.append((m + "tp_comm_overlap", lay.sequence_parallel))
        if not lay.sequence_parallel:
            notes.append("TP communication overlap was planned, but it needs sequence parallelism")
    return o, notes


def bridge_split(lay: Launch, model: ModelSpec) -> Overrides:
    """Every pipeline-split field, so that a recipe's own cannot survive the layout's pp and vpp (the DeepSeek-V3
    and Kimi K2 recipes set a 16-stage pipeline_model_parallel_layout, PipelineParallelLayerLayout then asserts its
    length divides by pp; Llama 3's large recipes turn on account_for_embedding/loss_in_pipeline_split, which
    TransformerConfig refuses beside first/last counts and which would move a layer's worth off the end stages).
    An even split: all unset. Else the first/last counts where they build it, else the layout as a list of
    stages of LayerType names (Hydra reads it as plain names; the MTP layers, before the loss, in the last stage,
    as validate_layer_layout wants them)."""
    m = "model."
    first_last = layout = None
    if lay.pp > 1 and not is_even(lay.stage_layers):
        first_last = megatron_first_last(lay.stage_layers, lay.pp, lay.vpp)
        if first_last is None:
            n = list(lay.stage_layers)
            layout = [["embedding"] * (i == 0) + ["decoder"] * k
                      + (["mtp"] * (model.mtp_layers or 0) + ["loss"]) * (i == len(n) - 1) for i, k in enumerate(n)]
    return [(m + "num_layers_in_first_pipeline_stage", first_last and first_last[0]),
            (m + "num_layers_in_last_pipeline_stage", first_last and first_last[1]),
            (m + "pipeline_model_parallel_layout", layout),
            (m + "account_for_embedding_in_pipeline_split", False), (m + "account_for_loss_in_pipeline_split", False)]


def bridge_optimizer(lay: Launch) -> Overrides:
    """ZeRO-1: the distributed optimizer; ZeRO-2/3: Megatron FSDP, which always uses it (ConfigContainer's
    _validate_and_apply_megatron_fsdp_configs turns it on, but only after OptimizerConfig.finalize() has
    asserted that a precision-aware optimizer has it) and saves in the fsdp_dtensor format it asserts. ZeRO-0:
    no precision-aware optimizer, which Megatron Core allows only with the distributed optimizer
    (optimizer_config.py) and the DeepSeek-V3 recipe turns on."""
    o: Overrides = [("ddp.use_distributed_optimizer", lay.zero >= 1), ("optimizer.use_distributed_optimizer", lay.zero >= 1)]
    if lay.zero == 0:
        o.append(("optimizer.use_precision_aware_optimizer", False))
    if lay.offloads_optimizer:  # Megatron Core OptimizerConfig's fields (HybridDeviceOptimizer)
        o += [("optimizer.optimizer_cpu_offload", True), ("optimizer.optimizer_offload_fraction", 1.0),
              ("optimizer.overlap_cpu_optimizer_d2h_h2d", True), ("optimizer.use_precision_aware_optimizer", True)]
    if lay.offloads_activations:  # TransformerConfig's layer-level offload: the layers the planner priced
        o += [("model.cpu_offloading", True), ("model.cpu_offloading_num_layers", lay.offload_layers)]
    if lay.zero >= 2:
        o += [("ddp.use_megatron_fsdp", True),
              ("ddp.data_parallel_sharding_strategy", "optim_grads" if lay.zero == 2 else "optim_grads_params"),
              ("checkpoint.ckpt_format", "fsdp_dtensor")]
    return o


def bridge_model(model: ModelSpec) -> tuple[Overrides, list[str]]:
    """The model fields the Megatron export states, as GPTModelProvider / TransformerConfig fields."""
    m, notes = "model.", []
    o: Overrides = [(m + "num_layers", model.layers), (m + "hidden_size", model.hidden), (m + "ffn_hidden_size", model.ffn),
                    (m + "num_attention_heads", model.heads), (m + "seq_length", model.seq_len),
                    (m + "vocab_size", model.vocab)]
    if model.mla is None:
        o.append((m + "num_query_groups", model.num_kv_heads))
        if model.head_dim is not None:
            o.append((m + "kv_channels", model.head_dim))
    else:
        a = model.mla
        notes.append(f"multi-latent attention (q_lora_rank {a.q_lora_rank}, kv_lora_rank {a.kv_lora_rank}, qk_head_dim "
                     f"{a.qk_nope_head_dim}, qk_pos_emb_head_dim {a.qk_rope_head_dim}, v_head_dim {a.v_head_dim}): "
                     "MLATransformerConfig fields, outside GPTModelProvider; the recipe's MLA provider sets them")
    yarn = model.yarn is not None or model.rope_mscale != 1.0
    o.append((m + "normalization", "RMSNorm" if model.normalization == "rmsnorm" else "LayerNorm"))
    if not yarn:  # YaRN: the recipe's provider (its yarn_* fields), a note below
        o.append((m + "position_embedding_type", {"rope": "rope", "learned": "learned_absolute", "none": "none"}[model.position_embedding]))
    if model.position_embedding == "rope" and not yarn:
        o.append((m + "rotary_base", int(model.rope_theta or 10000)))
    if model.rope_scaling_factor is not None:
        o += [(m + "rope_scaling", True), (m + "rope_scaling_factor", model.rope_scaling_factor)]
    o += [(m + "qk_layernorm", bool(model.qk_norm) or model.mla is not None),
          (m + "share_embeddings_and_output_weights", bool(model.tied_embeddings)),
          (m + "add_bias_linear", model.linear_bias if model.linear_bias is not None else model.ffn_act != "swiglu"),
          (m + "gated_linear_unit", model.ffn_act == "swiglu")]
    if model.swiglu_limit is None:
        # activation_func by name (omegaconf_utils.py reads it back through activation_map.py): silu with the
        # gated unit is SwiGLU; without it GPTModelProvider's default F.gelu, a GeGLU for a gated MLP (Mixtral
        # has no v0.6.0 recipe: vanilla_gpt_pretrain_config's provider)
        o.append((m + "activation_func", "silu" if model.ffn_act == "swiglu" else "gelu"))
    else:
        notes.append("clamped SwiGLU: model.activation_func left to the recipe's provider (GPT-OSS: quick_gelu with "
                     "glu_linear_offset 1.0 and the clamp, gpt_oss_bridge.py)")
    if model.swiglu_limit is not None:
        o.append((m + "activation_func_clamp_value", model.swiglu_limit))
    if model.mtp_layers:
        o.append((m + "mtp_num_layers", model.mtp_layers))
    if model.sliding_window is not None:
        o.append((m + "window_attn_skip_freq", model.full_attention_every))
        notes.append(f"{window_pattern(model)}: set model.window_size = ({model.sliding_window - 1}, 0) in the recipe's "
                     "Python (a Tuple[int, int] field)")
    if yarn:
        notes.append("YaRN RoPE: position embedding and rotary base left to the recipe's provider (position_embedding_type "
                     "yarn and its yarn_* fields, GPT-OSS/DeepSeek/Kimi providers)")
    return o, notes


def bridge_moe(model: ModelSpec) -> Overrides:
    moe, m = model.moe, "model."
    o: Overrides = [(m + "num_moe_experts", moe.experts), (m + "moe_router_topk", moe.top_k),
                    (m + "moe_ffn_hidden_size", moe.expert_ffn_hidden),
                    (m + "moe_router_score_function", moe.router_score), (m + "moe_router_enable_expert_bias", moe.expert_bias),
                    (m + "moe_router_num_groups", moe.router_groups), (m + "moe_router_group_topk", moe.router_group_top_k),
                    (m + "moe_router_topk_scaling_factor", moe.top_k_scaling),
                    (m + "moe_shared_expert_intermediate_size", moe.shared_experts * moe.shared_ffn or None),
                    (m + "moe_token_dispatcher_type", model.training.moe_dispatcher), (m + "moe_grouped_gemm", True)]
    layers = [int(model.moe_layers_before(i + 1) - model.moe_layers_before(i)) for i in range(model.layers)]
    o.append((m + "moe_layer_freq", 1 if moe_layer_pattern(model) is None else layers))
    if moe.capacity_factor is not None:
        o += [(m + "moe_expert_capacity_factor", moe.capacity_factor), (m + "moe_pad_expert_input_to_capacity", True)]
    return o


def bridge_settings(lay: Launch, model: ModelSpec, tp_overlap_off: bool = False) -> Export:
    recipe = RECIPES.get(model.name, GENERIC)
    notes = [] if recipe != GENERIC else [f"Megatron-Bridge {TAG} ships no recipe of {model.name}: the generic "
                                          f"{GENERIC}, every model field below an override"]
    o, layout_notes = bridge_layout(lay, model, tp_overlap_off)
    shape, model_notes = bridge_model(model)
    o += shape + (bridge_moe(model) if model.moe is not None else [])
    t = model.training
    o += [("train.global_batch_size", lay.global_batch), ("train.micro_batch_size", lay.micro_batch),
          ("dataset.seq_length", model.seq_len),
          ("mixed_precision", FP8_RECIPES[t.fp8_recipe] if t.precision == "fp8" else MIXED[t.precision])]
    if t.grad_reduce_dtype == "bf16":
        o.append(("ddp.grad_reduce_in_fp32", False))
    if recipe in PRECISION_AWARE and lay.zero >= 1:
        notes.append(f"{recipe} keeps its precision-aware optimizer (BF16 gradients and Adam moments): less optimizer "
                     "memory than planned, which prices FP32 ones")
    if t.precision == "nvfp4":
        notes.append("nvfp4: bf16_with_nvfp4_mixed also sets fp4_param_gather (NVFP4 parameters, gathered in NVFP4); "
                     "the plan prices BF16 parameters with Transformer Engine's cached NVFP4 copies and a BF16 "
                     "parameter all-gather, more memory and traffic than that recipe needs")
    if t.torch_compile:
        notes.append(torch_compile_note("Megatron-Bridge (Megatron Core)"))
    notes += layout_notes + model_notes
    lines = [("python", "scripts/training/run_recipe.py", "--recipe", recipe, "--mode", "pretrain")]
    return shell_export(notes, lines + [(f"{k}={_value(v)}",) for k, v in o], continued=True, program="python")
