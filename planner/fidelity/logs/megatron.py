"""Megatron-LM / Megatron-Core and Megatron-Bridge logs (NVIDIA/Megatron-LM d98e8a64,
NVIDIA-NeMo/Megatron-Bridge 067f987d; the print statements are in tests/data/logs/*-prints.txt).

Both print the same per-iteration line (Bridge's `training_log` is derived from Megatron's):
` [time] iteration N/ M | consumed samples: ... | elapsed time per iteration (ms): T | ... |
global batch size: G | ...`, where T is the mean over the `log_interval` iterations since the last
line. Megatron-LM prints its whole argument namespace at start (`_print_args`) and memory in MB
(`report_memory`); Bridge prints only the config values that differ from Megatron Core's defaults
(`log_non_default_values`) and memory in GB (1e9 bytes) from `torch.cuda.memory_stats()`.
"""
from __future__ import annotations

import re
from typing import Any

from planner.fidelity.logs.common import (BYTES_PER_GB, BYTES_PER_GIB, MIB_PER_GIB, NUMBER, InOrder, Step,
                                          checked_seconds, count, keep, literal, number, positive_int,
                                          read_number, run)

ARGS_START = re.compile(r"-{8,} arguments -{8,}")
ARGS_END = re.compile(r"-{8,} end of arguments -{8,}")
ARG_LINE = re.compile(r"  ([A-Za-z_]\w*) (\.*) ?(.*)$")
ITERATION = InOrder(r"iteration\s+(\d+)/\s*(\d+) \|", rf" elapsed time per iteration \(ms\): ({NUMBER}) \|")
GLOBAL_BATCH = re.compile(r"\| global batch size:\s*(\d+) \|")
MEMORY_MB = re.compile(rf"\(after \d+ iterations\) memory \(MB\) \| allocated: {NUMBER} "
                       rf"\| max allocated: ({NUMBER}) \|")
MEMORY_GB = re.compile(r"\(after \d+ iterations\) memory \(GB\)((?: \| [\w-]+: \S+)+)")
BRIDGE_START = "Configuration Summary (Non-Default Values vs Megatron Core)"
BRIDGE_SECTION = re.compile(r"^\[(\w+)\](?: Non-default values \(vs Mcore \w+\))?:\s*$")
BRIDGE_ENTRY = re.compile(r"^  (\w+): (.*)$")
BRIDGE_DEFAULT = "  (Mcore default: "  # then the default and ")" to the line's end, dropped from the value
MICROBATCHES = re.compile(r"setting number of microbatches to constant (\d+)")
BROADCAST = re.compile(r"Broadcasting config from rank 0 to all (\d+) ranks")

# Megatron Core's defaults (ModelParallelConfig / TransformerConfig): Bridge leaves out of its
# summary every model value equal to these, so a missing key in a printed summary means this.
MCORE_DEFAULTS = {"tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1,
                  "context_parallel_size": 1, "expert_model_parallel_size": 1,
                  "virtual_pipeline_model_parallel_size": None, "sequence_parallel": False,
                  "recompute_granularity": None, "bf16": False, "fp16": False, "fp8": None}

LAYOUT_ARGS = {"tensor_model_parallel_size": "tp", "pipeline_model_parallel_size": "pp",
               "context_parallel_size": "cp", "expert_model_parallel_size": "ep",
               "expert_tensor_parallel_size": "etp", "micro_batch_size": "micro_batch"}
MODEL_ARGS = {"num_layers": "layers", "hidden_size": "hidden", "num_attention_heads": "heads",
              "ffn_hidden_size": "ffn_hidden", "padded_vocab_size": "vocab",
              "vocab_size": "vocab", "seq_length": "seq_len"}


def iteration_steps(lines: list[str], path: str) -> tuple[list[Step], int | None]:
    """The timed iteration lines (seconds per iteration) and the last global batch size."""
    steps, batch = [], None
    for number_, line in enumerate(lines, 1):
        match = ITERATION.search(line)
        if not match:
            continue
        ms = number(match.group(3))
        seconds = checked_seconds(ms / 1000.0, path=path, line=number_,
                                  field="elapsed time per iteration (ms)")
        steps.append(Step(number_, count(match.group(1), path=path, line=number_, field="iteration"),
                          seconds))
        if (gb := GLOBAL_BATCH.search(line)):
            batch = count(gb.group(1), path=path, line=number_, field="global batch size")
    return steps, batch


