"""The fidelity targets of the README, asserted on the published measurements in data/calibration."""
from __future__ import annotations

import numpy as np
import pytest

from planner.fidelity.calibration import errors


@pytest.fixture(scope="module")
def rows(calibration_cases):
    return errors(calibration_cases)


def _errs(rows, prefix, metric=None):
    e = np.array([r[4] for r in rows if r[0].id.startswith(prefix) and (metric is None or r[1] == metric)])
    assert e.size, prefix
    return np.abs(e)


# Regression bounds on the fitted errors (benchmarks/calibrate.py fits the shipped constants on
# these cases; the README's table has them beside the leave-one-source-out errors): a change to a
# cost model that breaks a source shows here. Targets of the issue are in the README, not here.
def test_korthikanti_table5_iteration_time(rows):
    e = _errs(rows, "korthikanti2022_t5", "iteration_s")
    assert e.size == 8
    assert e.mean() <= 0.07 and e.max() <= 0.12


def test_korthikanti_figure1_memory_within_5_percent(rows):
    e = _errs(rows, "korthikanti2022_fig1")
    assert e.size == 16 and e.max() <= 0.05


def _dgxc_bf16(rows):
    return [r for r in rows if "fp8" not in r[0].id and "llama31" not in r[0].id]


def test_h100_within_3_percent_mean(rows):
    e = _errs(_dgxc_bf16(rows), "dgxc_", "iteration_s")
    assert e.size == 13 and e.mean() <= 0.03


def test_h100_fp8_and_context_parallel_runs(rows):
    # GPT-3 175B FP8 on 128-2048 H100s; Llama 3.1 8B with cp 2 in BF16 and FP8 on 8-128 H100s
    fp8 = _errs(rows, "dgxc_v24111_gpt3_175b_fp8")
    cp = _errs(rows, "dgxc_v24111_llama31_8b")
    assert fp8.size == 5 and cp.size == 10
    assert fp8.mean() <= 0.05 and cp.mean() <= 0.05


def test_other_stacks_and_vtrain(rows):
    assert _errs(rows, "narayanan2021").mean() <= 0.05
    assert _errs(rows, "mpt_llmfoundry").mean() <= 0.05
    assert _errs(rows, "vocabpar_").mean() <= 0.05
    assert _errs(rows, "vtrain_single").mean() <= 0.08
    assert _errs(rows, "vtrain_multi").mean() <= 0.10  # 0.15 before vTrain's stated recomputation


def test_moe_runs_with_their_recipes_settings(rows):
    # NeMo Mixtral 8x7B (B200, GB200) and Megatron-Bridge 26.06 Qwen3-30B-A3B on GB200/GB300/B300,
    # replayed with BF16 gradient reduction, HybridEP and the all-to-all overlap of their recipes
    # (before: Mixtral on B200 +62 %, Qwen3 +15 to +45 %; Qwen3 within 4 % while the loss passes were
    # fitted to 25, within 3 % with Megatron's counted 6.5 and B200 and GB200 sharing a chip's
    # constants, which leaves Mixtral on GB200 +11 % with the FP8 GEMMs at their 80 % bound).
    assert _errs(rows, "nemo_25").max() <= 0.13
    qwen = [r for r in rows if r[0].id.startswith("megatron_bridge_26_06_dgx_") and "qwen3" in r[0].id
            and "h100" not in r[0].id]
    assert len(qwen) == 3 and max(abs(r[4]) for r in qwen) <= 0.05


def test_every_iteration_case_is_replayed(rows):
    ids = {r[0].id for r in rows}
    assert "korthikanti2022_530B_dp8_2240gpu_selective_seqpar" in ids
    assert sum(i.startswith("dgxc_") for i in ids) == 28  # 13 BF16, 5 FP8, 10 with context parallelism
    assert sum(i.startswith(("megatron_bridge_", "nemo_25")) for i in ids) == 17  # MoE and Blackwell
    assert sum(i.startswith("narayanan2021") for i in ids) == 10
    assert sum(i.startswith("vocabpar_") for i in ids) == 24
    assert sum(i.startswith("mpt_llmfoundry") for i in ids) == 7
    assert sum(r[0].source == "vtrain" for r in rows) == 1549


def test_model_flops_reproduce_the_published_mfu(calibration_cases):
    # Korthikanti Table 5 'present work' 175B: MFU 51.4 % at 13.75 s on 64 GPUs of 312 TFLOP/s.
    # 72*B*s*l*h^2*(1 + s/6h + V/12hl) with B=64, s=2048, l=96, h=12288, V=51200 = 1.4109e17 FLOPs;
    # / (13.75 s * 64 * 312e12) = 0.5139.
    from planner.costs.flops import published_model_flops_per_step

    case = next(c for c in calibration_cases if c.id == "korthikanti2022_t5_175B_selective_seqpar")
    flops = published_model_flops_per_step(case.model)
    # 72 * 64 * 2048 * 96 * 12288**2 = 1.36808e17; times (1 + 0.027778 + 0.0036169) = 1.41103e17
    # (rel=0.5 % covers the rounding of the printed constants)
    assert flops == pytest.approx(1.41103e17, rel=5e-3)
    assert flops / (13.75 * 64 * 312e12) == pytest.approx(0.514, abs=0.003)


def test_moe_and_blackwell_runs_regression_bound(rows):
    # Megatron-Bridge and NeMo MoE/Blackwell runs: 21.7 % and 31.7 % mean with the shipped fit (README,
    # Fidelity: the 5 % is not met; a missing MoE mechanism). A bound against regressions.
    assert _errs(rows, "megatron_bridge_").mean() <= 0.25
    assert _errs(rows, "nemo_25").mean() <= 0.35


def test_yeung_runs_as_their_artifact_ran_them(calibration_cases):
    # sail-sg/VocabularyParallelism@6191c3b: pretrain_gpt.sh has --use-flash-attn and no recomputation,
    # vocabularies are 32,000-256,000 (exp_one_host.csv); the MFU is model FLOPs (show_result_full_exp.py:
    # 3 (2 b s h V + l (8 b s h^2 + 4 b s^2 h + 4 b s h f))). 4B model, pp 8, seq 2048, V 32,000, 128
    # micro-batches of 1: per micro-batch 2 s h V = 402,653,184,000; a layer 8 s h^2 = 154,618,822,656,
    # 4 s^2 h = 51,539,607,552, 4 s h f = 309,237,645,312 (515,396,075,520 for each of 32 layers):
    # 3 x 16,895,327,600,640 x 128 = 6.48781e15 FLOPs at 46.16 % of 312 TFLOP/s on 8 GPUs: 5.6311 s.
    case = next(c for c in calibration_cases if c.id == "vocabpar_baseline_pp8_seq2048_v32k")
    assert case.model.vocab == 32000 and case.model.training.attention == "flash"
    assert list(case.layouts.recompute) == [0]  # none
    assert case.measured["iteration_s"] == pytest.approx(6.48781e15 / (0.4616 * 312e12 * 8), rel=1e-5)
    assert case.measured["iteration_s"] == pytest.approx(5.6311, abs=1e-3)
