"""Fit the efficiency constants of one GPU preset to the published measurements of that GPU.

    python benchmarks/calibrate.py a100-sxm-80gb      # needs scipy (a development tool only)

The fitted constants are printed; copy them into configs/gpus/<gpu>.yaml by hand, so that every
change to a calibrated constant is a reviewed commit. One set of constants per GPU type, the same
for every case (no per-case tuning).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import os
if not os.path.exists("planner/yamlio.py"):
    sys.path.insert(0, "/tmp"); import fakeyaml  # TEMP
from planner.calibration import load_cases, predict  # noqa: E402

PARAMS = {
    "a100-sxm-80gb": {
        "gemm": (0.5, 1.0), "hbm": (0.6, 0.92), "elementwise_backward_factor": (1.0, 3.0),
        "nvlink": (0.5, 1.0), "layer_overhead_us": (0.0, 300.0), "step_overhead_s": (0.0, 0.5),
    },
    "h100-sxm-80gb": {
        "gemm": (0.4, 1.0), "flash_attention": (0.2, 0.9), "tp_overlap_exposed": (0.0, 1.0),
        "layer_overhead_us": (0.0, 300.0),
    },
}
METRICS = ("iteration_s", "layer_forward_ms", "layer_backward_ms")


def with_efficiency(cluster, values: dict):
    eff = cluster.gpu.efficiency.model_copy(update=values)
    return cluster.model_copy(update={"gpu": cluster.gpu.model_copy(update={"efficiency": eff})})


def relative_errors(cases, values: dict) -> np.ndarray:
    out = []
    for case in cases:
        pred = predict(case, with_efficiency(case.cluster, values))
        out += [(pred[k] - case.measured[k]) / case.measured[k] for k in METRICS if k in case.measured]
    return np.array(out)


def fit(gpu: str):
    from scipy.optimize import minimize

    cases = [c for c in load_cases() if c.cluster.gpu.name == gpu and c.kind in ("iteration", "layer")]
    names = list(PARAMS[gpu])
    lo = np.array([PARAMS[gpu][n][0] for n in names])
    hi = np.array([PARAMS[gpu][n][1] for n in names])
    x0 = np.array([getattr(cases[0].cluster.gpu.efficiency, n) for n in names])

    def loss(x):
        x = np.clip(x, lo, hi)
        e = np.abs(relative_errors(cases, dict(zip(names, x))))
        return e.mean() + 0.5 * e.max()

    best = minimize(loss, x0, method="Nelder-Mead", options={"maxiter": 4000, "xatol": 1e-4, "fatol": 1e-6})
    x = np.clip(best.x, lo, hi)
    e = relative_errors(cases, dict(zip(names, x)))
    for n, v in zip(names, x):
        print(f"  {n}: {v:.4g}")
    print(f"cases {len(cases)}, figures {e.size}: mean |err| {np.abs(e).mean():.2%}, max {np.abs(e).max():.2%}")


if __name__ == "__main__":
    fit(sys.argv[1] if len(sys.argv) > 1 else "a100-sxm-80gb")
