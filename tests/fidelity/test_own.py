"""plan calibrate's fit (planner/fidelity/own.py), the runs file (runs.py) and a profile's bands
(own_bands.py): numbers derived by hand here, or runs 'measured' by the planner itself with known
constants, which the fit must recover."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from planner.fidelity.error_bands import error_band
import pytest

from planner.costs.context import job_context
from planner.costs.pipeline import step_time
from planner.errors import SpecError, SpecErrors
from planner.fidelity.own import _fit_reserve, calibrate, constants_note, max_free, select_free, with_constants
from planner.fidelity.own_bands import NOISE_FLOOR_PCT, band, t80
from planner.fidelity.profile import apply_profile, profile_data
from planner.fidelity.runs import MeasuredRun, runs_from_loaded
from planner.estimate import estimate_layout, layout_of
from planner.search import with_global_batch
from planner.specs.loading import load_cluster, load_model
from planner.specs.profile import ProfileSpec
from planner.specs.yamlio import load_yaml_text

H100 = "dgx-h100-1024"
RUNS = [("llama3.1-8b", 8, dict(tp=1, pp=1, micro_batch=1)),
        ("llama3.1-8b", 16, dict(tp=2, pp=1, micro_batch=1)),
        ("llama3.1-70b", 32, dict(tp=8, pp=4, micro_batch=1, vpp=5)),
        ("llama3.1-70b", 64, dict(tp=8, pp=2, micro_batch=1, vpp=5, recompute="selective")),
        ("llama3.1-70b", 128, dict(tp=4, pp=4, micro_batch=1, recompute="full"))]


def test_how_many_constants_runs_may_set():
    # one of one run, then one more per two runs: ceil(n / 2)
    assert [max_free(n) for n in (1, 2, 3, 4, 5, 10)] == [1, 1, 2, 2, 3, 5]


def test_constants_are_chosen_by_pivoted_gram_schmidt():
    # column 0 moves runs 1 and 2 by 1.0 (norm sqrt(2)); column 1 moves them by 0.5 and run 3 by 1.0
    # (norm sqrt(1.5)): column 0 first; column 1 minus its projection on column 0 is (0, 0, 1), which
    # still moves a run, so both are chosen when two may be; a column that moves nothing never is.
    cols = np.array([[1.0, 0.5, 0.0], [1.0, 0.5, 0.0], [0.0, 1.0, 0.0]])
    assert select_free(cols, 1) == [0]
    assert select_free(cols, 2) == [0, 1]
    assert select_free(cols, 3) == [0, 1]
    # two columns that move the runs alike: the second explains nothing the first does not
    same = np.array([[1.0, 2.0], [0.5, 1.0]])
    assert select_free(same, 2) == [1]


def test_the_memory_reserve_is_the_prior_weighted_mean_of_what_the_formulas_leave():
    # measured 60 and 70 GiB, formulas 55 and 66: leftovers 5 and 4; the prior 2 GiB counts as half a
    # run: (5 + 4 + 0.5 * 2) / (2 + 0.5) = 10 / 2.5 = 4.0 GiB
    assert _fit_reserve(np.array([55.0, 66.0]), np.array([60.0, 70.0]), 2.0) == pytest.approx(4.0)
    # a leftover beyond the cited 16 GiB stops at the bound
    assert _fit_reserve(np.array([10.0]), np.array([60.0]), 2.0) == 16.0


def test_students_t_at_80_percent():
    # two-sided 80 %: the 90th percentile of Student's t (any table): 3.078 at 1 dof, 1.638 at 3
    assert t80(1) == 3.078 and t80(3) == 1.638 and t80(1000) == 1.2816


def _truth_runs(hw: dict, st: dict) -> list[MeasuredRun]:
    """The RUNS as a cluster whose constants are `hw` and `st` would measure them (the planner itself)."""
    cluster = load_cluster(H100)
    out = []
    for name, gpus, given in RUNS:
        model = with_global_batch(load_model(name), 256)
        lay = layout_of(model, gpus, {**given, "sequence_parallel": given["tp"] > 1, "zero": 1}, gpus_said="")
        m, c = with_constants(model, cluster, hw, st)
        t = float(step_time(job_context(m, c, lay)).total[0])
        out.append(MeasuredRun(f"{name}@{gpus}", model, cluster, gpus, given, t, None))
    return out


def test_a_slower_gemm_is_recovered_and_the_runs_predicted():
    # A cluster whose GEMMs reach 0.62 of peak (the H100 preset says 0.747): every run 12-15 % slower
    # than the shipped constants predict. Five runs may set three constants; the fit must bring every
    # run and its left-out prediction within 3 %, and move gemm most of the way to 0.62.
    runs = _truth_runs({"gemm": 0.62}, {})
    prior = load_cluster(H100).gpu.efficiency.gemm
    cal = calibrate(runs)
    assert all(abs(r.fitted_error_pct) < 3 for r in cal.runs)
    assert all(abs(r.loo_error_pct) < 3 for r in cal.runs)
    gemm = cal.constant("gemm")
    assert gemm.fitted and abs(gemm.value - 0.62) < 0.5 * abs(prior - 0.62)
    assert sum(c.fitted for c in cal.constants if c.group != "memory") <= max_free(5)


def test_one_run_fits_one_constant_and_says_so():
    cal = calibrate(_truth_runs({"gemm": 0.62}, {})[:1])
    assert sum(c.fitted for c in cal.constants if c.group != "memory") == 1
    assert cal.runs[0].loo_s is None
    assert any("one run" in n for n in cal.notes)


def test_runs_measured_as_predicted_leave_every_constant_at_its_prior():
    # measured = predicted with the shipped constants: nothing to fit, nothing moves
    runs = _truth_runs({}, {})
    cal = calibrate(runs[:3])
    for c in cal.constants:
        if c.group != "memory":
            assert c.value == pytest.approx(c.prior, abs=1e-6 * (c.bounds[1] - c.bounds[0]))


def test_a_profile_of_unmoved_constants_predicts_as_no_profile():
    # calibration never changes a prediction except through the constants it fits
    runs = _truth_runs({}, {})
    data = profile_data(calibrate(runs[:3]), "same")
    model, cluster = with_global_batch(load_model("llama3.1-70b"), 256), load_cluster(H100)
    pm, pc = apply_profile(model, cluster, ProfileSpec.model_validate(data))
    given = dict(tp=8, pp=4, micro_batch=1, vpp=5, sequence_parallel=True, zero=1)
    plain = estimate_layout(model, cluster, gpus=64, **given).step_time_s
    assert estimate_layout(pm, pc, gpus=64, **given).step_time_s == pytest.approx(plain, rel=1e-6)


def test_the_same_layout_measured_twice_as_slow_is_said():
    run = _truth_runs({}, {})[0]
    cal = calibrate([run, replace(run, name="again", step_time_s=2 * run.step_time_s), _truth_runs({}, {})[1]])
    assert any("same layout measured 2.00x apart" in n for n in cal.notes)


def test_a_profile_is_for_its_gpu():
    data = profile_data(calibrate(_truth_runs({}, {})[:2]), "h100")
    with pytest.raises(SpecError, match="measured on h100-sxm-80gb"):
        apply_profile(load_model("llama3.1-8b"), load_cluster("dgx-a100-1024"), ProfileSpec.model_validate(data))


def test_a_profiles_band_comes_from_its_runs_left_out_errors():
    runs = _truth_runs({"gemm": 0.62}, {})[:3]
    prof = ProfileSpec.model_validate(profile_data(calibrate(runs), "p"))
    errs = np.array([abs(r.loo_error_pct) for r in prof.runs])
    model, cluster = apply_profile(with_global_batch(load_model("llama3.1-8b"), 256), load_cluster(H100), prof)
    # inside what was measured (16 GPUs, tp 2, an 8B model): t80 of 2 dof x the RMS of the 3 nearest
    # (all) runs' left-out errors, never below the noise floor
    lay = layout_of(model, 16, dict(tp=2, pp=1, micro_batch=1, sequence_parallel=True, zero=1), gpus_said="")
    b = band(model, cluster.gpu.name, lay.gpus, lay)
    expect = max(1.886 * math.sqrt(np.mean(errs ** 2)), NOISE_FLOOR_PCT)
    assert b.pct[0] == pytest.approx(expect, rel=1e-6)
    assert "3 runs of profile p" in b.basis[0] and "wider" not in b.basis[0]
    # 128 GPUs, 4x the 32 measured: x (1 + 0.25 log2 4) = 1.5, and said (with a shipped calibration whose band
    # is below that: one case of 0.01 % and no source spread, so that the floor below does not bind)
    lay = layout_of(model, 128, dict(tp=2, pp=1, micro_batch=1, sequence_parallel=True, zero=1), gpus_said="")
    st = model.training.stack
    tiny = st.model_copy(update={"source_bias_pct": 0.0, "own_runs": st.own_runs.model_copy(
        update={"shipped_error_cases": {cluster.gpu.name: ((128.0, 8.0, 0.01),)}})})
    unbound = model.model_copy(update={"training": model.training.model_copy(update={"stack": tiny})})
    wide = band(unbound, cluster.gpu.name, lay.gpus, lay)
    assert wide.pct[0] == pytest.approx(1.5 * expect, rel=1e-6)
    assert "GPUs outside the 8-32 measured" in wide.basis[0] and "shipped calibration's band" not in wide.basis[0]
    # beyond the runs never narrower than the band the same layout gets without the profile (the shipped one)
    floored = band(model, cluster.gpu.name, lay.gpus, lay)
    shipped = error_band(with_global_batch(load_model("llama3.1-8b"), 256), cluster.gpu.name, lay.gpus).pct[0]
    assert shipped > 1.5 * expect  # the runs' errors are ~0: the shipped band binds
    assert floored.pct[0] == pytest.approx(shipped, rel=1e-6) and "shipped calibration's band" in floored.basis[0]


RUNS_FILE = """kind: runs
runs:
  - name: smoke
    model: llama3.1-8b
    cluster: dgx-h100-1024
    gpus: 16
    global_batch: 256
    layout: {tp: 2, pp: 1, micro_batch: 1}
    measured: {tokens_per_s: 2097152}
