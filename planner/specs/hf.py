"""A Hugging Face `config.json` as a model spec: one mapping table, read once per family.

`FAMILIES` says, per model family, which config key gives which spec field, the family's fixed
facts (MLP activation, position embedding, whether embeddings are tied when the config is
silent) and what the spec cannot express (`notes`, shown as comments by `plan import`). Nothing
here reads files or the network: the caller hands over the parsed JSON (and its key lines).

HF configs hold no training fields; they come from the arguments, an overlay mapping, or these
defaults (stated in the YAML header `plan import` writes):

- seq_len = min(max_position_embeddings, DEFAULT_SEQ_LEN_CAP): the context the model was built for,
  capped at 4096, the pretraining length of most of these families' main stage (Llama 2, Qwen3,
  DeepSeek-V3); long-context extension is a later, short stage. GPT-2 gets its 1024 positions.
- global_batch = round(DEFAULT_BATCH_TOKENS / seq_len): about 4M tokens per step, Llama 2's batch
  (Touvron et al. 2023, Sec. 2.2) and the order of GPT-3's 3.2M (Brown et al. 2020, Table 2.1).
- precision = bf16, which every GPU in configs/ can run (HF's `torch_dtype` is a storage type).
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

import yaml

from planner.errors import SpecError, clip, clip_file, shown
from planner.specs.hf_hybrid import hybrid_fields
from planner.specs.model import ModelSpec, MoeSpec
from planner.specs.yamlio import MAX_NUMBER_CHARS, LoadedYaml, load_yaml_text

DEFAULT_SEQ_LEN_CAP = 4096
DEFAULT_BATCH_TOKENS = 4 * 2**20  # tokens per optimizer step (Llama 2: 4M)
DEFAULT_PRECISION = "bf16"

# spec field <- HF key(s), tried in order. `max_positions` is no spec field: it bounds seq_len.
_LLAMA_KEYS = {"layers": ("num_hidden_layers",), "hidden": ("hidden_size",), "heads": ("num_attention_heads",),
               "kv_heads": ("num_key_value_heads",), "head_dim": ("head_dim",), "ffn_hidden": ("intermediate_size",),
               "vocab": ("vocab_size",), "tied_embeddings": ("tie_word_embeddings",),
               "max_positions": ("max_position_embeddings",)}
_GPT2_KEYS = {"layers": ("n_layer",), "hidden": ("n_embd",), "heads": ("n_head",), "ffn_hidden": ("n_inner",),
              "vocab": ("vocab_size",), "tied_embeddings": ("tie_word_embeddings",), "max_positions": ("n_positions",)}
_MLA_KEYS = {"q_lora_rank": ("q_lora_rank",), "kv_lora_rank": ("kv_lora_rank",),
             "qk_nope_head_dim": ("qk_nope_head_dim",), "qk_rope_head_dim": ("qk_rope_head_dim",),
             "v_head_dim": ("v_head_dim",)}
# moe field <- HF key(s), or an int: a fact of the family. `ffn_hidden` here overrides the dense width.
_MOE_KEYS = {
    "mixtral": {"experts": ("num_local_experts",), "top_k": ("num_experts_per_tok",),
                "expert_ffn_hidden": ("intermediate_size",)},
    "qwen3_moe": {"experts": ("num_experts",), "top_k": ("num_experts_per_tok",),
                  "expert_ffn_hidden": ("moe_intermediate_size",), "layer_every": ("decoder_sparse_step",)},
    "deepseek_v3": {"experts": ("n_routed_experts",), "top_k": ("num_experts_per_tok",),
                    "expert_ffn_hidden": ("moe_intermediate_size",), "shared_experts": ("n_shared_experts",),
                    "shared_expert_ffn_hidden": ("moe_intermediate_size",), "dense_layers": ("first_k_dense_replace",),
                    "layer_every": ("moe_layer_freq",)},
    "gpt_oss": {"experts": ("num_local_experts",), "top_k": ("num_experts_per_tok", "experts_per_token"),
                "expert_ffn_hidden": ("intermediate_size",)},
    "qwen3_next": {"experts": ("num_experts",), "top_k": ("num_experts_per_tok",),
                   "expert_ffn_hidden": ("moe_intermediate_size",), "shared_experts": 1,
                   "shared_expert_ffn_hidden": ("shared_expert_intermediate_size",),
                   "layer_every": ("decoder_sparse_step",)},
    "llama4": {"experts": ("num_local_experts",), "top_k": ("num_experts_per_tok",),
               "expert_ffn_hidden": ("intermediate_size",), "shared_experts": 1,
               "shared_expert_ffn_hidden": ("intermediate_size",), "layer_every": ("interleave_moe_layer_step",),
               "ffn_hidden": ("intermediate_size_mlp",)},
}
# Sliding-window attention, when the config has no layer_types list (transformers configuration_*.py,
# v4.55.0-v4.57.3, which build layer_types the same way): "all": every layer (MistralConfig, MixtralConfig:
# one sliding_window for all layers); "alternate": layer i full when (i + 1) % 2 == 0 (Gemma2Config,
# GptOssConfig); "pattern": full when (i + 1) % sliding_window_pattern == 0 (Gemma3TextConfig, 6 when
# absent: "BC -> the pattern used to be a simple int"); "qwen": only with use_sliding_window, layers
# i >= max_window_layers windowed (Qwen2Config, Qwen3Config; Qwen3MoeConfig has no max_window_layers: all).
_WINDOW_RULES = ("all", "alternate", "pattern", "qwen")
_WINDOW_KEYS = ("use_sliding_window", "sliding_window", "layer_types", "sliding_window_pattern", "max_window_layers")
# Explicit per-layer lists: key -> what its entries are (checked against the spec's regular pattern).
# moe_layers first: it replaces the step's pattern (Llama4TextConfig), mlp_only_layers then removes from it.
_LAYER_LISTS = {"moe_layers": "moe", "mlp_only_layers": "dense"}

_NORMS = ("RMSNorm (scale only) counted as LayerNorm (scale and bias): +2 x hidden per norm; no linear "
          "biases in the model, but the spec counts QKV and attention-output biases: < 0.01% of parameters")


@dataclass(frozen=True)
class Family:
    """One model family of the mapping table."""

    name: str
    model_types: tuple[str, ...]
    architectures: tuple[str, ...]
    keys: Mapping[str, tuple[str, ...]]
    ffn_act: str  # swiglu: gate, up and down matrices (any gated MLP); gelu: up and down
    position_embedding: str  # rope (no parameters) or learned (a seq_len x hidden table)
    tied_default: bool  # tie_word_embeddings when the config does not say
    moe: str | None = None  # a key of _MOE_KEYS
    mla: bool = False
    nested: str | None = None  # the key a multimodal config keeps its text model under
    window: str | None = None  # which layers a sliding_window covers when layer_types is absent (_WINDOW_RULES)
    notes: tuple[str, ...] = ()
    swiglu_limit: float | None = None  # read `swiglu_limit`; this value when absent (fixed in the modeling code)
    bias_key: str | None = None  # a true value of this key: a bias on every linear layer (linear_bias)
    hybrid: str | None = None  # a hybrid pattern's reader (planner/specs/hf_hybrid.py): nemotron_h, qwen3_next


_NEMOTRON_H_KEYS = _LLAMA_KEYS | {"head_dim": ("head_dim", "attention_head_dim")}

FAMILIES = (
    Family("nemotron_h", ("nemotron_h",), ("NemotronHForCausalLM",), _NEMOTRON_H_KEYS, "relu2", "none", False,
           hybrid="nemotron_h",
           notes=("each character of hybrid_override_pattern is a layer (planner/specs/hybrid.py)",
                  "no position embedding on its attention layers (position_embedding: none)", _NORMS)),
    Family("qwen3_next", ("qwen3_next",), ("Qwen3NextForCausalLM",), _LLAMA_KEYS, "swiglu", "rope", False,
           moe="qwen3_next", hybrid="qwen3_next",
           notes=("each HF layer (a token mixer and an MoE FFN) is two pattern layers: D- or *- "
                  "(planner/specs/hybrid.py)", "the shared expert's scalar sigmoid gate (hidden weights a layer) "
                  "not counted", "q/k RMSNorm counted", _NORMS)),
    Family("llama", ("llama", "mistral"), ("LlamaForCausalLM", "MistralForCausalLM"), _LLAMA_KEYS, "swiglu", "rope", False,
           window="all", notes=("hidden_act silu: gated MLP (SwiGLU)", _NORMS)),
    Family("mixtral", ("mixtral",), ("MixtralForCausalLM",), _LLAMA_KEYS, "swiglu", "rope", False, moe="mixtral",
           window="all", notes=("every layer MoE; intermediate_size is each expert's width", _NORMS)),
    # linear_bias stays unset: Qwen2Attention's q/k/v projections carry biases (bias=True, no config key),
    # o_proj and the MLP none; linear_bias is Megatron's --add-bias-linear, every linear layer, and a
    # QKV-only bias (Megatron --add-qkv-bias) is what the spec already counts (the note below).
    Family("qwen2", ("qwen2",), ("Qwen2ForCausalLM",), _LLAMA_KEYS, "swiglu", "rope", False, window="qwen",
           notes=("QKV biases: the spec's QKV biases; it also counts an attention-output bias Qwen2 lacks "
                  "(hidden per layer)", "RMSNorm counted as LayerNorm (+2 x hidden per norm)")),
    Family("qwen3", ("qwen3",), ("Qwen3ForCausalLM",), _LLAMA_KEYS, "swiglu", "rope", False, window="qwen",
           notes=("head_dim given explicitly", "q/k RMSNorm (2 x head_dim per layer) not counted", _NORMS)),
    Family("qwen3_moe", ("qwen3_moe",), ("Qwen3MoeForCausalLM",), _LLAMA_KEYS, "swiglu", "rope", False, moe="qwen3_moe",
           window="qwen", notes=("MoE layer i: (i + 1) % decoder_sparse_step == 0 and not in mlp_only_layers; dense layers use "
                  "intermediate_size", "q/k RMSNorm not counted", _NORMS)),
    Family("deepseek_v3", ("deepseek_v3",), ("DeepseekV3ForCausalLM",), _LLAMA_KEYS, "swiglu", "rope", False,
           moe="deepseek_v3", mla=True,
           notes=("multi-token prediction module (num_nextn_predict_layers) not modelled: the published 671B "
                  "excludes its ~14B too", "sigmoid routing with group-limited top-k not modelled",
                  "the spec's MLA counts no attention biases; RMSNorm counted as LayerNorm")),
    Family("gemma2", ("gemma2",), ("Gemma2ForCausalLM",), _LLAMA_KEYS, "swiglu", "rope", True, window="alternate",
           notes=("gated GELU (GeGLU) mapped to swiglu: the same three matrices (gate, up, down), so the same "
                  "parameters and GEMM FLOPs; only the elementwise activation differs",
                  "four RMSNorms per layer (pre and post): counted as the spec's two LayerNorms, same size",
                  "logit soft-capping not modelled")),
    Family("gemma3", ("gemma3", "gemma3_text"), ("Gemma3ForConditionalGeneration", "Gemma3ForCausalLM"), _LLAMA_KEYS,
           "swiglu", "rope", True, nested="text_config", window="pattern",
           notes=("text model only: the SigLIP vision tower and multimodal projector are not modelled",
                  "gated GELU (GeGLU) mapped to swiglu: same three matrices, same parameters and GEMM FLOPs",
                  "q/k RMSNorm not counted")),
    Family("gpt_neox", ("gpt_neox",), ("GPTNeoXForCausalLM",), _LLAMA_KEYS, "gelu", "rope", False,
           notes=("rotary on rotary_pct of each head: rope (no parameters)",
                  "parallel residual (use_parallel_residual) changes neither parameters nor FLOPs")),
    Family("gpt2", ("gpt2",), ("GPT2LMHeadModel",), _GPT2_KEYS, "gelu", "learned", True,
           notes=("learned positions: the spec sizes the table as seq_len x hidden (n_positions by default)",
                  "n_inner null: 4 x n_embd")),
    # GptOssExperts (transformers v4.57.3 modeling_gpt_oss.py): (up + 1) * gate * sigmoid(1.702 gate), gate
    # clamped above and up both sides at self.limit = 7.0, a constant (GptOssConfig has no swiglu_limit);
    # biases on the experts and the router always, on q, k, v and o with attention_bias (True in GptOssConfig).
    Family("gpt_oss", ("gpt_oss",), ("GptOssForCausalLM",), _LLAMA_KEYS, "swiglu", "rope", False, moe="gpt_oss",
           window="alternate", swiglu_limit=7.0, bias_key="attention_bias",
           notes=("clamped SwiGLU experts, (up + 1) x gate x sigmoid(1.702 gate): swiglu with swiglu_limit (same "
                  "matrices and FLOPs); intermediate_size is each expert's width",
                  "attention sinks, expert and router biases not counted in parameters (< 0.1%)")),
    Family("llama4", ("llama4", "llama4_text"), ("Llama4ForConditionalGeneration", "Llama4ForCausalLM"), _LLAMA_KEYS,
           "swiglu", "rope", False, moe="llama4", nested="text_config",
           notes=("text model only: the vision tower and projector are not modelled",
                  "one shared expert of intermediate_size per MoE layer; dense layers use intermediate_size_mlp",
                  "NoPE layers (no_rope_layers), chunked local attention and QK L2-norm not modelled")),
)


@dataclass(frozen=True)
class ConfigClass:
    """A transformers config class: the defaults its `__init__` gives the keys the mapping reads.

    Hub config.json files leave out values equal to these (nested `text_config`s especially: Gemma 3's
    usually has no vocab_size, no head_dim when it is 256, no heads when they are 8 and 4); transformers
    fills them back in on load, and so does the mapping, saying so in the imported spec's comments.
    Keys whose default is None (num_key_value_heads -> heads, head_dim -> hidden / heads, n_inner ->
    4 x n_embd) are derived the same way by the spec's own defaults, so they are not listed."""

    name: str
    source: str  # the transformers file whose __init__ gives the defaults
    defaults: Mapping[str, Any]
    text: str | None = None  # a wrapper: the model_type of the class its text_config is read with


