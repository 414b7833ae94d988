"""The pipeline timeline (planner/timeline.py) and its picture (planner/plots/timeline.py).

Expected values are derived here: schedule lengths from the closed forms of Narayanan et al. 2021
Sec. 2.2, per-stage times from the per-layer times of the cost model (layer_compute) times the
layers of each stage, memory from 18 bytes per parameter (Korthikanti et al. 2022 Sec. 5).
"""
from __future__ import annotations

import numpy as np
import pytest

from planner.costs.compute import layer_compute
from planner.errors import SpecError
from planner.estimate import estimate_layout
from planner.specs.loading import load_cluster, load_model
from planner.layout.space import single_layout
from planner.timeline import KINDS, StageTimes, simulate, timeline_events, unit_order
from planner.units import GIB

from .plots.test_sweep_plots import png_size


def hand_stages(p: int, v: int, fwd: float, bwd: float, p2p: float = 0.0) -> StageTimes:
    z = np.zeros(p * v)
    return StageTimes(np.full(p * v, fwd), np.full(p * v, bwd), z, z, z, 0.0, p2p)


@pytest.mark.parametrize("p, v, m, fwd, bwd, expected", [
    # 1F1B: (m + p - 1) (t_f + t_b) = (8 + 4 - 1) x 3 s = 33 s
    (4, 1, 8, 1.0, 2.0, 33.0),
    # interleaved, v chunks of 1/v of the layers: (m v + p - 1) (t_f + t_b) / v = (16 + 3) x 1.5 s = 28.5 s
    (4, 2, 8, 0.5, 1.0, 28.5),
    # v = 3, m = 2 p: (8 x 3 + 3) x 1 s = 27 s
    (4, 3, 8, 1 / 3, 2 / 3, 27.0),
    # no pipeline: m (t_f + t_b) = 5 x 3 s
    (1, 1, 5, 1.0, 2.0, 15.0),
])
def test_equal_stages_give_the_closed_form(p, v, m, fwd, bwd, expected):
    events, makespan = simulate(hand_stages(p, v, fwd, bwd), p, v, m)
    assert makespan == pytest.approx(expected, rel=1e-12)
    # every rank runs m v forwards and m v backwards: busy m (t_f + t_b) v
    for r in range(p):
        mine = events[events[:, 0] == r]
        assert mine[:, 2].sum() == pytest.approx(m * v * (fwd + bwd))


@pytest.mark.parametrize("p, v, m", [(4, 1, 8), (4, 2, 8), (8, 4, 16), (4, 1, 2), (1, 1, 3)])
def test_every_rank_runs_each_unit_once_in_megatron_order(p, v, m):
    for r in range(p):
        order = unit_order(p, v, m, r)
        forwards = [(mb, j) for back, mb, j in order if not back]
        backwards = [(mb, j) for back, mb, j in order if back]
        units = sorted((mb, j) for mb in range(m) for j in range(v))
        assert sorted(forwards) == units and sorted(backwards) == units
        # warm-up: p - r - 1 forwards (1F1B) or 2 (p - r - 1) + (v - 1) p (interleaved), then a forward
        warm = (p - r - 1) if v == 1 else 2 * (p - r - 1) + (v - 1) * p
        first_backward = next(k for k, (back, _, _) in enumerate(order) if back)
        assert first_backward == min(warm, m * v) + (1 if warm < m * v else 0)
        if v > 1:  # interleaved: the first p forwards run chunk 0, the next p chunk 1 (Megatron's groups of p)
            assert [j for _, j in forwards[:2 * p]] == [0] * p + [1] * p


def test_sends_lengthen_the_schedule_by_at_most_the_planners_charge():
    # the planner charges 2 (m v + p - 1) sends on the critical path (costs/pipeline.py pp_comm)
    p, v, m, send = 4, 2, 8, 0.01
    _, plain = simulate(hand_stages(p, v, 0.5, 1.0), p, v, m)
    _, sending = simulate(hand_stages(p, v, 0.5, 1.0, send), p, v, m)
    assert plain < sending <= plain + 2 * (m * v + p - 1) * send + 1e-12


