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
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

import yaml

from .errors import SpecError
from .yamlio import LoadedYaml, load_yaml_text

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
    "llama4": {"experts": ("num_local_experts",), "top_k": ("num_experts_per_tok",),
               "expert_ffn_hidden": ("intermediate_size",), "shared_experts": 1,
               "shared_expert_ffn_hidden": ("intermediate_size",), "layer_every": ("interleave_moe_layer_step",),
               "ffn_hidden": ("intermediate_size_mlp",)},
}
# Explicit per-layer lists: key -> what its entries are (checked against the spec's regular pattern).
_LAYER_LISTS = {"mlp_only_layers": "dense", "moe_layers": "moe"}

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
    notes: tuple[str, ...] = ()


FAMILIES = (
    Family("llama", ("llama", "mistral"), ("LlamaForCausalLM", "MistralForCausalLM"), _LLAMA_KEYS, "swiglu", "rope", False,
           notes=("hidden_act silu: gated MLP (SwiGLU)", _NORMS, "Mistral's sliding-window attention not modelled")),
    Family("mixtral", ("mixtral",), ("MixtralForCausalLM",), _LLAMA_KEYS, "swiglu", "rope", False, moe="mixtral",
           notes=("every layer MoE; intermediate_size is each expert's width", _NORMS,
                  "sliding-window attention not modelled")),
    Family("qwen2", ("qwen2",), ("Qwen2ForCausalLM",), _LLAMA_KEYS, "swiglu", "rope", False,
           notes=("QKV biases: the spec's QKV biases; it also counts an attention-output bias Qwen2 lacks "
                  "(hidden per layer)", "RMSNorm counted as LayerNorm (+2 x hidden per norm)",
                  "sliding-window attention (use_sliding_window) not modelled")),
    Family("qwen3", ("qwen3",), ("Qwen3ForCausalLM",), _LLAMA_KEYS, "swiglu", "rope", False,
           notes=("head_dim given explicitly", "q/k RMSNorm (2 x head_dim per layer) not counted", _NORMS)),
    Family("qwen3_moe", ("qwen3_moe",), ("Qwen3MoeForCausalLM",), _LLAMA_KEYS, "swiglu", "rope", False, moe="qwen3_moe",
           notes=("MoE layer i: (i + 1) % decoder_sparse_step == 0 and not in mlp_only_layers; dense layers use "
                  "intermediate_size", "q/k RMSNorm not counted", _NORMS)),
    Family("deepseek_v3", ("deepseek_v3",), ("DeepseekV3ForCausalLM",), _LLAMA_KEYS, "swiglu", "rope", False,
           moe="deepseek_v3", mla=True,
           notes=("multi-token prediction module (num_nextn_predict_layers) not modelled: the published 671B "
                  "excludes its ~14B too", "sigmoid routing with group-limited top-k and YaRN RoPE not modelled",
                  "the spec's MLA counts no attention biases; RMSNorm counted as LayerNorm")),
    Family("gemma2", ("gemma2",), ("Gemma2ForCausalLM",), _LLAMA_KEYS, "swiglu", "rope", True,
           notes=("gated GELU (GeGLU) mapped to swiglu: the same three matrices (gate, up, down), so the same "
                  "parameters and GEMM FLOPs; only the elementwise activation differs",
                  "four RMSNorms per layer (pre and post): counted as the spec's two LayerNorms, same size",
                  "logit soft-capping and sliding-window attention on alternate layers not modelled")),
    Family("gemma3", ("gemma3", "gemma3_text"), ("Gemma3ForConditionalGeneration", "Gemma3ForCausalLM"), _LLAMA_KEYS,
           "swiglu", "rope", True, nested="text_config",
           notes=("text model only: the SigLIP vision tower and multimodal projector are not modelled",
                  "gated GELU (GeGLU) mapped to swiglu: same three matrices, same parameters and GEMM FLOPs",
                  "q/k RMSNorm not counted; 5:1 local (sliding-window) to global attention not modelled")),
    Family("gpt_neox", ("gpt_neox",), ("GPTNeoXForCausalLM",), _LLAMA_KEYS, "gelu", "rope", False,
           notes=("rotary on rotary_pct of each head: rope (no parameters)",
                  "parallel residual (use_parallel_residual) changes neither parameters nor FLOPs")),
    Family("gpt2", ("gpt2",), ("GPT2LMHeadModel",), _GPT2_KEYS, "gelu", "learned", True,
           notes=("learned positions: the spec sizes the table as seq_len x hidden (n_positions by default)",
                  "n_inner null: 4 x n_embd")),
    Family("gpt_oss", ("gpt_oss",), ("GptOssForCausalLM",), _LLAMA_KEYS, "swiglu", "rope", False, moe="gpt_oss",
           notes=("clamped SwiGLU experts: swiglu (same matrices); intermediate_size is each expert's width",
                  "attention sinks, expert and router biases not counted (< 0.1% of parameters)",
                  "sliding-window attention on alternate layers and YaRN RoPE not modelled")),
    Family("llama4", ("llama4", "llama4_text"), ("Llama4ForConditionalGeneration", "Llama4ForCausalLM"), _LLAMA_KEYS,
           "swiglu", "rope", False, moe="llama4", nested="text_config",
           notes=("text model only: the vision tower and projector are not modelled",
                  "one shared expert of intermediate_size per MoE layer; dense layers use intermediate_size_mlp",
                  "NoPE layers (no_rope_layers), chunked local attention and QK L2-norm not modelled")),
)


