"""Megatron-LM's command-line flags of a layout (names and choices from megatron/training/arguments.py
of NVIDIA/Megatron-LM core_v0.15.0, vendored in tests/data/frameworks/megatron-lm.txt).

Pipeline split (transformer_block.py get_num_layers_to_build): --decoder-first/last-pipeline-num-layers
give the layers of the first and the last pipeline rank over all its virtual stages, the middle ranks
share the rest evenly and each rank's chunks are equal (first and last divisible by vpp). Any other
split is spelled with --pipeline-model-parallel-layout (pipeline_parallel_layer_layout.py): virtual
stages separated by "|" in the order vpp rank x pp + pp rank (the schedule order of `stage_layers`),
"t" a decoder layer, "E" the embedding, "L" the loss, "t*n" n layers. The virtual stages per rank are
--num-virtual-stages-per-pipeline-rank: arguments.py refuses --num-layers-per-virtual-pipeline-stage
beside the first/last flags, and a layout string implies them (it allows neither beside it).

Later releases (checked in megatron/core/transformer/transformer_config.py, whose fields
megatron/training/argument_utils.py ArgumentGroupFactory turns into `--field-name` flags from core_v0.16.0
on): core_v0.18.0 (ba7b5ebce1) adds --use-transformer-engine-op-fuser, --moe-expert-rank-capacity-factor
and --cuda-graph-impl full_iteration (core_v0.15.0-0.17.0: --cuda-graph-impl local --cuda-graph-scope
full_iteration, which d98e8a64dd still migrates).
"""
from __future__ import annotations

from planner.errors import SpecError
from planner.export.common import Export, Launch, is_even, runs, shell_export, torch_compile_note
from planner.specs.layers import windowed_layers
from planner.specs import ModelSpec

Flags = list[tuple[str, object]]  # (flag, value); value None: a switch


def megatron_first_last(stage_layers, pp: int, vpp: int) -> tuple[int, int] | None:
    """(first, last) when --decoder-first/last-pipeline-num-layers produce this split, else None."""
    n = list(stage_layers)
    L = sum(n)
    rank = [sum(n[j * pp + r] for j in range(vpp)) for r in range(pp)]
    first, last = rank[0], rank[-1]
    middle = pp - 2
    # Megatron Core refuses a first or last stage count of 0 (transformer_config.py; frameworks.SPELLINGS)
    if pp < 3 or first == 0 or last == 0 or first % vpp or last % vpp or (L - first - last) % middle:
        return None
    per_rank = (L - first - last) // middle
    if per_rank % vpp:
        return None
    built = [first // vpp if r == 0 else last // vpp if r == pp - 1 else per_rank // vpp
             for j in range(vpp) for r in range(pp)]
    return (first, last) if built == n else None


def megatron_layout(stage_layers, mtp_layers: int = 0) -> str:
    """--pipeline-model-parallel-layout of a split, runs of equal middle stages as "(X|)*n":
    [0, 1 x 126, 0] -> 'E|(t|)*126L', [7, 8 x 14, 7] -> 'Et*7|(t*8|)*14t*7L'. A model with MTP layers puts
    them ("m" each) in the last stage before the loss: pipeline_parallel_layer_layout.py validate_layer_layout
    asserts the layout's count equals mtp_num_layers, after every decoder layer, in the last virtual stage of
    the last rank together with the loss (core_v0.15.0; Megatron's own placement without a layout)."""
    def text(k: int) -> str:
        return "t" if k == 1 else f"t*{k}" if k else ""

    n = list(stage_layers)
    out = ["E" + text(n[0]) + "|"]
    k = 1
    while k < len(n) - 1:
        j = k
        while j < len(n) - 1 and n[j] == n[k]:
            j += 1
        out.append(f"({text(n[k])}|)*{j - k}" if j - k > 1 else text(n[k]) + "|")
        k = j
    out.append(text(n[-1]) + "m" * mtp_layers + "L")
    return "".join(out)


