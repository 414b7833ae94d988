"""Fit the hardware constants of each GPU family and the constants of each software stack on it,
all at once, over every calibration source; report each source's error fitted and left out.

    python benchmarks/calibrate.py            # fit, leave-one-source-out, print the table
    python benchmarks/calibrate.py --write    # also write the constants into configs/ and the
                                              # residuals and table into data/calibration/
    python benchmarks/calibrate.py --quick    # fitted only (no leave-one-source-out refits)
    python benchmarks/calibrate.py --leave-out=stack --write   # refit without each stack's runs
    python benchmarks/calibrate.py --leave-out=gpu --write     # ... without each GPU family's
                                              # (their tables in data/calibration/fidelity-by-*.json)

Needs scipy (a development tool only). Protocol:
- one set of hardware constants per GPU family (A100 40/80GB share a chip), one set of stack
  constants per (family, stack); never per case; GPU families with a handful of runs (Blackwell)
  fit only their GEMM and attention efficiencies, in a second stage, over their sibling's
  constants (SPARSE_FAMILIES in planner/fidelity/calibration.py);
- residuals are log(predicted / measured), each source weighted equally (1/sqrt(n) per figure);
  soft-L1 loss so that a handful of odd runs cannot pull every constant;
- leave-one-source-out: refit without a whole source and predict it. Constants no remaining source
  informs carry over: a stack's from its profile (configs/stacks), a family's hardware fractions
  from the other family's fit.
"""
from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from planner.specs.shipped import stack_data  # noqa: E402
from planner.specs import StackConstants  # noqa: E402
from planner.fidelity.calibration import (  # noqa: E402
    FAMILIES, SIBLINGS, SOURCES, SPARSE_FAMILIES, family_of, load_cases, relative_errors, with_constants,
)
from planner.fidelity.held_out import SOURCES as NEW_SOURCES, fitting_cases, load_held_out  # noqa: E402

from planner.fidelity.bounds import HARDWARE, STACK, STACK_EXTRA  # noqa: E402  (their citations there)
from planner.fidelity.error_bands import carried_over_pct  # noqa: E402
# Weak priors (a ridge term) keep constants that no source separates near published figures:
# FlashAttention-2 forward reaches 50-70 % of peak on A100 and 35-50 % on H100 (Dao 2023, Fig. 5-6).
# On Hopper and Blackwell `flash_attention` is the fused cuDNN / FA3-class kernel, whose published rates
# are higher (forward+backward at 2,048 tokens: H100 0.48-0.56, GB200 0.49, GB300 0.59; cuDNN in the FA3
# paper, cudnn-frontend's Llama 3.1 rows): as priors they made the refit worse (11.1 -> 11.6 % left out:
# H100's hbm fell to 0.63 to keep the same time), so a Hopper mechanism is missing that the low rate stands
# for; the FA2 figure stays until it is found.
# large cuBLAS GEMMs 75-85 % (NVIDIA Deep Learning Performance docs).
# FP8 GEMMs: 60-70 % of the FP8 peak on H100 (Transformer Engine / cuBLASLt benchmarks, NVIDIA's
# "FP8 training" docs); Blackwell taken as Hopper until its runs say otherwise.
_BLACKWELL = {"gemm": 0.75, "gemm_fp8": 0.65, "flash_attention": 0.45}
PRIORS = {"a100": {"gemm": 0.8, "flash_attention": 0.55}, "h100": {"gemm": 0.75, "gemm_fp8": 0.65, "flash_attention": 0.45},
          **{fam: dict(_BLACKWELL) for fam in SPARSE_FAMILIES}}
SPARSE_HARDWARE = ("gemm", "gemm_fp8", "flash_attention")
PRIOR_WEIGHT = 0.1
LAUNCH_PRIOR_WEIGHT = 0.03
METRICS = ("iteration_s", "layer_forward_ms", "layer_backward_ms")


