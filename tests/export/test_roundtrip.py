"""Round trips: every shipped model's export, read back by the framework's own parser or config classes
(vendored in tests/data/frameworks/, see each file's header), must give back the model the spec names.

megatron-lm-argparse.txt: NVIDIA/Megatron-LM core_v0.15.0 (0d7e02bd26) megatron/training/arguments.py, every
add_argument call (help dropped), rebuilt here as an argparse parser without torch or megatron."""
from __future__ import annotations

import argparse
import ast
import enum
import json
import os
import re
import shlex
from functools import cache
from pathlib import Path

import pytest

from planner.estimate import estimate_layout
from planner.export import export_settings
from planner.specs.loading import load_cluster, load_model
from planner.specs.shipped import shipped_names

FRAMEWORKS = Path(__file__).resolve().parents[1] / "data" / "frameworks"
# hybrid models (a layer_pattern): Megatron-LM core_v0.15.0 builds Nemotron-H's Mamba / attention / MLP pattern;
# the other exports refuse hybrids (planner/export/frameworks.py model_refusal), as does Megatron Qwen3-Next's DeltaNet
MODELS = [n for n in shipped_names("model") if load_model(n).layer_pattern is None]
MEGATRON_MODELS = MODELS + ["nemotron-h-56b"]


def _sections(name: str) -> dict[str, list[str]]:
    """A vendored file's `## title` sections (the first, untitled, is ""), header comments dropped."""
    out: dict[str, list[str]] = {"": []}
    key = ""
    for line in (FRAMEWORKS / name).read_text().splitlines():
        if line.startswith("## "):
            key = line.removeprefix("## ")
            out[key] = []
        elif not line.startswith("# "):
            out[key].append(line)
    return out


class _AttnBackend(enum.Enum):  # stands in for megatron.core.transformer.enums.AttnBackend (a choices list)
    auto = 5


class _StrictHandling(enum.Enum):  # stands in for megatron.core.dist_checkpointing's (a choices list)
    assume_ok_unexpected = "assume_ok_unexpected"


@cache
def megatron_parser() -> argparse.ArgumentParser:
    """Megatron-LM's parser, as arguments.py builds it (allow_abbrev=False), from the vendored calls."""
    sec = _sections("megatron-lm-argparse.txt")
    env: dict = {"argparse": argparse, "os": os, "re": re, "AttnBackend": _AttnBackend, "StrictHandling": _StrictHandling}
    exec("\n".join(sec["type functions (verbatim)"]), env)  # _eval_pattern, moe_freq_type, tuple_type
    env["no_rope_freq_type"] = env["moe_freq_type"]  # same shape; no export writes --no-rope-freq
    parser = argparse.ArgumentParser(allow_abbrev=False, exit_on_error=False)
    env["group"] = parser
    for call in sec[""]:
        eval(call, env)
    return parser


@cache
def mla_defaults() -> dict[str, str]:
    """MLATransformerConfig field -> its vendored default (text)."""
    return {line.split(":")[0]: line.split("=", 1)[1].strip() for line in _sections("megatron-lm-argparse.txt")["MLATransformerConfig fields"]}


def parse_megatron(text: str) -> argparse.Namespace:
    words = shlex.split(" ".join(line.removesuffix(" \\") for line in text.splitlines() if not line.startswith("#")))
    ns, unknown = megatron_parser().parse_known_args(words)
    assert unknown == [], unknown
    return ns


@cache
def shipped_export(name: str, kind: str, **layout):
    m, c = load_model(name), load_cluster("dgx-h100-1024")
    given = layout or dict(gpus=8, tp=1, pp=1, micro_batch=1)
    return export_settings(kind, estimate_layout(m, c, **given), m, c), m


