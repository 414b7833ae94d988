"""Published runs the planner was never fitted to (data/extra-checks): step-time error per group.

    python benchmarks/extra_checks.py             # per group, and every run
    python benchmarks/extra_checks.py --markdown  # the README's table

Predicted with the shipped constants (fitted by benchmarks/calibrate.py on data/calibration only).
The DeepSpeed-on-Azure ZeRO-3 runs offloaded optimizer states and activations to CPU memory: they are
replayed with --offload both on the blog's host (1.7 TB a node, PCIe Gen4), priced by planner/costs/offload.py.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner.fidelity.calibration import EXTRA_SOURCES, load_extra_checks, relative_errors  # noqa: E402
from planner.score import score  # noqa: E402


def main() -> None:
    cases = load_extra_checks()
    markdown = "--markdown" in sys.argv
    if markdown:
        print("| never fitted | n | mean abs error | bias | max abs error |")
        print("|---|---:|---:|---:|---:|")
    for group, label in EXTRA_SOURCES.items():
        mine = [c for c in cases if c.source == group]
        if not mine:
            continue
        e = np.concatenate([relative_errors(c) for c in mine])
        if markdown:
            print(f"| {label} | {e.size} | {np.abs(e).mean():.1%} | {e.mean():+.1%} | {np.abs(e).max():.1%} |")
            continue
        print(f"\n{label}: n={e.size}, mean |err| {np.abs(e).mean():.1%}, bias {e.mean():+.1%}")
        for c, err in zip(mine, e):
            mem = float(score(c.model, c.cluster, c.layouts).memory_gib.total[0])
            print(f"  {c.id:42s} measured {c.measured['iteration_s']:8.2f} s  error {err:+6.1%}  memory {mem:5.1f} GiB"
                  f"{'' if c.fits[0] else '  (predicted out of memory)'}")


if __name__ == "__main__":
    main()