# Megatron-LM's model switches (megatron/training/arguments.py, core_v0.15.0; its arguments block prints every
# one): the MLP's activation (--swiglu, --squared-relu; else GeLU), tied embeddings (the default, unless
# --untie-embeddings-and-output-weights), positions and the norm. A log that does not print one leaves the spec's.
SHAPE_ARGS = ("swiglu", "squared_relu", "untie_embeddings_and_output_weights", "position_embedding_type", "normalization",
              # Megatron-Bridge's summary names them as TransformerConfig does: a gated MLP, shared embeddings
              "gated_linear_unit", "share_embeddings_and_output_weights")
POSITIONS = {"learned_absolute": "learned", "rope": "rope", "none": "none"}
NORMS = {"LayerNorm": "layernorm", "RMSNorm": "rmsnorm"}

# The settings read from Megatron's arguments or Bridge's summary (a restart's second block must agree)
READ = frozenset(LAYOUT_ARGS) | frozenset(MODEL_ARGS) | frozenset(MCORE_DEFAULTS) | frozenset(SHAPE_ARGS) | {
    "world_size", "global_batch_size", "use_distributed_optimizer", "group_query_attention", "num_query_groups"}


def megatron_args(lines: list[str], path: str = "<log>") -> dict[str, tuple[Any, int]]:
    """The `arguments` block: name -> (value, line number)."""
    args: dict[str, tuple[Any, int]] = {}
    inside = False
    for number_, line in enumerate(lines, 1):
        if ARGS_START.search(line):
            inside = True
        elif ARGS_END.search(line):
            inside = False
        elif inside and (match := ARG_LINE.search(line)):
            keep(args, match.group(1), literal(match.group(3)), number_, path=path, read=READ)
    return args


def bridge_config(lines: list[str], path: str = "<log>") -> dict[str, tuple[Any, int]]:
    """Bridge's config summary: `section.name` -> (value, line number); {} when not printed."""
    config: dict[str, tuple[Any, int]] = {}
    section = None
    for number_, line in enumerate(lines, 1):
        if BRIDGE_START in line:
            section, config["model.<printed>"] = "", (True, number_)
        elif section is None:
            continue
        elif (match := BRIDGE_SECTION.match(line)):
            section = match.group(1)
        elif section and (match := BRIDGE_ENTRY.match(line)):
            value = match.group(2)
            if value.endswith(")") and (default := value.find(BRIDGE_DEFAULT)) >= 0:
                value = value[:default]  # as `(.*?)(?:  \(Mcore default: .*\))?$` in linear time
            keep(config, f"{section}.{match.group(1)}", literal(value), number_, path=path,
                 read={f"{section}.{match.group(1)}"} if match.group(1) in READ else set())
        elif section and set(line.strip()) == {"="}:
            section = None
    return config


def _precision(values: dict[str, Any]) -> str | None:
    if values.get("fp8") not in (None, False):
        return "fp8"
    if values.get("bf16"):
        return "bf16"
    if values.get("fp16"):
        return "fp16"
    return "fp32" if "bf16" in values or "fp16" in values else None


def _layout(values: dict[str, Any], path: str, lines: dict[str, int]) -> dict[str, Any]:
    layout: dict[str, Any] = {}
    for arg, key in LAYOUT_ARGS.items():
        if values.get(arg) is not None:
            layout[key] = positive_int(values[arg], path=path, line=lines.get(arg), field=arg)
    if "virtual_pipeline_model_parallel_size" in values:
        vpp = values["virtual_pipeline_model_parallel_size"]
        layout["vpp"] = 1 if vpp is None else positive_int(
            vpp, path=path, field="virtual_pipeline_model_parallel_size",
            line=lines.get("virtual_pipeline_model_parallel_size"))
    if "recompute_granularity" in values:
        layout["recompute"] = values["recompute_granularity"] or "none"
    if "sequence_parallel" in values:
        layout["sequence_parallel"] = bool(values["sequence_parallel"])
    if "use_distributed_optimizer" in values:
        layout["zero"] = 1 if values["use_distributed_optimizer"] else 0
    return layout


def _model(values: dict[str, Any]) -> dict[str, Any]:
    """The model dims stated; the padded vocabulary (the embedding's size) first."""
    model: dict[str, int] = {}
    for arg, key in MODEL_ARGS.items():
        value = values.get(arg)
        if key not in model and isinstance(value, int) and not isinstance(value, bool):
            model[key] = value
    if "heads" in model:
        gqa = values.get("group_query_attention", True)
        groups = values.get("num_query_groups") if gqa else None
        model["kv_heads"] = groups if isinstance(groups, int) and groups > 0 else model["heads"]
    if "swiglu" in values:  # Megatron-LM's block prints --swiglu whatever its value: GeLU unless set
        model["ffn_act"] = ("swiglu" if values["swiglu"] is True else
                            "relu2" if values.get("squared_relu") is True else "gelu")
    if values.get("gated_linear_unit") is True:  # Bridge: a gated MLP (SwiGLU's three matrices; GeGLU's alike)
        model["ffn_act"] = "swiglu"
    if isinstance(values.get("untie_embeddings_and_output_weights"), bool):
        model["tied_embeddings"] = not values["untie_embeddings_and_output_weights"]
    if isinstance(values.get("share_embeddings_and_output_weights"), bool):
        model["tied_embeddings"] = values["share_embeddings_and_output_weights"]
    if values.get("position_embedding_type") in POSITIONS:
        model["position_embedding"] = POSITIONS[values["position_embedding_type"]]
    if values.get("normalization") in NORMS:
        model["normalization"] = NORMS[values["normalization"]]
    return model


