"""NeMo 2 recipe overrides of a layout, in NeMo-Run's CLI form (`nemo llm pretrain --factory <recipe>
key=value ...`, NVIDIA/NeMo v2.4.0 docs/source/features/parallelisms.rst). The paths are those the
recipes build (recipes/gpt3_175b.py): trainer.strategy is MegatronStrategy's __init__, its ddp a Megatron
Core DistributedDataParallelConfig, trainer.plugins a MegatronMixedPrecision, data the data module,
model.config a GPTConfig (Megatron Core TransformerConfig), optim.config a Megatron Core
OptimizerConfig; checked in tests/data/frameworks/nemo.txt. Every layout value is written even at its
default, since recipes set their own (gpt3_175b sets virtual_pipeline_model_parallel_size=6)."""
from __future__ import annotations

from planner.export.common import Export, Launch, is_even, shell_export, torch_compile_note, window_pattern
from planner.export.megatron import megatron_first_last, megatron_layout
from planner.specs.layers import windowed_layers
from planner.specs import ClusterSpec, ModelSpec

Overrides = list[tuple[str, object]]


def _value(v: object) -> str:
    """A value as NeMo-Run's CLI reads it (nemo_run/cli/cli_parser.py v0.4.0): a list as a Python literal, which
    its parse_list gives to ast.literal_eval, so its strings are quoted inside (`["core_attn", "mlp"]`); the rest
    as str(), booleans and None as Python spells them. The whole `key=value` is then one shell word."""
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_python_str(x) if isinstance(x, str) else repr(x) for x in v) + "]"
    return str(v)


def _python_str(text: str) -> str:
    """A Python string literal of `text`, double-quoted where repr allows (a shell-quoted word then needs no
    `'"'"'`); ast.literal_eval gives `text` back either way."""
    r = repr(text)
    return f'"{r[1:-1]}"' if r[0] == "'" and '"' not in text else r


def nemo_split(lay: Launch) -> Overrides:
    """Virtual stages and an uneven split: first/last counts, else the layout string."""
    s = "trainer.strategy."
    o: Overrides = [(s + "virtual_pipeline_model_parallel_size", lay.vpp if lay.vpp > 1 else None)]
    if lay.pp < 2:
        return o
    first_last = None if is_even(lay.stage_layers) else megatron_first_last(lay.stage_layers, lay.pp, lay.vpp)
    layout = megatron_layout(lay.stage_layers) if not is_even(lay.stage_layers) and first_last is None else None
    return o + [(s + "num_layers_in_first_pipeline_stage", first_last[0] if first_last else None),
                (s + "num_layers_in_last_pipeline_stage", first_last[1] if first_last else None),
                (s + "pipeline_model_parallel_layout", layout)]


def nemo_memory(lay: Launch, model: ModelSpec) -> Overrides:
    """Recompute as Megatron Core's TransformerConfig fields; ZeRO-1 the distributed optimizer, ZeRO-2/3
    Megatron FSDP (strategy fsdp='megatron' and the DDP config's sharding strategy; the recipes say
    average_in_collective must be False with it, recipes/llama3_8b.py)."""
    c = "model.config."
    full = lay.recompute == "full"
    o: Overrides = [(c + "recompute_granularity", None if lay.recompute == "none" else lay.recompute),
                    (c + "recompute_method", model.training.recompute_method if full else None),
                    (c + "recompute_num_layers", model.training.recompute_num_layers if full else None)]
    if lay.recompute == "selective" and model.training.recompute_modules is not None:
        o.append((c + "recompute_modules", list(model.training.recompute_modules)))
    o.append(("optim.config.use_distributed_optimizer", lay.zero >= 1))
    if lay.offloads_optimizer:  # Megatron Core OptimizerConfig's fields (HybridDeviceOptimizer)
        o += [("optim.config.optimizer_cpu_offload", True), ("optim.config.optimizer_offload_fraction", 1.0),
              ("optim.config.overlap_cpu_optimizer_d2h_h2d", True), ("optim.config.use_precision_aware_optimizer", True)]
    if lay.offloads_activations:  # TransformerConfig's layer-level offload: the layers the planner priced
        o += [(c + "cpu_offloading", True), (c + "cpu_offloading_num_layers", lay.offload_layers)]
    if lay.zero >= 2:
        o += [("trainer.strategy.fsdp", "megatron"),
              ("trainer.strategy.ddp.data_parallel_sharding_strategy", "optim_grads" if lay.zero == 2 else "optim_grads_params"),
              ("trainer.strategy.ddp.average_in_collective", False)]
    return o


