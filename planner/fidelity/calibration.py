"""Published measurements as planner inputs, and the planner's predictions of them.

The cases live in `data/calibration/` (copied from the steering team's collection, with sources).
Every source names its software stack (configs/stacks/) and GPU; settings a source does not print
are assumptions, stated once per source in `SOURCES`. A source's runs are replayed as a user would
plan them: dp, tp, pp, GPUs and batch fixed; knobs the source does not state (Narayanan 2021's
micro-batch and interleaving) are left to the planner, which takes its fastest layout that fits.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import yaml
from pydantic import ValidationError

from planner.costs.comm import tp_comm_per_layer_s, tp_exposed, tp_passes
from planner.costs.context import job_context
from planner.costs.memory import memory_breakdown
from planner.costs.pipeline import step_time
from planner.costs.flops import layer_attention_flops_per_seq, layer_gemm_flops_per_token, logits_flops_per_token
from planner.costs.pipeline_ranks import rank_layers
from planner.specs.loading import load_gpu_data, load_model
from planner.score import score
from planner.errors import SpecError
from planner.specs.shipped import config_dir, shared_dir, stack_data
from planner.layout.space import Layouts, single_layout
from planner.specs import ClusterSpec, ModelSpec
from planner.units import GIB, TERA
from planner.fidelity.vtrain import vtrain_groups

DATA_DIR = shared_dir("data") / "calibration"
FILES = ("cases.yaml", "more-cases.yaml", "moe-cases.yaml")


@dataclass(frozen=True)
class Source:
    """One publication's runs: the stack and GPU they ran on and what the planner assumes for them."""

    key: str
    label: str
    stack: str
    precision: str
    nvlink_gbps: float  # per GPU per direction
    network_gbps: float  # per GPU per direction between nodes
    zero: int
    assumed: str
    free_knobs: bool = False  # micro-batch and vpp not printed: the planner picks them
    recompute: str | None = None  # what the source's code states, over what its table prints
    vocab_k: int = 1024  # what "32K" means in its vocabulary column


SOURCES = {
    "korthikanti2022": Source(
        "korthikanti2022", "Korthikanti et al. 2022 (Megatron-LM, A100)", "megatron-lm-2022", "fp16", 300, 25, 0,
        "fp16; fused-softmax attention, no TP/DP overlap, plain data parallelism; one 200 Gb/s HDR HCA per GPU"),
    "narayanan2021": Source(
        "narayanan2021", "Narayanan et al. 2021 Table 1 (Megatron-LM, A100)", "megatron-lm-2022", "fp16", 300, 25, 0,
        "fp16, full recomputation (Eq. 3); micro-batch and interleaving not printed: the planner's fastest "
        "fitting choice; iteration time derived from the printed TFLOP/s with Eq. 3", free_knobs=True,
        recompute="full"),
    "vocabpar2024": Source(
        "vocabpar2024", "Yeung et al. 2024 pure pipeline baselines (Megatron, A100)", "megatron-core", "fp16",
        300, 25, 0,
        "fp16, flash attention, no recomputation, vocabularies of 32,000-256,000 (the paper's artifact, "
        "sail-sg/VocabularyParallelism@6191c3b pretrain_gpt.sh and exp_one_host.csv; the printed peak "
        "memory grows with the sequence as stored activations do: +6.5 GB from 2,048 to 4,096 tokens "
        "on 8 GPUs, +21.6 GB on 32); iteration "
        "time from the printed MFU and the paper's model FLOPs (Table 4: b s h (72 h + 12 s) a layer, "
        "6 b s h V the output layer; no recomputation pass)", recompute="none", vocab_k=1000),
    "llmfoundry": Source(
        "llmfoundry", "MosaicML llm-foundry (PyTorch FSDP, A100 40/80GB)", "pytorch-fsdp", "bf16", 300, 25, 3,
        "bf16, FSDP FULL_SHARD (zero 3), flash attention, ALiBi (no position embedding), tied embeddings; "
        "1,600 Gb/s per node (25 GB/s per GPU); iteration time = global batch x seq / (tokens/s/GPU x GPUs)"),
    "dgxc2024": Source(
        "dgxc2024", "NVIDIA dgxc-benchmarking v24.11.1 (NeMo, H100)", "megatron-core", "bf16", 450, 50, 1,
        "bf16, flash attention, sequence parallelism, distributed optimizer, TP and DP overlap, no "
        "recomputation; NVLink4 450 GB/s, one 400 Gb/s NDR HCA per GPU; Nemotron-4 15B: 48 heads, 8 KV "
        "heads, squared-ReLU MLP (two matrices, counted as gelu), RoPE, untied (Parmar et al. 2024)"),
    "megatronbridge": Source(
        "megatronbridge", "NVIDIA Megatron-Bridge performance summaries (Megatron-Core, H100/B200/B300/GB200/GB300)",
        "megatron-core", "bf16", 0, 0, 1,
        "precision as printed (FP8-MX/MXFP8: mxfp8; FP8, FP8-CS: per-tensor fp8); distributed optimizer; "
        "recomputation not printed: the fastest of none/selective/full that fits; etp 1 where not printed "
        "(the Megatron-Bridge recipes); DGX nodes of 8 or NVL72 trays of 4 GPUs in one 72-GPU NVLink domain, "
        "the shipped cluster presets' links (DGX B300: 8 x 800 Gb/s per node); model shapes from the shipped presets"),
    "nemo2025": Source(
        "nemo2025", "NVIDIA NeMo 25.02/25.04 performance tables (Mixtral 8x7B, B200/GB200)", "megatron-core", "bf16",
        0, 0, 1, "as Megatron-Bridge; FP8 printed as per-tensor (current) scaling"),
    "vtrain": Source(
        "vtrain", "vTrain (Megatron-DeepSpeed, A100)", "megatron-deepspeed", "fp16", 300, 12.5, 0,
        "full recomputation, gradients all-reduced after the backward, 800 Gb/s per 8-GPU node (vTrain's "
        "validation configs); assumed: fp16, fused-softmax attention, no sequence parallelism, vocabulary "
        "51,200, NVLink 300 GB/s (DGX A100)"),
}
_PREFIX = {"korthikanti2022": "korthikanti2022", "narayanan2021": "narayanan2021", "vocabpar_": "vocabpar2024",
           "mpt_llmfoundry": "llmfoundry", "dgxc_": "dgxc2024", "megatron_bridge_": "megatronbridge",
           "nemo_25": "nemo2025"}