@pytest.fixture(scope="module")
def gpt3():
    model, cluster = load_model("gpt3-175b"), load_cluster("dgx-a100-1024")
    scored = estimate_layout(model, cluster, tp=8, pp=8, micro_batch=1)
    return model, cluster, scored, timeline_events(model, cluster, scored)


def test_forward_bars_are_microbatches_times_the_stage_forward(gpt3):
    model, cluster, scored, tl = gpt3
    # dp = 1024 / (8 x 8) = 16; m = 1536 / (16 x 1) = 96 micro-batches; 96 layers / 8 stages = 12 per stage
    m, per_stage = 1536 // (1024 // 64), 96 // 8
    assert (tl.num_microbatches, tl.stage_layers) == (m, (per_stage,) * 8)
    lc = layer_compute(model, cluster.gpu, model.training.stack.for_gpu(cluster.gpu.name), single_layout(dp=16, tp=8, pp=8, micro_batch=1, num_microbatches=96))
    fwd, logits = float(lc.fwd_s[0]), float(lc.logits_fwd_bwd_s[0])
    for r in range(8):
        expected = m * per_stage * fwd + (m * logits / 3 if r == 7 else 0.0)  # the last stage's logits: a third forward
        assert tl.total_s("forward", r) == pytest.approx(expected, rel=1e-9)
        busy_and_idle = sum(tl.total_s(k, r) for k in KINDS)
        assert busy_and_idle == pytest.approx(tl.step_time_s, rel=1e-9)  # every rank's row covers the step


def test_the_drawn_step_agrees_with_step_time_s(gpt3):
    model, cluster, scored, tl = gpt3
    tb = scored.time_breakdown_s
    # the tail is the breakdown's exposed DP communication and optimizer step, and the stack's step overhead
    assert tl.tail_s["dp_comm"] == tb.dp_comm and tl.tail_s["optimizer"] == tb.optimizer
    micro = tb.overhead - tl.tail_s["overhead"]  # the rest of `overhead`: m v chunks' fixed cost
    assert micro == pytest.approx(96 * tl.stages.overhead_s, abs=1e-12)
    # Without its sends the schedule is the closed form exactly: makespan + pp_comm + tail = step_time_s.
    _, plain = simulate(StageTimes(**{**tl.stages.__dict__, "p2p_s": 0.0}), 8, 1, 96)
    assert plain + tb.pp_comm + sum(tl.tail_s.values()) == pytest.approx(scored.step_time_s, rel=1e-9)
    # With the sends drawn (blocking, after each unit that feeds another stage), the last rank sends once
    # per micro-batch, not twice as the planner charges: the drawn step is shorter by under 1 %.
    assert scored.step_time_s * 0.99 < tl.step_time_s <= scored.step_time_s
    assert scored.step_time_s - tl.step_time_s <= 2 * (96 + 8 - 1) * tl.stages.p2p_s


def test_memory_per_rank_matches_the_json(gpt3):
    model, cluster, scored, tl = gpt3
    assert tl.memory_gib.total.max() == pytest.approx(scored.memory_gib.total, rel=1e-9)
    # a middle rank holds 12 layers of 12 h^2 + 13 h parameters, split over tp 8; ZeRO 0:
    # 2 bytes of weights, 4 of fp32 gradients, 12 of fp32 master weights and moments (18 bytes)
    h = 12288
    params = 12 * (12 * h * h + 13 * h) / 8
    for r in range(1, 7):
        assert tl.memory_gib.weights[r] == pytest.approx(2 * params / GIB)
        assert tl.memory_gib.gradients[r] == pytest.approx(4 * params / GIB)
        assert tl.memory_gib.optimizer[r] == pytest.approx(12 * params / GIB)
    # the first rank also holds the word embedding, 51200 x h / tp (vocab-parallel), and the learned
    # position embedding, 2048 positions x h, replicated on every tp rank
    extra = 51200 * h / 8 + 2048 * h
    assert tl.memory_gib.weights[0] - tl.memory_gib.weights[1] == pytest.approx(2 * extra / GIB, rel=1e-6)


