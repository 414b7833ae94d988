"""Activation offload moves a NUMBER of layers (Megatron Core / Transformer Engine cpu_offloading_num_layers):
the fewest that fit the GPU's memory less the user's --memory-headroom (5 % by default), or the model's
training.offload_layers (planner/costs/offload.py offload_layer_count, planner/costs/memory.py
activation_offload_layers)."""
from pathlib import Path

import numpy as np
import pytest
import yaml

from planner import api
from planner.costs import offload
from planner.layout.axes import layout_cell
from planner.units import GIB

ROOT = Path(__file__).resolve().parents[2]
# Llama 3 8B (32 layers) on one DGX H100 (80 GiB), tp 1 pp 1 mb 1, ZeRO 1: the layout of
# tests/export/test_offload_exports.py
LAYOUT = dict(gpus=8, tp=1, pp=1, micro_batch=1, zero=1)


def llama3_8b(**training) -> dict:
    model = yaml.safe_load((ROOT / "configs" / "models" / "llama3-8b.yaml").read_text())
    model["training"] = {**model["training"], **training}
    return model


def test_count_is_the_ceiling_of_the_excess_over_one_layer():
    # 100 GiB on a rank of 40 layers holding 40 GiB of activations (1 GiB a layer), 76 usable:
    # ceil((100 - 76) / 1) = 24; 76.5 over: ceil(24.5) = 25
    usable = 76 * GIB
    assert offload.offload_layer_count(np.array([100.0, 100.5]) * GIB, np.array([40.0, 40.0]) * GIB,
                                       np.array([40, 40]), usable).tolist() == [24, 25]
    # at most layers - 1 = 39 (Megatron asserts cpu_offloading_num_layers < num_layers), at least 1
    assert offload.offload_layer_count(np.array([500.0, 10.0]) * GIB, np.array([40.0, 40.0]) * GIB,
                                       np.array([40, 40]), usable).tolist() == [39, 1]
    # two ranks (k, n): the one needing the most sets the layout's count: 10 GiB over at 2 GiB a layer = 5
    # against 3 GiB over at 1 GiB a layer = 3
    total = np.array([[86.0], [79.0]]) * GIB
    acts = np.array([[20.0], [20.0]]) * GIB
    assert offload.offload_layer_count(total, acts, np.array([[10], [20]]), usable).tolist() == [5]
    # a rank of 20 layers offloading a count of 25 moves 19
    assert offload.offloaded_layers(25, np.array([20, 40])).tolist() == [19, 25]


def test_fit_headroom_is_the_memory_constraints_default():
    from planner.check import DEFAULT_HEADROOM

    assert offload.FIT_HEADROOM == DEFAULT_HEADROOM == 0.05


def test_fewest_layers_memory_host_and_row_cell():
    base = api.estimate(llama3_8b(), "dgx-h100-1024", offload="optimizer", **LAYOUT)
    est = api.estimate(llama3_8b(), "dgx-h100-1024", offload="both", **LAYOUT)
    m0 = base.memory_gib
    per_layer = m0.activations / 32
    # 89.2469 GiB without activation offload, 80 x 0.95 = 76 usable, 36 / 32 = 1.125 GiB a layer:
    # ceil(13.2469 / 1.125) = ceil(11.78) = 12
    assert m0.total == pytest.approx(89.2469, abs=1e-3) and per_layer == pytest.approx(1.125)
    n = int(np.ceil((m0.total - 80 * 0.95) / per_layer))
    assert n == 12 and est.layout["offload_layers"] == 12
    # the GPU keeps 32 - 12 = 20 layers: 36 - 12 x 1.125 = 22.5 GiB; the host gets the 13.5 beside the optimizer's
    assert est.memory_gib.activations == pytest.approx(22.5)
    assert est.memory_gib.host == pytest.approx(m0.host + 13.5)
    assert est.memory_gib.total <= 76 and est.feasible
    assert "offload=both:12" in layout_cell(est.layout)
    assert "offload_layers" not in base.layout and "offload_layers" not in est.to_dict()["memory_gib"]