class Problem:
    """The free constants of a set of cases, as one vector in the unit box."""

    def __init__(self, cases, priors, hardware: bool = True, exclude=frozenset()):
        self.cases = cases
        self.priors = priors  # {("hw", fam): {...}, ("stack", fam, name): {...}}
        self.hardware = hardware
        self.names = []
        fp8 = {family_of(c.gpu) for c in cases if precision_of(c) != "16-bit"}
        for fam in sorted({family_of(c.gpu) for c in cases}) if hardware else ():
            names = SPARSE_HARDWARE if fam in SPARSE_FAMILIES else tuple(HARDWARE)
            self.names += [(("hw", fam), k) for k in names if k != "gemm_fp8" or fam in fp8]
        for fam, stack in sorted({(family_of(c.gpu), c.stack) for c in cases}):
            if fam in SPARSE_FAMILIES:
                continue  # the sibling's stack constants (values())
            for k in {**STACK, **STACK_EXTRA.get(stack, {})}:
                self.names.append((("stack", fam, stack), k))
        self.names = [n for n in self.names if n not in exclude]
        self.lo = np.array([_bounds(n)[0] for n in self.names])
        self.hi = np.array([_bounds(n)[1] for n in self.names])
        counts = {}
        for c in cases:
            counts[c.source] = counts.get(c.source, 0) + _figures(c)
        self.weight = {s: 1.0 / np.sqrt(n) for s, n in counts.items()}
        self.touched = [[i for i, c in enumerate(cases) if _touches(key, c)] for key, _ in self.names]
        self.pool = None

    def values(self, x) -> dict:
        out = {key: dict(v) for key, v in self.priors.items()}
        for (key, name), u in zip(self.names, x):
            lo, hi = _bounds((key, name))
            out.setdefault(key, {})[name] = float(lo + np.clip(u, 0, 1) * (hi - lo))
        return inherit(out)

    def x0(self) -> np.ndarray:
        return np.array([np.clip((self.priors.get(key, {}).get(name, lo) - lo) / (hi - lo), 0, 1)
                         for (key, name), lo, hi in zip(self.names, self.lo, self.hi)])

    def case_residuals(self, x, indices=None) -> list[np.ndarray]:
        vals = self.values(x)
        idx = range(len(self.cases)) if indices is None else indices
        return [self.weight[self.cases[i].source] * np.log1p(errors_with(self.cases[i], vals)) for i in idx]

    def residuals(self, x) -> np.ndarray:
        return np.concatenate(self.case_residuals(x) + [self.prior_residuals(x)])

    def prior_residuals(self, x) -> np.ndarray:
        vals = self.values(x)
        kernels = [PRIOR_WEIGHT * np.log(vals[key][k] / PRIORS[key[1]][k])
                   for key, k in self.names if key[0] == "hw" and k in PRIORS.get(key[1], {})]
        # The launch floor binds only on small layers: where no source has them it stays near the
        # profile's count of kernels x launch cost (+10 us, one launch, keeps the log finite at 0).
        launch = [LAUNCH_PRIOR_WEIGHT * np.log((vals[key][k] + 10.0) / (self.priors[key][k] + 10.0))
                  for key, k in self.names if k == "layer_launch_us"]
        return np.array(kernels + launch)

    def jacobian(self, x, step: float = 1e-3) -> np.ndarray:
        """Forward differences, re-predicting only the cases a constant touches (a stack's
        constants touch its cases on that GPU family; a family's, all of its cases); the columns
        shared out over WORKERS forked processes (each re-predicts its own columns' cases)."""
        base = self.case_residuals(x)
        prior0 = self.prior_residuals(x)
        offsets = np.cumsum([0] + [b.size for b in base])
        jac = np.zeros((offsets[-1] + prior0.size, len(self.names)))
        # Costliest columns first, dealt round the workers, so that each gets a like share.
        order = sorted(range(len(self.names)), key=lambda j: -len(self.touched[j]))
        shares = [order[w::WORKERS] for w in range(WORKERS)]
        if self.pool is None:
            parts = [self.columns(x, order, step, base, prior0)]
        else:
            parts = self.pool.map(_columns, [(x, js, step, base, prior0) for js in shares if js])
        for part in parts:
            for j, col in part:
                jac[:, j] = col
        return jac

    def columns(self, x, js, step, base, prior0) -> list:
        offsets = np.cumsum([0] + [b.size for b in base])
        out = []
        for j in js:
            col = np.zeros(offsets[-1] + prior0.size)
            h = step if x[j] + step <= 1.0 else -step
            xp = x.copy()
            xp[j] += h
            touched = self.touched[j]
            for i, r in zip(touched, self.case_residuals(xp, touched)):
                col[offsets[i]:offsets[i + 1]] = (r - base[i]) / h
            col[offsets[-1]:] = (self.prior_residuals(xp) - prior0) / h
            out.append((j, col))
        return out


