"""NVFP4 against Megatron-Bridge's published throughput (data/nvfp4/bridge-performance.yaml): Llama 3 70B on
64 and Llama 3.1 405B on 256 GB300 / GB200 GPUs in NVFP4, FP8 (current scaling) and MXFP8, each row replayed
with its printed layout through planner.api.estimate.

    python benchmarks/nvfp4.py

Each row runs the shipped model preset (configs/models/) with the row's global batch and precision on the
shipped cluster preset; FSDP > 0 is ZeRO 3 over the row's GPUs, FSDP = 0 the distributed optimizer (ZeRO 1);
sequence parallelism where tp > 1 (the recipes' setting and the planner's default); no recompute (no recipe
sets it). The published "Model TFLOP/sec/GPU" is compared with the planner's `model_tflops_per_gpu`, and the
tokens/s per GPU with the planner's, which does not depend on how either side counts FLOPs. The ratio column
is NVFP4 over the same model and system's FP8 or MXFP8 row, predicted and published. The memory column says
whether the planner thinks the layout fits (every row ran, so "no" is a memory-model error).
None of these rows is a calibration case: the GB200/GB300 `gemm_fp8` efficiencies were fitted on other
Megatron-Bridge rows, and `gemm_fp4` falls back on them (no FP4 fit), so every NVFP4 row is a held-out check.
"""
from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import planner.api as api  # noqa: E402

DATA = ROOT / "data" / "nvfp4" / "bridge-performance.yaml"
PRECISION = {"FP8": "fp8", "MXFP8": "mxfp8", "NVFP4": "nvfp4"}


def load_rows(path: Path = DATA) -> list[dict]:
    return yaml.safe_load(path.read_text())["rows"]


def replay(row: dict):
    """The planner's Estimate of one published row, with the row's layout."""
    model = yaml.safe_load((ROOT / "configs" / "models" / f"{row['model']}.yaml").read_text())
    model["training"] = {**model["training"], "global_batch": row["gbs"], "precision": PRECISION[row["precision"]],
                         "cuda_graph_impl": row["cuda_graph"] or "none"}
    model["seq_len"] = row["seq_len"]
    return api.estimate(model, row["cluster"], gpus=row["gpus"], tp=row["tp"], pp=row["pp"], cp=row["cp"],
                        vpp=row["vp"] or 1, micro_batch=row["mbs"], recompute="none",
                        zero=3 if row["fsdp"] else 1)


def main() -> None:
    rows = load_rows()
    est = [replay(r) for r in rows]
    head = (f"{'model':14s} {'system':9s} {'prec':5s} {'layout':22s} {'pub TF':>6s} {'pred TF':>7s} {'err':>6s} "
            f"{'pub tok/s':>9s} {'pred':>6s} {'err':>6s}  fits  {'NVFP4/x pub':>11s} {'pred':>5s}")
    print(head)
    errors = []
    for r, e in zip(rows, est):
        pred_tf = e.model_tflops_per_gpu
        pred_tok = e.tokens_per_s / r["gpus"]
        layout = f"tp{r['tp']} pp{r['pp']} cp{r['cp']} vp{r['vp'] or 1} mb{r['mbs']} " + ("fsdp" if r["fsdp"] else "do")
        err_tf = pred_tf / r["model_tflops_per_gpu"] - 1
        err_tok = pred_tok / r["tokens_per_s_per_gpu"] - 1
        if r["precision"] == "NVFP4":
            errors.append(err_tf)
        ratio = ""
        if r["precision"] != "NVFP4":
            j = next(i for i, q in enumerate(rows) if q["precision"] == "NVFP4" and q["model"] == r["model"]
                     and q["system"] == r["system"])
            pub = rows[j]["model_tflops_per_gpu"] / r["model_tflops_per_gpu"]
            pred = est[j].model_tflops_per_gpu / pred_tf
            ratio = f"{pub:11.2f} {pred:5.2f}"
        fits = "yes" if not any(v.constraint == "memory" for v in e.violations) else "no"
        print(f"{r['model']:14s} {r['system'][4:]:9s} {r['precision']:5s} {layout:22s} {r['model_tflops_per_gpu']:6d} "
              f"{pred_tf:7.0f} {err_tf:+6.1%} {r['tokens_per_s_per_gpu']:9d} {pred_tok:6.0f} {err_tok:+6.1%}  "
              f"{fits:4s}  {ratio}")
    print(f"NVFP4 rows: mean |error| {sum(abs(x) for x in errors) / len(errors):.1%}, "
          f"mean error {sum(errors) / len(errors):+.1%} ({len(errors)} rows)")


if __name__ == "__main__":
    main()
