"""PNG figures of a sweep's rows (planner.sweep.COLUMNS), drawn with matplotlib's Agg backend.

matplotlib is an optional extra (`pip install planner[plot]`) imported only when a plot is asked
for. Figures have a fixed size in pixels (`SIZES_PX`): no tight bounding box, so tests can check it.
"""
from __future__ import annotations

import math
from pathlib import Path

from .axes import AXES, filling
from .errors import SpecError
from .sweep import params_label

DPI = 100
# The parallel degrees, one heat map each: the given ones in registry order, then the filling one (dp).
LAYOUT_DEGREES = tuple(a.name for a in AXES if a.role == "degree" and not a.fills) + (filling().name,)
SIZES_PX = {
    "mfu_vs_gpus.png": (1000, 600),
    "tokens_per_s_vs_gpus.png": (1000, 600),
    "step_time_vs_params.png": (1000, 600),
    "energy_per_token_vs_params.png": (1000, 600),
    "layout_vs_gpus.png": (1500, 600),
}


def require_matplotlib():
    """pyplot on the Agg backend, or a SpecError saying how to install it."""
    try:
        import matplotlib
    except ImportError:
        raise SpecError("plots need matplotlib, which is not installed", path="--plot",
                        expected="`pip install planner[plot]` (or `pip install matplotlib`)") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _label(row: dict) -> str:
    return params_label(row["params"]) if "-scaled-" in row["model"] else row["model"]


def _groups(rows: list[dict], by: tuple[str, ...], order: str) -> list[tuple[tuple, list[dict]]]:
    """Feasible rows grouped by the columns `by`, groups sorted by the `order` column."""
    out: dict[tuple, list[dict]] = {}
    for r in rows:
        if r["status"] == "ok":
            out.setdefault(tuple(r[k] for k in by), []).append(r)
    return sorted(out.items(), key=lambda kv: (kv[1][0][order], kv[0]))


def _suffix(rows: list[dict]) -> tuple[bool, bool]:
    return len({r["cluster"] for r in rows}) > 1, len({r["objective"] for r in rows}) > 1


def _figure(plt, name: str):
    w, h = SIZES_PX[name]
    return plt.figure(figsize=(w / DPI, h / DPI), dpi=DPI)


def _lines(plt, rows, name, *, x, y, per, title, xlabel, ylabel, scale_y=1.0, log_y=False, base_x=10):
    """One line per group of `per` columns: y against x."""
    fig = _figure(plt, name)
    ax = fig.add_subplot(1, 1, 1)
    many_clusters, many_objectives = _suffix(rows)
    groups = _groups(rows, per + ("cluster", "objective"), per[0])
    cmap = plt.get_cmap("viridis")
    for n, (key, members) in enumerate(groups):
        members = sorted(members, key=lambda r: r[x])
        first = members[0]
        label = f"{first['gpus']} GPUs" if per == ("gpus",) else _label(first)
        label += f" {first['cluster']}" if many_clusters else ""
        label += f" ({first['objective']})" if many_objectives else ""
        ax.plot([r[x] for r in members], [r[y] * scale_y for r in members], marker="o", markersize=3,
                color=cmap(n / max(1, len(groups) - 1)), label=label)
    ax.set_xscale("log", base=base_x)
    if base_x == 2:
        counts = sorted({r[x] for r in rows if r["status"] == "ok"})
        ax.set_xticks(counts, [str(c) for c in counts])
        ax.minorticks_off()
    if log_y:
        ax.set_yscale("log")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.3)
    if groups:
        fig.subplots_adjust(left=0.09, right=0.78, bottom=0.1, top=0.92)
        ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=7, ncol=2 if len(groups) > 14 else 1)
    else:
        ax.text(0.5, 0.5, "no feasible point", ha="center", va="center", transform=ax.transAxes)
    return fig