# Two cores: the Jacobian's columns in two forked processes (the problem reaches them by fork).
WORKERS = 2
_PROBLEM: "Problem | None" = None


def _columns(args) -> list:
    return _PROBLEM.columns(*args)


def precision_of(case) -> str:
    return "16-bit" if case.model.training.precision in ("bf16", "fp16") else case.model.training.precision


def inherit(vals: dict) -> dict:
    """A sparse family's constants: its fitted GEMM and attention efficiencies over its sibling's
    hardware constants, and its sibling's stack constants."""
    out = dict(vals)
    for fam, root in SPARSE_FAMILIES.items():
        if ("hw", fam) in out and ("hw", root) in out:
            out[("hw", fam)] = {**out[("hw", root)], **{k: v for k, v in vals[("hw", fam)].items() if k in SPARSE_HARDWARE}}
        for key, v in vals.items():
            if key[0] == "stack" and key[1] == root:
                out[("stack", fam, key[2])] = dict(v)
    return out


def _touches(key, case) -> bool:
    fam = family_of(case.gpu)
    fams = (fam, SPARSE_FAMILIES.get(fam))
    return key[1] in fams and (key[0] == "hw" or key[2] == case.stack)


def _bounds(name) -> tuple[float, float]:
    key, k = name
    if key[0] == "hw":
        return HARDWARE[k]
    return {**STACK, **STACK_EXTRA.get(key[2], {})}[k]


def _figures(case) -> int:
    return sum(np.atleast_1d(case.measured[k]).size for k in METRICS if k in case.measured)


def errors_with(case, vals: dict) -> np.ndarray:
    fam = family_of(case.gpu)
    model, cluster = with_constants(case, vals.get(("hw", fam), {}), vals.get(("stack", fam, case.stack), {}))
    return relative_errors(case, model, cluster, METRICS)


# Where every fit starts, whatever the shipped presets hold (they are the last fit's output: starting
# there made the result depend on the fit before it, and let a left-out source's influence leak into
# its own leave-one-source-out refit). Published typical figures: nccl-tests all-reduce bus
# bandwidth ~75-80 % of the NVLink or NIC rate (NVIDIA nccl-tests PERFORMANCE.md, DGX A100/H100),
# HBM streaming ~85 % (Jia et al. 2018, "Dissecting the NVIDIA Volta GPU"; STREAM on A100/H100),
# a GEMM at half rate around 1 GFLOP and NCCL at half bandwidth around 1 MB (mid-range of the
# curves in NVIDIA's "Matrix Multiplication Background" guide and nccl-tests).
START = {"gemm": 0.75, "gemm_fp8": 0.65, "gemm_half_gflop": 1.0, "hbm": 0.85, "flash_attention": 0.5,
         "nvlink": 0.8, "network": 0.8, "message_half_mb": 1.0}


def start_values(cases) -> dict:
    """Starting values: START (with the family's kernel priors) and the stack profiles' own priors,
    never the shipped fitted constants."""
    pri = {}
    for c in cases:
        fam = family_of(c.gpu)
        pri.setdefault(("hw", fam), {**START, **PRIORS.get(fam, {})})
        prof = stack_data(c.stack)
        pri.setdefault(("stack", fam, c.stack), {k: float(prof.get(k, StackConstants.model_fields[k].default) or 0.0)
                                                 for k in {**STACK, **STACK_EXTRA.get(c.stack, {})}})
    return pri


# Sources whose runs are mixture-of-experts (or on Blackwell): they fit only the Blackwell GPUs' GEMM
# and attention efficiencies. Their H100 runs are predicted, not fitted: in a first fit they pulled
# the H100's NVLink efficiency to its bound and the megatron-core overheads with it (a missing MoE
# mechanism, not a constant: README, Fidelity).
MOE_SOURCES = {"megatronbridge", "nemo2025"}


