"""Every shipped model on every shipped cluster: does a search find a layout, and how long does it take?

    python benchmarks/coverage.py            # up to 1,024 GPUs of each cluster
    python benchmarks/coverage.py --gpus 256

A model that does not fit a cluster is a real answer (the explanation names the constraint); a model
whose precision the cluster's GPU lacks (FP8 on an A100) is bad input. Anything else is a bug.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner.errors import InfeasibleError, SpecError  # noqa: E402
from planner.specs.loading import load_cluster, load_model  # noqa: E402
from planner.search import search  # noqa: E402
from planner.specs.shipped import shipped_names  # noqa: E402


def main() -> None:
    cap = int(sys.argv[sys.argv.index("--gpus") + 1]) if "--gpus" in sys.argv else 1024
    counts = {"ok": 0, "infeasible": 0, "bad input": 0}
    slowest = (0.0, "")
    for cluster_name in shipped_names("cluster"):
        cluster = load_cluster(cluster_name)
        gpus = min(cluster.total_gpus, cap)
        cells = []
        for model_name in shipped_names("model"):
            model = load_model(model_name)
            t0 = time.perf_counter()
            try:
                r = search(model, cluster, gpus=gpus, top_k=1)
                status = "ok" if r.chosen.size else "infeasible"
            except InfeasibleError:
                status = "infeasible"
            except SpecError:
                status = "bad input"
            wall = time.perf_counter() - t0
            slowest = max(slowest, (wall, f"{model_name} on {gpus} GPUs of {cluster_name}"))
            counts[status] += 1
            if status != "ok":
                cells.append(f"{model_name} ({status})")
        print(f"{cluster_name:26s} {gpus:5d} GPUs: every model fits" if not cells else
              f"{cluster_name:26s} {gpus:5d} GPUs: not planned: {', '.join(cells)}")
    print(f"{counts}; slowest search {slowest[0] * 1e3:.0f} ms ({slowest[1]})")


if __name__ == "__main__":
    main()
