"""The pipeline schedule of one scored layout, event by event: what each pipeline rank does when.

Per virtual stage (planner/costs/pipeline_ranks.py: stage j p + r is chunk j of rank r) the forward and
backward of one micro-batch cost what planner/costs/pipeline.py charges its layers: each kind's
per-layer compute (`KindTimes.lc`), the recomputed forward, the exposed TP/CP/EP communication
(TP split by passes, `comm.tp_passes`; CP and EP a third forward, two thirds backward, as
`mean_layer`), the logits on the last stage (a third forward), the stack's per-chunk overhead, and
one blocking point-to-point send after each unit that feeds another stage (`comm.pp_p2p_s`).

The schedule is the layout's (`schedule` axis), each rank's ops in the order of the schedule's
reference implementation (planner/timeline_orders.py): Megatron-LM's 1F1B and interleaved 1F1B
(warm-up forwards, one forward and one backward, drain); the zero-bubble schedules, whose backward
splits into the input gradient and a deferred weight gradient W (Qi et al. 2024), ZB-H1 and
interleaved zero bubble (torch.distributed.pipelining ScheduleInterleavedZeroBubble) and ZB-V
(ScheduleZBVZeroBubble, two chunks a rank in a V); DualPipe and DualPipeV (DeepSeek's DualPipe
repository), whose overlapped forward and backward of two micro-batches run back to back (overlap hides
communication, not compute, as planner/costs/schedules.py prices F&B = F + B). An op starts when its
rank is free and its input has arrived. Idle gaps are the bubble. After the last op every rank waits
the exposed data-parallel communication, the optimizer step and the stack's step overhead of the
layout's breakdown.

For equal stages the makespan is (m v + p - 1) (t_f + t_b) / v per rank-unit, the closed form of
`pipeline.step_time` (Narayanan et al. 2021 Sec. 2.2), so makespan + tail equals `step_time_s`;
an uneven split is simulated exactly where the closed form bounds it (tests/test_timeline.py). The
other schedules' simulated bubbles equal planner/costs/schedules.py's at F : B : W = 1 : 2 : 1
(tests/test_timeline_schedules.py).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from planner.layout.axes import AXES, V_SCHEDULES
from planner.costs import comm
from planner.costs.memory import MemoryBreakdown, memory_per_rank
from planner.costs.context import JobContext, job_context
from planner.costs.power_caps import cap_levels, capped_cluster
from planner.costs.pipeline_ranks import all_ranks, layout_default_split, path_order, pipeline_ranks, split_ranks
from planner.layout.space import single_layout
from planner.errors import SpecError
from planner.specs import ClusterSpec, ModelSpec
from planner.specs.hybrid import pattern_layers_before
from planner.specs.layers import layer_kinds
from planner.timeline_orders import Op, Placement, order_problem, rank_orders
from planner.timeline_orders import unit_order  # noqa: F401  (tests import it from here, as before)

# Units (one micro-batch's forward and backward on one virtual stage) a timeline simulates and draws at most:
# 50,000 take about 2 s to simulate and a few more to draw (60,000 sequences on pp 8 were 480,000: minutes, GBs)
MAX_UNITS = 50_000
# Pipeline ranks drawn at most: each is a row of events and a memory bar. 50,000 units on pp 2,000 took 16.5 s
# and on pp 10,000 95 s (drawing per rank), on pp 512 7 s; a row a rank is unreadable long before 512
MAX_RANKS = 512
# Rules of the layout space (planner/layout/axes.py) a layout must pass for its schedule to be simulated
_SCHEDULE_RULES = ("schedule_fits", "schedule_microbatches")

# Event kinds, in drawing (legend) order; `Timeline.kind` holds indices into this tuple.
KINDS = ("forward", "backward", "wgrad", "recompute", "comm", "pp_comm", "overhead", "bubble", "dp_comm", "optimizer")


@dataclass(frozen=True)
class StageTimes:
    """Seconds per micro-batch of each virtual stage, in the order a micro-batch passes them ((p v,)
    arrays): schedule order (chunk j of rank r at j p + r) but for the V schedules (`path_layers`)."""

    forward: np.ndarray  # forward compute, logits' third on the last stage
    backward: np.ndarray  # backward compute, logits' two thirds on the last stage
    recompute: np.ndarray  # forward recomputed in backward
    comm_forward: np.ndarray  # exposed TP/CP/EP of the forward
    comm_backward: np.ndarray  # exposed TP/CP/EP of the backward (and of the recomputed forward)
    overhead_s: float  # the stack's fixed cost per micro-batch and chunk
    p2p_s: float  # one activation or gradient send between stages (0 without a pipeline)

    @property
    def unit_s(self) -> np.ndarray:
        """Forward plus backward of one micro-batch on each stage, sends excluded."""
        return (self.forward + self.backward + self.recompute + self.comm_forward + self.comm_backward
                + self.overhead_s)


@dataclass(frozen=True)
class Timeline:
    """The events of one step (aligned arrays, one entry per drawn bar) and what they add up to."""

    pp: int
    vpp: int
    num_microbatches: int
    stage_layers: tuple[int, ...]
    stages: StageTimes
    rank: np.ndarray  # pipeline rank of each event
    start_s: np.ndarray
    duration_s: np.ndarray
    kind: np.ndarray  # index into KINDS
    micro_batch: np.ndarray  # -1 for bubble and tail events
    chunk: np.ndarray  # model chunk (0 .. vpp - 1); -1 for bubble and tail events
    makespan_s: float  # end of the last backward
    tail_s: dict[str, float]  # after the makespan, on every rank: dp_comm, optimizer, overhead
    predicted_step_time_s: float  # the layout's step_time_s (JSON)
    memory_gib: MemoryBreakdown  # per pipeline rank ((p,) arrays)
    gpu_memory_gib: float
    schedule: str = "1f1b"  # planner.layout.axes.SCHEDULES

    @property
    def step_time_s(self) -> float:
        """The drawn step: the schedule's makespan plus the tail."""
        return self.makespan_s + sum(self.tail_s.values())

    def total_s(self, kind: str, rank: int | None = None) -> float:
        """Seconds of events of `kind` (on `rank`, or summed over ranks)."""
        keep = self.kind == KINDS.index(kind)
        if rank is not None:
            keep &= self.rank == rank
        return float(self.duration_s[keep].sum())