def _short(n: int) -> str:
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def _layout_chart(plt, rows):
    """tp, pp and dp of the best layout: three heat maps over (GPUs, model), the degree in each cell."""
    import numpy as np

    name = "layout_vs_gpus.png"
    fig = _figure(plt, name)
    ok = [r for r in rows if r["status"] == "ok"]
    first = (ok[0]["cluster"], ok[0]["objective"]) if ok else None
    ok = [r for r in ok if (r["cluster"], r["objective"]) == first]
    counts = sorted({r["gpus"] for r in rows})
    models = sorted({(r["params"], r["model"]) for r in rows})
    labels = [_label({"params": p, "model": m}) for p, m in models]
    where = {(r["params"], r["model"], r["gpus"]): r for r in ok}
    axes = fig.subplots(1, len(LAYOUT_DEGREES), sharey=True)
    fig.subplots_adjust(left=0.08, right=0.9, bottom=0.12, top=0.86, wspace=0.08)
    grids = {}
    for dim in LAYOUT_DEGREES:
        grid = np.full((len(models), len(counts)), np.nan)
        for i, (p, m) in enumerate(models):
            for j, g in enumerate(counts):
                r = where.get((p, m, g))
                if r is not None:
                    grid[i, j] = math.log2(r[dim])
        grids[dim] = grid
    top = max([1.0] + [float(np.nanmax(g)) for g in grids.values() if not np.isnan(g).all()])
    small = len(models) * len(counts) <= 600
    for ax, (dim, grid) in zip(axes, grids.items()):
        image = ax.imshow(grid, origin="lower", aspect="auto", cmap="viridis", vmin=0, vmax=top)
        for i, j in zip(*np.nonzero(~np.isnan(grid))) if small else ():
            ax.text(j, i, _short(int(round(2 ** grid[i, j]))), ha="center", va="center", fontsize=7,
                    color="white" if grid[i, j] < 0.6 * top else "black")
        ax.set_xticks(range(len(counts)), [_short(c) for c in counts], fontsize=7, rotation=90)
        ax.set_yticks(range(len(models)), labels, fontsize=7)
        ax.set_title(f"{dim} degree (blank: infeasible)", fontsize=10)
        ax.set_xlabel("GPUs [count]")
    ticks = list(range(int(top) + 1))
    bar = fig.colorbar(image, ax=list(axes), fraction=0.03, pad=0.02, ticks=ticks)
    bar.ax.set_yticklabels([_short(2 ** k) for k in ticks], fontsize=7)
    bar.set_label("parallel degree [count, log scale]")
    axes[0].set_ylabel("model [parameters]")
    note = f" on {first[0]}, objective {first[1]}" if first else ": no feasible point"
    fig.suptitle(f"best layout per model and GPU count{note}")
    return fig


def write_plots(rows: list[dict], folder: str | Path) -> list[Path]:
    """The five figures of `SIZES_PX` in `folder` (created), from sweep rows; returns their paths."""
    plt = require_matplotlib()
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecError(f"cannot create the folder: {exc.strerror or exc}", file=str(folder), path="--plot") from None
    figures = {
        "mfu_vs_gpus.png": _lines(plt, rows, "mfu_vs_gpus.png", x="gpus", y="mfu", per=("params", "model"), scale_y=100,
                                  base_x=2, title="MFU of the best layout vs cluster size", xlabel="GPUs [count, log scale]",
                                  ylabel="MFU [% of peak]"),
        "tokens_per_s_vs_gpus.png": _lines(plt, rows, "tokens_per_s_vs_gpus.png", x="gpus", y="tokens_per_s",
                                           per=("params", "model"), base_x=2, log_y=True,
                                           title="throughput of the best layout vs cluster size",
                                           xlabel="GPUs [count, log scale]", ylabel="throughput [tokens/s]"),
        "step_time_vs_params.png": _lines(plt, rows, "step_time_vs_params.png", x="params", y="step_time_s",
                                          per=("gpus",), log_y=True, title="step time of the best layout vs model size",
                                          xlabel="model size [parameters, log scale]", ylabel="step time [s]"),
        "energy_per_token_vs_params.png": _lines(plt, rows, "energy_per_token_vs_params.png", x="params",
                                                 y="energy_j_per_token", per=("gpus",), log_y=True,
                                                 title="energy per token of the best layout vs model size",
                                                 xlabel="model size [parameters, log scale]",
                                                 ylabel="energy per token [J/token]"),
        "layout_vs_gpus.png": _layout_chart(plt, rows),
    }
    paths = []
    for name, fig in figures.items():
        path = folder / name
        fig.savefig(path, dpi=DPI)
        plt.close(fig)
        paths.append(path)
    return paths
