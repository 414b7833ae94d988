"""transformers 5's `rope_parameters` (rope_theta and rope_scaling in one mapping, per layer type when
its keys are layer types) read as transformers reads it (issue 38: it was dropped silently, so a Llama
3.1 config in the new format imported with no RoPE base and no Llama 3 scaling)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from planner.specs.hf import spec_from_hf

HF = Path(__file__).resolve().parents[1] / "data" / "hf"
ROPE_KEYS = ("rope_theta", "rope_scaling_factor", "rope_mscale", "yarn")


def _legacy(name: str) -> dict:
    return json.loads((HF / f"{name}.json").read_text())


def _new_format(config: dict) -> dict:
    """The config as transformers 5 saves it: rope_theta moved into the rope_scaling mapping, renamed."""
    c = dict(config)
    theta, scaling = c.pop("rope_theta"), c.pop("rope_scaling", None) or {}
    c["rope_parameters"] = {**scaling, "rope_theta": theta}
    return c


def _rope(spec: dict) -> dict:
    return {k: spec[k] for k in ROPE_KEYS if k in spec}


@pytest.mark.parametrize("name, expected", [
    # Llama 3.1: rope_theta 500000, rope_scaling llama3 factor 8
    ("llama", {"rope_theta": 500000, "rope_scaling_factor": 8.0}),
    # GPT-OSS: rope_theta 150000, YaRN factor 32: cos/sin factor 0.1 ln 32 + 1 = 1.346574
    ("gpt_oss", {"rope_theta": 150000, "rope_mscale": round(0.1 * math.log(32) + 1, 6)}),
    # DeepSeek-V3: `type` yarn (the old spelling), factor 40, mscale = mscale_all_dim: they cancel (1, the default)
    ("deepseek_v3", {"rope_theta": 10000}),
])
def test_rope_parameters_give_the_spec_rope_theta_and_rope_scaling_gave(name, expected):
    legacy = spec_from_hf(_legacy(name), name="x").spec
    new = spec_from_hf(_new_format(_legacy(name)), name="x").spec
    assert {k: v for k, v in _rope(legacy).items() if k != "yarn"} == expected
    assert _rope(new) == _rope(legacy)
    if name == "gpt_oss":
        assert new["yarn"]["factor"] == 32.0 and new["yarn"]["original_max_position_embeddings"] == 4096


def test_the_mappings_own_base_wins_over_a_stale_rope_theta():
    # convert_rope_params_to_dict: rope_parameters.setdefault("rope_theta", config.rope_theta)
    c = _new_format(_legacy("llama"))
    c["rope_theta"] = 10000.0
    assert spec_from_hf(c, name="x").spec["rope_theta"] == 500000


def test_a_mapping_per_layer_type_gives_the_full_attention_layers_base():
    # Gemma 3: full_attention layers at 1e6 with linear scaling 8, sliding_attention layers at 10,000
    c = _legacy("gemma3")
    text = dict(c["text_config"])
    text.pop("rope_theta"), text.pop("rope_scaling"), text.pop("rope_local_base_freq", None)
    text["rope_parameters"] = {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
                               "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}
    spec = spec_from_hf({**c, "text_config": text}, name="g").spec
    assert spec["rope_theta"] == 1000000


def test_a_base_below_one_in_rope_parameters_is_refused_by_its_path():
    from planner.errors import SpecError

    c = _new_format(_legacy("llama"))
    c["rope_parameters"]["rope_theta"] = 0.5
    with pytest.raises(SpecError, match="rope_parameters.rope_theta"):
        spec_from_hf(c, name="x")
