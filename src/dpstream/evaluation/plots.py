"""The one figure helper of dpstream: panels of labelled series, saved as a PNG.

Every plot of the project -- the stream studies and the demos' moving averages
(:mod:`~dpstream.evaluation.streams`), PAK's errors at the last step
(:mod:`~dpstream.evaluation.pak_analysis`), the count-of-counts levels
(:mod:`~dpstream.evaluation.count_of_counts`) and the post-processing studies
(:mod:`~dpstream.evaluation.postprocess`) -- says what to draw as :class:`Series` on
:class:`Panel` objects and hands them to :func:`save_figure`, which alone decides how.

Figures are drawn with matplotlib's object interface on the Agg canvas: no pyplot, no global
backend switch, nothing left open after saving.

>>> import tempfile
>>> line = Series(label="a", x=[1, 2, 3], y=[1.0, 10.0, 100.0], spread=[0.5, 5.0, 50.0])
>>> base = Series(label="base", x=[1, 3], y=[200.0, 200.0], reference=True)
>>> panel = Panel(series=(line, base), xlabel="epsilon", ylabel="MSE", ylog=True)
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

__all__ = ["Panel", "Series", "save_figure"]

#: Resolution of every saved figure, in dots per inch.
DPI = 120
#: Width and height of one panel, in inches.
PANEL_SIZE = (6.4, 4.4)
#: Lowest point of a shaded band on a log axis, as a fraction of the line (a band must stay > 0).
_LOG_BAND_FLOOR = 1e-3


@dataclass(frozen=True, eq=False)  # arrays do not compare as one truth value
class Series:
    """One labelled line of a panel.

    Parameters
    ----------
    label : str
        Its entry in the legend.
    x, y : array-like
        Coordinates of the same length; with ``steps=True``, ``x`` holds the ``len(y) + 1``
        edges of histogram bins and ``y`` their heights.
    spread : array-like, optional
        Half-width around ``y`` (one standard deviation, one standard error): a shaded band,
        or error bars with ``bars=True``.
    bars : bool
        Draw ``spread`` as error bars instead of a band.
    steps : bool
        Draw the outline of a histogram (bin edges ``x``, heights ``y``).
    reference : bool
        A reference to compare with (``Base``, the raw release, the omniscient bound):
        dashed grey, without markers.
    marker : str or None
        Marker of the points (default ``"o"``); None draws a plain line.
    markersize, linewidth : float, optional
        matplotlib's defaults when None.
    color : str, optional
        Colour of the line; the next colour of the cycle when None.
    """

    label: str
    x: ArrayLike
    y: ArrayLike
    spread: ArrayLike | None = None
    bars: bool = False
    steps: bool = False
    reference: bool = False
    marker: str | None = "o"
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
        if self.steps and (self.bars or self.spread is not None):
            raise ValueError(f"series {self.label!r}: a histogram outline takes no spread.")


@dataclass(frozen=True)
class Panel:
    """One set of axes: its series, axis labels and scales.

    Parameters
    ----------
    series : sequence of Series
        Drawn in order; the legend lists them in the same order.
    xlabel, ylabel, title : str
    xlog, ylog : bool
        Logarithmic axes.
    xticks : sequence of float, optional
        Ticks of the x axis (matplotlib chooses them when None).
    legend_columns : int
        Columns of the legend.
    """

    series: Sequence[Series]
    xlabel: str
    ylabel: str
    title: str = ""
    xlog: bool = False
    ylog: bool = False
    xticks: Sequence[float] | None = None
    legend_columns: int = 1


def _draw(ax, series: Series, ylog: bool) -> None:
    x, y = np.asarray(series.x, dtype=np.float64), np.asarray(series.y, dtype=np.float64)
    style: dict[str, object] = {"label": series.label}
    if series.reference:
        style.update(linestyle="--", color="grey")
    else:
        options = {"marker": series.marker, "markersize": series.markersize, "color": series.color}
        style.update((key, value) for key, value in options.items() if value is not None)
    if series.linewidth is not None:
        style["linewidth"] = series.linewidth
    if series.steps:  # the outline of the bars, from 0 at the first edge back to 0 at the last
        style.pop("marker", None)
        style.pop("markersize", None)
        style.setdefault("linewidth", 1.0)
        (outline,) = ax.plot(np.repeat(x, 2), np.concatenate(([0.0], np.repeat(y, 2), [0.0])), **style)
        outline.sticky_edges.y.append(0.0)  # the bars stand on the x axis, without a margin below
        return
    if series.bars and series.spread is not None:
        ax.errorbar(x, y, yerr=np.asarray(series.spread, dtype=np.float64), capsize=3, **style)
        return
    (line,) = ax.plot(x, y, **style)
    if series.spread is not None:
        spread = np.asarray(series.spread, dtype=np.float64)
        low = np.maximum(y - spread, y * _LOG_BAND_FLOOR) if ylog else y - spread
        ax.fill_between(x, low, y + spread, alpha=0.15, color=line.get_color())


def save_figure(path: Path, panels: Sequence[Panel], *, panel_size: tuple[float, float] = PANEL_SIZE) -> Path:
    """Draw ``panels`` side by side and save them as a PNG at ``path``; return ``path``.

    Every panel gets a grid and a legend; ``panel_size`` is the size of one panel in inches.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if not panels:
        raise ValueError("save_figure needs at least one panel.")
    width, height = panel_size
    fig = Figure(figsize=(width * len(panels), height))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, panel in zip(axes, panels, strict=True):
        for series in panel.series:
            _draw(ax, series, panel.ylog)
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
        ax.legend(fontsize="small", ncol=panel.legend_columns)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    return Path(path)
