"""`plan search --frontier --plot FILE`: the step time vs energy per token Pareto frontier.

Left, every feasible candidate of the search (faint) on log axes with the frontier (planner/frontier.py)
as a line; middle, the frontier's neighbourhood with its points numbered; right, the numbered
layouts (their layout cell, power cap and figures). The drawing returns what it drew, read back
from the matplotlib artists, for the tests.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from planner.layout.axes import layout_cell
from planner.frontier import pareto_front
from planner.plots.canvas import DPI, figure_path, label_text, log_ticks, require_matplotlib, save_figure
from planner.layout.space import tiebreak_rank

SIZE_PX = (1500, 650)
FLAG = "--plot"
LABEL_OFFSETS = ((5, 3), (5, -11), (-12, 3), (-12, -11))  # [points]: neighbours' numbers apart
MAX_LISTED = 30  # frontier points numbered and listed; the line shows them all
NEAR_PCT = 5.0  # the middle panel reaches at least this far [%] beyond the frontier's fastest and most frugal


@dataclass(frozen=True)
class DrawnFrontier:
    path: Path
    size_px: tuple[int, int]
    candidates: np.ndarray  # (n, 2): step time [s], energy [J/token] of the faint points
    frontier: np.ndarray  # (k, 2): the frontier's points, fastest first
    labels: tuple[tuple[str, ...], ...]  # the listed layouts (point_label), fastest first
    near_box: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)  # the middle panel's (x0, x1, y0, y1)


def frontier_rows(result) -> np.ndarray:
    """The search's frontier rows (computed from its feasible rows when it was not asked for)."""
    if result.frontier is not None:
        return np.asarray(result.frontier, dtype=np.int64)
    s = result.scores
    return pareto_front(s.step_time_s, s.energy_j_per_token, np.flatnonzero(result.feasible), tiebreak_rank(s.layouts))


def point_label(result, i: int) -> tuple[str, ...]:
    """(layout cell, recompute, ZeRO stage, power cap [W] or "-", step time [s], energy [J/token])
    of row i, as listed."""
    s = result.scored(int(i))
    cap = f"{s.power_cap.power_cap_w:g}" if s.power_cap is not None else "-"
    return (layout_cell(s.layout), str(s.layout["recompute"]), str(s.layout["zero"]), cap, f"{s.step_time_s:#.4g}",
            f"{s.energy_j_per_token:#.4g}")


def plot_frontier(result, path: str | Path) -> DrawnFrontier:
    """The frontier of a search (planner.search.SearchResult) in `path` (.png or .svg)."""
    path = figure_path(path, FLAG)
    plt = require_matplotlib(FLAG)
    with plt.literal():  # names drawn as they are spelled, on matplotlib's defaults
        s = result.scores
        feasible = np.flatnonzero(result.feasible)
        front = frontier_rows(result)
        t, e = s.step_time_s, s.energy_j_per_token
        w, h = SIZE_PX
        fig = plt.figure(figsize=(w / DPI, h / DPI), dpi=DPI)
        grid = fig.add_gridspec(1, 3, width_ratios=(0.8, 0.95, 1.25), left=0.05, right=0.995, top=0.86, bottom=0.1, wspace=0.22)
        overview, near, listing = (fig.add_subplot(grid[0, k]) for k in range(3))
        overview.scatter(t[feasible], e[feasible], s=3, color="#9E9E9E", alpha=0.25, linewidths=0, rasterized=True,
                         gid="candidates")
        overview.plot(t[front], e[front], color="#C44E52", marker="o", markersize=4, linewidth=1.2, gid="frontier")
        overview.set_xscale("log")
        overview.set_yscale("log")
        overview.set_title(f"all {feasible.size:,} feasible candidates (log axes)", fontsize=10)
        labels = _near_panel(near, result, front, feasible)
        _listing(listing, labels, front.size)
        _log_ticks(overview)
        for ax in (overview, near):
            ax.set_xlabel("step time [s]")
            ax.set_ylabel("energy per token [J/token]")
            ax.grid(True, which="both", alpha=0.25)
        m = result.model
        fig.suptitle(f"{label_text(m.name)} on {result.gpus} x {label_text(result.cluster.gpu.name)} "
                     f"({label_text(result.cluster.name)}), global batch "
                     f"{m.training.global_batch} x {m.seq_len} tokens: step time vs energy per token\n"
                     f"{front.size} layout{'s' if front.size != 1 else ''} on the Pareto frontier (red) of "
                     f"{feasible.size:,} feasible", fontsize=11)
        cand = np.column_stack([t[feasible], e[feasible]])
        drawn = DrawnFrontier(path, SIZE_PX, _offsets(overview, "candidates", cand), _line(overview, "frontier"),
                              tuple(labels), (*near.get_xlim(), *near.get_ylim()))
        save_figure(plt, fig, path, FLAG)
        return drawn


