"""How well the planner ranks the measured layouts of one job: a planner is used to choose.

    python benchmarks/ranking.py             # summary and the worst groups
    python benchmarks/ranking.py --markdown  # the README's ranking table
    python benchmarks/ranking.py --tie       # the fastest predicted against the tie plan search names

A group is one job: same model, GPU count and global batch, different layouts (tp, dp, pp,
micro-batch; ZeRO stage for BLOOM); only groups of 3 or more layouts count. Per group: Spearman's
rho of predicted vs measured step times, and the regret of the planner's favourite (its measured
time / the best measured - 1).
- vTrain (1,549 A100 runs): from data/calibration/residuals.csv, written by benchmarks/calibrate.py,
  both as fitted and as predicted with vTrain left out of the fit (refit without it).
- the Ultra-Scale Playbook's nanotron jobs (H100, 1-64 nodes, 24-147 layouts each) from the same
  file: a group is one calibration case (one model, sequence, batch and GPU count). It is never fitted (benchmarks/calibrate.py PREDICTED_SOURCES): its fitted
  and left-out columns are both predictions. Every layout counts, those the planner's constraints
  refuse too (benchmarks/held_out.py ranks the favourite among accepted layouts only).
- BLOOM-176B on 384 A100 (data/extra-checks, never fitted): predicted with the shipped constants;
  one group per day of the BigScience chronicles (the software changed between days).
"""
from __future__ import annotations

import csv
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from planner.fidelity.calibration import load_extra_checks, predict  # noqa: E402
from planner.fidelity.ranking import rank_groups  # noqa: E402

GOOD_REGRET = 0.03


def vtrain_rows() -> list[dict]:
    with open(ROOT / "data" / "calibration" / "residuals.csv") as fh:
        return [r for r in csv.DictReader(fh) if r["source"] == "vtrain" and r["metric"] == "iteration_s"]


def vtrain_groups(which: str) -> dict:
    """{file: (keys, predicted, measured)} with predictions fitted or left out ("fitted_error" | "loso_error")."""
    out = {}
    for r in vtrain_rows():
        name = "vTrain multi-node" if "multi" in r["case"] else "vTrain single node"
        keys, pred, meas = out.setdefault(name, ([], [], []))
        m = float(r["measured"])
        keys.append((r["case"], r["gpus"]))  # a case is one model shape and batch; add the GPU count
        meas.append(m)
        pred.append(m * (1 + float(r[which])))
    # Issue 11's target is over vTrain's groups: both files together (136 + 4 groups).
    out["vTrain, every group"] = tuple(a + b for a, b in zip(*out.values()))
    return out


# torchtitan's runs share a model and GPU count two at a time at most: benchmarks/held_out.py ranks them.
NEW_SOURCES = {"playbook": "Ultra-Scale Playbook nanotron, H100 (never fitted)"}


def new_source_groups(which: str) -> dict:
    """{label: (keys, predicted, measured)}: one group per case of each new source."""
    out = {}
    with open(ROOT / "data" / "calibration" / "residuals.csv") as fh:
        for r in csv.DictReader(fh):
            if r["source"] not in NEW_SOURCES or r["metric"] != "iteration_s" or r[which] in ("", "nan"):
                continue
            keys, pred, meas = out.setdefault(NEW_SOURCES[r["source"]], ([], [], []))
            m = float(r["measured"])
            keys.append((r["case"], r["gpus"]))
            meas.append(m)
            pred.append(m * (1 + float(r[which])))
    return out


def bloom_groups() -> dict:
    keys, pred, meas = [], [], []
    for case in load_extra_checks():
        if not case.id.startswith("bloom_"):
            continue
        day = case.id.split("_")[1]
        keys.append((day, case.model.layers, case.model.hidden, case.model.training.global_batch))
        pred.append(predict(case)["iteration_s"])
        meas.append(case.measured["iteration_s"])
    return {"BLOOM-176B, 384 A100 (never fitted)": (keys, pred, meas)}


def summarise(label: str, keys, pred, meas) -> dict:
    ok = ~np.isnan(np.array(pred, dtype=float))  # after `calibrate.py --quick` nothing was left out
    keys = [k for k, good in zip(keys, ok) if good]
    groups = rank_groups(keys, np.array(pred)[ok], np.array(meas)[ok])
    if not groups:
        return dict(label=label, groups=0, layouts=0, median_rho=np.nan, median_regret=np.nan,
                    mean_regret=np.nan, good=np.nan, detail=[])
    rho = np.array([g.rho for g in groups])
    reg = np.array([g.regret for g in groups])
    return dict(label=label, groups=len(groups), layouts=int(sum(g.n for g in groups)),
                median_rho=float(np.nanmedian(rho)), median_regret=float(np.median(reg)),
                mean_regret=float(reg.mean()), good=float(np.mean(reg <= GOOD_REGRET)), detail=groups)


