"""The one figure helper of dpstream: panels of labelled series, saved as a PNG.

Every plot of the project -- the stream studies and the demos' moving averages
(:mod:`~dpstream.evaluation.streams`), PAK's errors at the last step
(:mod:`~dpstream.evaluation.pak_analysis`), the count-of-counts levels
(:mod:`~dpstream.evaluation.count_of_counts`), the post-processing studies and the cleaned
counts over time (:mod:`~dpstream.evaluation.postprocess`) -- says what to draw as
:class:`Series` on :class:`Panel` objects and hands them to :func:`save_figure`, which alone
decides how.

A spread over rounds is drawn as a shaded ``band`` between two curves the caller computes
(say the 10th and 90th percentiles over rounds): unlike ``mean +- sd``, such a band never
leaves the data's range, so it stays meaningful on a log axis.  The panel's ``legend_title``
says what the band (or the error bars) is.

Figures are drawn with matplotlib's object interface on the Agg canvas: no pyplot, no global
backend switch, nothing left open after saving.

>>> import tempfile
>>> line = Series(label="a", x=[1, 2, 3], y=[1.0, 10.0, 100.0], band=([0.5, 4.0, 30.0], [3.0, 20.0, 400.0]))
>>> base = Series(label="base", x=[1, 3], y=[200.0, 200.0], reference=True)
>>> panel = Panel(series=(line, base), xlabel="epsilon", ylabel="MSE", ylog=True,
...               legend_title="shaded: 10-90% of rounds")
>>> with tempfile.TemporaryDirectory() as folder:
...     path = save_figure(Path(folder) / "figure.png", [panel])
...     path.read_bytes()[:4] == b"\\x89PNG"
True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["LEGEND_PLACES", "Panel", "Series", "counted", "save_figure"]

#: Resolution of every saved figure, in dots per inch.
DPI = 120
#: Width and height of one panel, in inches.
PANEL_SIZE = (6.4, 4.4)
#: Where a panel's legend goes: ``inside`` the axes where it covers the fewest points,
#: ``outside``, to the right of the axes (the axes shrink to make room), or ``none`` (for
#: side-by-side panels of the same series, whose legend another panel shows).
LEGEND_PLACES = ("inside", "outside", "none")


def counted(number: int, noun: str) -> str:
    """``number`` and ``noun``, plural unless one: how legends and titles count rounds and runs.

    >>> counted(1, "round"), counted(50, "round")
    ('1 round', '50 rounds')
    """
    return f"{number:,} {noun}" + ("" if number == 1 else "s")


@dataclass(frozen=True, eq=False, kw_only=True)  # arrays do not compare as one truth value
class Series:
    """One labelled line of a panel.

    Parameters
    ----------
    label : str
        Its entry in the legend.
    x, y : array-like
        Coordinates of the same length; with ``steps=True``, ``x`` holds the ``len(y) + 1``
        edges of histogram bins and ``y`` their heights.
    band : (array-like, array-like), optional
        Lower and upper edge of a shaded band around the line (for instance the 10th and 90th
        percentiles over rounds), each of the shape of ``y``.
    spread : array-like, optional
        Half-width of symmetric error bars (for instance one standard error of the mean).
    steps : bool
        Draw the outline of a histogram (bin edges ``x``, heights ``y``).
    reference : bool
        A reference to compare with (``Base``, the raw release, a rule of thumb): dashed,
        grey unless ``color`` says otherwise, without markers.
    marker : str or None
        Marker of the points (default ``"o"``); None draws a plain line.
    hollow : bool
        Markers drawn as outlines (a second line of one colour, told apart from the first).
    linestyle : str, optional
        matplotlib's line style (``"-"``, ``":"``, ...); solid when None (dashed for a reference).
    markersize, linewidth : float, optional
        matplotlib's defaults when None.
    color : str, optional
        Colour of the line; the next colour of the cycle when None.
    """

    label: str
    x: ArrayLike
    y: ArrayLike
    band: tuple[ArrayLike, ArrayLike] | None = None
    spread: ArrayLike | None = None
    steps: bool = False
    reference: bool = False
    marker: str | None = "o"
    hollow: bool = False
    linestyle: str | None = None
    markersize: float | None = None
    linewidth: float | None = None
    color: str | None = None

    def __post_init__(self) -> None:
        x, y = np.asarray(self.x, dtype=np.float64), np.asarray(self.y, dtype=np.float64)
        expected = y.size + 1 if self.steps else y.size
        if x.ndim != 1 or y.ndim != 1 or x.size != expected:
            what = "len(y) + 1 bin edges" if self.steps else "as many values as y"
            raise ValueError(f"series {self.label!r}: x must hold {what} ({expected}), got {x.size}.")
        if self.spread is not None and np.asarray(self.spread).shape != y.shape:
            raise ValueError(f"series {self.label!r}: spread must have the shape of y {y.shape}, "
                             f"got {np.asarray(self.spread).shape}.")
        if self.band is not None:
            if len(self.band) != 2:
                raise ValueError(f"series {self.label!r}: band must be a pair (low, high), got {len(self.band)} items.")
            low, high = (np.asarray(edge, dtype=np.float64) for edge in self.band)
            if low.shape != y.shape or high.shape != y.shape:
                raise ValueError(f"series {self.label!r}: both edges of band must have the shape of y {y.shape}, "
                                 f"got {low.shape} and {high.shape}.")
            if np.any(low > high):
                index = int(np.argmax(low > high))
                raise ValueError(f"series {self.label!r}: band must have low <= high, got {low[index]:g} > "
                                 f"{high[index]:g} at point {index}.")
        if self.steps and (self.band is not None or self.spread is not None):
            raise ValueError(f"series {self.label!r}: a histogram outline takes no band and no spread.")


@dataclass(frozen=True, kw_only=True)
class Panel:
    """One set of axes: its series, axis labels, scales and legend.

    Parameters
    ----------
    series : sequence of Series
        Drawn in order; the legend lists them in the same order.
    xlabel, ylabel : str
        What each axis shows, with its unit or the budget it is.
    title : str
    xlog, ylog : bool
        Logarithmic axes.
    xticks : sequence of float, optional
        Ticks of the x axis (matplotlib chooses them when None).
    legend : {"inside", "outside", "none"}
        Inside the axes where it covers the fewest points, to the right of them (for many
        or long labels, which would hide the curves), or none.
    legend_columns : int
        Columns of the legend.
    legend_title : str
        A line atop the legend: what the bands or the error bars are.
    """

    series: Sequence[Series]
    xlabel: str
    ylabel: str
    title: str = ""
    xlog: bool = False
    ylog: bool = False
    xticks: Sequence[float] | None = None
    legend: str = "inside"
    legend_columns: int = 1
    legend_title: str = ""

    def __post_init__(self) -> None:
        if self.legend not in LEGEND_PLACES:
            raise ValueError(f"legend must be one of {', '.join(LEGEND_PLACES)}, got {self.legend!r}.")


def _draw(ax, series: Series):
    """Draw ``series`` on ``ax``; return the artist its legend entry shows."""
    x, y = np.asarray(series.x, dtype=np.float64), np.asarray(series.y, dtype=np.float64)
    style: dict[str, object] = {"label": series.label}
    if series.reference:
        style.update(linestyle="--", color=series.color or "grey")
    else:
        options = {"marker": series.marker, "markersize": series.markersize, "color": series.color,
                   "linestyle": series.linestyle}
        style.update((key, value) for key, value in options.items() if value is not None)
        if series.hollow:
            style["markerfacecolor"] = "none"
    if series.linewidth is not None:
        style["linewidth"] = series.linewidth
    if series.steps:  # the outline of the bars, from 0 at the first edge back to 0 at the last
        style.pop("marker", None)
        style.pop("markersize", None)
        style.setdefault("linewidth", 1.0)
        (outline,) = ax.plot(np.repeat(x, 2), np.concatenate(([0.0], np.repeat(y, 2), [0.0])), **style)
        outline.sticky_edges.y.append(0.0)  # the bars stand on the x axis, without a margin below
        return outline
    if series.spread is not None:
        return ax.errorbar(x, y, yerr=np.asarray(series.spread, dtype=np.float64), capsize=3, **style)
    (line,) = ax.plot(x, y, **style)
    if series.band is not None:
        low, high = (np.asarray(edge, dtype=np.float64) for edge in series.band)
        ax.fill_between(x, low, high, alpha=0.15, color=line.get_color(), linewidth=0)
    return line


def save_figure(path: Path, panels: Sequence[Panel], *, panel_size: tuple[float, float] = PANEL_SIZE,
                stacked: bool = False) -> Path:
    """Draw ``panels`` side by side (``stacked``: one above the other) and save them as a PNG at
    ``path``; return ``path``.

    Every panel gets a grid and its legend; ``panel_size`` is the size of one panel in inches
    (legend included: an ``outside`` legend takes its room from the axes).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if not panels:
        raise ValueError("save_figure needs at least one panel.")
    width, height = panel_size
    count = len(panels)
    fig = Figure(figsize=(width, height * count) if stacked else (width * count, height), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(count, 1, squeeze=False)[:, 0] if stacked else fig.subplots(1, count, squeeze=False)[0]
    for ax, panel in zip(axes, panels, strict=True):
        handles = [_draw(ax, series) for series in panel.series]
        if panel.xlog:
            ax.set_xscale("log")
        if panel.ylog:
            ax.set_yscale("log")
        if panel.xticks is not None:
            ax.set_xticks(list(panel.xticks))
        ax.set_xlabel(panel.xlabel)
        ax.set_ylabel(panel.ylabel)
        ax.set_title(panel.title)
        ax.grid(True, which="both", alpha=0.3)
        if panel.legend == "none":
            continue
        place = ({"loc": "upper left", "bbox_to_anchor": (1.02, 1.0), "borderaxespad": 0.0}
                 if panel.legend == "outside" else {"loc": "best"})
        ax.legend(handles=handles, fontsize="small", ncol=panel.legend_columns, title=panel.legend_title or None,
                  title_fontsize="small", alignment="left", **place)
    fig.savefig(path, dpi=DPI)
    return Path(path)