TP_OVERLAP_CALLBACK = "nemo.lightning.pytorch.callbacks.megatron_comm_overlap.MegatronCommOverlapCallback"


def nemo_tp_overlap(lay: Launch, model: ModelSpec) -> tuple[Overrides, list[str]]:
    """The Megatron export's --tp-comm-overlap. NeMo v2.4.0 turns it on only through MegatronCommOverlapCallback
    (callbacks/megatron_comm_overlap.py): its setup writes its own tp_comm_overlap (default False) into model.config,
    so a model.config.tp_comm_overlap override alone is overwritten or, with no callback, leaves Transformer Engine's
    userbuffers uninitialised (_init_te_userbuffers). The override appends one to trainer.callbacks (NeMo-Run v0.4.0:
    `+=` extends the recipe's list, a dotted `pkg.Class(k=v)` value is imported and built); the callback keeps it
    only with tp > 1 and sequence parallelism, as Megatron-LM does. Appended last, its setup runs after a recipe's
    own (performance_mode's, tp_comm_overlap False) and wins."""
    if not (model.training.tp_comm_overlap and lay.tp > 1):
        return [], []
    if not lay.sequence_parallel:
        return [], ["TP communication overlap was planned, but NeMo's MegatronCommOverlapCallback needs sequence parallelism"]
    return [("trainer.callbacks+", f"[{TP_OVERLAP_CALLBACK}(tp_comm_overlap=True)]")], [
        "TP overlap: the trainer.callbacks line appends MegatronCommOverlapCallback(tp_comm_overlap=True), built by "
        "NeMo-Run from its dotted path; NeMo's docs add it in the recipe's Python, recipe.trainer.callbacks.append("
        "run.Config(MegatronCommOverlapCallback, tp_comm_overlap=True)) (features/optimizations/communication_overlap.rst)"]


def nemo_precision(model: ModelSpec) -> Overrides:
    """MegatronMixedPrecision's fields, as recipes/precision/mixed_precision.py sets them."""
    t = model.training
    p = "trainer.plugins."
    o: Overrides = [(p + "precision", "16-mixed" if t.precision == "fp16" else "bf16-mixed")]
    if t.precision in ("fp8", "mxfp8"):
        o += [(p + "fp8", "hybrid"), (p + "fp8_recipe", t.fp8_recipe if t.precision == "fp8" else "mxfp8"),
              (p + "fp8_param_gather", t.fp8_param_gather)]
    else:
        o.append((p + "fp8", None))
    if t.precision == "nvfp4":
        # NeMo v2.4.0's MegatronMixedPrecision has no FP4 field: Megatron Core's TransformerConfig fp4 / fp4_recipe
        # (core_v0.15.0), which the plugin leaves as they are
        o += [("model.config.fp4", "e2m1"), ("model.config.fp4_recipe", "nvfp4")]
    # training.grad_reduce_dtype: the plugin's and the DDP config's grad_reduce_in_fp32 (Megatron-Bridge's
    # MoE perf recipes set both False); written either way, as NeMo's performance recipes set False
    fp32 = t.grad_reduce_dtype == "fp32"
    return o + [(p + "grad_reduce_in_fp32", fp32), ("trainer.strategy.ddp.grad_reduce_in_fp32", fp32)]


