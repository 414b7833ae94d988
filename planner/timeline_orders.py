"""The order in which each pipeline rank runs its work under each schedule of `--schedule`, for the
timeline (planner/timeline.py). Pure: lists of tuples, no times.

An op is (kind, micro-batch, stage) with `stage` the position on the micro-batch's path through the
model (0 .. stages - 1); kinds:
- "F" a stage's forward;
- "B" its full backward (input and weight gradients, as 1F1B runs it);
- "I" the input-gradient half of the backward alone, whose weight gradient runs later as
- "W" (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", Sec. 2: the B/W split).
A rank's entry is a tuple of ops started together: one op, or DualPipe's overlapped forward and
backward (F, B) of two micro-batches (DeepSeek-V3 technical report Sec. 3.2.1), which start when
both inputs have arrived.

Where a stage runs (`Placement`): 1F1B and interleaved stage j p + r on rank r (Megatron-LM); the V
schedules (ZB-V, DualPipeV) stage s < p on rank s and stage s >= p on rank 2p - 1 - s, two chunks a
rank in a V; DualPipe sends half the micro-batches from each end: the first half along ranks 0 .. p-1,
the second along p-1 .. 0, so each rank holds stage r of one direction and p - 1 - r of the other.

The orders follow each schedule's reference implementation:
- 1f1b, interleaved: Megatron-LM core/pipeline_parallel/schedules.py (`unit_order`);
- zb-h1, interleaved-zb: torch.distributed.pipelining ScheduleInterleavedZeroBubble (the ZB1P of the
  paper; `_get_1f1b_rank_ops(enable_zero_bubble=True)`, warm-up (v-1) p + p-1-r, rank r deferring its
  first r weight gradients); at v = 1 this is ZB-H1 (Qi et al. 2024 Fig. 3);
- zb-v: torch.distributed.pipelining ScheduleZBVZeroBubble._calculate_single_rank_operations;
- dualpipe, dualpipev: DeepSeek's DualPipe repository, dualpipe/dualpipe.py and dualpipev.py
  `step` (steps 1-8: nF0, nF0F1, nB1W1F1, nF0B1F1B0, nB1F1B0, nB1B0, nWB0, nW).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from planner.costs.pipeline_ranks import warmup_units

Op = tuple[str, int, int]  # (kind, micro-batch, stage on the micro-batch's path)
Entry = tuple[Op, ...]


@dataclass(frozen=True)
class Placement:
    """Where stage `stage` of micro-batch `mb` runs: its rank and its chunk on that rank."""

    schedule: str
    p: int
    v: int
    m: int

    @property
    def stages(self) -> int:
        return self.p * self.v

    def rank(self, mb: int, stage: int) -> int:
        p = self.p
        if self.schedule in ("zb-v", "dualpipev"):
            return stage if stage < p else 2 * p - 1 - stage
        if self.schedule == "dualpipe" and mb >= self.m // 2:
            return p - 1 - stage
        return stage % p

    def chunk(self, mb: int, stage: int) -> int:
        """The chunk of its rank (DualPipe: the direction, 0 from rank 0, 1 from rank p - 1)."""
        if self.schedule == "dualpipe":
            return int(mb >= self.m // 2)
        return stage // self.p


def unit_order(p: int, v: int, m: int, rank: int) -> list[tuple[bool, int, int]]:
    """Rank r's units in Megatron's order: (backward?, micro-batch, chunk)."""
    groups = [range(g, min(g + p, m)) for g in range(0, m, p)] if v > 1 else [range(m)]
    forward = [(mb, j) for g in groups for j in range(v) for mb in g]
    backward = [(mb, v - 1 - j) for g in groups for j in range(v) for mb in g]
    w = warmup_units(p, v, m, rank)
    order = [(False, *forward[k]) for k in range(w)]
    for k in range(len(forward) - w):
        order += [(False, *forward[w + k]), (True, *backward[k])]
    return order + [(True, *backward[k]) for k in range(len(forward) - w, len(forward))]


def _megatron(p, v, m, r) -> list[Entry]:
    return [(("B" if back else "F", mb, j * p + r),) for back, mb, j in unit_order(p, v, m, r)]


def _zero_bubble_1p(p, v, m, r) -> list[Entry]:
    """torch.distributed.pipelining ScheduleInterleavedZeroBubble (ZB-H1 at v = 1)."""
    per_round = m // max(1, m // p)
    warmup = min((v - 1) * per_round + (p - 1 - r), m * v)
    total = m * v

    def fwd_stage(k):
        return ((k // per_round) % v) * p + r

    def bwd_stage(k):
        return (v - 1 - ((k - warmup) // per_round) % v) * p + r

    count = {"F": {}, "I": {}, "W": {}}

    def op(kind, stage):
        mb = count[kind].get(stage, 0)
        count[kind][stage] = mb + 1
        return (kind, mb, stage)

    out: list[Entry] = [(op("F", fwd_stage(k)),) for k in range(warmup)]
    backward_steps, weights = [], 0
    for k in range(warmup, warmup + total):
        if k < total:  # the steady state: a forward, then an input gradient
            out.append((op("F", fwd_stage(k)),))
        out.append((op("I", bwd_stage(k)),))
        backward_steps.append(k)
        if k - warmup >= r:  # rank r defers its first r weight gradients into the drain
            out.append((op("W", bwd_stage(backward_steps[weights])),))
            weights += 1
    while weights < len(backward_steps):
        out.append((op("W", bwd_stage(backward_steps[weights])),))
        weights += 1
    return out


def _zb_v(p, m, r) -> list[Entry]:
    """torch.distributed.pipelining ScheduleZBVZeroBubble: chunk 0 is stage r, chunk 1 stage 2p-1-r;
    the order is built for max(2p - 1, m) micro-batches and the ones beyond m dropped, as there."""
    n = max(2 * p - 1, m)
    s0, s1 = r, 2 * p - 1 - r
    f0 = f1 = b0 = b1 = 0
    ops: list[Op] = []
    for _ in range(2 * (p - r) - 1):
        ops.append(("F", f0, s0)); f0 += 1
    for _ in range(r):
        ops += [("F", f1, s1), ("F", f0, s0)]; f1 += 1; f0 += 1
    for _ in range(p - r):
        ops += [("F", f1, s1), ("I", b1, s1), ("W", b1, s1)]; f1 += 1; b1 += 1
    while f1 < f0 or f0 < n:
        if f0 < n:
            ops.append(("F", f0, s0)); f0 += 1
        ops += [("I", b0, s0), ("W", b0, s0), ("F", f1, s1), ("I", b1, s1), ("W", b1, s1)]
        b0 += 1; f1 += 1; b1 += 1
    w0, w1 = b0, b1
    for _ in range(r):
        ops += [("I", b0, s0), ("I", b1, s1)]; b0 += 1; b1 += 1
    for _ in range(p - r):
        ops += [("I", b0, s0), ("W", w0, s0)]; b0 += 1; w0 += 1
    ops += [("W", k, s1) for k in range(w1, b1)] + [("W", k, s0) for k in range(w0, b0)]
    return [(o,) for o in ops if o[1] < m]


class _DualPipeRank:
    """One rank's op list built as DeepSeek's DualPipe `step` runs it: phase 0 and 1 are the rank's two
    stages (DualPipe: the direction where it is in the first half of the path, then the other; DualPipeV:
    chunk 0, then chunk 1), each with its forward and backward counters; deferred weight gradients
    queue (WeightGradStore) and run first in, first out."""

    def __init__(self, stages: tuple[int, int], first_mb: tuple[int, int]):
        self.stages, self.f, self.b = stages, list(first_mb), list(first_mb)
        self.waiting: deque[Op] = deque()
        self.out: list[Entry] = []

    def _f(self, phase) -> Op:
        self.f[phase] += 1
        return ("F", self.f[phase] - 1, self.stages[phase])

    def _b(self, phase, zb) -> Op:
        self.b[phase] += 1
        op = ("I" if zb else "B", self.b[phase] - 1, self.stages[phase])
        if zb:
            self.waiting.append(("W", op[1], op[2]))
        return op

    def forward(self, phase):
        self.out.append((self._f(phase),))

    def backward(self, phase, zb=False):
        self.out.append((self._b(phase, zb),))

    def weight(self):
        self.out.append((self.waiting.popleft(),))

    def forward_backward(self, f_phase, b_phase):  # overlapped: F of one phase, full B of the other
        self.out.append((self._f(f_phase), self._b(b_phase, False)))


def _dualpipe_steps(x: _DualPipeRank, ranks: int, rank: int, chunks: int, middle: bool) -> list[Entry]:
    """Steps 1-8 of dualpipe.py/dualpipev.py `step` for `rank` of `ranks` (DualPipe: its half rank of
    the half ranks, `chunks` the micro-batches of one direction; DualPipeV: the rank, all micro-batches)."""
    for _ in range((ranks - rank - 1) * 2):  # 1: nF0
        x.forward(0)
    for _ in range(rank + 1):  # 2: nF0F1
        x.forward(0)
        x.forward(1)
    for _ in range(ranks - rank - 1):  # 3: nB1W1F1, zero bubble
        x.backward(1, zb=True)
        x.weight()
        x.forward(1)
    for i in range(chunks - ranks * 2 + rank + 1):  # 4: nF0B1F1B0
        if i == 0 and middle:  # "We don't overlap these two chunks to further reduce bubble size."
            x.forward(0)
            x.backward(1)
        else:
            x.forward_backward(0, 1)
        x.forward_backward(1, 0)
    for _ in range(ranks - rank - 1):  # 5: nB1F1B0
        x.backward(1)
        x.forward_backward(1, 0)
    zb = False
    for i in range(rank + 1):  # 6: nB1B0, the second half zero bubble
        if i == (rank + 1) // 2 and rank % 2 == 1:
            zb = True
        x.backward(1, zb)
        if i == (rank + 1) // 2 and rank % 2 == 0:
            zb = True
        x.backward(0, zb)
    for _ in range(ranks - rank - 1):  # 7: nWB0
        x.weight()
        x.backward(0, zb=True)
    for _ in range(rank + 1):  # 8: nW
        x.weight()
    assert not x.waiting
    return x.out


def _dualpipe(p, m, r) -> list[Entry]:
    half = p // 2
    h = min(r, p - 1 - r)  # half rank
    # phase 0: the direction where rank r is at path position h; micro-batches 0 .. m/2-1 go from rank 0
    first = (0, m // 2) if r < half else (m // 2, 0)
    x = _DualPipeRank((h, p - 1 - h), first)
    return _dualpipe_steps(x, half, h, m // 2, middle=h == half - 1)


def _dualpipev(p, m, r) -> list[Entry]:
    x = _DualPipeRank((r, 2 * p - 1 - r), (0, 0))
    return _dualpipe_steps(x, p, r, m, middle=r == p - 1)


def rank_orders(schedule: str, p: int, v: int, m: int) -> list[list[Entry]]:
    """Each rank's entries in the order it runs them."""
    if schedule in ("1f1b", "interleaved"):
        return [_megatron(p, v, m, r) for r in range(p)]
    if schedule in ("zb-h1", "interleaved-zb"):
        return [_zero_bubble_1p(p, v, m, r) for r in range(p)]
    if schedule == "zb-v":
        return [_zb_v(p, m, r) for r in range(p)]
    if schedule == "dualpipe":
        return [_dualpipe(p, m, r) for r in range(p)]
    if schedule == "dualpipev":
        return [_dualpipev(p, m, r) for r in range(p)]
    raise ValueError(f"unknown schedule {schedule!r}")  # the layout's axis refuses it first


def order_problem(schedule: str, p: int, v: int, m: int) -> str | None:
    """Why the schedule has no order for m micro-batches (its implementation refuses them), else None."""
    if schedule == "dualpipe" and (m % 2 or m < 2 * p):
        return f"DualPipe needs an even number of micro-batches of at least 2 pp = {2 * p} (dualpipe.py), got {m}"
    if schedule == "dualpipev" and m < 2 * p:
        return f"DualPipeV needs at least 2 pp = {2 * p} micro-batches (dualpipev.py), got {m}"
    if schedule in ("interleaved", "interleaved-zb") and m % p:
        return f"{m} micro-batches per step is not a multiple of pp {p}, which interleaving (vpp {v}) needs"
    return None