# Checked against the __init__ signatures in the transformers v4.51.0, v4.55.0 and v4.57.3 wheels
# (the same values in each; GptOssConfig first appears in v4.55.0). Never guessed: a key without a
# verified default stays required. Keyed by model_type.
_TF = "src/transformers/models/{0}/configuration_{0}.py"
_LLAMA_SHAPE = {"vocab_size": 32000, "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
                "tie_word_embeddings": False}
_MISTRAL_SHAPE = _LLAMA_SHAPE | {"intermediate_size": 14336, "num_key_value_heads": 8,
                                 "max_position_embeddings": 4096 * 32}  # MixtralConfig: sliding_window None
_QWEN_SHAPE = {"vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
               "num_attention_heads": 32, "num_key_value_heads": 32, "max_position_embeddings": 32768,
               "tie_word_embeddings": False, "use_sliding_window": False, "sliding_window": 4096}
_GEMMA_SHAPE = {"hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26, "num_attention_heads": 8,
                "num_key_value_heads": 4, "head_dim": 256, "tie_word_embeddings": True}
CONFIG_CLASSES = {
    "llama": ConfigClass("LlamaConfig", _TF.format("llama"),
                         _LLAMA_SHAPE | {"intermediate_size": 11008, "max_position_embeddings": 2048}),
    "mistral": ConfigClass("MistralConfig", _TF.format("mistral"), _MISTRAL_SHAPE | {"sliding_window": 4096}),
    "mixtral": ConfigClass("MixtralConfig", _TF.format("mixtral"),
                           _MISTRAL_SHAPE | {"num_local_experts": 8, "num_experts_per_tok": 2}),
    "qwen2": ConfigClass("Qwen2Config", _TF.format("qwen2"), _QWEN_SHAPE | {"max_window_layers": 28}),
    "qwen3": ConfigClass("Qwen3Config", _TF.format("qwen3"), _QWEN_SHAPE | {"head_dim": 128, "max_window_layers": 28}),
    # hybrids: only tie_word_embeddings (False in both __init__s: Qwen3NextConfig, and NemotronHConfig as
    # NVIDIA's remote code and vLLM's copy, vllm/transformers_utils/configs/nemotron_h.py, state it) and
    # Qwen3NextConfig's full_attention_interval=4 (what builds layer_types when a config has none); the
    # other keys stay required (never guessed)
    "nemotron_h": ConfigClass("NemotronHConfig", _TF.format("nemotron_h"), {"tie_word_embeddings": False}),
    "qwen3_next": ConfigClass("Qwen3NextConfig", _TF.format("qwen3_next"),
                              {"tie_word_embeddings": False, "full_attention_interval": 4}),
    "qwen3_moe": ConfigClass("Qwen3MoeConfig", _TF.format("qwen3_moe"), _QWEN_SHAPE | {
        "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 24, "num_key_value_heads": 4,
        "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768, "decoder_sparse_step": 1}),
    "deepseek_v3": ConfigClass("DeepseekV3Config", _TF.format("deepseek_v3"), {
        "vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432, "num_hidden_layers": 61,
        "num_attention_heads": 128, "num_key_value_heads": 128, "max_position_embeddings": 4096,
        "tie_word_embeddings": False, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64, "v_head_dim": 128, "n_routed_experts": 256, "num_experts_per_tok": 8,
        "moe_intermediate_size": 2048, "n_shared_experts": 1, "first_k_dense_replace": 3}),
    "gemma2": ConfigClass("Gemma2Config", _TF.format("gemma2"),
                          _GEMMA_SHAPE | {"vocab_size": 256000, "max_position_embeddings": 8192, "sliding_window": 4096}),
    "gemma3_text": ConfigClass("Gemma3TextConfig", _TF.format("gemma3"),
                               _GEMMA_SHAPE | {"vocab_size": 262208, "max_position_embeddings": 131072,
                                               "sliding_window": 4096, "sliding_window_pattern": 6,
                                               "rope_theta": 1_000_000.0, "rms_norm_eps": 1e-6}),
    # the wrapper: text_config None -> Gemma3TextConfig(); tie_word_embeddings from PretrainedConfig's **kwargs
    "gemma3": ConfigClass("Gemma3Config", _TF.format("gemma3") + " and src/transformers/configuration_utils.py",
                          {"tie_word_embeddings": True}, text="gemma3_text"),
    "gpt_neox": ConfigClass("GPTNeoXConfig", _TF.format("gpt_neox"), {
        "vocab_size": 50432, "hidden_size": 6144, "num_hidden_layers": 44, "num_attention_heads": 64,
        "intermediate_size": 24576, "max_position_embeddings": 2048, "tie_word_embeddings": False}),
    # tie_word_embeddings: not a GPT2Config argument; PretrainedConfig.__init__ gives True
    "gpt2": ConfigClass("GPT2Config", _TF.format("gpt2") + " and src/transformers/configuration_utils.py", {
        "vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12, "n_head": 12,
        "tie_word_embeddings": True}),
    "gpt_oss": ConfigClass("GptOssConfig", _TF.format("gpt_oss"), {
        "num_hidden_layers": 36, "num_local_experts": 128, "vocab_size": 201088, "hidden_size": 2880,
        "intermediate_size": 2880, "head_dim": 64, "num_attention_heads": 64, "num_key_value_heads": 8,
        "tie_word_embeddings": False, "max_position_embeddings": 131072, "num_experts_per_tok": 4,
        "sliding_window": 128, "attention_bias": True,  # set in __init__ (self.attention_bias = True), not an argument
        "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                         "original_max_position_embeddings": 4096}}),
    "llama4_text": ConfigClass("Llama4TextConfig", _TF.format("llama4"), {
        "vocab_size": 202048, "hidden_size": 5120, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
        "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
        "max_position_embeddings": 4096 * 32, "tie_word_embeddings": False, "num_experts_per_tok": 1,
        "num_local_experts": 16, "interleave_moe_layer_step": 1}),
    "llama4": ConfigClass("Llama4Config", _TF.format("llama4"), {"tie_word_embeddings": False}, text="llama4_text"),
}


@dataclass(frozen=True)
class Imported:
    """A model spec made from a HF config, and how."""

    spec: dict
    family: str
    notes: list[str]
    fields_read: list[str]
    defaults: list[str] = field(default_factory=list)  # training fields the defaults filled in
    sources: dict[tuple, tuple] = field(default_factory=dict)  # spec path -> the HF key path it came from
    defaulted: list[str] = field(default_factory=list)  # absent keys given their config class's default


def is_hf_config(data: Any) -> bool:
    """A HF config (`model_type` or `architectures`), not a spec of ours (`layers`, `hidden`)."""
    if not isinstance(data, dict) or {"layers", "hidden"} & set(data):
        return False
    return isinstance(data.get("model_type"), str) or isinstance(data.get("architectures"), list)


def find_family(config: dict) -> Family:
    model_type = config.get("model_type")
    archs = config.get("architectures") if isinstance(config.get("architectures"), list) else []
    for fam in FAMILIES:
        if model_type in fam.model_types:
            return fam
    for fam in FAMILIES:
        if any(a in fam.architectures for a in archs):
            return fam
    keys = sorted(k for k in config if not isinstance(config[k], (dict, list)))[:12]
    more = f", … ({len(archs)} entries)" if len(archs) > 4 else ""
    shown_archs = "[" + ", ".join(shown(a) for a in archs[:4]) + more + "]"
    raise SpecError(f"unknown Hugging Face architecture: model_type {shown(model_type)}, architectures {shown_archs} "
                    f"(read: model_type, architectures; top-level keys include {', '.join(clip(k) for k in keys)})",
                    path="model_type" if "model_type" in config else "architectures",
                    expected="model_type one of: " + ", ".join(t for f in FAMILIES for t in f.model_types))


class _Names(list):
    """The kind of a list of names (layer_types) for _Reader.get."""


class _Reader:
    """Reads typed values from the text part of a config, recording each key read; an absent key (not
    one given as null) gets its transformers config class's default (`CONFIG_CLASSES`), recorded too."""

    def __init__(self, config: dict, family: Family) -> None:
        nested = config.get(family.nested) if family.nested else None
        if nested is not None and not isinstance(nested, dict):  # transformers fails on it too
            raise SpecError(f"wrong type: got {clip(json.dumps(nested), 40)}", path=family.nested,
                            expected="a mapping: the text model's config (or null for the defaults)")
        self.top, self.text = config, nested if isinstance(nested, dict) else config
        self.prefix = (family.nested,) if isinstance(nested, dict) else ()
        self.read: list[str] = []
        self.defaulted: list[str] = []
        model_type = config.get("model_type")
        top = CONFIG_CLASSES.get(model_type) if model_type in family.model_types else None  # else no defaults
        self.top_class, self.text_class = top, CONFIG_CLASSES[top.text] if top and top.text else top

    def get(self, keys: tuple[str, ...], kind: type, required: bool = True, top_too: bool = False):
        """(value, key path) of the first key present and not null, else of the config class's default
        when every key is absent; (None, None) if neither and not required."""
        places = [(self.text, self.prefix, self.text_class)]
        places += [(self.top, (), self.top_class)] if top_too and self.prefix else []
        for where, prefix, _ in places:
            for key in keys:
                if where.get(key) is not None:
                    return self._typed(where[key], prefix + (key,), kind), prefix + (key,)
        for where, prefix, cls in places:
            key = next((k for k in keys if cls and k in cls.defaults), None)
            if key is not None and not any(k in where for k in keys):
                self.defaulted.append(f"{'.'.join(prefix + (key,))} = {cls.defaults[key]}, defaulted from "
                                      f"{cls.name} ({cls.source})")
                return cls.defaults[key], prefix + (key,)
        if required:
            want = f"{'an integer' if kind is int else 'a value'} in the Hugging Face config"
            for where, prefix, _ in places:  # given as null: transformers keeps the None, and cannot build with it
                key = next((k for k in keys if k in where), None)
                if key is not None:
                    raise SpecError(f"field '{key}' is null", path=".".join(map(str, prefix + (key,))), expected=f"{want}, not null")
            raise SpecError(f"missing key '{keys[0]}'", path=".".join(self.prefix + (keys[0],)), expected=want)
        return None, None

    def _typed(self, value: Any, path: tuple, kind: type):
        self.read.append(".".join(path))
        base = list if kind is _Names else (int, float) if kind is float else kind
        ok = isinstance(value, bool) if kind is bool else isinstance(value, base) and not isinstance(value, bool)
        if kind is list and ok and not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            ok = False
        if kind is _Names and ok and not all(isinstance(v, str) for v in value):
            ok = False
        if kind is float and ok and not math.isfinite(value):
            raise SpecError(f"got {value}", path=".".join(path), expected="a finite number")
        if not ok:
            want = {int: "an integer", bool: "true or false", list: "a list of layer indices", float: "a number",
                    dict: "a mapping", _Names: "a list of layer type names", str: "a string"}[kind]
            raise SpecError(f"wrong type: got {json.dumps(value)[:40]}", path=".".join(path), expected=want)
        return float(value) if kind is float else value


def _bounds(model: type, name: str) -> tuple[int, int]:
    """(lowest, highest) integer the spec field `name` of `model` accepts (its gt/ge/lt/le)."""
    lo, hi = None, None
    for m in model.model_fields[name].metadata:
        lo = m.gt + 1 if getattr(m, "gt", None) is not None else getattr(m, "ge", lo)
        hi = m.lt - 1 if getattr(m, "lt", None) is not None else getattr(m, "le", hi)
    return lo, hi


def _check_size(value: int, path: tuple, model: type, name: str) -> None:
    """A count that loops and lists depend on, checked against the spec's bound before any of them run."""
    lo, hi = _bounds(model, name)
    if not lo <= value <= hi:
        field = ("moe." if model is MoeSpec else "") + name
        raise SpecError(f"{clip(value)} is out of range", path=".".join(path),
                        expected=f"an integer from {lo} to {hi:,}, the bound of the spec's {field}")


def _base(r: _Reader, family: Family, spec: dict, sources: dict) -> int | None:
    """The dense fields into `spec`; returns max_positions (None when the config has none)."""
    max_positions = None
    for name, keys in family.keys.items():
        kind = bool if name == "tied_embeddings" else int
        required = name in ("layers", "hidden", "heads", "vocab")
        value, path = r.get(keys, kind, required, top_too=name == "tied_embeddings")
        if name == "max_positions":
            if value is not None and value < 1:  # else seq_len, which it bounds, would be blamed
                raise SpecError(f"got {clip(value)}", path=".".join(path), expected="a positive number of positions")
            max_positions = value
        elif value is not None:
            spec[name], sources[(name,)] = value, path
    _check_size(spec["layers"], sources[("layers",)], ModelSpec, "layers")
    spec.setdefault("tied_embeddings", family.tied_default)
    spec.setdefault("ffn_hidden", 4 * spec["hidden"])
    if spec.get("head_dim") is not None and spec["head_dim"] * spec["heads"] == spec["hidden"]:
        spec.pop("head_dim")  # the spec's default (hidden / heads): leave it implicit
    spec["ffn_act"], spec["position_embedding"] = family.ffn_act, family.position_embedding
    return max_positions


def _moe(r: _Reader, family: Family, spec: dict, sources: dict, notes: list[str]) -> None:
    moe: dict[str, int] = {}
    for name, keys in _MOE_KEYS[family.moe].items():
        if isinstance(keys, int):
            moe[name] = keys
            continue
        value, path = r.get(keys, int, required=name in ("experts", "top_k", "expert_ffn_hidden"))
        if value is None:
            continue
        if name in ("layer_every", "dense_layers"):  # the pattern below divides by and loops on them
            _check_size(value, path, MoeSpec, name)
        if name == "ffn_hidden":
            spec["ffn_hidden"], sources[("ffn_hidden",)] = value, path
        else:
            moe[name], sources[("moe", name)] = value, path
    if moe.get("shared_experts") == 0:
        moe.pop("shared_experts"), moe.pop("shared_expert_ffn_hidden", None)
    for key, default in (("layer_every", 1), ("dense_layers", 0)):
        if moe.get(key) == default:
            moe.pop(key)
    if _layer_lists(r, spec["layers"], moe, notes, sources):
        spec["moe"] = moe
    else:  # no MoE layer: transformers builds every layer dense
        for key in [k for k in sources if k[0] == "moe"]:
            del sources[key]


def _router(r: _Reader, spec: dict, sources: dict) -> None:
    """DeepSeek-style routing (transformers DeepseekV3Config): scoring_func (router_score),
    topk_method noaux_tc (the auxiliary-loss-free expert bias, e_score_correction_bias), n_group /
    topk_group (group-limited routing) and routed_scaling_factor (top_k_scaling); for the exports only.
    A value out of the spec's domain is left out, as the key's absence would be."""
    moe = spec.get("moe")
    if moe is None:
        return
    text, prefix = r.text, r.prefix

    def take(key, value, field):
        moe[field], sources[("moe", field)] = value, prefix + (key,)
        r.read.append(".".join(map(str, prefix + (key,))))

    def number(key):
        v = text.get(key)
        return v if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None

    if text.get("scoring_func") in ("softmax", "sigmoid"):
        take("scoring_func", text["scoring_func"], "router_score")
    if text.get("topk_method") == "noaux_tc":
        take("topk_method", True, "expert_bias")
    groups, top = number("n_group"), number("topk_group")
    if (isinstance(groups, int) and isinstance(top, int) and 0 < top <= groups <= 1_000_000
            and moe["experts"] % groups == 0):
        take("n_group", groups, "router_groups")
        take("topk_group", top, "router_group_top_k")
    scale = number("routed_scaling_factor")
    if scale is not None and 0 < scale <= 1e6 and scale != 1.0:
        take("routed_scaling_factor", float(scale), "top_k_scaling")


def _listed_layers(r: _Reader, key: str, layers: int) -> tuple[set[int] | None, str | None]:
    """The layer indices a per-layer list gives (None when absent or null); one out of range is refused."""
    listed, path = r.get((key,), list, required=False)
    if listed is None:
        return None, None
    bad = next((i for i in listed if not 0 <= i < layers), None)
    if bad is not None:  # transformers would silently ignore it: a typo, not a layer
        raise SpecError(f"layer index {clip(bad)} is out of range", path=".".join(path),
                        expected=f"indices from 0 to {layers - 1} (num_hidden_layers {layers})")
    return set(listed), ".".join(path)


def _layer_lists(r: _Reader, layers: int, moe: dict, notes: list[str], sources: dict) -> bool:
    """Fit explicit per-layer lists to the spec's pattern (the first k dense, then every n-th MoE); a set
    of MoE layers in no such pattern maps to the nearest (same count of MoE layers), said. False when no
    layer is MoE (transformers: moe_layers [], every layer in mlp_only_layers, a step beyond the layers)."""
    k, every = moe.get("dense_layers", 0), moe.get("layer_every", 1)
    pattern = {i for i in range(layers) if i >= k and (i - k + 1) % every == 0}
    moe_set, paths = set(pattern), []
    for key, what in _LAYER_LISTS.items():
        listed, path = _listed_layers(r, key, layers)
        changed = None if listed is None else listed if what == "moe" else moe_set - listed
        if changed is not None and changed != moe_set:
            moe_set = changed
            paths.append(path)
    if not moe_set:
        paths = paths or [".".join(sources[("moe", n)]) for n in ("dense_layers", "layer_every")
                          if ("moe", n) in sources]
        notes.append(f"{' and '.join(paths)}: no MoE layer left, a dense model (as transformers builds it)")
        return False
    if moe_set == pattern:
        return True
    lead = layers - len(moe_set)
    if moe_set == set(range(lead, layers)):  # leading dense layers: the spec says so exactly
        moe.pop("layer_every", None), moe.pop("dense_layers", None)
        moe.update({"dense_layers": lead} if lead else {})
        return True
    moe["layer_every"] = max(1, round(layers / len(moe_set)))
    notes.append(f"{' and '.join(paths)} gives {len(moe_set)} MoE layers in no pattern the spec has: mapped to "
                 f"every {moe['layer_every']}-th layer being MoE")
    return True


def _full_layers(r: _Reader, rule: str, layers: int) -> tuple[list[int], tuple | None]:
    """Indices of the full-attention layers and the key they came from, by the family's rule."""
    types, path = r.get(("layer_types",), _Names, required=False)
    if types is not None:
        if len(types) != layers:  # transformers' layer_type_validation refuses it too
            raise SpecError(f"{len(types)} entries for {layers} layers", path=".".join(path),
                            expected="one entry per layer (num_hidden_layers)")
        return [i for i, t in enumerate(types) if t != "sliding_attention"], path
    if rule == "alternate":
        return [i for i in range(layers) if (i + 1) % 2 == 0], None
    if rule == "pattern":
        n, path = r.get(("sliding_window_pattern",), int, required=False)
        if "sliding_window_pattern" in r.text and (n is None or n < 1):  # transformers divides by it
            raise SpecError(f"got {'null' if n is None else clip(n)}",
                            path=".".join(r.prefix + ("sliding_window_pattern",)),
                            expected="a positive integer: layer i full when (i + 1) % n == 0")
        return [i for i in range(layers) if (i + 1) % (n or 6) == 0], path  # 6: Gemma3TextConfig's when absent
    if rule == "qwen":
        first, path = r.get(("max_window_layers",), int, required=False)
        return list(range(min(first or 0, layers))), path
    return [], None


def _window(r: _Reader, family: Family, spec: dict, sources: dict, notes: list[str]) -> None:
    """sliding_window and full_attention_every: layer i (0-based) full when (i + 1) % n == 0, as HF's
    sliding_window_pattern and Megatron's --window-attn-skip-freq; another set of full layers maps to
    the n giving the nearest count of them (costs take the mean layer, so the count is what matters)."""
    if family.window == "qwen" and not r.get(("use_sliding_window",), bool, required=False)[0]:
        return
    window, path = r.get(("sliding_window",), int, required=False)
    if window is None:
        return  # null: full attention everywhere (Mixtral, Mistral v0.2 on)
    layers = spec["layers"]
    full, full_path = _full_layers(r, family.window, layers)
    if len(full) == layers:
        return
    spec["sliding_window"], sources[("sliding_window",)] = window, path
    if not full:
        return
    every = full[0] + 1  # the only n whose first full layer is full[0]: one linear comparison, not one per n
    if every < 2 or full != list(range(every - 1, layers, every)):
        every = min(range(2, layers + 1), key=lambda n: abs(layers // n - len(full)))
        notes.append(f"{'.'.join(full_path or ('sliding_window',))} gives {len(full)} full-attention layers in no "
                     f"pattern the spec has: mapped to every {every}-th layer full ({layers // every} of them)")
    spec["full_attention_every"] = every
    if full_path:
        sources[("full_attention_every",)] = full_path


def _mla(r: _Reader, spec: dict, sources: dict) -> None:
    mla = {}
    for name, keys in _MLA_KEYS.items():
        value, path = r.get(keys, int, required=name != "q_lora_rank")
        mla[name] = value  # q_lora_rank null: a plain query projection (DeepSeek-V2-Lite), the spec's null
        if path is not None:
            sources[("mla", name)] = path
    spec["mla"] = mla


def yarn_mscale(factor: float, attention_factor: float | None = None, mscale: float | None = None,
                mscale_all_dim: float | None = None) -> float:
    """The factor YaRN puts on RoPE's cos and sin, by transformers' rule (src/transformers/modeling_rope_utils.py
    _compute_yarn_parameters, as in the v4.57.3 wheel): attention_factor when given, else get_mscale(factor,
    mscale) / get_mscale(factor, mscale_all_dim) when both are given and nonzero, else get_mscale(factor),
    where get_mscale(s, m) = 0.1 m ln s + 1 for s > 1 and 1 otherwise (Peng et al. 2023, YaRN: sqrt(1/t) =
    0.1 ln s + 1). Older versions (e.g. commit ef46806472) read no mscale: 0.1 ln factor + 1 always."""
    def get_mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    if attention_factor is not None:
        return attention_factor
    if mscale and mscale_all_dim:
        return get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
    return get_mscale(factor)


# transformers 5 folds rope_theta and rope_scaling into one `rope_parameters` mapping (modeling_rope_utils.py
# RotaryEmbeddingConfigMixin: convert_rope_params_to_dict takes a given rope_scaling first, else
# rope_parameters, and setdefault("rope_theta", the config's rope_theta), so the mapping's own base wins;
# standardize_rope_params reads `type` as `rope_type`, default "default"; a mapping whose keys are the
# config's layer types holds one such mapping per layer type: Gemma 3's full_attention and
# sliding_attention). The spec has one base: the full-attention layers'.
LAYER_TYPE_NAMES = ("full_attention", "sliding_attention", "chunked_attention", "linear_attention")


def _rope_parameters(r: _Reader) -> tuple[dict | None, tuple | None]:
    """(the RoPE mapping transformers would use, its key path): a rope_scaling when given, else
    rope_parameters (one layer type's, for a mapping per layer type), else (None, None)."""
    if not r.text.get("rope_scaling") and r.text.get("rope_parameters") is not None:
        params, path = r.get(("rope_parameters",), dict, required=False)
    else:  # a config's rope_scaling, else its config class's default
        return r.get(("rope_scaling",), dict, required=False)
    if not params:
        return None, None
    types, _ = r.get(("layer_types",), _Names, required=False)
    names = set(types or ()) | set(LAYER_TYPE_NAMES)
    if all(isinstance(v, dict) for v in params.values()) and set(params) <= names:
        key = "full_attention" if "full_attention" in params else sorted(params)[0]
        return params[key], path + (key,)
    return params, path


def _rope_type(scaling: dict | None) -> str | None:
    return None if not scaling else scaling.get("rope_type", scaling.get("type"))


def _rope_theta(r: _Reader) -> tuple[float | None, tuple | None]:
    """The RoPE base: rope_parameters' own rope_theta when it has one, else the config's rope_theta."""
    params, path = _rope_parameters(r)
    if params is not None and params.get("rope_theta") is not None:
        return r._typed(params["rope_theta"], path + ("rope_theta",), float), path + ("rope_theta",)
    return r.get(("rope_theta",), float, required=False)


def _rope(r: _Reader, spec: dict, sources: dict, notes: list[str]) -> None:
    """rope_mscale from a YaRN rope_scaling (`rope_type`, or `type` as older configs spell it); every other
    rope type leaves cos and sin unscaled (1, the spec's default). YaRN's frequency interpolation costs nothing."""
    scaling, path = _rope_parameters(r)
    if _rope_type(scaling) != "yarn":
        return
    given = {}
    for key in ("factor", "attention_factor", "mscale", "mscale_all_dim"):
        value = scaling.get(key)
        if value is None and key == "factor":
            said = "field 'factor' is null" if key in scaling else "missing key 'factor'"
            raise SpecError(said, path=".".join(path + (key,)), expected="YaRN's scaling factor, a number")
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise SpecError(f"wrong type: got {clip(json.dumps(value), 40)}", path=".".join(path + (key,)),
                            expected="a number")
        if value is not None and not math.isfinite(value):
            raise SpecError(f"got {value}", path=".".join(path + (key,)), expected="a finite number")
        given[key] = value
    f, m, m_all = given["factor"], given["mscale"], given["mscale_all_dim"]
    try:
        mscale = yarn_mscale(**given)
    except ZeroDivisionError:  # transformers divides by zero too
        raise SpecError(f"0.1 x {m_all:g} x ln {f:g} + 1 = 0, the divisor of YaRN's cos/sin factor",
                        path=".".join(path + ("mscale_all_dim",)),
                        expected="a nonzero 0.1 x mscale_all_dim x ln factor + 1") from None
    if not (math.isfinite(mscale) and mscale > 0):
        raise SpecError(f"gives a cos/sin factor of {mscale:g}", path=".".join(path),
                        expected="factor, mscale and mscale_all_dim giving a positive finite factor")
    if given["attention_factor"] is not None:
        rule = "its attention_factor"
    elif f <= 1:
        rule = "1 (factor <= 1)"
    elif m and m_all:
        rule = f"(0.1 x {m:g} ln {f:g} + 1) / (0.1 x {m_all:g} ln {f:g} + 1)" + (": they cancel" if m == m_all else "")
    else:
        rule = f"0.1 ln {f:g} + 1"
    if mscale != 1.0:
        spec["rope_mscale"], sources[("rope_mscale",)] = round(mscale, 6), path
    notes.append(f"{'.'.join(path)}: YaRN, factor {f:g}: rope_mscale {mscale:.4f} = {rule} (transformers' "
                 "rule), the factor on RoPE's cos and sin; its frequency interpolation changes no cost")


# model_types whose attention normalises each head's queries and keys (transformers' Qwen3Attention
# q_norm/k_norm, Olmo2Attention q_norm/k_norm): no config key says it
QK_NORM_TYPES = ("qwen3", "qwen3_moe", "olmo2", "qwen3_next")


def _norm_and_rope_base(r: _Reader, family: Family, spec: dict, sources: dict) -> None:
    """normalization (rms_norm_eps: RMSNorm; layer_norm_eps/epsilon: LayerNorm), rope_theta and Llama
    3.1's RoPE scaling factor, and qk_norm by model type: what the exports need to build this model."""
    eps, path = r.get(("rms_norm_eps",), float, required=False)
    if eps is not None:
        spec["normalization"], sources[("normalization",)] = "rmsnorm", path
    else:
        eps, path = r.get(("layer_norm_eps", "layer_norm_epsilon"), float, required=False)
        if eps is not None:
            spec["normalization"], sources[("normalization",)] = "layernorm", path
    if family.position_embedding == "rope":
        theta, path = _rope_theta(r)
        if theta is not None:
            if not 1 <= theta <= 1e12:
                raise SpecError(f"got {clip(theta)}", path=".".join(path), expected="a RoPE base from 1 to 1e12")
            spec["rope_theta"], sources[("rope_theta",)] = int(theta) if theta == int(theta) else theta, path
        scaling, path = _rope_parameters(r)
        factor = (scaling or {}).get("factor")
        if _rope_type(scaling) == "llama3" and isinstance(factor, (int, float)) \
                and not isinstance(factor, bool) and 1 < factor <= 1e6:
            spec["rope_scaling_factor"], sources[("rope_scaling_factor",)] = float(factor), path + ("factor",)
    if family.name in QK_NORM_TYPES:
        spec["qk_norm"] = True


def _yarn_and_mtp(r: _Reader, spec: dict, sources: dict) -> None:
    """yarn (a YaRN rope_scaling's factor, original context and betas, mscales) and mtp_layers
    (num_nextn_predict_layers): for the exports only, the cost models read neither."""
    scaling, path = _rope_parameters(r)
    if _rope_type(scaling) == "yarn":
        keys = ("factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "mscale", "mscale_all_dim")
        yarn = {k: scaling[k] for k in keys if isinstance(scaling.get(k), (int, float)) and not isinstance(scaling[k], bool)
                and 0 <= scaling[k] <= 1e6 and (k.startswith("mscale") or scaling[k] > 0)}  # YarnSpec's bounds
        if "factor" in yarn and isinstance(yarn.get("original_max_position_embeddings"), int):
            spec["yarn"], sources[("yarn",)] = yarn, path
    mtp, path = r.get(("num_nextn_predict_layers",), int, required=False)
    if mtp and 0 < mtp <= 100:  # ModelSpec.mtp_layers bounds
        spec["mtp_layers"], sources[("mtp_layers",)] = mtp, path


def _bias_and_clamp(r: _Reader, family: Family, spec: dict, sources: dict, notes: list[str]) -> None:
    """linear_bias and swiglu_limit, for the families whose config says them (GPT-OSS)."""
    if family.swiglu_limit is not None:
        limit, path = r.get(("swiglu_limit",), float, required=False)
        if limit is None:
            limit = family.swiglu_limit
            r.defaulted.append(f"swiglu_limit = {limit:g}, the constant of transformers' {family.name} modeling code "
                               "(GptOssExperts.limit, src/transformers/models/gpt_oss/modeling_gpt_oss.py)")
        else:
            sources[("swiglu_limit",)] = path
        spec["swiglu_limit"] = limit
    if family.bias_key is not None:
        bias, path = r.get((family.bias_key,), bool, required=False)
        if bias:
            spec["linear_bias"], sources[("linear_bias",)] = True, path
        elif path is not None:
            notes.append(f"{'.'.join(path)} false: only the experts and the router keep biases, not every linear layer: "
                         "linear_bias left unset")


def default_seq_len(max_positions: int | None) -> int:
    return min(max_positions or DEFAULT_SEQ_LEN_CAP, DEFAULT_SEQ_LEN_CAP)


def default_global_batch(seq_len: int) -> int:
    return max(1, round(DEFAULT_BATCH_TOKENS / seq_len))


def _merge(base: dict, over: Mapping) -> dict:
    """`over` merged into a copy of `base`, mappings key by key."""
    out = dict(base)
    for key, value in over.items():
        out[key] = _merge(out[key], value) if isinstance(value, Mapping) and isinstance(out.get(key), dict) else value
    return out


def _training(spec: dict, max_positions: int | None, given: dict, overlay: Mapping | None) -> tuple[dict, list[str]]:
    """Training fields: explicit arguments over the overlay over the defaults; the defaults used, said."""
    spec = _merge(spec, overlay or {})
    training, used = spec.get("training", {}), []
    if given["seq_len"] is not None:
        spec["seq_len"] = given["seq_len"]
    elif "seq_len" not in spec:
        spec["seq_len"] = default_seq_len(max_positions)
        used.append(f"seq_len {spec['seq_len']} = min(max positions {max_positions}, {DEFAULT_SEQ_LEN_CAP})")
    if not isinstance(training, dict):
        return spec, used  # a broken overlay: validation reports it
    training = dict(training)
    for key, value in (("global_batch", given["global_batch"]), ("precision", given["precision"])):
        if value is not None:
            training[key] = value
    if "global_batch" not in training:
        training["global_batch"] = default_global_batch(spec["seq_len"]) if isinstance(spec["seq_len"], int) else 1
        used.append(f"global_batch {training['global_batch']} (about {DEFAULT_BATCH_TOKENS:,} tokens per step)")
    if "precision" not in training:
        training["precision"] = DEFAULT_PRECISION
        used.append(f"precision {DEFAULT_PRECISION}")
    spec["training"] = training
    return spec, used


_ORDER = ("name", "layers", "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden", "ffn_act", "swiglu_limit", "vocab",
          "seq_len", "tied_embeddings", "linear_bias", "normalization", "qk_norm", "position_embedding", "rope_theta",
          "rope_scaling_factor", "rope_mscale", "sliding_window",
          "full_attention_every", "mla", "moe", "training")


def spec_from_hf(config: dict, *, name: str, seq_len: int | None = None, global_batch: int | None = None,
                 precision: str | None = None, overlay: dict | None = None) -> Imported:
    """The model spec (a plain, YAML-ready mapping) of a HF config, through the `FAMILIES` table.

    Raises SpecError (with the key path, no file) for an unknown architecture or a missing or
    mistyped key; the spec itself is validated by whoever loads it (planner.specs.loading)."""
    if not isinstance(config, dict):
        raise SpecError("a Hugging Face config must be a JSON object", expected="a JSON object")
    family = find_family(config)
    r = _Reader(config, family)
    spec, sources, notes = {"name": name}, {}, list(family.notes)
    max_positions = _base(r, family, spec, sources)
    if family.mla:
        _mla(r, spec, sources)
    if family.moe:
        _moe(r, family, spec, sources, notes)
        _router(r, spec, sources)
    if family.hybrid:
        hybrid_fields(r, family.hybrid, spec, sources, notes, _Names)
    if family.window:
        _window(r, family, spec, sources, notes)
    if family.position_embedding == "rope":
        _rope(r, spec, sources, notes)
        _yarn_and_mtp(r, spec, sources)
    _bias_and_clamp(r, family, spec, sources, notes)
    _norm_and_rope_base(r, family, spec, sources)
    given = {"seq_len": seq_len, "global_batch": global_batch, "precision": precision}
    spec, used = _training(spec, max_positions, given, overlay)
    ordered = {k: spec[k] for k in _ORDER if k in spec} | {k: v for k, v in spec.items() if k not in _ORDER}
    return Imported(ordered, family.name, notes, list(dict.fromkeys(r.read)), used, sources,
                    list(dict.fromkeys(r.defaulted)))


def name_for(config: dict, file: str | None) -> str:
    """A spec name: the config's `_name_or_path` (last part), else the file's name (its folder's for
    config.json), else the model_type."""
    given = config.get("_name_or_path") if isinstance(config, dict) else None
    if isinstance(given, str) and given.strip("/"):
        return given.strip("/").split("/")[-1][:128]
    if file:  # a name that is not UTF-8 (surrogate escapes) gets U+FFFD in their place
        parts = re.sub("[\ud800-\udfff]", "\ufffd", file).replace("\\", "/").split("/")
        stem = parts[-1].rsplit(".", 1)[0]
        if stem != "config" or len(parts) == 1:
            return stem[:128] or "model"
        return (parts[-2] or stem)[:128]
    return str(config.get("model_type") or "model")[:128]


class _Duplicate(Exception):
    """A key given twice in one JSON object (json.loads would keep the last silently)."""


class _TooLong(Exception):
    """An integer of more digits than MAX_NUMBER_CHARS (their conversion is quadratic; json.loads fails at 4300)."""


def _json_object(pairs: list[tuple[str, Any]]) -> dict:
    out = dict(pairs)
    if len(out) < len(pairs):
        seen: set[str] = set()
        raise _Duplicate(next(k for k, _ in pairs if k in seen or seen.add(k)))
    return out


def _json_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_NUMBER_CHARS:
        raise _TooLong(len(text))
    return int(text)


def _located(exc: Exception, text: str, file: str) -> SpecError:
    """A duplicate key or an overlong number, with its key path and line: the YAML reader (JSON is YAML)
    finds and names both; the key's own lines by search when it cannot read the file."""
    want = "duplicate key" if isinstance(exc, _Duplicate) else "number too long"
    try:
        load_yaml_text(text, file)
    except SpecError as found:
        if found.message.startswith(want):
            return found
    if isinstance(exc, _TooLong):
        return SpecError(f"number too long ({exc.args[0]} characters)", file=file,
                         expected=f"at most {MAX_NUMBER_CHARS} digits")
    key = exc.args[0]
    lines = [text.count("\n", 0, m.start()) + 1 for m in re.finditer(re.escape(json.dumps(key)) + r"\s*:", text)]
    return SpecError(f"duplicate key {shown(key)}" + (f" (first at line {lines[0]})" if len(lines) > 1 else ""),
                     file=file, line=lines[-1] if lines else None, expected="each key once per object")


def parse_config(text: str, file: str) -> LoadedYaml:
    """JSON text as data with the line of each key (SpecError with the line for malformed JSON, a
    duplicate key or an overlong integer)."""
    try:
        data = json.loads(text, parse_int=_json_int, object_pairs_hook=_json_object)
    except (_Duplicate, _TooLong) as exc:
        raise _located(exc, text, file) from None
    except json.JSONDecodeError as exc:
        raise SpecError(f"invalid JSON at column {exc.colno}: {exc.msg}", file=file, line=exc.lineno,
                        expected="valid JSON") from None
    except RecursionError:
        raise SpecError("invalid JSON: nested too deeply", file=file) from None
    if not isinstance(data, dict):
        raise SpecError(f"expected a JSON object at the top level, found {type(data).__name__}", file=file, line=1,
                        expected="a JSON object")
    try:
        lines = load_yaml_text(text, file).lines  # JSON is YAML: the YAML reader knows each key's line
    except SpecError:
        lines = {(): 1}
    return LoadedYaml(data=data, file=file, lines=lines)


from planner.specs.yamlio import SpecDumper as _Dumper  # noqa: E402  (strings that load back as strings)


def spec_yaml(imported: Imported, source: str | None = None) -> str:
    """What `plan import` writes: a comment header (source, family, notes, defaults), then the spec."""
    source = clip_file(source) if source else None  # one line, however the file is named
    head = [f"Imported from {source or 'a Hugging Face config.json'} by `plan import` "
            f"({imported.family} family; mapping table: planner/specs/hf.py).",
            "Read: " + ", ".join(imported.fields_read) + "."]
    if imported.defaulted:
        head += ["Absent from the config (hub files leave out values equal to the config class's defaults):"]
        head += ["- " + d for d in imported.defaulted]
    head += ["Mapped to the nearest or not modelled:"] + ["- " + n for n in imported.notes]
    head += ["Defaults (HF configs have no training fields):"] + ["- " + d for d in imported.defaults]
    lines = []
    for text in head:
        words, line = text.split(" "), "#"
        for word in words:
            if len(line) + len(word) > 100 and line != "#":
                lines.append(line)
                line = "#  "
            line += " " + word
        lines.append(line)
    body = yaml.dump(imported.spec, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True)
    return "\n".join(lines) + "\n" + body