def megatron_model(m) -> dict:
    """The namespace arguments.py must give for spec `m`, field by field (Megatron's own names and defaults:
    LayerNorm, learned positions, rotary base 10000, biases on, softmax router, no groups)."""
    mla, moe, y = m.mla, m.moe, m.yarn
    bias = m.linear_bias if m.linear_bias is not None else m.ffn_act != "swiglu"
    out = dict(num_layers=m.layers, hidden_size=m.hidden, ffn_hidden_size=m.ffn, num_attention_heads=m.heads,
               padded_vocab_size=m.vocab, seq_length=m.seq_len, max_position_embeddings=m.seq_len,
               normalization={"rmsnorm": "RMSNorm", None: "LayerNorm", "layernorm": "LayerNorm"}[m.normalization],
               swiglu=m.ffn_act == "swiglu", squared_relu=m.ffn_act == "relu2",
               hybrid_override_pattern=m.layer_pattern, is_hybrid_model=m.layer_pattern is not None,
               position_embedding_type={"rope": "rope", "learned": "learned_absolute", "none": "none"}[m.position_embedding],
               rotary_base=int(m.rope_theta or 10000), use_rope_scaling=m.rope_scaling_factor is not None,
               rope_scaling_factor=m.rope_scaling_factor or 8.0, qk_layernorm=m.qk_norm or mla is not None,
               untie_embeddings_and_output_weights=not m.tied_embeddings, add_bias_linear=bias, add_qkv_bias=False,
               activation_func_clamp_value=m.swiglu_limit,
               window_size=None if m.sliding_window is None else (m.sliding_window - 1, 0),
               window_attn_skip_freq=m.full_attention_every, mtp_num_layers=m.mtp_layers or None,
               multi_latent_attention=mla is not None,
               group_query_attention=mla is None and m.num_kv_heads < m.heads,
               num_query_groups=m.num_kv_heads if mla is None and m.num_kv_heads < m.heads else 1,
               kv_channels=m.head_dim if mla is None else None)
    if m.mamba is not None:
        out |= dict(mamba_num_heads=m.mamba.heads, mamba_head_dim=m.mamba.head_dim, mamba_state_dim=m.mamba.state_dim,
                    mamba_num_groups=m.mamba.groups)
    if mla is not None:
        out |= dict(q_lora_rank=mla.q_lora_rank, kv_lora_rank=mla.kv_lora_rank, qk_head_dim=mla.qk_nope_head_dim,
                    qk_pos_emb_head_dim=mla.qk_rope_head_dim, v_head_dim=mla.v_head_dim,
                    rope_type="rope" if y is None else "yarn")
        if y is not None:
            out |= dict(rotary_scaling_factor=y.factor, mscale=y.mscale if y.mscale is not None else 1.0,
                        mscale_all_dim=y.mscale_all_dim if y.mscale_all_dim is not None else 0.0)
    out |= dict(num_experts=None if moe is None else moe.experts)
    if moe is not None:
        layers = [int(m.moe_layers_before(i + 1) - m.moe_layers_before(i)) for i in range(m.layers)]
        out |= dict(moe_router_topk=moe.top_k, moe_ffn_hidden_size=moe.expert_ffn_hidden,
                    moe_router_score_function=moe.router_score, moe_router_enable_expert_bias=moe.expert_bias,
                    moe_router_num_groups=moe.router_groups, moe_router_group_topk=moe.router_group_top_k,
                    moe_router_topk_scaling_factor=moe.top_k_scaling, moe_grouped_gemm=True,
                    moe_shared_expert_intermediate_size=moe.shared_experts * moe.shared_ffn or None,
                    moe_expert_capacity_factor=moe.capacity_factor,
                    moe_layer_freq=1 if layers == [1] * m.layers else layers)
    return out


@pytest.mark.parametrize("name", MEGATRON_MODELS)
def test_megatron_export_parses_and_builds_the_spec(name):
    export, m = shipped_export(name, "megatron")
    ns = parse_megatron(export.text)
    got = {k: getattr(ns, k) for k in megatron_model(m)}
    assert got == megatron_model(m)


@pytest.mark.parametrize("name", MEGATRON_MODELS)
def test_what_megatron_cannot_say_is_a_comment(name):
    """core_v0.15.0 has no flag for YaRN outside MLA, nor for MLA YaRN's context and betas other than
    MLATransformerConfig's defaults: each is a `#` line, and none is silently dropped."""
    export, m = shipped_export(name, "megatron")
    comments = [line for line in export.text.splitlines() if line.startswith("# ")]
    y = m.yarn
    if y is not None and m.mla is None:
        assert any(line.startswith(f"# YaRN (factor {y.factor:g}") for line in comments)
    if y is not None and m.mla is not None:
        d = mla_defaults()
        differ = [k for k in ("original_max_position_embeddings", "beta_fast", "beta_slow") if float(d[k]) != getattr(y, k)]
        assert any(all(k in line for k in differ) for line in comments) if differ else not any("YaRN" in c for c in comments)


def test_deepseek_v3_flags_by_hand():
    # configs/models/deepseek-v3.yaml from its config.json: sigmoid scores with expert bias (noaux_tc), 8 groups
    # of which 4 per token, routed_scaling_factor 2.5, one MTP layer, YaRN x40 with mscale 1 and mscale_all_dim 1
    ns = parse_megatron(shipped_export("deepseek-v3", "megatron")[0].text)
    assert (ns.moe_router_score_function, ns.moe_router_enable_expert_bias) == ("sigmoid", True)
    assert (ns.moe_router_num_groups, ns.moe_router_group_topk, ns.moe_router_topk_scaling_factor) == (8, 4, 2.5)
    assert (ns.mtp_num_layers, ns.rope_type, ns.rotary_scaling_factor, ns.mscale, ns.mscale_all_dim) == (1, "yarn", 40.0, 1.0, 1.0)
    assert ns.moe_layer_freq == [0] * 3 + [1] * 58 and ns.moe_shared_expert_intermediate_size == 2048
    assert ns.normalization == "RMSNorm" and ns.add_bias_linear is False and ns.padded_vocab_size == 129280
    # MLATransformerConfig's YaRN defaults are DeepSeek-V3's: nothing left to say
    assert (mla_defaults()["original_max_position_embeddings"], mla_defaults()["beta_fast"]) == ("4096", "32")


def test_the_parser_refuses_what_megatron_refuses():
    # the rebuilt parser is strict: an unknown flag, an abbreviation and a bad choice all fail
    with pytest.raises(AssertionError):
        parse_megatron("--num-layers 2 --no-such-flag")
    with pytest.raises(AssertionError):
        parse_megatron("--num-lay 2")  # allow_abbrev=False
    with pytest.raises((argparse.ArgumentError, SystemExit)):
        parse_megatron("--moe-router-score-function sparsemax")
    assert parse_megatron("").normalization == "LayerNorm" and parse_megatron("").rotary_base == 10000


