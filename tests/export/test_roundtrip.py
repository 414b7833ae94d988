"""Round trips: every shipped model's export, read back by the framework's own parser or config classes
(vendored in tests/data/frameworks/, see each file's header), must give back the model the spec names.

megatron-lm-argparse.txt: NVIDIA/Megatron-LM core_v0.15.0 (0d7e02bd26) megatron/training/arguments.py, every
add_argument call (help dropped), rebuilt here as an argparse parser without torch or megatron."""
from __future__ import annotations

import argparse
import enum
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
MODELS = shipped_names("model")


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
               swiglu=m.ffn_act == "swiglu",
               position_embedding_type={"rope": "rope", "learned": "learned_absolute"}[m.position_embedding],
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


@pytest.mark.parametrize("name", MODELS)
def test_megatron_export_parses_and_builds_the_spec(name):
    export, m = shipped_export(name, "megatron")
    ns = parse_megatron(export.text)
    got = {k: getattr(ns, k) for k in megatron_model(m)}
    assert got == megatron_model(m)


@pytest.mark.parametrize("name", MODELS)
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