def layout_row(layout: dict):
    """A scored layout's JSON `layout` object as a one-row Layouts."""
    return single_layout(**{a.name: layout[a.name] for a in AXES if a.name in layout})


def _run_cluster(cluster: ClusterSpec, scored) -> ClusterSpec:
    """The cluster as the layout was scored: under its power cap, when it has one."""
    if scored.power_cap is None:
        return cluster
    level = next(c for c in cap_levels(cluster.gpu) if c.cap_w == scored.power_cap.power_cap_w)
    return capped_cluster(cluster, level)


def stage_times(job: JobContext, stage_layers) -> StageTimes:
    """Per-stage seconds of one micro-batch (module docstring) for the one-row `job.layouts`."""
    model, cluster, lay = job.model, job.cluster, job.layouts
    n = np.asarray(stage_layers, dtype=np.int64)
    ends = np.cumsum(n)
    kinds = job.kinds
    if model.layer_pattern is not None:  # a hybrid pattern: each kind's layers in each stage's range
        held = [pattern_layers_before(model, k.chars, ends) - pattern_layers_before(model, k.chars, ends - n)
                for k in layer_kinds(model)]  # job.kinds are in layer_kinds' order
    else:
        moe = np.asarray(model.moe_layers_before(ends) - model.moe_layers_before(ends - n), dtype=float)
        held = [moe if k.moe else n - moe for k in kinds]
    passes = float(comm.tp_passes(lay)[0])
    zero = np.zeros(n.size)
    fwd, bwd, rec, cf, cb = zero.copy(), zero.copy(), zero.copy(), zero.copy(), zero.copy()
    for k, count in zip(kinds, held):
        fwd += count * float(k.lc.fwd_s[0])
        bwd += count * float(k.lc.bwd_s[0])
        rec += count * float(k.lc.recompute_s[0])
        side = float(k.cp[0] + k.ep[0])
        cf += count * (float(k.tp[0]) / passes + side / 3)
        cb += count * (float(k.tp[0]) * (passes - 1) / passes + 2 * side / 3)
    logits = float(kinds[0].lc.logits_fwd_bwd_s[0])
    fwd[-1] += logits / 3
    bwd[-1] += 2 * logits / 3
    p2p = float(comm.pp_p2p_s(cluster, model.hidden, model.seq_len, lay, job.numerics.activation_bytes)[0])
    return StageTimes(fwd, bwd, rec, cf, cb, job.stack.microbatch_overhead_s, p2p if int(lay.pp[0]) > 1 else 0.0)


def _segments(t: StageTimes, op: Op, place: Placement) -> list[tuple[int, float]]:
    """(kind, seconds) of one op, in the order they run, with the send to another rank after it. A split
    backward (Qi et al. 2024 Sec. 2) takes half the backward compute as W, the weight gradient: a GEMM's
    backward is two GEMMs of the forward's size, one for the input and one for the weights (the F : B : W
    = 1 : 2 : 1 of planner/costs/schedules.py); the recomputed forward and the exposed communication
    go with the input-gradient half, which feeds the previous stage."""
    kind, mb, stage = op
    if kind == "F":
        parts = [("forward", t.forward[stage]), ("comm", t.comm_forward[stage]), ("overhead", t.overhead_s)]
        to = stage + 1
    elif kind == "W":
        return [(KINDS.index("wgrad"), float(t.backward[stage] / 2))]
    else:
        backward = t.backward[stage] / 2 if kind == "I" else t.backward[stage]
        parts = [("recompute", t.recompute[stage]), ("backward", backward), ("comm", t.comm_backward[stage])]
        to = stage - 1
    sends = 0 <= to < place.stages and place.rank(mb, to) != place.rank(mb, stage)
    parts.append(("pp_comm", t.p2p_s if sends else 0.0))
    return [(KINDS.index(k), float(s)) for k, s in parts if s > 0]


