"""torchtitan command-line overrides of a layout: `--export torchtitan` writes the names of the latest release on
PyPI, torchtitan 0.3.0 (its wheel's torchtitan/config/configs.py and trainer.py's Trainer.Config, vendored in
tests/data/frameworks/torchtitan-0.3.txt): main's config tree with v0.2.2's batch fields. `--export torchtitan@main`
writes those of the unreleased main at commit b5bcd76 (2026-08-21; vendored in torchtitan-main.txt),
`--export torchtitan@0.2` those of release v0.2.2 (torchtitan/config/job_config.py, vendored in torchtitan.txt). Both: `--section.field=value`,
booleans as tyro's `--section.field` / `--section.no_field`.

main replaced v0.2.2's batch fields by token counts (trainer.py): num_tokens_per_microbatch_per_dp_rank (one
forward), num_pp_microbatches (one pipeline pass), num_tokens_per_train_step; gradient accumulation = tokens per
step / (microbatch tokens x pp microbatches x dp). Activation checkpointing is a tyro subcommand
(`activation-checkpoint:full|none|selective`, distributed/activation_checkpoint.py), written last; expert tensor
parallelism is gone (ep takes its ranks from dp_shard x cp x tp); the model's converters (FP8) and token
dispatcher are in the model config, off the CLI (Trainer.Config.model_spec is tyro.conf.Suppress).

Data parallelism (distributed/parallel_dims.py, models/llama3/infra/parallelize.py): FSDP2 shards
over data_parallel_shard_degree x context_parallel_degree, DDP replicates over
data_parallel_replicate_degree. ZeRO-3 is FSDP resharding after forward ("always"); ZeRO-2 is FSDP
keeping the gathered weights from forward to backward ("never"; Megatron-LM's help of
--torch-fsdp2-no-reshard-after-forward: "Set to enable FSDP ZeRO-2"); ZeRO-0 is DDP. ZeRO-1 has no
equivalent. Batches (train.py): gradient accumulation steps = global_batch_size / (local_batch_size
x data-parallel degree); with pp, pipeline_parallel.py splits local_batch_size into micro-batches of
pipeline_parallel_microbatch_size, so the planner's micro-batches per step are one pipeline pass.
"""
from __future__ import annotations

from math import ceil

from planner.errors import SpecError
from planner.costs.pipeline_ranks import path_order
from planner.export.common import Export, Launch, architecture_extras, shell_export, window_pattern
from planner.specs import ModelSpec

Overrides = list[tuple[str, object]]
MAIN = "b5bcd76"  # pytorch/torchtitan main, 2026-08-21 (b5bcd76c66d0acb1a08b176d9639425bc55e0b2a)
RELEASE = "0.3.0"  # the latest torchtitan release on PyPI (2026-09): --export torchtitan
HEADER = f"# torchtitan main {MAIN} (2026-08-21) names; torchtitan v0.2.2's: --export torchtitan@0.2"
# The first line of each revision's output: which torchtitan it writes for
HEADERS = {"0.3": f"# torchtitan {RELEASE} (the release on PyPI) names; unreleased main's: --export torchtitan@main, "
                  "v0.2.2's: --export torchtitan@0.2",
           "main": HEADER,
           "0.2": f"# torchtitan v0.2.2 names; the release {RELEASE}'s: --export torchtitan"}


def titan_counts(stages: int, layers: int, input_weight: int, output_weight: int) -> list[int] | None:
    """Transformer layers per stage as torchtitan's generate_llm_fqn_per_model_part places them (None
    where it raises): the embedding counts input_weight layers on the first stage, norm and output
    output_weight on the last, stage s takes one more while s < the remainder."""
    if stages == 1:
        return [layers]
    effective = layers + input_weight + output_weight
    per, extra = divmod(effective, stages)
    if stages > effective or per == 0 or input_weight > per or output_weight > per:
        return None
    out, left = [], layers
    for s in range(stages):
        want = per + (s < extra) - (input_weight if s == 0 else output_weight if s == stages - 1 else 0)
        out.append(min(max(want, 0), left))
        left -= out[-1]
    return out