def megatron_pipeline_args(stage_layers, pp: int, vpp: int, mtp_layers: int = 0) -> list[str]:
    """The Megatron-LM flags that state an uneven split (none for an even one); `mtp_layers`: the model's
    multi-token-prediction layers, which a layout string must place (megatron_layout)."""
    if pp < 2 or is_even(stage_layers):
        return []
    fl = megatron_first_last(stage_layers, pp, vpp)
    if fl is not None:
        return ["--decoder-first-pipeline-num-layers", str(fl[0]), "--decoder-last-pipeline-num-layers", str(fl[1])]
    return ["--pipeline-model-parallel-layout", megatron_layout(stage_layers, mtp_layers)]


def moe_layer_pattern(model: ModelSpec) -> str | None:
    """--moe-layer-freq as a list expression of the planner's MoE layers (None: every layer is MoE).
    The planner's layer i >= dense_layers is MoE when (i - dense_layers + 1) % layer_every == 0;
    Megatron's integer form would make layer 0 MoE instead (gpt_layer_specs.py), so the list is spelled."""
    moe = model.moe
    if moe is None or (moe.dense_layers == 0 and moe.layer_every == 1):
        return None
    k, n = moe.dense_layers, moe.layer_every
    blocks, rest = divmod(model.layers - k, n)
    block = "[1]" if n == 1 else f"([0]*{n - 1}+[1])"
    terms = ([f"[0]*{k}"] if k else []) + ([f"{block}*{blocks}"] if blocks else []) + ([f"[0]*{rest}"] if rest else [])
    return "(" + "+".join(terms) + ")"


def position_and_norm_args(model: ModelSpec) -> Flags:
    """RoPE (its base and Llama 3.1's scaling) and the norms, where the spec states them: Megatron's
    defaults are learned positions, a RoPE base of 10,000 and LayerNorm."""
    f: Flags = []
    if model.position_embedding == "none":  # a choice of arguments.py (Nemotron-H's Mamba stacks use it)
        f.append(("--position-embedding-type", "none"))
    if model.position_embedding == "rope":
        f.append(("--position-embedding-type", "rope"))
        if model.rope_theta is not None:
            f.append(("--rotary-base", int(model.rope_theta)))  # an int in arguments.py
        if model.rope_scaling_factor is not None:
            f += [("--use-rope-scaling", None), ("--rope-scaling-factor", model.rope_scaling_factor)]
    if model.normalization is not None:
        f.append(("--normalization", {"layernorm": "LayerNorm", "rmsnorm": "RMSNorm"}[model.normalization]))
    if model.qk_norm or model.mla is not None:
        # MLA's latent norms (DeepSeek's q_a_layernorm, kv_a_layernorm) are Megatron's qk_layernorm, as
        # Megatron-Bridge's deepseek_v3_bridge.py and kimi_bridge.py (v0.6.0) set it
        f.append(("--qk-layernorm", None))
    return f


def yarn_args(model: ModelSpec) -> tuple[Flags, list[str]]:
    """MLA's RoPE type and YaRN (core_v0.15.0 arguments.py _add_mla_args, --rope-type): MLATransformerConfig
    defaults to rope_type yarn with factor 40, so a MLA model without YaRN says --rope-type rope. YaRN's
    original context and betas have no flag there: MLATransformerConfig's defaults (4096, 32, 1) apply, said
    in a note when the spec's differ. A non-MLA YaRN (GPT-OSS) has no core_v0.15.0 flag at all."""
    y, notes = model.yarn, []
    if model.mla is None:
        if y is not None:
            notes.append(f"YaRN (factor {y.factor:g}, original context {y.original_max_position_embeddings}, beta_fast "
                         f"{y.beta_fast:g}, beta_slow {y.beta_slow:g}) outside MLA has no core_v0.15.0 flag; later "
                         "Megatron-LM (d98e8a64dd) has --position-embedding-type yarn --rotary-scaling-factor "
                         "--yarn-original-max-position-embeddings --yarn-beta-fast --yarn-beta-slow")
        return [], notes
    if y is None:
        return [("--rope-type", "rope")], notes
    f: Flags = [("--rope-type", "yarn"), ("--rotary-scaling-factor", y.factor),
                ("--mscale", 1.0 if y.mscale is None else y.mscale),
                ("--mscale-all-dim", 0.0 if y.mscale_all_dim is None else y.mscale_all_dim)]
    fixed = {"original_max_position_embeddings": 4096, "beta_fast": 32, "beta_slow": 1}  # MLATransformerConfig
    off = [f"{k} {getattr(y, k):g} (Megatron: {v})" for k, v in fixed.items() if getattr(y, k) != v]
    if off:
        notes.append(f"YaRN {', '.join(off)}: no core_v0.15.0 flag; set MLATransformerConfig's fields in the model provider")
    return f, notes