# Runs of models the project ships: their shapes come from the preset (the sources print no head
# width, MoE layer pattern or shared-expert width); sequence, batch and precision from the run.
_SHIPPED = {"llama31_8b": "llama3.1-8b", "llama3_8b": "llama3.1-8b", "qwen3_30b_a3b": "qwen3-30b-a3b",
            "gpt_oss_120b": "gpt-oss-120b", "mixtral_8x7b": "mixtral-8x7b"}
# Settings of the NVIDIA benchmark recipes the tables do not print, read in the recipes' code (tags
# Megatron-Bridge v0.2.0 = 25.11, v0.4.2 = 26.04.01, v0.5.0 = 26.06; NeMo v2.2.0 = 25.02, v2.3.0 =
# 25.04): (id prefixes, training settings, model MoE settings, where it is written).
_MB, _NEMO = ("megatron_bridge_",), ("nemo_25",)
RECIPES = (
    (_MB + _NEMO, dict(grad_reduce_dtype="bf16"), {},
     "every MoE and Llama 3 perf script sets grad_reduce_in_fp32 = False (Megatron-Bridge scripts/performance/"
     "configs/*/*_llm_pretrain.py set_*_common_configs; NeMo recipes pretrain_performance_optimizations)"),
    (("megatron_bridge_26_04_01_dgx_b200_qwen3", "megatron_bridge_26_06_dgx_"),
     dict(moe_dispatcher="flex"), {},
     "Qwen3-30B-A3B: HybridEP flex dispatcher on every GPU from 26.04 on (qwen3_workload_base_configs.py); "
     "GPT-OSS-120B MXFP8 26.06: hybridep on GB200, GB300, B300 (gpt_oss_workload_base_configs.py)"),
    (("megatron_bridge_26_06_dgx_gb", "megatron_bridge_26_06_dgx_b300_qwen3", "megatron_bridge_26_04_01_dgx_gb200_gpt"),
     dict(moe_a2a_overlap=True), {},
     "moe_a2a_overlap=True (overlap_moe_expert_parallel_comm, delay_wgrad_compute): Qwen3 MXFP8 GB200/GB300/B300 "
     "and GPT-OSS MXFP8 GB200/GB300 in 26.06 (commit bac3ffeb), GPT-OSS BF16 GB200 in 26.04.01"),
    (("megatron_bridge_26_06_dgx_gb200_qwen3", "megatron_bridge_26_06_dgx_gb300_qwen3", "megatron_bridge_26_06_dgx_b300_qwen3",
      "megatron_bridge_26_06_dgx_gb200_gpt", "megatron_bridge_26_06_dgx_gb300_gpt"),
     dict(cuda_graph_impl="full_iteration"), {},
     "cuda_graph_impl='full_iteration' (with moe_expert_rank_capacity_factor 1.5 and paged stash: static "
     "dispatch shapes): Qwen3 FP8_MX GB200/GB300/B300 (qwen3_workload_base_configs.py@v0.5.0) and GPT-OSS "
     "FP8_MX_V2 GB200/GB300 (gpt_oss_workload_base_configs.py@v0.5.0 lines 201-220)"),
    (("megatron_bridge_26_06_dgx_gb200_gpt", "megatron_bridge_26_06_dgx_gb300_gpt", "megatron_bridge_26_06_dgx_gb200_qwen3",
      "megatron_bridge_26_06_dgx_gb300_qwen3", "megatron_bridge_26_06_dgx_b300_qwen3"), dict(te_op_fuser=True), {},
     "cutedsl_fused_grouped_mlp=True, which sets use_transformer_engine_op_fuser (utils/overrides.py@v0.5.0 "
     "lines 238-239): GPT-OSS FP8_MX_V2 GB200/GB300 and Qwen3 FP8_MX GB200/GB300/B300 (qwen3_workload_base_"
     "configs.py@v0.5.0 lines 358-437; Qwen3 has no clamp or biases, so it prices nothing there); every other "
     "GPT-OSS run has it forced off (overrides.py@v0.4.2 lines 63-64)"),
    (("megatron_bridge_26_04_01_dgx_gb300_gpt", "megatron_bridge_26_06_dgx_b300_gpt", "megatron_bridge_26_04_01_dgx_b200_qwen3"),
     dict(cuda_graph_impl="transformer_engine"), {},
     "cuda_graph_impl='transformer_engine' over attn, moe_router, moe_preprocess: GPT-OSS GB300 BF16 and B300 "
     "(gpt_oss_workload_base_configs.py@v0.4.2/v0.5.0, B300 FP8_MX_V2 = B300_BF16_V2), Qwen3 B200 "
     "(qwen3_workload_base_configs.py); the dropless dispatch outside those scopes still syncs"),
    (("megatron_bridge_26_06_dgx_h100_qwen3", "megatron_bridge_25_11_dgx_b200_llama3_8b_8gpu_fp8_cs",
      "nemo_25p04_dgx_gb200_mixtral"), dict(fp8_recipe="tensorwise"), {},
     "FP8-CS, current scaling: bf16_with_fp8_current_scaling_mixed (Megatron-Bridge scripts/performance/utils/"
     "precision.py fp8_cs; Qwen3's H100 config is FP8_CS, qwen3_workload_base_configs.py@v0.5.1 l. 494-501); NeMo "
     "25.04's table prints 'per-tensor, current scaling'. The other FP8 rows: Megatron's default, delayed"),
    (("dgxc_",), dict(grad_reduce_dtype="bf16"), {},
     "dgxc-benchmarking v24.11.1 (35a9aec): every config's optimizer is Apex's distributed_fused_adam with "
     "grad_sync_dtype: bf16, its gradient buckets in BF16 (llama3.1/llama3.1_8b.yaml, nemo_megatron/"
     "gpt3_175b_hydra.yaml, nemotron/nemotron4-15b-synth.yaml)"),
    (("vocabpar_",), dict(grad_reduce_dtype="fp16"), {},
     "pretrain_gpt.sh (sail-sg/VocabularyParallelism@6191c3b) passes --fp16 and no "
     "--accumulate-allreduce-grads-in-fp32: Megatron-Core DDP keeps the gradients in fp16 (2 bytes), "
     "fp32 accumulation being forced for --bf16 only (megatron/training/arguments.py)"),
    (("nemo_25",), {}, dict(capacity_factor=1.0),
     "Mixtral 8x7B performance mode: MegatronTokenDropCallback, capacity factor 1.0 padded to capacity "
     "(NeMo nemo/lightning/pytorch/callbacks/moe_token_drop.py defaults)"),
)