def test_a_dropped_flag_breaks_the_round_trip():
    export, m = shipped_export("llama3.1-70b", "megatron")
    text = "\n".join(line for line in export.text.splitlines() if not line.startswith("--rotary-base"))
    assert parse_megatron(text).rotary_base == 10000 != megatron_model(m)["rotary_base"]


def test_mla_without_yarn_says_rope():
    # MLATransformerConfig defaults to rope_type yarn (factor 40): a MLA model without YaRN must say rope
    assert mla_defaults()["rope_type"] == '"yarn"'
    m = load_model("kimi-k2")  # its shipped spec states no YaRN
    assert m.yarn is None and parse_megatron(shipped_export("kimi-k2", "megatron")[0].text).rope_type == "rope"


def test_vocab_not_divisible_by_tp_is_a_note():
    m, c = load_model("gpt3-175b"), load_cluster("dgx-h100-1024")
    m = m.model_copy(update={"vocab": 50257})
    export = export_settings("megatron", estimate_layout(m, c, gpus=8, tp=8, pp=1, micro_batch=1), m, c)
    assert "--padded-vocab-size" not in export.text and any("vocab 50257" in n for n in export.notes)


# --- torchtitan: the overrides read back through the config dataclasses' fields --------------------------------
# torchtitan-0.3.txt: the release 0.3.0 (PyPI wheel) config/configs.py, trainer.py Trainer.Config and the activation-
# checkpoint subcommands; torchtitan-main.txt: the same of main b5bcd76 (2026-08-21); torchtitan.txt: v0.2.2 (73a0e6979d)
# config/job_config.py. BSD-3-Clause.
TITAN = {"torchtitan": ("torchtitan-0.3.txt", "Trainer.Config"), "torchtitan@main": ("torchtitan-main.txt", "Trainer.Config"),
         "torchtitan@0.2": ("torchtitan.txt", "JobConfig")}
TYRO = ("torchtitan", "torchtitan@main")  # Trainer.Config read by tyro: activation checkpointing a subcommand


@cache
def titan_fields(kind: str) -> dict[str, dict[str, tuple[str, str | None]]]:
    """class -> field -> (annotation, default as written), from the vendored field lines."""
    out: dict[str, dict[str, tuple[str, str | None]]] = {}
    cls = None
    for line in (FRAMEWORKS / TITAN[kind][0]).read_text().splitlines():
        if line.startswith("class "):
            cls = out.setdefault(line.removeprefix("class ").rstrip(":"), {})
        elif line.startswith(("#", "## ")) or not line.startswith(" "):
            cls = None
        elif cls is not None and (found := re.match(r"^\s+(\w+): (.+?)(?: = (.*))?$", line)):
            cls[found.group(1)] = (found.group(2), found.group(3))
    return out


def _titan_value(annotation: str, text: str | None):
    """`text` read as tyro reads a field of that annotation (None: a bare boolean flag); anything else fails."""
    if annotation == "bool" or text is None:
        assert annotation == "bool" and text is None, (annotation, text)
        return True
    if annotation.startswith("Literal["):
        choices = ast.literal_eval(f"[{annotation[8:-1]}]")
        assert text in choices, (text, choices)
        return text
    base = annotation.removesuffix(" | None")
    if base == "int":
        assert re.fullmatch(r"-?\d+", text), (annotation, text)
        return int(text)
    if base in ("float", "float | int"):
        return float(text)
    if base == "str":
        return text
    if base == "list[str]":
        return text.split(",")
    raise AssertionError(f"no reader for {annotation}")


def parse_titan(text: str, kind: str) -> tuple[dict[str, object], str | None]:
    """'section.field' -> value for every override (defaults for the rest through `titan_get`), and main's
    activation-checkpoint subcommand."""
    fields, (_, root) = titan_fields(kind), TITAN[kind]
    subcommands = set(re.findall(r'subcommand\("([\w-]+)"\)', (FRAMEWORKS / TITAN[kind][0]).read_text()))
    out: dict[str, object] = {}
    sub = None
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        if not line.startswith("--"):  # main: a tyro subcommand of Trainer.Config.activation_checkpoint
            assert kind in TYRO and line.startswith("activation-checkpoint:") and sub is None, line
            sub = line.removeprefix("activation-checkpoint:")
            assert sub in subcommands, sub
            continue
        key, eq, value = line.removeprefix("--").partition("=")
        *path, name = key.split(".")
        cls = root
        for part in path:
            cls = fields[cls][part][0]
        flag = not eq
        if flag and name not in fields[cls] and name.startswith("no_"):
            name, on = name.removeprefix("no_"), False
        else:
            on = True
        assert name in fields[cls], key
        value = _titan_value(fields[cls][name][0], None if flag else value)
        out[".".join([*path, name])] = on if flag else value
    return out, sub


def titan_get(cfg: dict, kind: str, key: str):
    if key in cfg:
        return cfg[key]
    section, name = key.split(".")
    fields = titan_fields(kind)
    default = fields[fields[TITAN[kind][1]][section][0]][name][1]
    return ast.literal_eval(default)