def test_stated_count_prices_those_layers_only():
    six = api.estimate(llama3_8b(offload_layers=6), "dgx-h100-1024", offload="activations", **LAYOUT)
    twelve = api.estimate(llama3_8b(offload_layers=12), "dgx-h100-1024", offload="activations", **LAYOUT)
    assert six.layout["offload_layers"] == 6 and twelve.layout["offload_layers"] == 12
    # host: 6 x 1.125 = 6.75 GiB (no optimizer offload); GPU activations 36 - 6.75 = 29.25
    assert six.memory_gib.host == pytest.approx(6.75) and six.memory_gib.activations == pytest.approx(29.25)
    # exposed copies: micro-batches x offloaded layers x one layer's exposed copy, so half with half the layers
    assert six.time_breakdown_s.offload > 0
    assert twelve.time_breakdown_s.offload == pytest.approx(2 * six.time_breakdown_s.offload, rel=1e-12)
    # one layer's copy: 1.125 GiB over min(64 GB/s x 0.85, 614.4 GB/s / (2 x 8 GPUs)) = 38.4 GB/s = 31.5 ms each
    # way, hidden behind the layer's forward and backward: at most 2 x 31.5 ms per layer per micro-batch
    # (128 micro-batches: 1024 / (8 x 1))
    copy_s = 1.125 * GIB / 38.4e9
    assert six.time_breakdown_s.offload <= 128 * 6 * 2 * copy_s
    # a count over the layers moves 31 (32 - 1)
    many = api.estimate(llama3_8b(offload_layers=40), "dgx-h100-1024", offload="activations", **LAYOUT)
    assert many.memory_gib.host == pytest.approx(31 * 1.125) and many.layout["offload_layers"] == 31


def test_the_layer_full_recomputation_rebuilds_stays_on_the_gpu():
    # Full recomputation stores each layer's input (the checkpoints) and rebuilds one layer at a time in the
    # backward: offload moves N of the L layers' checkpoints, never the rebuild buffer. With every layer but
    # one offloaded, the GPU keeps 1/L of the checkpoints plus the whole rebuilt layer.
    from planner.costs.context import job_context
    from planner.costs.memory import _activation_bytes, memory_breakdown
    from planner.layout.space import single_layout
    from planner.specs.loading import load_cluster, load_model

    model = load_model("llama3-8b")
    model = model.model_copy(update={"training": model.training.model_copy(update={"offload_layers": 31})})
    cluster = load_cluster("dgx-h100-1024")
    lay = dict(dp=8, tp=1, pp=1, micro_batch=1, num_microbatches=8, recompute="full", zero=1)
    job = job_context(model, cluster, single_layout(**lay, offload="activations"))
    stored, rebuilt = _activation_bytes(model, job.layouts, job.ranks, split=True)
    kept = memory_breakdown(job).activations[0] * 2**30
    # 32 layers, 31 offloaded: 1/32 of the checkpoints stay, and the rebuild buffer
    assert kept == pytest.approx(float(np.ravel(stored)[0]) / 32 + float(np.ravel(rebuilt)[0]), rel=1e-9)
    assert float(np.ravel(rebuilt)[0]) > float(np.ravel(stored)[0]) / 32  # the buffer is most of what stays


def test_a_stricter_headroom_offloads_more_layers():
    # The case above with --memory-headroom 0.15: 80 x 0.85 = 68 GiB usable, ceil((89.2469 - 68) / 1.125)
    # = ceil(18.886) = 19 layers (12 at 0.05); the GPU keeps 36 - 19 x 1.125 = 14.625 GiB of activations,
    # 89.2469 - 21.375 = 67.8719 in all (18 layers would leave 89.2469 - 20.25 = 68.9969 > 68)
    base = api.estimate(llama3_8b(), "dgx-h100-1024", offload="both", **LAYOUT)
    est = api.estimate(llama3_8b(), "dgx-h100-1024", offload="both", memory_headroom=0.15, **LAYOUT)
    assert est.layout["offload_layers"] == 19 > base.layout["offload_layers"] == 12
    assert est.memory_gib.activations == pytest.approx(14.625)
    assert est.memory_gib.total == pytest.approx(67.8719, abs=1e-3) and est.feasible
    # each offloaded layer adds the same exposed copies: 19 / 12 of the default's
    assert est.time_breakdown_s.offload == pytest.approx(base.time_breakdown_s.offload * 19 / 12, rel=1e-12)
    # 30 %: 56 GiB usable, ceil((89.2469 - 56) / 1.125) = ceil(29.55) = 30 layers, 89.2469 - 33.75 = 55.4969
    strict = api.estimate(llama3_8b(), "dgx-h100-1024", offload="both", memory_headroom=0.3, **LAYOUT)
    assert strict.layout["offload_layers"] == 30 and strict.memory_gib.total == pytest.approx(55.4969, abs=1e-3)


