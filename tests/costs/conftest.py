"""Shared builders for the cost-model tests.

`toy_gpu` has round constants so that every expected number in the tests can be worked out by
hand: 100 TFLOP/s peak at 50 % GEMM efficiency (50e12 FLOP/s achieved), 1,000 GB/s HBM at 50 %
(500e9 B/s achieved), flash attention at 25 % of peak (25e12 FLOP/s), memory-bound backward
factor 2 (toy stack), NVLink efficiency 0.5, network efficiency 0.8, 10 us latency, 100 us per layer
forward, 0.5 s per step (the toy stack).
"""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from planner.costs.compute import layer_compute
from planner.costs.context import job_context
from planner.specs import ClusterSpec, GpuSpec, ModelSpec

CONFIGS = Path(__file__).resolve().parents[2] / "configs"

TOY_EFFICIENCY = dict(
    gemm=0.5,
    hbm=0.5,
    flash_attention=0.25,
    nvlink=0.5,
    network=0.8,
    latency_us=10.0,
    message_half_mb=0.0,
)

# The software side of the toy (a stack profile given inline, not a shipped one).
TOY_STACK = dict(
    name="toy-stack",
    attention="flash",
    tp_comm_overlap=False,
    dp_comm_overlap=True,
    elementwise_backward_factor=2.0,
    layer_overhead_us=100.0,
    step_overhead_s=0.5,
    tp_overlap_exposed=0.5,
    dp_overlap_exposed=0.1,
)


def _toy_gpu_data(efficiency=None, power=None, **fields) -> dict:
    data = dict(
        name="toy",
        memory_gib=80.0,
        peak_tflops=dict(bf16=100.0, fp16=100.0),
        hbm_gbps=1000.0,
        tdp_w=500.0,
        idle_w=100.0,
        memory_reserve_gib=2.0,
        efficiency={**TOY_EFFICIENCY, **(efficiency or {})},
    )
    if power:
        data["power"] = power
    data.update(fields)
    return data


def _model(**fields) -> ModelSpec:
    training = dict(global_batch=8, precision="bf16", stack=dict(TOY_STACK))
    training.update(fields.pop("training", {}))
    data = dict(name="m", layers=8, hidden=1024, heads=16, vocab=8192, seq_len=512, training=training)
    data.update(fields)
    return ModelSpec.model_validate(data)


def _cluster(gpu: dict, nodes: int = 4, gpus_per_node: int = 8, nvlink_gbps: float = 200.0,
             network_gbps: float = 10.0, **fields) -> ClusterSpec:
    data = dict(
        name="c",
        gpu=gpu,
        nodes=nodes,
        node=dict(gpus=gpus_per_node, nvlink_gbps=nvlink_gbps, network_gbps=network_gbps),
        network=dict(switch_latency_us=0.0),  # no switch hops: every step costs the GPU's latency
    )
    data.update(fields)
    return ClusterSpec.model_validate(data)


@pytest.fixture
def make_model():
    """ModelSpec builder; defaults: 8 layers, hidden 1024, 16 heads, ffn 4096 gelu, vocab 8192,
    seq 512, learned positions, untied, global batch 8, bf16, flash attention."""
    return _model


@pytest.fixture
def toy_gpu_data():
    return _toy_gpu_data


@pytest.fixture
def toy_gpu() -> GpuSpec:
    return GpuSpec.model_validate(_toy_gpu_data())


@pytest.fixture
def make_cluster():
    """ClusterSpec builder: toy GPU by default; 8 GPUs per node, NVLink 200 GB/s (100 achieved),
    network 10 GB/s per GPU (8 achieved)."""

    def build(gpu: dict | None = None, **kw) -> ClusterSpec:
        return _cluster(gpu or _toy_gpu_data(), **kw)

    return build


@pytest.fixture
def preset():
    """A shipped GPU preset as a mapping (read with plain yaml.safe_load)."""

    def load(name: str) -> dict:
        return yaml.safe_load((CONFIGS / "gpus" / f"{name}.yaml").read_text())

    return load


def job_on(model: ModelSpec, gpu: GpuSpec, layouts, ranks=None):
    """The job context of `layouts` on a toy cluster of `gpu`: the memory model reads the GPU and
    not the network, so any cluster of that GPU gives the same figures."""
    return job_context(model, _cluster(_toy_gpu_data()).model_copy(update={"gpu": gpu}), layouts, ranks)


def layer_compute_on(model: ModelSpec, gpu: GpuSpec, layouts, kind=None):
    """layer_compute with the stack's constants on `gpu` resolved as the job context resolves them."""
    return layer_compute(model, gpu, model.training.stack.for_gpu(gpu.name), layouts, kind)