"""


def _runs(text: str):
    return runs_from_loaded(load_yaml_text(text, "runs.yaml"))


def test_a_runs_file_reads_tokens_per_second_as_a_step_time():
    # 256 sequences x 8,192 tokens = 2,097,152 tokens a step at 2,097,152 tokens/s: 1.0 s a step
    (run,) = _runs(RUNS_FILE)
    assert run.step_time_s == pytest.approx(1.0)
    assert run.gpus == 16 and run.given == {"tp": 2, "pp": 1, "micro_batch": 1}
    per_gpu = RUNS_FILE.replace("tokens_per_s: 2097152", "tokens_per_s_per_gpu: 65536")
    assert _runs(per_gpu)[0].step_time_s == pytest.approx(2097152 / (65536 * 16))  # 2.0 s


@pytest.mark.parametrize("change, where", [
    ("measured: {tokens_per_s: 2097152}", "measured: {}"),
    ("measured: {tokens_per_s: 2097152}", "measured: {step_time_s: -1}"),
    ("measured: {tokens_per_s: 2097152}", "measured: {step_time_s: .nan}"),
    ("measured: {tokens_per_s: 2097152}", "measured: {step_time_s: 1, tokens_per_s: 5}"),
    ("gpus: 16", "gpus: 100000"),
])
def test_a_bad_run_names_its_file_line_and_field(change, where):
    with pytest.raises((SpecError, SpecErrors)) as info:
        _runs(RUNS_FILE.replace(change, where))
    errors = info.value.errors if isinstance(info.value, SpecErrors) else [info.value]
    assert all(e.file == "runs.yaml" and e.line is not None and e.path for e in errors)


def test_a_layout_that_does_not_multiply_to_the_gpus_is_bad_input():
    runs = _runs(RUNS_FILE.replace("gpus: 16", "gpus: 12").replace("tp: 2", "tp: 8"))
    with pytest.raises(SpecError, match="smoke"):
        calibrate(runs)


def _with_memory(run: MeasuredRun, above_gib: float) -> tuple[MeasuredRun, float]:
    """`run` measured `above_gib` over the planner's peak memory with the shipped reserve; that peak."""
    from planner.estimate import estimate_defaults

    given = estimate_defaults(run.given, run.gpus, run.cluster)  # as plan estimate fills the axes not given
    predicted = float(estimate_layout(run.model, run.cluster, gpus=run.gpus, **given).memory_gib.total)
    return replace(run, peak_memory_gib=predicted + above_gib), predicted