# Recomputation the GPT-OSS-120B perf recipes state (the tables print none): the model recipe sets
# recompute_granularity None (src/megatron/bridge/recipes/gpt_oss/gpt_oss.py@v0.5.0 lines 110-112) and
# each GPU's workload config overrides it, recompute_modules making it selective (scripts/performance/
# utils/overrides.py@v0.5.0 _set_recompute_overrides lines 154-156): ["layernorm", "moe_act"] on GB200,
# B200 and H100 BF16 (configs/gpt_oss/workload_base_configs.py@v0.2.0 lines 42-61, gpt_oss_workload_
# base_configs.py@v0.4.2 lines 54-82; their V2 rows inherit it), none on GB300 BF16 and the 26.06 MXFP8
# rows (GB200 FP8_MX_V2 recompute_modules=[], v0.5.0 line 220). Other rows: the fastest that fits.
_RECIPE_RECOMPUTE = (
    (("megatron_bridge_25_11_dgx_gb200_gpt_oss_120b_64gpu_bf16", "megatron_bridge_26_04_01_dgx_gb200_gpt_oss_120b_64gpu_bf16",
      "megatron_bridge_26_04_01_dgx_b200_gpt_oss_120b_64gpu_bf16", "megatron_bridge_26_04_01_dgx_h100_gpt_oss_120b_64gpu_bf16"),
     ("layernorm", "moe_act")),
    (("megatron_bridge_26_04_01_dgx_gb300_gpt_oss_120b_64gpu_bf16", "megatron_bridge_26_06_dgx_gb300_gpt_oss_120b_64gpu_mxfp8",
      "megatron_bridge_26_06_dgx_gb200_gpt_oss_120b_64gpu_mxfp8", "megatron_bridge_26_06_dgx_b300_gpt_oss_120b_64gpu_mxfp8"), ()),
)


