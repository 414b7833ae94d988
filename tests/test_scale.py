"""The planner must not get more optimistic as the GPU count grows (issue: scale)."""
from __future__ import annotations

import numpy as np

from planner.specs.loading import load_cluster, load_model
from planner.score import score
from planner.search import with_global_batch
from planner.layout.space import single_layout


def _weak_scaling(zero: int) -> np.ndarray:
    # Llama 3 8B, tp 8, 4 micro-batches of 1 per data-parallel rank: the work per GPU is the same at
    # every size, so only communication can change the step time, and it must not shrink.
    model, cluster = load_model("llama3-8b"), load_cluster("big-h100-131072")
    steps = []
    for dp in (1, 8, 64, 512, 4096, 16384):
        m = with_global_batch(model, 4 * dp)
        lay = single_layout(dp=dp, tp=8, pp=1, micro_batch=1, num_microbatches=4, zero=zero if dp > 1 else 0)
        steps.append(float(score(m, cluster, lay).step_time_s[0]))
    return np.array(steps)


def test_weak_scaling_never_gets_faster():
    for zero in (0, 1, 3):
        steps = _weak_scaling(zero)
        assert np.all(np.diff(steps) >= -1e-12), (zero, steps)


def test_zero3_pays_more_than_zero1_at_scale():
    # ZeRO-3 gathers every layer's parameters per micro-batch; at 131,072 GPUs its ring latency
    # (16,383 network steps a pass) must show.
    assert _weak_scaling(3)[-1] > _weak_scaling(1)[-1]


def test_ptdp_beats_zero3_for_175b_as_narayanan_2021_found():
    # Narayanan et al. 2021 Sec. 5.2 (Fig. 10): GPT-3 175B, global batch 1536, 384 and 768 A100s:
    # PTD-P (Megatron) is faster than ZeRO-3 without model parallelism (DeepSpeed), more so at 768.
    from planner.constraints import Limits
    from planner.search import search, with_stack

    model = with_global_batch(load_model("gpt3-175b"), 1536)
    cluster = load_cluster("dgx-a100-1024")
    ratios = []
    for gpus in (384, 768):
        zero3 = search(with_stack(model, "deepspeed-zero3"), cluster, gpus=gpus, top_k=1,
                       limits=Limits(fixed=dict(tp=1, pp=1, zero=3))).best
        ptdp = search(with_stack(model, "megatron-lm-2022"), cluster, gpus=gpus, top_k=1).best
        assert ptdp.step_time_s < zero3.step_time_s, gpus
        ratios.append(zero3.step_time_s / ptdp.step_time_s)
    assert ratios[1] >= ratios[0] * 0.98  # the gap does not close with more GPUs
