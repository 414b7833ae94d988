"""Predicted peak memory against peaks the sources print (issue 37 item 7: within 5 %); the whole
table is benchmarks/memory.py."""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest

from planner.costs.context import job_context
from planner.costs.memory import memory_breakdown
from planner.fidelity.calibration import load_cases
from planner.fidelity.held_out import load_held_out


@lru_cache(maxsize=1)
def _cases() -> dict:
    return {c.id: c for c in load_cases()} | {r.case.id: r.case for r in load_held_out().runs}


def _predicted_gib(case_id: str) -> tuple[float, float]:
    """(total, GPU reserve) of the run's busiest GPU [GiB]."""
    case = _cases()[case_id]
    total = float(np.atleast_1d(memory_breakdown(job_context(case.model, case.cluster, case.layouts)).total)[0])
    return total, case.cluster.gpu.memory_reserve_gib


# Yeung et al. 2024 Table 5, baseline rows: max_memory_allocated in Megatron's MB / 1024 (GiB).
@pytest.mark.parametrize("case_id, measured_gib", [
    ("vocabpar_baseline_pp8_seq2048_v32k", 14.86),
    ("vocabpar_baseline_pp8_seq4096_v256k", 31.64),
    ("vocabpar_baseline_pp32_seq4096_v256k", 73.05),
])
def test_vocabpar_allocated_peaks(case_id, measured_gib):
    total, reserve = _predicted_gib(case_id)
    # max allocated: the caching allocator's live tensors, without the CUDA context, NCCL's buffers
    # and fragmentation the reserve stands for
    assert abs((total - reserve) / measured_gib - 1) < 0.05


# torchtitan benchmarks/llama3_h100_202412_torchtitan.md (Tables 1-6): max_memory_reserved, GiB.
@pytest.mark.parametrize("case_id, measured_gib", [
    ("tt1212_t1_8b_8gpu_fsdp", 82.4),  # op-level SAC, fp32 cross-entropy, FSDP2 root kept gathered
    ("tt1212_t2_8b_8gpu_fsdp8_cp1", 83.9),  # full AC, 32k tokens: the loss's fp32 logits dominate
    ("tt1212_t3_8b_128gpu_fsdp_torch_compile_float8", 61.8),  # torchao Float8 keeps no FP8 weight copy
    # Not yet: the 405B pipeline runs (Tables 5, 6) and the 70B FSDP + TP run (Table 4) stay 5-23 %
    # under with every mechanism found so far (the PP stage's unsharded parameters and fp32 gradients
    # included): a mechanism is missing, not a constant.
    pytest.param("tt1212_t6_405b_512gpu_fsdp8_cp1", 75.3, marks=pytest.mark.xfail(strict=True, reason="issue 37 item 7: PP gap")),
    pytest.param("tt1212_t4_70b_256gpu_tp", 71.9, marks=pytest.mark.xfail(strict=True, reason="issue 37 item 7: FSDP+TP gap")),
])
def test_torchtitan_reserved_peaks(case_id, measured_gib):
    total, _ = _predicted_gib(case_id)
    assert abs(total / measured_gib - 1) < 0.05