def recipe_recompute(case_id: str) -> tuple[str, ...] | None:
    """The modules a benchmark recipe recomputes (() for none), None where it is not stated."""
    return next((mods for prefixes, mods in _RECIPE_RECOMPUTE if case_id.startswith(prefixes)), None)


def _recipe_settings(case_id: str, precision: str) -> tuple[dict, dict]:
    """(training, moe) settings of a benchmark recipe for the case (RECIPES); FP8 recipes gather FP8
    parameters (fp8_param_gather=True in bf16_with_fp8_*_mixed() and bf16_with_mxfp8_mixed())."""
    training, moe = {}, {}
    for prefixes, tr, mo, _ in RECIPES:
        if case_id.startswith(prefixes):
            training.update(tr)
            moe.update(mo)
    if case_id.startswith(_MB + _NEMO) and precision in ("fp8", "mxfp8"):
        training["fp8_param_gather"] = True
    if recipe_recompute(case_id):
        training["recompute_modules"] = recipe_recompute(case_id)
    return training, moe


# The GPU preset of a printed GPU name, and its node: (GPUs per node, NVLink GB/s, network GB/s per
# GPU, NVLink domain), from the shipped cluster presets (DGX B300: 8 x 800 Gb/s per node = 100 GB/s).
_GPUS = (("GB300", "gb300"), ("GB200", "gb200"), ("B300", "b300"), ("B200", "b200"), ("H100", "h100-sxm-80gb"))
# (GPUs per node, NVLink and network GB/s per GPU, NVLink domain, GPUs of it a large job fills: Slurm
# --segment 16 trays on NVL72, configs/clusters/dgx-gb200-nvl72-1152.yaml)
_NODES = {"h100-sxm-80gb": (8, 450, 50, None, None), "b200": (8, 900, 50, None, None), "b300": (8, 900, 100, None, None),
          "gb200": (4, 900, 50, 72, 64), "gb300": (4, 900, 100, 72, 64)}
_NEMOTRON = dict(heads=48, kv_heads=8, position_embedding="rope", tied_embeddings=False)


@dataclass(frozen=True)
class Case:
    """Measured runs of one model on one cluster. With `alternatives` k > 1, run i has the rows
    i*k .. i*k+k-1: the settings its source does not state, among which the planner takes the
    fastest that fits in memory (`fits`, computed once: memory does not depend on fitted constants)."""

    id: str
    source: str
    kind: str  # "iteration" | "layer" | "memory"
    model: ModelSpec
    cluster: ClusterSpec
    layouts: Layouts
    measured: dict  # metric -> value (one run) or metric -> array (one per row)
    alternatives: int = 1
    fits: np.ndarray | None = None

    @property
    def gpu(self) -> str:
        return self.cluster.gpu.name

    @property
    def stack(self) -> str:
        return self.model.training.stack.name


def source_of(case_id: str) -> str | None:
    return next((src for prefix, src in _PREFIX.items() if case_id.startswith(prefix)), None)


def _recompute(text) -> str:
    text = str(text).lower()
    if text.startswith("full") or "full_recompute" in text or "full activation" in text:
        return "full"
    if text.startswith("selective"):
        return "selective"
    return "none"


def _vocab(value, k: int = 1024) -> int:
    text = str(value).upper()
    return int(float(text[:-1]) * k) if text.endswith("K") else int(value)


def _precision(raw: dict, src: Source) -> str:
    """The run's precision: MXFP8 (printed MXFP8 or FP8-MX), per-tensor FP8, else the source's."""
    tr = raw["training"]
    printed = str(tr.get("precision_as_printed") or tr.get("precision") or "").upper()
    if "MX" in printed:
        return "mxfp8"
    return "fp8" if printed.startswith("FP8") else src.precision


def _gpu_preset(raw: dict, src: Source) -> str:
    if src.key == "dgxc2024":
        return "h100-sxm-80gb"
    if src.key in ("megatronbridge", "nemo2025"):
        return next(preset for printed, preset in _GPUS if printed in str(raw["hardware"]["gpu"]))
    return "a100-sxm-40gb" if "40GB" in str(raw["hardware"]["gpu"]) else "a100-sxm-80gb"


