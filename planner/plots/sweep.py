"""PNG figures of a sweep's rows (planner.sweep.COLUMNS), drawn on matplotlib's Agg canvas.

matplotlib is an optional extra (`[plot]`) imported only when a plot is asked for
(planner/plots/canvas.py: no pyplot, names drawn literally). Figures have a fixed size in pixels
(`SIZES_PX`): no tight bounding box, so tests can check it.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

from planner.layout.axes import AXES, filling
from planner.errors import SpecError
from planner.plots.canvas import DPI, FORMATS, figure_path, label_text, log_ticks, require_matplotlib, save_figure  # noqa: F401 - re-exported
from planner.sweep import params_label

# The parallel degrees, one heat map each: the given ones in registry order, then the filling one (dp).
LAYOUT_DEGREES = tuple(a.name for a in AXES if a.role == "degree" and not a.fills) + (filling().name,)
RECOMPUTE_SHORT = {"none": "-", "selective": "sel", "full": "full"}  # one cell is ~6 characters wide at 16 GPU counts
SIZES_PX = {
    "mfu_vs_gpus.png": (1000, 600),
    "tokens_per_s_vs_gpus.png": (1000, 600),
    "step_time_vs_params.png": (1000, 600),
    "energy_per_token_vs_params.png": (1000, 600),
    "layout_vs_gpus.png": (1500, 600),
}


def _label(row: dict) -> str:
    return params_label(row["params"]) if "-scaled-" in row["model"] else label_text(row["model"])


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
        label += f" ({_batch(first)})" if per != ("gpus",) and _many_batches(rows) else ""
        label += f" {label_text(first['cluster'])}" if many_clusters else ""
        label += f" ({first['objective']})" if many_objectives else ""
        ax.plot([r[x] for r in members], [r[y] * scale_y for r in members], marker="o", markersize=3,
                color=cmap(n / max(1, len(groups) - 1)), label=label)
    ax.set_xscale("log", base=base_x)
    if base_x == 2:
        counts = sorted({r[x] for r in rows if r["status"] == "ok"})
        ax.set_xticks(counts, [str(c) for c in counts])
        ax.minorticks_off()
    else:
        log_ticks(ax.xaxis)
    if log_y:
        ax.set_yscale("log")
        log_ticks(ax.yaxis)
    fig.suptitle(f"{title}\n{setting(rows)}", fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.3)
    fig.subplots_adjust(left=0.1, right=0.78 if groups else 0.95, bottom=0.1, top=0.86)
    if groups:
        ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=7, ncol=2 if len(groups) > 14 else 1)
    else:
        ax.text(0.5, 0.5, "no feasible point", ha="center", va="center", transform=ax.transAxes)
    return fig


def _short(n: int) -> str:
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def _batch(row: dict) -> str:
    return f"{row['global_batch']} x {row['seq_len']}"


def setting(rows: list[dict], width: int = 115) -> str:
    """What the sweep's points ran with: GPU type(s), global batch [sequences] x sequence length
    [tokens]; wrapped at `width` characters."""
    gpus = sorted({label_text(r["gpu"]) for r in rows})
    batches: dict[str, list[str]] = {}
    for r in sorted(rows, key=lambda r: r["params"]):
        models = batches.setdefault(_batch(r), [])
        if _label(r) not in models:
            models.append(_label(r))
    text = ("GPU " + " / ".join(gpus)) if gpus else "no points"
    if len(batches) == 1:
        return text + f"; global batch {next(iter(batches))} tokens (sequences x sequence length)"
    nbsp = "\u00a0"  # keeps `512 x 2048` on one line when wrapped
    per = "; ".join(f"{b.replace(' ', nbsp)} ({', '.join(m)})" for b, m in batches.items())
    if len(per) > 200:
        per = f"{len(batches)} settings, per model in the legend"
    return textwrap.fill(text + f"; global batch x sequence length: {per}", width)


def _many_batches(rows: list[dict]) -> bool:
    return len({_batch(r) for r in rows}) > 1


def _model_rows(rows: list[dict], with_batch: bool) -> tuple[list[tuple], list[str]]:
    """(params, model) of every model of the sweep, smallest first, and their axis labels."""
    models = sorted({(r["params"], r["model"]) for r in rows})
    batch = {(r["params"], r["model"]): _batch(r) for r in rows}
    labels = [_label({"params": p, "model": m}) + (f"\n{batch[p, m]}" if with_batch else "") for p, m in models]
    return models, labels


def _degree_grids(where: dict, models: list[tuple], counts: list[int], column: str):
    """(model, GPU count) grid of a column of the best rows (NaN where infeasible)."""
    import numpy as np

    grid = np.full((len(models), len(counts)), np.nan)
    for i, (p, m) in enumerate(models):
        for j, g in enumerate(counts):
            r = where.get((p, m, g))
            if r is not None:
                grid[i, j] = r[column]
    return grid


def _heat_maps(fig, axes, cax, where, models, counts, labels, small: bool) -> None:
    """tp, pp, cp, dp: one heat map each over (GPUs, model), log2 colour, the degree in each cell."""
    import numpy as np

    grids = {dim: np.log2(_degree_grids(where, models, counts, dim)) for dim in LAYOUT_DEGREES}
    top = max([1.0] + [float(np.nanmax(g)) for g in grids.values() if not np.isnan(g).all()])
    for ax, (dim, grid) in zip(axes, grids.items()):
        image = ax.imshow(grid, origin="lower", aspect="auto", cmap="viridis", vmin=0, vmax=top)
        for i, j in zip(*np.nonzero(~np.isnan(grid))) if small else ():
            ax.text(j, i, _short(int(round(2 ** grid[i, j]))), ha="center", va="center", fontsize=7,
                    color="white" if grid[i, j] < 0.6 * top else "black")
        _cells(ax, counts, labels if ax is axes[0] else [""] * len(labels))
        ax.set_title(f"{dim} degree", fontsize=10)
    ticks = list(range(int(top) + 1))
    bar = fig.colorbar(image, cax=cax, ticks=ticks)
    bar.ax.set_yticklabels([_short(2 ** k) for k in ticks], fontsize=7)
    bar.set_label("parallel degree [count, log scale]")


def _cells(ax, counts: list[int], labels: list[str]) -> None:
    """GPU counts along x, models along y (`labels`; blank strings on all panels but the first)."""
    ax.set_xticks(range(len(counts)), [_short(c) for c in counts], fontsize=7, rotation=90)
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.set_ylim(-0.5, len(labels) - 0.5)
    ax.set_xlabel("GPUs [count]")


def _options_map(ax, where, models, counts, small: bool) -> None:
    """ZeRO stage (colour and text) and recompute (text) of the best layout in each cell."""
    import numpy as np
    from matplotlib.colors import ListedColormap

    zero = _degree_grids(where, models, counts, "zero")
    colours = ListedColormap(["#F0F0F0", "#B9D7EA", "#F5C99B", "#E89C9C"])
    ax.imshow(zero, origin="lower", aspect="auto", cmap=colours, vmin=-0.5, vmax=3.5)
    for i, j in zip(*np.nonzero(~np.isnan(zero))) if small else ():
        r = where[(models[i][0], models[i][1], counts[j])]
        ax.text(j, i, f"z{r['zero']}\n{RECOMPUTE_SHORT.get(r['recompute'], r['recompute'])}", ha="center",
                va="center", fontsize=7 if len(counts) <= 8 else 6)
    _cells(ax, counts, [""] * len(models))
    ax.set_title("ZeRO stage (colour) / recompute (- none)", fontsize=10)


def _layout_chart(plt, rows):
    """tp, pp, cp and dp of the best layout (heat maps over GPUs x model), then its ZeRO stage and recompute."""
    name = "layout_vs_gpus.png"
    fig = _figure(plt, name)
    ok = [r for r in rows if r["status"] == "ok"]
    first = (ok[0]["cluster"], ok[0]["objective"]) if ok else None
    ok = [r for r in ok if (r["cluster"], r["objective"]) == first]
    counts = sorted({r["gpus"] for r in rows})
    models, labels = _model_rows(rows, _many_batches(rows))
    where = {(r["params"], r["model"], r["gpus"]): r for r in ok}
    n = len(LAYOUT_DEGREES)
    grid = fig.add_gridspec(1, n + 3, width_ratios=(1,) * n + (0.07, 0.12, 1.1), left=0.09, right=0.985,
                            bottom=0.12, top=0.83, wspace=0.1)
    axes = [fig.add_subplot(grid[0, k]) for k in range(n)]
    small = len(models) * len(counts) <= 600
    _heat_maps(fig, axes, fig.add_subplot(grid[0, n]), where, models, counts, labels, small)
    _options_map(fig.add_subplot(grid[0, n + 2]), where, models, counts, small)
    axes[0].set_ylabel("model [parameters]" + (", global batch x seq len" if _many_batches(rows) else ""))
    note = f" on {label_text(first[0])}, objective {first[1]} (blank: infeasible)" if first else ": no feasible point"
    fig.suptitle(f"best layout per model and GPU count{note}\n{setting(rows, 170)}", fontsize=11)
    return fig


def sweep_figures(plt, rows: list[dict]) -> dict:
    """The five figures of `SIZES_PX` (name -> matplotlib Figure, not yet saved) from sweep rows."""
    with plt.literal():
        return _sweep_figures(plt, rows)


def _sweep_figures(plt, rows: list[dict]) -> dict:
    return {
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


def write_plots(rows: list[dict], folder: str | Path) -> list[Path]:
    """The five figures of `SIZES_PX` in `folder` (created), from sweep rows; returns their paths."""
    plt = require_matplotlib()
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecError(f"cannot create the folder: {exc.strerror or exc}", file=str(folder), path="--plot") from None
    return [save_figure(plt, fig, folder / name, "--plot") for name, fig in sweep_figures(plt, rows).items()]
