"""ZeRO-3 without model parallelism against PTD-P (tp x pp) as Narayanan et al. 2021 measured them
(Sec. 5.2, Table 2: GPT-3 175B on 384-1,536 A100s, 530B on 560-2,240): the planner's step time and
TFLOP/s per GPU (the paper's Eq. 3) for each printed run, and whether each pair is ordered as measured.

    python benchmarks/zero3_order.py [--zero3-stack NAME] [--json]

The ZeRO-3 runs are priced with `--zero3-stack` (default: deepspeed-2021, the DeepSpeed the paper
integrated), the PTD-P runs with megatron-lm-2022 (the calibration's Narayanan source), each at
its printed micro-batch; PTD-P's interleaving is not printed, so its fastest fitting vpp is taken as
the calibration replay does (planner/fidelity/calibration.py). Data: data/zero3/narayanan2021-table2.yaml.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from planner.costs.context import job_context  # noqa: E402
from planner.costs.memory import memory_breakdown  # noqa: E402
from planner.costs.pipeline import step_time  # noqa: E402
from planner.fidelity.calibration import SOURCES, _cluster, _eq3_flops  # noqa: E402
from planner.layout.space import Layouts  # noqa: E402
from planner.specs.loading import load_model, load_stack  # noqa: E402
from planner.units import TERA  # noqa: E402

DATA = ROOT / "data" / "zero3" / "narayanan2021-table2.yaml"
PTDP_STACK = "megatron-lm-2022"


def load_runs(path: Path = DATA) -> list[dict]:
    return yaml.safe_load(path.read_text())["runs"]


def _layouts(run: dict, model) -> Layouts:
    """The printed layout; PTD-P's vpp (not printed) among the values that divide its layers."""
    gpus, tp, pp, mb = run["gpus"], run["tp"], run["pp"], run["micro_batch"]
    dp = gpus // (tp * pp)
    m = run["batch"] // (dp * mb)
    vpps = [v for v in (1, 2, 3, 4, 6, 8) if v == 1 or (pp > 1 and model.layers % (pp * v) == 0 and m % pp == 0)]
    n = len(vpps)
    col = lambda v: np.full(n, v, dtype=np.int64)  # noqa: E731
    return Layouts(dp=col(dp), tp=col(tp), pp=col(pp), micro_batch=col(mb), vpp=np.array(vpps, dtype=np.int64),
                   num_microbatches=col(m), recompute=col(2), sequence_parallel=col(0),
                   zero=col(3 if run["scheme"] == "zero3" else 0))


def predict(run: dict, zero3_stack: str) -> dict:
    """Predicted step time [s], its breakdown and TFLOP/s per GPU of one printed run."""
    stack = load_stack(zero3_stack if run["scheme"] == "zero3" else PTDP_STACK)
    base = load_model(run["model"])
    training = base.training.model_copy(update=dict(global_batch=run["batch"], precision="fp16", stack=stack))
    model = base.model_copy(update=dict(training=training))
    cluster = _cluster("a100-sxm-80gb", run["gpus"], SOURCES["narayanan2021"])
    layouts = _layouts(run, model)
    job = job_context(model, cluster, layouts)
    br = step_time(job)
    fits = memory_breakdown(job).total <= cluster.gpu.memory_gib
    total = np.where(fits | ~fits.any(), br.total, np.inf)
    i = int(np.argmin(total))
    flops = _eq3_flops(model)
    measured_s = flops / (run["tflops"] * TERA * run["gpus"])
    parts = {k: float(np.asarray(getattr(br, k))[i]) for k in ("compute", "recompute", "tp_comm", "pp_comm",
                                                                "dp_comm", "bubble", "optimizer", "overhead")}
    return dict(step_s=float(br.total[i]), measured_s=measured_s, tflops=flops / (float(br.total[i]) * TERA * run["gpus"]),
                vpp=int(layouts.vpp[i]), fits=bool(fits[i]), parts=parts)


def compare(runs: list[dict], zero3_stack: str = "deepspeed-2021") -> list[dict]:
    """One row per (model, i-th ZeRO-3 run, i-th PTD-P run): measured and predicted TFLOP/s per GPU
    of each and whether ZeRO-3 is predicted slower exactly where it was measured slower."""
    rows = []
    for name in dict.fromkeys(r["model"] for r in runs):
        zs = [r for r in runs if r["model"] == name and r["scheme"] == "zero3"]
        ps = [r for r in runs if r["model"] == name and r["scheme"] == "ptdp"]
        for z, p in zip(zs, ps):
            pz, pp = predict(z, zero3_stack), predict(p, zero3_stack)
            measured_ratio = p["tflops"] / z["tflops"]
            predicted_ratio = pp["tflops"] / pz["tflops"]
            rows.append(dict(model=name, zero3_gpus=z["gpus"], ptdp_gpus=p["gpus"], zero3=pz, ptdp=pp,
                             zero3_measured_tflops=z["tflops"], ptdp_measured_tflops=p["tflops"],
                             measured_ratio=measured_ratio, predicted_ratio=predicted_ratio,
                             ordered=(measured_ratio > 1) == (predicted_ratio > 1)))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--zero3-stack", default="deepspeed-2021")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = compare(load_runs(), args.zero3_stack)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"ZeRO-3 ({args.zero3_stack}) against PTD-P ({PTDP_STACK}), Narayanan et al. 2021 Table 2")
    print(f"{'model':14} {'GPUs z/p':>10} | {'ZeRO-3 s meas/pred':>19} {'TF/s m/p':>10} | "
          f"{'PTD-P s meas/pred':>18} {'TF/s m/p':>10} | {'PTD-P/ZeRO-3 m/p':>17} ordered")
    for r in rows:
        z, p = r["zero3"], r["ptdp"]
        print(f"{r['model']:14} {r['zero3_gpus']:>5}/{r['ptdp_gpus']:<4} | {z['measured_s']:8.1f} {z['step_s']:8.1f}  "
              f"{r['zero3_measured_tflops']:4.0f} {z['tflops']:5.0f} | {p['measured_s']:8.1f} {p['step_s']:8.1f} "
              f"{r['ptdp_measured_tflops']:4.0f} {p['tflops']:5.0f} | {r['measured_ratio']:7.2f} {r['predicted_ratio']:7.2f}"
              f"   {'yes' if r['ordered'] else 'NO'}")
    for r in rows:
        z = r["zero3"]
        print(f"  {r['model']} ZeRO-3 {r['zero3_gpus']}: " + ", ".join(f"{k} {v:.1f}" for k, v in z["parts"].items() if v))
    print(f"ordered as measured: {sum(r['ordered'] for r in rows)} of {len(rows)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