def _model(raw: dict, src: Source) -> ModelSpec:
    m, tr = raw["model"], raw["training"]
    shipped = next((preset for key, preset in _SHIPPED.items() if key in raw["id"]), None)
    if shipped is not None:
        base = load_model(shipped)
        prec = _precision(raw, src)
        recipe, moe = _recipe_settings(raw["id"], prec)
        training = base.training.model_copy(update=dict(global_batch=tr["global_batch"], precision=prec, **recipe))
        extra = dict(moe=base.moe.model_copy(update=moe)) if moe and base.moe is not None else {}
        return base.model_copy(update=dict(name=raw["id"], seq_len=m["seq_len"], training=training, **extra))
    extra = dict(_NEMOTRON) if "nemotron" in raw["id"] else {}
    if src.key == "llmfoundry":
        extra = dict(position_embedding="rope", tied_embeddings=True)  # ALiBi adds no parameters
    heads = m.get("heads") or extra.pop("heads", None)
    kv = m.get("kv_heads") or extra.pop("kv_heads", None)
    extra.pop("heads", None), extra.pop("kv_heads", None)
    prec = _precision(raw, src)
    return ModelSpec.model_validate(dict(
        name=raw["id"], layers=m["layers"], hidden=m["hidden"], heads=heads, kv_heads=kv,
        ffn_hidden=m["ffn"], vocab=_vocab(m["vocab"], src.vocab_k), seq_len=m["seq_len"], **extra,
        training=dict(global_batch=tr["global_batch"], precision=prec, stack=src.stack,
                      **_recipe_settings(raw["id"], prec)[0])))