def nemo_moe(lay: Launch, model: ModelSpec) -> tuple[Overrides, list[str]]:
    """Expert parallelism, the dispatcher (flex: Megatron Core's moe_enable_deepep of core_v0.15.0;
    later releases spell it moe_flex_dispatcher_backend) and the all-to-all overlap."""
    s, c, t = "trainer.strategy.", "model.config.", model.training
    o: Overrides = [(s + "expert_model_parallel_size", lay.ep), (s + "expert_tensor_parallel_size", lay.etp),
                    (c + "moe_token_dispatcher_type", t.moe_dispatcher), (c + "moe_grouped_gemm", True)]
    if t.moe_dispatcher == "flex":
        o.append((c + "moe_enable_deepep", True))
    if model.moe.capacity_factor is not None:
        # priced as drop-and-pad (static shapes, no host sync per MoE layer), as the Megatron export
        o += [(c + "moe_expert_capacity_factor", model.moe.capacity_factor), (c + "moe_pad_expert_input_to_capacity", True)]
    notes = []
    if t.moe_a2a_overlap:
        o.append((s + "ddp.delay_wgrad_compute", True))
        notes.append("moe_a2a_overlap: also set model.config.overlap_moe_expert_parallel_comm=True and "
                     "model.config.delay_wgrad_compute=True (Megatron Core ModelParallelConfig fields, outside "
                     "the vendored TransformerConfig field list these overrides are checked against)")
    return o, notes


def nemo_window(lay: Launch, model: ModelSpec) -> tuple[Overrides, list[str]]:
    """The sliding window as Megatron Core TransformerConfig fields (vendored): window_attn_skip_freq as
    an override (None: every layer windowed; written, as a recipe may set its own), and, with cp > 1,
    cp_comm_type all_gather (Transformer Engine refuses p2p context parallelism with a window). window_size
    (w - 1, 0), as the Megatron export's --window-size, is a note: its type Optional[Tuple[int, int]] has no
    parser in NeMo-Run's CLI (v0.4.0 nemo_run/cli/cli_parser.py TypeParser: int, float, str, bool, list,
    dict, Union, Optional, Literal, Path; vendored in tests/data/frameworks/nemo-run.txt), so
    `model.config.window_size=(127,0)` would stop the launch with a ParseError."""
    if model.sliding_window is None:
        return [], []
    c = "model.config."
    o: Overrides = [(c + "window_attn_skip_freq", model.full_attention_every)]
    if lay.cp > 1 and windowed_layers(model):
        o.append((c + "cp_comm_type", "all_gather"))
    return o, [f"{window_pattern(model)}: set model.config.window_size = ({model.sliding_window - 1}, 0) in the "
               "recipe's Python (Megatron Core TransformerConfig; NeMo-Run's CLI cannot parse its Tuple[int, int] "
               "type, so it is no override here)"]


def nemo_architecture(model: ModelSpec) -> tuple[Overrides, list[str]]:
    """The clamped SwiGLU and the linear biases as TransformerConfig fields (vendored); add_bias_linear only when
    on: TransformerConfig's default, which the recipes of bias-free models set off themselves. YaRN is a note:
    NeMo v2.4.0's GPTConfig takes position_embedding_type learned_absolute or rope (vendored)."""
    c, o, notes = "model.config.", [], []
    if model.normalization is not None:
        o.append((c + "normalization", {"layernorm": "LayerNorm", "rmsnorm": "RMSNorm"}[model.normalization]))
    if model.rope_theta is not None and model.position_embedding == "rope":
        o.append((c + "rotary_base", int(model.rope_theta)))
    if model.qk_norm:
        o.append((c + "qk_layernorm", True))
    if model.rope_scaling_factor is not None:
        notes.append(f"Llama 3.1 RoPE scaling x{model.rope_scaling_factor:g}: NeMo's GPTConfig has no field for it; "
                     "the llama31 recipes' Llama31Config applies it (scale_factor)")
    if model.swiglu_limit is not None:
        o.append((c + "activation_func_clamp_value", model.swiglu_limit))
        # Megatron-Bridge's GPT-OSS: activation_func quick_gelu, glu_linear_offset 1.0 (gpt_oss_bridge.py, 067f987df0)
        notes.append(f"swiglu_limit {model.swiglu_limit:g}: Megatron Core clamps a SwiGLU (silu) MLP only after core_v0.19.0 "
                     "and in MoE layers only; GPT-OSS's experts are model.config.activation_func = quick_gelu with "
                     "glu_linear_offset 1.0, set in the recipe's Python (a Callable, which NeMo-Run's CLI cannot parse)")
    if model.linear_bias:
        o.append((c + "add_bias_linear", True))
    if model.rope_mscale != 1.0:
        notes.append(f"rope_mscale {model.rope_mscale:g} (YaRN): NeMo's GPTConfig has no YaRN position embedding "
                     "(position_embedding_type learned_absolute or rope); Megatron-Bridge sets model.position_embedding_type"
                     "=yarn and model.yarn_rotary_scaling_factor (models/gpt_oss/gpt_oss_bridge.py)")
    return o, notes