@pytest.mark.parametrize("headroom", [0.0, 0.05, 0.1, 0.15, 0.25, 0.4])
def test_every_offloading_row_of_a_search_fits_its_headroom_with_the_fewest_layers(headroom):
    # Every layout of Llama 3 8B on 8 H100s at pp 1 offloading activations: with N of its 32 layers offloaded
    # (each the same share, host / N: activations only, one rank), the GPU holds at most 80 x (1 - headroom)
    # unless N is the most a rank may offload (31), and N - 1 layers would not fit unless N is 1
    from planner.constraints import Limits
    from planner.layout.space import SpaceLimits
    from planner.search import search
    from planner.specs.loading import load_cluster, load_model

    r = search(load_model("llama3-8b"), load_cluster("dgx-h100-1024"), gpus=8, top_k=3,
               limits=Limits(memory_headroom=headroom), space=SpaceLimits(pp=1, offload="activations"))
    mem = r.scores.memory_gib
    n = np.asarray(mem.offload_layers)
    assert n.size > 1000 and (n >= 1).all() and (r.scores.layouts.offload == offload.ACTIVATIONS).all()
    usable = 80 * (1 - (headroom or 0.05))  # off (0): the count keeps the default 5 % (offload.count_headroom)
    per_layer = mem.host / n
    slack = 1e-9 * usable
    assert ((mem.total <= usable + slack) | (n == 31)).all()
    assert ((n == 1) | (mem.total + per_layer > usable - slack)).all()
    assert ((n > 1) & (n < 31)).any()  # the property is not met by the bounds alone
    assert r.best is not None and r.best.memory_gib.total <= usable


def test_plan_files_sweeps_and_timelines_count_under_the_headroom(tmp_path):
    # The 19 layers of test_a_stricter_headroom_offloads_more_layers, from a plan file's constraints, a sweep's
    # limits and the timeline of the estimate
    from planner.check import check_file
    from planner.estimate import estimate_layout
    from planner.specs.loading import load_cluster, load_model
    from planner.timeline import timeline_events
    from planner.constraints import Limits

    plan = ("model: llama3-8b\ncluster: dgx-h100-1024\ngpus: 8\nlayout:\n  dp: 8\n  tp: 1\n  pp: 1\n"
            "  micro_batch: 1\n  zero: 1\n  offload: both\n{pin}constraints:\n  memory_headroom: 0.15\n")
    (tmp_path / "p.yaml").write_text(plan.format(pin=""))
    assert check_file(str(tmp_path / "p.yaml")) == []
    # 18 pinned: 68.9969 GiB > 68
    (tmp_path / "q.yaml").write_text(plan.format(pin="  offload_layers: 18\n"))
    assert [f.code for f in check_file(str(tmp_path / "q.yaml"))] == ["memory"]
    rows = list(api.sweep(models=["llama3-8b"], cluster="dgx-h100-1024", gpus=[8], tp=1, pp=1, cp=1, micro_batch=1,
                          zero=1, recompute="none", offload="both", memory_headroom=0.15))
    assert [r["status"] for r in rows] == ["ok"] and rows[0]["memory_gib"] == pytest.approx(67.8719, abs=1e-3)
    model, cluster = load_model("llama3-8b"), load_cluster("dgx-h100-1024")
    scored = estimate_layout(model, cluster, limits=Limits(memory_headroom=0.15), **LAYOUT, offload="both")
    assert scored.layout["offload_layers"] == 19
    drawn = timeline_events(model, cluster, scored).memory_gib
    assert float(drawn.activations[0]) == pytest.approx(14.625) and float(drawn.total[0]) == pytest.approx(
        scored.memory_gib.total, rel=1e-12)


def test_a_library_call_without_limits_counts_as_score_does():
    # estimate_layout with a bare Limits() (the memory constraint off) and score() with no headroom count
    # the same 12 layers the CLI's default 5 % gives (test_a_stricter_headroom_offloads_more_layers)
    from planner.estimate import estimate_layout
    from planner.layout.space import single_layout
    from planner.score import score
    from planner.specs import ModelSpec
    from planner.specs.loading import load_cluster

    model, cluster = ModelSpec.model_validate(llama3_8b()), load_cluster("dgx-h100-1024")
    est = estimate_layout(model, cluster, **LAYOUT, offload="both", recompute="none")
    lay = single_layout(dp=8, tp=1, pp=1, micro_batch=1, zero=1, offload="both", recompute="none",
                        num_microbatches=model.training.global_batch // 8)
    direct = score(model, cluster, lay)
    assert int(np.asarray(est.memory_gib.offload_layers).ravel()[0]) == 12
    assert int(np.asarray(direct.memory_gib.offload_layers).ravel()[0]) == 12
