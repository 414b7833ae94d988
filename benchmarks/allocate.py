"""Wall time of `plan allocate` (the target: 3 jobs on 1,024 GPUs in under 2 s, command included).

    python benchmarks/allocate.py

Reported per case: best of 3 in-process allocations after one warm-up (loading the jobs file,
one `plan search` per candidate GPU count, CP-SAT), the part of it CP-SAT took, and the wall time
of the whole command in a fresh process (Python start-up and imports included), best of 3.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from planner.allocate import allocate, load_jobs  # noqa: E402
from planner.specs.loading import load_cluster  # noqa: E402

CASES = (
    ("configs/jobs/three-jobs.yaml", "dgx-h100-1024", "throughput"),
    ("configs/jobs/three-jobs.yaml", "dgx-h100-1024", "makespan"),
    ("configs/jobs/three-jobs.yaml", "dgx-gb200-nvl72-1152", "throughput"),
)


def in_process(jobs_file: str, cluster_name: str, objective: str) -> dict:
    cluster = load_cluster(cluster_name)
    allocate(load_jobs(ROOT / jobs_file), cluster, objective)  # warm-up
    walls, result = [], None
    for _ in range(3):
        t0 = time.perf_counter()
        result = allocate(load_jobs(ROOT / jobs_file), cluster, objective)
        walls.append(time.perf_counter() - t0)
    return dict(wall_s=min(walls), solver_s=result.solve.wall_s, candidates=result.candidates,
                status=result.solve.status, gpus=result.gpus_used)


def command(jobs_file: str, cluster_name: str, objective: str) -> float:
    plan = shutil.which("plan") or str(Path(sys.executable).parent / "plan")
    walls = []
    for _ in range(3):
        t0 = time.perf_counter()
        subprocess.run([plan, "allocate", jobs_file, cluster_name, "--objective", objective], cwd=ROOT,
                       check=True, capture_output=True)
        walls.append(time.perf_counter() - t0)
    return min(walls)


def main() -> None:
    print(f"{'cluster':22s} {'objective':10s} {'cand':>5s} {'GPUs':>5s} {'alloc ms':>9s} {'CP-SAT ms':>10s} "
          f"{'command ms':>11s}  solver")
    for case in CASES:
        r = in_process(*case)
        print(f"{case[1]:22s} {case[2]:10s} {r['candidates']:5d} {r['gpus']:5d} {r['wall_s'] * 1e3:9.0f} "
              f"{r['solver_s'] * 1e3:10.1f} {command(*case) * 1e3:11.0f}  {r['status']}")


if __name__ == "__main__":
    main()