def router_args(model: ModelSpec) -> Flags:
    """The router as the spec states it (Megatron's defaults: softmax scores, no expert bias, no groups)."""
    moe, f = model.moe, []
    if moe.router_score != "softmax":
        f.append(("--moe-router-score-function", moe.router_score))
    if moe.expert_bias:
        f.append(("--moe-router-enable-expert-bias", None))  # transformer_config.py: sigmoid only
    if moe.router_groups is not None:
        f += [("--moe-router-num-groups", moe.router_groups), ("--moe-router-group-topk", moe.router_group_top_k)]
    if moe.top_k_scaling is not None:
        f.append(("--moe-router-topk-scaling-factor", moe.top_k_scaling))
    return f


def hybrid_args(model: ModelSpec) -> Flags:
    """A hybrid model (planner/specs/hybrid.py) for pretrain_mamba.py (core_v0.15.0): its pattern
    (arguments.py --hybrid-override-pattern, Symbols M, *, -), the Mamba layer spec it requires
    (pretrain_mamba.py: "You must provide a valid Mamba layer spec via --spec") and the Mamba shape.
    Gated DeltaNet and MoE layers are refused before (planner/export/frameworks.py model_refusal)."""
    if model.layer_pattern is None:
        return []
    f: Flags = [("--spec", ("megatron.core.models.mamba.mamba_layer_specs", "mamba_stack_spec")),
                ("--hybrid-override-pattern", model.layer_pattern), ("--is-hybrid-model", None)]
    if model.mamba is not None:
        m = model.mamba
        f += [("--mamba-num-heads", m.heads), ("--mamba-head-dim", m.head_dim), ("--mamba-state-dim", m.state_dim),
              ("--mamba-num-groups", m.groups)]
    return f