def test_an_uneven_split_times_each_stage_by_its_layers():
    model, cluster = load_model("llama3-405b"), load_cluster("dgx-h100-16384")
    split = [7] + [8] * 14 + [7]
    scored = estimate_layout(model, cluster, gpus=8192, tp=8, pp=16, micro_batch=1, stage_layers=split)
    tl = timeline_events(model, cluster, scored)
    # dp = 8192 / (8 x 16) = 64; m = 2048 / 64 = 32
    m = 2048 // 64
    assert tl.num_microbatches == m and tl.stage_layers == tuple(split)
    lc = layer_compute(model, cluster.gpu, model.training.stack.for_gpu(cluster.gpu.name), single_layout(dp=64, tp=8, pp=16, micro_batch=1, num_microbatches=m))
    fwd, logits = float(lc.fwd_s[0]), float(lc.logits_fwd_bwd_s[0])
    assert tl.total_s("forward", 0) == pytest.approx(m * 7 * fwd, rel=1e-9)
    assert tl.total_s("forward", 5) == pytest.approx(m * 8 * fwd, rel=1e-9)
    assert tl.total_s("forward", 15) == pytest.approx(m * (7 * fwd + logits / 3), rel=1e-9)
    # the closed form bounds the uneven schedule; measured 0.09 % apart with the sends
    assert abs(tl.step_time_s / scored.step_time_s - 1) < 0.01
    assert tl.memory_gib.total.max() == pytest.approx(scored.memory_gib.total, rel=1e-9)


def test_a_layout_without_a_pipeline_is_one_row():
    model, cluster = load_model("gpt3-1.3b"), load_cluster("dgx-a100-1024")
    scored = estimate_layout(model, cluster, gpus=64, tp=1, pp=1, micro_batch=4)
    tl = timeline_events(model, cluster, scored)
    assert set(tl.rank.tolist()) == {0} and tl.stages.p2p_s == 0.0
    assert tl.total_s("bubble") == 0.0
    assert tl.step_time_s == pytest.approx(scored.step_time_s, rel=1e-9)  # no pipeline: the same sum


def test_the_picture_has_its_size_and_draws_the_timeline(gpt3, tmp_path):
    pytest.importorskip("matplotlib")
    from planner.plots.timeline import SIZE_PX, draw_timeline, plot_timeline

    model, cluster, scored, tl = gpt3
    drawn = plot_timeline(model, cluster, scored, tmp_path / "t.png")
    assert png_size(drawn.path) == SIZE_PX == (1600, 1000) and drawn.path.stat().st_size > 50_000
    rank, start, width = drawn.bars["forward"]
    for r in range(8):  # the drawn forward bars of a rank add up to the schedule's forward time
        assert width[rank == r].sum() == pytest.approx(tl.total_s("forward", r), rel=1e-9)
    assert (start + width).max() <= tl.step_time_s * (1 + 1e-12)
    for part in ("weights", "gradients", "optimizer", "activations", "other"):
        assert drawn.memory_gib[part] == pytest.approx(getattr(tl.memory_gib, part))
    assert drawn.gpu_line_gib == 80.0
    svg = draw_timeline(tl, tmp_path / "t.svg", "title")
    assert svg.path.read_text().lstrip().startswith("<?xml") and "<svg" in svg.path.read_text()[:2000]


def test_a_one_row_picture_and_a_bad_suffix(tmp_path):
    pytest.importorskip("matplotlib")
    from planner.plots.timeline import plot_timeline

    model, cluster = load_model("gpt3-1.3b"), load_cluster("dgx-a100-1024")
    scored = estimate_layout(model, cluster, gpus=64, tp=1, pp=1, micro_batch=4)
    drawn = plot_timeline(model, cluster, scored, tmp_path / "one.png")
    assert png_size(drawn.path) == (1600, 1000)
    assert set(drawn.bars["forward"][0].tolist()) == {0} and drawn.memory_gib["weights"].size == 1
    with pytest.raises(SpecError) as err:
        plot_timeline(model, cluster, scored, tmp_path / "t.jpg")
    assert err.value.path == "--timeline" and err.value.expected == ".png or .svg"
    assert not (tmp_path / "t.jpg").exists()