# The planner's schedules by torch.distributed.pipelining's names (get_schedule_class); zb-h1 and dualpipe have
# none, refused in planner/export/frameworks.py RESTRICTIONS.
TITAN_SCHEDULES = {"1f1b": "1F1B", "interleaved": "Interleaved1F1B", "interleaved-zb": "InterleavedZeroBubble",
                   "zb-v": "ZBVZeroBubble", "dualpipev": "DualPipeV"}
TITAN_V = ("zb-v", "dualpipev")  # torch.distributed.pipelining's V schedules (style "v")


def titan_split(lay: Launch, main: bool = False) -> tuple[Overrides, list[str]]:
    """The schedule, and first/last weights (and layers per stage with vpp > 1) that reproduce the split.
    torchtitan numbers its stages along the micro-batch's path (a V schedule's rank r holds stages r and
    2 pp - 1 - r: pipeline_module_split's stage_ids_this_rank style "v"); `stage_layers` is in schedule order."""
    p = "--parallelism."
    o: Overrides = [(p + "pipeline_parallel_schedule", TITAN_SCHEDULES[lay.schedule])]
    stages, layers = lay.pp * lay.vpp, sum(lay.stage_layers)
    path = path_order(lay.stage_layers, lay.pp, lay.schedule in TITAN_V)
    weights = [(1, 1)] + [(i, j) for i in range(layers // stages + 2) for j in range(layers // stages + 2) if (i, j) != (1, 1)]
    for i, j in weights:
        per_stage = ceil((layers + i + j) / stages)
        if titan_counts(stages, layers, i, j) != path:
            continue
        if lay.vpp > 1 and ceil((layers + i + j) / per_stage) != stages:
            continue
        o += [(p + "pipeline_parallel_first_stage_less_layers", i), (p + "pipeline_parallel_last_stage_less_layers", j)]
        return o + ([(p + "pipeline_parallel_layers_per_stage", per_stage)] if lay.vpp > 1 else []), []
    fqns = []
    start = 0
    for s, k in enumerate(path):
        names = [f"layers.{n}" for n in range(start, start + k)]
        fqns.append((["tok_embeddings"] if s == 0 else []) + names + (["norm", "lm_head" if main else "output"] if s == stages - 1 else []))
        start += k
    return o, [f"the split {' '.join(map(str, path))} (along the path) has no first/last-weight form; in the TOML's "
               f"[parallelism] set module_fqns_per_model_part = {fqns}"]


def titan_data_parallel(lay: Launch, model: ModelSpec, main: bool = False) -> tuple[Overrides, list[str]]:
    p = "--parallelism."
    shard = lay.dp if lay.zero >= 2 else 1
    o: Overrides = [(p + "data_parallel_replicate_degree", lay.dp // shard), (p + "data_parallel_shard_degree", shard)]
    notes = []
    if lay.zero >= 2:
        o.append((p + "fsdp_reshard_after_forward", "always" if lay.zero == 3 else "never"))
    if lay.offloads_optimizer:
        o.append(("--training.enable_cpu_offload", True))
        notes.append("training.enable_cpu_offload is FSDP2's CPUOffloadPolicy: it keeps the parameters and gradients on "
                     "the host too (gathered to the GPU per layer, copied back each step), more host-link traffic than "
                     "the optimizer offload priced")
    if lay.cp > 1 and lay.zero < 3:
        notes.append(f"torchtitan shards weights, gradients and optimizer state over the {lay.cp} cp ranks "
                     f"(FSDP over dp_shard x cp), not ZeRO-{lay.zero}")
    if main:
        refuse_unrunnable_main(lay, model)
    return o, notes


def refuse_unrunnable_main(lay: Launch, model: ModelSpec) -> None:
    """trainer.py (main b5bcd76): the microbatch tokens divisible by (tp if sequence parallel) x 2cp (cp > 1). What
    parallel_dims.py refuses (no etp, ep dividing dp_shard*cp*tp) is declared in planner/export/frameworks.py."""
    where = f"(torchtitan main {MAIN})"
    divisor = (lay.tp if lay.sequence_parallel else 1) * (2 * lay.cp if lay.cp > 1 else 1)
    if (lay.micro_batch * model.seq_len) % divisor:
        raise SpecError(f"{lay.micro_batch * model.seq_len} tokens per microbatch do not divide by {divisor} "
                        f"(sequence-parallel tp x 2cp; torchtitan/trainer.py {where})", path="--export torchtitan",
                        expected="microbatch tokens divisible by tp x 2cp")


def titan_checkpointing(lay: Launch, main: bool, model: ModelSpec) -> tuple[Overrides, list[str]]:
    """v0.2.2: --activation_checkpoint.mode; main: the tyro subcommand activation-checkpoint:full|none (its default
    is op-level SelectiveAC), as torchtitan's own scripts write it (experiments/transformers_modeling_backend/tests/
    run_moe_tests.sh). Full recomputation of a block of N layers per chunk (training.recompute_method block) is
    v0.2.2's layer-frequency selective AC, every k-th layer checkpointed (selective_ac_option k), where each
    chunk's Lc layers are k N; uniform groups of N > 1 layers torchtitan has not (it wraps each block alone)."""
    if lay.recompute == "full" and not model.training.recompute_default_method:
        return _titan_layer_ac(lay, main, model), []
    notes = []
    if lay.recompute == "selective" and model.training.stack.selective_ac == "op":
        # priced as torchtitan's op-level policy (the torchtitan stack): main's selective subcommand is it
        # (SelectiveAC "Per-op selective activation checkpointing"); v0.2.2 says so with selective_ac_option op
        from planner.costs.compute import op_level_sac
        from planner.specs.layers import layer_kinds

        others = [k.name for k in layer_kinds(model) if not op_level_sac(model, k)]
        notes = [f"recompute=selective: torchtitan's op-level policy runs on every layer; the plan priced its {', '.join(others)} "
                 "layers with the module list (training.recompute_modules), the op policy's dense layers as such"] if others else []
        return ([("activation-checkpoint:selective", None)] if main else
                [("--activation_checkpoint.mode", "selective"), ("--activation_checkpoint.selective_ac_option", "op")]), notes
    if lay.recompute == "selective":
        notes.append("recompute=selective (Megatron's core-attention recompute) has no torchtitan equivalent: its "
                     "selective modes recompute every n-th layer or all but every second matmul; written as mode none, "
                     "which stores what selective stores when attention is fused (SDPA/flex)")
    mode = "full" if lay.recompute == "full" else "none"
    return [(f"activation-checkpoint:{mode}", None) if main else ("--activation_checkpoint.mode", mode)], notes


def _titan_layer_ac(lay: Launch, main: bool, model: ModelSpec) -> Overrides:
    t, stages = model.training, lay.pp * lay.vpp
    n = t.recompute_num_layers
    said = f"recompute_method {t.recompute_method} with recompute_num_layers {n}"
    if t.recompute_method == "uniform":
        raise SpecError(f"{said}: torchtitan checkpoints each transformer block alone, never a group of {n}",
                        path="--export torchtitan", expected="recompute_num_layers 1, or recompute_method block")
    if main:
        raise SpecError(f"{said}: torchtitan main ({MAIN}) has no layer-frequency activation checkpointing (full, "
                        "op-level selective or memory_budget: torchtitan/distributed/activation_checkpoint.py)",
                        path="--export torchtitan", expected="--export torchtitan@0.2 (selective_ac_option N)")
    chunk = model.layers // stages if model.layers % stages == 0 else 0
    if not chunk or chunk % min(n, chunk):
        raise SpecError(f"{said}: {model.layers} layers over pp*vpp = {stages} chunks are no whole multiple of {n} "
                        "per chunk, which torchtitan's every-k-th-layer checkpointing needs", path="--export torchtitan",
                        expected="recompute_num_layers dividing the layers of a model chunk")
    return [("--activation_checkpoint.mode", "selective"),
            ("--activation_checkpoint.selective_ac_option", chunk // min(n, chunk))]


def titan_compute(lay: Launch, model: ModelSpec, fsdp: bool, main: bool = False) -> tuple[Overrides, list[str]]:
    """Sequence parallelism and precision (with v0.2.2, recompute first)."""
    t, notes = model.training, []
    o: Overrides = []
    if not main:
        o, notes = titan_checkpointing(lay, main, model)
    if main and lay.tp > 1:
        o.append(("--parallelism.enable_sequence_parallel", lay.sequence_parallel))  # configs.py, default True
    elif lay.tp > 1 and not lay.sequence_parallel:
        notes.append("torchtitan's tensor parallelism always shards the norms over the sequence (sequence parallel); "
                     "sp off has no equivalent")
    o.append(("--training.mixed_precision_param", "bfloat16"))  # fp16: refused (planner/export/frameworks.py)
    if t.torch_compile:  # job_config.py Compile.enable (v0.2.2), configs.py CompileConfig.enable (0.3.0, main)
        o.append(("--compile.enable", True))
    if not fsdp and (lay.tp > 1 or lay.pp > 1):
        notes.append("without FSDP, torchtitan applies mixed_precision_param only to DDP alone: with tp or pp the "
                     "weights and activations stay float32")
    if main and t.precision in ("fp8", "mxfp8"):
        converter = "Float8LinearConverter" if t.precision == "fp8" else "MXFP8LinearConverter"
        notes.append(f"{t.precision} GEMMs: torchtitan main converts the model in the config function, model_registry(..., "
                     f"converters=[{converter}.Config(...)]) (components/quantization/), not on the CLI (model_spec is "
                     "tyro.conf.Suppress)" + (f"; its Float8 recipes are rowwise, no tensorwise FP8 all-gather "
                                              f"(fp8_param_gather)" if t.fp8_param_gather else ""))
    elif t.precision == "fp8":
        o += [("--model.converters", "quantize.linear.float8"), ("--quantize.linear.float8.recipe_name", "tensorwise")]
        if t.fp8_recipe != "tensorwise":  # torchao's tensorwise is dynamic (current) scaling; it deleted delayed (v0.10)
            notes.append(f"fp8_recipe {t.fp8_recipe}: torchao's Float8 has no {t.fp8_recipe} scaling (job_config.py "
                         "recipe_name: tensorwise dynamic, rowwise); written tensorwise, which reads each tensor's amax "
                         "first (current scaling)")
        if t.fp8_param_gather and fsdp:
            o += [("--quantize.linear.float8.enable_fsdp_float8_all_gather", True),
                  ("--quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp", True)]
    elif t.precision == "mxfp8":
        o.append(("--model.converters", "quantize.linear.mx"))
    if t.precision == "nvfp4" and main:
        notes.append("nvfp4 GEMMs: torchtitan 0.3.0 and main convert the model in the config function, "
                     "NVFP4LinearConverter.Config(fqns=...) (components/quantization/nvfp4.py, a TorchAO prototype), not on "
                     "the CLI; its llama3_8b_first_85_pct_layers_nvfp4 keeps the last 15 % of decoder blocks in BF16, "
                     "which the plan does not price (every linear layer in NVFP4)")
    elif t.precision == "nvfp4":
        raise SpecError("torchtitan v0.2.2 has no NVFP4 training (NVFP4LinearConverter came with 0.3.0)",
                        path="--export torchtitan@0.2", expected="torchtitan or torchtitan@main for --precision nvfp4")
    if not main and t.fp8_param_gather and t.precision in ("fp8", "mxfp8") and (t.precision == "mxfp8" or not fsdp):
        notes.append("fp8_param_gather: torchtitan gathers FP8 weights only with FSDP and tensorwise FP8")
    if t.grad_reduce_dtype == "bf16":
        notes.append("grad_reduce_dtype bf16 has no torchtitan equivalent (training.mixed_precision_reduce: float32 only)")
    return o, notes


def titan_moe(model: ModelSpec, main: bool = False) -> tuple[Overrides, list[str]]:
    """The flex dispatcher is torchtitan's DeepEP backend; the combined-1F1B all-to-all overlap has none."""
    t = model.training
    o: Overrides = [("--parallelism.expert_parallel_comm_backend", "deepep")] if t.moe_dispatcher == "flex" and not main else []
    notes = []
    if t.moe_dispatcher == "flex" and main:
        notes.append("moe_dispatcher flex: torchtitan main's DeepEP is the model's token dispatcher, comm_backend=\"deepep\" "
                     "(models/common/config_utils.py make_token_dispatcher_config), set in the config function, not on the CLI")
    if t.moe_a2a_overlap:
        notes.append("moe_a2a_overlap (Megatron's combined 1F1B) has no torchtitan equivalent: "
                     "parallelism.pipeline_parallel_expert_parallel_overlap belongs to its own pipeline schedules")
    return o, notes


def titan_graphs(lay: Launch, model: ModelSpec) -> tuple[Overrides, list[str]]:
    """torchtitan main captures forward+backward in a CUDA graph unless training.disable_cuda_graphs; trainer.py
    _validate_cuda_graphs raises with pp > 1 and with ep > 1 on a host-syncing dispatcher (the standard one)."""
    impl = model.training.cuda_graph_impl
    if impl == "none":
        return [("--training.disable_cuda_graphs", True)], []
    if lay.pp > 1 or lay.ep > 1:
        return [("--training.disable_cuda_graphs", True)], [
            f"cuda_graph_impl {impl}: torchtitan main refuses CUDA graphs with "
            f"{'pipeline parallelism' if lay.pp > 1 else 'its standard expert-parallel dispatcher'} (trainer.py "
            "_validate_cuda_graphs): disabled"]
    return [], [f"cuda_graph_impl {impl}: torchtitan main graphs the whole forward+backward step "
                "(training.disable_cuda_graphs false, its default)"]


def titan_unmatched(model: ModelSpec, main: bool = False) -> list[str]:
    """Architecture and kernels job_config.py has no field for (its [compile] has enable, components, backend)."""
    notes, t = [], model.training
    extras = architecture_extras(model)
    if extras:
        notes.append(f"{', '.join(extras)}: torchtitan has no job_config setting for them; the model's own code and "
                     "flavor (--model.name / --model.flavor) must set them" if not main else
                     f"{', '.join(extras)}: torchtitan has no CLI setting for them; the model config of the config "
                     "function (--module / --config) must set them")
    if t.cuda_graph_impl != "none" and not main:
        notes.append(f"cuda_graph_impl {t.cuda_graph_impl} (Megatron's CUDA graphs) has no torchtitan equivalent: "
                     "job_config.py has no CUDA-graph setting")
    if t.te_op_fuser:
        notes.append("te_op_fuser (Transformer Engine's op fuser in the expert MLP) has no torchtitan equivalent: "
                     "job_config.py has no Transformer Engine setting")
    return notes


def _line(key: str, value: object) -> str:
    if value is None:  # a tyro subcommand
        return key
    if isinstance(value, bool):
        section, _, name = key.rpartition(".")
        return key if value else f"{section}.no_{name}"
    return f"{key}={value}"


def torchtitan_settings(lay: Launch, model: ModelSpec, rev: str = "0.3") -> Export:
    """rev "0.3" (the release 0.3.0), "main" (b5bcd76) or "0.2" (v0.2.2)."""
    if rev in ("0.3", "main"):
        return torchtitan_main(lay, model, release=rev == "0.3")
    p = "--parallelism."
    o: Overrides = [(p + "tensor_parallel_degree", lay.tp), (p + "pipeline_parallel_degree", lay.pp),
                    (p + "context_parallel_degree", lay.cp)]
    if model.moe is not None:
        o += [(p + "expert_parallel_degree", lay.ep), (p + "expert_tensor_parallel_degree", lay.etp)]
    dp, notes = titan_data_parallel(lay, model)
    o += dp
    if model.moe is not None:
        moe, moe_notes = titan_moe(model)
        o += moe
        notes += moe_notes
    if lay.pp > 1:
        split, split_notes = titan_split(lay)
        o += split + [(p + "pipeline_parallel_microbatch_size", lay.micro_batch),
                      ("--training.local_batch_size", lay.micro_batch * lay.accumulation)]
        notes += split_notes
    else:
        o.append(("--training.local_batch_size", lay.micro_batch))
    o += [("--training.global_batch_size", lay.global_batch), ("--training.seq_len", model.seq_len)]
    compute, compute_notes = titan_compute(lay, model, fsdp=lay.zero >= 2 or lay.cp > 1)
    o += compute
    notes += compute_notes
    if model.sliding_window is not None:
        # job_config.py has no attention-window field: a model's window is its own code and flavor
        notes.append(f"{window_pattern(model)}: torchtitan has no job_config setting for it; the model's own "
                     "code and flavor (--model.name / --model.flavor) must set it")
    notes += titan_unmatched(model)
    return shell_export(notes, [(_line(k, v),) for k, v in o], continued=False, header=[HEADERS["0.2"]])


def torchtitan_main(lay: Launch, model: ModelSpec, release: bool = False) -> Export:
    """torchtitan main (b5bcd76): token counts in place of batch sizes, no etp, AC a subcommand (written last).
    release: torchtitan 0.3.0, main's config tree with v0.2.2's batch fields (training.local_batch_size,
    global_batch_size, seq_len; parallelism.pipeline_parallel_microbatch_size)."""
    p, t = "--parallelism.", "--training."
    o: Overrides = [(p + "tensor_parallel_degree", lay.tp), (p + "pipeline_parallel_degree", lay.pp),
                    (p + "context_parallel_degree", lay.cp)]
    if model.moe is not None:
        o.append((p + "expert_parallel_degree", lay.ep))
    dp, notes = titan_data_parallel(lay, model, main=not release)
    o += dp
    if model.moe is not None:
        moe, moe_notes = titan_moe(model, main=True)
        notes += moe_notes
    if release:
        refuse_unrunnable_release(lay, model)
    if lay.pp > 1:
        split, split_notes = titan_split(lay, main=True)
        notes += split_notes
        if release:  # one pipeline pass of all micro-batches: local batch = micro-batch x micro-batches
            o += split + [(p + "pipeline_parallel_microbatch_size", lay.micro_batch),
                          (t + "local_batch_size", lay.micro_batch * lay.accumulation)]
        else:
            o += split + [(p + "num_pp_microbatches", lay.accumulation)]  # one pipeline pass: gradient accumulation 1
    elif release:
        o.append((t + "local_batch_size", lay.micro_batch))
    if release:
        o += [(t + "global_batch_size", lay.global_batch), (t + "seq_len", model.seq_len)]
    else:
        o += [(t + "num_tokens_per_microbatch_per_dp_rank", lay.micro_batch * model.seq_len),
              (t + "num_tokens_per_train_step", lay.global_batch * model.seq_len), (t + "max_context_length", model.seq_len)]
    compute, compute_notes = titan_compute(lay, model, fsdp=lay.zero >= 2 or lay.cp > 1, main=True)
    o += compute
    notes += compute_notes
    graphs, graph_notes = titan_graphs(lay, model)
    o += graphs
    notes += graph_notes
    if model.sliding_window is not None:
        notes.append(f"{window_pattern(model)}: torchtitan has no CLI setting for it; the model config of the config "
                     "function (--module / --config) must set it")
    notes += titan_unmatched(model, main=True)
    ac, ac_notes = titan_checkpointing(lay, main=True, model=model)
    notes = ac_notes + notes
    return shell_export(notes, [(_line(k, v),) for k, v in o + ac], continued=False,
                        header=[HEADERS["0.3" if release else "main"]])


def refuse_unrunnable_release(lay: Launch, model: ModelSpec) -> None:
    """trainer.py (0.3.0): the training sequence divisible by (tp if sequence parallel) x 2cp (cp > 1)."""
    divisor = (lay.tp if lay.sequence_parallel else 1) * (2 * lay.cp if lay.cp > 1 else 1)
    if model.seq_len % divisor:
        raise SpecError(f"a sequence of {model.seq_len} tokens does not divide by {divisor} (sequence-parallel tp x 2cp; "
                        f"torchtitan/trainer.py, torchtitan {RELEASE})", path="--export torchtitan",
                        expected="seq_len divisible by tp x 2cp")
