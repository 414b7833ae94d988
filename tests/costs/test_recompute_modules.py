"""Selective recomputation of single modules (Megatron-Core --recompute-modules, issue 29): what each
module drops from a layer's stored activations and adds to its recomputation, derived by hand on a
tiny MoE model; the default (core_attn) is the planner's old selective recomputation."""
from __future__ import annotations

from pathlib import Path

import pytest
from pytest import approx
from typer.testing import CliRunner

from planner.cli.main import app
from planner.costs.memory import activation_bytes_per_layer
from planner.layout.space import single_layout
from planner.specs.layers import layer_kinds

from .conftest import layer_compute_on

ROOT = Path(__file__).resolve().parents[2]

# 3 layers (the first dense), hidden 64, 4 heads, SwiGLU, FFN 256; 4 experts of width 32, top 2;
# one shared expert of width 16; 64 tokens.
TINY_MOE = dict(layers=3, hidden=64, heads=4, ffn_act="swiglu", ffn_hidden=256, vocab=100, seq_len=64,
                moe=dict(experts=4, top_k=2, expert_ffn_hidden=32, shared_experts=1, shared_expert_ffn_hidden=16,
                         dense_layers=1))
SELECTIVE = single_layout(dp=1, tp=1, pp=1, micro_batch=1, num_microbatches=1, recompute="selective")
# Per micro-batch on one GPU (tp 1, cp 1, ep 1): s b = 64 rows. Each of the 4 local experts gets
# 64 x top 2 / 4 experts = 32 rows. GEMM inputs are 2 B in BF16.
ROWS, LOCAL, G, SB, H = 32, 4, 2, 64, 64


def _model(make_model, modules):
    training = {} if modules is None else dict(recompute_modules=modules)
    return make_model(**TINY_MOE, training=training)


@pytest.mark.parametrize("modules, kind, dropped", [
    (["moe_act"], "moe", G * ROWS * LOCAL * 32),  # the experts' fc2 input: 2 x 32 x 4 x 32 = 8,192 B
    (["layernorm"], "moe", G * SB * H),  # the pre-MLP norm's output: 2 x 64 x 64 = 8,192 B
    (["shared_experts"], "moe", (4 + G) * 16 * SB),  # up+gate out (4 B) and down input (2 B) per unit: 6,144 B
    (["mlp"], "dense", (4 + G) * 256 * SB),  # the dense MLP's: 6 x 256 x 64 = 98,304 B
    (["layernorm"], "dense", 0),  # a dense layer's norms are fused into the next GEMM, which keeps its input
    (["moe_act", "layernorm"], "moe", G * ROWS * LOCAL * 32 + G * SB * H),
])
def test_each_module_drops_what_it_recomputes(make_model, modules, kind, dropped):
    default, custom = _model(make_model, None), _model(make_model, modules)
    k = {x.name: x for x in layer_kinds(default)}[kind]
    before = activation_bytes_per_layer(default, SELECTIVE, k)[0][0]
    after = activation_bytes_per_layer(custom, SELECTIVE, k)[0][0]
    assert before - after == approx(dropped, rel=1e-12)


def test_moe_act_recomputes_only_the_activation(make_model, toy_gpu):
    # SwiGLU reads its two inputs and writes one output, 2 B each: 6 B per row and unit of width;
    # 6 x 32 rows x 4 experts x width 32 = 24,576 B at 1,000 GB/s x 0.5 (toy HBM) = 49.152 ns.
    # Flash attention's core is not recomputed then (it was, by default: core_attn).
    k = layer_kinds(_model(make_model, None))[1]
    lc = layer_compute_on(_model(make_model, ["moe_act"]), toy_gpu, SELECTIVE, k)
    assert lc.recompute_s[0] == approx(6 * ROWS * LOCAL * 32 / (1000e9 * 0.5), rel=1e-12)
    default = layer_compute_on(_model(make_model, None), toy_gpu, SELECTIVE, k)
    assert default.recompute_s[0] == approx(default.attention_fwd_s[0], rel=1e-12)


def test_moe_act_drops_and_reruns_an_eager_clamp(make_model, toy_gpu):
    # GPT-OSS's clamped SwiGLU (swiglu_limit, no op fuser) runs eagerly and keeps 4 B per row and unit
    # of width more (the clamped copy beside the fc1 output). Under moe_act it runs inside Megatron's
    # CheckpointWithoutOutput, which stores only its input: the experts drop 2 + 4 = 6 B per row and
    # width: 6 x 32 rows x 4 experts x 32 = 24,576 B; and rerun its chunk, clamps and cat (16 B per row
    # and width) with the SwiGLU's 6: 22 x 4,096 = 90,112 B at 500 GB/s = 180.224 ns.
    clamped = dict(TINY_MOE, swiglu_limit=7.0)
    default = make_model(**clamped)
    custom = make_model(**clamped, training=dict(recompute_modules=["moe_act"]))
    k = {x.name: x for x in layer_kinds(default)}["moe"]
    before = activation_bytes_per_layer(default, SELECTIVE, k)[0][0]
    after = activation_bytes_per_layer(custom, SELECTIVE, k)[0][0]
    assert before - after == approx((G + 4) * ROWS * LOCAL * 32, rel=1e-12)
    lc = layer_compute_on(custom, toy_gpu, SELECTIVE, k)
    assert lc.recompute_s[0] == approx(22 * ROWS * LOCAL * 32 / (1000e9 * 0.5), rel=1e-12)


def test_the_modules_reach_megatron_and_nemo(tmp_path):
    spec = (tmp_path / "m.yaml")
    text = (ROOT / "configs" / "models" / "qwen3-235b-a22b.yaml").read_text()
    spec.write_text(text + "  recompute_modules: [moe_act, layernorm]\n")
    args = ["estimate", str(spec), "dgx-h100-1024", "--gpus", "256", "--tp", "2", "--pp", "8", "--ep", "32",
            "--micro-batch", "1", "--sequence-parallel", "--recompute", "selective", "--zero", "1", "--export"]
    megatron = CliRunner().invoke(app, args + ["megatron"]).stdout
    assert "--recompute-modules moe_act layernorm " in megatron  # nargs='*': one word per module
    nemo = CliRunner().invoke(app, args + ["nemo"]).stdout
    # one shell word holding a Python literal NeMo-Run's ast.literal_eval reads (issue 38)
    assert """'model.config.recompute_modules=["moe_act", "layernorm"]'""" in nemo
