"""Wall time and memory of full searches (the target: each under 1 s, memory under 1 GiB).

    python benchmarks/speed.py

Each search enumerates the whole layout space, scores it with every cost model, applies the
constraints and runs CP-SAT for the top 5. Reported: best of 3 wall times after one warm-up,
candidates per second, and the peak traced memory of one search.
"""
from __future__ import annotations

import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner.specs.loading import load_cluster, load_model  # noqa: E402
from planner.search import search, with_global_batch  # noqa: E402

# (model, cluster, GPUs, global batch override): the last case has a batch large enough for
# dp to take many values, so the space is not cut down by divisibility alone.
CASES = (
    ("gpt3-175b", "dgx-a100-1024", 1024, None),
    ("megatron-530b", "dgx-a100-1024", 2240, None),
    ("megatron-1t", "dgx-a100-1024", 3072, None),
    ("megatron-1t", "big-h100-131072", 131072, 65536),
    ("llama3-405b", "big-h100-131072", 131072, 65536),
    # mixture-of-experts and long context: the ep, etp and cp axes grow the space (issue #12's target:
    # DeepSeek-V3 on 1,024 H100s under 0.5 s and 1 GiB)
    ("deepseek-v3", "dgx-h100-1024", 1024, None),
    ("mixtral-8x7b", "dgx-h100-1024", 256, None),
    ("llama3.1-405b-128k", "dgx-h100-16384", 16384, None),
    # hybrid layers (issue 40 item 4): each rank priced by its mix of kinds, uneven splits by CP-SAT
    ("nemotron-h-56b", "dgx-h100-1024", 256, None),
    ("qwen3-next-80b-a3b", "dgx-h100-1024", 256, None),
)


def _case(model_name: str, cluster_name: str, gpus: int, global_batch: int | None) -> tuple:
    model = with_global_batch(load_model(model_name), global_batch)
    cluster = load_cluster(cluster_name)
    return model, cluster.model_copy(update={"nodes": -(-gpus // cluster.node.gpus)})


def counts(model_name: str, cluster_name: str, gpus: int, global_batch: int | None) -> dict:
    """One search's candidates and feasible rows (docs/speed.md's table; tests/test_readme.py)."""
    model, cluster = _case(model_name, cluster_name, gpus, global_batch)
    result = search(model, cluster, gpus=gpus)
    return dict(candidates=len(result.scores), feasible=int(result.feasible.sum()))


def run(model_name: str, cluster_name: str, gpus: int, global_batch: int | None) -> dict:
    model, cluster = _case(model_name, cluster_name, gpus, global_batch)
    search(model, cluster, gpus=gpus)  # warm-up (imports, OR-Tools start-up)
    walls = []
    for _ in range(3):
        t0 = time.perf_counter()
        result = search(model, cluster, gpus=gpus)
        walls.append(time.perf_counter() - t0)
    tracemalloc.start()
    search(model, cluster, gpus=gpus)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    n = len(result.scores)
    return dict(model=model_name, gpus=gpus, candidates=n, feasible=int(result.feasible.sum()),
                wall_s=min(walls), per_s=n / min(walls), peak_mib=peak / 2**20, status=result.solver.status)


def main() -> None:
    print(f"{'model':14s} {'GPUs':>7s} {'candidates':>11s} {'feasible':>9s} {'wall ms':>8s} {'cand/s':>11s} {'peak MiB':>9s}  solver")
    for case in CASES:
        r = run(*case)
        print(f"{r['model']:14s} {r['gpus']:7d} {r['candidates']:11,d} {r['feasible']:9,d} {r['wall_s'] * 1e3:8.0f} "
              f"{r['per_s']:11,.0f} {r['peak_mib']:9.1f}  {r['status']}")


if __name__ == "__main__":
    main()