def model_args(model: ModelSpec) -> Flags:
    """The model's shape, so the line builds the model the planner scored."""
    f: Flags = [("--num-layers", model.layers), ("--hidden-size", model.hidden), ("--ffn-hidden-size", model.ffn),
                ("--num-attention-heads", model.heads)]
    if model.mla is not None:
        m = model.mla
        f += [("--multi-latent-attention", None)] + ([("--q-lora-rank", m.q_lora_rank)] if m.q_lora_rank else [])
        f += [("--kv-lora-rank", m.kv_lora_rank), ("--qk-head-dim", m.qk_nope_head_dim),
              ("--qk-pos-emb-head-dim", m.qk_rope_head_dim), ("--v-head-dim", m.v_head_dim)]
    elif model.num_kv_heads < model.heads:
        f += [("--group-query-attention", None), ("--num-query-groups", model.num_kv_heads)]
    if model.head_dim is not None and model.mla is None:
        f.append(("--kv-channels", model.head_dim))
    f += [("--seq-length", model.seq_len), ("--max-position-embeddings", model.seq_len)]
    f += position_and_norm_args(model)
    f += yarn_args(model)[0]
    if model.mtp_layers:
        f.append(("--mtp-num-layers", model.mtp_layers))
    if model.sliding_window is not None:
        # Megatron-Core's window (left, right) spans keys i - left .. i + right: w keys is (w - 1, 0)
        f.append(("--window-size", f"{model.sliding_window - 1},0"))
        if model.full_attention_every is not None:
            f.append(("--window-attn-skip-freq", model.full_attention_every))
    if model.ffn_act == "swiglu":
        f.append(("--swiglu", None))
    if model.ffn_act == "relu2":
        f.append(("--squared-relu", None))
    f += hybrid_args(model)
    if model.swiglu_limit is not None:
        f.append(("--activation-func-clamp-value", model.swiglu_limit))
    # Megatron's add_bias_linear defaults to True (every linear layer, experts too; no --add-bias-linear).
    # Unstated, the spec's biases are its parameter count's: GeLU MLPs with biases (GPT-2/3), SwiGLU
    # models without (Llama, Mixtral, Qwen, DeepSeek), whose grouped expert GEMMs refuse biases with
    # the default bias-dropout fusion (TEGroupedMLP's assert).
    if model.linear_bias is False or (model.linear_bias is None and model.ffn_act == "swiglu"):
        f.append(("--disable-bias-linear", None))
    elif model.linear_bias and model.moe is not None:
        f.append(("--no-bias-dropout-fusion", None))  # as Megatron-Bridge's gpt_oss_bridge.py sets it
    if not model.tied_embeddings:
        f.append(("--untie-embeddings-and-output-weights", None))
    if model.moe is not None:
        moe = model.moe
        f += [("--num-experts", moe.experts), ("--moe-router-topk", moe.top_k), ("--moe-ffn-hidden-size", moe.expert_ffn_hidden)]
        f += router_args(model)
        # what the ep cost model prices (planner/costs/comm.py): all-to-all or flex dispatch, grouped expert
        # GEMMs; Megatron's defaults are the allgather dispatcher and one GEMM per expert
        f += [("--moe-token-dispatcher-type", model.training.moe_dispatcher), ("--moe-grouped-gemm", None)]
        if model.training.moe_dispatcher == "flex":
            # core_v0.15.0's flex dispatcher runs DeepEP with --moe-enable-deepep; later Megatron-Core spells
            # the backend --moe-flex-dispatcher-backend deepep|hybridep (not in the vendored arguments.py)
            f.append(("--moe-enable-deepep", None))
        if moe.shared_experts:
            f.append(("--moe-shared-expert-intermediate-size", moe.shared_experts * moe.shared_ffn))
        if moe_layer_pattern(model) is not None:
            f.append(("--moe-layer-freq", moe_layer_pattern(model)))
        if moe.capacity_factor is not None:
            # the planner prices a capacity as drop-and-pad (static shapes, no host sync): both flags
            f += [("--moe-expert-capacity-factor", moe.capacity_factor), ("--moe-pad-expert-input-to-capacity", None)]
    return f


# Megatron-LM main's hybrid pattern takes '|' between pipeline stages ("The main pattern may also contain "|"
# pipe symbols to define pipeline stage boundaries"; Symbols.PIPE = '|'); not core_v0.15.0 (MambaStack).
MAIN_PIPE_SOURCE = "NVIDIA/Megatron-LM 7acb0753 megatron/core/models/hybrid/hybrid_layer_allocation.py"


def piped_pattern(pattern: str, stage_layers) -> str:
    """A pattern with '|' between the stages of a split (one chunk a rank: schedule order is the layers')."""
    out, start = [], 0
    for n in stage_layers:
        out.append(pattern[start:start + n])
        start += n
    return "|".join(out)


