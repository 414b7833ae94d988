"""Fit the efficiency constants of one GPU preset to the published measurements of that GPU.

    python benchmarks/calibrate.py a100-sxm-80gb        # needs scipy (a development tool only)
    python benchmarks/calibrate.py a100-sxm-80gb --loo  # leave-one-out: error on runs not fitted to

With --with-vtrain, every 4th vTrain single-node run joins the fit (an experiment: it pulls the
constants toward Megatron-DeepSpeed's small-model overheads and away from the Korthikanti fit, so
the shipped preset does not use it). The fitted constants are printed; copy them into configs/gpus/<gpu>.yaml by hand, so that every
change to a calibrated constant is a reviewed commit. One set of constants per GPU type, the same
for every case (no per-case tuning).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

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


def vtrain_errors(rows, values: dict) -> np.ndarray:
    """Relative errors on vTrain rows with the given constants (used with --with-vtrain)."""
    import planner.vtrain as vt

    original = vt.load_gpu_data

    def patched(name):
        data = dict(original(name))
        data["efficiency"] = {**data["efficiency"], **{k: float(v) for k, v in values.items()}}
        return data

    vt.load_gpu_data = patched
    try:
        m, p = vt.predict_rows(rows)
    finally:
        vt.load_gpu_data = original
    return (p - m) / m


def leave_one_out(gpu: str) -> None:
    """Refit without each iteration-time case in turn and predict it: errors on unseen runs."""
    cases = [c for c in load_cases() if c.cluster.gpu.name == gpu and c.kind in ("iteration", "layer")]
    held = [c for c in cases if c.kind == "iteration"]
    errs = []
    for case in held:
        rest = [c for c in cases if c is not case]
        values = _fit_values(gpu, rest)
        pred = predict(case, with_efficiency(case.cluster, values))["iteration_s"]
        err = (pred - case.measured["iteration_s"]) / case.measured["iteration_s"]
        errs.append(err)
        print(f"  {case.id:58s} {err:+.1%}")
    e = np.abs(np.array(errs))
    print(f"leave-one-out over {e.size} runs: mean |err| {e.mean():.2%}, max {e.max():.2%}")


def _fit_values(gpu: str, cases) -> dict:
    from scipy.optimize import minimize

    names = list(PARAMS[gpu])
    lo = np.array([PARAMS[gpu][n][0] for n in names])
    hi = np.array([PARAMS[gpu][n][1] for n in names])
    x0 = np.array([getattr(cases[0].cluster.gpu.efficiency, n) for n in names])

    def loss(x):
        e = np.abs(relative_errors(cases, dict(zip(names, np.clip(x, lo, hi)))))
        return e.mean() + 0.5 * e.max()

    best = minimize(loss, x0, method="Nelder-Mead", options={"maxiter": 4000, "xatol": 1e-4, "fatol": 1e-6})
    return dict(zip(names, np.clip(best.x, lo, hi)))


def fit(gpu: str, with_vtrain: bool = False):
    from scipy.optimize import minimize

    cases = [c for c in load_cases() if c.cluster.gpu.name == gpu and c.kind in ("iteration", "layer")]
    names = list(PARAMS[gpu])
    lo = np.array([PARAMS[gpu][n][0] for n in names])
    hi = np.array([PARAMS[gpu][n][1] for n in names])
    x0 = np.array([getattr(cases[0].cluster.gpu.efficiency, n) for n in names])

    vt_rows = []
    if with_vtrain:
        from planner.vtrain import read_rows

        vt_rows = read_rows("ground_truth_single.csv")[::4]  # every 4th single-node run; the rest is held out

    def loss(x):
        x = np.clip(x, lo, hi)
        values = dict(zip(names, x))
        e = np.abs(relative_errors(cases, values))
        total = e.mean() + 0.5 * e.max()
        if vt_rows:
            total += 0.5 * np.abs(vtrain_errors(vt_rows, values)).mean()
        return total

    best = minimize(loss, x0, method="Nelder-Mead", options={"maxiter": 4000, "xatol": 1e-4, "fatol": 1e-6})
    x = np.clip(best.x, lo, hi)
    e = relative_errors(cases, dict(zip(names, x)))
    for n, v in zip(names, x):
        print(f"  {n}: {v:.4g}")
    print(f"cases {len(cases)}, figures {e.size}: mean |err| {np.abs(e).mean():.2%}, max {np.abs(e).max():.2%}")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    gpu = args[0] if args else "a100-sxm-80gb"
    if "--loo" in sys.argv:
        leave_one_out(gpu)
    else:
        fit(gpu, with_vtrain="--with-vtrain" in sys.argv)