def titan_run(text: str, kind: str, gpus: int) -> dict:
    """What torchtitan builds from the overrides: main's parallel_dims.py _validate and trainer.py's token
    arithmetic, or 0.3.0's trainer.py and v0.2.2's train.py batch arithmetic (their asserts kept as asserts)."""
    cfg, sub = parse_titan(text, kind)
    g = lambda key: titan_get(cfg, kind, key)  # noqa: E731
    tp, pp, cp = g("parallelism.tensor_parallel_degree"), g("parallelism.pipeline_parallel_degree"), g("parallelism.context_parallel_degree")
    rep, shard, ep = g("parallelism.data_parallel_replicate_degree"), g("parallelism.data_parallel_shard_degree"), g("parallelism.expert_parallel_degree")
    if shard < 0:
        shard = gpus // (rep * cp * tp * pp)
    assert rep * shard * cp * tp * pp == gpus
    dp = rep * shard
    out = dict(dp=dp, dp_shard=shard, tp=tp, pp=pp, cp=cp, ep=ep, reshard=g("parallelism.fsdp_reshard_after_forward"))
    if kind == "torchtitan@main":
        assert (shard * cp * tp) % ep == 0  # parallel_dims.py: sparse_region % ep
        micro = g("training.num_tokens_per_microbatch_per_dp_rank")
        npp = g("parallelism.num_pp_microbatches") if pp > 1 else 1
        step = g("training.num_tokens_per_train_step")
        step = micro * npp * dp if step < 0 else step
        assert step % (micro * npp * dp) == 0
        assert micro % ((tp if g("parallelism.enable_sequence_parallel") else 1) * (2 * cp if cp > 1 else 1)) == 0
        assert g("training.disable_cuda_graphs") or pp == 1  # trainer.py _validate_cuda_graphs
        return out | dict(micro_tokens=micro, pipeline_pass=npp, accumulation=step // (micro * npp * dp), step_tokens=step,
                          context=g("training.max_context_length"), full_recompute=sub == "full", etp=1)
    seq, local = g("training.seq_len"), g("training.local_batch_size")
    mbs = g("parallelism.pipeline_parallel_microbatch_size") if pp > 1 else local
    assert local % mbs == 0
    glob = g("training.global_batch_size")
    glob = local * dp if glob < 0 else glob
    assert glob % (local * dp) == 0
    batch = dict(micro_tokens=mbs * seq, pipeline_pass=local // mbs, accumulation=glob // (local * dp), step_tokens=glob * seq,
                 context=seq)
    if kind == "torchtitan":  # 0.3.0: parallel_dims.py efsdp = dp_shard*cp*tp // ep (mesh sizes asserted), trainer.py
        assert (shard * cp * tp) % ep == 0
        assert seq % ((tp if g("parallelism.enable_sequence_parallel") else 1) * (2 * cp if cp > 1 else 1)) == 0
        assert g("training.disable_cuda_graphs") or pp == 1  # trainer.py _validate_cuda_graphs
        return out | batch | dict(full_recompute=sub == "full", etp=1)
    return out | batch | dict(full_recompute=g("activation_checkpoint.mode") == "full",
                      etp=g("parallelism.expert_tensor_parallel_degree") if ep > 1 else 1)


def titan_layouts(m) -> list[dict]:
    """FSDP with pp and full recompute; DDP over cp (ZeRO-0: torchtitan has no ZeRO-1), ep within cp*tp for MoE."""
    moe = m.moe is not None
    return [dict(gpus=64, tp=2, pp=2, micro_batch=1, zero=3, recompute="full", sequence_parallel=True) | (dict(ep=4) if moe else {}),
            dict(gpus=16, tp=2, cp=2, pp=1, micro_batch=2, zero=0, sequence_parallel=True) | (dict(ep=2) if moe else {})]


@pytest.mark.parametrize("kind", TITAN)
@pytest.mark.parametrize("name", MODELS)
def test_torchtitan_export_reads_back_the_layout(name, kind):
    m, c = load_model(name), load_cluster("dgx-h100-1024")
    for given in titan_layouts(m):
        scored = estimate_layout(m, c, **given)
        lay = scored.layout
        got = titan_run(export_settings(kind, scored, m, c).text, kind, lay["dp"] * lay["tp"] * lay["pp"] * lay["cp"])
        acc = m.training.global_batch // (lay["micro_batch"] * lay["dp"])
        assert got == dict(dp=lay["dp"], dp_shard=lay["dp"] if lay["zero"] >= 2 else 1, tp=lay["tp"], pp=lay["pp"],
                           cp=lay["cp"], ep=lay["ep"], etp=lay["etp"],
                           reshard={3: "always", 2: "never"}.get(lay["zero"], "default"),
                           # the planner's pipeline runs all micro-batches of a step in one pass (no accumulation)
                           micro_tokens=lay["micro_batch"] * m.seq_len, pipeline_pass=acc if lay["pp"] > 1 else 1,
                           accumulation=1 if lay["pp"] > 1 else acc,
                           step_tokens=m.training.global_batch * m.seq_len, context=m.seq_len,
                           full_recompute=lay["recompute"] == "full")