def parallel_args(lay: Launch, model: ModelSpec) -> Flags:
    f: Flags = [("--tensor-model-parallel-size", lay.tp), ("--pipeline-model-parallel-size", lay.pp),
                ("--context-parallel-size", lay.cp)]
    if model.moe is not None:
        f += [("--expert-model-parallel-size", lay.ep), ("--expert-tensor-parallel-size", lay.etp)]
    if model.layer_pattern is not None and lay.pp > 1 and not is_even(lay.stage_layers):
        # core_v0.15.0's MambaStack builds num_layers // pp layers of the pattern on every rank (frameworks.py
        # RESTRICTIONS quotes it) and reads no --pipeline-model-parallel-layout: an uneven split has no flags
        raise SpecError(f"the uneven split {runs(lay.stage_layers)} of a hybrid model has no Megatron-LM core_v0.15.0 "
                        "flags: its MambaStack gives every pipeline rank num_layers // pp layers of the pattern "
                        f"(Megatron-LM main reads stage boundaries in the pattern, {MAIN_PIPE_SOURCE}: "
                        f"{piped_pattern(model.layer_pattern, lay.stage_layers)})",
                        path="layout.stage_layers", expected=f"the even split ({sum(lay.stage_layers) // lay.pp} a rank), "
                        "or a plan without stage_layers")
    split = megatron_pipeline_args(lay.stage_layers, lay.pp, lay.vpp, model.mtp_layers or 0)
    if lay.vpp > 1 and (not split or split[0] != "--pipeline-model-parallel-layout"):
        f.append(("--num-virtual-stages-per-pipeline-rank", lay.vpp))
    f += list(zip(split[::2], split[1::2]))
    if lay.sequence_parallel:
        f.append(("--sequence-parallel", None))
    if lay.cp > 1:
        # a sliding window needs all_gather or a2a (Transformer Engine, attn_forward_func_with_cp).
        # Spelled as Megatron-Core's TransformerConfig.cp_comm_type and Transformer Engine compare it
        # ("all_gather"), which the flag passes through unchanged; its help text says "allgather".
        gather = model.training.stack.cp_comm == "all_gather" or windowed_layers(model)
        f.append(("--cp-comm-type", "all_gather" if gather else "p2p"))
    return f


def moe_overlap_args(lay: Launch, model: ModelSpec) -> tuple[Flags, list[str]]:
    """training.moe_a2a_overlap: the combined-1F1B schedule, which needs the delayed weight gradients;
    arguments.py asserts ep > 1, no full recomputation and, with pp > 1, virtual stages."""
    if model.moe is None or not model.training.moe_a2a_overlap:
        return [], []
    notes = []
    if lay.ep < 2:
        notes.append("moe_a2a_overlap with ep=1: Megatron's --overlap-moe-expert-parallel-comm asserts ep > 1")
    if lay.recompute == "full":
        notes.append("moe_a2a_overlap with recompute=full: Megatron refuses it (the planner hides nothing here)")
    if lay.recompute == "selective" and "moe" in model.training.recomputed:
        notes.append("moe_a2a_overlap with the moe module recomputed: Megatron refuses it (the planner hides nothing here)")
    if lay.pp > 1 and lay.vpp < 2:
        notes.append("moe_a2a_overlap with pp > 1 needs virtual stages in Megatron (the planner hides nothing here)")
    return [("--overlap-moe-expert-parallel-comm", None), ("--delay-wgrad-compute", None)], notes


def _hybrid_notes(model: ModelSpec) -> list[str]:
    if model.layer_pattern is None:
        return []
    return ["a hybrid model: run these flags with pretrain_mamba.py, not pretrain_gpt.py (core_v0.15.0); "
            "Megatron-LM main spells the pattern --hybrid-layer-pattern and runs pretrain_hybrid.py"]


def model_notes(model: ModelSpec) -> list[str]:
    """What the flags cannot say of the clamped SwiGLU and YaRN."""
    notes = []
    if model.swiglu_limit is not None:
        # transformer_config.py: the SwiGLU clamp arrives with 2a75ac12c5 (after core_v0.19.0) and raises
        # "only supported with MoE"; before, activation_func_clamp_value is "only used when activation_func is
        # quick_gelu". Megatron-Bridge builds GPT-OSS as quick_gelu, clamp 7.0, glu_linear_offset 1.0
        # (src/megatron/bridge/models/gpt_oss/gpt_oss_bridge.py, 067f987df0).
        notes.append(f"swiglu_limit {model.swiglu_limit:g}: Megatron clamps a --swiglu MLP only after core_v0.19.0 and in "
                     "MoE layers only; GPT-OSS's experts, (up + 1) x gate x sigmoid(1.702 gate), are --quick-geglu "
                     "--glu-linear-offset 1.0 with the clamp (same matrices and FLOPs: the spec does not tell them apart)")
    if model.rope_mscale != 1.0:
        # rope_utils.py apply_rotary_pos_emb (d98e8a64dd): mscale != 1 warns and takes the unfused path
        notes.append(f"rope_mscale {model.rope_mscale:g} (YaRN): the spec keeps only YaRN's cos/sin factor; Megatron-LM "
                     "builds YaRN with --position-embedding-type yarn --rotary-scaling-factor F "
                     "--yarn-original-max-position-embeddings N (d98e8a64dd; not in core_v0.15.0) and runs RoPE unfused "
                     "when mscale != 1, as the planner prices")
    return notes


