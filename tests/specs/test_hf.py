"""planner.specs.hf and `plan import`: Hugging Face config.json files as model specs.

Each family's real config (tests/data/hf/, sources in SOURCES.md) must give its published
parameter count within 1 %, or within the rounding of the published figure where that is coarser
(a published "37B" says 36.5-37.5B). The counts are the publishers', never our own output.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from planner.api import hf as api_hf
from planner.cli import hf_import as cli_import
from planner.errors import SpecError
from planner.specs.hf import (_MLA_KEYS, _MOE_KEYS, _WINDOW_KEYS, CONFIG_CLASSES, DEFAULT_BATCH_TOKENS, DEFAULT_SEQ_LEN_CAP, FAMILIES,
                        is_hf_config, spec_from_hf, spec_yaml)
from planner.specs.hf_hybrid import READ_KEYS
from planner.specs.loading import load_model

HF = Path(__file__).resolve().parents[1] / "data" / "hf"
MINIMAL = HF / "minimal"  # configs without the keys equal to their config class's defaults (SOURCES.md)
B = 1e9

# (fixture, published total and its rounding (half a unit of its last digit), published active and its
#  rounding (None: not published), whether that active count includes the input-embedding table, source). Active counts differ in
#  convention: Mistral, Qwen and Meta count the embedding table; OpenAI and DeepSeek leave it out
#  (gpt-oss-20b: 3.61B active = every weight a token multiplies, less the 0.58B embedding table).
PUBLISHED = [
    ("llama", 8.03 * B, 0.005 * B, None, True,
     "huggingface.co/meta-llama/Llama-3.1-8B: 8.03B params (safetensors)"),
    ("qwen2", 7.61 * B, 0.005 * B, None, True, "huggingface.co/Qwen/Qwen2.5-7B model card: 7.61B"),
    ("qwen3", 8.2 * B, 0.05 * B, None, True, "huggingface.co/Qwen/Qwen3-8B model card: 8.2B"),
    ("qwen3_moe", 30.5 * B, 0.05 * B, None, True,  # active: test_qwen3_moe_active_is_truncated_in_the_card
     "huggingface.co/Qwen/Qwen3-30B-A3B model card: 30.5B total, 3.3B activated"),
    ("mixtral", 46.7 * B, 0.05 * B, (12.9 * B, 0.05 * B), True,
     "Jiang et al. 2024, Mixtral of Experts, Sec. 2.1: 46.7B total (47B), 12.9B active (13B)"),
    ("deepseek_v3", 671 * B, 0.5 * B, (37 * B, 0.5 * B), False,
     "huggingface.co/deepseek-ai/DeepSeek-R1 model card (DeepSeek-V3 architecture): 671B total, 37B "
     "activated; DeepSeek-V3 report, abstract, the same (MTP module excluded)"),
    ("gemma2", 590_118_912 + 2_024_517_888, 0, None, True,
     "Gemma 2 report (Gemma Team 2024), Table 1, 2B: 590,118,912 embedding + 2,024,517,888 non-embedding"),
    ("gemma3", (1_012 + 10_759) * 1e6, 0.5e6, None, True,
     "Gemma 3 report (Gemma Team 2025), Table 1, 12B: 1,012M embedding + 10,759M non-embedding (text)"),
    ("gpt_neox", 20_554_567_680, 0, None, True,
     "huggingface.co/EleutherAI/gpt-neox-20b model card: 20,554,567,680 parameters"),
    ("gpt2", 124_439_808, 0, None, True,
     "Radford et al. 2019 (124M); exact count as in nanoGPT's sizing notebook: 124,439,808"),
    ("qwen3_next", 80 * B, 0.5 * B, None, True,
     "huggingface.co/Qwen/Qwen3-Next-80B-A3B-Instruct model card: 80B in total and 3B activated"),
    ("nemotron_h", 56 * B, 0.5 * B, None, True, "Nemotron-H (NVIDIA 2025, arXiv 2504.03624): the 56B model"),
    ("gpt_oss", 20.91 * B, 0.005 * B, (3.61 * B, 0.005 * B), False,
     "gpt-oss model card (OpenAI 2025, arXiv 2508.10925), Table 1, gpt-oss-20b: 20.91B total, 3.61B active"),
]
# Llama 4 Scout: test_llama4_scout_text_model_plus_its_vision_tower_is_the_published_count


@pytest.mark.parametrize("fixture,total,rounding,active,with_embedding,source", PUBLISHED)
def test_published_parameter_counts(fixture, total, rounding, active, with_embedding, source):
    model = load_model(HF / f"{fixture}.json")
    assert abs(model.total_params() - total) <= max(0.01 * total, rounding), source
    if active is not None:
        (count, rounding), table = active, model.vocab * model.hidden
        ours = model.active_params() - (0 if with_embedding else table)
        assert abs(ours - count) <= max(0.01 * count, rounding), source


def test_qwen3_moe_active_is_truncated_in_the_card():
    """Known gap, not a mapping error: the card's "3.3B activated" is 1.6% below the count its own config
    gives, 3.35B = 48 layers x (18.9M attention + 8 x 4.72M experts + 0.26M router) + 2 x 311M embedding
    tables. 3.35B rounds to 3.4B, so the card truncates; without the input table it would be 3.04B."""
    model = load_model(HF / "qwen3_moe.json")
    attention = 2048 * (32 * 128 + 2 * 4 * 128) + 32 * 128 * 2048
    experts = 8 * 3 * 2048 * 768
    by_hand = 48 * (attention + experts + 2048 * 128) + 2 * 151936 * 2048
    assert abs(model.active_params() - by_hand) < 0.001 * by_hand  # norms and biases: the rest
    assert 3.3 * B < model.active_params() < 3.4 * B


def test_every_family_has_a_fixture_and_is_recognised():
    names = {f.name for f in FAMILIES}
    assert names == {p.stem for p in HF.glob("*.json")}
    for path in HF.glob("*.json"):
        config = json.loads(path.read_text())
        assert is_hf_config(config)
        assert spec_from_hf(config, name="x").family == path.stem


def test_gpt2_maps_exactly():
    """n_inner null is 4 x n_embd; learned positions sized by n_positions; embeddings tied."""
    spec = spec_from_hf(json.loads((HF / "gpt2.json").read_text()), name="gpt2").spec
    assert spec["ffn_hidden"] == 4 * 768 and spec["seq_len"] == 1024 and spec["tied_embeddings"] is True
    assert spec["position_embedding"] == "learned" and spec["ffn_act"] == "gelu"


def test_moe_fields():
    ds = spec_from_hf(json.loads((HF / "deepseek_v3.json").read_text()), name="d").spec
    # DeepSeek-V3's config.json: scoring_func sigmoid, topk_method noaux_tc (expert bias), n_group 8,
    # topk_group 4, routed_scaling_factor 2.5
    assert ds["moe"] == {"experts": 256, "top_k": 8, "expert_ffn_hidden": 2048, "shared_experts": 1,
                         "shared_expert_ffn_hidden": 2048, "dense_layers": 3, "router_score": "sigmoid",
                         "expert_bias": True, "router_groups": 8, "router_group_top_k": 4, "top_k_scaling": 2.5}
    assert ds["mla"]["kv_lora_rank"] == 512 and ds["ffn_hidden"] == 18432
    oss = spec_from_hf(json.loads((HF / "gpt_oss.json").read_text()), name="o").spec
    assert oss["moe"] == {"experts": 32, "top_k": 4, "expert_ffn_hidden": 2880} and oss["head_dim"] == 64


def test_qwen3_moe_leading_dense_layers_and_irregular_lists():
    config = json.loads((HF / "qwen3_moe.json").read_text())
    lead = spec_from_hf({**config, "mlp_only_layers": [0, 1]}, name="q")
    assert lead.spec["moe"]["dense_layers"] == 2
    odd = spec_from_hf({**config, "mlp_only_layers": [5, 17, 30]}, name="q")
    assert odd.spec["moe"].get("dense_layers", 0) == 0 and any("mlp_only_layers" in n for n in odd.notes)


def test_llama4_interleaved_layers():
    config = json.loads((HF / "llama4.json").read_text())
    text = {**config["text_config"], "interleave_moe_layer_step": 2, "moe_layers": list(range(1, 48, 2))}
    spec = spec_from_hf({**config, "text_config": text}, name="m").spec
    assert spec["moe"]["layer_every"] == 2 and spec["ffn_hidden"] == 16384


def test_gemma3_nested_and_flat_agree():
    nested = json.loads((HF / "gemma3.json").read_text())
    flat = {**nested["text_config"]}
    a, b = spec_from_hf(nested, name="g").spec, spec_from_hf(flat, name="g").spec
    assert a == b and a["tied_embeddings"] is True and a["head_dim"] == 256


def test_training_defaults_arguments_and_overlay():
    config = json.loads((HF / "llama.json").read_text())
    imported = spec_from_hf(config, name="l")
    assert imported.spec["seq_len"] == DEFAULT_SEQ_LEN_CAP
    assert imported.spec["training"] == {"global_batch": DEFAULT_BATCH_TOKENS // DEFAULT_SEQ_LEN_CAP, "precision": "bf16"}
    assert len(imported.defaults) == 3
    given = spec_from_hf(config, name="l", seq_len=8192, precision="fp8",
                         overlay={"seq_len": 2048, "training": {"global_batch": 64, "stack": "megatron-core"}})
    assert given.spec["seq_len"] == 8192  # an argument wins over the overlay
    assert given.spec["training"] == {"global_batch": 64, "stack": "megatron-core", "precision": "fp8"}
    assert given.defaults == []


def test_unknown_architecture_names_what_it_found(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{\n  "architectures": ["MambaForCausalLM"],\n  "model_type": "mamba",\n  "hidden_size": 768\n}\n')
    with pytest.raises(SpecError) as info:
        load_model(path)
    err = info.value
    assert "'mamba'" in err.message and "MambaForCausalLM" in err.message and "hidden_size" in err.message
    assert err.file == str(path) and err.line == 3 and err.path == "model_type"


def test_missing_and_mistyped_keys_point_at_their_line(tmp_path):
    config = json.loads((HF / "llama.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config, "hidden_size": "4096"}, indent=2))
    with pytest.raises(SpecError) as info:
        load_model(path)
    line = path.read_text().splitlines().index('  "hidden_size": "4096",') + 1
    assert info.value.path == "hidden_size" and info.value.line == line and "wrong type" in info.value.message
    path.write_text(json.dumps({**config, "num_hidden_layers": None}, indent=2))  # null: no default applies
    with pytest.raises(SpecError, match="field 'num_hidden_layers' is null") as info:  # there, so not missing
        load_model(path)
    assert info.value.line == path.read_text().splitlines().index('  "num_hidden_layers": null,') + 1
    del config["model_type"], config["num_hidden_layers"]  # no model_type: no config class, so no defaults
    path.write_text(json.dumps(config, indent=2))
    with pytest.raises(SpecError, match="missing key 'num_hidden_layers'"):
        load_model(path)


def test_spec_rule_failures_point_at_the_hf_key(tmp_path):
    config = json.loads((HF / "llama.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config, "num_key_value_heads": 5}, indent=2))
    with pytest.raises(SpecError) as info:
        load_model(path)
    assert info.value.line == path.read_text().splitlines().index('  "num_key_value_heads": 5,') + 1


def test_malformed_json_gets_its_line(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{\n  "model_type": "llama",\n  "hidden_size": 4096\n  "vocab_size": 1\n}\n')
    with pytest.raises(SpecError) as info:
        load_model(path)
    assert info.value.line == 4 and "invalid JSON" in info.value.message and info.value.file == str(path)


def test_json_that_is_no_hf_config_nor_spec(tmp_path):
    path = tmp_path / "other.json"
    path.write_text('{"foo": 1}')
    with pytest.raises(SpecError, match="neither a Hugging Face config.json"):
        load_model(path)
    path.write_text('[1, 2]')
    with pytest.raises(SpecError, match="JSON object"):
        load_model(path)


def test_spec_yaml_loads_back_identically(tmp_path):
    for path in sorted(HF.glob("*.json")):
        imported = spec_from_hf(json.loads(path.read_text()), name=path.stem)
        out = tmp_path / f"{path.stem}.yaml"
        out.write_text(spec_yaml(imported, str(path)))
        assert load_model(out) == load_model(path), path.stem


def test_awkward_names_survive_yaml(tmp_path):
    imported = spec_from_hf(json.loads((HF / "gpt2.json").read_text()), name="1e5")
    out = tmp_path / "m.yaml"
    out.write_text(spec_yaml(imported))
    assert load_model(out).name == "1e5"


def _app() -> typer.Typer:
    app = typer.Typer()
    cli_import.register(app)

    @app.command()
    def other() -> None:  # a second command keeps `import` a subcommand
        pass

    return app


def test_cli_import_writes_a_spec_that_loads_back(tmp_path):
    out = tmp_path / "model.yaml"
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("training:\n  global_batch: 512\n")
    result = CliRunner().invoke(_app(), ["import", str(HF / "qwen3_moe.json"), "-o", str(out), "--name", "q3",
                                         "--seq-len", "2048", "--precision", "fp8", "--overlay", str(overlay)])
    assert result.exit_code == 0, result.output
    assert f"wrote {out}: qwen3_moe family, 30.53B parameters (3.35B active)" in result.output
    model = load_model(out)
    assert (model.name, model.seq_len, model.training.global_batch, model.training.precision) == ("q3", 2048, 512, "fp8")
    assert out.read_text().startswith("# Imported from")


def test_cli_import_to_stdout_and_errors(tmp_path):
    result = CliRunner().invoke(_app(), ["import", str(HF / "gpt2.json")])
    assert result.exit_code == 0 and "\nname: gpt2\n" in result.output
    bad = tmp_path / "config.json"
    bad.write_text('{"model_type": "rwkv"}')
    result = CliRunner().invoke(_app(), ["import", str(bad)])
    assert result.exit_code == 2 and "unknown Hugging Face architecture" in result.output


def test_no_network(monkeypatch):
    """Importing never opens a socket."""
    import socket

    def refuse(*args, **kwargs):
        raise AssertionError("network used")

    monkeypatch.setattr(socket, "socket", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    for path in HF.glob("*.json"):
        load_model(path)


def test_plan_import_and_search_through_the_main_app(tmp_path):
    from planner.cli.main import app

    out = tmp_path / "qwen.yaml"
    r = CliRunner().invoke(app, ["import", "qwen3-30b-a3b.json", "-o", str(out)])  # shipped in configs/hf/
    assert r.exit_code == 0, r.output
    # Qwen3-30B-A3B model card: 48 layers, 128 experts, 8 activated
    spec = load_model(out)
    assert (spec.layers, spec.moe.experts, spec.moe.top_k) == (48, 128, 8)
    r = CliRunner().invoke(app, ["search", str(HF / "llama.json"), "dgx-h100-1024", "--top", "1", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["model"] and json.loads(r.stdout)["best"]["feasible"]


def test_llama4_scout_text_model_plus_its_vision_tower_is_the_published_count():
    # Model card (huggingface.co/meta-llama/Llama-4-Scout-17B-16E): 109B total, 17B active. The 109B
    # counts the vision encoder, which the spec does not model; count it by hand from vision_config
    # (ViT layers as in transformers' modeling_llama4: q, k, v, o and fc1, fc2 with biases, two norms).
    model = load_model(HF / "llama4.json")
    v = json.loads((HF / "llama4.json").read_text())["vision_config"]
    h, i, n = v["hidden_size"], v["intermediate_size"], v["num_hidden_layers"]  # 1408, 5632, 34
    layer = 4 * (h * h + h) + (2 * h * i + i + h) + 2 * 2 * h  # 23,807,872
    patches = (v["image_size"] // v["patch_size"]) ** 2 + 1  # 24^2 + 1 class token = 577
    embed = v["num_channels"] * v["patch_size"] ** 2 * h + h + patches * h + 2 * 2 * h  # patches, class, positions, pre/post norm
    shuffled = int(h / v["pixel_shuffle_ratio"] ** 2)  # pixel shuffle 0.5: 4 x 1408 = 5632 channels
    adapter = shuffled * v["projector_input_dim"] + v["projector_input_dim"] * v["projector_output_dim"]
    projector = v["vision_output_dim"] * model.hidden  # 4096 -> 5120
    vision = n * layer + embed + adapter + projector  # ~0.87B
    assert 0.8 * B < vision < 0.95 * B
    assert abs(model.total_params() + vision - 109 * B) <= 0.01 * 109 * B
    # the text model's active count; '17B' is rounded to whole billions (+-0.5B), as in PUBLISHED
    assert abs(model.active_params() - 17 * B) <= max(0.01 * 17 * B, 0.5 * B)


def test_config_class_defaults_cover_every_family_and_only_keys_the_mapping_reads():
    read = {k for f in FAMILIES for keys in f.keys.values() for k in keys}
    read |= {k for keys in [*_MLA_KEYS.values(), *(v for m in _MOE_KEYS.values() for v in m.values())]
             if not isinstance(keys, int) for k in keys} | set(_WINDOW_KEYS)
    read |= {"rope_scaling"} | {f.bias_key for f in FAMILIES if f.bias_key}  # rope_mscale, linear_bias
    read |= {"rope_theta", "rms_norm_eps"}  # rope_theta, normalization (planner/specs/hf.py _norm_and_rope_base)
    read |= READ_KEYS  # the hybrid readers' (planner/specs/hf_hybrid.py)
    for fam in FAMILIES:
        for model_type in fam.model_types:
            cls = CONFIG_CLASSES[model_type]
            assert set(cls.defaults) <= read, cls.name
            assert cls.source.startswith("src/transformers/"), cls.name
            text = CONFIG_CLASSES[cls.text] if cls.text else cls
            assert text.text is None and cls.text in (None, *fam.model_types), cls.name
            # the family's tie_word_embeddings fallback is the config classes' own default
            assert cls.defaults["tie_word_embeddings"] is text.defaults["tie_word_embeddings"] is fam.tied_default


def test_gemma3_minimal_config_gives_the_full_spec_and_says_what_it_defaulted(tmp_path):
    """google/gemma-3 text_configs leave out vocab_size, head_dim 256, max positions (class defaults)."""
    full, minimal = load_model(HF / "gemma3.json"), load_model(MINIMAL / "gemma3.json")
    assert minimal == full and minimal.head_dim == 256 and minimal.vocab == 262208
    published = (1_012 + 10_759) * 1e6  # Gemma 3 report, Table 1, 12B (text: embedding + non-embedding)
    assert abs(minimal.total_params() - published) <= 0.01 * published
    imported = spec_from_hf(json.loads((MINIMAL / "gemma3.json").read_text()), name="g")
    defaulted = {d.split(" = ")[0] for d in imported.defaulted}
    assert {"text_config.vocab_size", "text_config.head_dim", "text_config.max_position_embeddings"} <= defaulted
    assert "text_config.head_dim" not in imported.fields_read
    text = spec_yaml(imported)
    assert "# - text_config.head_dim = 256, defaulted from Gemma3TextConfig" in text
    full_imported = spec_from_hf(json.loads((HF / "gemma3.json").read_text()), name="g")
    assert [d.split(" = ")[0] for d in full_imported.defaulted] == ["text_config.tie_word_embeddings"]


def test_gemma3_4b_style_config_without_heads():
    """A google/gemma-3-4b-style text_config: no heads, kv heads, head_dim or vocab (all class defaults)."""
    config = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
              "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
                              "num_hidden_layers": 34, "sliding_window": 1024}}
    imported = spec_from_hf(config, name="g")
    spec = imported.spec
    assert (spec["heads"], spec["kv_heads"], spec["head_dim"], spec["vocab"]) == (8, 4, 256, 262208)
    assert all("defaulted from Gemma3TextConfig" in d for d in imported.defaulted)
    from planner.specs import ModelSpec
    published = (675 + 3_209) * 1e6  # Gemma 3 report, Table 1, 4B (text: embedding + non-embedding)
    assert abs(ModelSpec.model_validate(spec).total_params() - published) <= 0.01 * published


def test_class_defaults_differ_by_config_class():
    """An absent num_key_value_heads is heads for LlamaConfig (None) but 8 for MistralConfig."""
    config = json.loads((HF / "llama.json").read_text())
    del config["num_key_value_heads"]
    assert spec_from_hf(config, name="l").spec.get("kv_heads") is None  # the spec's default: heads
    mistral = spec_from_hf({**config, "model_type": "mistral"}, name="m")
    assert mistral.spec["kv_heads"] == 8 and any("defaulted from MistralConfig" in d for d in mistral.defaulted)
    del config["num_hidden_layers"]
    assert spec_from_hf(config, name="l").spec["layers"] == 32  # LlamaConfig's default, as transformers loads it


def _import_error(tmp_path, *args: str, overlay: str | None = None):
    if overlay is not None:
        (tmp_path / "ov.yaml").write_text(overlay)
        args += ("--overlay", str(tmp_path / "ov.yaml"))
    result = CliRunner().invoke(_app(), ["import", str(HF / "llama.json"), *args])
    assert result.exit_code == 2, result.output
    return result.output


def test_overlay_errors_name_the_overlay_file_and_line(tmp_path):
    ov = tmp_path / "ov.yaml"
    out = _import_error(tmp_path, overlay="training:\n  bogus: 1\n")
    assert f"{ov}:2: training.bogus: unknown key 'bogus'" in out and "llama.json" not in out
    out = _import_error(tmp_path, overlay="seq_len: 2048\ntraining:\n  global_batch: 64\n  precision: fp9\n")
    assert f"{ov}:4: training.precision:" in out
    out = _import_error(tmp_path, overlay="layers: 0\n")
    assert f"{ov}:1: layers:" in out
    out = _import_error(tmp_path, overlay="training: 5\n")  # a scalar where a mapping belongs
    assert f"{ov}:1: training:" in out
    with pytest.raises(SpecError) as info:
        api_hf.import_config(HF / "llama.json", overlay=ov)
    assert (info.value.file, info.value.line, info.value.path) == (str(ov), 1, "training")


def test_flag_errors_name_the_flag(tmp_path):
    with pytest.raises(SpecError) as info:
        api_hf.import_config(HF / "llama.json", precision="fp9")
    assert (info.value.file, info.value.line, info.value.path) == (None, None, "--precision")
    assert str(info.value).startswith("--precision: ")
    assert "error: --precision: " in _import_error(tmp_path, "--precision", "fp9")
    # a flag wins over the overlay: its value, so its name; both problems are reported
    out = _import_error(tmp_path, "--precision", "fp9", overlay="training:\n  precision: fp8\n  bogus: 1\n")
    assert "--precision: " in out and f"{tmp_path / 'ov.yaml'}:3: training.bogus" in out and "llama.json" not in out
    # values the HF config gave are still blamed on it
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({**json.loads((HF / "llama.json").read_text()), "num_key_value_heads": 5}, indent=2))
    with pytest.raises(SpecError) as info:
        api_hf.import_config(bad, precision="fp8", overlay=None)
    assert info.value.file == str(bad) and info.value.path == "kv_heads"


# --- sliding-window attention (transformers v4.55.0-v4.57.3 configuration_*.py) ----------------------

_GPT_OSS_LIKE = {"model_type": "gpt_oss", "num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4,
                 "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 32, "num_local_experts": 4,
                 "num_experts_per_tok": 2, "vocab_size": 100, "sliding_window": 128,
                 "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]}


def test_gpt_oss_and_gemma3_windows_import():
    spec = spec_from_hf(_GPT_OSS_LIKE, name="g").spec
    assert (spec["sliding_window"], spec["full_attention_every"]) == (128, 2)
    # no layer_types: GptOssConfig builds the same alternation (layer i full when (i + 1) % 2 == 0)
    assert spec_from_hf({k: v for k, v in _GPT_OSS_LIKE.items() if k != "layer_types"}, name="g").spec == spec
    # Gemma 3: 5 local layers of window 1024 per global one, from sliding_window_pattern (or its default 6)
    gemma = {"model_type": "gemma3_text", "num_hidden_layers": 12, "hidden_size": 64, "intermediate_size": 128,
             "sliding_window": 1024, "sliding_window_pattern": 6}
    imported = spec_from_hf(gemma, name="g3")
    assert (imported.spec["sliding_window"], imported.spec["full_attention_every"]) == (1024, 6)
    del gemma["sliding_window_pattern"]
    imported = spec_from_hf(gemma, name="g3")
    assert imported.spec["full_attention_every"] == 6
    assert any(d.startswith("sliding_window_pattern = 6, defaulted from Gemma3TextConfig") for d in imported.defaulted)
    # the shipped fixtures: google/gemma-3-12b lists layer_types (8 of 48 full), openai/gpt-oss-20b too
    g12 = spec_from_hf(json.loads((HF / "gemma3.json").read_text()), name="g").spec
    assert (g12["sliding_window"], g12["full_attention_every"]) == (1024, 6)
    oss = spec_from_hf(json.loads((HF / "gpt_oss.json").read_text()), name="o").spec
    assert (oss["sliding_window"], oss["full_attention_every"]) == (128, 2)
    assert not any("sliding" in n for n in spec_from_hf(_GPT_OSS_LIKE, name="g").notes)


def test_mistral_qwen_and_mixtral_windows():
    config = json.loads((HF / "llama.json").read_text())
    assert "sliding_window" not in spec_from_hf(config, name="l").spec  # LlamaConfig has none
    # Mistral 7B v0.1: window 4096 on every layer (MistralConfig's default too); v0.2 on: null
    mistral = spec_from_hf({**config, "model_type": "mistral", "sliding_window": 4096}, name="m").spec
    assert mistral["sliding_window"] == 4096 and "full_attention_every" not in mistral
    assert "sliding_window" not in spec_from_hf({**config, "model_type": "mistral", "sliding_window": None}, name="m").spec
    # Qwen2/3: only with use_sliding_window (false in the shipped configs), layers >= max_window_layers
    qwen = json.loads((HF / "qwen3.json").read_text())
    assert "sliding_window" not in spec_from_hf(qwen, name="q").spec
    on = spec_from_hf({**qwen, "use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 0}, name="q")
    assert on.spec["sliding_window"] == 4096 and "full_attention_every" not in on.spec
    # the first 12 of 36 layers full: no pattern of the spec; every 3rd layer keeps the count (12)
    part = spec_from_hf({**qwen, "use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 12}, name="q")
    assert part.spec["full_attention_every"] == 3 and any("12 full-attention layers" in n for n in part.notes)
    assert "sliding_window" not in spec_from_hf(json.loads((HF / "mixtral.json").read_text()), name="x").spec


def test_bad_layer_types_point_at_the_key():
    with pytest.raises(SpecError) as err:
        spec_from_hf({**_GPT_OSS_LIKE, "layer_types": [0, 1, 0, 1]}, name="g")
    assert err.value.path == "layer_types" and "layer type names" in str(err.value)


# --- YaRN's cos/sin factor, clamped SwiGLU and linear biases (rope_mscale, swiglu_limit, linear_bias) ------

# rope_scaling -> rope_mscale by transformers' _compute_yarn_parameters (v4.57.3), each value worked by hand:
# get_mscale(s, m) = 0.1 m ln s + 1 (s > 1), else 1; ln 32 = 3.465736, ln 4 = 1.386294, ln 40 = 3.688879.
YARN = [
    ({"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096},
     0.1 * 3.465736 + 1, "GPT-OSS: 0.1 ln 32 + 1 = 1.346574"),
    ({"type": "yarn", "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096},
     1.0, "DeepSeek-V3: (0.1 ln 40 + 1) / (0.1 ln 40 + 1) = 1; `type`, the older spelling"),
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
     0.1 * 1.386294 + 1, "Qwen3 model cards' YaRN for 131k context: 0.1 ln 4 + 1 = 1.138629"),
    ({"rope_type": "yarn", "factor": 40, "mscale": 0.707, "mscale_all_dim": 1.0},
     (0.0707 * 3.688879 + 1) / (0.1 * 3.688879 + 1), "(1.260804) / (1.368888) = 0.921041"),
    ({"rope_type": "yarn", "factor": 40, "mscale": 1.0, "mscale_all_dim": 0},
     0.1 * 3.688879 + 1, "mscale_all_dim 0 is falsy: get_mscale(40) = 1.368888"),
    ({"rope_type": "yarn", "factor": 8.0, "attention_factor": 1.2}, 1.2, "attention_factor given: itself"),
    ({"rope_type": "yarn", "factor": 1.0}, 1.0, "factor <= 1: get_mscale is 1"),
    ({"rope_type": "linear", "factor": 8.0}, 1.0, "Gemma 3's linear scaling: no cos/sin factor"),
    ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 8192}, 1.0, "Llama 3.1: no cos/sin factor"),
]


@pytest.mark.parametrize("rope_scaling,expected,why", YARN)
def test_rope_mscale_follows_transformers_yarn_rule(rope_scaling, expected, why):
    qwen = json.loads((HF / "qwen3.json").read_text())
    spec = spec_from_hf({**qwen, "rope_scaling": rope_scaling}, name="q").spec
    assert spec.get("rope_mscale", 1.0) == pytest.approx(expected, abs=1e-6), why
    assert ("rope_mscale" in spec) == (abs(expected - 1.0) > 1e-9)  # 1 is the spec's default: left implicit


def test_gpt_oss_fixture_gives_clamp_biases_and_yarn_factor():
    # openai/gpt-oss-20b: swiglu_limit 7.0, attention_bias true, rope_scaling yarn factor 32
    imported = spec_from_hf(json.loads((HF / "gpt_oss.json").read_text()), name="o")
    spec = imported.spec
    assert spec["swiglu_limit"] == 7.0 and spec["linear_bias"] is True
    assert spec["rope_mscale"] == pytest.approx(0.1 * 3.465736 + 1, abs=1e-6)  # 0.1 ln 32 + 1
    assert {"swiglu_limit", "attention_bias", "rope_scaling"} <= set(imported.fields_read)
    assert any(n.startswith("rope_scaling: YaRN, factor 32: rope_mscale 1.3466 = 0.1 ln 32 + 1") for n in imported.notes)
    model = load_model(HF / "gpt_oss.json")
    assert (model.swiglu_limit, model.linear_bias) == (7.0, True) and model.rope_mscale == pytest.approx(1.346574)


def test_deepseek_v3_yarn_mscale_cancels():
    imported = spec_from_hf(json.loads((HF / "deepseek_v3.json").read_text()), name="d")
    assert "rope_mscale" not in imported.spec and load_model(HF / "deepseek_v3.json").rope_mscale == 1.0
    assert any("rope_mscale 1.0000 = (0.1 x 1 ln 40 + 1) / (0.1 x 1 ln 40 + 1): they cancel" in n for n in imported.notes)
    assert "swiglu_limit" not in imported.spec and "linear_bias" not in imported.spec


def test_gpt_oss_without_the_keys_gets_what_transformers_uses():
    # no swiglu_limit (GptOssExperts fixes limit = 7.0), no attention_bias (GptOssConfig sets True), no
    # rope_scaling (GptOssConfig's default: yarn, factor 32)
    imported = spec_from_hf(_GPT_OSS_LIKE, name="g")
    spec = imported.spec
    assert (spec["swiglu_limit"], spec["linear_bias"]) == (7.0, True)
    assert spec["rope_mscale"] == pytest.approx(0.1 * 3.465736 + 1, abs=1e-6)
    said = {d.split(" = ")[0]: d for d in imported.defaulted}
    assert "GptOssExperts.limit" in said["swiglu_limit"] and "GptOssConfig" in said["attention_bias"]
    assert "GptOssConfig" in said["rope_scaling"]


def test_gpt_oss_attention_bias_false_is_no_linear_bias():
    imported = spec_from_hf({**_GPT_OSS_LIKE, "attention_bias": False, "swiglu_limit": 10}, name="g")
    assert "linear_bias" not in imported.spec and imported.spec["swiglu_limit"] == 10.0
    assert any(n.startswith("attention_bias false: only the experts and the router keep biases") for n in imported.notes)


def test_qwen2_qkv_bias_is_not_a_bias_on_every_linear_layer():
    # Qwen2 has q/k/v biases only (Megatron --add-qkv-bias); linear_bias is --add-bias-linear (all of them)
    spec = spec_from_hf(json.loads((HF / "qwen2.json").read_text()), name="q").spec
    assert "linear_bias" not in spec and load_model(HF / "qwen2.json").linear_bias is None


@pytest.mark.parametrize("change,path,fragment", [
    ({"rope_scaling": {"rope_type": "yarn"}}, "rope_scaling.factor", "missing key 'factor'"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": "32"}}, "rope_scaling.factor", "wrong type"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 32, "mscale": True}}, "rope_scaling.mscale", "wrong type"),
    ({"rope_scaling": "yarn"}, "rope_scaling", "wrong type"),
    ({"swiglu_limit": "7"}, "swiglu_limit", "wrong type"),
    ({"attention_bias": 1}, "attention_bias", "wrong type"),
])
def test_bad_yarn_clamp_and_bias_keys_point_at_the_key(change, path, fragment):
    with pytest.raises(SpecError) as err:
        spec_from_hf({**_GPT_OSS_LIKE, **change}, name="g")
    assert err.value.path == path and fragment in err.value.message


def test_a_mistyped_nested_key_gets_its_line(tmp_path):
    config = json.loads((HF / "gpt_oss.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config, "rope_scaling": {**config["rope_scaling"], "factor": "32"}}, indent=2))
    with pytest.raises(SpecError) as info:
        load_model(path)
    assert info.value.line == path.read_text().splitlines().index('    "factor": "32",') + 1


def test_router_groups_out_of_the_specs_domain_are_left_out_as_absent():
    config = json.loads((HF / "deepseek_v3.json").read_text())
    # 256 experts in 6 groups do not divide; topk_group 9 > n_group 8; a scaling factor of 1 scales nothing
    for bad in ({"n_group": 6}, {"topk_group": 9}, {"routed_scaling_factor": 1.0}, {"scoring_func": "relu"}):
        moe = spec_from_hf({**config, **bad}, name="d").spec["moe"]
        field = {"n_group": "router_groups", "topk_group": "router_groups", "routed_scaling_factor": "top_k_scaling",
                 "scoring_func": "router_score"}[next(iter(bad))]
        assert field not in moe
