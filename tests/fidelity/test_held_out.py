"""Held-out published runs (data/calibration/new-sources.yaml) as planner cases: every row read, the
step time derived by hand, the H100 96GB preset and the torchtitan and nanotron profiles."""
from __future__ import annotations

import re

import numpy as np
import pytest

from planner.fidelity.error_bands import error_band
from planner.fidelity.held_out import HELD_OUT_FILE, load_held_out
from planner.specs.loading import load_gpu, load_stack


@pytest.fixture(scope="module")
def held():
    return load_held_out()


@pytest.fixture(scope="module")
def by_id(held):
    return {r.id: r for r in held.runs}


def test_the_loader_reads_every_row(held):
    ids = re.findall(r"^- id: (\S+)$", HELD_OUT_FILE.read_text(), flags=re.M)
    assert len(ids) == 1144
    # Every row is a case or listed with its reason; today every one can be predicted.
    assert sorted([r.id for r in held.runs] + [u.id for u in held.unpredictable]) == sorted(ids)
    assert held.unpredictable == []
    sources = {r.source for r in held.runs}
    assert sources == {"torchtitan", "playbook", "nemo_longseq"}
    for r in held.runs:
        assert r.measured_s > 0 and r.case.kind == "iteration" and r.derivation
        assert r.gpus == int(np.atleast_1d(r.case.layouts.gpus)[-1])


def test_torchtitan_step_time_from_tokens_per_second_by_hand(by_id):
    # Table 1, FSDP, 8 GPUs: global batch 16 x 8,192 tokens = 131,072 tokens a step; 5,762 tokens/s
    # per GPU x 8 GPUs = 46,096 tokens/s; 131,072 / 46,096 = 2.8435 s.
    run = by_id["tt1212_t1_8b_8gpu_fsdp"]
    assert run.measured_s == pytest.approx(2.8435, abs=5e-4)
    assert "16 x 8192 / (5762 x 8)" in run.derivation
    # Table 2, FSDP 1 x CP 8: one sequence of 262,144 tokens; 548 x 8 = 4,384 tokens/s -> 59.796 s.
    assert by_id["tt1212_t2_8b_8gpu_fsdp1_cp8"].measured_s == pytest.approx(262144 / 4384, rel=1e-12)


def test_playbook_step_time_by_hand_and_as_its_notes_derive_it(held, by_id):
    # 1B on one node, dp 8, mbs 2, grad_accum 16: 256 x 4,096 = 1,048,576 tokens; 40,150 x 8 =
    # 321,200 tokens/s; 1,048,576 / 321,200 = 3.2646 s (the row's notes: "= 3.2646").
    run = by_id["usp_1b_n1_dp8_tp1_pp1_mbs2_ga16_z0"]
    assert run.measured_s == pytest.approx(3.2646, abs=5e-5)
    lay = run.case.layouts
    assert (int(lay.dp[0]), int(lay.micro_batch[0]), int(lay.num_microbatches[0]), int(lay.zero[0])) == (8, 2, 16, 0)
    # Every Playbook row: the same formula as the collector's "Derived iteration_s" in its notes.
    for r in held.runs:
        if r.source == "playbook":
            printed = float(re.search(r"Derived iteration_s = [^=]*= ([0-9]+(?:\.[0-9]+)?)", r.source_notes).group(1))
            assert r.measured_s == pytest.approx(printed, rel=1e-3, abs=1e-4), r.id


def test_nemo_step_time_from_model_tflops_by_hand(by_id):
    # Llama 2 7B at 4K, 4 GPUs, 768 TFLOP/s per GPU, global batch 1,024. NeMo's llama2 FLOPs:
    # gbs s L h^2 (12 + 12 g/a + 18 f/h + 12 s/h + 6 V/(L h)) with g/a = 32/32, f/h = 11,008/4,096
    # = 2.6875, s/h = 1, V/(L h) = 32,000/131,072 = 0.244140625:
    # 12 + 12 + 48.375 + 12 + 1.46484375 = 85.83984375;
    # 1,024 x 4,096 = 4,194,304 tokens; 32 x 4,096^2 = 536,870,912; 4,194,304 x 536,870,912 =
    # 2.2518e15; x 85.83984375 = 1.932941e17 FLOPs; / (768e12 x 4 = 3.072e15 FLOP/s) = 62.921 s.
    flops = 4_194_304 * 536_870_912 * 85.83984375
    assert flops == pytest.approx(1.932941e17, rel=1e-6)
    run = by_id["nemo_longseq_llama2_7b_h100_4k"]
    assert run.measured_s == pytest.approx(flops / 3.072e15, rel=1e-12)
    assert run.measured_s == pytest.approx(62.921, abs=1e-3)