@dataclass(frozen=True)
class Imported:
    """A model spec made from a HF config, and how."""

    spec: dict
    family: str
    notes: list[str]
    fields_read: list[str]
    defaults: list[str] = field(default_factory=list)  # training fields the defaults filled in
    sources: dict[tuple, tuple] = field(default_factory=dict)  # spec path -> the HF key path it came from


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
    raise SpecError(f"unknown Hugging Face architecture: model_type {model_type!r}, architectures {archs} "
                    f"(read: model_type, architectures; top-level keys include {', '.join(keys)})",
                    path="model_type" if "model_type" in config else "architectures",
                    expected="model_type one of: " + ", ".join(t for f in FAMILIES for t in f.model_types))


class _Reader:
    """Reads typed values from the text part of a config, recording each key read."""

    def __init__(self, config: dict, family: Family) -> None:
        nested = config.get(family.nested) if family.nested else None
        self.top, self.text = config, nested if isinstance(nested, dict) else config
        self.prefix = (family.nested,) if isinstance(nested, dict) else ()
        self.read: list[str] = []

    def get(self, keys: tuple[str, ...], kind: type, required: bool = True, top_too: bool = False):
        """(value, key path) of the first key present and not null; (None, None) if none is and not required."""
        places = [(self.text, self.prefix)] + ([(self.top, ())] if top_too and self.prefix else [])
        for where, prefix in places:
            for key in keys:
                if where.get(key) is not None:
                    return self._typed(where[key], prefix + (key,), kind), prefix + (key,)
        if required:
            raise SpecError(f"missing key '{keys[0]}'", path=".".join(self.prefix + (keys[0],)),
                            expected=f"{'an integer' if kind is int else 'a value'} in the Hugging Face config")
        return None, None

    def _typed(self, value: Any, path: tuple, kind: type):
        self.read.append(".".join(path))
        ok = isinstance(value, bool) if kind is bool else isinstance(value, kind) and not isinstance(value, bool)
        if kind is list and ok and not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            ok = False
        if not ok:
            want = {int: "an integer", bool: "true or false", list: "a list of layer indices"}[kind]
            raise SpecError(f"wrong type: got {json.dumps(value)[:40]}", path=".".join(path), expected=want)
        return value


def _base(r: _Reader, family: Family, spec: dict, sources: dict) -> int | None:
    """The dense fields into `spec`; returns max_positions (None when the config has none)."""
    max_positions = None
    for name, keys in family.keys.items():
        kind = bool if name == "tied_embeddings" else int
        required = name in ("layers", "hidden", "heads", "vocab")
        value, path = r.get(keys, kind, required, top_too=name == "tied_embeddings")
        if name == "max_positions":
            max_positions = value
        elif value is not None:
            spec[name], sources[(name,)] = value, path
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
        if name == "ffn_hidden":
            spec["ffn_hidden"], sources[("ffn_hidden",)] = value, path
        else:
            moe[name], sources[("moe", name)] = value, path
    if moe.get("shared_experts") == 0:
        moe.pop("shared_experts"), moe.pop("shared_expert_ffn_hidden", None)
    for key, default in (("layer_every", 1), ("dense_layers", 0)):
        if moe.get(key) == default:
            moe.pop(key)
    _layer_lists(r, spec["layers"], moe, notes)
    spec["moe"] = moe