def test_one_run_stating_memory_leaves_the_reserve_at_its_prior_and_says_why():
    # A UX review: one log drove the reserve to its 16 GiB bound and every later --profile search reserved it.
    # One run 40 GiB over the prediction: the formulas leave 40 + 2.5 (the shipped reserve) = 42.5 GiB, and
    # the reserve fitted to it alone would be (42.5 + 0.5 x 2.5) / 1.5 = 29.2 GiB, clipped to 16.
    prior = load_cluster(H100).gpu.memory_reserve_gib
    assert prior == 2.5
    run, predicted = _with_memory(_truth_runs({}, {})[0], 40.0)
    cal = calibrate([run])
    reserve = cal.constant("memory_reserve_gib")
    assert not reserve.fitted and reserve.value == prior
    assert cal.runs[0].fitted_memory_gib == pytest.approx(predicted, rel=1e-9)
    (note,) = [n for n in cal.notes if n.startswith("memory_reserve_gib")]
    assert "keeps its prior 2.5 GiB" in note and "42.5 GiB of" in note and "beyond the 16 GiB" in note
    assert not any("reached its bound" in n for n in cal.notes)
    data = profile_data(cal, "one")
    assert data["memory"]["memory_reserve_gib"] == {"value": 2.5, "prior": 2.5, "bounds": [0.0, 16.0], "fitted": False}


