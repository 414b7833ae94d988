"""How often the stated `±` band covers the real error of a run whose source it never saw.

    python benchmarks/bands.py              # coverage of each band rule, by source and overall
    python benchmarks/bands.py --markdown   # the table for docs/fidelity.md

Each calibration run's leave-one-source-out error (data/calibration/residuals.csv, written by
benchmarks/calibrate.py --write) is what a run the planner never saw can expect. For each run, the
band is built as planner/fidelity/error_bands.py builds it, but only from the OTHER sources' runs of
its stack on its GPU (else on other GPUs, x1.5; else the stack's carried-over figure): the band is
out of sample twice over. A band is a promise: the target is >= 80 % of runs inside it.
"""
from __future__ import annotations

import csv
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from planner.fidelity.error_bands import NEAREST, OTHER_GPU_FACTOR, band_of_cases  # noqa: E402

CARRIED_OVER_PCT = 25.0  # configs/stacks: carried_over_error_pct's default


def load() -> list[dict]:
    with open(ROOT / "data" / "calibration" / "residuals.csv") as f:
        rows = [r for r in csv.DictReader(f) if r["loso_error"] not in ("", "nan")]
    for r in rows:
        r["gpus"], r["params_b"] = float(r["gpus"]), float(r["params_b"])
        r["pct"] = 100 * abs(float(r["loso_error"]))
    return rows


def rms_rule(cases: np.ndarray, gpus: float, params_b: float) -> float:
    """The planner's rule (planner/fidelity/error_bands.py band_of_cases) for one run."""
    return float(band_of_cases(cases, np.array([gpus]), params_b)[0])


def out_of_sample_band(row: dict, rows: list[dict], rule) -> float:
    others = [r for r in rows if r["source"] != row["source"] and r["stack"] == row["stack"]]
    same_gpu = [r for r in others if r["gpu"] == row["gpu"]]
    pick, factor = (same_gpu, 1.0) if same_gpu else (others, OTHER_GPU_FACTOR) if others else (None, 0)
    if pick is None:
        return CARRIED_OVER_PCT
    cases = np.array([(r["gpus"], r["params_b"], r["pct"]) for r in pick])
    return factor * rule(cases, row["gpus"], row["params_b"])


def coverage(rows: list[dict], rule) -> tuple[float, float, dict]:
    """(share of runs inside, median over sources of each source's share, per source)."""
    inside = defaultdict(list)
    for i, r in enumerate(rows):
        inside[r["source"]].append(r["pct"] <= out_of_sample_band(r, rows, rule))
        if i % 400 == 0:
            print(f"  {i}/{len(rows)} runs", file=sys.stderr, flush=True)
    per = {s: float(np.mean(v)) for s, v in inside.items()}
    everything = [x for v in inside.values() for x in v]
    return float(np.mean(everything)), float(np.median(list(per.values()))), per


def main() -> None:
    rows = load()
    rules = {f"RMS of the {NEAREST} nearest (planner/fidelity/error_bands.py)": rms_rule,
             "the same x 1.5": lambda c, g, p: 1.5 * rms_rule(c, g, p)}
    results = {name: coverage(rows, rule) for name, rule in rules.items()}
    sources = sorted({r["source"] for r in rows})
    if "--markdown" in sys.argv:
        print("| band rule | runs inside | median over sources |")
        print("|---|---:|---:|")
        for name, (all_, med, _) in results.items():
            print(f"| {name} | {all_:.0%} | {med:.0%} |")
        print()
        print("| source | runs | " + " | ".join(results) + " |")
        print("|---|---:|" + "---:|" * len(results))
        for s in sources:
            n = sum(r["source"] == s for r in rows)
            print(f"| {s} | {n} | " + " | ".join(f"{res[2][s]:.0%}" for res in results.values()) + " |")
        return
    for name, (all_, med, per) in results.items():
        print(f"{name:40s} runs inside {all_:5.0%}   median over {len(per)} sources {med:5.0%}")


if __name__ == "__main__":
    main()