# Runs predicted but never fitted: GPT-OSS's attention sinks, alternating 128-token sliding windows
# and 64-wide heads are not modelled, and its runs are 1.5x slower than the model on the H100 whose
# constants dense runs fix; fitted, its BF16 runs set GB200's BF16 GEMM efficiency alone (to 0.34).
PREDICT_ONLY = ("gpt_oss",)
# Whole sources predicted, never fitted (their left-out errors are their errors with every other
# source's fit, their stack's constants its profile's priors). The Ultra-Scale Playbook's nanotron
# runs are 1.2x the prediction on one node and 24x (median) on 64, up to 300x (its authors: "simple
# benchmarks that should have taken minutes would stretch into hours"); fitted, they pulled the
# H100's network efficiency and flash-attention efficiency to their lower bounds (0.3, 0.25) and
# nanotron's overheads to their upper bounds (1 s a step, 5 ms a micro-batch), and stayed 75 % off:
# what they lack is a mechanism of that cluster at scale, not a constant.
# NeMo 24.03's long-context Llama 2 7B runs (cp 1-32, 4k-1M tokens) want slower attention and
# collectives than dgxc's H100 runs: fitted together, flash attention went to its 0.3 bound, NVLink to
# 0.7 and tp_overlap_exposed to 1, and dgxc's runs left out were 35 % off (4-5 % without them): the
# long-sequence mechanism (context-parallel attention at up to 1M tokens) is missing, not a constant.
PREDICTED_SOURCES = {"playbook", "nemo_longseq"}
# Sources of a stack no other source measures that fit only that stack's constants, in a last stage
# with every hardware constant held (as the Blackwell GPUs fit only their kernels'): torchtitan's
# 18 runs, fitted with the H100's hardware, moved its collective and attention efficiencies to their
# bounds, and Megatron's H100 runs left out went from 4-5 % to 25-28 % off.
STACK_ONLY_SOURCES = {"torchtitan"}


def fit(cases, priors) -> dict:
    """Two stages: every GPU family with enough dense runs (A100, H100) and its stacks; then each
    sparse family's GEMM and attention efficiencies with its sibling's constants held, so that a
    handful of runs on a new GPU cannot move the constants the other sources agree on.
    The dense families share no constant and no source (each source ran on one of them), so each is
    its own problem: the sum of their losses is minimised by minimising each, and a refit that
    leaves out an A100 source reuses the H100 fit it would reproduce (_FAMILY_FITS)."""
    cases = [c for c in cases if not any(tag in c.id for tag in PREDICT_ONLY) and c.source not in PREDICTED_SOURCES]
    dense = [c for c in cases if family_of(c.gpu) not in SPARSE_FAMILIES and c.source not in MOE_SOURCES
             and c.source not in STACK_ONLY_SOURCES]
    sparse = [c for c in cases if family_of(c.gpu) in SPARSE_FAMILIES]
    vals = dict(priors)
    for fam in sorted({family_of(c.gpu) for c in dense}):
        mine = [c for c in dense if family_of(c.gpu) == fam]
        key = (fam, tuple(c.id for c in mine))
        if key not in _FAMILY_FITS:
            got = _solve(Problem(mine, priors), fam)
            _FAMILY_FITS[key] = {k: v for k, v in got.items() if k[1] == fam}
        vals.update(_FAMILY_FITS[key])
    vals = inherit(vals)
    if sparse:
        held = {**priors, **{k: v for k, v in vals.items() if k[1] not in SPARSE_FAMILIES}}
        vals = {**vals, **_solve(Problem(sparse, held), "+".join(sorted({family_of(c.gpu) for c in sparse})))}
    stack_only = [c for c in cases if c.source in STACK_ONLY_SOURCES]
    if stack_only:  # their stacks' constants, every hardware constant held
        got = _solve(Problem(stack_only, {**priors, **vals}, hardware=False), "stacks of " + ", ".join(sorted({c.stack for c in stack_only})))
        vals = {**vals, **{k: v for k, v in got.items() if k[0] == "stack" and (k[1], k[2]) in {(family_of(c.gpu), c.stack) for c in stack_only}}}
    return inherit(vals)


# (family, its cases' ids) -> that family's fitted constants: a family's fit depends on its own
# cases only (their priors and per-source weights included), so equal cases give an equal fit.
_FAMILY_FITS: dict = {}


