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
sys.path.insert(0, str(ROOT / "benchmarks"))

from calibrate import PREDICTED_SOURCES  # noqa: E402
from planner.fidelity.calibration import family_of  # noqa: E402
from planner.fidelity.calibration import load_cases  # noqa: E402
from planner.fidelity.error_bands import (COVERAGE_Z, NEAREST, OTHER_GPU_FACTOR, UNMEASURED_FACTOR,  # noqa: E402
                                          band_of_cases, carried_over_pct, unmeasured_parts)

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


def carried_over_without(rows: list[dict], without: str) -> float:
    """benchmarks/calibrate.py's carried_over_error_pct, without the source `without`
    (planner/fidelity/error_bands.py carried_over_pct: each source alone on its GPU family and
    stack counts once)."""
    return carried_over_pct((r["source"], family_of(r["gpu"]), r["stack"], r["pct"])
                            for r in rows if r["source"] != without)


def out_of_sample_band(row: dict, rows: list[dict], rule, carried: dict) -> float:
    """The band the planner would state for `row` had its source never been measured, before the
    coverage factor: its stack's runs of other sources on its GPU (else on other GPUs, x1.5), else
    the carried-over figure of the other sources."""
    others = [r for r in rows if r["source"] != row["source"] and r["stack"] == row["stack"]]
    same_gpu = [r for r in others if r["gpu"] == row["gpu"]]
    pick, factor = (same_gpu, 1.0) if same_gpu else (others, OTHER_GPU_FACTOR) if others else (None, 0)
    if pick is None:
        return carried[row["source"]], True
    cases = np.array([(r["gpus"], r["params_b"], r["pct"]) for r in pick])
    return factor * rule(cases, row["gpus"], row["params_b"]), False


def source_bias_pct(rows: list[dict], without: str) -> float:
    """RMS over the other sources of each one's mean signed left-out error [%]: how far a source's
    runs as a whole sit from the planner, which no neighbour of its own source can show."""
    by = defaultdict(list)
    for r in rows:
        if r["source"] != without and r["source"] not in PREDICTED_SOURCES:
            by[r["source"]].append(100 * float(r["loso_error"]))
    return float(np.sqrt(np.mean([np.mean(v) ** 2 for v in by.values()])))


def unmeasured_factors() -> dict:
    """error_band's x1.5 per model part no calibration run had, by case (GPT-OSS's windows)."""
    return {c.id: UNMEASURED_FACTOR ** len(unmeasured_parts(c.model)) for c in load_cases()}


def coverage(rows: list[dict], z: float, with_bias: bool = False, factors: dict | None = None) -> tuple[float, float, dict]:
    """(share of runs inside z x the band, median over sources of each source's share, per source);
    `with_bias`: the band is z x sqrt(band^2 + source_bias_pct^2); `factors`: unmeasured_factors()."""
    factors = factors or {}
    carried = {src: carried_over_without(rows, src) for src in {r["source"] for r in rows}}
    tau = {src: source_bias_pct(rows, src) if with_bias else 0.0 for src in {r["source"] for r in rows}}
    base = {}  # the band before the factor, once per (source, stack, gpu, GPUs, parameters)
    inside = defaultdict(list)
    for r in rows:
        key = (r["source"], r["stack"], r["gpu"], r["gpus"], r["params_b"])
        if key not in base:
            band, carried_over = out_of_sample_band(r, rows, rms_rule, carried)
            base[key] = band if carried_over else np.hypot(band, tau[r["source"]])  # as error_band does
        inside[r["source"]].append(r["pct"] <= z * base[key] * factors.get(r["case"], 1.0))
    per = {s: float(np.mean(v)) for s, v in inside.items()}
    everything = [x for v in inside.values() for x in v]
    return float(np.mean(everything)), float(np.median(list(per.values()))), per


def main() -> None:
    factors = unmeasured_factors()
    rows = load()
    results = {
        f"{COVERAGE_Z:g} x sqrt(RMS of the {NEAREST} nearest^2 + source spread^2) (planner/fidelity/error_bands.py)":
            coverage(rows, COVERAGE_Z, True, factors),
        f"{COVERAGE_Z:g} x RMS of the {NEAREST} nearest (no source spread)": coverage(rows, COVERAGE_Z, factors=factors),
        f"RMS of the {NEAREST} nearest (the rule before)": coverage(rows, 1.0, factors=factors)}
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