def parse_megatron(lines: list[str], path: str, name: str) -> dict[str, Any]:
    """A Megatron-LM / Megatron-Core log: the arguments block, iteration lines, memory report."""
    args = megatron_args(lines, path)
    values = {k: v for k, (v, _) in args.items()}
    where = {k: n for k, (_, n) in args.items()}
    steps, batch = iteration_steps(lines, path)
    peaks = [number(m.group(1)) / MIB_PER_GIB
             for line in lines if (m := MEMORY_MB.search(line))]
    world = values.get("world_size")
    return run(name=name, path=path, framework="megatron", steps=steps,
               gpus=None if world is None else positive_int(world, path=path,
                                                            line=where.get("world_size"),
                                                            field="world_size"),
               global_batch=values.get("global_batch_size") or batch,
               seq_len=values.get("seq_length"), precision=_precision(values),
               layout=_layout(values, path, where), model=_model(values),
               peak_memory_gib=max(peaks, default=None))


def parse_bridge(lines: list[str], path: str, name: str) -> dict[str, Any]:
    """A Megatron-Bridge log: its config summary, iteration lines and GB memory report."""
    config = bridge_config(lines, path)
    values: dict[str, Any] = dict(MCORE_DEFAULTS) if config else {}
    where: dict[str, int] = {}
    for key, (value, line) in config.items():
        section, _, field = key.partition(".")
        if section == "model" or field in ("micro_batch_size", "global_batch_size", "seq_length"):
            values[field], where[field] = value, line
        elif field == "use_distributed_optimizer" and section in ("ddp", "optimizer"):
            values[field] = values.get(field) or value
    if config and "use_distributed_optimizer" not in values:
        values["use_distributed_optimizer"] = False
    steps, batch = iteration_steps(lines, path)
    peaks = []
    for line_no, line in enumerate(lines, 1):
        if (match := MEMORY_GB.search(line)):
            fields = dict(part.split(": ", 1) for part in match.group(1).split(" | ")[1:])
            if "mem-max-allocated-gigabytes" in fields:
                peaks.append(read_number(fields["mem-max-allocated-gigabytes"], path=path, line=line_no,
                                         field="mem-max-allocated-gigabytes") * BYTES_PER_GB / BYTES_PER_GIB)
    layout = _layout(values, path, where)
    return run(name=name, path=path, framework="megatron-bridge", steps=steps,
               gpus=_bridge_world(lines, path, values, layout, batch),
               global_batch=values.get("global_batch_size") or batch,
               seq_len=values.get("seq_length"), precision=_precision(values), layout=layout,
               model=_model(values), peak_memory_gib=max(peaks, default=None))


def _bridge_world(lines: list[str], path: str, values: dict[str, Any], layout: dict[str, Any],
                  batch: int | None) -> int | None:
    """Bridge prints no world size; Megatron Core's microbatch calculator logs the number of
    microbatches, so dp = global batch / (micro batch x microbatches) and GPUs = dp x tp x pp x cp.
    A checkpoint load's 'Broadcasting config ... to all N ranks' states it outright."""
    for line_no, line in enumerate(lines, 1):
        if (match := BROADCAST.search(line)):
            return count(match.group(1), path=path, line=line_no, field="ranks")
    counts = [positive_int(count(m.group(1), path=path, line=n, field="number of microbatches"), path=path,
                           line=n, field="number of microbatches")
              for n, line in enumerate(lines, 1) if (m := MICROBATCHES.search(line))]
    global_batch = values.get("global_batch_size") or batch
    micro = layout.get("micro_batch")
    if not counts or not micro or not isinstance(global_batch, int) or isinstance(global_batch, bool) \
            or global_batch < 1 or global_batch % (micro * counts[-1]):
        return None  # a printed batch that is no count is named where the run is checked (runs.0.global_batch)
    dp = global_batch // (micro * counts[-1])
    return dp * layout.get("tp", 1) * layout.get("pp", 1) * layout.get("cp", 1)