def nemo_graphs(model: ModelSpec) -> tuple[Overrides, list[str]]:
    """CUDA graphs and Transformer Engine's op fuser. NeMo wraps the step in Megatron Core's FullCudaGraphWrapper
    when enable_cuda_graph and cuda_graph_scope == "full_iteration" (nemo/lightning/megatron_parallel.py, NVIDIA/NeMo
    8cfedd7203, after v2.4.0, which has none); both are vendored TransformerConfig fields of core_v0.15.0.
    use_transformer_engine_op_fuser is a TransformerConfig field from core_v0.18.0 (ba7b5ebce1) on, which NeMo
    v2.4.0's transformer_engine_layer_spec passes to the layer spec (nemo/collections/llm/gpt/model/base.py)."""
    c, t, o, notes = "model.config.", model.training, [], []
    if t.cuda_graph_impl in ("local", "transformer_engine"):
        o.append((c + "cuda_graph_impl", t.cuda_graph_impl))
    elif t.cuda_graph_impl == "full_iteration":
        o += [(c + "enable_cuda_graph", True), (c + "cuda_graph_scope", "full_iteration")]
        notes.append("cuda_graph_impl full_iteration: NeMo after v2.4.0 (8cfedd7203) runs it from these two overrides "
                     "(FullCudaGraphWrapper), v2.4.0 not at all; Megatron-Bridge: model.cuda_graph_impl=full_iteration")
        if model.moe is not None and model.moe.capacity_factor is None:
            notes.append("full_iteration with dropless MoE needs static expert shapes: model.config."
                         "moe_expert_rank_capacity_factor (Megatron Core core_v0.18.0 on), a per-rank token budget the "
                         "spec does not hold")
    if t.torch_compile:
        notes.append(torch_compile_note("NeMo (Megatron Core)"))
    if t.te_op_fuser:
        o.append((c + "use_transformer_engine_op_fuser", True))
        notes.append("model.config.use_transformer_engine_op_fuser needs Megatron Core core_v0.18.0 or later "
                     "(Megatron-Bridge: model.use_transformer_engine_op_fuser, its cutedsl_fused_grouped_mlp)")
    return o, notes


def nemo_settings(lay: Launch, model: ModelSpec, cluster: ClusterSpec) -> Export:
    per_node = min(cluster.node.gpus, lay.gpus)
    s = "trainer.strategy."
    o: Overrides = [("trainer.num_nodes", lay.gpus // per_node), ("trainer.devices", per_node),
                    (s + "tensor_model_parallel_size", lay.tp), (s + "pipeline_model_parallel_size", lay.pp)]
    o += nemo_split(lay)
    o += [(s + "context_parallel_size", lay.cp), (s + "sequence_parallel", lay.sequence_parallel)]
    window, notes = nemo_window(lay, model)
    o += window
    if model.moe is not None:
        moe, moe_notes = nemo_moe(lay, model)
        o += moe
        notes += moe_notes
    o += nemo_memory(lay, model)
    overlap, overlap_notes = nemo_tp_overlap(lay, model)
    o += overlap
    notes += overlap_notes
    o += [("data.micro_batch_size", lay.micro_batch), ("data.global_batch_size", lay.global_batch),
          ("data.seq_length", model.seq_len), ("model.config.seq_length", model.seq_len)]
    o += nemo_precision(model)
    for part in (nemo_architecture(model), nemo_graphs(model)):
        o += part[0]
        notes += part[1]
    if lay.gpus % per_node:
        notes.append(f"{lay.gpus} GPUs do not fill whole nodes of {per_node}: NeMo runs devices x num_nodes GPUs")
    return shell_export(notes, [(f"{k}={_value(v)}",) for k, v in o], continued=False)
