"""Calibrate on your own cluster, measured the way a user meets it (issue 36): for every source of
data/calibration with four or more runs of one cluster, the planner is given what it would ship
without that source (the constants refitted with the source left out: leave-one-source-out), then
`plan calibrate`'s fit (planner/fidelity/own.py) on k = 1, 2, 3, 5 of the source's runs, and predicts
the rest. Reported beside the same rows without a profile: mean |error|, band coverage (the share of
real errors inside the stated band), and, over jobs of several measured layouts, Spearman's rho and
the favourite's regret.

    python benchmarks/calibrate_own.py            # the table (left-out constants from the cache)
    python benchmarks/calibrate_own.py --refit    # refit the left-out constants first (~5 min, 2 cores)
    python benchmarks/calibrate_own.py --quick    # k = 1 and 3 only, at most 4 jobs a source
    python benchmarks/calibrate_own.py --markdown # the table for docs/fidelity.md
    python benchmarks/calibrate_own.py --speed    # plan calibrate of 10, 25 and 50 runs, timed

Which runs a profile is fitted on: a scale series (one run per job) takes its smallest GPU counts (a
user's first short jobs); a source of jobs with many measured layouts takes, per job, k layouts
spread over the predicted times (rows at even quantiles), and predicts that job's others.
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from planner.costs.context import job_context  # noqa: E402
from planner.costs.pipeline import step_time  # noqa: E402
from planner.fidelity.calibration import family_of, with_constants as case_with  # noqa: E402
from planner.fidelity.error_bands import error_band  # noqa: E402
from planner.fidelity.own import calibrate, with_constants  # noqa: E402
from planner.fidelity.own_bands import band  # noqa: E402
from planner.fidelity.profile import apply_profile, profile_data  # noqa: E402
from planner.fidelity.ranking import regret, spearman_rho  # noqa: E402
from planner.fidelity.runs import MeasuredRun  # noqa: E402
from planner.layout.axes import AXES  # noqa: E402
from planner.specs.profile import ProfileSpec  # noqa: E402

CACHE = ROOT / "data" / "calibration" / "loso-constants.json"
KS = (1, 2, 3, 5)
SERIES = {"dgxc2024", "korthikanti2022", "vocabpar2024", "llmfoundry", "torchtitan"}  # one run a job
JOBS = {"playbook", "vtrain"}  # many layouts a job
MIN_RUNS = 4


@dataclass
class Row:
    case: object
    i: int
    model: object  # at the left-out constants
    cluster: object
    measured_s: float

    @property
    def gpus(self) -> int:
        return int(self.case.layouts.gpus[self.i])

    def run(self) -> MeasuredRun:
        lay = self.case.layouts.row(self.i)
        given = {a.name: lay[a.name] for a in AXES if a.given is not None and a.name in lay}
        return MeasuredRun(f"{self.case.id}[{self.i}]", self.model, self.cluster, self.gpus, given, self.measured_s, None)


def _key(k) -> str:
    return "|".join(map(str, k))


def loso_constants(sources, refit: bool) -> dict:
    """{source: {constants key: {name: value}}} fitted without the source (cached in CACHE)."""
    cache = json.loads(CACHE.read_text()) if CACHE.exists() else {}
    missing = [s for s in sources if s not in cache]
    if refit or missing:
        import calibrate as cal

        cases = cal.all_cases()
        for s in (sources if refit else missing):
            t0 = time.time()
            rest = [c for c in cases if c.source != s]
            held = [c for c in cases if c.source == s]
            fitted = cal.fit(rest, cal.start_values(rest)) if s not in cal.PREDICTED_SOURCES else cal.fit(cases, cal.start_values(cases))
            vals = cal.carry_over(fitted, held)
            cache[s] = {_key(k): v for k, v in vals.items()}
            print(f"left-out constants of {s}: {time.time() - t0:.0f} s", flush=True)
            CACHE.write_text(json.dumps(cache, indent=1, sort_keys=True) + "\n")
    return {s: {tuple(k.split("|")): v for k, v in cache[s].items()} for s in sources}


def rows_of(cases, vals) -> list[Row]:
    rows = []
    for c in cases:
        fam = family_of(c.gpu)
        model, cluster = case_with(c, vals.get(("hw", fam), {}), vals.get(("stack", fam, c.stack), {}))
        meas = np.atleast_1d(c.measured["iteration_s"])
        rows += [Row(c, i, model, cluster, float(m)) for i, m in enumerate(meas)]
    return rows


def predict(rows: list[Row], hw: dict, st: dict) -> np.ndarray:
    """Step times of rows, per case in one call, with the given constants over the rows' own."""
    out = np.empty(len(rows))
    for idx in _by_case(rows).values():
        r0 = rows[idx[0]]
        m, c = with_constants(r0.model, r0.cluster, hw, st)
        t = step_time(job_context(m, c, r0.case.layouts)).total
        out[idx] = t[[rows[j].i for j in idx]]
    return out


