"""Expected error of a predicted step time, from the calibration residuals of the nearest cases.

The calibration (benchmarks/calibrate.py) stores with each stack profile, per GPU it was measured
on, every case's leave-one-source-out |error|: the error of a prediction made without that whole
source, i.e. what a run the planner never saw can expect. A band is a promise that most real errors
fall inside it (issue 29: 80 %): it is COVERAGE_Z = 1.28 times the root mean square of the k
nearest such cases (distance in log2 GPUs and log2 parameters), 1.28 sigma being where 80 % of a
normal error with that RMS falls, with the sources' own spread added in quadrature (the stack's
`source_bias_pct`: a source's runs as a whole sit off the planner by an amount its neighbours in
other sources cannot show); it is widened, with the reason said, where the evidence is thin:
- beyond the largest calibrated GPU count: x (1 + 0.25 log2(GPUs / largest));
- a GPU this stack was not measured on: the stack's cases on other GPUs, x 1.5;
- a stack never calibrated: the stack profile's `carried_over_error_pct` (carried_over_pct: each
  source predicted with carried-over constants counts once, as a new stack is one more such source);
- a model whose parts no calibration run had (Mamba-2 or gated DeltaNet layers, NVFP4 GEMMs,
  sliding-window attention): x 1.5 each, as
  for a GPU the stack was not measured on (their kernels are priced at efficiencies fitted on others).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from planner.specs import ModelSpec

NEAREST = 8
COVERAGE_Z = 1.2816  # the 90th percentile of N(0, 1): |error| < 1.2816 sigma for 80 % of normal errors
OTHER_GPU_FACTOR = 1.5
SCALE_WIDENING = 0.25
UNMEASURED_FACTOR = 1.5


@dataclass(frozen=True)
class ErrorBand:
    """Expected |error| of each layout's step time [%] and what it rests on."""

    pct: np.ndarray
    basis: str | np.ndarray  # one text, or one per layout (a profile's band widens layout by layout)
    memory_pct: np.ndarray | None = None  # expected |error| of peak memory [%] (a profile with measured memory)


def band_of_cases(cases: np.ndarray, gpus: np.ndarray, params_b: float) -> np.ndarray:
    """RMS |error| of the NEAREST cases to each GPU count (cases: (n, 3) of gpus, params_b, pct);
    computed once per distinct GPU count (a search has one or a few)."""
    counts, back = np.unique(gpus, return_inverse=True)
    d = (np.abs(np.log2(cases[None, :, 0] / counts[:, None]))
         + np.abs(np.log2(cases[None, :, 1] / params_b)))
    k = min(NEAREST, cases.shape[0])
    idx = np.argsort(d, axis=1, kind="stable")[:, :k]
    return np.sqrt(np.mean(cases[idx, 2] ** 2, axis=1))[back.reshape(gpus.shape)]


def _widen_beyond(pct: np.ndarray, cases: np.ndarray, gpus: np.ndarray) -> tuple[np.ndarray, str]:
    largest = cases[:, 0].max()
    beyond = gpus > largest
    if not beyond.any():
        return pct, ""
    factor = 1 + SCALE_WIDENING * np.log2(np.maximum(gpus / largest, 1))
    return pct * factor, f"; wider beyond the largest calibrated scale ({largest:.0f} GPUs)"


def carried_over_pct(errors: Iterable[tuple[str, str | None, str, float]]) -> float | None:
    """The expected |error| of a stack never calibrated [%]: from left-out |errors| given as (source, GPU
    family, stack, |error| %), the sources alone on their (family, stack) - predicted with constants
    carried over from other stacks or GPUs - each counting once: the RMS over them of each one's RMS.
    A new stack is one more such source, its runs' offset as unknown as theirs, so a source of many
    runs weighs no more than one of few (the mean over runs, 19.6 % before, left vTrain a 22 % band
    out of sample where 80 % of its errors reach 35 %; sources sit 4-52 % off on the mean)."""
    rows = list(errors)
    by_key: dict = defaultdict(set)
    for source, family, stack, _ in rows:
        by_key[(family, stack)].add(source)
    # a source's runs on a (family, stack) no other source informs: those were predicted with carried-over constants
    by_source: dict = defaultdict(list)
    for source, family, stack, pct in rows:
        if by_key[(family, stack)] == {source}:
            by_source[source].append(pct)
    rms = [np.sqrt(np.mean(np.square(by_source[s]))) for s in sorted(by_source)]
    return float(np.sqrt(np.mean(np.square(rms)))) if rms else None


