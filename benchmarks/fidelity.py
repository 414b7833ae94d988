"""Replay every published measurement in data/calibration with the shipped constants.

    python benchmarks/fidelity.py             # per group, then every non-vTrain figure
    python benchmarks/fidelity.py --markdown  # a table per group

These are the fitted errors (the shipped constants were fitted on these cases). The errors on runs
not fitted to are in benchmarks/calibrate.py's leave-one-source-out table and
benchmarks/extra_checks.py.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner.fidelity.calibration import errors, load_cases  # noqa: E402


def group_of(case, metric: str) -> str:
    if case.source == "vtrain":
        return "vTrain multi-node" if "multi" in case.id else "vTrain single node"
    if case.kind == "memory":
        return f"Korthikanti 2022 Fig. 1, {metric.replace('_gib', '')} memory"
    return {"korthikanti2022": "Korthikanti 2022 Tables 4-5 and Sec. 6.3"}.get(case.source, case.source)


def main() -> None:
    groups: dict[str, list] = {}
    for case, metric, meas, pred, err in errors(load_cases(vtrain=True)):
        groups.setdefault(group_of(case, metric), []).append((case.id, metric, meas, pred, err))
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
