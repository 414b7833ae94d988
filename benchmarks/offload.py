"""Optimizer offload against ZeRO-Offload's published figure (data/offload/zero-offload.yaml): a 10B
GPT-2 on one V100 of a DGX-2 at 40 TFLOP/s (Ren et al. 2021, abstract).

    python benchmarks/offload.py

The planner has no V100 preset: the GPU is built here from its datasheet (125 TFLOP/s FP16, 900 GB/s,
32 GB) with the A100 40GB preset's fitted efficiencies, an assumption that sets the compute part of
the step; the offload part (gradients over PCIe Gen3, Adam on the DGX-2's two Xeons, the weights
back) is what planner/costs/offload.py prices from the DGX-2's datasheet. The paper's TFLOP/s count
the recomputed forward (Megatron-LM's 2020 formula, 4 passes of the layers' FLOPs with activation
checkpointing): the model FLOP/s are printed both ways.

Measured at the commit that added it: the layout offloading its optimizer predicts 61.7 TFLOP/s counting
the recomputed forward, +54 % over the published 40; 3.08 s of its 13.92 s step are the offloaded
optimizer (the gradients' fp32 copy over 13.6 GB/s of PCIe Gen3: 4 B x 10.49e9 / 13.6e9), 0.37 s the
GPU's own step without offload. And it does not fit the 32 GB V100 as priced (70.3 GiB): the planner
keeps the fp32 gradients on the GPU, as Megatron Core's HybridDeviceOptimizer does, where ZeRO-Offload
moves the gradients to the host as well (Ren et al. 2021 Sec. 4.1) and keeps the 16-bit weights alone.
The check is weak on its compute side (A100 efficiencies on a V100, no V100 measurement); it bounds the
offload's share, not the step.

Then Megatron-Bridge's Llama 3 70B FP8-CS FSDP rows with offload=activations (bridge_fsdp_rows), measured
at the commit that priced a number of layers: GB300 16 layers offloaded (recipe 20), 2,026 TFLOP/s vs
2,348 (-13.7 %), copies 0.70 s of 7.27; GB200 41 (recipe 40), 1,656 vs 1,892 (-12.5 %), copies 1.25 s
of 8.89; both fit the GPU and the host.
"""
from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from planner.estimate import estimate_layout  # noqa: E402
from planner.api.inputs import load_cluster, load_gpu, load_model  # noqa: E402

DATA = ROOT / "data" / "offload" / "zero-offload.yaml"


def v100() -> dict:
    a100 = load_gpu("a100-sxm-40gb").model_dump()
    return {**a100, "name": "v100-sxm3-32gb", "memory_gib": 32, "hbm_gbps": 900, "tdp_w": 350, "idle_w": 50,
            "peak_tflops": {"bf16": 125, "fp16": 125}, "sms": 80, "power_caps": ()}


def dgx2() -> dict:
    return {"name": "dgx-2", "gpu": v100(), "nodes": 1,
            "node": {"gpus": 16, "nvlink_gbps": 150, "network_gbps": 12.5, "host_memory_gib": 1536,
                     "host_link_gbps": 16, "host_memory_gbps": 256}}


def main() -> None:
    src = yaml.safe_load(DATA.read_text())
    m = src["model"]
    model = load_model({"name": "gpt2-10b", "layers": m["layers"], "hidden": m["hidden"], "heads": m["heads"],
                        "vocab": m["vocab"], "seq_len": m["seq_len"],
                        "training": {"global_batch": m["global_batch"], "precision": "fp16",
                                     "stack": "deepspeed-zero3", "attention": "standard"}})
    cluster = load_cluster(dgx2())
    published = src["figures"][0]["tflops_per_gpu"]
    print(f"{model.total_params() / 1e9:.2f}B parameters, 1 GPU of {cluster.name}; published {published} TFLOP/s")
    for off in ("optimizer", "none"):
        r = estimate_layout(model, cluster, gpus=1, tp=1, pp=1, dp=1, micro_batch=m["global_batch"],
                            recompute=m["recompute"], zero=0, offload=off)
        t = r.time_breakdown_s
        with_recompute = r.model_tflops_per_gpu * 4 / 3
        fits = "fits" if r.memory_gib.total <= cluster.gpu.memory_gib else "does not fit"
        print(f"offload={off:9s} step {r.step_time_s:6.2f} s (compute {t.compute:.2f}, recompute {t.recompute:.2f}, "
              f"optimizer {t.optimizer:.2f}), {r.memory_gib.total:5.1f} GiB on the GPU ({fits}), "
              f"host {r.memory_gib.host:5.1f} GiB; {r.model_tflops_per_gpu:5.1f} model TFLOP/s, "
              f"{with_recompute:5.1f} counting the recomputed forward ({with_recompute / published - 1:+.0%})")


def bridge_fsdp_rows() -> None:
    """Megatron-Bridge's Llama 3 70B FP8-CS FSDP rows (data/nvfp4/bridge-performance.yaml, replayed as
    benchmarks/nvfp4.py does) with offload=activations: the layers the planner offloads against the
    recipes' cpu_offloading_num_layers (scripts/performance/configs/llama/llama3_workload_base_configs.py:
    20 on GB300, 40 on GB200), the predicted TFLOP/s against the published, and whether they fit."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import nvfp4
    from planner import api

    recipe = {"DGX-GB300": 20, "DGX-GB200": 40}
    for r in nvfp4.load_rows():
        if not r["fsdp"]:
            continue
        estimate = api.estimate
        api.estimate = lambda *a, **k: estimate(*a, offload="activations", **k)
        try:
            e = nvfp4.replay(r)
        finally:
            api.estimate = estimate
        m, t = e.memory_gib, e.time_breakdown_s
        print(f"{r['model']} {r['system']} {r['precision']} fsdp mb{r['mbs']}: offloads {e.layout['offload_layers']} "
              f"layers (recipe {recipe[r['system']]}), {m.total:.1f} GiB on the GPU, host {m.host:.1f} GiB per GPU, "
              f"{'fits' if e.feasible else 'does not fit: ' + '; '.join(v.message for v in e.violations)}; "
              f"step {e.step_time_s:.2f} s (copies {t.offload:.2f} s), {e.model_tflops_per_gpu:.0f} TFLOP/s "
              f"vs {r['model_tflops_per_gpu']} published "
              f"({e.model_tflops_per_gpu / r['model_tflops_per_gpu'] - 1:+.1%})")


if __name__ == "__main__":
    main()
    bridge_fsdp_rows()
