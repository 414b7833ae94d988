"""Replay every published measurement in data/calibration and print predicted vs measured.

    python benchmarks/fidelity.py             # tables in the terminal
    python benchmarks/fidelity.py --markdown  # the error table of the README

Groups: Korthikanti et al. 2022 Table 5 iteration times (A100, fitted), Table 4 per-layer times
(fitted), Figure 1 memory (formula, not fitted), Sec. 6.3 DP=8 run (not fitted), dgxc H100 runs
(fitted, H100 constants), vTrain A100 runs (held out: never fitted).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner.calibration import errors, load_cases  # noqa: E402
from planner.vtrain import predict_rows, read_rows  # noqa: E402


def group_of(case_id: str, metric: str) -> str:
    if case_id.startswith("korthikanti2022_t5"):
        return "Korthikanti 2022 Table 5, iteration time (A100)"
    if case_id.startswith("korthikanti2022_t4"):
        return "Korthikanti 2022 Table 4, layer fwd/bwd time (A100)"
    if case_id.startswith("korthikanti2022_fig1"):
        return f"Korthikanti 2022 Fig. 1, {metric.replace('_gib', '')} memory"
    if case_id.startswith("korthikanti2022_530B_dp8"):
        return "Korthikanti 2022 Sec. 6.3, 530B on 2240 GPUs (held out)"
    return "NVIDIA dgxc-benchmarking, H100 iteration time"


def collect():
    groups: dict[str, list] = {}
    for case, metric, meas, pred, err in errors(load_cases()):
        groups.setdefault(group_of(case.id, metric), []).append((case.id, metric, meas, pred, err))
    for name, label in (("ground_truth_single.csv", "vTrain 1 node, A100 (held out)"),
                        ("ground_truth_multi.csv", "vTrain multi-node, A100 (held out)")):
        m, p = predict_rows(read_rows(name))
        groups[label] = [(f"{label} #{i}", "iteration_s", a, b, (b - a) / a) for i, (a, b) in enumerate(zip(m, p))]
    return groups


def main() -> None:
    groups = collect()
    markdown = "--markdown" in sys.argv
    if markdown:
        print("| measurements | n | mean abs error | max abs error | bias |")
        print("|---|---:|---:|---:|---:|")
    for label, rows in groups.items():
        e = np.array([r[4] for r in rows])
        if markdown:
            print(f"| {label} | {e.size} | {np.abs(e).mean():.1%} | {np.abs(e).max():.1%} | {e.mean():+.1%} |")
            continue
        print(f"\n{label}: n={e.size}, mean |err| {np.abs(e).mean():.2%}, max {np.abs(e).max():.2%}, bias {e.mean():+.2%}")
        if "vTrain" in label:
            continue
        for cid, metric, meas, pred, err in rows:
            print(f"  {cid:58s} {metric:26s} measured {meas:9.4g} predicted {pred:9.4g} {err:+7.1%}")


if __name__ == "__main__":
    main()