def test_torchtitan_main_by_hand():
    # llama3.1-8b (seq 8192, global batch 1024) on 64 GPUs, tp 2 pp 2: dp 16, micro-batches 1024 / 16 = 64 in one
    # pipeline pass; 8192 tokens a microbatch, 1024 * 8192 = 8388608 a step
    m, c = load_model("llama3.1-8b"), load_cluster("dgx-h100-1024")
    assert (m.seq_len, m.training.global_batch) == (8192, 1024)
    text = export_settings("torchtitan@main", estimate_layout(m, c, **titan_layouts(m)[0]), m, c).text
    cfg, sub = parse_titan(text, "torchtitan@main")
    assert cfg["training.num_tokens_per_microbatch_per_dp_rank"] == 8192 and cfg["parallelism.num_pp_microbatches"] == 64
    assert cfg["training.num_tokens_per_train_step"] == 8388608 and cfg["parallelism.data_parallel_shard_degree"] == 16
    assert sub == "full" and titan_run(text, "torchtitan@main", 64)["accumulation"] == 1


def test_torchtitan_release_by_hand():
    # the same layout in 0.3.0's names: one pipeline pass of 64 micro-batches of 1 sequence is a local batch of 64
    # (pipeline_parallel_microbatch_size 1), global batch 1024 = 64 x dp 16: accumulation 1; seq_len 8192
    m, c = load_model("llama3.1-8b"), load_cluster("dgx-h100-1024")
    text = export_settings("torchtitan", estimate_layout(m, c, **titan_layouts(m)[0]), m, c).text
    assert text.splitlines()[0] == ("# torchtitan 0.3.0 (the release on PyPI) names; unreleased main's: --export "
                                    "torchtitan@main, v0.2.2's: --export torchtitan@0.2")
    cfg, sub = parse_titan(text, "torchtitan")
    assert cfg["training.local_batch_size"] == 64 and cfg["parallelism.pipeline_parallel_microbatch_size"] == 1
    assert cfg["training.global_batch_size"] == 1024 and cfg["training.seq_len"] == 8192
    assert cfg["parallelism.data_parallel_shard_degree"] == 16 and sub == "full"
    assert titan_run(text, "torchtitan", 64)["accumulation"] == 1


def test_the_torchtitan_reader_refuses_mains_names_on_the_release():
    # issue 38: torchtitan 0.3.0 knew none of main's token counts (0 of 28 exports parsed)
    for line in ("--training.num_tokens_per_microbatch_per_dp_rank=8192", "--parallelism.num_pp_microbatches=4",
                 "--training.max_context_length=8192", "--activation_checkpoint.mode=full",
                 "--parallelism.expert_tensor_parallel_degree=1"):
        with pytest.raises((KeyError, AssertionError)):
            parse_titan(line, "torchtitan")
    assert parse_titan("--training.local_batch_size=8", "torchtitan")[0] == {"training.local_batch_size": 8}


def test_the_torchtitan_reader_refuses_old_names_on_main():
    # what issue 30 saw: main dies on v0.2.2's batch names ("Unrecognized options"); and on a bad type or choice
    for line in ("--training.local_batch_size=8", "--training.seq_len=8192", "--parallelism.pipeline_parallel_microbatch_size=1",
                 "--parallelism.expert_tensor_parallel_degree=1", "--activation_checkpoint.mode=full"):
        with pytest.raises((KeyError, AssertionError)):
            parse_titan(line, "torchtitan@main")
    with pytest.raises(AssertionError):
        parse_titan("--training.max_context_length=8k", "torchtitan@main")
    with pytest.raises(AssertionError):
        parse_titan("--parallelism.fsdp_reshard_after_forward=sometimes", "torchtitan@main")
    with pytest.raises(AssertionError):
        parse_titan("activation-checkpoint:selective-op", "torchtitan@main")
    assert parse_titan("--training.seq_len=8192", "torchtitan@0.2")[0] == {"training.seq_len": 8192}


# --- DeepSpeed: the ds_config read back as DeepSpeedConfig reads it ---------------------------------------------
# deepspeed.txt (constants, DeepSpeedZeroConfig fields, ZeroStageEnum) and deepspeed-config.txt (the top-level keys
# config.py reads, DeepSpeedConfigModel's extra="forbid", the BF16/FP16 config fields, get_communication_data_type
# and DeepSpeedConfig._batch_assertion verbatim): deepspeedai/DeepSpeed v0.19.5 (cf44300453), Apache-2.0.


def _ds_fields(lines: list[str]) -> dict[str, str]:
    """`name: type = default` lines -> name -> type."""
    return {line.split(":")[0]: line.split(":", 1)[1].split("=")[0].strip() for line in lines if re.match(r"^\w+:", line)}


