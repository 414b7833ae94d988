"""`plan estimate --timeline FILE`: the pipeline schedule of a layout and its memory per rank.

Three panels of one figure (`SIZE_PX`): the whole step with every micro-batch of every rank
(planner/timeline.py; at a few pixels per unit the steady state reads as a texture and the bubble
as the light wedges at both ends), a zoom on the step's start where each unit is wide enough to
carry its micro-batch number, and the memory of each pipeline rank by component against the GPU's.
The drawing functions return what they drew, read back from the matplotlib artists, for the tests.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from planner.layout.axes import layout_summary
from planner.plots.canvas import DPI, figure_path, label_text, require_matplotlib, save_figure
from planner.costs.pipeline_ranks import warmup_units
from planner.timeline import KINDS, Timeline, layout_row, timeline_events

SIZE_PX = (1600, 1000)
FLAG = "--timeline"
COLORS = {"forward": "#4C72B0", "backward": "#DD8452", "wgrad": "#55A868", "recompute": "#F2C57C", "comm": "#C44E52",
          "pp_comm": "#8172B3", "overhead": "#8C8C8C", "bubble": "#E6E6E6", "dp_comm": "#64B5CD",
          "optimizer": "#2F2F2F"}
NAMES = {"forward": "forward", "backward": "backward", "wgrad": "weight gradient (W)", "recompute": "recompute",
         "comm": "exposed TP/CP/EP comm", "pp_comm": "PP send", "overhead": "stack overhead",
         "bubble": "bubble (idle)", "dp_comm": "exposed DP comm", "optimizer": "optimizer step"}
MEMORY = (("weights", "#4C72B0"), ("gradients", "#DD8452"), ("optimizer", "#55A868"),
          ("activations", "#C44E52"), ("other", "#8C8C8C"))
ZOOM_PAIRS = 4  # forward-backward pairs of the last rank shown in the zoom beyond p
MIN_LABEL_PX = 11
RASTER_EVENTS = 5000  # narrowest unit that carries its micro-batch number


@dataclass(frozen=True)
class DrawnTimeline:
    """What the figure shows, read back from its artists."""

    path: Path
    size_px: tuple[int, int]
    bars: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]  # kind -> (rank, start [s], width [s]), full step
    memory_gib: dict[str, np.ndarray]  # component -> bar height per rank
    gpu_line_gib: float
    zoom_end_s: float


def plot_timeline(model, cluster, scored, path: str | Path) -> DrawnTimeline:
    """The timeline of a scored layout (planner.results.ScoredLayout) in `path` (.png or .svg)."""
    path = figure_path(path, FLAG)
    gpus = int(layout_row(scored.layout).gpus[0])
    title = (f"{label_text(model.name)} on {gpus} x {label_text(cluster.gpu.name)} ({label_text(cluster.name)}): "
             f"{layout_summary(scored.layout)}")
    if scored.violations:
        title += " - infeasible: " + ", ".join(v.constraint for v in scored.violations)
    return draw_timeline(timeline_events(model, cluster, scored), path, title)


SCHEDULE_NAMES = {  # how the subtitle names each schedule; the backward of the zero-bubble ones is its input half
    "1f1b": "1F1B", "interleaved": "interleaved 1F1B, {v} chunks per rank",
    "zb-h1": "ZB-H1 (backward split: input gradient, deferred weight gradient W)",
    "interleaved-zb": "interleaved zero bubble, {v} chunks per rank (input gradient, deferred W)",
    "zb-v": "ZB-V, two chunks per rank in a V (input gradient, deferred W)",
    "dualpipe": "DualPipe, micro-batches from both ends (label: micro-batch; the second half from the last rank)",
    "dualpipev": "DualPipeV, two chunks per rank in a V",
}


def schedule_name(tl: Timeline) -> str:
    if tl.pp == 1:
        return "no pipeline (pp 1)"
    even = len(set(tl.stage_layers)) == 1
    kind = SCHEDULE_NAMES.get(tl.schedule, tl.schedule).format(v=tl.vpp)
    return kind + ("" if even else ", uneven stages " + _runs(tl.stage_layers))


def _runs(counts) -> str:
    """[7, 8, 8, 7] -> '7 8x2 7' (layers per virtual stage)."""
    out: list[list[int]] = []
    for c in counts:
        if out and out[-1][0] == c:
            out[-1][1] += 1
        else:
            out.append([c, 1])
    return " ".join(str(c) if n == 1 else f"{c}x{n}" for c, n in out)


def zoom_end_s(tl: Timeline) -> float:
    """End of the last rank's K-th unit: its warm-up forwards (at most 2 p) and p + 4 forward-backward
    pairs, so that the fill and the first steady pairs show with a few dozen units per row."""
    last = tl.pp - 1
    mine = (tl.rank == last) & np.isin(tl.kind, [KINDS.index("forward"), KINDS.index("backward")])
    ends = np.sort(tl.start_s[mine] + tl.duration_s[mine])
    k = min(warmup_units(tl.pp, tl.vpp, tl.num_microbatches, last), 2 * tl.pp) + 2 * (tl.pp + ZOOM_PAIRS)
    return float(ends[min(k, ends.size) - 1]) if ends.size else tl.step_time_s


def draw_timeline(tl: Timeline, path: str | Path, title: str) -> DrawnTimeline:
    """The figure of `tl` in `path` (.png or .svg): `title` on top, the schedule's own line below."""
    path = figure_path(path, FLAG)
    plt = require_matplotlib(FLAG)
    with plt.literal():  # names drawn as they are spelled, on matplotlib's defaults
        w, h = SIZE_PX
        fig = plt.figure(figsize=(w / DPI, h / DPI), dpi=DPI)
        grid = fig.add_gridspec(2, 3, left=0.055, right=0.985, top=0.82, bottom=0.06, hspace=0.32, wspace=0.28)
        full, zoom, mem = fig.add_subplot(grid[0, :]), fig.add_subplot(grid[1, :2]), fig.add_subplot(grid[1, 2])
        _schedule(full, tl, tl.step_time_s)
        full.axvline(tl.predicted_step_time_s, color="black", linestyle=":", linewidth=1.2)
        full.set_title("whole step, every micro-batch of every rank; dotted: the layout's step_time_s", fontsize=10)
        end = zoom_end_s(tl)
        _schedule(zoom, tl, end)
        _unit_labels(zoom, tl, end, w)
        zoom.set_title(f"zoom on the first {end:.3g} s (labels: micro-batch" + (", chunk as subscript)" if tl.vpp > 1 else ")"),
                       fontsize=10)
        _memory(mem, tl)
        handles = [plt.Rectangle((0, 0), 1, 1, color=COLORS[k]) for k in KINDS if (tl.kind == KINDS.index(k)).any()]
        names = [NAMES[k] for k in KINDS if (tl.kind == KINDS.index(k)).any()]
        fig.legend(handles, names, loc="upper center", bbox_to_anchor=(0.5, 0.895), ncol=len(names), fontsize=9,
                   frameon=False)
        fig.suptitle(title + "\n" + subtitle(tl), fontsize=11, y=0.985)
        drawn = DrawnTimeline(path, SIZE_PX, _read_bars(full), _read_memory(mem), tl.gpu_memory_gib, end)
        save_figure(plt, fig, path, FLAG)
        return drawn