def bands(rows: list[Row], profile: ProfileSpec | None) -> np.ndarray:
    """Each row's stated band [%]: the shipped one without a profile, the profile's with one; once per
    case (its rows' layouts in one call), as predict() prices them."""
    out = np.empty(len(rows))
    for idx in _by_case(rows).values():
        r0 = rows[idx[0]]
        lay = r0.case.layouts
        if profile is None:
            pct = error_band(r0.model, r0.cluster.gpu.name, lay.gpus).pct
        else:
            m, c = apply_profile(r0.model, r0.cluster, profile)
            pct = band(m, c.gpu.name, lay.gpus, lay).pct
        out[idx] = np.asarray(pct)[[rows[j].i for j in idx]]
    return out


def _by_case(rows: list[Row]) -> dict[str, list[int]]:
    """Indices of `rows` by the case they come from, in first-seen order."""
    out: dict[str, list[int]] = {}
    for j, r in enumerate(rows):
        out.setdefault(r.case.id, []).append(j)
    return out


def evaluate(fit_rows: list[Row], rest: list[Row]) -> dict:
    """Errors of `rest` with no profile and with one fitted on `fit_rows`."""
    meas = np.array([r.measured_s for r in rest])
    base = predict(rest, {}, {})
    cal = calibrate([r.run() for r in fit_rows])
    hw = {c.name: c.value for c in cal.constants if c.group == "hardware"}
    st = {c.name: c.value for c in cal.constants if c.group == "stack"}
    prof = ProfileSpec.model_validate(profile_data(cal, "bench"))
    with_p = predict(rest, hw, st)
    return {"measured": meas, "without": base, "with": with_p, "band_without": bands(rest, None),
            "band_with": bands(rest, prof)}


def series_groups(rows: list[Row]) -> list[list[Row]]:
    """A scale series per GPU type: runs sorted by GPUs, then parameters (smallest first)."""
    by_gpu: dict[str, list[Row]] = {}
    for r in rows:
        by_gpu.setdefault(r.cluster.gpu.name, []).append(r)
    return [sorted(g, key=lambda r: (r.gpus, r.model.total_params(), r.case.id)) for g in by_gpu.values() if len(g) >= MIN_RUNS]


def job_groups(rows: list[Row], k: int, limit: int) -> list[tuple[list[Row], list[Row]]]:
    """(fit rows, rest) per job: k layouts at even quantiles of the predicted times, the rest predicted;
    jobs of at least k + 3 layouts, the first `limit` of them (in the data's order)."""
    by_case: dict[str, list[Row]] = {}
    for r in rows:
        by_case.setdefault(r.case.id, []).append(r)
    out = []
    for job in by_case.values():
        if len(job) < k + 3:
            continue
        t = predict(job, {}, {})
        order = np.argsort(t, kind="stable")
        pick = set(order[np.unique(np.round(np.linspace(0, len(job) - 1, k)).astype(int))].tolist())
        out.append(([job[i] for i in sorted(pick)], [r for i, r in enumerate(job) if i not in pick]))
        if len(out) >= limit:
            break
    return out