def _solve(prob: "Problem", label: str = "") -> dict:
    import multiprocessing
    from scipy.optimize import least_squares

    global _PROBLEM
    t0 = time.time()
    # A constant no case responds to (tp_overlap_exposed where every run has tp 1) keeps its prior:
    # fitted, it lands wherever the solver stops (0 or 1 for the A100's Megatron-Core, run to run).
    _PROBLEM = prob
    with multiprocessing.get_context("fork").Pool(WORKERS) as pool:
        prob.pool = pool
        jac = prob.jacobian(prob.x0())
        prob.pool = None
    cases_rows = sum(r.size for r in prob.case_residuals(prob.x0()))
    dead = {n for n, col in zip(prob.names, jac[:cases_rows].T) if not np.any(np.abs(col) > 1e-9)}
    if dead:
        prob = Problem(prob.cases, prob.priors, prob.hardware, exclude=dead)
        print(f"  {label}: held at their priors, no case responds to them: "
              + ", ".join(f"{'/'.join(k[1:])}.{n}" for k, n in sorted(dead)), flush=True)
    _PROBLEM = prob
    with multiprocessing.get_context("fork").Pool(WORKERS) as pool:
        prob.pool = pool
        res = least_squares(prob.residuals, prob.x0(), jac=lambda x: prob.jacobian(x), bounds=(0.0, 1.0),
                            loss="soft_l1", f_scale=0.05, max_nfev=MAX_NFEV, x_scale=1.0, ftol=TOL, xtol=TOL)
        prob.pool = None
    # status 0: stopped at MAX_NFEV, not converged (said, so that a table never hides it)
    print(f"  fit {label}: {len(prob.cases)} cases, {len(prob.names)} constants: status {res.status}, "
          f"{res.nfev} evaluations, cost {res.cost:.5f}, {time.time() - t0:.0f} s", flush=True)
    return prob.values(res.x)


# Relative change of the cost (and of the constants) at which a fit stops: 1e-5 moves no fitted
# constant by more than its printed 4 digits' worth of prediction on these sources, and takes a
# fraction of scipy's default 1e-8's evaluations.
TOL = 1e-5
MAX_NFEV = 200


def carry_over(vals: dict, held) -> dict:
    """Constants for left-out cases that no remaining source informs: a stack's from the same stack
    fitted on the other family, else its profile's; a family's hardware from the other family."""
    out = dict(vals)
    for c in held:
        fam = family_of(c.gpu)
        sib = fam
        while ("hw", fam) not in out:  # the nearest fitted sibling (b300 -> b200 -> h100 -> a100)
            sib = SIBLINGS[sib]
            if ("hw", sib) in out:
                out[("hw", fam)] = dict(out[("hw", sib)])
        key = ("stack", fam, c.stack)
        if key not in out:
            other = next((v for k, v in vals.items() if k[0] == "stack" and k[2] == c.stack), None)
            out[key] = dict(other) if other is not None else start_values([c])[key]
    return out


def all_cases() -> list:
    """Every source's runs: the calibration files, vTrain's runs, and new-sources.yaml (torchtitan,
    the Playbook's nanotron, NeMo long context; planner/fidelity/held_out.py builds them)."""
    cases = [c for c in load_cases(vtrain=True) if c.kind in ("iteration", "layer")]
    return cases + fitting_cases(load_held_out())


# What a refit leaves out, one value at a time: a whole source, every source of a stack (what a
# user of a stack never calibrated gets), or every run on a GPU family (a new GPU).
LEAVE_OUT = {"source": lambda c: c.source, "stack": lambda c: c.stack, "gpu": lambda c: family_of(c.gpu)}


def _left_out(key, value, cases) -> dict:
    """Refit without the cases whose `key` is `value`, then predict them."""
    rest = [c for c in cases if key(c) != value]
    held = [c for c in cases if key(c) == value]
    vals = carry_over(fit(rest, start_values(rest)), held)
    return {c.id: errors_with(c, vals) for c in held}


def left_out_values(by: str, cases) -> list:
    if by == "source":
        return [s for s in (*SOURCES, *NEW_SOURCES) if any(c.source == s for c in cases)]
    return sorted({LEAVE_OUT[by](c) for c in cases})


