"""`--timeline` simulates every schedule of `--schedule` (planner/timeline_orders.py) and its bubble is the
papers': with a chunk's F : B : W = 1 : 2 : 1 (B the full backward, W its weight-gradient half; Qi et al.
2024 take T_F = T_B = T_W with their T_B the input half) the simulated makespan minus each rank's work is
- 1F1B (p-1)(F+B), ZB-H1 (p-1)(F+B-2W) (Qi et al. 2024 Sec. 2.1: (p-1)(T_F+T_B-T_W) against 1F1B's
  (p-1)(T_F+T_B+T_W); DeepSeek-V3 Table 2's ZB1P);
- DualPipe (p/2-1)(F&B+B-3W) with F&B = F+B (DeepSeek-V3 Table 2), DualPipeV the same with PP = 2p chunks;
- ZB-V (p-1) F of chunk times: no idle inside a rank's span (the paper's zero), the parallelogram's skew
  before a synchronous optimizer step (planner/costs/schedules.py);
and each equals what planner/costs/schedules.py prices."""
import numpy as np
import pytest
from typer.testing import CliRunner

from planner.cli import app
from planner.costs.schedules import bubble_factor
from planner.layout.axes import SCHEDULES
from planner.timeline import KINDS, StageTimes, simulate
from planner.timeline_orders import rank_orders

runner = CliRunner()
ESTIMATE = ["estimate", "gpt3-175b", "dgx-a100-1024", "--gpus", "64", "--global-batch", "32", "--tp", "8", "--pp", "8",
            "--micro-batch", "1"]
VPP = {"1f1b": 1, "interleaved": 2, "zb-h1": 1, "zb-v": 2, "interleaved-zb": 2, "dualpipe": 1, "dualpipev": 2}


def hand(stages: int, fwd: float, bwd: float) -> StageTimes:
    z = np.zeros(stages)
    return StageTimes(np.full(stages, fwd), np.full(stages, bwd), z, z, z, 0.0, 0.0)


def bubble(schedule: str, p: int, m: int) -> float:
    """Simulated makespan minus a rank's work, a stage's F = 1 and B = 2 split into v chunks."""
    v = VPP[schedule]
    events, makespan = simulate(hand(p * v, 1 / v, 2 / v), p, v, m, schedule)
    for r in range(p):  # every rank works m (F + B) = 3 m
        assert events[events[:, 0] == r, 2].sum() == pytest.approx(3 * m)
    return makespan - 3 * m


def test_zb_h1_on_two_ranks_counted_by_hand():
    # p 2, m 2, F = I = W = 1 (I + W the full backward 2). Rank 0: F0 | F1 | I0 | W0 | I1 | W1 (no deferral);
    # rank 1 defers its first W: F0 | I0 | F1 | I1 | W0 | W1.
    # r0: F0 0-1, F1 1-2; r1: F0 1-2, I0 2-3, F1 3-4 (r0's F1 at 2), I1 4-5, W0 5-6, W1 6-7;
    # r0: I0 3-4 (r1's I0 at 3), W0 4-5, I1 5-6 (r1's I1 at 5), W1 6-7. Makespan 7 = work 6 + bubble 1
    # = (p-1)(T_F+T_B-T_W) = 1 x (1+1-1); 1F1B: (m + p - 1)(F+B) = 3 x 3 = 9, bubble 3 = (p-1)(T_F+T_B+T_W).
    assert bubble("zb-h1", 2, 2) == pytest.approx(1.0)
    assert bubble("1f1b", 2, 2) == pytest.approx(3.0)
    assert rank_orders("zb-h1", 2, 1, 2)[1] == [(("F", 0, 1),), (("I", 0, 1),), (("F", 1, 1),), (("I", 1, 1),),
                                                (("W", 0, 1),), (("W", 1, 1),)]


def test_dualpipe_on_two_ranks_counted_by_hand():
    # p 2, m 4: micro-batches 0, 1 from rank 0, 2, 3 from rank 1 (dualpipe.py steps 2, 4, 6, 8).
    # r0: F0 0-1, F2 1-2, F1 2-3, B2 3-5, [F3 + B0] 5-8, B3 8-10, I1 10-11, W1 11-12;
    # r1: F2 0-1, F0 1-2, F3 2-3, B0 3-5, [F1 + B2] 5-8, B1 8-10, I3 10-11, W3 11-12.
    # Makespan 12 = work 4 x 3: bubble 0 = (p/2 - 1)(F&B + B - 3W) at p = 2.
    assert bubble("dualpipe", 2, 4) == pytest.approx(0.0)
    assert rank_orders("dualpipe", 2, 1, 4)[0][4] == (("F", 3, 1), ("B", 0, 0))  # overlapped pair


