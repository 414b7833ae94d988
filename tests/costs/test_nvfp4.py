"""NVFP4 (issue 40 item 1): each priced term by hand, the precision refused where the GPU has no FP4 tensor
cores, and a Llama 3.1 8B search on B200s faster than FP8's but never above the FP4 peak.

Toy GPU for the terms (no SMs: no wave quantisation; gemm_half_gflop 0: no saturation): BF16 100 TFLOP/s at
gemm 0.5 (50e12 achieved), NVFP4 400 TFLOP/s at gemm_fp4 0.5 (200e12 achieved), HBM 1,000 GB/s at 0.5
(500e9 B/s achieved)."""
from __future__ import annotations

from dataclasses import replace

import pytest
from pytest import approx

from planner.costs.compute import _gemm_set, gemm_efficiency
from planner.errors import SpecError
from planner.search import check_precision, search
from planner.specs import GpuSpec
from planner.specs.layers import Matrix
from planner.specs.loading import load_cluster, load_model
from planner.specs.precision import BF16, FP8, NVFP4, precision
from planner.units import TERA

M, K, N = 4096, 1024, 4096  # one column-parallel GEMM of 4,096 rows, unsplit
FLOPS = 2 * M * K * N  # 34,359,738,368
ELEMENTS = M * K + K * N + M * N  # 4,194,304 + 4,194,304 + 16,777,216 = 25,165,824 operand and output elements


@pytest.fixture
def fp4_gpu(toy_gpu_data) -> GpuSpec:
    return GpuSpec.model_validate(toy_gpu_data(efficiency={"gemm_fp4": 0.5},
                                               peak_tflops=dict(bf16=100.0, fp16=100.0, fp8=200.0, nvfp4=400.0)))


def test_nvfp4_bytes_per_value():
    # E2M1 is half a byte; one E4M3 scale per 16 values adds 1/16: 0.5625 bytes an operand element
    assert NVFP4.gemm_input_bytes == 0.5 + 1 / 16 == 0.5625
    # Transformer Engine's cached row- and column-wise NVFP4 weight copies beside the BF16 weights: 1.125 B;
    # BF16 weights 2 + FP32 gradients 4 + FP32 master and Adam moments 12 (unchanged) = 19.125 B per parameter
    assert NVFP4.weight_cache_bytes == 2 * 0.5625 == 1.125
    assert NVFP4.state_bytes == 2 + 1.125 + 4 + 12 == 19.125
    # a cast reads 16 bits and writes the row-wise copy; the random Hadamard transform of the wgrad (column-wise)
    # copy reads the 16-bit tensor again and writes it: 2 x (2 + 0.5625) = 5.125 bytes an element
    assert NVFP4.quantize_bytes == 2 * (2 + 0.5625) == 5.125
    assert NVFP4.peak == "nvfp4" and NVFP4.mfu_peak == "bf16" and NVFP4.is_fp4 and NVFP4.is_fp8
    assert not FP8.is_fp4 and precision("nvfp4") is NVFP4
    # saved GEMM inputs: the quantized copy, 16 bits in the share a recipe keeps in BF16
    assert NVFP4.stored_gemm_input_bytes == 0.5625
    paper = replace(NVFP4, bf16_gemm_share=10 / 62)
    assert paper.stored_gemm_input_bytes == approx(52 / 62 * 0.5625 + 10 / 62 * 2)  # 0.7944


def test_nvfp4_gemm_and_casts_by_hand(fp4_gpu):
    mat = (Matrix("w", K, N, "col"),)
    time, cast_in, cast_out = _gemm_set(mat, M, 1, fp4_gpu, NVFP4)
    # FLOPs at the FP4 rate: 3.436e10 / 200e12 = 171.8 us; operands at 0.5625 B: 14,155,776 B / 500e9 = 28.3 us
    assert time == approx(FLOPS / 200e12 + 0.5625 * ELEMENTS / 500e9)
    assert time == approx(171.80e-6 + 28.31e-6, rel=1e-4)
    # the forward casts the input (4,096 x 1,024) and the backward the output gradient (4,096 x 4,096), 5.125 B each
    assert cast_in == 5.125 * M * K == 21_495_808
    assert cast_out == 5.125 * M * N == 85_983_232


