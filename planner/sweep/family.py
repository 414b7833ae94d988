"""A generated model family: `scale_model` (with the aspect-ratio trend) and the batch rule."""
from __future__ import annotations

import math

import numpy as np

from planner.errors import SpecError
from planner.specs import ModelSpec

SCALE_TOLERANCE = 0.03  # a generated model's parameter count is within 3 % of its target


# --- the scaling rule --------------------------------------------------------------------------

def aspect_trend(params: float) -> float:
    """d_model / n_layers of a GPT of `params` parameters: 64 up to 1e9, rising linearly in
    log10(params) to 128 at 1e10 and staying there. A fit to GPT-3 (Brown et al. 2020, Table 2.1:
    ~64 from 125M to 760M, 85 at 1.3B, 128 from 6.7B to 175B); Kaplan et al. 2020 (Sec. 3.1) found
    the loss nearly insensitive to this ratio over a wide range, so a smooth trend loses little."""
    return 64.0 + 64.0 * float(np.clip(np.log10(params / 1e9), 0.0, 1.0))


def _shaped(base: ModelSpec, name: str, hidden: int, layers: int, data: dict | None = None) -> ModelSpec:
    """`base` with `hidden` and `layers` (heads, kv_heads and FFN following); `data`: base.model_dump()."""
    head_dim = base.hidden // base.heads
    heads = hidden // head_dim
    update = dict(name=name, hidden=hidden, layers=layers, heads=heads)
    if base.kv_heads is not None:
        update["kv_heads"] = heads // (base.heads // base.num_kv_heads)
    if base.ffn_hidden is not None:
        update["ffn_hidden"] = max(128, round(base.ffn_hidden / base.hidden * hidden / 128) * 128)
    return ModelSpec.model_validate({**(base.model_dump() if data is None else data), **update})


_SIZES: dict[int, tuple[ModelSpec, dict, dict[int, tuple[int, int]]]] = {}  # id(base) -> (base, its dump, sizes)


def _sizes(base: ModelSpec, hidden: int) -> tuple[int, int]:
    """(parameters of one layer with the embeddings, parameters per further layer) of `base` at `hidden`:
    the same for every target, so kept per base (a family of 1,000 counts made them 35,000 times, 25 s)."""
    if base.moe is not None and base.moe.dense_layers > 0:  # the one- and two-layer shapes below are invalid
        raise SpecError(f"cannot scale {base.name}: its first {base.moe.dense_layers} layers are dense (moe.dense_layers), "
                        "and a family is grown one layer at a time", path="scale_model.base",
                        expected="a base model without moe.dense_layers (a dense model, or a MoE whose every layer is MoE)")
    hit = _SIZES.get(id(base))
    if hit is None or hit[0] is not base:
        if len(_SIZES) > 100:
            _SIZES.clear()
        hit = _SIZES[id(base)] = (base, base.model_dump(), {})
    sizes = hit[2]
    if hidden not in sizes:
        one = _shaped(base, base.name, hidden, 1, hit[1]).total_params()
        sizes[hidden] = (one, _shaped(base, base.name, hidden, 2, hit[1]).total_params() - one)
    return sizes[hidden]


def scale_model(base: ModelSpec, params: float) -> ModelSpec:
    """`base` resized to about `params` parameters (ModelSpec.total_params, embeddings included).

    Rule: keep the base's head size, GQA group (heads / kv_heads), FFN / hidden ratio (FFN rounded
    to a multiple of 128), vocabulary, context and training settings; hidden is a multiple of
    head_dim * lcm(8, group) (heads a multiple of 8 so tp up to 8 divides them); the aspect ratio
    hidden / layers follows the base's own, moved along `aspect_trend`. Among the hidden sizes near
    (12 * L * h^2 = params with L = h / aspect), each takes the layer count closest to the target;
    the one closest to the aspect ratio among those within 2 % of the target wins."""
    head_dim, group = base.hidden // base.heads, base.heads // base.num_kv_heads
    quantum = head_dim * math.lcm(8, group)
    aspect = base.hidden / base.layers * aspect_trend(params) / aspect_trend(base.total_params())
    ideal = (params * aspect / 12.0) ** (1.0 / 3.0)
    name = f"{base.name}-scaled-{params_label(params)}"
    best = None
    for hidden in range(quantum, max(2 * quantum, int(2 * ideal)) + 1, quantum):
        one, per_layer = _sizes(base, hidden)
        layers = max(1, round((params - (one - per_layer)) / per_layer))
        error = abs((one + (layers - 1) * per_layer) / params - 1.0)
        rank = (error > 0.02, abs(math.log(hidden / layers / aspect)) if error <= 0.02 else error)
        if best is None or rank < best[0]:
            best = (rank, hidden, layers)
    model = _shaped(base, name, best[1], best[2], _SIZES[id(base)][1])
    if abs(model.total_params() / params - 1.0) > SCALE_TOLERANCE:
        raise SpecError(f"cannot scale {base.name} to {params_label(params)} parameters: the nearest shape has "
                        f"{params_label(model.total_params())}", path="scale_model.params",
                        expected=f"counts above the embeddings of {base.name} (about "
                        f"{params_label(base.embedding_params() + base.output_params())})")
    return model


def params_label(params: float) -> str:
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6)):
        if params >= scale:
            return f"{params / scale:.3g}{unit}"
    return f"{params:.3g}"


def batch_from_tokens(batch_tokens: float, seq_len: int) -> int:
    """Sequences per step for about `batch_tokens` tokens: R = T / seq_len rounded to the nearest
    multiple of the granule 2^floor(log2(R / 8)) (1 when R < 8). The granule lies in (R/16, R/8], so
    dp can be any power of two up to it and the batch is within R/16 (6.25 %) of the target."""
    raw = batch_tokens / seq_len
    granule = 1 << max(0, math.floor(math.log2(raw / 8))) if raw >= 8 else 1
    return max(granule, round(raw / granule) * granule)
