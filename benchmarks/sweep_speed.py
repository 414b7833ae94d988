"""Wall time of a 240-point sweep (the target: under 60 s on a 2-core machine).

    python benchmarks/sweep_speed.py [--workers N]

20 model sizes (GPT-3 XL scaled from 1e9 to 1e12 parameters, planner.sweep.scale_model) x 12 GPU
counts (powers of two from 8 to 16384) on DGX A100 nodes (the cluster enlarged to hold each count),
4M-token batches (2048 sequences of 2048 tokens), objective time. Reported: the wall time of the
whole sweep (process pool start-up included, like `plan sweep`), the points per second, and how
many points have a feasible layout. No output file is written, so nothing is skipped.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner.sweep import SweepSpec, expand, run_sweep  # noqa: E402

SPEC = SweepSpec(scale_model={"base": "gpt3-1.3b", "params": "1e9:1e12:20"}, cluster="dgx-a100-1024",
                 gpus="8:16384", batch_tokens=4194304.0, objective="time")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    t0 = time.perf_counter()
    points = expand(SPEC)
    t1 = time.perf_counter()
    run = run_sweep(points, workers=args.workers)
    wall = time.perf_counter() - t0
    ok = sum(r["status"] == "ok" for r in run.rows)
    print(f"{len(points)} points ({len({p.model.name for p in points})} model sizes x "
          f"{len({p.gpus for p in points})} GPU counts), {args.workers} workers on {os.cpu_count()} cores: "
          f"{wall:.1f} s wall ({t1 - t0:.2f} s to expand), {len(points) / wall:.1f} points/s, {ok} feasible")


if __name__ == "__main__":
    main()