@cache
def deepspeed_config_reader() -> dict:
    consts, ds = {}, _sections("deepspeed.txt")
    for key, lines in ds.items():
        if key.startswith("file: "):
            consts |= {line.split(" = ")[0]: ast.literal_eval(line.split(" = ", 1)[1].split("#")[0].strip()) for line in lines}
    sec = _sections("deepspeed-config.txt")
    env = {"get_scalar_param": lambda d, name, default: d.get(name, default),  # config_utils.py get_scalar_param
           "COMMUNICATION_DATA_TYPE": consts["COMMUNICATION_DATA_TYPE"], "COMMUNICATION_DATA_TYPE_DEFAULT": None,
           "torch": argparse.Namespace(float32="fp32", float16="fp16", bfloat16="bf16")}
    exec("\n".join(sec["functions (verbatim)"]), env)
    # names defined outside deepspeed.txt's files (elasticity, autotuning, ...) have no string here: keys never written
    return dict(top={consts[name] for name in sec["top-level keys read (constant names)"] if name in consts},
                forbid='extra="forbid",' in "\n".join(sec["DeepSpeedConfigModel model_config"]),
                bf16=_ds_fields(sec["DeepSpeedBF16Config fields"]), fp16=_ds_fields(sec["DeepSpeedFP16Config fields"]),
                zero=_ds_fields(ds["DeepSpeedZeroConfig fields"]),
                stages={int(line.split("=")[1]) for line in ds["ZeroStageEnum (the values of zero_optimization.stage)"]},
                act={v for k, v in consts.items() if k.startswith("ACT_CHKPT_")},
                act_types={"ACT_CHKPT_" + line.split("ACT_CHKPT_")[1].removesuffix("_DEFAULT = False").removesuffix("_DEFAULT = None"):
                           "bool" if line.endswith("False") else "int" for line in sec["activation checkpointing defaults"]},
                consts=consts, comm=env["get_communication_data_type"], batch=env["_batch_assertion"])


def read_ds_config(cfg: dict, dp: int) -> dict:
    """What DeepSpeedConfig takes from `cfg` on `dp` data-parallel ranks (its world_size with an mpu); fails where
    it fails: a key it does not read or a model field it forbids, a wrong type, a batch that does not multiply."""
    r = deepspeed_config_reader()
    assert set(cfg) <= r["top"], set(cfg) - r["top"]
    assert r["forbid"]  # DeepSpeedConfigModel: extra keys of bf16, fp16, zero_optimization are errors
    types = {"bool": bool, "int": int, "float": (int, float), "ZeroStageEnum": int}
    for section, fields in (("bf16", r["bf16"]), ("fp16", r["fp16"]), ("zero_optimization", r["zero"])):
        for key, value in cfg.get(section, {}).items():
            assert key in fields, (section, key)
            assert isinstance(value, types[fields[key]]), (section, key, value)
    act_names = {r["consts"][k]: t for k, t in r["act_types"].items()}
    for key, value in cfg.get("activation_checkpointing", {}).items():
        assert key in r["act"] and isinstance(value, types[act_names[key]]), key
    stage = cfg.get("zero_optimization", {}).get("stage", 0)
    assert stage in r["stages"]
    bf16, fp16 = cfg.get("bf16", {}).get("enabled", False), cfg.get("fp16", {}).get("enabled", False)
    assert not (bf16 and fp16)  # config.py: 'bfloat16 and fp16 modes cannot be simultaneously enabled'
    batch = argparse.Namespace(train_batch_size=cfg["train_batch_size"], world_size=dp,
                               train_micro_batch_size_per_gpu=cfg["train_micro_batch_size_per_gpu"],
                               gradient_accumulation_steps=cfg["gradient_accumulation_steps"])
    r["batch"](batch)
    return dict(micro=batch.train_micro_batch_size_per_gpu, accumulation=batch.gradient_accumulation_steps,
                global_batch=batch.train_batch_size, stage=stage, bf16=bf16, fp16=fp16, comm=r["comm"](cfg),
                checkpointing="activation_checkpointing" in cfg)


def _ds_layouts(m):
    """Layouts DeepSpeed runs: cp 1, vpp 1, ZeRO 0/1 with pp > 1, no ZeRO-3 with (native) MoE."""
    return [dict(gpus=64, tp=2, pp=2, micro_batch=1, zero=1, recompute="full", sequence_parallel=True),
            dict(gpus=16, tp=1, pp=1, micro_batch=2, zero=2 if m.moe else 3),
            dict(gpus=32, tp=4, pp=1, micro_batch=1, zero=2, recompute="selective")]


@pytest.mark.parametrize("name", MODELS)
def test_deepspeed_config_reads_back_the_layout(name):
    m, c = load_model(name), load_cluster("dgx-h100-1024")
    for given in _ds_layouts(m):
        scored = estimate_layout(m, c, **given)
        lay = scored.layout
        got = read_ds_config(json.loads(export_settings("deepspeed", scored, m, c).text), lay["dp"])
        assert got == dict(micro=lay["micro_batch"], accumulation=m.training.global_batch // (lay["micro_batch"] * lay["dp"]),
                           global_batch=m.training.global_batch, stage=lay["zero"], bf16=m.training.precision != "fp16",
                           fp16=m.training.precision == "fp16", comm="bf16" if m.training.grad_reduce_dtype == "bf16" else None,
                           checkpointing=lay["recompute"] != "none")


def test_deepspeed_by_hand_fp16_and_bf16_reduction():
    # gpt3-13b (global batch 1024) on 64 GPUs at tp 2 pp 2: dp 16, 1024 / (2 * 16) = 32 steps of accumulation
    m, c = load_model("gpt3-13b"), load_cluster("dgx-a100-1024")
    m = m.model_copy(update={"training": m.training.model_copy(update={"precision": "fp16", "grad_reduce_dtype": "bf16"})})
    assert m.training.global_batch == 1024
    cfg = json.loads(export_settings("deepspeed", estimate_layout(m, c, gpus=64, tp=2, pp=2, micro_batch=2, zero=1), m, c).text)
    assert read_ds_config(cfg, 16) == dict(micro=2, accumulation=32, global_batch=1024, stage=1, bf16=False, fp16=True,
                                           comm="bf16", checkpointing=False)


