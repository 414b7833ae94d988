"""What each training framework runs (issue 30 item 2, `--framework`): a mask over the layout space.

Every restriction is declared once in RESTRICTIONS with the framework's own check it mirrors (repository, tag or
commit, file and the condition's line, verbatim; tests/data/frameworks/restrictions.txt holds each line as found
there, tests/data/frameworks/extract.py the steps). Only what the source refuses (or silently changes) is here;
how the planner's axes map onto a framework's settings (ZeRO-1 as Megatron's distributed optimizer, ZeRO-2/3 as
Megatron FSDP or torchtitan FSDP, ...) is the exporters' business, listed in MAPPINGS, and no check. A restriction
that reads the model (precision, MoE) says `needs_model`; `refuse_unrunnable` is the export's refusal of the same
declarations, so `--framework` never proposes what `--export` refuses.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

# torchtitan: the release on PyPI, 0.3.0; torchtitan@main: main at b5bcd76; torchtitan@0.2: release v0.2.2
FRAMEWORKS = ("megatron", "megatron-bridge", "nemo", "torchtitan", "torchtitan@main", "torchtitan@0.2", "deepspeed")

# The stack profile (configs/stacks/) a framework's layouts are priced with. Megatron-LM, Megatron-Bridge and NeMo 2
# all run Megatron Core (TE attention, TP/DP overlap, distributed optimizer); both torchtitan revisions are
# torchtitan's profile; DeepSpeed's export is a ds_config for the DeepSpeed engine's ZeRO (overlap_comm,
# prefetched per-submodule gathers), which deepspeed-zero3 describes (megatron-deepspeed is the 2021 Megatron
# model-code fork without overlap, a narrower case).
FRAMEWORK_STACK = {"megatron": "megatron-core", "megatron-bridge": "megatron-core", "nemo": "megatron-core",
                   "torchtitan": "torchtitan", "torchtitan@main": "torchtitan", "torchtitan@0.2": "torchtitan",
                   "deepspeed": "deepspeed-zero3"}
# The --export kind a framework defaults to (planner.export.EXPORTS)
FRAMEWORK_EXPORT = {f: f for f in FRAMEWORKS}

MEGATRON_CORE = "core_v0.15.0"  # NeMo v2.4.0 leaves megatron_core unpinned: the vendored core tag
BRIDGE_CORE = "cd4afffa648426a959dc7cb1e24b5ce7d0c3ff54"  # Megatron-Bridge v0.6.0's 3rdparty/Megatron-LM
TITAN_MAIN = "b5bcd76c66d0acb1a08b176d9639425bc55e0b2a"
# torchtitan 0.3.0 has no tag in the repository's history as fetched: its sources are the PyPI wheel's
# (torchtitan-0.3.0-py3-none-any.whl), vendored as `pytorch/torchtitan v0.3.0 <path in the wheel>`
TITAN_RELEASE = "v0.3.0"


@dataclass(frozen=True)
class Source:
    repo: str  # owner/name on GitHub
    rev: str  # tag or commit
    path: str
    quote: str  # the condition's line, verbatim, indentation stripped


@dataclass(frozen=True)
class Restriction:
    frameworks: tuple[str, ...]
    ok: Callable  # Layouts (and the ModelSpec, with needs_model) -> bool array (True: the framework runs it as stated)
    message: str
    sources: tuple[Source, ...]
    needs_model: bool = False  # a check of the model with the layout (precision, MoE, ...): ok(layouts, model)


def _dp_shard(l):
    """torchtitan's data_parallel_shard_degree as the export sets it: dp for ZeRO-2/3 (FSDP), else 1 (DDP)."""
    return np.where(l.zero >= 2, l.dp, 1)


_SCHEDULES = "megatron/core/pipeline_parallel/schedules.py"
_INTERLEAVE = ("if 0 < final_microbatch_group_size < pipeline_parallel_size:",
               "config.microbatch_group_size_per_vp_stage > num_microbatches")
_GROUP = "self.microbatch_group_size_per_vp_stage = self.pipeline_model_parallel_size"

# Megatron Core's own checks, at the core tag Megatron-LM and NeMo run and at Megatron-Bridge v0.6.0's pinned commit
_CORE = ("megatron", "megatron-bridge", "nemo")
_CONFIG = "megatron/core/transformer/transformer_config.py"
_SPLIT = '), "First dimension of the tensor should be divisible by tensor parallel size"'


