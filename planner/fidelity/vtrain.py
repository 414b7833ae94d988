"""The vTrain measurements (1,549 A100 iteration times, Megatron-DeepSpeed) as calibration cases.

The measurement files do not state recomputation or interconnect; vTrain's own validation configs
do (VIA-Research/vTrain@f8dda84, config/validation/{single,multi}/*.json, one per measured run, all
1,548 alike): `use_checkpoint: true` (full activation recomputation), `use_gradient_bucket: false`
(gradients all-reduced after the backward), `pipeline_scheduling: 1f1b`, `node_size: 8`,
`inter_node_bandwidth: 800` (Gb/s per node, src/config.py: 12.5 GB/s per GPU). Still assumed (said in
the README): fp16, standard attention, no sequence parallelism, vocabulary 51,200 (GPT-2's, padded),
NVLink 300 GB/s per GPU (DGX A100).
"""
from __future__ import annotations

import csv

import numpy as np

from planner.specs.loading import load_gpu_data
from planner.specs.shipped import shared_dir
from planner.layout.space import RECOMPUTE_FULL, Layouts
from planner.specs import ClusterSpec, ModelSpec

DATA_DIR = shared_dir("data") / "calibration"
FILES = ("ground_truth_single.csv", "ground_truth_multi.csv")

# 800 Gb/s per 8-GPU node (vTrain's validation configs, inter_node_bandwidth in Gb/s per node).
NETWORK_GBPS = 800 / 8 / 8
COLUMNS = ("gpus", "global_batch", "micro_batch", "hidden", "heads", "layers", "seq_len", "tp", "dp", "pp", "ms")


def read_rows(name: str) -> list[dict]:
    path = DATA_DIR / "vtrain" / name
    with open(path, encoding="utf-8-sig") as fh:
        reader = csv.reader(fh)
        next(reader)
        rows = []
        for rec in reader:
            values = rec[1:] if len(rec) == 12 else rec  # the multi-node file starts with billions of params
            rows.append(dict(zip(COLUMNS, (float(v) for v in values))))
    return rows


def _shape_groups(rows: list[dict]) -> dict[tuple, list[dict]]:
    shapes: dict[tuple, list[dict]] = {}
    for r in rows:
        shapes.setdefault((r["hidden"], r["heads"], r["layers"], r["seq_len"], r["global_batch"]), []).append(r)
    return shapes


def _inputs(key: tuple, group: list[dict]) -> tuple[ModelSpec, ClusterSpec, Layouts]:
    h, a, layers, s, gb = key
    model = ModelSpec.model_validate(dict(
        name="vtrain", layers=int(layers), hidden=int(h), heads=int(a), vocab=51200, seq_len=int(s),
        training=dict(global_batch=int(gb), precision="fp16", stack="megatron-deepspeed")))
    gpus = int(max(r["gpus"] for r in group))
    cluster = ClusterSpec.model_validate(dict(
        name="vtrain", gpu=load_gpu_data("a100-sxm-80gb"), nodes=max(1, -(-gpus // 8)),
        node=dict(gpus=min(8, gpus), nvlink_gbps=300, network_gbps=NETWORK_GBPS)))
    arr = {k: np.array([r[k] for r in group], dtype=np.int64) for k in ("dp", "tp", "pp", "micro_batch")}
    # Full recomputation (the validation configs); vpp and sp take the registry's defaults. ZeRO-1: unstated,
    # but at ZeRO-0 DeepSpeed's fp16 optimizer holds 24 B a parameter at its step (planner/costs/memory.py
    # _deepspeed_fp16_grad_bytes: 2 + 2 + 4 + 4 fp16 weights and gradients, fp32 copies, + 12 B of fp32
    # master and moments), 85 GB for the 3.55e9 parameters of the dp-64 tp-1 runs that trained on 80 GB.
    lay = Layouts(**arr, num_microbatches=int(gb) // (arr["dp"] * arr["micro_batch"]),
                  recompute=np.full(len(group), RECOMPUTE_FULL, dtype=np.int64),
                  zero=np.where(arr["dp"] > 1, 1, 0))  # ZeRO shards over dp: none at dp 1 (the zero_needs_dp rule)
    return model, cluster, lay


def vtrain_groups() -> list[tuple]:
    """vTrain's runs, one (id, model, cluster, layouts, measured iteration times [s]) per file and
    model shape."""
    out = []
    for name in FILES:
        tag = "single" if "single" in name else "multi"
        for i, (key, group) in enumerate(_shape_groups(read_rows(name)).items()):
            model, cluster, lay = _inputs(key, group)
            out.append((f"vtrain_{tag}_{i}", model, cluster, lay, np.array([r["ms"] / 1e3 for r in group])))
    return out