def summarise(results: list[dict], ranked: bool) -> dict:
    meas = np.concatenate([r["measured"] for r in results])
    out = {"n": int(meas.size)}
    for which in ("without", "with"):
        pred = np.concatenate([r[which] for r in results])
        band_pct = np.concatenate([r["band_" + which] for r in results])
        err = 100 * np.abs(pred / meas - 1)
        out[f"err_{which}"] = float(err.mean())
        out[f"cover_{which}"] = float(np.mean(err <= band_pct))
        if ranked:
            rho = [spearman_rho(r[which], r["measured"]) for r in results if r["measured"].size >= 3]
            reg = [regret(r[which], r["measured"]) for r in results if r["measured"].size >= 3]
            out[f"rho_{which}"] = float(np.nanmedian(rho)) if rho else float("nan")
            out[f"regret_{which}"] = 100 * float(np.nanmedian(reg)) if reg else float("nan")
    return out


def run_source(source: str, rows: list[Row], ks, job_limit: int) -> list[dict]:
    table = []
    for k in ks:
        t0 = time.time()
        if source in JOBS:
            results = [evaluate(f, rest) for f, rest in job_groups(rows, k, job_limit)]
        else:
            results = [evaluate(g[:k], g[k:]) for g in series_groups(rows) if len(g) > k]
        if not results:
            continue
        s = summarise(results, source in JOBS)
        table.append({"source": source, "k": k, "groups": len(results), **s})
        print(f"{source} k={k}: {len(results)} group(s), {s['n']} runs predicted, |error| "
              f"{s['err_without']:.1f} -> {s['err_with']:.1f} %, band covers {100 * s['cover_without']:.0f} -> "
              f"{100 * s['cover_with']:.0f} % ({time.time() - t0:.0f} s)", flush=True)
    return table


def markdown(table: list[dict]) -> str:
    head = ("| source | k | runs predicted | mean error without / with | band covers without / with "
            "| median rho without / with | median regret without / with |\n|---|---:|---:|---:|---:|---:|---:|")
    lines = [head]
    for r in table:
        rank = (f"{r['rho_without']:.2f} / {r['rho_with']:.2f} | {r['regret_without']:.1f} / {r['regret_with']:.1f} %"
                if "rho_with" in r else "- | -")
        lines.append(f"| {r['source']} | {r['k']} | {r['n']} | {r['err_without']:.1f} / {r['err_with']:.1f} % | "
                     f"{100 * r['cover_without']:.0f} / {100 * r['cover_with']:.0f} % | {rank} |")
    return "\n".join(lines)


def speed() -> None:
    """plan calibrate's fit of n of dgxc's and vocabpar's runs (issue 36: 50 runs under 30 s on 2 cores)."""
    from planner.fidelity.calibration import load_cases

    cases = [c for c in load_cases() if c.kind == "iteration" and c.alternatives == 1 and "iteration_s" in c.measured]
    for source in ("dgxc2024", "vocabpar2024"):
        rows = rows_of([c for c in cases if c.source == source], {})
        for n in (10, 25, 50):
            runs = [r.run() for r in (rows * 3)[:n]]
            t0 = time.perf_counter()
            calibrate(runs)
            print(f"{source}: {n} runs calibrated in {time.perf_counter() - t0:.1f} s", flush=True)


def main(argv: list[str]) -> None:
    from planner.fidelity.calibration import load_cases
    from planner.fidelity.held_out import fitting_cases, load_held_out

    if "--speed" in argv:
        return speed()
    quick = "--quick" in argv
    ks = (1, 3) if quick else KS
    t0 = time.time()
    cases = [c for c in load_cases(vtrain=True) + fitting_cases(load_held_out())
             if c.kind == "iteration" and c.alternatives == 1 and "iteration_s" in c.measured]
    sources = sorted({c.source for c in cases} & (SERIES | JOBS))
    vals = loso_constants(sources, "--refit" in argv)
    table = []
    for s in sources:
        rows = rows_of([c for c in cases if c.source == s], vals[s])
        if len(rows) < MIN_RUNS:
            continue
        table += run_source(s, rows, ks, 4 if quick else 12)
    print(f"done in {time.time() - t0:.0f} s")
    (ROOT / "data" / "calibration" / "calibrate-own.json").write_text(json.dumps(table, indent=1) + "\n")
    if "--markdown" in argv:
        print(markdown(table))


if __name__ == "__main__":
    main(sys.argv[1:])
