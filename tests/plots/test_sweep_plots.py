"""`plan sweep --plot`: the five PNG figures exist, are not empty and have their documented size."""
from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner import sweep as sw
from planner.cli.main import app
from planner.errors import SpecError

# README, "Plots": figure -> (width, height) in pixels.
EXPECTED_PX = {
    "mfu_vs_gpus.png": (1000, 600),
    "tokens_per_s_vs_gpus.png": (1000, 600),
    "step_time_vs_params.png": (1000, 600),
    "energy_per_token_vs_params.png": (1000, 600),
    "layout_vs_gpus.png": (1500, 600),
}


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from the IHDR chunk (PNG spec, Sec. 11.2.2): bytes 16-24 of the file."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])


@pytest.fixture(scope="module")
def rows():
    # Two generated sizes x three GPU counts, and a 175B model that does not fit on 8 GPUs.
    spec = sw.SweepSpec.model_validate({"scale_model": {"base": "gpt3-1.3b", "params": [1e9, 1e10]},
                                        "models": ["gpt3-175b"], "gpus": [8, 64, 512]})
    return sw.run_sweep(sw.expand(spec)).rows


def test_plots_are_written_with_their_size(rows, tmp_path):
    pytest.importorskip("matplotlib")
    from planner.plots.sweep import write_plots

    assert any(r["status"] == "infeasible" for r in rows)
    paths = write_plots(rows, tmp_path / "plots")
    assert sorted(p.name for p in paths) == sorted(EXPECTED_PX)
    for p in paths:
        assert p.stat().st_size > 10_000, p  # a drawn figure, not an empty canvas
        assert png_size(p) == EXPECTED_PX[p.name], p.name


def test_plots_of_a_sweep_without_feasible_points_still_exist(rows, tmp_path):
    pytest.importorskip("matplotlib")
    from planner.plots.sweep import write_plots

    bad = [r for r in rows if r["status"] != "ok"]
    for p in write_plots(bad, tmp_path):
        assert p.stat().st_size > 0 and png_size(p) == EXPECTED_PX[p.name]


def test_the_cli_writes_plots(tmp_path):
    pytest.importorskip("matplotlib")
    res = CliRunner().invoke(app, ["sweep", "--models", "gpt3-1.3b", "--gpus", "8,16", "--plot", str(tmp_path / "p"),
                                   "--workers", "1"])
    assert res.exit_code == 0, res.output
    assert "5 plots in" in res.output
    assert all((tmp_path / "p" / name).stat().st_size > 0 for name in EXPECTED_PX)


def test_without_matplotlib_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    from planner.plots.sweep import require_matplotlib

    with pytest.raises(SpecError, match=r"pip install matplotlib"):
        require_matplotlib()
    res = CliRunner().invoke(app, ["sweep", "--models", "gpt3-1.3b", "--gpus", "8", "--plot", "unused"])
    assert res.exit_code == 2 and "pip install matplotlib" in res.output


# --- what the sweep figures draw --------------------------------------------------------------------


def test_sweep_figures_name_the_gpu_batch_and_sequence_and_show_zero_and_recompute(rows):
    pytest.importorskip("matplotlib")
    from planner.plots.sweep import require_matplotlib, sweep_figures

    plt = require_matplotlib()
    figures = sweep_figures(plt, rows)
    ok = [r for r in rows if r["status"] == "ok"]
    # the fixture: generated GPT-3 sizes keep gpt3-1.3b's batch, 512 sequences of 2048 tokens; gpt3-175b
    # trains on 1536 x 2048 (Brown et al. 2020 Table 2.1: 3.2M tokens = 1536 x 2048)
    for name, fig in figures.items():
        title = fig._suptitle.get_text()
        assert "a100-sxm-80gb" in title, name
        assert "512 x 2048" in title.replace("\u00a0", " ") and "1536 x 2048" in title.replace("\u00a0", " "), name
    # MFU lines: each model's points are its rows' MFU in percent, in GPU order
    ax = figures["mfu_vs_gpus.png"].axes[0]
    for line in ax.get_lines():
        model = "gpt3-175b" if line.get_label().startswith("gpt3-175b") else None
        if model:
            mine = sorted((r for r in ok if r["model"] == model), key=lambda r: r["gpus"])
            assert list(line.get_xdata()) == [r["gpus"] for r in mine]
            assert list(line.get_ydata()) == pytest.approx([100 * r["mfu"] for r in mine])
            assert "(1536 x 2048)" in line.get_label()
    # the last panel of the layout chart: one cell text per feasible row, `z<ZeRO stage>` over the recompute mode
    panel = figures["layout_vs_gpus.png"].axes[-1]
    assert "ZeRO" in panel.get_title()
    texts = sorted(t.get_text() for t in panel.texts)
    short = {"none": "-", "selective": "sel", "full": "full"}
    assert texts == sorted(f"z{r['zero']}\n{short[r['recompute']]}" for r in ok)
    for fig in figures.values():
        plt.close(fig)


