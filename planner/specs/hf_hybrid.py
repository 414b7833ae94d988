"""Hugging Face configs of hybrid models as a layer pattern and its sections (planner/specs/hybrid.py).

- NemotronHConfig (nvidia/Nemotron-H-*): `hybrid_override_pattern`, one character a layer, M, * and -
  as the planner writes them (E, its MoE layer, is refused: no shipped MoE Nemotron-H here);
  mamba_num_heads, mamba_head_dim, ssm_state_size, n_groups, conv_kernel, chunk_size; mlp_hidden_act
  relu2 (squared ReLU); no biases (attention_bias, mlp_bias, use_bias).
- Qwen3NextConfig (Qwen/Qwen3-Next-*): `layer_types` (linear_attention: gated DeltaNet, full_attention:
  gated attention), or every `full_attention_interval`-th layer full when it is absent (transformers
  configuration_qwen3_next.py); each HF layer is a mixer and an MoE FFN, so two pattern layers (D- or
  *-); linear_num_key_heads, linear_num_value_heads, linear_key_head_dim, linear_value_head_dim,
  linear_conv_kernel_dim; the attention's output gate (q_proj twice as wide) is always on.
"""
from __future__ import annotations

from planner.errors import SpecError, clip, shown
from planner.specs.hybrid import ATTENTION, DELTANET, MLP

_MAMBA_KEYS = {"heads": "mamba_num_heads", "head_dim": "mamba_head_dim", "state_dim": "ssm_state_size",
               "groups": "n_groups", "conv_kernel": "conv_kernel", "chunk_size": "chunk_size"}
_DELTANET_KEYS = {"key_heads": "linear_num_key_heads", "value_heads": "linear_num_value_heads",
                  "key_head_dim": "linear_key_head_dim", "value_head_dim": "linear_value_head_dim",
                  "conv_kernel": "linear_conv_kernel_dim"}
# Every key the hybrid readers read (tests: a config class default is only for a key read)
READ_KEYS = frozenset({*_MAMBA_KEYS.values(), *_DELTANET_KEYS.values(), "hybrid_override_pattern", "mlp_hidden_act",
                       "layer_types", "full_attention_interval"})


def _section(r, keys: dict, required: tuple, spec: dict, sources: dict, name: str) -> None:
    out = {}
    for field, key in keys.items():
        value, path = r.get((key,), int, required=field in required)
        if value is not None:
            out[field], sources[(name, field)] = value, path
    spec[name] = out


def hybrid_fields(r, kind: str, spec: dict, sources: dict, notes: list[str], names: type) -> None:
    """layer_pattern (and layers), mamba: or deltanet:, and the attention's extras into `spec`; `names`:
    the reader's type of a list of layer type names."""
    if kind == "nemotron_h":
        _nemotron_h(r, spec, sources, notes)
    else:
        _qwen3_next(r, spec, sources, notes, names)


def _nemotron_h(r, spec: dict, sources: dict, notes: list[str]) -> None:
    pattern, path = r.get(("hybrid_override_pattern",), str)
    if "E" in pattern:
        raise SpecError("a MoE layer (E) in the pattern: MoE Nemotron-H models are not mapped", path=".".join(path),
                        expected="a pattern of M (Mamba-2), * (attention) and - (MLP)")
    spec["layer_pattern"], sources[("layer_pattern",)] = pattern, path
    if len(pattern) != spec["layers"]:
        raise SpecError(f"{len(pattern)} characters, num_hidden_layers is {spec['layers']}", path=".".join(path),
                        expected="one character a layer")
    act, act_path = r.get(("mlp_hidden_act",), str, required=False)
    if act not in (None, "relu2"):
        raise SpecError(f"got {shown(act)}", path=".".join(act_path), expected="relu2 (squared ReLU, Nemotron-H's MLP)")
    spec["linear_bias"] = False
    _section(r, _MAMBA_KEYS, ("heads", "head_dim", "state_dim", "groups"), spec, sources, "mamba")


def _qwen3_next(r, spec: dict, sources: dict, notes: list[str], names: type) -> None:
    layers, layers_path = spec["layers"], sources[("layers",)]
    types, path = r.get(("layer_types",), names, required=False)
    if types is None:
        every, path = r.get(("full_attention_interval",), int)  # absent: Qwen3NextConfig's 4, said
        if every < 1:  # 0 divides by zero in transformers; a negative one would make every layer full attention
            raise SpecError(f"got {every}", path=".".join(path),
                            expected="every n-th layer full attention: an integer >= 1 (Qwen3-Next: 4)")
        types = ["full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(layers)]
    bad = sorted({str(t) for t in types} - {"full_attention", "linear_attention"})
    if bad or len(types) != layers:
        said = f"{len(types)} entries, num_hidden_layers is {layers}" if not bad else f"got {clip(bad[0])}"
        raise SpecError(said, path=".".join(path), expected="one of linear_attention / full_attention a layer")
    moe = spec.get("moe")
    if moe is None or moe.get("layer_every", 1) != 1 or moe.get("dense_layers", 0):
        raise SpecError("not every layer MoE (decoder_sparse_step or mlp_only_layers)", path=".".join(layers_path),
                        expected="every Qwen3-Next layer MoE, as the published models are")
    spec["layer_pattern"] = "".join((DELTANET if t == "linear_attention" else ATTENTION) + MLP for t in types)
    sources[("layer_pattern",)] = path
    spec["layers"] = 2 * layers
    notes.append(f"layers: 2 x num_hidden_layers ({layers}): a mixer layer and an MoE layer each")
    spec["attention_output_gate"] = True
    _section(r, _DELTANET_KEYS, ("key_heads", "value_heads", "key_head_dim", "value_head_dim"), spec, sources, "deltanet")