def _ready(done: dict, op: Op, stages: int) -> float | None:
    """When the input of an op has arrived (None: not yet): the previous stage's forward, the next
    stage's backward (its input-gradient half, or the full one), on the last stage its own forward;
    a weight gradient its own input-gradient half."""
    kind, mb, stage = op
    if kind == "F":
        end = 0.0 if stage == 0 else done["F"][mb, stage - 1]
    elif kind == "W":
        end = done["B"][mb, stage]
    else:
        end = done["F"][mb, stage] if stage == stages - 1 else done["B"][mb, stage + 1]
    return None if np.isnan(end) else float(end)


def simulate(t: StageTimes, p: int, v: int, m: int, schedule: str | None = None) -> tuple[np.ndarray, float]:
    """Every op's segments as rows (rank, start [s], duration [s], kind, micro-batch, chunk), each
    rank's rows in time order, and the makespan [s]. An entry (one op, or DualPipe's overlapped
    forward and backward) starts when its rank is free and its inputs have arrived (`_ready`); ranks
    advance in turn until all are done. `schedule` defaults to the one vpp gives (1f1b, interleaved)."""
    schedule = schedule or ("interleaved" if v > 1 else "1f1b")
    place = Placement(schedule, p, v, m)
    stages = place.stages
    orders = rank_orders(schedule, p, v, m)
    done = {"F": np.full((m, stages), np.nan), "B": np.full((m, stages), np.nan)}  # B: the input gradient
    nxt, free = [0] * p, [0.0] * p
    rows: list[list[tuple]] = [[] for _ in range(p)]
    remaining = sum(len(o) for o in orders)
    while remaining:
        progress = False
        for r in range(p):
            while nxt[r] < len(orders[r]):
                entry = orders[r][nxt[r]]
                arrived = [_ready(done, op, stages) for op in entry]
                if None in arrived:
                    break
                start = max(free[r], *arrived)
                for op in entry:
                    _, mb, stage = op
                    chunk = place.chunk(mb, stage)
                    for kind, seconds in _segments(t, op, place):
                        rows[r].append((r, start, seconds, kind, mb, chunk))
                        start += seconds
                for op in entry:  # an overlapped pair sends both results when both are computed
                    if op[0] != "W":
                        done["F" if op[0] == "F" else "B"][op[1], op[2]] = start
                free[r] = start
                nxt[r] += 1
                remaining -= 1
                progress = True
        assert progress, "the schedule deadlocked"  # a bug in timeline_orders, not bad input
    flat = np.array([e for rank_rows in rows for e in rank_rows], dtype=float).reshape(-1, 6)
    return flat, max(free)


def bubbles(events: np.ndarray, p: int, makespan_s: float) -> np.ndarray:
    """Idle gaps of each rank within [0, makespan] as rows like `simulate`'s (kind bubble)."""
    out = []
    for r in range(p):
        mine = events[events[:, 0] == r]
        starts = np.concatenate([mine[:, 1], [makespan_s]])
        ends = np.concatenate([[0.0], mine[:, 1] + mine[:, 2]])
        gap = starts - ends
        keep = gap > 1e-12 * max(makespan_s, 1.0)
        out.append(np.column_stack([np.full(keep.sum(), r), ends[keep], gap[keep],
                                    np.full(keep.sum(), KINDS.index("bubble")), -np.ones((keep.sum(), 2))]))
    return np.concatenate(out) if out else np.zeros((0, 6))


def tail_events(tail_s: dict[str, float], p: int, makespan_s: float) -> np.ndarray:
    """The tail's parts one after the other from the makespan, on every rank."""
    out, start = [], makespan_s
    for kind, seconds in tail_s.items():
        if seconds > 0:
            out += [(r, start, seconds, KINDS.index(kind), -1, -1) for r in range(p)]
            start += seconds
    return np.array(out, dtype=float).reshape(-1, 6)