def _cluster(gpu: str, gpus: int, src: Source) -> ClusterSpec:
    if gpu in _NODES and src.key in ("megatronbridge", "nemo2025"):
        per_node, nvlink, network, domain, segment = _NODES[gpu]
        return ClusterSpec.model_validate(dict(
            name=f"{src.key}-{gpus}", gpu=load_gpu_data(gpu), nodes=max(1, -(-gpus // per_node)),
            node=dict(gpus=min(per_node, gpus), nvlink_gbps=nvlink, network_gbps=network, nvlink_domain_gpus=domain,
                      nvlink_segment_gpus=segment)))
    per_node = 8
    return ClusterSpec.model_validate(dict(
        name=f"{src.key}-{gpus}", gpu=load_gpu_data(gpu), nodes=max(1, -(-gpus // per_node)),
        node=dict(gpus=min(per_node, gpus), nvlink_gbps=src.nvlink_gbps, network_gbps=src.network_gbps)))


def _layouts(raw: dict, model: ModelSpec, src: Source) -> tuple[Layouts, bool]:
    tr, lay = raw["training"], raw["layout"]
    rc = src.recompute or _recompute(tr["recompute"])
    sp = tr.get("seq_parallel") if isinstance(tr.get("seq_parallel"), bool) else True
    if src.key == "korthikanti2022" and str(tr["recompute"]).startswith("selective_plus"):
        sp = True
    dp, tp, pp = lay["dp"], lay["tp"], lay["pp"]
    cp, ep, etp = lay.get("cp") or 1, lay.get("ep") or 1, lay.get("etp") or 1
    zero = src.zero if dp * cp > 1 else 0
    gb = tr["global_batch"]
    if src.key in ("megatronbridge", "nemo2025"):
        # Recomputation is not printed: the recipe's where it states one, else one row per mode and
        # the planner takes the fastest that fits.
        mb = tr["micro_batch"]
        one = dict(dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, micro_batch=mb, vpp=tr.get("vpp") or 1,
                   sequence_parallel=tp > 1, zero=zero, num_microbatches=gb // (dp * mb))
        stated = recipe_recompute(raw["id"])
        if stated is not None:
            return single_layout(**one, recompute="selective" if stated else "none"), False
        cols = {k: np.full(3, int(v), dtype=np.int64) for k, v in one.items()}
        return Layouts(**cols, recompute=np.arange(3, dtype=np.int64)), True
    if not src.free_knobs:
        mb = tr["micro_batch"]
        return single_layout(dp=dp, tp=tp, pp=pp, cp=cp, micro_batch=mb, vpp=tr.get("vpp") or 1, recompute=rc,
                             sequence_parallel=sp and tp > 1, zero=zero, num_microbatches=gb // (dp * mb)), False
    rows = []
    for mb in (1, 2, 4, 8):
        for vpp in (1, 2, 3, 4, 6, 8):
            if gb % (dp * mb) or (vpp > 1 and (pp == 1 or model.layers % (pp * vpp) or (gb // (dp * mb)) % pp)):
                continue
            rows.append(dict(dp=dp, tp=tp, pp=pp, micro_batch=mb, vpp=vpp, num_microbatches=gb // (dp * mb)))
    cols = {k: np.array([r[k] for r in rows], dtype=np.int64) for k in rows[0]}
    n = len(rows)
    return Layouts(**cols, recompute=np.full(n, 2, dtype=np.int64),
                   sequence_parallel=np.full(n, int(sp and tp > 1), dtype=np.int64),
                   zero=np.full(n, zero, dtype=np.int64)), True


def _eq3_flops(model: ModelSpec, layer_passes: int = 4) -> float:
    """Narayanan et al. 2021 Eq. 3 (hardware FLOPs with full recomputation): 4 forward passes of the
    layers and 3 of the logits, per step; with `layer_passes` 3, the model FLOPs without the
    recomputation pass (Yeung et al. 2024 Table 4: b s h (72 h + 12 s) a layer, 6 b s h V)."""
    s, b = model.seq_len, model.training.global_batch
    layer = s * layer_gemm_flops_per_token(model) + layer_attention_flops_per_seq(model)
    return b * (layer_passes * model.layers * layer + 3 * s * logits_flops_per_token(model))


def _measured(raw: dict, model: ModelSpec, src: Source) -> tuple[str, dict] | None:
    me, gpus = raw["measured"], raw["layout"]["gpus"]
    if me.get("iteration_s") is not None:
        return "iteration", {"iteration_s": me["iteration_s"]}
    if "layer_total_ms" in me:
        return "layer", {k: me[k] for k in ("layer_forward_ms", "layer_backward_ms", "layer_total_ms")}
    if "activations_gib" in me:
        return "memory", {k: me[k] for k in ("params_plus_optimizer_gib", "activations_gib")}
    peak = 312 * TERA
    if src.key == "narayanan2021":
        return "iteration", {"iteration_s": _eq3_flops(model) / (me["tflops_per_gpu"] * TERA * gpus)}
    if src.key == "vocabpar2024":
        # MFU: "We follow Narayanan et al. (2021)'s derivation" (App. F) of the model FLOPs (Table 4)
        return "iteration", {"iteration_s": _eq3_flops(model, layer_passes=3) / (me["mfu"] * peak * gpus)}
    if src.key in ("llmfoundry", "megatronbridge", "nemo2025"):
        tokens = model.training.global_batch * model.seq_len
        return "iteration", {"iteration_s": tokens / (me["tokens_per_s_per_gpu"] * gpus)}
    return None  # MFU-only rows of a run already replayed by its iteration time


def _build(raw: dict) -> Case | None:
    key = source_of(raw["id"])
    if key is None:
        return None
    src = SOURCES[key]
    model = _model(raw, src)
    measured = _measured(raw, model, src)
    if measured is None:
        return None
    layouts, choose = _layouts(raw, model, src)
    cluster = _cluster(_gpu_preset(raw, src), raw["layout"]["gpus"], src)
    k = len(layouts) if choose else 1
    return Case(raw["id"], key, measured[0], model, cluster, layouts, measured[1], k, fitting(model, cluster, layouts))


def fitting(model: ModelSpec, cluster: ClusterSpec, layouts: Layouts) -> np.ndarray:
    return memory_breakdown(job_context(model, cluster, layouts)).total <= cluster.gpu.memory_gib


def _replayable(raw: dict, file) -> Case | None:
    """`_build`, with a spec the environment fails to provide (a PLANNER_CONFIG_DIR without the stack or
    GPU a published run used) said as one line naming the case and the folder: exit 2, not 3 (issue 38)."""
    try:
        return _build(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(map(str, err["loc"]))
        raise SpecError(f"cannot replay calibration case '{raw.get('id')}' with the specs of {config_dir()}: "
                        f"{where}: {err['msg'].removeprefix('Value error, ')}", file=str(file),
                        expected="a PLANNER_CONFIG_DIR holding the shipped stacks/, gpus/ and models/ "
                        "(or PLANNER_CONFIG_DIR unset)") from None


def load_cases(files=FILES, vtrain: bool = False) -> list[Case]:
    """Every replayable case of the shared files (and, with `vtrain`, vTrain's runs by model shape)."""
    cases = []
    for name in files:
        for raw in yaml.safe_load((DATA_DIR / name).read_text()):
            case = _replayable(raw, DATA_DIR / name)
            if case is not None:
                cases.append(case)
    if vtrain:
        for i, m, c, lay, t in vtrain_groups():
            cases.append(Case(i, "vtrain", "iteration", m, c, lay, {"iteration_s": t}, 1, fitting(m, c, lay)))
    return cases


def predict(case: Case, model: ModelSpec | None = None, cluster: ClusterSpec | None = None) -> dict:
    """Predicted counterparts of the case's measured figures (arrays for multi-row cases)."""
    model, cluster = model or case.model, cluster or case.cluster
    if case.kind == "iteration":
        # The step time alone (what score() computes first), for fast refits.
        t = step_time(job_context(model, cluster, case.layouts)).total.reshape(-1, case.alternatives)
        fits = case.fits.reshape(t.shape)
        t = np.where(fits.any(axis=1, keepdims=True) & ~fits, np.inf, t).min(axis=1)
        return {"iteration_s": t if t.size > 1 else float(t[0])}
    if case.kind == "layer":
        return _layer_times(case, model, cluster)
    return _memory(case, model, cluster)


def _layer_times(case: Case, model: ModelSpec, cluster: ClusterSpec) -> dict:
    job = job_context(model, cluster, case.layouts)
    lay, lc = job.layouts, job.kinds[0].lc
    act = model.training.numerics.activation_bytes
    # One forward pass of TP collectives in the forward; the rest (backward, recomputed forward) in backward.
    tp = tp_comm_per_layer_s(cluster, model.hidden, model.seq_len, lay, act) * tp_exposed(model, cluster.gpu, job.stack, lay)
    fwd = lc.fwd_s[0] + tp[0]
    bwd = lc.bwd_s[0] + lc.recompute_s[0] + tp[0] * (tp_passes(lay)[0] - 1.0)
    return {"layer_forward_ms": fwd * 1e3, "layer_backward_ms": bwd * 1e3, "layer_total_ms": (fwd + bwd) * 1e3}


def _memory(case: Case, model: ModelSpec, cluster: ClusterSpec) -> dict:
    # Korthikanti Fig. 1 counts the transformer layers' state bytes per parameter only; the first
    # stage also holds the word embedding, which the planner adds on top (memory_breakdown).
    s = score(model, cluster, case.layouts)
    first = rank_layers(model, case.layouts, 0)
    state_bytes = model.training.numerics.state_bytes
    layer_state = first * model.layer_params() / case.layouts.tp * state_bytes
    return {"params_plus_optimizer_gib": float(layer_state[0] / GIB),
            "activations_gib": float(s.memory_gib.activations[0])}


def errors(cases: list[Case], predictions: dict | None = None) -> list[tuple]:
    """(case, metric, measured, predicted, relative error) for every comparable figure; a multi-row
    case gives one tuple per row."""
    rows = []
    for case in cases:
        pred = predictions[case.id] if predictions is not None else predict(case)
        for key, value in pred.items():
            meas = case.measured.get(key)
            if meas is None:
                continue
            for m, p in zip(np.atleast_1d(meas), np.atleast_1d(value)):
                rows.append((case, key, float(m), float(p), (float(p) - float(m)) / float(m)))
    return rows


def summary(errors) -> dict:
    """Count, mean and max of relative errors (predicted / measured - 1)."""
    err = np.abs(np.asarray(errors, dtype=float))
    return {"n": int(err.size), "mean_abs": float(err.mean()) if err.size else 0.0, "max_abs": float(err.max()) if err.size else 0.0}


# GPU types that share one set of hardware constants (the same chip; memory size, HBM bandwidth and
# the peaks, which follow the clocks of each product's power budget, stay per preset): GB200's
# GPUs are B200 dies and GB300's B300 dies (NVIDIA's Blackwell datasheets). Fitted apart, GB200's
# FP8 GEMM efficiency went to 0.96 of the peak on two runs.
FAMILIES = {"a100": ("a100-sxm-80gb", "a100-sxm-40gb"), "h100": ("h100-sxm-80gb", "h200-sxm-141gb", "h100-sxm-96gb"),
            "b200": ("b200", "gb200"), "b300": ("b300", "gb300")}
# GPU types with a handful of runs each (the Blackwell ones): only their GEMM and attention
# efficiencies are fitted; the rest of their hardware constants and their stack constants are the
# named sibling's fit (benchmarks/calibrate.py), and say so.
SPARSE_FAMILIES = {"b200": "h100", "b300": "h100"}
# Whom a family's constants come from when no remaining source informs it (leave-one-source-out).
SIBLINGS = {"b300": "b200", "b200": "h100", "h100": "a100", "a100": "h100"}


def family_of(gpu_name: str) -> str | None:
    return next((fam for fam, names in FAMILIES.items() if gpu_name in names), None)


def with_constants(case: Case, hardware: dict, stack: dict) -> tuple[ModelSpec, ClusterSpec]:
    """The case's model and cluster with the given hardware (`Efficiency`) and stack constants in
    place of the shipped ones (a refit's trial values)."""
    return priced_with(case.model, case.cluster, hardware, stack)


def priced_with(model: ModelSpec, cluster: ClusterSpec, hardware: dict, stack: dict,
                memory_reserve_gib: float | None = None) -> tuple[ModelSpec, ClusterSpec]:
    """`model` and `cluster` with the GPU's efficiencies, the stack's constants on this GPU and the GPU's
    memory reserve replaced by the given values (a refit's trial values, or a profile's fitted ones);
    the stack's constants on this GPU become the profile's own, other GPUs' fitted entries are kept."""
    gpu = cluster.gpu
    update = {}
    if hardware:
        update["efficiency"] = gpu.efficiency.model_copy(update=hardware)
    if memory_reserve_gib is not None:
        update["memory_reserve_gib"] = memory_reserve_gib
    if update:
        cluster = cluster.model_copy(update={"gpu": gpu.model_copy(update=update)})
    if stack:
        profile = model.training.stack
        gpus = {k: v for k, v in profile.gpus.items() if k != gpu.name}
        base = {**profile.for_gpu(gpu.name).model_dump(), **stack}
        profile = profile.model_copy(update={**base, "gpus": gpus})
        model = model.model_copy(update={"training": model.training.model_copy(update={"stack": profile})})
    return model, cluster


def relative_errors(case: Case, model: ModelSpec | None = None, cluster: ClusterSpec | None = None,
                    metrics=("iteration_s", "layer_forward_ms", "layer_backward_ms")) -> np.ndarray:
    """(predicted - measured) / measured of the case's time figures."""
    pred = predict(case, model, cluster)
    out = [(np.atleast_1d(pred[k]) - np.atleast_1d(case.measured[k])) / np.atleast_1d(case.measured[k])
           for k in metrics if k in case.measured and k in pred]
    return np.concatenate(out) if out else np.zeros(0)


EXTRA_DIR = shared_dir("data") / "extra-checks"
EXTRA_SOURCES = {"bloom": "BLOOM-176B layout search, 384 A100 (megatron-deepspeed, slow network)",
                 "ds_azure": "DeepSpeed ZeRO-3 on Azure, 175B-2T on 256-1024 A100 (deepspeed-zero3)",
                 "tt_a100": "torchtitan FSDP2 on 64 A100 (pytorch-fsdp)"}


def load_extra_checks() -> list[Case]:
    """Published runs never fitted to (data/extra-checks): BF16/FP16 runs on shipped GPU presets."""
    cases = []
    for raw in yaml.safe_load((EXTRA_DIR / "extra-cases.yaml").read_text()):
        group = next((g for g in EXTRA_SOURCES if raw["id"].startswith(g)), None)
        tr, lay, m, me = raw["training"], raw["layout"], raw["model"], raw["measured"]
        if group is None or tr["precision"] not in ("bf16", "fp16") or stack_data(raw["stack"]) is None:
            continue
        model = ModelSpec.model_validate(dict(
            name=raw["id"], layers=m["layers"], hidden=m["hidden"], heads=m["heads"], kv_heads=m.get("kv_heads"),
            ffn_hidden=m["ffn"], ffn_act=m.get("ffn_act", "gelu"), vocab=m["vocab"], seq_len=m["seq_len"],
            position_embedding="rope" if m.get("ffn_act") == "swiglu" else "learned",
            training=dict(global_batch=tr["global_batch"], precision=tr["precision"], stack=raw["stack"])))
        gpus = lay["gpus"]
        src = Source(group, EXTRA_SOURCES[group], raw["stack"], tr["precision"], 300,
                     raw.get("network_gbps_per_gpu") or 25, tr["zero"], "")
        cluster = _cluster(raw["gpu"], gpus, src)
        if "host" in raw:  # the node's host memory and links, for runs that offloaded to it
            cluster = cluster.model_copy(update={"node": cluster.node.model_copy(update=raw["host"])})
        mb, dp = tr["micro_batch"], lay["dp"]
        layouts = single_layout(dp=dp, tp=lay["tp"], pp=lay["pp"], micro_batch=mb, vpp=lay.get("vpp") or 1,
                                recompute=tr["recompute"], sequence_parallel=False, zero=tr["zero"] if dp > 1 else 0,
                                offload=tr.get("offload", "none"), num_microbatches=tr["global_batch"] // (dp * mb))
        if "iteration_s" in me:
            t = me["iteration_s"]
        elif "tokens_per_s_per_gpu" in me:
            t = tr["global_batch"] * m["seq_len"] / (me["tokens_per_s_per_gpu"] * gpus)
        else:  # hardware TFLOP/s by Narayanan's Eq. 3 (full recomputation), as the sources print
            t = _eq3_flops(model) / (me["tflops_per_gpu"] * TERA * gpus)
        cases.append(Case(raw["id"], group, "iteration", model, cluster, layouts, {"iteration_s": t}, 1,
                          fitting(model, cluster, layouts)))
    return cases