def _layer_lists(r: _Reader, layers: int, moe: dict, notes: list[str]) -> None:
    """Check explicit per-layer lists against the spec's pattern (the first k dense, then every n-th
    MoE); a list that fits no such pattern maps to the nearest (same count of MoE layers), said."""
    k, every = moe.get("dense_layers", 0), moe.get("layer_every", 1)
    pattern = {i for i in range(layers) if i >= k and (i - k + 1) % every == 0}
    for key, what in _LAYER_LISTS.items():
        listed, path = r.get((key,), list, required=False)
        if not listed:
            continue
        moe_set = pattern - set(listed) if what == "dense" else set(listed)
        if moe_set == pattern:
            continue
        if what == "dense" and every == 1 and k == 0 and set(listed) == set(range(len(listed))):
            moe["dense_layers"] = len(listed)  # leading dense layers: the spec says so exactly
            continue
        moe["layer_every"] = max(1, round(layers / max(len(moe_set), 1)))
        notes.append(f"{'.'.join(path)} gives {len(moe_set)} MoE layers in no pattern the spec has: mapped to "
                     f"every {moe['layer_every']}-th layer being MoE")


def _mla(r: _Reader, spec: dict, sources: dict) -> None:
    mla = {}
    for name, keys in _MLA_KEYS.items():
        value, path = r.get(keys, int, required=name != "q_lora_rank")
        mla[name], sources[("mla", name)] = value, path
    spec["mla"] = mla


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


_ORDER = ("name", "layers", "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden", "ffn_act", "vocab", "seq_len",
          "tied_embeddings", "position_embedding", "mla", "moe", "training")


def spec_from_hf(config: dict, *, name: str, seq_len: int | None = None, global_batch: int | None = None,
                 precision: str | None = None, overlay: dict | None = None) -> Imported:
    """The model spec (a plain, YAML-ready mapping) of a HF config, through the `FAMILIES` table.

    Raises SpecError (with the key path, no file) for an unknown architecture or a missing or
    mistyped key; the spec itself is validated by whoever loads it (planner.loading)."""
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
    given = {"seq_len": seq_len, "global_batch": global_batch, "precision": precision}
    spec, used = _training(spec, max_positions, given, overlay)
    ordered = {k: spec[k] for k in _ORDER if k in spec} | {k: v for k, v in spec.items() if k not in _ORDER}
    return Imported(ordered, family.name, notes, list(dict.fromkeys(r.read)), used, sources)


def name_for(config: dict, file: str | None) -> str:
    """A spec name: the config's `_name_or_path` (last part), else the file's name (its folder's for
    config.json), else the model_type."""
    given = config.get("_name_or_path") if isinstance(config, dict) else None
    if isinstance(given, str) and given.strip("/"):
        return given.strip("/").split("/")[-1][:128]
    if file:
        parts = file.replace("\\", "/").split("/")
        stem = parts[-1].rsplit(".", 1)[0]
        if stem != "config" or len(parts) == 1:
            return stem[:128] or "model"
        return (parts[-2] or stem)[:128]
    return str(config.get("model_type") or "model")[:128]


def parse_config(text: str, file: str) -> LoadedYaml:
    """JSON text as data with the line of each key (SpecError with the line for malformed JSON)."""
    try:
        data = json.loads(text)
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


class _Dumper(yaml.SafeDumper):
    pass


_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null"}


def _str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    """Quoted unless plainly a word: a name like `1e5` or `no` must load back as a string."""
    plain = _PLAIN.fullmatch(text) and text.lower() not in _WORDS
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=None if plain else '"')


_Dumper.add_representer(str, _str)


def spec_yaml(imported: Imported, source: str | None = None) -> str:
    """What `plan import` writes: a comment header (source, family, notes, defaults), then the spec."""
    head = [f"Imported from {source or 'a Hugging Face config.json'} by `plan import` "
            f"({imported.family} family; mapping table: planner/hf.py).",
            "Read: " + ", ".join(imported.fields_read) + "."]
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