def run(write: bool, quick: bool, by: str = "source") -> None:
    t0 = time.time()
    cases = all_cases()
    print(f"{len(cases)} cases loaded in {time.time() - t0:.0f} s", flush=True)
    priors = start_values(cases)
    fitted = fit(cases, priors)
    print(f"fitted in {time.time() - t0:.0f} s", flush=True)
    rows = {c.id: (c, errors_with(c, fitted)) for c in cases}
    loso = {}
    if not quick:
        values = left_out_values(by, cases)
        for k, value in enumerate(values, 1):  # one at a time: each fit's Jacobian takes both cores
            if by == "source" and value in PREDICTED_SOURCES:  # never fitted: the full fit leaves it out
                held = [c for c in cases if c.source == value]
                vals = carry_over(fitted, held)
                loso.update({c.id: errors_with(c, vals) for c in held})
            else:
                loso.update(_left_out(LEAVE_OUT[by], value, cases))
            print(f"left out {by} {value} ({k}/{len(values)}): {time.time() - t0:.0f} s", flush=True)
    table = source_table(rows, loso)
    print_table(table, by)
    print_constants(fitted)
    if write and by == "source":
        write_outputs(fitted, rows, loso, table)
    elif write:  # the constants and the bands rest on the source refits; the others are reported
        (ROOT / "data" / "calibration" / f"fidelity-by-{by}.json").write_text(json.dumps(table, indent=1) + "\n")


def group_of(case) -> str:
    if case.source == "vtrain":
        return "vtrain-multi" if "multi" in case.id else "vtrain-single"
    if case.source == "korthikanti2022":
        return "korthikanti2022-t4" if case.kind == "layer" else "korthikanti2022-t5"
    if case.source == "dgxc2024" and ("fp8" in case.id or "llama31" in case.id):
        return "dgxc2024-fp8-cp"  # the same source, reported apart
    return case.source


GROUP_LABELS = {
    "megatronbridge": "Megatron-Bridge MoE and dense, BF16/FP8/MXFP8 (H100, B200, B300, GB200, GB300, megatron-core)",
    "nemo2025": "NeMo 25.02/25.04 Mixtral 8x7B FP8 (B200, GB200, megatron-core)",
    "dgxc2024-fp8-cp": "NVIDIA dgxc GPT-3 175B FP8 and Llama 3.1 8B cp 2, BF16/FP8 (H100, megatron-core)",
    "korthikanti2022-t5": "Korthikanti 2022 Table 5 + Sec. 6.3, iteration (A100, megatron-lm-2022)",
    "korthikanti2022-t4": "Korthikanti 2022 Table 4, layer fwd/bwd (A100, megatron-lm-2022)",
    "narayanan2021": "Narayanan 2021 Table 1, 1.7B-1T on 32-3072 GPUs (A100, megatron-lm-2022)",
    "vocabpar2024": "Yeung 2024 pure pipeline, 32k-256k vocab (A100, megatron-core)",
    "llmfoundry": "llm-foundry FSDP, 7B-70B (A100 40/80GB, pytorch-fsdp)",
    "dgxc2024": "NVIDIA dgxc 175B/15B, 16-2048 GPUs (H100, megatron-core)",
    "vtrain-single": "vTrain single node (A100, megatron-deepspeed)",
    "vtrain-multi": "vTrain multi-node, up to 512 GPUs (A100, megatron-deepspeed)",
    **{key: f"{src.label} ({src.stack})" for key, src in NEW_SOURCES.items()},
}


def source_table(rows, loso) -> list[dict]:
    groups: dict[str, dict] = {}
    for cid, (case, err) in rows.items():
        g = groups.setdefault(group_of(case), {"fit": [], "loso": []})
        g["fit"].append(err)
        if cid in loso:
            g["loso"].append(loso[cid])
    out = []
    for name, g in groups.items():
        f = np.concatenate(g["fit"])
        lo = np.concatenate(g["loso"]) if g["loso"] else np.full(0, np.nan)
        out.append(dict(group=name, label=GROUP_LABELS.get(name, name), n=int(f.size),
                        fitted_mean_pct=100 * float(np.abs(f).mean()), fitted_bias_pct=100 * float(f.mean()),
                        loso_mean_pct=100 * float(np.abs(lo).mean()) if lo.size else None,
                        loso_bias_pct=100 * float(lo.mean()) if lo.size else None,
                        loso_max_pct=100 * float(np.abs(lo).max()) if lo.size else None))
    return out


