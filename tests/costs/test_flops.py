"""FLOP counts (planner/costs/flops.py) against Korthikanti et al. 2022 Eq. 7 and hand counts."""
from __future__ import annotations

from pathlib import Path

import yaml
from pytest import approx

from planner.costs.flops import (
    layer_attention_flops_per_seq,
    layer_gemm_flops_per_token,
    logits_flops_per_token,
    model_flops_per_seq,
    model_flops_per_step,
    published_model_flops_per_seq,
    published_model_flops_per_step,
)

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
GPT3_175B = dict(name="gpt3-175b", layers=96, hidden=12288, heads=96, vocab=51200, seq_len=2048,
                 training=dict(global_batch=1536))


def test_gpt3_175b_model_flops_match_korthikanti_eq7(make_model):
    model = make_model(**GPT3_175B)
    s, l, h, V = 2048, 96, 12288, 51200
    # Eq. 7 with B = 1: 72 s l h^2 (1 + s/(6h) + V/(12 h l)), the published convention (the whole s^2 square)
    #   72 * 2048 * 96 * 12288^2 = 14,155,776 * 150,994,944 = 2.137451e15
    #   bracket = 1 + 2048/73728 + 51200/14155776 = 1 + 0.0277778 + 0.0036169 = 1.0313947
    eq7 = 72 * s * l * h**2 * (1 + s / (6 * h) + V / (12 * h * l))
    assert published_model_flops_per_seq(model) == approx(eq7, rel=1e-12)  # the per-GEMM terms reduce to Eq. 7
    assert published_model_flops_per_seq(model) == approx(2.137451e15 * 1.0313947, rel=1e-6)  # 2.204556e15
    assert published_model_flops_per_step(model) == approx(1536 * eq7, rel=1e-12)
    # The planner's model FLOPs count the causal half of the square (issue 38: the whole square let a
    # long sequence's MFU pass 100 %): s/(6h) becomes s/(12h), bracket 1 + 0.0138889 + 0.0036169 = 1.0175058
    causal = 72 * s * l * h**2 * (1 + s / (12 * h) + V / (12 * h * l))
    assert model_flops_per_seq(model) == approx(causal, rel=1e-12)
    assert model_flops_per_seq(model) == approx(2.137451e15 * 1.0175058, rel=1e-6)  # 2.174868e15
    # per step: 1536 sequences x 2.174868e15 = 3.340598e18
    assert model_flops_per_step(model) == approx(1536 * causal, rel=1e-12)
    assert model_flops_per_step(model) == approx(3.340598e18, rel=1e-6)


def test_gpt3_175b_terms(make_model):
    model = make_model(**GPT3_175B)
    h = 12288
    # QKV 3h^2 + out-proj h^2 + MLP 2 * 4h^2 = 12 h^2 weights; 2 FLOPs per weight per token.
    assert layer_gemm_flops_per_token(model) == approx(24 * h**2, rel=1e-12)  # 3.6239e9
    assert layer_attention_flops_per_seq(model) == approx(4 * 2048**2 * h, rel=1e-12)  # 2.0616e11
    assert logits_flops_per_token(model) == approx(2 * h * 51200, rel=1e-12)  # 1.2583e9


def test_gqa_swiglu_tiny_model_by_hand(make_model):
    # h 64, 8 heads of 8, 2 KV heads -> K and V are 2 * 8 = 16 wide; SwiGLU with ffn 128.
    model = make_model(layers=2, hidden=64, heads=8, kv_heads=2, ffn_hidden=128, ffn_act="swiglu",
                       vocab=100, seq_len=16, position_embedding="rope")
    # QKV: 64 x (64 + 2*16) = 6144; out-proj 64 x 64 = 4096; gate, up, down: 3 x 64 x 128 = 24576
    # weights 34816 -> 69632 FLOPs per token
    assert layer_gemm_flops_per_token(model) == 69632
    # QK^T and attention-over-V: 4 s^2 h = 4 * 256 * 64
    assert layer_attention_flops_per_seq(model) == 65536
    # logits: 2 h V = 2 * 64 * 100
    assert logits_flops_per_token(model) == 12800
    # forward, the square (published): 2 layers x (16 tokens x 69632 + 65536) + 16 x 12800
    #         = 2 x 1,179,648 + 204,800 = 2,564,096; x 3 = 7,692,288
    assert published_model_flops_per_seq(model) == 7_692_288
    # the causal half of the attention core: 2 x (1,114,112 + 32,768) + 204,800 = 2,498,560; x 3 = 7,495,680
    assert model_flops_per_seq(model) == 7_495_680
    # global batch 8 (the builder's default)
    assert model_flops_per_step(model) == 8 * 7_495_680


def test_gqa_and_swiglu_change_only_their_own_terms(make_model):
    mha_gelu = make_model(hidden=64, heads=8, vocab=100, seq_len=16)  # ffn 4h = 256
    # MHA + GeLU with ffn 4h reduces to 24 h^2 = 24 * 4096
    assert layer_gemm_flops_per_token(mha_gelu) == 98304
    gqa = make_model(hidden=64, heads=8, kv_heads=2, vocab=100, seq_len=16)
    # K and V shrink from 64 to 16 wide: 2 FLOPs x 64 x 2 x (64 - 16) = 12288 fewer per token
    assert layer_gemm_flops_per_token(mha_gelu) - layer_gemm_flops_per_token(gqa) == 12288
    swiglu = make_model(hidden=64, heads=8, ffn_hidden=256, ffn_act="swiglu", vocab=100, seq_len=16)
    # a third MLP matrix of 64 x 256: + 2 * 16384 = 32768 per token
    assert layer_gemm_flops_per_token(swiglu) - layer_gemm_flops_per_token(mha_gelu) == 32768
    # attention FLOPs do not depend on the number of KV heads
    assert layer_attention_flops_per_seq(gqa) == layer_attention_flops_per_seq(mha_gelu)


def test_shipped_llama3_8b_layer_flops(make_model):
    # Llama 3 8B (Dubey et al. 2024 Table 3): h 4096, 32 heads, 8 KV heads (kv width 1024), ffn 14336.
    data = yaml.safe_load((CONFIGS / "models" / "llama3-8b.yaml").read_text())
    model = make_model(**data)
    # weights: 4096 x (4096 + 2048) + 4096^2 + 3 x 4096 x 14336
    #        = 25,165,824 + 16,777,216 + 176,160,768 = 218,103,808 -> x2 FLOPs
    assert layer_gemm_flops_per_token(model) == 436_207_616
    # 8192-token sequences: attention 4 * 8192^2 * 4096 = 1.0995e12 per layer
    assert layer_attention_flops_per_seq(model) == 4 * 8192**2 * 4096