def test_what_is_not_expressible_is_said(by_id):
    # Table 6's stack text omits what its title states (torch.compile, Float8, AsyncTP): both are read.
    notes = by_id["tt1212_t6_405b_512gpu_fsdp2_cp4"].notes
    for item in ("Float8", "async TP", "CP all-gather", "FSDP2 without resharding under PP"):
        assert item in notes
    # torch.compile is expressed (training.torch_compile), read from the title as well
    assert by_id["tt1212_t6_405b_512gpu_fsdp2_cp4"].case.model.training.torch_compile
    assert not by_id["tt1212_t1_8b_8gpu_fsdp"].case.model.training.torch_compile
    # Local batch 8 a DP rank in 8 micro-batches (torchtitan's default: as many as pp ranks) of 1.
    assert "8 micro-batches of 1" in notes
    assert by_id["tt1212_t5_405b_512gpu_1f1b"].case.layouts.micro_batch[0] == 4  # local batch 32 / 8
    # interleaved 1F1B: torchtitan's default of 2 stages per rank
    assert by_id["tt1212_t5_405b_512gpu_interleaved1f1b"].case.layouts.vpp.tolist() == [2]
    assert by_id["tt1212_t4_70b_256gpu_tp"].unexpressed == (
        "torchao Float8 linears (priced as per-tensor FP8 GEMMs, tensorwise current scaling)",)
    assert by_id["tt1212_t4_70b_256gpu_tp"].case.model.training.fp8_recipe == "tensorwise"
    assert "async TP" in by_id["usp_1b_n64_dp2_tp32_pp8_mbs2_ga64_z1"].notes
    assert by_id["usp_1b_n1_dp8_tp1_pp1_mbs2_ga16_z0"].notes == "every stated setting expressed"
    assert by_id["tt1212_t3_8b_128gpu_fsdp"].group == "tt_t3"  # "ranking_group=tt_t3. Peak ..."


def test_torchtitan_runs_at_the_500_w_cap_of_the_96gb_preset(by_id):
    gpu = by_id["tt1212_t1_8b_8gpu_fsdp"].case.cluster.gpu
    assert gpu.name == "h100-sxm-96gb" and gpu.memory_gib == 96
    assert gpu.peak_tflops.bf16 == pytest.approx(989 * 0.92)
    # NeMo ran on DGX H100s: the 80GB preset, uncapped, 8 GPUs and 50 GB/s a GPU between nodes.
    cluster = by_id["nemo_longseq_llama2_7b_h100_1024k"].case.cluster
    assert (cluster.gpu.name, cluster.gpu.peak_tflops.bf16, cluster.nodes, cluster.node.network_gbps) == (
        "h100-sxm-80gb", 989, 128, 50)


def test_the_h100_96gb_preset_loads_with_the_80gb_efficiencies():
    gpu, ref = load_gpu("h100-sxm-96gb"), load_gpu("h100-sxm-80gb")
    assert (gpu.name, gpu.memory_gib, gpu.hbm_gbps, gpu.tdp_w) == ("h100-sxm-96gb", 96, 2400, 700)
    assert gpu.peak_tflops == ref.peak_tflops
    # copied, not fitted: a refit of the 80GB preset must be carried over by hand (or this fails)
    assert gpu.efficiency == ref.efficiency
    assert 500 in [c.cap_w for c in gpu.power_caps]


