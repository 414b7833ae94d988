"""The new sources (data/calibration/new-sources.yaml) with the shipped constants: torchtitan's runs
fitted its stack's constants (benchmarks/calibrate.py STACK_ONLY_SOURCES); the Playbook's and NeMo's
long-context runs were never fitted (PREDICTED_SOURCES). Left-out errors of all three, and bands
checked out of sample: benchmarks/calibrate.py and benchmarks/bands.py. The bands here are in
sample for the never-fitted sources (a stack's bands come from its own runs' errors).

    python benchmarks/held_out.py             # summaries, refusals, ranking groups, worst rows
    python benchmarks/held_out.py --markdown  # the tables of docs/fidelity.md

torchtitan (H100 96GB), Hugging Face's Ultra-Scale Playbook (nanotron) and NeMo's long-context
Llama 2 7B rows, each predicted with the shipped constants (planner/fidelity/held_out.py; never
fitted: benchmarks/calibrate.py does not read the file). Reported:
- mean and median |error| of the step time, by source and by stack as published;
- the share of rows whose |error| is inside the planner's own band (`error_band` of
  planner/score.py's Scores, planner/fidelity/error_bands.py);
- the rows the planner calls out of memory though they trained, and the rows another of its
  constraints or layout rules refuses;
- per ranking group of >= 3 layouts (rows sharing `ranking_group=`): Spearman's rho between
  predicted and measured step times, and the regret of the planner's favourite, the fastest
  predicted of the layouts it does not refuse (its measured time / the best measured - 1),
  planner/fidelity/ranking.py.
About 20 s on 2 cores.
"""
from __future__ import annotations

import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner.constraints import Limits, evaluate  # noqa: E402
from planner.fidelity.held_out import SOURCES, HeldOutRun, load_held_out, nemo_llama2_flops  # noqa: E402
from planner.fidelity.ranking import regret, spearman_rho  # noqa: E402
from planner.score import score  # noqa: E402

GOOD_REGRET = 0.03
MIN_GROUP = 3


@dataclass(frozen=True)
class Row:
    run: HeldOutRun
    predicted_s: float
    band_pct: float
    band_basis: str
    refused_by: tuple[str, ...]  # the planner's constraints the chosen layout fails (memory, tp_in_nvlink_domain, ...)

    @property
    def error(self) -> float:
        return (self.predicted_s - self.run.measured_s) / self.run.measured_s

    @property
    def inside_band(self) -> bool:
        return abs(self.error) * 100 <= self.band_pct


def predict_row(run: HeldOutRun) -> Row:
    """The step time the planner predicts for the row (of its alternatives: the fastest that fits,
    as planner.fidelity.calibration.predict), its band and the constraints that refuse it."""
    case = run.case
    s = score(case.model, case.cluster, case.layouts)
    t = np.asarray(s.step_time_s, dtype=float)
    fits = np.asarray(case.fits)
    i = int(np.argmin(np.where(fits.any() & ~fits, np.inf, t)))
    refused = tuple(m.name for m in evaluate(case.model, case.cluster, s, Limits())
                    if not bool(np.asarray(m.ok).reshape(-1)[i if np.asarray(m.ok).size > 1 else 0]))
    return Row(run, float(t[i]), float(np.atleast_1d(s.error_band.pct)[i]), s.error_band.basis, refused)