def subtitle(tl: Timeline) -> str:
    tail = sum(tl.tail_s.values())
    diff = (tl.step_time_s / tl.predicted_step_time_s - 1) * 100
    return (f"{schedule_name(tl)}; {tl.num_microbatches} micro-batches per step, every one drawn\n"
            f"drawn step {tl.step_time_s:.3f} s = schedule {tl.makespan_s:.3f} s + tail {tail:.3f} s "
            f"(exposed DP comm, optimizer, step overhead); layout's step_time_s {tl.predicted_step_time_s:.3f} s "
            f"({diff:+.2f} %)")


def _schedule(ax, tl: Timeline, end: float) -> None:
    """One rectangle per event starting before `end`, one collection per kind (gid: the kind)."""
    from matplotlib.collections import PolyCollection

    zoomed = end < tl.step_time_s
    many = int((tl.start_s < end).sum()) > RASTER_EVENTS  # an SVG of many thousand bars: the bars as pixels
    for k, kind in enumerate(KINDS):
        sel = (tl.kind == k) & (tl.start_s < end)
        if not sel.any():
            continue
        x0, y = tl.start_s[sel], tl.rank[sel].astype(float)
        x1 = x0 + tl.duration_s[sel]
        corners = [(x0, y - 0.4), (x0, y + 0.4), (x1, y + 0.4), (x1, y - 0.4)]
        verts = np.stack([np.column_stack(c) for c in corners], axis=1)
        ax.add_collection(PolyCollection(verts, facecolors=COLORS[kind], edgecolors="white" if zoomed else "none",
                                         linewidths=0.3 if zoomed else 0.0, gid=kind, rasterized=many))
    ax.set_xlim(0, end)
    ax.set_ylim(tl.pp - 0.5, -0.5)
    step = max(1, int(np.ceil(tl.pp / 16)))
    ax.set_yticks(range(0, tl.pp, step))
    ax.set_xlabel("time [s]")
    ax.set_ylabel("pipeline rank")