def _core(path: str, quote: str) -> tuple[Source, ...]:
    return tuple(Source("NVIDIA/Megatron-LM", rev, path, quote) for rev in (MEGATRON_CORE, BRIDGE_CORE))


def _schedule_in(l, names) -> np.ndarray:
    """Rows whose pipeline schedule (planner/layout/axes.py SCHEDULES) is one of `names`."""
    from planner.layout.axes import SCHEDULES

    return np.isin(l.schedule, [SCHEDULES.index(n) for n in names])


def _offloads_activations(l) -> np.ndarray:
    """Rows that offload activations (planner/layout/axes.py OFFLOADS: activations, both)."""
    return np.isin(l.offload, (2, 3))


def _offloads_optimizer(l) -> np.ndarray:
    """Rows that offload the optimizer states (optimizer, both)."""
    return np.isin(l.offload, (1, 3))


# torchtitan resolves --parallelism.pipeline_parallel_schedule with torch.distributed.pipelining's get_schedule_class,
# whose registry holds 1F1B, Interleaved1F1B, GPipe, LoopedBFS, InterleavedZeroBubble, ZBVZeroBubble and DualPipeV
# (and the abstract PipelineScheduleSingle/Multi): no ZB-H1 and no two-copy DualPipe.
_TITAN_SCHEDULE = "schedule_class = get_schedule_class(parallelism.pipeline_parallel_schedule)"


def _selective(l, m, module: str) -> np.ndarray:
    """Rows whose selective recomputation recomputes `module` (the model's training.recompute_modules)."""
    return (l.recompute == 1) & (module in (m.training.recompute_modules or ()))


