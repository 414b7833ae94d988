"""What a pipeline schedule changes against the schedule the step-time and memory models price
(1F1B, or interleaved 1F1B at vpp > 1, Narayanan et al. 2021): the bubble, the activations in
flight on the busiest rank and the copies of the parameters.

Notation of DeepSeek-V3's technical report (2024) Table 2: F a chunk's forward, B its full backward
(input and weight gradients), W the weight-gradient part of B, F&B a forward and a backward
overlapped. Transformer layers are GEMMs: the backward does twice the forward's FLOPs, half of
them for the weights, so F : B : W = 1 : 2 : 1 (Qi et al. 2024 Sec. 2 take T_F = T_B = T_W with
their T_B the input-gradient half alone), and overlapping F with B hides communication, not
compute (F&B = F + B). Bubbles [in the pipeline's own bubble time]:
- 1F1B (p-1)(F+B); interleaved with v chunks (p-1)(F+B)/v (chunk times: v times smaller);
- ZB-H1 (p-1)(F+B-2W) (Qi et al. 2024 Sec. 2.1, (p-1)(T_F+T_B-T_W) in their notation): 1/3 of 1F1B,
  activations as 1F1B (p micro-batches: the deferred W keeps no more than 1F1B's peak);
- ZB-V, two chunks a rank in a V (Qi et al. 2024, arXiv v2's ZB-V section): no idle time inside a rank's
  span at 1:2:1 ((p-1)(T_F+T_B-2T_W) = (p-1)(F+B-3W) = 0 of chunk times), but rank r starts r chunk
  forwards after rank 0 and every rank does the same work: a parallelogram, whose skew (p-1) F of chunk
  times is idle in a step that ends together. The authors' zero needs their optimizer post-validation
  ("this all-reduce [global norm, inf/nan] breaks parallelogram and makes zero bubble impossible",
  sail-sg/zero-bubble-pipeline-parallelism); the step priced here ends with a synchronous optimizer step
  (Megatron-LM and torchtitan clip by the global norm), so ZB-V's bubble is (p-1) F of chunk times, as
  planner/timeline.py simulates torch.distributed.pipelining's ScheduleZBVZeroBubble order (tests/
  test_timeline_schedules.py). 1F1B's peak activations (p micro-batches of a rank's layers) and twice its
  pipeline sends (the step time's 2(m v + p - 1) sends at v = 2). The authors' comparison at
  T_F = T_B = T_W: bubble rate 1F1B (p-1)/m, ZB-H1 (p-1)/(3m), ZB-V 0 (post-validated); activation
  memory 1x, 1x, 1x; pipeline communication 1x, 1x, 2x;
- interleaved zero bubble (torch.distributed.pipelining's ScheduleInterleavedZeroBubble): the
  interleaved bubble with each chunk's W deferred as in ZB-H1, (p-1)(F+B-2W)/v (an assumption: no
  paper tabulates it);
- DualPipe (p/2-1)(F&B+B-3W), parameters 2x, activations p+1 micro-batches of a stage;
- DualPipeV, DualPipe cut in half (DeepSeek's DualPipe repository): on p ranks the table's PP is the
  2p chunks, so (p-1)(F&B+B-3W) of chunk times; parameters as 1F1B's (two chunks of half a stage),
  activations 2p+1 chunks, (2p+1)/2 micro-batches of a stage.
"""
from __future__ import annotations

import numpy as np

from planner.layout.axes import SCHEDULES

F, B, W = 1.0, 2.0, 1.0  # a chunk's forward, full backward and weight-gradient part, in forwards


def _is(schedule, name):
    return np.asarray(schedule) == SCHEDULES.index(name)


def bubble_factor(schedule, pp, vpp) -> np.ndarray:
    """The schedule's bubble over the one the step time prices, (p-1)(F+B)/v of stage times."""
    p = np.asarray(pp, dtype=float)
    plain = (p - 1) * (F + B)  # 1F1B and interleaved, per v
    zb_h1 = (p - 1) * (F + B - 2 * W)
    zb_v = (p - 1) * (F + max(F + B - 3 * W, 0.0))  # the parallelogram's skew; no idle inside at 1:2:1
    dualpipe = (p / 2 - 1) * ((F + B) + B - 3 * W)
    dualpipev = (p - 1) * ((F + B) + B - 3 * W)
    out = np.select([_is(schedule, "zb-h1") | _is(schedule, "interleaved-zb"), _is(schedule, "zb-v"),
                     _is(schedule, "dualpipe"), _is(schedule, "dualpipev")],
                    [zb_h1, zb_v, dualpipe, dualpipev], plain)
    return np.divide(out, plain, out=np.ones_like(p * 1.0 * out), where=plain > 0)


def activation_factor(schedule, pp, vpp) -> np.ndarray:
    """The busiest rank's activations in flight over those the memory model prices (1F1B: p
    micro-batches of a stage; interleaved with v chunks: p(1 + (p-1)/(vp)), Narayanan et al. 2021)."""
    p = np.asarray(pp, dtype=float)
    v = np.asarray(vpp, dtype=float)
    priced = np.where(v > 1, p * (1 + (p - 1) / (v * p)), p)
    want = np.select([_is(schedule, "zb-v"), _is(schedule, "dualpipe"), _is(schedule, "dualpipev")],
                     [p, p + 1, (2 * p + 1) / 2], priced)
    return want / priced


def parameter_copies(schedule) -> np.ndarray:
    """Copies of its stage's parameters (and their gradients and optimizer states) a rank holds:
    DualPipe keeps both directions' stages, 2 (DeepSeek-V3 Table 2); the others 1."""
    return np.where(_is(schedule, "dualpipe"), 2.0, 1.0)
