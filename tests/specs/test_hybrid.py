"""Hybrid models (planner/specs/hybrid.py): the layer pattern, its sections, parameter counts
against the published totals, and the tensor-parallel rule on the mixer heads."""
from __future__ import annotations

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from planner.cli.main import app
from planner.specs.hybrid import DeltaNetSpec, MambaSpec
from planner.specs.layers import layer_kinds
from planner.specs.loading import load_model


def _kind(model, name):
    return next(k for k in layer_kinds(model) if k.name == name)


def test_nemotron_h_mamba_layer_params_by_hand():
    # Nemotron-H-56B: hidden 8192, 256 heads x 64 = d_inner 16384, state 256, 8 groups, conv 4.
    # in_proj 8192 x (2*16384 + 2*8*256 + 256 = 37,120) = 304,087,040; out_proj 16384 x 8192 = 134,217,728;
    # conv1d (16384 + 4096) channels x (4 + 1 bias) = 102,400; A_log, D, dt_bias 3 x 256 = 768; gated norm 16,384;
    # pre-norm 2 x 8192 = 16,384 (the planner counts LayerNorm's scale and bias)
    m = load_model("nemotron-h-56b")
    mamba = _kind(m, "mamba")
    assert mamba.count == 54 and mamba.params == 304_087_040 + 134_217_728 + 102_400 + 768 + 16_384 + 16_384
    assert _kind(m, "attention").count == 10 and _kind(m, "mlp").count == 54


def test_qwen3_next_deltanet_and_gated_attention_params_by_hand():
    # in_proj 2048 x (2*16*128 + 2*32*128 + 2*32 = 12,352) = 25,296,896; out_proj 4096 x 2048 = 8,388,608;
    # conv1d (2*2048 + 4096) x 4 = 32,768; A_log and dt_bias 2 x 32 = 64; norm 128; pre-norm 4096
    m = load_model("qwen3-next-80b-a3b")
    assert _kind(m, "deltanet").params == 25_296_896 + 8_388_608 + 32_768 + 64 + 128 + 4096
    # gated attention: q (and its gate) 2048 x 2*16*256 = 16,777,216; k, v 2048 x 2*256 each = 2,097,152;
    # o 4096 x 2048 = 8,388,608; q/k norms 2 x 256; pre-norm 4096
    assert _kind(m, "attention").params == 16_777_216 + 2 * 1_048_576 + 8_388_608 + 512 + 4096


# Published totals: Nemotron-H-56B, arXiv 2504.03624 (the 56B model; HF nvidia/Nemotron-H-56B-Base-8K);
# Qwen3-Next-80B-A3B, its model card (Qwen/Qwen3-Next-80B-A3B-Instruct): "80B in total and 3B activated".
@pytest.mark.parametrize("name, published", [("nemotron-h-56b", 56e9), ("qwen3-next-80b-a3b", 80e9)])
def test_total_params_near_published(name, published):
    assert load_model(name).total_params() == pytest.approx(published, rel=0.02)


def test_qwen3_next_active_params_near_3b():
    # 3B activated: the card's count leaves out the embedding and output matrices (2 x 151936 x 2048 = 0.62B):
    # with them 3.9B
    m = load_model("qwen3-next-80b-a3b")
    assert m.active_params() - m.embedding_params() - m.output_params() == pytest.approx(3e9, rel=0.10)


def test_scan_flops_by_hand():
    # Mamba-2 SSD: 2 (G Q N + H Q P + 2 H N P) = 2 (8*128*256 + 256*128*64 + 2*256*256*64)
    #            = 2 (262,144 + 2,097,152 + 8,388,608) = 21,495,808
    mamba = MambaSpec(heads=256, head_dim=64, state_dim=256, groups=8, chunk_size=128)
    assert mamba.scan_flops_per_token() == 21_495_808
    # gated delta rule: 2 Hv (C (3 dk + 2 dv) + 3 dk dv) = 64 (64 * 640 + 3 * 16384) = 64 * 90,112 = 5,767,168
    dn = DeltaNetSpec(key_heads=16, value_heads=32, key_head_dim=128, value_head_dim=128, chunk_size=64)
    assert dn.scan_flops_per_token() == 5_767_168


BASE = dict(name="h", layers=4, hidden=256, heads=4, vocab=1000, seq_len=128, training={"global_batch": 8})
MAMBA = {"heads": 8, "head_dim": 64, "state_dim": 16, "groups": 2}


@pytest.mark.parametrize("extra, message", [
    (dict(layer_pattern="M-X-", mamba=MAMBA), "'X'"),
    (dict(layer_pattern="M-M", mamba=MAMBA), "3 layers, layers is 4"),
    (dict(layer_pattern="M-M-"), "no mamba: section"),
    (dict(layer_pattern="*-*-", mamba=MAMBA), "needs M layers"),
    (dict(mamba=MAMBA), "needs a layer_pattern"),
    (dict(layer_pattern="M-|M-", mamba=MAMBA), "'|'"),
    (dict(layer_pattern="M-M-", mamba={**MAMBA, "groups": 3}), "must divide mamba.heads"),
])
def test_bad_patterns_are_refused(extra, message):
    from planner.specs import ModelSpec
    with pytest.raises(ValidationError, match=message.replace("|", r"\|").replace("*", r"\*")):
        ModelSpec.model_validate({**BASE, **extra})


