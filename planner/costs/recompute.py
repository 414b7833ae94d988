"""Recomputation as Megatron-Core offers it beyond one checkpoint per layer (issue 37).

- `--recompute-modules moe` (selective): the MoE layer runs under one checkpoint (moe_layer.py,
  `tensor_parallel.checkpoint(custom_forward, ...)`): only its input is kept, and its whole forward
  (router, permutation, dispatch and combine all-to-alls, experts, shared experts) runs again before
  its backward. `moe_forward_s` is that forward's compute; the all-to-alls and the shared experts'
  TP collectives are counted as one pass more (planner/costs/comm.py, layer_times.py).
- `--recompute-method uniform|block --recompute-num-layers N` (full), per model chunk of Lc layers
  (recompute.py `checkpointed_forward`, the layers of one TransformerBlock): uniform checkpoints the
  input of each group of N layers and rebuilds a group at a time (every layer recomputed; ceil(Lc / N)
  checkpoints stored, N layers rebuilt at once); block checkpoints the first N layers and runs the
  other Lc - N as without recomputation. Lc is the mean chunk, L / (p v): exact for even splits.
"""
from __future__ import annotations

import numpy as np

from planner.costs.compute import _eager_expert_bytes, _gemm_set, _mlp_traffic, gemm_s, routed_rows
from planner.layout.space import RECOMPUTE_FULL, RECOMPUTE_NONE, RECOMPUTE_SELECTIVE
from planner.specs import GpuSpec, ModelSpec, StackConstants
from planner.specs.layers import LayerKind, micro_batch_tokens
from planner.specs.precision import BF16
from planner.units import US


def recomputes_moe(model: ModelSpec, layouts) -> np.ndarray | bool:
    """Rows whose MoE layers are recomputed whole (selective with the moe module)."""
    if model.moe is None or "moe" not in model.training.recomputed:
        return False
    return layouts.recompute == RECOMPUTE_SELECTIVE


def moe_forward_s(model: ModelSpec, gpu: GpuSpec, st: StackConstants, layouts, kind: LayerKind) -> np.ndarray:
    """Forward compute of one MoE layer's MLP block [s], as planner/costs/compute.py prices it inside
    the layer: the router (16-bit), permuting and unpermuting each routed copy, the experts' grouped
    GEMMs and activation, the shared experts' GEMMs and activation, and the host sync of a dropless
    dispatch, which the recomputed dispatch repeats."""
    prec = model.training.numerics
    hbm = gpu.hbm_bytes_per_s * gpu.efficiency.hbm
    t = layouts.tp.astype(float)
    tokens = micro_batch_tokens(model, layouts)
    rows, local = routed_rows(model, layouts)
    etp = layouts.etp.astype(float)
    experts, cast_in, _ = _gemm_set(kind.expert, rows, etp, gpu, prec, groups=local)
    router = gemm_s(tokens / t, kind.router.k, kind.router.n, gpu.peak_flops("bf16"), gpu.hbm_bytes_per_s, gpu)
    width = kind.expert[-1].k / etp
    traffic = (_mlp_traffic(model, rows * local, width) + 4 * BF16.activation_bytes * tokens / t * kind.top_k * model.hidden
               + _eager_expert_bytes(model, rows * local, width) + cast_in)
    shared = tuple(m for m in kind.tp_matrices if m.name.startswith("shared_"))
    if shared:
        shared_width = next(m.k for m in shared if m.name == "shared_down")
        experts = experts + _gemm_set(shared, tokens, t, gpu, prec)[0]
        traffic = traffic + _mlp_traffic(model, tokens / t, shared_width)
    graphed = model.training.cuda_graph_impl == "full_iteration"
    sync = st.moe_sync_us * US if model.moe.capacity_factor is None and not graphed else 0.0
    return experts + router + traffic / hbm + sync


# --- full recomputation by method and layers --------------------------------------------------------

def by_method(model: ModelSpec) -> bool:
    """Whether full recomputation differs from one checkpoint per layer (the planner's default)."""
    return not model.training.recompute_default_method


def chunk_layers(model: ModelSpec, layouts) -> np.ndarray:
    """Lc: the mean transformer layers of a model chunk, L / (p v)."""
    return model.layers / (layouts.pp * layouts.vpp).astype(float)


def full_fraction(model: ModelSpec, layouts) -> np.ndarray:
    """Of a fully recomputed row's layers, the fraction recomputed: min(N, Lc) / Lc under block,
    1 under uniform; 1 for rows without full recomputation (their own recompute applies)."""
    t = model.training
    if t.recompute_method != "block":
        return np.ones(len(layouts))
    lc = chunk_layers(model, layouts)
    return np.where(layouts.recompute == RECOMPUTE_FULL, np.minimum(t.recompute_num_layers, lc) / lc, 1.0)


def checkpoints_per_layer(model: ModelSpec, layouts) -> np.ndarray:
    """Stored checkpoints per layer of a fully recomputed chunk: ceil(Lc / N) / Lc under uniform (one
    per group of N), 1 under block (each of its recomputed layers keeps its input)."""
    t = model.training
    if t.recompute_method == "block":
        return np.ones(len(layouts))
    lc = chunk_layers(model, layouts)
    return np.ceil(lc / t.recompute_num_layers - 1e-9) / lc


def rebuilt_layers(model: ModelSpec, layouts) -> np.ndarray:
    """Layers whose activations a full recomputation rebuilds at once: a group of min(N, ceil(Lc))
    under uniform, one layer under block."""
    t = model.training
    if t.recompute_method == "block":
        return np.ones(len(layouts))
    return np.minimum(t.recompute_num_layers, np.ceil(chunk_layers(model, layouts) - 1e-9))


def without_full(layouts):
    """The same rows with full recomputation replaced by none: what block's other layers run as."""
    cols = layouts.columns()
    cols["recompute"] = np.where(layouts.recompute == RECOMPUTE_FULL, RECOMPUTE_NONE, layouts.recompute)
    return type(layouts)(**cols)
