"""Each pipeline schedule's bubble, activations and parameter copies against its paper's table
(planner/costs/schedules.py), with F : B : W = 1 : 2 : 1 (a chunk's forward, full backward and the
backward's weight-gradient half; Qi et al. 2024 take T_F = T_B = T_W, their T_B the input half)."""
import numpy as np
import pytest

from planner.costs.schedules import activation_factor, bubble_factor, parameter_copies
from planner.layout.axes import SCHEDULES
from planner.layout.space import single_layout


def s(name):
    return SCHEDULES.index(name)


@pytest.mark.parametrize("schedule, pp, vpp, expected, source", [
    # 1F1B (p-1)(F+B) against itself
    ("1f1b", 8, 1, 1.0, "Narayanan et al. 2021"),
    ("interleaved", 8, 4, 1.0, "Narayanan et al. 2021: (p-1)(F+B)/v, what the step time prices"),
    # ZB-H1 (p-1)(T_F+T_B-T_W) = (p-1)(F+B-2W) = 7*(1+2-2) = 7 over 1F1B's 7*(1+2) = 21
    ("zb-h1", 8, 1, 7 / 21, "Qi et al. 2024: ZB-H1 a third of 1F1B's bubble"),
    ("interleaved-zb", 8, 2, 7 / 21, "ZB-H1's deferral per chunk (an assumption)"),
    # ZB-V: no idle inside a rank's span ((p-1)(F+B-3W) = 7*(1+2-3) = 0), but the parallelogram's skew
    # (p-1) F = 7*1 of chunk times remains before a synchronous optimizer step: 7 over 7*(1+2) = 21
    ("zb-v", 8, 2, 7 / 21, "Qi et al. 2024: zero only with the optimizer post-validation"),
    # DualPipe (PP/2-1)(F&B+B-3W) = (8/2-1)*((1+2)+2-3) = 3*2 = 6 over 7*3 = 21
    ("dualpipe", 8, 1, 6 / 21, "DeepSeek-V3 Table 2"),
    ("dualpipe", 16, 1, 7 * 2 / (15 * 3), "DeepSeek-V3 Table 2: (16/2-1)*2 = 14 over 15*3 = 45"),
    ("dualpipe", 2, 1, 0.0, "DeepSeek-V3 Table 2: (2/2-1) = 0"),
    # DualPipeV on p ranks = DualPipe's table with PP = 2p chunks: (p-1)((F+B)+B-3W) = 7*2 = 14 of chunk
    # times over interleaved v=2's (p-1)(F+B) = 21 of chunk times
    ("dualpipev", 8, 2, 14 / 21, "DualPipe repository: DualPipeV on PP/2 devices"),
])
def test_bubble_against_the_papers(schedule, pp, vpp, expected, source):
    assert bubble_factor(np.array([s(schedule)]), np.array([pp]), np.array([vpp]))[0] == pytest.approx(expected), source


@pytest.mark.parametrize("schedule, pp, vpp, expected, source", [
    ("1f1b", 8, 1, 1.0, "1F1B: p micro-batches"),
    ("zb-h1", 8, 1, 1.0, "Qi et al. 2024: ZB-H1's peak memory is 1F1B's, p M_B"),
    ("interleaved-zb", 8, 4, 1.0, "as interleaved"),
    # ZB-V: p M_B = 8 against interleaved v=2's p(1 + (p-1)/(vp)) = 8 * (1 + 7/16) = 11.5
    ("zb-v", 8, 2, 8 / 11.5, "Qi et al. 2024 (ZB-V): ZB-V's peak is 1F1B's"),
    # DualPipe: PP + 1 = 9 against 1F1B's 8
    ("dualpipe", 8, 1, 9 / 8, "DeepSeek-V3 Table 2"),
    # DualPipeV: 2p+1 = 17 chunks of half a stage = 8.5 stages against 11.5
    ("dualpipev", 8, 2, 8.5 / 11.5, "DualPipe repository: PP + 1 chunks with PP = 2p"),
])
def test_activations_against_the_papers(schedule, pp, vpp, expected, source):
    got = activation_factor(np.array([s(schedule)]), np.array([pp]), np.array([vpp]))[0]
    assert got == pytest.approx(expected), source


def test_dualpipe_alone_holds_two_copies_of_the_parameters():
    """DeepSeek-V3 Table 2: DualPipe 2x; DualPipeV (two half stages a rank) and the others 1x."""
    got = parameter_copies(np.array([s(n) for n in SCHEDULES]))
    assert got.tolist() == [2.0 if n == "dualpipe" else 1.0 for n in SCHEDULES]


def test_the_default_schedule_follows_vpp():
    assert single_layout(dp=1, tp=1, pp=4, micro_batch=1, num_microbatches=8).row(0)["schedule"] == "1f1b"
    assert single_layout(dp=1, tp=1, pp=4, vpp=2, micro_batch=1, num_microbatches=8).row(0)["schedule"] == "interleaved"
