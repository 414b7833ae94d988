"""A band widens where a prediction rests on parts no calibration run had (planner/fidelity/error_bands.py):
x 1.5 for each of Mamba-2 layers, gated DeltaNet layers and NVFP4 GEMMs, with the reason in its basis."""
from __future__ import annotations

import numpy as np
from pytest import approx

from planner.fidelity.error_bands import _error_band, error_band
from planner.specs.loading import load_model


def test_a_hybrid_models_band_is_half_again_as_wide_and_says_why():
    model = load_model("nemotron-h-56b")  # Mamba-2 and attention layers: one unmeasured part
    gpus = np.array([64.0, 256.0])
    plain, wide = _error_band(model, "h100-sxm-80gb", gpus), error_band(model, "h100-sxm-80gb", gpus)
    assert wide.pct == approx(1.5 * plain.pct)
    assert wide.basis.endswith("; x1.5: Mamba-2 layers never calibrated")


def test_two_unmeasured_parts_multiply():
    model = load_model("qwen3-next-80b-a3b")  # DeltaNet layers, and NVFP4 GEMMs: 1.5 x 1.5 = 2.25
    model = model.model_copy(update={"training": model.training.model_copy(update={"precision": "nvfp4"})})
    gpus = np.array([128.0])
    assert error_band(model, "b200", gpus).pct == approx(2.25 * _error_band(model, "b200", gpus).pct)
    assert "x2.25: gated DeltaNet layers and NVFP4 GEMMs never calibrated" in error_band(model, "b200", gpus).basis


def test_a_calibrated_kind_of_model_keeps_its_band():
    model = load_model("llama3.1-8b")
    gpus = np.array([64.0])
    assert error_band(model, "b200", gpus).pct == approx(_error_band(model, "b200", gpus).pct)


def test_a_window_shorter_than_the_sequence_is_unmeasured():
    model = load_model("gpt-oss-120b")  # a 128-token window on every other layer of 4,096 tokens
    gpus = np.array([64.0])
    assert error_band(model, "gb200", gpus).pct == approx(1.5 * _error_band(model, "gb200", gpus).pct)
    assert "x1.5: sliding-window attention never calibrated" in error_band(model, "gb200", gpus).basis
    whole = model.model_copy(update={"sliding_window": 4096})  # the window holds the whole sequence
    assert error_band(whole, "gb200", gpus).pct == approx(_error_band(whole, "gb200", gpus).pct)