def print_table(table, by: str = "source") -> None:
    print(f"| measurements | n | fitted: mean abs error | bias | {by} left out: mean abs error | bias | max |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in table:
        lo = "-" if r["loso_mean_pct"] is None else f"{r['loso_mean_pct']:.1f} % | {r['loso_bias_pct']:+.1f} % | {r['loso_max_pct']:.0f} %"
        lo = lo if r["loso_mean_pct"] is not None else "- | - | -"
        print(f"| {r['label']} | {r['n']} | {r['fitted_mean_pct']:.1f} % | {r['fitted_bias_pct']:+.1f} % | {lo} |")
    per_source = [r["loso_mean_pct"] for r in table if r["loso_mean_pct"] is not None]
    if per_source:
        print(f"mean over sources, left out: {np.mean(per_source):.1f} %")


def print_constants(vals) -> None:
    for key, v in sorted(vals.items(), key=lambda kv: str(kv[0])):
        print(" ", "/".join(key[1:]), {k: round(x, 4) for k, x in v.items()})


def write_outputs(fitted, rows, loso, table) -> None:
    fp8 = {family_of(c.gpu) for c, _ in rows.values() if precision_of(c) != "16-bit"}
    for fam, names in FAMILIES.items():
        hw = fitted.get(("hw", fam))
        if hw is None:
            continue
        hw = {k: v for k, v in hw.items() if k != "gemm_fp8" or fam in fp8}
        fitted_on = sorted({c.source for c, _ in rows.values() if family_of(c.gpu) == fam
                            and c.source not in PREDICTED_SOURCES | STACK_ONLY_SOURCES})
        if fam in SPARSE_FAMILIES:
            root = FAMILIES[SPARSE_FAMILIES[fam]][0]
            fitted_on = [f"{', '.join(fitted_on)} ({', '.join(SPARSE_HARDWARE)}; the rest: {root}'s fit)"]
        for gpu in names:
            _write_gpu(ROOT / "configs" / "gpus" / f"{gpu}.yaml", hw, fitted_on)
    by_stack: dict[str, dict] = {}
    for key, v in fitted.items():
        if key[0] == "stack":
            srcs = sorted({c.source for c, _ in rows.values() if family_of(c.gpu) == key[1] and c.stack == key[2]
                           and c.source not in PREDICTED_SOURCES})
            for gpu in FAMILIES[key[1]]:
                cases = [(c, loso[c.id]) for c, _ in rows.values()
                         if c.gpu == gpu and c.stack == key[2] and c.id in loso]
                by_stack.setdefault(key[2], {})[gpu] = {"fitted_on": srcs, **v, "error_cases": cases}
    for path in sorted((ROOT / "configs" / "stacks").glob("*.yaml")):
        _write_stack(path, by_stack.get(path.stem, {}))
    _write_residuals(rows, loso)
    write_band_figures()
    (ROOT / "data" / "calibration" / "fidelity.json").write_text(json.dumps(table, indent=1) + "\n")


def source_bias_pct(residuals: list[dict]) -> float:
    """RMS over the fitted sources of each one's mean signed left-out error [%] (residuals.csv rows):
    how far a source's runs sit from the planner as a whole (planner/fidelity/error_bands.py)."""
    by: dict[str, list] = {}
    for r in residuals:
        if r["source"] not in PREDICTED_SOURCES and r["loso_error"] not in ("", "nan"):
            by.setdefault(r["source"], []).append(100 * float(r["loso_error"]))
    return float(np.sqrt(np.mean([np.mean(v) ** 2 for v in by.values()])))


def write_band_figures() -> None:
    """source_bias_pct and carried_over_error_pct into every stack profile, from data/calibration/
    residuals.csv (also alone: `--bands`, after a fit, without refitting)."""
    import csv

    with open(ROOT / "data" / "calibration" / "residuals.csv") as fh:
        residuals = list(csv.DictReader(fh))
    bias = source_bias_pct(residuals)
    carried = carried_over_pct((r["source"], family_of(r["gpu"]), r["stack"], 100 * abs(float(r["loso_error"])))
                               for r in residuals if r["loso_error"] not in ("", "nan"))
    lines = {"carried_over_error_pct": f"carried_over_error_pct: {carried:.1f}  # benchmarks/calibrate.py: RMS over the "
                                       "sources predicted with carried-over constants of each one's RMS left-out error",
             "source_bias_pct": f"source_bias_pct: {bias:.1f}  # benchmarks/calibrate.py: RMS of the fitted sources' "
                                "mean left-out errors"}
    for path in sorted((ROOT / "configs" / "stacks").glob("*.yaml")):
        text = path.read_text()
        for key, line in lines.items():
            if re.search(rf"^{key}: .*$", text, flags=re.M):
                text = re.sub(rf"^{key}: .*$", line, text, flags=re.M)
            elif "\ngpus:" in text:
                text = text.replace("\ngpus:", f"\n{line}\ngpus:", 1)
            else:
                text = text.rstrip("\n") + "\n" + line + "\n"
        path.write_text(text)
    print(f"source_bias_pct {bias:.1f}, carried_over_error_pct {carried:.1f} written to configs/stacks/*.yaml")


def _write_gpu(path: Path, hw: dict, fitted_on) -> None:
    text = path.read_text()
    for k, v in hw.items():
        line = f"  {k}: {v:.4g}"
        if re.search(rf"^  {k}: .*$", text, flags=re.M):
            text = re.sub(rf"^  {k}: .*$", line, text, flags=re.M)
        else:
            text = text.replace("\nefficiency:\n", f"\nefficiency:\n{line}\n", 1)
    note = f"# efficiency: fitted by benchmarks/calibrate.py on {', '.join(fitted_on)}."
    text = re.sub(r"^# efficiency: .*$", note, text, count=1, flags=re.M)
    path.write_text(text)


def _write_stack(path: Path, gpus: dict) -> None:
    text = path.read_text()
    text = text[: text.index("\ngpus:")] if "\ngpus:" in text else text.rstrip("\n")
    lines = ["gpus:  # fitted by benchmarks/calibrate.py (do not edit by hand)" if gpus else "gpus: {}"]
    for gpu, v in sorted(gpus.items()):
        lines.append(f"  {gpu}:")
        lines.append(f"    fitted_on: [{', '.join(v['fitted_on'])}]")
        lines += [f"    {k}: {x:.4g}" for k, x in v.items() if k not in ("fitted_on", "error_cases")]
        if v["error_cases"]:
            lines.append("    error_cases:  # [GPUs, parameters (billions), leave-one-source-out |error| %]")
            for case, err in v["error_cases"]:
                g = int(np.max(np.atleast_1d(case.layouts.gpus)))
                lines.append(f"      - [{g}, {case.model.total_params() / 1e9:.3g}, {100 * np.sqrt(np.mean(err ** 2)):.1f}]")
    path.write_text(text.rstrip("\n") + "\n" + "\n".join(lines) + "\n")


def _write_residuals(rows, loso) -> None:
    """One line per measured figure: what benchmarks/ranking.py and the README table are made of."""
    out = ["case,row,source,stack,gpu,gpus,params_b,metric,measured,fitted_error,loso_error"]
    for cid, (case, err) in rows.items():
        lo = loso.get(cid, np.full(err.shape, np.nan))
        gpus = np.atleast_1d(case.layouts.gpus)[:: case.alternatives]
        metrics = [(k, v) for k in METRICS if k in case.measured for v in np.atleast_1d(case.measured[k])]
        for i, ((metric, meas), e, le) in enumerate(zip(metrics, err, lo)):
            g = int(gpus[min(i, gpus.size - 1)])
            out.append(f"{cid},{i},{case.source},{case.stack},{case.gpu},{g},"
                       f"{case.model.total_params() / 1e9:.4g},{metric},{meas:.6g},{e:.5f},{le:.5f}")
    (ROOT / "data" / "calibration" / "residuals.csv").write_text("\n".join(out) + "\n")


def require_scipy() -> None:
    """Exit 2 with a one-line hint when scipy (the `calibrate` extra) is missing, not a traceback."""
    try:
        import scipy.optimize  # noqa: F401
    except ImportError:
        sys.stderr.write("error: benchmarks/calibrate.py needs scipy: pip install -e '.[calibrate]' (or pip install scipy)\n")
        sys.exit(2)


if __name__ == "__main__":
    if "--bands" in sys.argv:
        write_band_figures()
        sys.exit(0)
    require_scipy()
    by = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--leave-out=")), "source")
    if by not in LEAVE_OUT:
        sys.stderr.write(f"error: --leave-out= takes one of {', '.join(LEAVE_OUT)}, not {by!r}\n")
        sys.exit(2)
    run(write="--write" in sys.argv, quick="--quick" in sys.argv, by=by)