def _near_panel(ax, result, front: np.ndarray, feasible: np.ndarray) -> list[tuple[str, ...]]:
    """The frontier's neighbourhood: candidates within it faint, frontier points numbered."""
    s = result.scores
    t, e = s.step_time_s, s.energy_j_per_token
    if not front.size:
        ax.text(0.5, 0.5, "no feasible layout", ha="center", va="center", transform=ax.transAxes)
        return []
    lo_t, hi_t, lo_e, hi_e = t[front].min(), t[front].max(), e[front].min(), e[front].max()
    # At least NEAR_PCT of the values each way: a frontier of one point (or a short one) is drawn among the
    # layouts nearly as good, not alone in a window of a few thousandths of a second
    pad_t = max(0.15 * (hi_t - lo_t), NEAR_PCT / 100 * hi_t)
    pad_e = max(0.15 * (hi_e - lo_e), NEAR_PCT / 100 * hi_e)
    box = (lo_t - pad_t, hi_t + pad_t, lo_e - pad_e, hi_e + pad_e)
    inside = feasible[(t[feasible] <= box[1]) & (e[feasible] <= box[3])]
    ax.scatter(t[inside], e[inside], s=8, color="#9E9E9E", alpha=0.4, linewidths=0, rasterized=True)
    ax.plot(t[front], e[front], color="#C44E52", marker="o", markersize=5, linewidth=1.2, drawstyle="steps-post")
    listed = front[:MAX_LISTED]
    for n, i in enumerate(listed.tolist(), start=1):
        ax.annotate(str(n), (t[i], e[i]), xytext=LABEL_OFFSETS[(n - 1) % len(LABEL_OFFSETS)],
                    textcoords="offset points", fontsize=8, color="#7A1F22")
    ax.set_xlim(box[0], box[1])
    ax.set_ylim(box[2], box[3])
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(nbins=5))  # six-digit ticks side by side collide at more
    ax.set_title("near the frontier (numbered, fastest first)", fontsize=10)
    return [point_label(result, i) for i in listed.tolist()]


def _listing(ax, labels: list[tuple[str, ...]], total: int) -> None:
    """The numbered frontier layouts as a monospace table."""
    ax.axis("off")
    width = max([len("layout")] + [len(cell) for cell, *_ in labels])
    lines = [f" # {'layout':<{width}} recompute zero cap W  step s J/token"]
    lines += [f"{n:>2} {cell:<{width}} {rec:<9} {zero:>4} {cap:>5} {step:>7} {energy:>7}"
              for n, (cell, rec, zero, cap, step, energy) in enumerate(labels, start=1)]
    if total > len(labels):
        lines.append(f"    ... and {total - len(labels)} more on the line")
    size = 8 if len(lines) <= 22 else 6.5
    ax.text(0.0, 1.0, "\n".join(lines) if labels else "no frontier", ha="left", va="top", fontsize=size, family="monospace",
            transform=ax.transAxes)
    ax.set_title("frontier layouts", fontsize=10, loc="left")


def _offsets(ax, gid: str, fallback: np.ndarray) -> np.ndarray:
    """The (x, y) of the scatter `gid` as drawn."""
    coll = next((c for c in ax.collections if c.get_gid() == gid), None)
    return fallback[:0] if coll is None else np.asarray(coll.get_offsets(), dtype=float)


def _line(ax, gid: str) -> np.ndarray:
    line = next(x for x in ax.lines if x.get_gid() == gid)
    return np.column_stack([line.get_xdata(), line.get_ydata()]).astype(float)


def _log_ticks(ax) -> None:
    """Plain numbers on the major ticks of log axes, no labels on the minor ones (they collide)."""
    for axis in (ax.xaxis, ax.yaxis):
        log_ticks(axis, subs=(1.0, 3.0))
