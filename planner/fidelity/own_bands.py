"""The band of a prediction made with a profile (`--profile`): from the leave-one-out errors of the
user's own runs, widened, and saying so, where a layout leaves what the runs measured.

- base: the RMS of the NEAREST runs' leave-one-out |errors| (distance in log2 GPUs and log2
  parameters), times Student's t at 80 % two-sided for the runs' n - 1 degrees of freedom (a few
  errors understate their spread: 3.08 of one error, 1.64 of four, 1.28 of many), never below
  NOISE_FLOOR_PCT;
- more or fewer GPUs than measured: x (1 + 0.25 log2 of the ratio to the nearest measured count);
  another model size or sequence length: the same in parameters or tokens;
- a precision the runs never used: x 1.5 (the GEMM constants of that precision were not fitted);
- a layout axis the runs never varied, at a value they never had: x 1.25 each;
- and wherever one of those applies, never narrower than the shipped calibration's band for the layout
  (error_band): the runs' small errors say how well the profile fits where they were measured, not how far
  the planner's mechanisms carry beyond; what they err by where nothing was measured is what the shipped
  leave-one-source-out errors measure (a README example: +-4 % at 4,096 GPUs from runs at 128-2,048).
"""
from __future__ import annotations

import numpy as np

from planner.fidelity.error_bands import ErrorBand, NEAREST, SCALE_WIDENING, band_of_cases, error_band, shipped_band_pct
from planner.layout.axes import AXES
from planner.specs import ModelSpec
from planner.specs.stack import OwnRuns

# Student's t, 90th percentile (80 % two-sided), by degrees of freedom; 1.2816 beyond
T80 = {1: 3.078, 2: 1.886, 3: 1.638, 4: 1.533, 5: 1.476, 6: 1.440, 7: 1.415, 8: 1.397, 9: 1.383, 10: 1.372,
       15: 1.341, 20: 1.325, 30: 1.310}
NOISE_FLOOR_PCT = 2.0  # step-to-step variation of a short measured run: no band promises less
OTHER_PRECISION = 1.5
UNVARIED_AXIS = 1.25


def band(model: ModelSpec, gpu_name: str, gpus, layouts) -> ErrorBand:
    """The band of each layout's step time: from the profile's runs where the model is priced with
    one (two runs or more: one has no leave-one-out error), else the shipped calibration's."""
    own = model.training.stack.own_runs
    if own is not None and own.gpu == gpu_name and len(own.errors) >= 2:
        return profile_band(model, own, np.asarray(gpus, dtype=float), layouts)
    return error_band(model, gpu_name, gpus)


def t80(dof: int) -> float:
    if dof <= 0:
        return T80[1]
    return next((T80[k] for k in sorted(T80) if dof <= k), 1.2816)


def _beyond(value, lo: float, hi: float) -> np.ndarray:
    """log2 of how far outside [lo, hi] each value lies (0 inside)."""
    v = np.asarray(value, dtype=float)
    return np.log2(np.maximum(v / hi, 1.0)) + np.log2(np.maximum(lo / v, 1.0))


def profile_band(model: ModelSpec, own: OwnRuns, gpus: np.ndarray, layouts) -> ErrorBand:
    cases = np.array(own.errors, dtype=float)
    base = t80(len(cases) - 1) * band_of_cases(cases, gpus, model.total_params() / 1e9)
    base = np.maximum(base, NOISE_FLOOR_PCT)
    m = own.measured
    factor, reasons = np.ones(gpus.shape), []

    def widen(mask: np.ndarray, f: np.ndarray | float, why: str) -> None:
        nonlocal factor
        mask = np.broadcast_to(mask, gpus.shape)
        factor = factor * np.where(mask, f, 1.0)
        reasons.append((mask, why))

    g = _beyond(gpus, *m.gpus)
    widen(g > 0, 1 + SCALE_WIDENING * g, f"GPUs outside the {m.gpus[0]}-{m.gpus[1]} measured")
    p = float(_beyond(model.total_params() / 1e9, *m.params_b))
    widen(np.array(p > 0), 1 + SCALE_WIDENING * p, f"a model size outside the {m.params_b[0]:g}-{m.params_b[1]:g} B measured")
    s = float(_beyond(model.seq_len, *m.seq_len))
    widen(np.array(s > 0), 1 + SCALE_WIDENING * s, f"a sequence outside the {m.seq_len[0]}-{m.seq_len[1]} tokens measured")
    widen(np.array(model.training.precision not in m.precisions), OTHER_PRECISION,
          f"{model.training.precision}, a precision the runs never used")
    for a in AXES:
        seen = m.axes.get(a.name)
        if not seen or len(seen) > 1:
            continue
        stored = a.to_stored(seen[0]) if isinstance(seen[0], str) else int(seen[0])
        widen(getattr(layouts, a.name) != stored, UNVARIED_AXIS, f"{a.name} other than {seen[0]}, which the runs never varied")
    pct = base * factor
    beyond = np.zeros(gpus.shape, dtype=bool)
    for mask, _ in reasons:
        beyond |= mask
    if beyond.any():
        pct = np.where(beyond, np.maximum(pct, shipped_band_pct(model, own.shipped_error_cases, own.gpu, gpus)), pct)
        reasons.append((beyond & (pct > base * factor), "at least the shipped calibration's band beyond the runs"))
    return ErrorBand(pct, _basis(own, len(cases), reasons, gpus.shape), _memory_pct(own, gpus.shape))


def _basis(own: OwnRuns, n: int, reasons: list, shape) -> np.ndarray:
    """The basis of each row's band, one text per combination of reasons (an object array)."""
    head = f"{n} runs of profile {own.profile} (leave-one-out, nearest {min(NEAREST, n)})"
    code = np.zeros(shape, dtype=np.int64)
    for bit, (mask, _) in enumerate(reasons):
        code |= mask.astype(np.int64) << bit
    texts = {}
    for c in np.unique(code):
        why = [w for bit, (_, w) in enumerate(reasons) if c >> bit & 1]
        texts[int(c)] = head + ("; wider for " + ", ".join(why) if why else "")
    out = np.empty(shape, dtype=object)
    for c, text in texts.items():
        out[code == c] = text
    return out


def _memory_pct(own: OwnRuns, shape) -> np.ndarray | None:
    errs = np.array(own.memory_errors_pct, dtype=float)
    if errs.size < 2:
        return None
    return np.full(shape, max(t80(errs.size - 1) * float(np.sqrt(np.mean(errs ** 2))), NOISE_FLOOR_PCT))