def test_two_runs_stating_memory_fit_the_reserve():
    # each run 5.5 GiB over the prediction: leftovers 5.5 + 2.5 = 8 GiB each; (8 + 8 + 0.5 x 2.5) / 2.5 = 6.9 GiB
    runs = _truth_runs({}, {})
    (a, _), (b, _) = _with_memory(runs[0], 5.5), _with_memory(runs[1], 5.5)
    reserve = calibrate([a, b]).constant("memory_reserve_gib")
    assert reserve.fitted and reserve.value == pytest.approx(6.9)


def test_the_note_says_what_limited_the_constants_fitted():
    # A UX review read "1 constant (gemm; at most 3 of 5 runs)" as a contradiction. ceil(5 / 2) = 3 may be
    # fitted: one fitted means select_free found no other that moves the runs' times by 0.5 % beyond gemm's
    assert constants_note(5, ["gemm"]) == (
        "1 constant fitted (gemm): 5 runs fit at most 3 constants, and no other constant moves their step times "
        "by 0.5 % over its cited range beyond what gemm already does; the others keep their priors")
    # three of five: the runs' count is the limit
    assert constants_note(5, ["gemm", "hbm", "network"]).startswith(
        "3 constants fitted (gemm, hbm, network): 5 runs fit at most 3 constants (one of one run")
    assert constants_note(1, ["gemm"]).startswith("1 constant fitted (gemm): 1 run fits at most 1 constant (")
    assert constants_note(4, []).startswith("no constant fitted: none moves the runs' step times by 0.5 %")