def test_torchtitan_is_fitted_and_nanotron_never():
    # benchmarks/calibrate.py: torchtitan's runs fit its stack's constants (STACK_ONLY_SOURCES), the
    # Playbook's are predicted only (PREDICTED_SOURCES): nanotron's entry holds their errors, no constant.
    titan, nano, fsdp = load_stack("torchtitan"), load_stack("nanotron"), load_stack("pytorch-fsdp")
    assert titan.gpus["h100-sxm-96gb"].fitted_on == ("torchtitan",)
    assert titan.gpus["h100-sxm-96gb"].layer_overhead_us is not None
    entry = nano.gpus["h100-sxm-80gb"]
    assert entry.fitted_on == () and len(entry.error_cases) == 14  # the Playbook's 14 jobs
    # the priors counted in nanotron's code (configs/stacks/nanotron.yaml): a layer's forward 67 calls x 8 us,
    # the accumulator's 6 calls a layer over 3 passes, a micro-batch's 92 calls + 3 collectives x 30 us, and
    # 9 calls x 8 us for each of 98-170 tensors a step (7.4-12.6 ms: 10 ms) ...
    counted = dict(layer_launch_us=67 * 8, layer_overhead_us=6 * 8 / 3, microbatch_overhead_us=92 * 8 + 3 * 30,
                   step_overhead_s=0.01)
    for k, v in counted.items():
        assert getattr(nano, k) == v
        assert getattr(entry, k) in (None, getattr(nano, k))  # ... and nothing fitted in their place
    assert fsdp.layer_launch_us != nano.layer_launch_us
    assert titan.attention == nano.attention == "flash" and nano.dp_comm_overlap and not nano.tp_comm_overlap


def test_stack_specific_settings_and_the_band_they_get(by_id):
    assert load_stack("torchtitan").cp_comm == "all_gather"  # context_parallel_rotate_method default
    assert load_stack("torchtitan").loss_fp32_passes == 5.5 and load_stack("nanotron").loss_fp32_passes == 6.5
    run = by_id["usp_3b_n4_dp32_tp1_pp1_mbs2_ga4_z1"]
    band = error_band(run.case.model, run.case.cluster.gpu.name, np.array([run.gpus]))
    assert band.pct[0] > 0 and "measured jobs, never fitted" in band.basis and "nanotron" in band.basis


def test_rows_of_one_job_become_one_fitting_case_that_predicts_each_row_as_alone(held):
    from planner.fidelity.calibration import predict
    from planner.fidelity.held_out import fitting_cases

    cases = fitting_cases(held)
    # 14 Playbook jobs (1B and 3B on 1-64 nodes: 2 x 7), NeMo's 9 rows one case each (their unstated
    # micro-batch and recomputation are alternatives), torchtitan's 18 rows as jobs of one model and GPU count.
    assert sum(c.source == "playbook" for c in cases) == 14
    assert sum(c.source == "nemo_longseq" for c in cases) == 9
    assert sum(np.atleast_1d(c.measured["iteration_s"]).size for c in cases) == 1144
    job = next(c for c in cases if c.source == "playbook" and c.id.startswith("playbook:usp_1b_n1_"))
    alone = [r for r in held.runs if r.source == "playbook" and r.case.model is job.model and r.case.cluster is job.cluster]
    assert len(alone) == np.atleast_1d(job.measured["iteration_s"]).size > 1
    together = predict(job)["iteration_s"]
    assert together == pytest.approx([predict(r.case)["iteration_s"] for r in alone], rel=1e-12)
    assert np.atleast_1d(job.measured["iteration_s"]) == pytest.approx([r.measured_s for r in alone])


def test_torchtitans_op_level_checkpointing_is_priced_as_such(by_id):
    # torchtitan's "selective" (ac_mode op) is the stack's op-level policy, expressed: nothing said of it
    sel = by_id["tt1212_t1_8b_8gpu_fsdp"]
    assert sel.case.model.training.stack.selective_ac == "op" and sel.case.model.training.recompute_modules is None
    assert not any("checkpointing" in u for u in sel.unexpressed)
    # Both 8B rows on 8 GPUs trained (82.4 and 77.0 GiB measured peaks): the planner fits them now.
    assert sel.fits and by_id["tt1212_t1_8b_8gpu_fsdp_torch_compile"].fits
