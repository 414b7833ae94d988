"""matplotlib for the planner's pictures: imported when a picture is asked for, drawn on a file canvas
(Agg; SVG by suffix) without pyplot, so no backend is chosen or switched, whatever `MPLBACKEND` says
or a notebook has set, and every text drawn literally (names from input hold `$`, `_`, `%`).

matplotlib is an optional extra (`[plot]`); one that is missing is said with how to install it, one
that fails to import is "cannot draw: ...": both `SpecError`s, exit 2, never an internal error.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from planner.errors import SpecError

DPI = 100
FORMATS = {".png": "png", ".svg": "svg"}  # suffix -> matplotlib format
# Inside every drawing: names are text, not TeX (mathtext would parse "$x$", and fail on "$\frac{x$";
# a user's matplotlibrc with text.usetex would run LaTeX on them, or fail without it).
LITERAL_TEXT = {"text.parse_math": False, "text.usetex": False}


def label_text(value: object) -> str:
    """A name from input as drawn text: control characters (ESC, newline) as escapes, as the terminal
    shows them; the fonts have no glyph for them (matplotlib warned "Glyph 27 missing" on stderr)."""
    from planner.errors import printable

    return printable(str(value))


# Short suffixes for large values on log axes: parameters read "1B", "10B" (the sweep's params_label);
# the same for tokens/s and counts. No "G": a tick of a parameter axis is not a giga-anything.
_SUFFIXES = ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k"))


def tick_text(value: float) -> str:
    """A log axis's tick as plain text: 1e9 -> '1B', 2e5 -> '200k', 10 -> '10', 0.05 -> '0.05'.
    matplotlib's LogFormatter writes mathtext (`$\\mathdefault{10^{9}}$`), drawn raw under LITERAL_TEXT."""
    for scale, suffix in _SUFFIXES:
        if abs(value) >= scale:
            return f"{value / scale:g}{suffix}"
    return f"{value:g}"


def log_ticks(axis, subs: tuple[float, ...] = (1.0, 2.0, 5.0)) -> None:
    """Plain-text major ticks at `subs` of each decade on a log `axis` (ax.xaxis / ax.yaxis), no labels
    on the minor ones: a range of less than a decade still gets labelled ticks, and none collide."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(subs=subs))
    axis.set_major_formatter(FuncFormatter(lambda v, _: tick_text(v)))
    axis.set_minor_formatter(NullFormatter())


class Matplotlib:
    """What the pictures use of matplotlib: figures on the Agg canvas, colormaps, patches."""

    def __init__(self, mpl) -> None:
        self.mpl = mpl

    def figure(self, figsize: tuple[float, float], dpi: int = DPI):
        """A figure of its own (not pyplot's: nothing to close, no backend involved)."""
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        fig = Figure(figsize=figsize, dpi=dpi)
        FigureCanvasAgg(fig)
        return fig

    def get_cmap(self, name: str):
        return self.mpl.colormaps[name]

    @property
    def Rectangle(self):  # noqa: N802 - matplotlib's name
        from matplotlib.patches import Rectangle

        return Rectangle

    @contextmanager
    def literal(self) -> Iterator[None]:
        """matplotlib's defaults (a user's matplotlibrc changes neither the size nor the text) with
        every text literal, for drawing and saving: tick labels are made when the figure is saved."""
        from matplotlib import style

        with style.context("default"), self.mpl.rc_context(LITERAL_TEXT):
            yield

    def close(self, fig) -> None:
        """Nothing to do (no pyplot figure manager holds the figure); kept for callers that close."""


def _import_matplotlib():
    """`import matplotlib`, with `MPLBACKEND` out of the way: matplotlib validates it on import and an
    unknown value (`MPLBACKEND=nonsense`) fails the import, though pictures need no backend. A valid
    value is set afterwards, as matplotlib would have, for the caller's own pyplot."""
    import sys

    if "matplotlib" in sys.modules:
        import matplotlib

        return matplotlib
    backend = os.environ.pop("MPLBACKEND", None)
    try:
        import matplotlib
    finally:
        if backend is not None:
            os.environ["MPLBACKEND"] = backend
    if backend:
        try:
            matplotlib.rcParams["backend"] = backend
        except (ValueError, KeyError):
            pass  # a backend matplotlib does not know: nobody could use it, the pictures do not need it
    return matplotlib


def require_matplotlib(flag: str = "--plot") -> Matplotlib:
    """matplotlib for drawing, or a SpecError: how to install it (on the option `flag`) when missing,
    "cannot draw: ..." when it is there but fails to import."""
    try:
        mpl = _import_matplotlib()
    except ModuleNotFoundError as exc:
        if exc.name != "matplotlib":  # installed but broken: a dependency of it is missing
            raise cannot_draw(exc, flag) from None
        raise SpecError("plots need matplotlib, which is not installed", path=flag,
                        expected="`pip install matplotlib` (or the extra: pip install -e '.[plot]' in a clone)") from None
    except Exception as exc:  # noqa: BLE001 - any failure of a third-party import is the environment's
        raise cannot_draw(exc, flag) from None
    return Matplotlib(mpl)


def cannot_draw(exc: BaseException, flag: str) -> SpecError:
    return SpecError(f"cannot draw: matplotlib fails to import ({type(exc).__name__}: {exc})",
                     expected=f"a working matplotlib (pip install --force-reinstall matplotlib), or no {flag}")


def figure_path(path: str | Path, flag: str) -> Path:
    """The file a figure goes to: SVG or PNG by its suffix, any other suffix is bad input."""
    path = Path(path)
    if path.suffix.lower() not in FORMATS:
        raise SpecError(f"cannot draw '{path.name}': unknown picture format '{path.suffix}'", path=flag,
                        expected=".png or .svg")
    # Checked before the search it would follow (planner/atomic.py's output check): writing into a
    # FIFO would wait for a reader, and a missing folder would be found only after the work.
    from planner.atomic import check_output

    check_output(path, flag)
    if not path.parent.is_dir():
        raise SpecError(f"cannot write the picture: no folder '{path.parent}'", path=flag,
                        expected="a file in an existing folder")
    return path


def save_figure(plt: Matplotlib, fig, path: Path, flag: str) -> Path:
    """Write `fig` at its own size (no tight bounding box) in the format of the suffix."""
    try:
        with plt.literal():
            fig.savefig(path, dpi=DPI, format=FORMATS[path.suffix.lower()])
    except OSError as exc:
        raise SpecError(f"cannot write the picture: {exc.strerror or exc}", file=str(path), path=flag) from None
    return path