def tie_regrets() -> list[tuple]:
    """The favourite as `plan search` names its tie (planner/choose.py): the simplest layout
    predicted within TIE_PCT of the fastest, against the fastest itself; per file, fitted and left out."""
    from planner.choose import TIE_PCT, simplest_within, simplicity_keys
    from planner.fidelity.calibration import load_cases
    from planner.fidelity.held_out import fitting_cases, load_held_out
    from planner.layout.space import Layouts

    cases = {c.id: c for c in load_cases(vtrain=True)}
    cases.update({c.id: c for c in fitting_cases(load_held_out())})
    groups: dict = {}
    with open(ROOT / "data" / "calibration" / "residuals.csv") as fh:
        for r in csv.DictReader(fh):
            if r["source"] not in ("vtrain", *NEW_SOURCES) or r["metric"] != "iteration_s" or r["case"] not in cases:
                continue
            case = cases[r["case"]]
            name = NEW_SOURCES.get(r["source"]) or ("vTrain multi-node" if "multi" in r["case"] else "vTrain single node")
            groups.setdefault((name, r["case"], r["gpus"]), []).append(
                (float(r["measured"]), float(r["fitted_error"]), float(r["loso_error"] or "nan"),
                 case.layouts.take(np.array([int(r["row"]) * case.alternatives]))))
    out = []
    for which, tag in ((1, "fitted"), (2, "left out of the fit")):
        for name in dict.fromkeys(k[0] for k in groups):
            fastest, tie = [], []
            for key, rows in groups.items():
                if key[0] != name or len(rows) < 3:
                    continue
                meas = np.array([x[0] for x in rows])
                pred = meas * (1 + np.array([x[which] for x in rows]))
                if np.isnan(pred).any():
                    continue
                lay = Layouts.concat([x[3] for x in rows])
                best = int(np.argmin(pred))
                pick = simplest_within(pred, np.arange(len(rows)), best, TIE_PCT,
                                       lambda close: simplicity_keys(lay.take(close)))
                fastest.append(meas[best] / meas.min() - 1)
                tie.append(meas[best if pick is None else pick] / meas.min() - 1)
            if fastest:
                out.append((f"{name} ({tag})", len(fastest), np.array(fastest), np.array(tie)))
    return out


def main() -> None:
    if "--tie" in sys.argv:
        print("| measured layouts | groups | favourite | median regret | mean regret | regret <= 3 % |")
        print("|---|---:|---|---:|---:|---:|")
        for label, n, fastest, tie in tie_regrets():
            for what, reg in (("the fastest predicted", fastest), ("the simplest within 3 % of it", tie)):
                print(f"| {label} | {n} | {what} | {100 * np.median(reg):.1f} % | {100 * reg.mean():.1f} % | "
                      f"{100 * np.mean(reg <= GOOD_REGRET):.0f} % |")
        return
    rows = []
    for which, tag in (("fitted_error", "fitted"), ("loso_error", "left out of the fit")):
        for name, (k, p, m) in {**vtrain_groups(which), **new_source_groups(which)}.items():
            rows.append(summarise(f"{name} ({tag})", k, p, m))
    for name, (k, p, m) in bloom_groups().items():
        rows.append(summarise(name, k, p, m))
    if "--markdown" in sys.argv:
        print("| measured layouts | groups | layouts | median Spearman rho | median regret | mean regret | regret <= 3 % |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            print(f"| {r['label']} | {r['groups']} | {r['layouts']} | {r['median_rho']:.2f} | "
                  f"{100 * r['median_regret']:.1f} % | {100 * r['mean_regret']:.1f} % | {100 * r['good']:.0f} % |")
        return
    for r in rows:
        print(f"{r['label']}: {r['groups']} groups, {r['layouts']} layouts; median rho {r['median_rho']:.2f}, "
              f"median regret {r['median_regret']:.1%}, mean {r['mean_regret']:.1%}, "
              f"{r['good']:.0%} of groups within {GOOD_REGRET:.0%}")
        for g in sorted(r["detail"], key=lambda g: -g.regret)[:3]:
            print(f"   worst: {g.key} n={g.n} rho {g.rho:+.2f} regret {g.regret:.1%}")


if __name__ == "__main__":
    main()
