"""Runs that really trained must fit on their GPU (data/calibration, copied with sources)."""
from __future__ import annotations

import numpy as np
import pytest

from planner.costs.memory import memory_breakdown
from planner.costs.context import job_context


@pytest.fixture(scope="module")
def cases(calibration_cases):
    return [c for c in calibration_cases if c.kind == "iteration"]


# Runs that trained but do not fit the planner's memory model, and why (a missing mechanism, kept
# visible here rather than tuned away). None since dgxc's runs keep their gradients in BF16 as their
# configs say (grad_sync_dtype: bf16): Llama 3.1 8B FP8 on 8 H100s was 83.8 GiB with fp32 main
# gradients, 68.8 GiB with them (8.03e9 parameters x 2 B = 15 GiB less).
KNOWN_MISSES: set[str] = set()


def test_every_measured_run_fits_on_its_gpu(cases):
    # A run with unstated settings (micro-batch, recomputation) needs one way to fit.
    assert len(cases) > 100
    misses = set()
    for case in cases:
        fits = memory_breakdown(job_context(case.model, case.cluster, case.layouts)).total <= case.cluster.gpu.memory_gib
        if not fits.reshape(-1, case.alternatives).any(axis=1).all():
            misses.add(case.id)
    assert misses == KNOWN_MISSES


def test_moe_runs_fit_with_experts_sharded_over_ep(cases):
    # GPT-OSS-120B (117B parameters, 18 B each = 2.1 TB of states) trained on 64 GB200s with ep 64:
    # only sharding the experts over ep (and their states over edp) brings it under 186 GB
    case = next(c for c in cases if c.id == "megatron_bridge_25_11_dgx_gb200_gpt_oss_120b_64gpu_bf16")
    assert case.layouts.ep[0] == 64
    mem = memory_breakdown(job_context(case.model, case.cluster, case.layouts))
    assert (mem.total <= 186).any()
    # without expert parallelism every GPU holds all 117B 16-bit weights: 2 B x 117e9 = 218 GiB > 186
    cols = {**case.layouts.columns(), "ep": np.ones(len(case.layouts), dtype=np.int64)}
    unsharded = memory_breakdown(job_context(case.model, case.cluster, type(case.layouts)(**cols)))
    assert (unsharded.weights > 2 * 116e9 / 2**30).all() and (unsharded.total > 186).all()


def test_fsdp_70b_on_40gb_fits_only_because_zero3_gathers_one_layer_at_a_time(cases):
    # llm-foundry MPT-70B trained on 128 A100 40GB with FSDP (mb 4, full recomputation)
    case = next(c for c in cases if c.id == "mpt_llmfoundry_a100_40gb_70b_seq2048_128gpu")
    mem = memory_breakdown(job_context(case.model, case.cluster, case.layouts))
    assert mem.total[0] <= 40
    # the shards: 18 bytes x 65e9 params / 128 GPUs ~ 8.5 GiB, far from the whole model's 1.1 TiB
    shards = (mem.weights + mem.gradients + mem.optimizer)[0]
    assert 5 < shards < 20
    assert np.isfinite(shards)


def test_never_fitted_runs_fit_too_deepspeed_azure_with_its_offload():
    # data/extra-checks: every run fits its GPU as it ran. DeepSpeed on Azure (1T and 2T on 1,024 A100 80GB, ZeRO-3)
    # offloaded optimizer states and activations to the nodes' 1.7 TB: replayed with offload both they fit; without
    # it, the 2T model does not fit (142 GiB).
    from planner.fidelity.calibration import load_extra_checks
    from planner.layout.space import single_layout

    misses = []
    for case in load_extra_checks():
        total = memory_breakdown(job_context(case.model, case.cluster, case.layouts)).total[0]
        if total > case.cluster.gpu.memory_gib:
            misses.append(case.id)
    # BLOOM's prequel at micro-batch 2 (tp 8 pp 2, fp16, DeepSpeed ZeRO-1) printed 76 GB at its peak; the planner
    # said 81 GiB with fp32 main gradients. DeepSpeed's fp16 ZeRO-1 keeps them in fp16 (deepspeed_fp16_grads):
    # 2 B less on each of its 11.6e9 parameters (21.6 GiB), now 59 GiB.
    assert misses == []
    two_t = next(c for c in load_extra_checks() if c.id == "ds_azure_2t_1024gpu_mb8")
    row = two_t.layouts.row(0)
    assert row["offload"] == "both"
    kept = single_layout(**{**row, "offload": "none"})
    assert memory_breakdown(job_context(two_t.model, two_t.cluster, kept)).total[0] > 80
