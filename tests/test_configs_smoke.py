"""Every shipped config loads strictly, and every model and cluster can be searched."""
from __future__ import annotations

from pathlib import Path

import pytest

from planner.errors import InfeasibleError
from planner.specs.loading import load_cluster, load_gpu, load_model
from planner.search import search

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
GPUS = sorted(p.stem for p in (CONFIGS / "gpus").glob("*.yaml"))
CLUSTERS = sorted(p.stem for p in (CONFIGS / "clusters").glob("*.yaml"))
MODELS = sorted(p.stem for p in (CONFIGS / "models").glob("*.yaml"))


@pytest.mark.parametrize("name", GPUS)
def test_gpu_preset_loads(name):
    gpu = load_gpu(name)
    assert gpu.name == name and gpu.idle_w < gpu.tdp_w


@pytest.mark.parametrize("name", CLUSTERS)
def test_cluster_loads_and_searches(name):
    cluster = load_cluster(name)
    assert cluster.name == name
    model = load_model("gpt3-175b")
    gpus = min(cluster.total_gpus, 1024)
    result = search(model, cluster, gpus=gpus, top_k=1)
    assert result.solver.status in ("OPTIMAL", "INFEASIBLE")


@pytest.mark.parametrize("name", MODELS)
def test_model_loads_and_searches(name):
    model = load_model(name)
    assert model.name == name
    cluster = load_cluster("dgx-a100-1024")
    try:
        result = search(model, cluster, gpus=512, top_k=1)
    except InfeasibleError:  # a batch no dp of 512 GPUs divides is a real answer, not a crash
        return
    assert result.chosen.size <= 1


MOE = [m for m in MODELS if load_model(m).moe is not None]


@pytest.mark.parametrize("name", MOE)
def test_moe_model_plans_on_an_nvl72_rack(name):
    # 72 GPUs of one NVLink domain: expert parallelism may span the whole rack
    model = load_model(name)
    assert model.moe is not None and model.active_params() < model.total_params()
    try:
        result = search(model, load_cluster("dgx-gb200-nvl72-1152"), gpus=64, top_k=1)
    except InfeasibleError:  # a batch no dp of 64 GPUs divides is a real answer, not a crash
        return
    assert result.chosen.size <= 1