def test_names_with_control_characters_are_drawn_escaped_without_font_warnings(rows, tmp_path):
    # A model named with ESC (an ANSI colour) and a newline. Before: drawn raw, matplotlib printed
    # "UserWarning: Glyph 27 missing from font(s)" on stderr at every save, and the newline split the label.
    pytest.importorskip("matplotlib")
    import warnings

    from planner.plots.sweep import require_matplotlib, sweep_figures, write_plots

    evil = [{**r, "model": "\x1b[31mevil\nname"} if r["model"] == "gpt3-175b" else r for r in rows]
    labels = [line.get_label() for line in sweep_figures(require_matplotlib(), evil)["mfu_vs_gpus.png"].axes[0].get_lines()]
    assert "\\x1b[31mevil\\nname (1536 x 2048)" in labels  # as `printable` shows it in the terminal
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        write_plots(evil, tmp_path)
    assert [str(w.message) for w in caught] == []


LINE_FIGURES = ("mfu_vs_gpus.png", "tokens_per_s_vs_gpus.png", "step_time_vs_params.png", "energy_per_token_vs_params.png")


def _drawn(plt, fig):
    """The figure drawn as when saved (tick labels are made at draw time), and its renderer."""
    with plt.literal():
        fig.canvas.draw()
    return fig.canvas.get_renderer()


def test_log_axes_label_their_ticks_in_plain_text(rows):
    # Before: matplotlib's LogFormatter wrote `$\mathdefault{10^{9}}$`, drawn raw (every text is literal, canvas.py)
    pytest.importorskip("matplotlib")
    from planner.plots.sweep import require_matplotlib, sweep_figures

    plt = require_matplotlib()
    figures = sweep_figures(plt, rows)
    for name in LINE_FIGURES:
        ax = figures[name].axes[0]
        _drawn(plt, figures[name])
        texts = [t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels() if t.get_text()]
        assert texts and not any("$" in t or "mathdefault" in t for t in texts), (name, texts)
    # the parameter axis spans 1e9 .. 1.75e11 (the fixture's 1B, 10B and gpt3-175b): ticks at 1, 2 and 5 of each
    # decade, named with the suffix of params_label: 1e9 = 1B, 1e10 = 10B, 1e11 = 100B
    ax = figures["step_time_vs_params.png"].axes[0]
    shown = {t.get_text() for t in ax.get_xticklabels() if t.get_text()}
    assert {"1B", "2B", "5B", "10B", "20B", "50B", "100B"} <= shown, shown


@pytest.mark.parametrize("value,text", [(1e9, "1B"), (1e10, "10B"), (2e11, "200B"), (1e12, "1T"), (5e6, "5M"),
                                        (2e5, "200k"), (1e3, "1k"), (20, "20"), (0.05, "0.05"), (1, "1")])
def test_a_tick_reads_as_a_plain_number(value, text):
    from planner.plots.canvas import tick_text

    assert tick_text(value) == text


def _shown_ticks(axis) -> list:
    """The tick labels matplotlib draws: those of ticks within the view (it makes some beyond it, undrawn)."""
    low, high = sorted(axis.get_view_interval())
    return [label for loc, label in zip(axis.get_majorticklocs(), axis.get_ticklabels()) if low <= loc <= high]