def test_the_deepspeed_reader_refuses_what_deepspeed_refuses():
    ok = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
          "zero_optimization": {"stage": 1}, "bf16": {"enabled": True}}
    assert read_ds_config(ok, 8)["accumulation"] == 4
    for bad, dp in ((ok, 4), (ok | {"batch_size": 64}, 8), (ok | {"zero_optimization": {"stage": 4}}, 8),
                    (ok | {"zero_optimization": {"stage": 1, "offload": True}}, 8), (ok | {"fp16": {"enabled": True}}, 8),
                    (ok | {"bf16": {"enabled": "yes"}}, 8), (ok | {"activation_checkpointing": {"partition": True}}, 8)):
        with pytest.raises(AssertionError):
            read_ds_config(bad, dp)
    with pytest.raises(ValueError, match="Invalid communication_data_type"):
        read_ds_config(ok | {"communication_data_type": "bfloat16"}, 8)


# --- Megatron-Bridge: run_recipe.py overrides checked against ConfigContainer's fields ------------------------------
# megatron-bridge.txt: NVIDIA-NeMo/Megatron-Bridge v0.6.0 (51885cf132) ConfigContainer, GPTModelProvider, TrainingConfig,
# DDP/optimizer/dataset configs and their Megatron-LM (cd4afffa64) bases; recipe and mixed-precision names. Apache-2.0.


@cache
def bridge_fields() -> tuple[dict[str, dict[str, str]], set[str], set[str]]:
    """(override prefix -> field -> annotation, recipe names, mixed-precision names)."""
    sec = _sections("megatron-bridge.txt")
    fields: dict[str, dict[str, str]] = {}
    prefix = None
    for line in (FRAMEWORKS / "megatron-bridge.txt").read_text().splitlines():
        if line.startswith("## section: "):
            prefix = line.removeprefix("## section: ")
        elif line.startswith("## ") and not line.startswith("## from:"):
            prefix = None
        elif prefix and (found := re.match(r"^(\w+): (.+?)(?: = .*)?$", line)):
            fields.setdefault(prefix, {}).setdefault(found.group(1), found.group(2))
    return fields, set(sec["recipes"]), set(sec["mixed precision"])


def _bridge_value(annotation: str, text: str):
    """`text` as OmegaConf reads it, checked against the field's annotation; anything else fails."""
    optional = annotation.startswith("Optional[") or "None" in annotation
    if text == "null":
        assert optional, annotation
        return None
    if text in ("true", "false"):
        assert "bool" in annotation, annotation
        return text == "true"
    if text.startswith("["):
        assert re.search(r"\b(List|list)\b", annotation), annotation
        # Hydra's list grammar: nested [..] of ints and plain names (bridge._value writes nothing else)
        assert re.fullmatch(r"[\[\],\w]*", text), text
        return ast.literal_eval(re.sub(r"[A-Za-z_]\w*", lambda found: repr(found.group()), text))
    if literal := re.search(r"Literal\[([^\]]*)\]", annotation):
        assert text in ast.literal_eval(f"[{literal.group(1)}]"), (annotation, text)
        return text
    if re.fullmatch(r"-?\d+", text) and "int" in annotation:
        return int(text)
    if re.fullmatch(r"-?[\d.]+(e-?\d+)?", text) and "float" in annotation:
        return float(text)
    assert "str" in annotation, (annotation, text)
    return text


def parse_bridge(text: str) -> tuple[str, dict[str, object]]:
    fields, recipes, mixed = bridge_fields()
    lines = [line.removesuffix(" \\") for line in text.splitlines() if not line.startswith("#")]
    head = shlex.split(lines[0])
    assert head[:2] == ["python", "scripts/training/run_recipe.py"] and head[4:] == ["--mode", "pretrain"]
    recipe = head[head.index("--recipe") + 1]
    assert recipe in recipes, recipe
    out: dict[str, object] = {}
    for line in lines[1:]:
        [line] = shlex.split(line)  # one override per line, one shell word
        key, _, value = line.partition("=")
        prefix, _, name = key.rpartition(".")
        if not prefix:
            assert name in fields["ConfigContainer"], key
            assert name != "mixed_precision" or value in mixed, value
            out[key] = value
            continue
        assert name in fields[prefix], key
        if name in serializable_callables():  # omegaconf_utils.py: a name activation_map.py resolves
            assert value in activation_names(), value
            out[key] = value
            continue
        out[key] = _bridge_value(fields[prefix][name], value)
    return recipe, out


def _checks(title: str) -> str:
    """The lines of a megatron-bridge-checks.txt section whose title holds `title`."""
    text = (FRAMEWORKS / "megatron-bridge-checks.txt").read_text()
    [section] = [s for s in text.split("\n## ")[1:] if title in s.splitlines()[0]]
    return "\n".join(section.splitlines()[1:])


@cache
def activation_names() -> set[str]:
    """ACTIVATION_FUNC_MAP's names (Megatron-Bridge v0.6.0 activation_map.py, vendored)."""
    return set(re.findall(r'^\s+"(\w+)":', _checks("activation names"), re.M))