def test_without_matplotlib_the_timeline_names_its_option(gpt3, monkeypatch, tmp_path):
    import sys

    from planner.plots.timeline import draw_timeline

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    with pytest.raises(SpecError, match=r"pip install matplotlib") as err:
        draw_timeline(gpt3[3], tmp_path / "t.png", "title")
    assert err.value.path == "--timeline"


# --- the CLI: `plan estimate --timeline`, `plan search --plot` ---------------------------------

def _png_size(path) -> tuple[int, int]:
    # PNG: 8-byte signature, then the IHDR chunk whose first 8 data bytes are width and height
    data = path.read_bytes()[16:24]
    return int.from_bytes(data[:4], "big"), int.from_bytes(data[4:], "big")


def test_cli_estimate_draws_the_timeline_even_when_infeasible(tmp_path):
    from typer.testing import CliRunner

    from planner.cli.main import app

    png = tmp_path / "t.png"
    # tp 8 x pp 8 without recompute, sequence parallelism or ZeRO does not fit: exit 1, the picture still
    # drawn (estimate now defaults to search's sequence parallelism and ZeRO 1, with which it fits)
    r = CliRunner().invoke(app, ["estimate", "gpt3-175b", "dgx-a100-1024", "--tp", "8", "--pp", "8",
                                 "--micro-batch", "1", "--no-sequence-parallel", "--zero", "0", "--timeline", str(png)])
    assert r.exit_code == 1 and "violates memory" in r.stdout and _png_size(png) == (1600, 1000)


def test_cli_search_plot_draws_the_frontier_and_bad_suffixes_exit_2(tmp_path):
    from typer.testing import CliRunner

    from planner.cli.main import app

    svg = tmp_path / "f.svg"
    r = CliRunner().invoke(app, ["search", "llama3-8b", "dgx-h100-1024", "--gpus", "64", "--frontier", "--plot", str(svg)])
    assert r.exit_code == 0, r.output
    assert svg.read_text().lstrip().startswith("<?xml") and "<svg" in svg.read_text()
    r = CliRunner().invoke(app, ["search", "--plot", str(tmp_path / "f.txt")])
    assert r.exit_code == 2 and "--plot" in r.output and not (tmp_path / "f.txt").exists()


def test_cli_timeline_of_an_interleaving_with_no_schedule_exits_2_after_the_numbers(tmp_path):
    from typer.testing import CliRunner

    from planner.cli.main import app

    # 512 GPUs / (tp 8 x pp 8) = dp 8; global batch 1000 / (8 x 1) = 125 micro-batches, not a multiple of
    # pp 8: Megatron's interleaved schedule has no order for them (the simulation deadlocked, exit 3)
    png = tmp_path / "y.png"
    r = CliRunner().invoke(app, ["estimate", "gpt3-175b", "dgx-a100-1024", "--gpus", "512", "--global-batch", "1000",
                                 "--tp", "8", "--pp", "8", "--micro-batch", "1", "--vpp", "4", "--timeline", str(png)])
    assert r.exit_code == 2 and "125 micro-batches" in r.stderr and "interleaving" in r.stdout
    assert not png.exists()


def test_the_drawn_moe_comm_is_what_the_a2a_overlap_leaves_exposed():
    model, cluster = load_model("qwen3-30b-a3b"), load_cluster("dgx-h100-1024")
    hidden = model.model_copy(update={"training": model.training.model_copy(update={"moe_a2a_overlap": True})})
    # no pipeline: one rank does every layer of every micro-batch, so its drawn communication is the
    # breakdown's exposed TP + CP + EP, and the overlap leaves less of the EP part than without it
    shown = {}
    for name, m in (("plain", model), ("hidden", hidden)):
        scored = estimate_layout(m, cluster, tp=1, pp=1, ep=16, micro_batch=1, zero=1, gpus=32)
        tb, tl = scored.time_breakdown_s, timeline_events(m, cluster, scored)
        assert tl.total_s("comm", 0) == pytest.approx(tb.tp_comm + tb.cp_comm + tb.ep_comm, rel=1e-9)
        shown[name] = tb.ep_comm
    assert 0 < shown["hidden"] < shown["plain"]