def test_axis_titles_and_tick_labels_are_inside_the_figure(rows):
    # Before: the y axis title of the log figures was drawn left of x = 0 (cut off), tick labels clipped at the edge
    pytest.importorskip("matplotlib")
    from planner.plots.sweep import require_matplotlib, sweep_figures

    plt = require_matplotlib()
    figures = sweep_figures(plt, rows)
    for name in LINE_FIGURES:
        fig = figures[name]
        ax = fig.axes[0]
        renderer = _drawn(plt, fig)
        w, h = EXPECTED_PX[name]
        for text in [ax.xaxis.label, ax.yaxis.label] + _shown_ticks(ax.xaxis) + _shown_ticks(ax.yaxis):
            if not text.get_text():
                continue
            box = text.get_window_extent(renderer)
            assert 0 <= box.x0 and box.x1 <= w and 0 <= box.y0 and box.y1 <= h, (name, text.get_text(), box)


# --- the Pareto frontier of a search -----------------------------------------------------------------


@pytest.fixture(scope="module")
def frontier_search():
    from planner.specs.loading import load_cluster, load_model
    from planner.search import search

    return search(load_model("gpt3-1.3b"), load_cluster("dgx-a100-1024"), gpus=64, frontier=True)


def test_the_frontier_plot_draws_every_feasible_candidate_and_the_frontier(frontier_search, tmp_path):
    pytest.importorskip("matplotlib")
    import numpy as np

    from planner.layout.axes import layout_cell
    from planner.plots.frontier import SIZE_PX, plot_frontier

    r = frontier_search
    drawn = plot_frontier(r, tmp_path / "f.png")
    assert png_size(drawn.path) == SIZE_PX == (1500, 650) and drawn.path.stat().st_size > 20_000
    feasible = np.flatnonzero(r.feasible)
    assert len(drawn.candidates) == feasible.size
    s = r.scores
    expected = np.column_stack([s.step_time_s[r.frontier], s.energy_j_per_token[r.frontier]])
    np.testing.assert_allclose(drawn.frontier, expected)
    # Pareto by hand: no drawn candidate is at least as fast and as frugal as a frontier point and better in one
    t, e = drawn.candidates[:, 0], drawn.candidates[:, 1]
    for ft, fe in drawn.frontier:
        assert not np.any((t <= ft) & (e <= fe) & ((t < ft) | (e < fe)))
    # fastest first, each labelled with its layout cell
    assert list(drawn.frontier[:, 0]) == sorted(drawn.frontier[:, 0])
    assert [label[0] for label in drawn.labels] == [layout_cell(r.scored(i).layout) for i in r.frontier]
    # the middle panel reaches 5 % beyond the frontier's fastest, slowest, most and least frugal points (a frontier
    # of one point was drawn alone in a window of +-0.3 %, its tick labels run together)
    x0, x1, y0, y1 = drawn.near_box
    ft, fe = drawn.frontier[:, 0], drawn.frontier[:, 1]
    assert x0 <= ft.min() - 0.05 * ft.max() + 1e-12 and x1 >= ft.max() * 1.05 - 1e-12
    assert y0 <= fe.min() - 0.05 * fe.max() + 1e-12 and y1 >= fe.max() * 1.05 - 1e-12


def test_the_frontier_plot_writes_svg_and_refuses_other_suffixes(frontier_search, tmp_path):
    pytest.importorskip("matplotlib")
    from planner.plots.frontier import plot_frontier

    svg = plot_frontier(frontier_search, tmp_path / "f.svg").path
    assert "<svg" in svg.read_text()[:2000]
    with pytest.raises(SpecError) as err:
        plot_frontier(frontier_search, tmp_path / "f.pdf")
    assert err.value.path == "--plot" and err.value.expected == ".png or .svg"


def test_a_picture_in_a_missing_folder_is_bad_input(frontier_search, tmp_path):
    pytest.importorskip("matplotlib")
    from planner.plots.frontier import plot_frontier

    with pytest.raises(SpecError, match="cannot write the picture"):
        plot_frontier(frontier_search, tmp_path / "missing" / "f.png")