@cache
def serializable_callables() -> set[str]:
    """_SERIALIZABLE_CALLABLE_FIELDS (omegaconf_utils.py, vendored)."""
    return set(re.findall(r'"(\w+)"', _checks("activation_func is written")))


def bridge_expected(m, lay) -> dict:
    """The overrides a spec and a layout must give, by field, from the spec (Megatron's defaults as megatron_model)."""
    moe, yarn = m.moe, m.yarn is not None or m.rope_mscale != 1.0
    acc = m.training.global_batch
    out = {"model.tensor_model_parallel_size": lay["tp"], "model.pipeline_model_parallel_size": lay["pp"],
           "model.context_parallel_size": lay["cp"], "model.sequence_parallel": lay["sequence_parallel"],
           "model.virtual_pipeline_model_parallel_size": lay["vpp"] if lay["vpp"] > 1 else None,
           "train.global_batch_size": acc, "train.micro_batch_size": lay["micro_batch"], "dataset.seq_length": m.seq_len,
           "model.seq_length": m.seq_len, "model.num_layers": m.layers, "model.hidden_size": m.hidden,
           "model.ffn_hidden_size": m.ffn, "model.num_attention_heads": m.heads, "model.vocab_size": m.vocab,
           "model.normalization": "RMSNorm" if m.normalization == "rmsnorm" else "LayerNorm",
           "model.gated_linear_unit": m.ffn_act == "swiglu", "model.qk_layernorm": bool(m.qk_norm) or m.mla is not None,
           "model.share_embeddings_and_output_weights": bool(m.tied_embeddings),
           "model.add_bias_linear": m.linear_bias if m.linear_bias is not None else m.ffn_act != "swiglu",
           "ddp.use_distributed_optimizer": lay["zero"] >= 1,  # Megatron FSDP (ZeRO-2/3) always uses it
           "model.recompute_granularity": None if lay["recompute"] == "none" else lay["recompute"]}
    if m.mla is None:
        out["model.num_query_groups"] = m.num_kv_heads
    if not yarn:
        out["model.position_embedding_type"] = {"rope": "rope", "learned": "learned_absolute"}[m.position_embedding]
    if moe is not None:
        out |= {"model.expert_model_parallel_size": lay["ep"], "model.expert_tensor_parallel_size": lay["etp"],
                "model.num_moe_experts": moe.experts, "model.moe_router_topk": moe.top_k,
                "model.moe_ffn_hidden_size": moe.expert_ffn_hidden, "model.moe_router_score_function": moe.router_score,
                "model.moe_router_topk_scaling_factor": moe.top_k_scaling}
    return out


@pytest.mark.parametrize("name", MODELS)
def test_megatron_bridge_overrides_are_config_container_fields(name):
    m, c = load_model(name), load_cluster("dgx-h100-1024")
    for given in (dict(gpus=64, tp=2, pp=2, micro_batch=1, zero=1, recompute="full", sequence_parallel=True),
                  dict(gpus=16, tp=1, pp=1, cp=2, micro_batch=1, zero=3)):
        scored = estimate_layout(m, c, **given)
        recipe, got = parse_bridge(export_settings("megatron-bridge", scored, m, c).text)
        want = bridge_expected(m, scored.layout)
        assert {k: got.get(k) for k in want} == want
        assert recipe.startswith(name.replace("-128k", "").replace(".", "").replace("-", "_")) or recipe == "vanilla_gpt_pretrain_config"


def test_megatron_bridge_by_hand():
    # llama3.1-70b: Bridge's llama31_70b recipe; 256 GPUs at tp 8 pp 4 vpp 5, mb 1; RMSNorm, rope base 500000, x8 scaling
    m, c = load_model("llama3.1-70b"), load_cluster("dgx-h100-1024")
    scored = estimate_layout(m, c, gpus=256, tp=8, pp=4, vpp=5, micro_batch=1, zero=1, sequence_parallel=True)
    text = export_settings("megatron-bridge", scored, m, c).text
    recipe, got = parse_bridge(text)
    assert recipe == "llama31_70b_pretrain_config"
    assert got["model.tensor_model_parallel_size"] == 8 and got["model.virtual_pipeline_model_parallel_size"] == 5
    assert got["model.rotary_base"] == 500000 and got["model.rope_scaling"] is True and got["model.rope_scaling_factor"] == 8.0
    assert got["model.num_query_groups"] == 8 and got["mixed_precision"] == "bf16_mixed"
    assert text.splitlines()[-1] == "mixed_precision=bf16_mixed" and all(line.endswith(" \\") for line in
                                                                          text.splitlines()[:-1] if not line.startswith("#"))
    # an unknown field, a bad choice, a wrong type and an unknown recipe fail the reader
    for bad in ("model.tensor_parallel_size=8", "model.recompute_method=every", "model.num_layers=eighty",
                "model.sequence_parallel=1", "mixed_precision=bf16"):
        with pytest.raises((AssertionError, KeyError)):
            parse_bridge(text.replace("mixed_precision=bf16_mixed", bad))
    with pytest.raises(AssertionError):
        parse_bridge(text.replace("llama31_70b_pretrain_config", "llama31_70b_config"))