def graph_args(model: ModelSpec) -> tuple[Flags, list[str]]:
    """CUDA graphs and Transformer Engine's op fuser (training.cuda_graph_impl, training.te_op_fuser)."""
    t, f, notes = model.training, [], []
    if t.cuda_graph_impl != "none":
        f.append(("--cuda-graph-impl", t.cuda_graph_impl))
    if t.cuda_graph_impl == "full_iteration":
        f.append(("--no-check-for-nan-in-loss-and-grad", None))  # arguments.py asserts it with full_iteration
        if model.moe is not None and model.moe.capacity_factor is None:
            # transformer_config.py (d98e8a64dd): set, it "selects static shapes (fixed receive buffer, CUDA-graph
            # capturable)"; it requires moe_flex_dispatcher_backend hybridep or ncclep
            notes.append("cuda_graph_impl full_iteration with dropless MoE: the graph needs static expert shapes; add "
                         "--moe-expert-rank-capacity-factor C (a per-rank token budget the spec does not hold; it needs "
                         "--moe-token-dispatcher-type flex with --moe-flex-dispatcher-backend hybridep or ncclep)")
    if t.te_op_fuser:
        f.append(("--use-transformer-engine-op-fuser", None))
    if t.torch_compile:
        notes.append(torch_compile_note("Megatron-LM"))
    full = t.cuda_graph_impl == "full_iteration"
    later = [name for name, used in (("--cuda-graph-impl full_iteration", full),
                                     ("--use-transformer-engine-op-fuser", t.te_op_fuser)) if used]
    if later:
        before = "; before it, --cuda-graph-impl local --cuda-graph-scope full_iteration" if full else ""
        notes.append(f"{' and '.join(later)}: Megatron-Core core_v0.18.0 or later{before}")
    return f, notes


def memory_args(lay: Launch, model: ModelSpec) -> tuple[Flags, list[str]]:
    """Recompute and ZeRO. Full recomputation as training.recompute_method and recompute_num_layers say
    (default uniform, one layer per unit: every layer's input checkpointed). Selective recomputes the core attention (Megatron's default
    --recompute-modules core_attn, Korthikanti et al. 2022), or the model's training.recompute_modules. ZeRO-1 is the distributed optimizer;
    ZeRO-2/3 are Megatron FSDP's optim_grads / optim_grads_params ("similar to ZeRO-2/ZeRO-3",
    megatron/core/distributed/fsdp/src/README.md), which arguments.py requires with the fsdp_dtensor
    checkpoint format."""
    t = model.training
    f: Flags = {"none": [], "selective": [("--recompute-granularity", "selective")],
                "full": [("--recompute-granularity", "full"), ("--recompute-method", t.recompute_method),
                         ("--recompute-num-layers", t.recompute_num_layers)]}[lay.recompute]
    notes = []
    if lay.recompute == "selective" and model.training.recompute_modules is not None:
        f.append(("--recompute-modules", tuple(model.training.recompute_modules)))
    if lay.zero == 1:
        f.append(("--use-distributed-optimizer", None))
    elif lay.zero >= 2:
        f += [("--use-megatron-fsdp", None), ("--data-parallel-sharding-strategy", "optim_grads" if lay.zero == 2 else "optim_grads_params"),
              ("--ckpt-format", "fsdp_dtensor")]
        notes.append(f"ZeRO-{lay.zero} is written as Megatron FSDP, a different code path from the distributed optimizer; "
                     "it needs CUDA_DEVICE_MAX_CONNECTIONS unset, which tp or cp > 1 before Blackwell want set to 1")
    if lay.offloads_optimizer:
        # megatron/core/optimizer/cpu_offloading/README.md's flags; arguments.py asserts the precision-aware
        # optimizer with --optimizer-cpu-offload; the D2H, CPU step and H2D overlap as priced (planner/costs/offload.py)
        f += [("--optimizer-cpu-offload", None), ("--optimizer-offload-fraction", "1.0"),
              ("--overlap-cpu-optimizer-d2h-h2d", None), ("--use-precision-aware-optimizer", None)]
    if model.training.dp_comm_overlap and lay.dp * lay.cp > 1:
        f.append(("--overlap-grad-reduce", None))
        if lay.zero == 1:
            f.append(("--overlap-param-gather", None))
    if model.training.tp_comm_overlap and lay.tp > 1:
        if lay.sequence_parallel:
            f.append(("--tp-comm-overlap", None))
        else:
            notes.append("TP communication overlap was planned, but Megatron-LM's --tp-comm-overlap needs sequence parallelism")
    return f, notes


