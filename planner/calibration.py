"""Published measurements as planner inputs, and the planner's predictions of them.

The cases live in `data/calibration/` (copied from the steering team's collection, with sources).
Settings a source does not print are assumptions, stated here once per source:
- Korthikanti et al. 2022 (Megatron-LM, 2022, DGX A100 80GB, Selene): fp16, the standard
  (non-fused) softmax attention of the time, no TP or DP overlap, plain data parallelism (zero 0),
  NVLink 300 GB/s and one 200 Gb/s HDR HCA (25 GB/s) per GPU.
- NVIDIA dgxc-benchmarking v24.11.1 (NeMo 24.11, DGX H100): bf16, flash attention, sequence
  parallelism, distributed optimizer (zero 1), TP communication overlap, overlapped DP
  communication, no recomputation; NVLink4 450 GB/s and one 400 Gb/s NDR HCA (50 GB/s) per GPU.
  Nemotron-4 15B: 48 heads, 8 KV heads, squared-ReLU MLP (two matrices, counted as gelu), RoPE,
  untied embeddings (Parmar et al. 2024, "Nemotron-4 15B Technical Report", Sec. 2).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from .costs.comm import tp_comm_per_layer_s, tp_exposed, tp_passes
from .costs.compute import layer_compute
from .costs.stages import rank_layers
from .loading import load_gpu_data, shared_dir
from .precision import precision
from .score import Scores, score
from .space import single_layout
from .specs import ClusterSpec, ModelSpec
from .units import GIB

DATA_DIR = shared_dir("data") / "calibration"

_SOURCES = {
    "korthikanti": dict(
        gpu="a100-sxm-80gb", nvlink_gbps=300, network_gbps=25, precision="fp16", attention="standard",
        tp_comm_overlap=False, dp_comm_overlap=False, zero=0,
    ),
    "dgxc": dict(
        gpu="h100-sxm-80gb", nvlink_gbps=450, network_gbps=50, precision="bf16", attention="flash",
        tp_comm_overlap=True, dp_comm_overlap=True, zero=1,
    ),
}
_NEMOTRON = dict(heads=48, kv_heads=8, position_embedding="rope", tied_embeddings=False)


@dataclass(frozen=True)
class Case:
    id: str
    source: str
    kind: str  # "iteration" | "layer" | "memory"
    model: ModelSpec
    cluster: ClusterSpec
    layouts: object  # a one-row planner.space.Layouts
    measured: dict


def _recompute(text: str) -> str:
    text = str(text).lower()
    if text.startswith("full") or "full_recompute" in text:
        return "full"
    if text.startswith("selective"):
        return "selective"
    return "none"


def _build(raw: dict) -> Case | None:
    family = "korthikanti" if raw["id"].startswith("korthikanti") else "dgxc"
    src = _SOURCES[family]
    m, tr, lay, measured = raw["model"], raw["training"], raw["layout"], raw["measured"]
    extra = _NEMOTRON if "nemotron" in raw["id"] else {}
    model = ModelSpec.model_validate(
        dict(
            name=raw["id"], layers=m["layers"], hidden=m["hidden"], heads=m.get("heads") or extra.get("heads"),
            kv_heads=m.get("kv_heads") or extra.get("kv_heads"), ffn_hidden=m["ffn"], vocab=m["vocab"],
            seq_len=m["seq_len"],
            **{k: v for k, v in extra.items() if k not in ("heads", "kv_heads")},
            training=dict(
                global_batch=tr["global_batch"], precision=src["precision"], attention=src["attention"],
                tp_comm_overlap=src["tp_comm_overlap"], dp_comm_overlap=src["dp_comm_overlap"],
            ),
        )
    )
    gpus = lay["gpus"]
    per_node = 8
    cluster = ClusterSpec.model_validate(
        dict(
            name=f"{family}-{gpus}", gpu=load_gpu_data(src["gpu"]), nodes=max(1, gpus // per_node),
            node=dict(gpus=min(per_node, gpus), nvlink_gbps=src["nvlink_gbps"], network_gbps=src["network_gbps"]),
        )
    )
    rc = _recompute(tr["recompute"])
    sp = tr["seq_parallel"] if isinstance(tr["seq_parallel"], bool) else True
    if family == "korthikanti" and str(tr["recompute"]).startswith("selective_plus"):
        sp = True
    dp, tp, pp, mb = lay["dp"], lay["tp"], lay["pp"], tr["micro_batch"]
    layouts = single_layout(
        dp=dp, tp=tp, pp=pp, micro_batch=mb, vpp=tr.get("vpp") or 1, recompute=rc,
        sequence_parallel=sp and tp > 1, zero=src["zero"] if dp > 1 else 0,
        num_microbatches=tr["global_batch"] // (dp * mb),
    )
    if "iteration_s" in measured:
        kind = "iteration"
    elif "layer_total_ms" in measured:
        kind = "layer"
    elif "activations_gib" in measured:
        kind = "memory"
    else:
        return None  # MFU-only rows (no time of their own) are not replayed
    return Case(raw["id"], raw["source"], kind, model, cluster, layouts, measured)


def load_cases(path: Path | None = None) -> list[Case]:
    raw = yaml.safe_load((path or DATA_DIR / "cases.yaml").read_text())
    return [c for c in (_build(r) for r in raw) if c is not None]


def predict(case: Case, cluster: ClusterSpec | None = None) -> dict:
    """Predicted counterparts of the case's measured figures."""
    s: Scores = score(case.model, cluster or case.cluster, case.layouts)
    if case.kind == "iteration":
        return {"iteration_s": float(s.step_time_s[0])}
    if case.kind == "layer":
        cl = cluster or case.cluster
        model, lay = case.model, case.layouts
        lc = layer_compute(model, cl.gpu, lay)
        act = precision(model.training.precision).activation_bytes
        # One forward pass of TP collectives in the forward; the rest (backward, recomputed forward) in backward.
        tp = tp_comm_per_layer_s(cl, model.hidden, model.seq_len, lay, act) * tp_exposed(model, cl)
        fwd = lc.fwd_s[0] + tp[0]
        bwd = lc.bwd_s[0] + lc.recompute_s[0] + tp[0] * (tp_passes(lay)[0] - 1.0)
        return {"layer_forward_ms": fwd * 1e3, "layer_backward_ms": bwd * 1e3, "layer_total_ms": (fwd + bwd) * 1e3}
    # Korthikanti Fig. 1 counts the transformer layers' state bytes per parameter only; the first
    # stage also holds the word embedding, which the planner adds on top (memory_breakdown).
    first = rank_layers(case.model, case.layouts, 0)
    state_bytes = precision(case.model.training.precision).state_bytes
    layer_state = first * case.model.layer_params() / case.layouts.tp * state_bytes
    return {
        "params_plus_optimizer_gib": float(layer_state[0] / GIB),
        "activations_gib": float(s.memory_gib.activations[0]),
    }


def errors(cases: list[Case], cluster_override=None) -> list[tuple[Case, str, float, float, float]]:
    """(case, metric, measured, predicted, relative error) for every comparable figure."""
    rows = []
    for case in cases:
        pred = predict(case)
        for key, value in pred.items():
            meas = case.measured.get(key)
            if meas is None:
                continue
            rows.append((case, key, float(meas), float(value), (value - meas) / meas))
    return rows


def summary(rows) -> dict:
    err = np.abs(np.array([r[4] for r in rows])) if rows else np.zeros(0)
    return {"n": int(err.size), "mean_abs": float(err.mean()) if err.size else 0.0, "max_abs": float(err.max()) if err.size else 0.0}