@pytest.mark.parametrize("p, m", [(4, 8), (4, 16), (8, 16), (8, 32)])
@pytest.mark.parametrize("schedule, paper", [
    ("1f1b", lambda p: (p - 1) * (1 + 2)),  # (p-1)(F+B)
    ("interleaved", lambda p: (p - 1) * (1 + 2) / 2),  # (p-1)(F+B)/v, Narayanan et al. 2021
    ("zb-h1", lambda p: (p - 1) * (1 + 2 - 2 * 1)),  # (p-1)(F+B-2W), Qi et al. 2024 / DeepSeek-V3 ZB1P
    ("interleaved-zb", lambda p: (p - 1) * (1 + 2 - 2 * 1) / 2),  # ZB1P per chunk of half a stage
    ("zb-v", lambda p: (p - 1) * 0.5),  # (p-1) F of a chunk (half a stage)
    ("dualpipe", lambda p: (p / 2 - 1) * ((1 + 2) + 2 - 3 * 1)),  # (PP/2-1)(F&B+B-3W), DeepSeek-V3 Table 2
    ("dualpipev", lambda p: (p - 1) * ((0.5 + 1) + 1 - 3 * 0.5)),  # the same, PP = 2p chunks of half a stage
])
def test_simulated_bubble_is_the_papers_and_the_priced(schedule, paper, p, m):
    got = bubble(schedule, p, m)
    assert got == pytest.approx(paper(p))
    # what the step time prices: (p-1)(F+B)/v x bubble_factor (planner/costs/pipeline.py, equal stages)
    v = VPP[schedule]
    priced = (p - 1) * 3 / v * bubble_factor(np.array([SCHEDULES.index(schedule)]), np.array([p]), np.array([v]))[0]
    assert got == pytest.approx(priced)


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("p, m", [(2, 4), (4, 8), (4, 12), (8, 16)])
def test_every_rank_runs_each_of_its_ops_once(schedule, p, m):
    v = VPP[schedule]
    orders = rank_orders(schedule, p, v, m)
    ops = [op for rank in orders for entry in rank for op in entry]
    assert len(ops) == len(set(ops))
    forwards = sorted((mb, s) for kind, mb, s in ops if kind == "F")
    backwards = sorted((mb, s) for kind, mb, s in ops if kind in "BI")
    weights = sorted((mb, s) for kind, mb, s in ops if kind == "W")
    everything = [(mb, s) for mb in range(m) for s in range(p * v)]
    assert forwards == everything and backwards == everything
    assert weights == sorted((mb, s) for kind, mb, s in ops if kind == "I")  # every split backward's W once
    split = schedule not in ("1f1b", "interleaved")
    assert bool(weights) == split


def test_a_v_schedule_runs_its_second_chunk_back_from_the_last_rank():
    # ZB-V and DualPipeV: stage s < p on rank s, stage s >= p on rank 2p - 1 - s (p 4: stage 4 on rank 3, 7 on 0)
    for schedule in ("zb-v", "dualpipev"):
        orders = rank_orders(schedule, 4, 2, 8)
        held = [sorted({s for entry in rank for _, _, s in entry}) for rank in orders]
        assert held == [[0, 7], [1, 6], [2, 5], [3, 4]], schedule


@pytest.mark.parametrize("schedule, vpp", [("zb-h1", 1), ("zb-v", 2), ("interleaved-zb", 2), ("dualpipe", 1),
                                           ("dualpipev", 2)])
def test_timeline_draws_every_schedule(schedule, vpp, tmp_path):
    pytest.importorskip("matplotlib")
    from .plots.test_sweep_plots import png_size
    from planner.plots.timeline import SIZE_PX

    png = tmp_path / "t.png"
    r = runner.invoke(app, [*ESTIMATE, "--vpp", str(vpp), "--schedule", schedule, "--timeline", str(png)])
    # dualpipe's two copies of the parameters do not fit 80 GiB: exit 1, drawn all the same
    assert r.exit_code == (1 if schedule == "dualpipe" else 0) and png.exists(), r.output
    assert png_size(png) == SIZE_PX


def test_timeline_of_1f1b_has_no_split_backward():
    from planner.estimate import estimate_layout
    from planner.specs.loading import load_cluster, load_model
    from planner.timeline import timeline_events

    model, cluster = load_model("gpt3-175b"), load_cluster("dgx-a100-1024")
    tl = timeline_events(model, cluster, estimate_layout(model, cluster, gpus=64, tp=8, pp=8, micro_batch=1))
    assert not (tl.kind == KINDS.index("wgrad")).any()


def test_dualpipe_with_too_few_micro_batches_is_refused(tmp_path):
    # 64 GPUs / (tp 8 x pp 8) = dp 1; global batch 8 / mb 1 = 8 micro-batches < 2 pp = 16 (dualpipe.py asserts
    # num_chunks >= num_ranks * 2)
    png = tmp_path / "t.svg"
    args = [*ESTIMATE, "--schedule", "dualpipe", "--timeline", str(png)]
    args[args.index("--global-batch") + 1] = "8"
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and "DualPipe needs an even number of micro-batches of at least 2 pp = 16" in r.output
    assert not png.exists()