def test_bad_pattern_file_exits_2(tmp_path):
    import yaml
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump({**BASE, "layer_pattern": "M-M", "mamba": MAMBA}))
    result = CliRunner().invoke(app, ["estimate", str(path), "dgx-h100-1024", "--tp", "1", "--pp", "1", "--micro-batch", "1",
                                      "--gpus", "8"])
    assert result.exit_code == 2 and "layer_pattern has 3 layers" in result.output, result.output


def test_tp_must_divide_mamba_groups():
    # Megatron-Core MambaMixer: ngroups % tp == 0; Nemotron-H-56B has 8 groups and 64 attention heads, 8 kv heads
    m = load_model("nemotron-h-56b")
    assert ("mamba.groups", 8) in m.tp_split_heads
    model = m.model_copy(update=dict(mamba=m.mamba.model_copy(update=dict(groups=4, heads=256))))
    result = CliRunner().invoke(app, ["search", "nemotron-h-56b", "dgx-h100-1024", "--gpus", "64", "--tp", "8"])
    assert result.exit_code == 0, result.output
    from planner.search import check_fixed_axes
    from planner.errors import SpecError
    with pytest.raises(SpecError, match=r"mamba.groups \(4\)"):
        check_fixed_axes(model, 64, {"tp": 8})


# Hugging Face configs. Qwen3-Next-80B-A3B-Instruct's config.json as Megatron-Bridge's test fixture quotes it
# (NVIDIA-NeMo/Megatron-Bridge tests/unit_tests/models/qwen/, qwen3_next_80b_a3b_config_dict), the keys read;
# Nemotron-H-56B's from Megatron-Bridge's recipe (@067f987d recipes/nemotronh/h100/nemotronh.py, its 56B
# architecture) under NemotronHConfig's key names (no verbatim copy of the hub file was at hand).
QWEN3_NEXT_HF = {
    "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "decoder_sparse_step": 1,
    "full_attention_interval": 4, "head_dim": 256, "hidden_act": "silu", "hidden_size": 2048,
    "intermediate_size": 5120, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 16,
    "linear_num_value_heads": 32, "linear_value_head_dim": 128, "max_position_embeddings": 262144,
    "mlp_only_layers": [], "moe_intermediate_size": 512, "norm_topk_prob": True, "num_attention_heads": 16,
    "num_experts": 512, "num_experts_per_tok": 10, "num_hidden_layers": 48, "num_key_value_heads": 2,
    "partial_rotary_factor": 0.25, "rms_norm_eps": 1e-06, "rope_theta": 10000000,
    "shared_expert_intermediate_size": 512, "tie_word_embeddings": False, "vocab_size": 151936,
}
NEMOTRON_H_HF = {
    "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "num_hidden_layers": 118,
    "hidden_size": 8192, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128,
    "intermediate_size": 32768, "mlp_hidden_act": "relu2", "vocab_size": 131072, "tie_word_embeddings": False,
    "max_position_embeddings": 8192, "layer_norm_epsilon": 1e-5, "mamba_num_heads": 256, "mamba_head_dim": 64,
    "ssm_state_size": 256, "n_groups": 8, "conv_kernel": 4, "chunk_size": 128,
    "hybrid_override_pattern": load_model("nemotron-h-56b").layer_pattern,
}


@pytest.mark.parametrize("config, shipped", [(QWEN3_NEXT_HF, "qwen3-next-80b-a3b"), (NEMOTRON_H_HF, "nemotron-h-56b")])
def test_hf_import_gives_the_shipped_model(config, shipped):
    from planner.specs import ModelSpec
    from planner.specs.hf import spec_from_hf
    imported = ModelSpec.model_validate(spec_from_hf(config, name="x", seq_len=4096, global_batch=8).spec)
    ours = load_model(shipped)
    assert imported.layer_pattern == ours.layer_pattern and imported.layers == ours.layers
    assert (imported.mamba, imported.deltanet, imported.moe) == (ours.mamba, ours.deltanet, ours.moe)
    assert imported.total_params() == ours.total_params()
    assert imported.position_embedding == ours.position_embedding  # Nemotron-H: none; Qwen3-Next: rope


def test_hf_import_refuses_a_moe_nemotron_h():
    from planner.errors import SpecError
    from planner.specs.hf import spec_from_hf
    with pytest.raises(SpecError, match="MoE layer"):
        spec_from_hf({**NEMOTRON_H_HF, "hybrid_override_pattern": "ME" * 59}, name="x")
