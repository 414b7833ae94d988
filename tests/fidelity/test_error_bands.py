"""Error bands from calibration residuals (planner/fidelity/error_bands.py), by hand."""
from __future__ import annotations

import numpy as np
from pytest import approx

from planner.fidelity.error_bands import error_band
from planner.specs import ModelSpec

# Every band is 1.2816 x an RMS: |e| < 1.2816 sigma holds for 80 % of normal errors (the 90th
# percentile of N(0, 1), a table value), the coverage issue 29 asks a band to promise.
Z = 1.2816

# toy model: 2 layers, h 64 -> total params ~ 0.0001 B; the cases below sit at 1e-4 B too, so only GPUs matter
CASES = [[8, 1e-4, 3.0], [16, 1e-4, 4.0], [64, 1e-4, 12.0]]


def model(stack_gpus=None, carried=25.0):
    stack = dict(name="s", layer_overhead_us=0, step_overhead_s=0, carried_over_error_pct=carried,
                 gpus=stack_gpus or {})
    return ModelSpec.model_validate(dict(name="m", layers=2, hidden=64, heads=4, vocab=128, seq_len=16,
                                         training=dict(global_batch=4, stack=stack)))


def test_nearest_cases_give_the_band(monkeypatch):
    import planner.fidelity.error_bands as eb

    monkeypatch.setattr(eb, "NEAREST", 2)
    m = model({"g": dict(fitted_on=["x"], error_cases=CASES)})
    params = m.total_params() / 1e9
    band = error_band(m, "g", np.array([8, 32]))
    # distance = |log2(g/8)| + |log2(1e-4 / params)|: the params term is the same for every case.
    # at 8 GPUs the nearest two are 8 and 16: sqrt((3^2 + 4^2) / 2) = 3.536
    # at 32 GPUs: 16 and 64 (both 1 octave away): sqrt((16 + 144) / 2) = 8.944; each x 1.2816
    assert band.pct == approx([Z * np.sqrt(12.5), Z * np.sqrt(80.0)])
    assert "3 calibration runs of s on g" in band.basis and params > 0


def test_beyond_the_largest_calibrated_scale_the_band_widens(monkeypatch):
    import planner.fidelity.error_bands as eb

    monkeypatch.setattr(eb, "NEAREST", 1)
    m = model({"g": dict(fitted_on=["x"], error_cases=CASES)})
    band = error_band(m, "g", np.array([256]))
    # nearest: 64 GPUs, 12 %; 256 = 4 x 64 -> x (1 + 0.25 * log2 4) = x 1.5 -> 18 %, x 1.2816 = 23.07 %
    assert band.pct == approx([Z * 18.0])
    assert "beyond the largest calibrated scale (64 GPUs)" in band.basis


def test_other_gpu_and_uncalibrated_stack(monkeypatch):
    import planner.fidelity.error_bands as eb

    monkeypatch.setattr(eb, "NEAREST", 1)
    m = model({"g": dict(fitted_on=["x"], error_cases=CASES)})
    band = error_band(m, "other-gpu", np.array([16]))
    assert band.pct == approx([Z * 1.5 * 4.0])  # its runs on g, x 1.5
    assert "not measured on other-gpu" in band.basis
    never = error_band(model(carried=30.0), "g", np.array([16, 32]))
    assert never.pct == approx([Z * 30.0, Z * 30.0]) and "no calibration runs" in never.basis


def test_other_gpu_beyond_scale_widens_twice(monkeypatch):
    import planner.fidelity.error_bands as eb

    monkeypatch.setattr(eb, "NEAREST", 1)
    m = model({"g": dict(fitted_on=["x"], error_cases=CASES)})
    # nearest to 256 GPUs: 64 GPUs at 12 %; x 1.5 (other GPU) x (1 + 0.25 log2 4) = 12 x 1.5 x 1.5 = 27 %
    band = error_band(m, "other-gpu", np.array([256]))
    assert band.pct == approx([Z * 27.0]) and "beyond the largest calibrated scale" in band.basis


def test_bad_error_cases_are_refused():
    import pytest
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        model({"g": dict(fitted_on=["x"], error_cases=[[0, 1e-4, 5.0]])})  # zero GPUs


def test_the_sources_own_spread_adds_in_quadrature(monkeypatch):
    import planner.fidelity.error_bands as eb

    monkeypatch.setattr(eb, "NEAREST", 2)
    m = model({"g": dict(fitted_on=["x"], error_cases=CASES)})
    m = m.model_copy(update={"training": m.training.model_copy(update={
        "stack": m.training.stack.model_copy(update={"source_bias_pct": 5.0})})})
    band = error_band(m, "g", np.array([8]))
    # nearest two at 8 GPUs: sqrt((9 + 16) / 2) = 3.536; with a 5 % source spread: sqrt(12.5 + 25) = 6.124;
    # x 1.2816 = 7.848
    assert band.pct == approx([Z * np.sqrt(12.5 + 25.0)])


def test_carried_over_counts_each_lone_source_once():
    from planner.fidelity.error_bands import carried_over_pct

    errors = [("a", "f1", "s1", 3.0), ("a", "f1", "s1", 4.0),  # alone on (f1, s1): RMS sqrt((9 + 16) / 2) = 3.536
              ("b", "f2", "s2", 12.0),                          # alone on (f2, s2): 12
              ("c", "f3", "s3", 50.0), ("d", "f3", "s3", 1.0)]  # (f3, s3) informed by two sources: not carried over
    # RMS over the two lone sources: sqrt((12.5 + 144) / 2) = sqrt(78.25) = 8.846
    assert carried_over_pct(errors) == approx(np.sqrt(78.25))
    # a hundred more runs of a's size move nothing: a source counts once, whatever its runs
    assert carried_over_pct(errors + [("a", "f1", "s1", np.sqrt(12.5))] * 100) == approx(np.sqrt(78.25))
    assert carried_over_pct(errors[3:]) is None  # c and d share their stack: none alone
    # a source alone on one stack and sharing another counts only its lone runs: b's 100 % on (f3, s3) is c's and
    # d's stack too, not a carried-over prediction
    assert carried_over_pct(errors + [("b", "f3", "s3", 100.0)]) == approx(np.sqrt(78.25))