def precision_args(model: ModelSpec) -> Flags:
    """--bf16/--fp16; FP8 as NeMo's recipes set it (recipes/precision/mixed_precision.py: fp8 'hybrid',
    per-tensor FP8 with training.fp8_recipe, delayed by default, 'mxfp8' for MXFP8); NVFP4 as E2M1 with the
    nvfp4 recipe."""
    t = model.training
    f: Flags = [("--fp16" if t.precision == "fp16" else "--bf16", None)]
    if t.precision in ("fp8", "mxfp8"):
        f += [("--fp8-format", "hybrid"), ("--fp8-recipe", t.fp8_recipe if t.precision == "fp8" else "mxfp8")]
        if t.fp8_param_gather:
            f.append(("--fp8-param-gather", None))
    elif t.precision == "nvfp4":
        # Transformer Engine's NVFP4BlockScaling (core_v0.15.0 arguments.py --fp4-format choices ['e2m1'],
        # --fp4-recipe choices ['nvfp4']); no --first-last-layers-bf16: every linear layer in NVFP4, as priced
        f += [("--fp4-format", "e2m1"), ("--fp4-recipe", "nvfp4")]
    if t.grad_reduce_dtype == "bf16":
        f.append(("--grad-reduce-in-bf16", None))  # Megatron-Core DDP grad_reduce_in_fp32=False
    return f


def vocab_args(lay: Launch, model: ModelSpec) -> tuple[Flags, list[str]]:
    """The spec's vocabulary as the model's: --padded-vocab-size, which training/tokenizer/tokenizer.py keeps
    as given (else it pads the tokenizer's size to a multiple of 128 x tp); the vocab-parallel embedding
    splits it over tp (tensor_parallel/utils.py VocabUtility divides it)."""
    if model.vocab % lay.tp:
        return [], [f"vocab {model.vocab} does not divide by tp {lay.tp}: Megatron pads the tokenizer's vocabulary to a "
                    f"multiple of --make-vocab-size-divisible-by x tp (128 x {lay.tp} by default)"]
    return [("--padded-vocab-size", model.vocab)], []


def megatron_settings(lay: Launch, model: ModelSpec) -> Export:
    mem, notes = memory_args(lay, model)
    vocab, vocab_notes = vocab_args(lay, model)
    notes += vocab_notes + yarn_args(model)[1]
    overlap, overlap_notes = moe_overlap_args(lay, model)
    graphs, graph_notes = graph_args(model)
    notes += overlap_notes + graph_notes + model_notes(model) + _hybrid_notes(model)
    flags = (model_args(model) + vocab + parallel_args(lay, model) + overlap + mem + graphs
             + [("--micro-batch-size", lay.micro_batch), ("--global-batch-size", lay.global_batch)] + precision_args(model))
    # a tuple is a list-valued flag (nargs='*', e.g. --recompute-modules): one word per item
    lines = [(flag, *(() if value is None else value if isinstance(value, tuple) else (value,))) for flag, value in flags]
    return shell_export(notes, lines, continued=True)