def _unit_labels(ax, tl: Timeline, end: float, fig_width_px: int) -> None:
    """The micro-batch number on each forward, backward and weight gradient wide enough to hold it."""
    px_per_s = ax.get_position().width * fig_width_px / end
    wide = (tl.duration_s * px_per_s >= MIN_LABEL_PX) & (tl.start_s + tl.duration_s <= end)
    for kind in ("forward", "backward", "wgrad"):
        sel = np.flatnonzero(wide & (tl.kind == KINDS.index(kind)))
        for i in sel[:2000].tolist():
            text = str(tl.micro_batch[i]) if tl.vpp == 1 else f"${tl.micro_batch[i]}_{{{tl.chunk[i]}}}$"
            small = tl.duration_s[i] * px_per_s < 2 * MIN_LABEL_PX or tl.pp > 16
            ax.text(tl.start_s[i] + tl.duration_s[i] / 2, tl.rank[i], text, ha="center", va="center",
                    fontsize=6 if small else 8, color="white", parse_math=True)  # numbers only: the subscript


def _memory(ax, tl: Timeline) -> None:
    """Stacked bars of each rank's memory by component (gid: the component), the GPU's as a line."""
    x = np.arange(tl.pp)
    bottom = np.zeros(tl.pp)
    for name, color in MEMORY:
        height = getattr(tl.memory_gib, name)
        ax.bar(x, height, bottom=bottom, width=0.8, color=color, label=name, gid=name)
        bottom = bottom + height
    ax.axhline(tl.gpu_memory_gib, color="black", linestyle="--", linewidth=1.2,
               label=f"GPU memory ({tl.gpu_memory_gib:g} GiB)")
    ax.set_ylim(0, max(float(bottom.max()), tl.gpu_memory_gib) * 1.25)
    ax.set_xlim(-0.6, tl.pp - 0.4)
    step = max(1, int(np.ceil(tl.pp / 16)))
    ax.set_xticks(range(0, tl.pp, step))
    ax.set_xlabel("pipeline rank")
    ax.set_ylabel("memory per GPU [GiB]")
    ax.set_title(f"memory per rank (peak {bottom.max():.1f} GiB)", fontsize=10)
    ax.legend(loc="upper left", fontsize=7, ncol=3, frameon=False, columnspacing=1.0)


def _read_bars(ax) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """kind -> (rank, start, width) of the rectangles of the panel's collections."""
    out = {}
    for coll in ax.collections:
        verts = np.array([p.vertices[:4] for p in coll.get_paths()])
        x0, x1 = verts[:, :, 0].min(axis=1), verts[:, :, 0].max(axis=1)
        rank = np.rint(verts[:, :, 1].mean(axis=1)).astype(np.int64)
        out[coll.get_gid()] = (rank, x0, x1 - x0)
    return out


def _read_memory(ax) -> dict[str, np.ndarray]:
    """component -> bar heights by rank, from the panel's rectangles."""
    out: dict[str, list[tuple[float, float]]] = {}
    for patch in ax.patches:
        if patch.get_gid() is not None:
            out.setdefault(patch.get_gid(), []).append((patch.get_x() + patch.get_width() / 2, patch.get_height()))
    return {k: np.array([h for _, h in sorted(v)]) for k, v in out.items()}