def unmeasured_parts(model: ModelSpec) -> list[str]:
    """What in `model` no calibration run had (each widens its band by UNMEASURED_FACTOR)."""
    parts = []
    if model.mamba is not None:
        parts.append("Mamba-2 layers")
    if model.deltanet is not None:
        parts.append("gated DeltaNet layers")
    if model.training.precision == "nvfp4":
        parts.append("NVFP4 GEMMs")
    # GPT-OSS's windows run in cuDNN's sliding-window (and attention-sink) kernels; its rows are
    # predicted, never fitted (benchmarks/calibrate.py PREDICT_ONLY), and no fitted run has a window.
    if model.sliding_window is not None and model.sliding_window < model.seq_len:
        parts.append("sliding-window attention")
    return parts


def error_band(model: ModelSpec, gpu_name: str, gpus) -> ErrorBand:
    """The band of a prediction of `model` on `gpus` GPUs of `gpu_name` (gpus: an array); with a
    profile (--profile), planner/fidelity/own_bands.py band()."""
    band = _error_band(model, gpu_name, gpus)
    parts = unmeasured_parts(model)
    if not parts:
        return band
    factor = UNMEASURED_FACTOR ** len(parts)
    return ErrorBand(band.pct * factor, f"{band.basis}; x{factor:g}: {' and '.join(parts)} never calibrated",
                     band.memory_pct)


def shipped_band_pct(model: ModelSpec, error_cases: Mapping[str, Sequence], gpu_name: str, gpus) -> np.ndarray:
    """The band error_band states for `model` on `gpus` GPUs of `gpu_name` from a stack's calibration cases by
    GPU (StackGpuConstants.error_cases of each: (GPUs, parameters [B], |error| %) rows), the model's
    unmeasured parts included: what a profile's band never goes below beyond its runs."""
    stack = model.training.stack
    pct = _stack_band(stack, {name: c for name, c in error_cases.items() if len(c)}, gpu_name, gpus,
                      model.total_params() / 1e9)[0]
    return pct * UNMEASURED_FACTOR ** len(unmeasured_parts(model))


def _stack_band(stack, error_cases: Mapping[str, Sequence], gpu_name: str, gpus, params_b: float) -> tuple:
    """(band [%], basis) from the stack's cases on this GPU, else on its other GPUs x OTHER_GPU_FACTOR, else
    the carried-over figure (`error_cases`: GPU name -> its non-empty cases)."""
    gpus = np.asarray(gpus, dtype=float)
    if gpu_name in error_cases:
        cases = np.array(error_cases[gpu_name], dtype=float)
        pct, note = _widen_beyond(COVERAGE_Z * np.hypot(band_of_cases(cases, gpus, params_b), stack.source_bias_pct),
                                  cases, gpus)
        own = stack.gpus.get(gpu_name)
        what = "calibration runs" if own is None or own.fitted_on else "measured jobs, never fitted (the profile's constants),"
        return pct, f"{len(cases)} {what} of {stack.name} on {gpu_name}{note}"
    if error_cases:
        cases = np.concatenate([np.array(c, dtype=float) for c in error_cases.values()])
        pct, note = _widen_beyond(COVERAGE_Z * np.hypot(OTHER_GPU_FACTOR * band_of_cases(cases, gpus, params_b),
                                                        stack.source_bias_pct), cases, gpus)
        names = ", ".join(sorted(error_cases))
        return pct, f"{stack.name} not measured on {gpu_name}: its runs on {names}, x{OTHER_GPU_FACTOR:g}{note}"
    return (np.full(gpus.shape, COVERAGE_Z * stack.carried_over_error_pct),
            f"no calibration runs of {stack.name}: the error of predictions with constants carried over")


def _error_band(model: ModelSpec, gpu_name: str, gpus) -> ErrorBand:
    stack = model.training.stack
    cases = {name: g.error_cases for name, g in stack.gpus.items() if g.error_cases}
    return ErrorBand(*_stack_band(stack, cases, gpu_name, gpus, model.total_params() / 1e9))