def predict_all(runs: list[HeldOutRun], progress=sys.stderr) -> tuple[list[Row], list[tuple[str, str]]]:
    rows, failed = [], []
    for k, run in enumerate(runs, 1):
        try:
            row = predict_row(run)
            if not np.isfinite(row.predicted_s) or row.predicted_s <= 0:
                raise ValueError(f"predicted step time {row.predicted_s}")
            rows.append(row)
        except Exception as exc:  # noqa: BLE001 -- a row the planner cannot predict is listed, not dropped
            failed.append((run.id, f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"))
        if progress is not None and (k % 50 == 0 or k == len(runs)):
            progress.write(f"\rpredicting held-out rows: {k}/{len(runs)}")
            progress.flush()
    if progress is not None:
        progress.write("\n")
    return rows, failed


def stats(rows: list[Row]) -> dict:
    e = np.array([r.error for r in rows])
    return dict(n=len(rows), mean=float(np.abs(e).mean()), median=float(np.median(np.abs(e))), bias=float(e.mean()),
                max=float(np.abs(e).max()), band=float(np.mean([r.inside_band for r in rows])),
                memory=sum("memory" in r.refused_by for r in rows))


def one_job(rows: list[Row]) -> bool:
    """Rows of one job: the same model shape, sequence, global batch and GPU count."""
    keys = {(r.run.case.model.layers, r.run.case.model.hidden, r.run.case.model.seq_len,
             r.run.case.model.training.global_batch, r.run.gpus) for r in rows}
    return len(keys) == 1


def accepted(row: Row) -> bool:
    """Whether the planner's search could list the row's layout (no constraint or layout rule refuses it)."""
    return not row.refused_by and not row.run.violations


def groups(rows: list[Row]) -> list[dict]:
    """Per ranking group: rho over every measured layout; the favourite among the layouts the planner
    accepts (a layout it refuses is never its choice)."""
    by = defaultdict(list)
    for r in rows:
        if r.run.group is not None:
            by[r.run.group].append(r)
    out = []
    for key, members in by.items():
        if len(members) < MIN_GROUP:
            continue
        pred = np.array([r.predicted_s for r in members])
        meas = np.array([r.run.measured_s for r in members])
        listed = np.where([accepted(r) for r in members], pred, np.inf)
        fav = members[int(np.argmin(listed))]
        best = members[int(np.argmin(meas))]
        out.append(dict(key=key, source=members[0].run.source, n=len(members), rho=spearman_rho(pred, meas),
                        regret=regret(listed, meas) if np.isfinite(listed).any() else float("nan"),
                        one_job=one_job(members), favourite=fav.run.id, best=best.run.id))
    return out


def ranking_summary(label: str, gs: list[dict]) -> dict:
    if not gs:
        return dict(label=label, groups=0, layouts=0, rho=np.nan, regret=np.nan, mean_regret=np.nan, good=np.nan)
    rho = np.array([g["rho"] for g in gs])
    reg = np.array([g["regret"] for g in gs])
    return dict(label=label, groups=len(gs), layouts=sum(g["n"] for g in gs), rho=float(np.nanmedian(rho)),
                regret=float(np.nanmedian(reg)), mean_regret=float(np.nanmean(reg)),
                good=float(np.mean(reg[~np.isnan(reg)] <= GOOD_REGRET)))


def nemo_causal_mean(rows: list[Row]) -> float | None:
    """Mean |error| of the NeMo rows if NeMo had counted causal (half) attention FLOPs."""
    errs = []
    for r in rows:
        if r.run.source != "nemo_longseq":
            continue
        m = r.run.case.model
        full = nemo_llama2_flops(m)
        attention = m.training.global_batch * m.seq_len * m.layers * 12 * m.seq_len * m.hidden
        t = r.run.measured_s * (full - attention / 2) / full
        errs.append(abs(r.predicted_s - t) / t)
    return float(np.mean(errs)) if errs else None


def pct(x: float) -> str:
    return "-" if x != x else f"{100 * x:.1f} %"


def share(x: float) -> str:
    return "-" if x != x else f"{100 * x:.0f} %"


def signed(x: float) -> str:
    return f"{100 * x:+.1f} %"


def markdown(rows, failed, skipped, gs) -> None:
    print("| new-sources rows, shipped constants | rows | mean abs error | median abs error | bias | inside the stated band | out of memory (trained) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for key, src in SOURCES.items():
        mine = [r for r in rows if r.run.source == key]
        if mine:
            s = stats(mine)
            print(f"| {src.label} (`{src.stack}`) | {s['n']} | {pct(s['mean'])} | {pct(s['median'])} | {signed(s['bias'])} | "
                  f"{share(s['band'])} | {s['memory']} |")
    s = stats(rows)
    print(f"| all | {s['n']} | {pct(s['mean'])} | {pct(s['median'])} | {signed(s['bias'])} | {share(s['band'])} | {s['memory']} |")
    by_stack, by_nodes = defaultdict(list), defaultdict(list)
    for r in rows:
        by_stack[r.run.stack_printed].append(r)
        if r.run.source == "playbook":
            by_nodes[r.run.gpus // 8].append(r)
    _error_table("stack as published", sorted(by_stack.items(), key=lambda kv: (-len(kv[1]), kv[0])))
    _error_table("Playbook rows by nodes of 8 GPUs", sorted(by_nodes.items()))
    print()
    print("| ranking groups (>= 3 layouts) | groups | layouts | median Spearman rho | median regret | mean regret | regret <= 3 % |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in ranking_rows(gs):
        print(f"| {r['label']} | {r['groups']} | {r['layouts']} | {r['rho']:.2f} | {pct(r['regret'])} | "
              f"{pct(r['mean_regret'])} | {share(r['good'])} |")
    print()
    print("| group | layouts | one job | Spearman rho | regret of the favourite |")
    print("|---|---:|:---:|---:|---:|")
    for g in gs:
        print(f"| {g['key']} | {g['n']} | {'yes' if g['one_job'] else 'no'} | {g['rho']:+.2f} | {pct(g['regret'])} |")
    if failed or skipped:
        print(f"\nNot predicted: {len(skipped) + len(failed)} rows.")


def _error_table(title: str, groups) -> None:
    """One markdown table of error statistics, a row per (label, rows) group."""
    print()
    print(f"| {title} | rows | mean abs error | median abs error | bias | inside the stated band |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, mine in groups:
        s = stats(mine)
        print(f"| {name} | {s['n']} | {pct(s['mean'])} | {pct(s['median'])} | {signed(s['bias'])} | {share(s['band'])} |")


def ranking_rows(gs: list[dict]) -> list[dict]:
    out = [ranking_summary(f"{SOURCES[k].label}", [g for g in gs if g["source"] == k]) for k in SOURCES]
    out = [r for r in out if r["groups"]]
    out.append(ranking_summary("every group", gs))
    out.append(ranking_summary("groups that are one job (same model, sequence, batch and GPUs)", [g for g in gs if g["one_job"]]))
    return out


def text(rows, failed, skipped, gs) -> None:
    s = stats(rows)
    print(f"{len(rows)} new-sources rows predicted with the shipped constants; "
          f"{len(skipped) + len(failed)} could not be predicted")
    print(f"mean |error| {pct(s['mean'])}, median {pct(s['median'])}, bias {signed(s['bias'])}, max {pct(s['max'])}; "
          f"inside the stated band: {s['band']:.0%}")
    print("\nby source:")
    for key, src in SOURCES.items():
        mine = [r for r in rows if r.run.source == key]
        if not mine:
            continue
        t = stats(mine)
        bases = Counter(r.band_basis for r in mine).most_common(1)[0][0]
        bands = np.array([r.band_pct for r in mine])
        print(f"  {src.label}: n={t['n']}, mean |err| {pct(t['mean'])}, median {pct(t['median'])}, bias {t['bias']:+.1%}, "
              f"max {pct(t['max'])}; inside the band {t['band']:.0%} (band {bands.min():.0f}-{bands.max():.0f} %: {bases})")
    print("\nby stack as published:")
    by = defaultdict(list)
    for r in rows:
        by[r.run.stack_printed].append(r)
    for name, mine in sorted(by.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        t = stats(mine)
        print(f"  {name}: n={t['n']}, mean |err| {pct(t['mean'])}, median {pct(t['median'])}, bias {t['bias']:+.1%}, "
              f"inside the band {t['band']:.0%}")
    causal = nemo_causal_mean(rows)
    if causal is not None:
        print(f"  (NeMo rows if NeMo counted causal attention FLOPs: mean |err| {pct(causal)})")
    memory = [r for r in rows if "memory" in r.refused_by]
    print(f"\nrefused though they trained: {len(memory)} out of memory in the planner's model")
    for r in memory:
        print(f"  {r.run.id}")
    others = Counter(name for r in rows for name in r.refused_by if name != "memory")
    for name, n in others.items():
        print(f"  {n} rows fail the planner's {name} constraint")
    rules = Counter(v.split(":")[0] for r in rows for v in r.run.violations)
    for name, n in rules.items():
        print(f"  {n} rows break the layout rule {name}")
    print("\nranking groups (>= 3 layouts):")
    for g in gs:
        print(f"  {g['key']:28s} n={g['n']:3d} rho {g['rho']:+.2f} regret {g['regret']:6.1%}"
              f"{'' if g['one_job'] else '  (not one job)'}  favourite {g['favourite']}, best {g['best']}")
    for r in ranking_rows(gs):
        print(f"  {r['label']}: {r['groups']} groups, {r['layouts']} layouts; median rho {r['rho']:.2f}, "
              f"median regret {pct(r['regret'])}, mean {pct(r['mean_regret'])}, {r['good']:.0%} within {GOOD_REGRET:.0%}")
    print("\nnot expressible (priced with the closest setting):")
    for item, n in Counter(u for r in rows for u in r.run.unexpressed).most_common():
        print(f"  {n:5d} rows: {item}")
    print("\nnot predicted:" if skipped or failed else "\nnot predicted: none")
    for u in skipped:
        print(f"  {u.id}: {u.reason}")
    for rid, reason in failed:
        print(f"  {rid}: {reason}")
    print("\nworst rows:")
    for r in sorted(rows, key=lambda r: -abs(r.error))[:10]:
        print(f"  {r.run.id:44s} measured {r.run.measured_s:8.3f} s  predicted {r.predicted_s:8.3f} s  "
              f"error {r.error:+7.1%}  band ±{r.band_pct:.0f} %")


def main() -> None:
    held = load_held_out()
    rows, failed = predict_all(held.runs)
    gs = groups(rows)
    (markdown if "--markdown" in sys.argv else text)(rows, failed, held.unpredictable, gs)


if __name__ == "__main__":
    main()