def test_cli_timeline_of_a_60000_sequence_batch_is_refused_at_once(tmp_path):
    """Found as: `plan estimate --timeline` of a 60,000-sequence batch ran for minutes and GBs (issue 38)."""
    import time

    from typer.testing import CliRunner

    from planner.cli.main import app

    png = tmp_path / "big.png"
    # 8 GPUs as pp 8: dp 1, 60,000 micro-batches of 1 -> 480,000 units (micro-batch x stage), above 50,000
    start = time.monotonic()
    r = CliRunner().invoke(app, ["estimate", "llama3.1-8b", "dgx-h100-1024", "--gpus", "8", "--global-batch", "60000",
                                 "--tp", "1", "--pp", "8", "--micro-batch", "1", "--timeline", str(png)])
    assert time.monotonic() - start < 5
    assert r.exit_code == 2 and r.stdout == "" and not png.exists()
    assert "--timeline: 60,000 micro-batches x pp 8 x vpp 1 = 480,000 units to draw" in r.stderr


@pytest.mark.parametrize("batch,units,drawable", [(6250, 50_000, True), (6251, 50_008, False)])
def test_the_bound_counts_micro_batches_times_stages(batch, units, drawable):
    from planner.errors import SpecError
    from planner.timeline import MAX_UNITS, check_drawable

    assert MAX_UNITS == 50_000
    layout = {"dp": 1, "tp": 1, "pp": 8, "cp": 1, "micro_batch": 1, "vpp": 1, "recompute": "none",
              "sequence_parallel": False, "zero": 0, "ep": 1, "etp": 1, "num_microbatches": batch}
    if drawable:
        check_drawable(layout)
    else:
        with pytest.raises(SpecError, match=f"{units:,} units"):
            check_drawable(layout)


def test_a_hybrid_stage_is_timed_by_the_kinds_it_holds():
    # Nemotron-H-56B, pp 4, the default split 30 30 29 29 of its pattern (118 layers: 54 Mamba 'M',
    # 54 MLP '-', 10 attention '*'): rank r holds the pattern's characters of its range (counted from the
    # pattern below); the drawn forward of each rank is m x (its Mamba x t_M + its MLP x t_- + its
    # attention x t_*), the logits' third on the last rank.
    from planner.costs.context import job_context
    from planner.specs.layers import layer_kinds
    from planner.timeline import layout_row

    model, cluster = load_model("nemotron-h-56b"), load_cluster("dgx-h100-1024")
    scored = estimate_layout(model, cluster, gpus=64, tp=4, pp=4, micro_batch=1)
    tl = timeline_events(model, cluster, scored)
    m = tl.num_microbatches
    assert tl.stage_layers == (30, 30, 29, 29) and m == 768 // 4
    pattern = model.layer_pattern
    assert (pattern.count("M"), pattern.count("-"), pattern.count("*")) == (54, 54, 10)
    job = job_context(model, cluster, layout_row(scored.layout))
    fwd = {k.chars: float(t.lc.fwd_s[0]) for k, t in zip(layer_kinds(model), job.kinds)}
    logits = float(job.kinds[0].lc.logits_fwd_bwd_s[0])
    start = 0
    for r, n in enumerate(tl.stage_layers):
        held = pattern[start:start + n]
        start += n
        expected = sum(held.count(c) * fwd[c] for c in fwd) + (logits / 3 if r == 3 else 0.0)
        assert tl.total_s("forward", r) == pytest.approx(m * expected, rel=1e-9)
    # over all ranks: 54 t_M + 54 t_- + 10 t_* (each layer once, not every kind for every layer)
    total = sum(tl.total_s("forward", r) for r in range(4))
    assert total == pytest.approx(m * (54 * fwd["M"] + 54 * fwd["-"] + 10 * fwd["*"] + logits / 3), rel=1e-9)
    # the drawn step is the priced one (before: every kind counted for every layer, +153 %)
    assert abs(tl.step_time_s / scored.step_time_s - 1) < 0.01