def rank_memory(job: JobContext, stage_layers) -> MemoryBreakdown:
    """Memory per pipeline rank [GiB] ((p,) arrays), counted as the layout was scored: the default
    split by `stages.layers_in_flight`, an explicit one chunk by chunk (`split_ranks`)."""
    model, lay = job.model, job.layouts
    p, v = int(lay.pp[0]), int(lay.vpp[0])
    if list(stage_layers) == layout_default_split(model, lay):
        ranks = pipeline_ranks(model, lay, all_ranks(lay))
    else:
        ranks = split_ranks(model, lay, stage_layers)
    mem = memory_per_rank(replace(job, ranks=ranks))
    parts = ("weights", "gradients", "optimizer", "activations", "other")
    return MemoryBreakdown(*(np.broadcast_to(getattr(mem, f), (p, 1))[:, 0].astype(float) for f in parts))


def check_drawable(layout: dict) -> None:
    """A step of at most MAX_UNITS units (micro-batches x pp x vpp) on at most MAX_RANKS ranks is drawn; a
    larger one is bad input (exit 2), said before any event is simulated."""
    lay = layout_row(layout)
    p, v, m = int(lay.pp[0]), int(lay.vpp[0]), int(lay.num_microbatches[0])
    if p > MAX_RANKS:
        raise SpecError(f"pp {p:,} pipeline ranks to draw, more than {MAX_RANKS:,}", path="--timeline",
                        expected=f"a layout of at most pp {MAX_RANKS:,} to draw, or no --timeline")
    if m * p * v > MAX_UNITS:
        raise SpecError(f"{m:,} micro-batches x pp {p} x vpp {v} = {m * p * v:,} units to draw, more than "
                        f"{MAX_UNITS:,}", path="--timeline",
                        expected=f"a step of at most {MAX_UNITS:,} units: fewer micro-batches per step (a larger "
                                 f"--micro-batch or dp, a smaller --global-batch), or no --timeline")


def schedule_of(layout: dict) -> str:
    """The layout's schedule (a JSON layout from before the axis: the one its vpp gives)."""
    return layout.get("schedule") or ("interleaved" if (layout.get("vpp") or 1) > 1 else "1f1b")


def path_layers(schedule: str, split, p: int) -> list[int]:
    """Layers per stage in the order a micro-batch passes them, from the split in schedule order (chunk
    j of rank r at j p + r): the same order, but for the V schedules, whose second chunks run back from
    rank p - 1 to rank 0 (path stage p + i is chunk 1 of rank p - 1 - i)."""
    return path_order(split, p, schedule in V_SCHEDULES)


def timeline_events(model: ModelSpec, cluster: ClusterSpec, scored) -> Timeline:
    """The schedule of a scored layout (planner.results.ScoredLayout, e.g. `plan estimate`'s)."""
    check_drawable(scored.layout)
    lay = layout_row(scored.layout)
    p, v, m = int(lay.pp[0]), int(lay.vpp[0]), int(lay.num_microbatches[0])
    schedule = schedule_of(scored.layout)
    # The space's own rules say which (pp, vpp, micro-batches) a schedule runs: a zb-v at vpp 1 or a
    # dualpipe at odd pp has no order to simulate (it indexed past its stages or deadlocked).
    unrunnable = [x.message for x in scored.violations if x.constraint in _SCHEDULE_RULES]
    problem = (order_problem(schedule, p, v, m) if p > 1 else None) or (unrunnable[0] if unrunnable else None)
    if problem:  # Megatron's interleaved 1F1B runs micro-batches in groups of pp; DualPipe needs 2 pp of them
        raise SpecError(f"no {schedule} schedule to draw: {problem}", path="--timeline",
                        expected="a layout the schedule runs (its --pp, --vpp and micro-batches per step), or another --schedule")
    split = tuple(int(x) for x in scored.layout.get("stage_layers") or layout_default_split(model, lay))
    count = scored.layout.get("offload_layers")
    if count:  # the layers offloaded as scored (fit under the headroom of its limits), not fit again here
        model = model.model_copy(update={"training": model.training.model_copy(update={"offload_layers": int(count)})})
    job = job_context(model, _run_cluster(cluster, scored), lay)
    t = stage_times(job, path_layers(schedule, split, p))
    events, makespan = simulate(t, p, v, m, schedule if p > 1 else "1f1b")
    tb = scored.time_breakdown_s
    tail = {"dp_comm": float(tb.dp_comm), "optimizer": float(tb.optimizer), "overhead": job.stack.step_overhead_s}
    rows = np.concatenate([events, bubbles(events, p, makespan), tail_events(tail, p, makespan)])
    rows = rows[np.lexsort((rows[:, 1], rows[:, 0]))]
    ints = rows[:, [0, 3, 4, 5]].astype(np.int64)
    return Timeline(p, v, m, split, t, ints[:, 0], rows[:, 1], rows[:, 2], ints[:, 1], ints[:, 2], ints[:, 3],
                    makespan, tail, float(scored.step_time_s), rank_memory(job, split),
                    float(cluster.gpu.memory_gib), schedule)
