"""vTrain's runs are replayed with the settings vTrain's own validation configs state."""
from __future__ import annotations

import numpy as np

from planner.fidelity.calibration import RECIPES, _recipe_settings, load_cases
from planner.layout.space import RECOMPUTE_FULL


def test_every_run_recomputes_and_nodes_have_800_gbit(vtrain_run_groups):
    # config/validation/*/*.json (VIA-Research/vTrain@f8dda84): "use_checkpoint": true in all 1,548,
    # "inter_node_bandwidth": 800 Gb/s per 8-GPU node = 800 / 8 bits / 8 GPUs = 12.5 GB/s per GPU.
    groups = vtrain_run_groups
    assert sum(len(t) for *_, t in groups) == 1549
    for _, model, cluster, lay, _ in groups:
        assert np.all(lay.recompute == RECOMPUTE_FULL)
        assert cluster.node.network_gbps == 12.5
        assert model.training.stack.name == "megatron-deepspeed"


def test_vtrain_cases_have_no_alternatives(calibration_cases, vtrain_run_groups):
    # The recomputation is stated, so no run picks among settings any more.
    cases = [c for c in calibration_cases if c.source == "vtrain"]
    assert [c.id for c in cases] == [g[0] for g in vtrain_run_groups]
    assert all(c.alternatives == 1 for c in cases)


def test_recipe_settings_of_the_benchmark_runs():
    # Megatron-Bridge 26.06 Qwen3-30B-A3B MXFP8 on GB300: HybridEP (flex), EP all-to-all overlap,
    # BF16 gradient reduction, FP8 parameter gather (bf16_with_mxfp8_mixed), full-iteration CUDA graphs.
    tr, moe = _recipe_settings("megatron_bridge_26_06_dgx_gb300_qwen3_30b_a3b_8gpu_mxfp8", "mxfp8")
    assert tr == dict(grad_reduce_dtype="bf16", moe_dispatcher="flex", moe_a2a_overlap=True, fp8_param_gather=True,
                      cuda_graph_impl="full_iteration", te_op_fuser=True)
    assert moe == {}
    # GPT-OSS MXFP8 on GB200 in 26.06 also fuses its expert MLP (cutedsl_fused_grouped_mlp); on B300
    # it ran the BF16 V2 recipe: Transformer Engine graphs of parts of a layer, no op fuser.
    tr, _ = _recipe_settings("megatron_bridge_26_06_dgx_gb200_gpt_oss_120b_64gpu_mxfp8", "mxfp8")
    assert tr["te_op_fuser"] and tr["cuda_graph_impl"] == "full_iteration"
    tr, _ = _recipe_settings("megatron_bridge_26_06_dgx_b300_gpt_oss_120b_64gpu_mxfp8", "mxfp8")
    assert "te_op_fuser" not in tr and tr["cuda_graph_impl"] == "transformer_engine"
    # The H100 run of 26.06 had no graphs: its dropless dispatch syncs once per MoE layer forward.
    tr, _ = _recipe_settings("megatron_bridge_26_06_dgx_h100_qwen3_30b_a3b_16gpu_fp8", "fp8")
    assert "cuda_graph_impl" not in tr
    # 26.04.01 GPT-OSS BF16 on B200: alltoall, no overlap; the BF16 gradient reduction and the
    # recipe's recompute_modules ["layernorm", "moe_act"] (gpt_oss_workload_base_configs.py@v0.4.2 line 75).
    tr, _ = _recipe_settings("megatron_bridge_26_04_01_dgx_b200_gpt_oss_120b_64gpu_bf16", "bf16")
    assert tr == dict(grad_reduce_dtype="bf16", recompute_modules=("layernorm", "moe_act"))
    case = next(c for c in load_cases() if c.id == "megatron_bridge_26_04_01_dgx_b200_gpt_oss_120b_64gpu_bf16")
    assert case.alternatives == 1 and case.layouts.recompute.tolist() == [1] and case.fits.all()  # it trained
    # GB300 BF16 states none (the model recipe's recompute_granularity None): no recomputation
    gb300 = next(c for c in load_cases() if c.id == "megatron_bridge_26_04_01_dgx_gb300_gpt_oss_120b_64gpu_bf16")
    assert gb300.alternatives == 1 and gb300.layouts.recompute.tolist() == [0]
    # NeMo Mixtral: token drop at capacity factor 1.0.
    tr, moe = _recipe_settings("nemo_25p02_dgx_b200_mixtral_8x7b_64gpu_fp8", "fp8")
    assert moe == dict(capacity_factor=1.0) and tr["fp8_param_gather"]
    # dgxc v24.11.1: Apex distributed_fused_adam with grad_sync_dtype bf16 in every config, nothing else.
    assert _recipe_settings("dgxc_v24111_gpt3_175b_fp8_128gpu", "fp8") == (dict(grad_reduce_dtype="bf16"), {})
    # Other sources get nothing from the recipes table.
    assert _recipe_settings("korthikanti2022_t5_22B_full_recompute", "bf16") == ({}, {})
    assert all(len(r) == 4 and r[3] for r in RECIPES)  # every row says where it was read