def test_a_share_kept_in_bf16_runs_at_the_bf16_rate(fp4_gpu):
    # The NVFP4 paper's 12B run keeps the first 2 and last 8 of its 62 blocks in BF16 (arXiv 2509.25149 Sec. 4):
    # 10/62 of the linear GEMM FLOPs at 50e12 with 2-byte operands and no cast, 52/62 as above
    mat = (Matrix("w", K, N, "col"),)
    paper = replace(NVFP4, bf16_gemm_share=10 / 62)
    time, cast_in, cast_out = _gemm_set(mat, M, 1, fp4_gpu, paper)
    fp4 = FLOPS / 200e12 + 0.5625 * ELEMENTS / 500e9  # 200.1 us
    bf16 = FLOPS / 50e12 + 2 * ELEMENTS / 500e9  # 687.2 + 100.7 = 787.9 us
    assert time == approx(52 / 62 * fp4 + 10 / 62 * bf16)  # 167.8 + 127.1 = 294.9 us
    assert time == approx(294.9e-6, rel=1e-3)
    assert cast_in == approx(52 / 62 * 5.125 * M * K) and cast_out == approx(52 / 62 * 5.125 * M * N)


def test_fp4_efficiency_falls_back_on_fp8_then_gemm(toy_gpu_data):
    def gpu(**eff):
        return GpuSpec.model_validate(toy_gpu_data(efficiency=eff, peak_tflops=dict(bf16=100.0, fp16=100.0, nvfp4=400.0)))

    assert gemm_efficiency(gpu(gemm_fp4=0.6, gemm_fp8=0.4), NVFP4) == 0.6
    assert gemm_efficiency(gpu(gemm_fp8=0.4), NVFP4) == 0.4  # no published NVFP4 fit: the FP8 prior
    assert gemm_efficiency(gpu(), NVFP4) == 0.5  # the toy's gemm
    assert gemm_efficiency(gpu(gemm_fp4=0.6, gemm_fp8=0.4), FP8) == 0.4  # FP8 never reads gemm_fp4
    assert gemm_efficiency(gpu(gemm_fp4=0.6), BF16) == 0.5


@pytest.mark.parametrize("gpu, tflops", [("b200", 9000), ("gb200", 9800), ("b300", 13500), ("gb300", 14700)])
def test_blackwell_presets_state_the_fp4_peak(gpu, tflops, preset):
    # FP4 is 2x FP8 on Blackwell (HGX B200 / GB200 NVL72 datasheets) and 3x on Blackwell Ultra (15 vs 5 PFLOPS
    # dense per GB300 GPU), on each preset's own FP8 clock basis
    data = preset(gpu)
    assert data["peak_tflops"]["nvfp4"] == tflops == data["peak_tflops"]["fp8"] * (3 if gpu.endswith("300") else 2)


@pytest.mark.parametrize("cluster", ["dgx-h100-1024", "dgx-a100-1024"])
def test_nvfp4_without_fp4_tensor_cores_is_bad_input(cluster):
    c = load_cluster(cluster)
    m = load_model("llama3.1-8b")
    m = m.model_copy(update={"training": m.training.model_copy(update={"precision": "nvfp4"})})
    with pytest.raises(SpecError, match=rf"needs a nvfp4 peak, and the {c.gpu.name} preset has none .*Hopper and "
                                        "Ampere have none") as exc:
        check_precision(m, c)
    assert exc.value.path == "training.precision"


def test_llama8b_on_b200s_nvfp4_beats_fp8_within_the_fp4_peak():
    c = load_cluster("dgx-b200-1024")
    base = load_model("llama3.1-8b")
    best = {}
    for name in ("fp8", "nvfp4"):
        m = base.model_copy(update={"training": base.training.model_copy(update={"precision": name})})
        best[name] = search(m, c, gpus=64).best
    fp8, fp4 = best["fp8"], best["nvfp4"]
    assert fp4.step_time_s < fp8.step_time_s
    # faster than FP8, but not by more than the GEMMs' 2x: attention, norms, logits and communication stay
    assert fp8.step_time_s / fp4.step_time_s < 2
    # within the FP4 peak (the runtime check within_peak prices against it); mfu is against BF16, mfu_fp8_peak
    # against the peak the GEMMs run at, here NVFP4's 9,000 TFLOP/s
    assert fp4.model_tflops_per_gpu * TERA <= c.gpu.peak_flops("nvfp4")
    assert fp4.mfu_fp8_peak == approx(fp4.model_tflops_per_gpu / 9000)
    assert fp4.mfu == approx(fp4.model_tflops_per_gpu / 2250)