RESTRICTIONS: tuple[Restriction, ...] = (
    # sequence parallelism scatters the [s/cp, b, h] activations over tp at the embedding
    # (mappings.py _split_along_first_dim): the first forward stops on a sequence tp does not divide
    Restriction(_CORE, lambda l, m: (l.sequence_parallel == 0) | (l.tp == 1) | ((m.seq_len // l.cp) % l.tp == 0),
                "Megatron Core's sequence parallelism splits the sequence (per cp rank) over tp: seq_len / cp must be "
                "divisible by tp",
                _core("megatron/core/tensor_parallel/mappings.py", _SPLIT), needs_model=True),
    Restriction(_CORE, lambda l, m: ~_selective(l, m, "mla_up_proj") | (m.mla is not None),
                "Megatron Core recomputes mla_up_proj only in a model with multi-latent attention (MLA)",
                _core(_CONFIG, 'if "mla_up_proj" in self.recompute_modules and not self.multi_latent_attention:'),
                needs_model=True),
    # the exports write --moe-grouped-gemm (moe_grouped_gemm) for a MoE model only
    Restriction(_CORE, lambda l, m: ~_selective(l, m, "moe_act") | (m.moe is not None),
                "Megatron Core recomputes moe_act only with MoE grouped GEMMs: a model without MoE has none",
                _core(_CONFIG, 'if "moe_act" in self.recompute_modules and not self.moe_grouped_gemm:'),
                needs_model=True),
    # --rotary-base is type=int (argparse refuses 10000.5); GPTModel's rotary_base is an int: the exports never
    # truncate a base
    Restriction(_CORE, lambda l, m: np.full(len(l.tp), m.rope_theta is None or float(m.rope_theta).is_integer()),
                "Megatron Core's RoPE base is an integer (--rotary-base type=int, GPTModel rotary_base: int): "
                "the model's rope_theta is not",
                (Source("NVIDIA/Megatron-LM", MEGATRON_CORE, "megatron/training/arguments.py",
                        "group.add_argument('--rotary-base', type=int, default=10000,"),
                 *_core("megatron/core/models/gpt/gpt_model.py", "rotary_base: int = 10000,")),
                needs_model=True),

    Restriction(("megatron",), lambda l: (l.vpp == 1) | (l.pp > 1),
                "Megatron-LM's interleaved schedule (vpp > 1) needs pp > 1",
                (Source("NVIDIA/Megatron-LM", MEGATRON_CORE, "megatron/training/arguments.py",
                        "assert args.pipeline_model_parallel_size > 1, \\"),)),
    Restriction(("megatron",), lambda l: (l.sequence_parallel == 0) | (l.tp > 1),
                "Megatron-LM turns sequence parallelism off when tp is 1",
                (Source("NVIDIA/Megatron-LM", MEGATRON_CORE, "megatron/training/arguments.py", "args.sequence_parallel = False"),)),
    # microbatch_group_size_per_vp_stage defaults to pp (Megatron Core; NeMo's MegatronStrategy the same): the
    # micro-batches must reach pp and leave no remainder below pp, i.e. be a multiple of pp
    Restriction(("megatron", "megatron-bridge", "nemo"),
                lambda l: (l.vpp == 1) | (l.pp == 1) | (l.num_microbatches % l.pp == 0),
                "Megatron Core's interleaved schedule (vpp > 1) needs the micro-batches per step to be a multiple of pp",
                tuple(Source("NVIDIA/Megatron-LM", rev, _SCHEDULES, q) for rev in (MEGATRON_CORE, BRIDGE_CORE) for q in _INTERLEAVE)
                + tuple(Source("NVIDIA/Megatron-LM", rev, "megatron/core/model_parallel_config.py", _GROUP)
                        for rev in (MEGATRON_CORE, BRIDGE_CORE))),
    Restriction(("torchtitan@0.2",), lambda l: (l.ep == 1) | (l.etp == 1) | (l.etp == l.tp),
                "torchtitan v0.2.2 runs expert tensor parallelism only as etp = tp or etp = 1",
                (Source("pytorch/torchtitan", "v0.2.2", "torchtitan/distributed/parallel_dims.py",
                        'assert etp == tp or etp == 1, "Currently we only support ETP=TP or ETP=1"'),)),
    Restriction(("torchtitan@0.2",), lambda l: (_dp_shard(l) * l.cp * l.tp) % (l.ep * l.etp) == 0,
                "torchtitan v0.2.2 builds the expert mesh from dp_shard*cp*tp: ep*etp must divide it "
                "(dp_shard = dp with ZeRO-2/3, FSDP; 1 with ZeRO-0/1, DDP)",
                (Source("pytorch/torchtitan", "v0.2.2", "torchtitan/distributed/parallel_dims.py",
                        "efsdp = fsdp * self.tp // (self.etp * self.ep)"),
                 Source("pytorch/torchtitan", "v0.2.2", "torchtitan/distributed/parallel_dims.py",
                        "assert actual_size == expected_size, ("))),
    Restriction(("torchtitan@main",), lambda l: (l.ep == 1) | (l.etp == 1),
                "torchtitan main has no expert tensor parallelism (ParallelismConfig has expert_parallel_degree only)",
                (Source("pytorch/torchtitan", TITAN_MAIN, "torchtitan/config/configs.py", "expert_parallel_degree: int = 1"),)),
    Restriction(("torchtitan@main",), lambda l: (_dp_shard(l) * l.cp * l.tp) % l.ep == 0,
                "torchtitan main needs ep to divide dp_shard*cp*tp (dp_shard = dp with ZeRO-2/3, FSDP; 1 with ZeRO-0/1, DDP)",
                (Source("pytorch/torchtitan", TITAN_MAIN, "torchtitan/distributed/parallel_dims.py", "if sparse_region % ep != 0:"),)),
    Restriction(("torchtitan",), lambda l: (l.ep == 1) | (l.etp == 1),
                "torchtitan 0.3.0 has no expert tensor parallelism (ParallelismConfig has expert_parallel_degree only)",
                (Source("pytorch/torchtitan", TITAN_RELEASE, "torchtitan/config/configs.py", "expert_parallel_degree: int = 1"),)),
    # 0.3.0 builds the expert mesh as efsdp = dp_shard*cp*tp // ep and asserts each mesh's size
    Restriction(("torchtitan",), lambda l: (_dp_shard(l) * l.cp * l.tp) % l.ep == 0,
                "torchtitan 0.3.0 builds the expert mesh from dp_shard*cp*tp: ep must divide it "
                "(dp_shard = dp with ZeRO-2/3, FSDP; 1 with ZeRO-0/1, DDP)",
                (Source("pytorch/torchtitan", TITAN_RELEASE, "torchtitan/distributed/parallel_dims.py",
                        '"efsdp": self.dp_shard * self.cp * self.tp // self.ep,'),
                 Source("pytorch/torchtitan", TITAN_RELEASE, "torchtitan/distributed/parallel_dims.py",
                        "assert actual_size == expected_size, ("))),
    # torchtitan's data parallelism is DDP (replicate) or FSDP (shard): no sharding of the optimizer states alone.
    # A ZeRO-1 layout runs as DDP, with every state replicated (Llama 3 70B at ZeRO 0 needed 96 GiB of 80).
    Restriction(("torchtitan", "torchtitan@main", "torchtitan@0.2"), lambda l: l.zero != 1,
                "torchtitan has no ZeRO-1: its data parallelism is DDP (data_parallel_replicate_degree, every state "
                "replicated: ZeRO-0) or FSDP (data_parallel_shard_degree: ZeRO-2/3)",
                tuple(Source("pytorch/torchtitan", rev, path, q) for rev, path in (("v0.2.2", "torchtitan/config/job_config.py"),
                                                                                    (TITAN_MAIN, "torchtitan/config/configs.py"),
                                                                                    (TITAN_RELEASE, "torchtitan/config/configs.py"))
                      for q in ("data_parallel_replicate_degree: int = 1", "data_parallel_shard_degree: int = -1"))),
    Restriction(("torchtitan", "torchtitan@main", "torchtitan@0.2"), lambda l, m: np.full(len(l.tp), m.training.precision != "fp16"),
                "torchtitan has no FP16 training: its mixed_precision_param is bfloat16 or float32",
                tuple(Source("pytorch/torchtitan", rev, path, 'mixed_precision_param: Literal["bfloat16", "float32"] = "bfloat16"')
                      for rev, path in (("v0.2.2", "torchtitan/config/job_config.py"), (TITAN_MAIN, "torchtitan/config/configs.py"),
                                        (TITAN_RELEASE, "torchtitan/config/configs.py"))),
                needs_model=True),
    Restriction(("deepspeed",), lambda l: l.cp == 1,
                "DeepSpeed has no ring or all-gather context parallelism (cp > 1): its sequence parallelism is "
                "Ulysses' all-to-alls (DistributedAttention), which these layouts are not priced with",
                (Source("deepspeedai/DeepSpeed", "v0.19.5", "deepspeed/sequence/layer.py", "class DistributedAttention(torch.nn.Module):"),)),
    Restriction(("deepspeed",), lambda l: l.vpp == 1,
                "DeepSpeed's pipeline runs one stage per rank (TrainSchedule, no interleaved schedule): vpp must be 1",
                (Source("deepspeedai/DeepSpeed", "v0.19.5", "deepspeed/runtime/pipe/schedule.py", "class TrainSchedule(PipeSchedule):"),)),
    Restriction(("deepspeed",), lambda l, m: (l.zero != 3) | (m.moe is None),
                "DeepSpeed refuses its native MoE layers with ZeRO-3",
                (Source("deepspeedai/DeepSpeed", "v0.19.5", "deepspeed/runtime/engine.py",
                        'raise AssertionError("Native DeepSpeed MoE is not supported with ZeRO Stage 3. "'),),
                needs_model=True),
    # core_v0.15.0's MambaStack (a hybrid layer_pattern, pretrain_mamba.py) gives each pipeline rank
    # num_layers // pp layers of the pattern: the rest would not be built; no interleaving
    Restriction(("megatron",), lambda l, m: np.full(len(l.tp), m.layer_pattern is None)
                | ((l.vpp == 1) & (m.layers % l.pp == 0)),
                "Megatron-LM core_v0.15.0 splits a hybrid pattern into pp equal parts without interleaving "
                "(MambaStack._select_layers_for_pipeline_parallel): pp must divide the layers and vpp must be 1",
                (Source("NVIDIA/Megatron-LM", MEGATRON_CORE, "megatron/core/ssm/mamba_block.py",
                        "num_layers_per_pipeline_rank = self.config.num_layers // self.pp_group.size()"),
                 Source("NVIDIA/Megatron-LM", MEGATRON_CORE, "megatron/core/ssm/mamba_block.py",
                        "assert self.config.virtual_pipeline_model_parallel_size is None, (")),
                needs_model=True),
    # Megatron Core picks its pipeline schedule in get_forward_backward_func: 1F1B, or interleaved 1F1B at vpp > 1.
    Restriction(_CORE, lambda l: _schedule_in(l, ("1f1b", "interleaved")),
                "Megatron Core runs 1F1B and interleaved 1F1B only (get_forward_backward_func): "
                "schedule must be 1f1b or interleaved",
                _core(_SCHEDULES, "forward_backward_func = forward_backward_pipelining_with_interleaving")),
    Restriction(("torchtitan", "torchtitan@main"), lambda l: ~_schedule_in(l, ("zb-h1", "dualpipe")),
                "torchtitan's schedules are torch.distributed.pipelining's (get_schedule_class: 1F1B, Interleaved1F1B, "
                "InterleavedZeroBubble, ZBVZeroBubble, DualPipeV): no zb-h1 and no dualpipe",
                (Source("pytorch/torchtitan", TITAN_RELEASE, "torchtitan/distributed/pipeline_parallel.py", _TITAN_SCHEDULE),
                 Source("pytorch/torchtitan", TITAN_MAIN, "torchtitan/distributed/pipeline_parallel.py", _TITAN_SCHEDULE))),
    Restriction(("torchtitan@0.2",), lambda l: ~_schedule_in(l, ("zb-h1", "dualpipe")),
                "torchtitan's schedules are torch.distributed.pipelining's (get_schedule_class: 1F1B, Interleaved1F1B, "
                "InterleavedZeroBubble, ZBVZeroBubble, DualPipeV): no zb-h1 and no dualpipe",
                (Source("pytorch/torchtitan", "v0.2.2", "torchtitan/distributed/pipeline_parallel.py",
                        "schedule_class = get_schedule_class(pp_schedule)"),)),
    # (the schedules of two chunks a rank are refused with vpp > 1 above)
    Restriction(("deepspeed",), lambda l: ~_schedule_in(l, ("zb-h1", "dualpipe")),
                "DeepSpeed's pipeline runs its TrainSchedule (1F1B) only: schedule must be 1f1b",
                (Source("deepspeedai/DeepSpeed", "v0.19.5", "deepspeed/runtime/pipe/schedule.py", "class TrainSchedule(PipeSchedule):"),)),
    # Host-memory offload (planner/costs/offload.py): activations through Megatron Core's layer-level
    # --cpu-offloading (TransformerConfig cpu_offloading), which refuses pipelines and recomputation.
    Restriction(_CORE, lambda l: ~_offloads_activations(l) | (l.pp == 1),
                "Megatron Core's activation offload (cpu_offloading) refuses pipeline parallelism: offload "
                "activations needs pp 1",
                _core(_CONFIG, "if self.cpu_offloading and self.pipeline_model_parallel_size > 1:")),
    Restriction(_CORE, lambda l: ~_offloads_activations(l) | (l.recompute == 0),
                "Megatron Core's activation offload (cpu_offloading) refuses activation recomputation: offload "
                "activations needs recompute none",
                _core(_CONFIG, "if self.cpu_offloading and self.recompute_granularity is not None:")),
    # optimizer offload (HybridDeviceOptimizer) runs on the precision-aware optimizer's code path (arguments.py
    # asserts --use-precision-aware-optimizer with --optimizer-cpu-offload), which needs the distributed optimizer
    Restriction(_CORE, lambda l: ~_offloads_optimizer(l) | (l.zero >= 1),
                "Megatron Core offloads the optimizer through the precision-aware optimizer, which needs the "
                "distributed optimizer: offload optimizer needs ZeRO stage 1 or more",
                _core("megatron/core/optimizer/optimizer_config.py",
                      "), '--use-precision-aware-optimizer only supported with distributed optimizer'")),
    Restriction(("megatron",), lambda l: ~_offloads_activations(l),
                "Megatron-LM core_v0.15.0 has no command-line flag for activation offload (TransformerConfig's "
                "cpu_offloading is no argument of megatron/training/arguments.py there): offload must be none or "
                "optimizer (Megatron-Bridge and NeMo set model.cpu_offloading)",
                (Source("NVIDIA/Megatron-LM", MEGATRON_CORE, "megatron/core/model_parallel_config.py",
                        "cpu_offloading: bool = False"),)),
    # torchtitan's one CPU offload is FSDP2's CPUOffloadPolicy (parameters, gradients and optimizer states)
    Restriction(("torchtitan", "torchtitan@main", "torchtitan@0.2"), lambda l: ~_offloads_activations(l),
                "torchtitan's only CPU offload is FSDP's (training.enable_cpu_offload: parameters, gradients and "
                "optimizer states); it has no activation offload: offload must be none or optimizer",
                (Source("pytorch/torchtitan", TITAN_MAIN, "torchtitan/config/configs.py", "enable_cpu_offload: bool = False"),
                 Source("pytorch/torchtitan", "v0.2.2", "torchtitan/config/job_config.py",
                        "enable_cpu_offload: bool = False"))),
    Restriction(("deepspeed",), lambda l: ~_offloads_activations(l) | (l.recompute == 2),
                "DeepSpeed offloads activations only as activation checkpoints (activation_checkpointing."
                "cpu_checkpointing): offload activations needs recompute full",
                (Source("deepspeedai/DeepSpeed", "v0.19.5", "deepspeed/runtime/activation_checkpointing/config.py",
                        "ACT_CHKPT_CPU_CHECKPOINTING = 'cpu_checkpointing'"),)),
    Restriction(("deepspeed",), lambda l: ~_offloads_optimizer(l) | (l.zero >= 1),
                "DeepSpeed's optimizer offload is a ZeRO setting (zero_optimization.offload_optimizer): offload "
                "optimizer needs ZeRO stage 1 or more",
                (Source("deepspeedai/DeepSpeed", "v0.19.5", "deepspeed/runtime/zero/config.py",
                        "offload_optimizer: Optional[DeepSpeedZeroOffloadOptimizerConfig] = None"),)),
    Restriction(("deepspeed",), lambda l: (l.pp == 1) | (l.zero <= 1),
                "DeepSpeed's pipeline engine refuses ZeRO-2 and ZeRO-3 with pipeline parallelism",
                (Source("deepspeedai/DeepSpeed", "v0.19.5", "deepspeed/runtime/pipe/engine.py",
                        ') < ZeroStageEnum.gradients, "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"'),)),
)

# How an export words a layout so that the framework accepts it (no restriction: the layout runs, spelled so).
# Megatron Core refuses a first or last pipeline stage of 0 layers given as num_layers_in_first/last_pipeline_stage
# (--decoder-first/last-pipeline-num-layers); the same split as a --pipeline-model-parallel-layout string ("E|..."
# an embedding-only first stage) runs: megatron_first_last never returns a 0.
SPELLINGS: tuple[tuple[str, tuple[Source, ...]], ...] = (
    ("a first or last pipeline stage of 0 layers is written as a pipeline layout string, not as first/last counts",
     _core(_CONFIG, 'raise ValueError("num_layers_in_first_pipeline_stage must be larger than 0")')
     + _core(_CONFIG, 'raise ValueError("num_layers_in_last_pipeline_stage must be larger than 0")')),
)

# How the exporters map an axis (no check: every value runs)
MAPPINGS = (
    ("megatron", "zero 1: --use-distributed-optimizer; zero 2/3: Megatron FSDP optim_grads / optim_grads_params"),
    ("megatron-bridge", "zero 1: ddp/optimizer.use_distributed_optimizer; zero 2/3: ddp.use_megatron_fsdp"),
    ("nemo", "zero 1: optim.config.use_distributed_optimizer; zero 2/3: trainer.strategy.fsdp=megatron"),
    ("torchtitan", "zero 0: DDP (data_parallel_replicate_degree); zero 2/3: FSDP "
                   "fsdp_reshard_after_forward never/always"),
    ("torchtitan@main", "as torchtitan"),
    ("torchtitan@0.2", "as torchtitan"),
    ("deepspeed", "zero: zero_optimization.stage; tp, pp, ep, cp: the model code's, not the ds_config's"),
    ("megatron", "offload optimizer: --optimizer-cpu-offload --optimizer-offload-fraction 1.0 "
                 "--overlap-cpu-optimizer-d2h-h2d --use-precision-aware-optimizer"),
    ("megatron-bridge", "offload: optimizer.optimizer_cpu_offload ...; activations: model.cpu_offloading"),
    ("nemo", "offload: optim.config.optimizer_cpu_offload ...; activations: model.config.cpu_offloading"),
    ("torchtitan", "offload optimizer: training.enable_cpu_offload (FSDP2's CPUOffloadPolicy)"),
    ("deepspeed", "offload optimizer: zero_optimization.offload_optimizer; activations: "
                  "activation_checkpointing.cpu_checkpointing"),
)


def framework_names() -> tuple[str, ...]:
    return FRAMEWORKS


def restrictions(framework: str) -> tuple[Restriction, ...]:
    if framework not in FRAMEWORKS:
        raise ValueError(f"unknown framework {framework!r}; choose one of: {', '.join(FRAMEWORKS)}")
    return tuple(r for r in RESTRICTIONS if framework in r.frameworks)


def model_refusal(framework: str, model) -> str | None:
    """Why `framework` cannot build `model` at all (a hybrid model's layers), or None. Megatron-LM
    core_v0.15.0 builds hybrid Mamba / attention / MLP patterns (pretrain_mamba.py;
    megatron/core/ssm/mamba_hybrid_layer_allocation.py: Symbols M, *, -); it has no gated DeltaNet
    and no MoE layer in a pattern (Megatron-LM main adds G and E: models/hybrid/hybrid_layer_allocation.py).
    torchtitan (0.3.0, b5bcd76, v0.2.2) has no Mamba or DeltaNet model; DeepSpeed's tp/pp/cp are the
    Megatron-DeepSpeed model code's, which has neither. The planner's Megatron-Bridge and NeMo exports
    write GPT-model providers: hybrid providers (HybridModelProvider) are not written."""
    if model is None or model.layer_pattern is None:
        return None
    kinds = "".join(sorted(set(model.layer_pattern)))
    if framework == "megatron":
        if "D" in kinds:
            return ("Megatron-LM core_v0.15.0 has no gated DeltaNet layer (its hybrid pattern takes M, * and -; "
                    "Megatron-LM main's GatedDeltaNet is G in --hybrid-layer-pattern)")
        if model.moe is not None:
            return ("Megatron-LM core_v0.15.0's hybrid pattern has no MoE layer (M, * and - only; Megatron-LM main: E)")
        return None
    if framework in ("megatron-bridge", "nemo"):
        return (f"the planner's {framework} export writes GPT-model providers, not hybrid ones: export a hybrid "
                "model for Megatron-LM (--export megatron)")
    return f"{framework} has no Mamba-2 or gated DeltaNet layers (a hybrid layer_pattern)"


def runs_uneven_split(framework: str | None, model) -> bool:
    """Whether `framework` runs an uneven stage split of `model` (a search then proposes them): not a hybrid
    model on Megatron-LM core_v0.15.0, whose MambaStack builds num_layers // pp layers of the pattern on
    every rank (the RESTRICTIONS entry above quotes it) and reads no pipeline layout."""
    return not (framework == "megatron" and model is not None and model.layer_pattern is not None)


def framework_mask(framework: str, layouts, model=None) -> tuple[np.ndarray, np.ndarray]:
    """(ok, reason) per layout row: ok where `framework` runs the layout as stated; reason '' there, else the
    messages of the restrictions it breaks, in RESTRICTIONS order, joined by '; '. The restrictions that
    read the model (`needs_model`) apply when `model` is given."""
    n = len(np.asarray(layouts.tp))
    ok = np.ones(n, dtype=bool)
    reason = np.full(n, "", dtype=object)
    refused = model_refusal(framework, model)
    if refused:
        return np.zeros(n, dtype=bool), np.full(n, refused, dtype=object).astype(str)
    for r in restrictions(framework):
        if r.needs_model and model is None:
            continue
        bad = ~np.broadcast_to(np.asarray(r.ok(layouts, model) if r.needs_model else r.ok(layouts), dtype=bool), (n,))
        reason[bad] = np.where(reason[bad] == "", r.message, reason[bad] + "; " + r.message)
        ok &= ~bad
    return ok, reason.astype(str)


def framework_of_export(kind: str) -> str:
    """The framework whose restrictions an `--export kind` obeys (each export kind is its framework's)."""
    return next(f for f, k in FRAMEWORK_EXPORT.items() if k == kind)


def layout_row(layout: dict):
    """A JSON `layout` object (ScoredLayout.layout) as the one-row Layouts the restrictions read."""
    from planner.layout.axes import AXES
    from planner.layout.space import single_layout

    return single_layout(**{a.name: layout[a.name] for a in AXES if layout.get(a.name) is not None})


def refuse_unrunnable(framework: str, layouts, model) -> None:
    """An export of a layout `framework` refuses at start-up is exit 2 naming the check (issue 38): the
    export would write settings the framework stops on, or silently runs as another layout. `layouts`: the
    layout arrays, or a JSON `layout` object."""
    from planner.errors import SpecError

    if isinstance(layouts, dict):
        layouts = layout_row(layouts)
    ok, reason = framework_mask(framework, layouts, model)
    if not ok.all():
        raise SpecError(f"{framework} cannot run this layout: {reason[int(np.flatnonzero(~ok)[0])]}", path="--export",
                        expected="a layout the framework runs (plan search --framework finds one)")
