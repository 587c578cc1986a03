"""The one figure helper (``dpstream.evaluation.plots``): what it accepts, what it writes."""

from __future__ import annotations

import matplotlib.image
import numpy as np
import pytest

from dpstream.evaluation.plots import DPI, PANEL_SIZE, Panel, Series, save_figure


def _size(path):
    height, width = matplotlib.image.imread(path).shape[:2]
    return width, height


def test_every_kind_of_series_is_drawn_on_side_by_side_panels(tmp_path):
    x = np.array([0.1, 1.0, 10.0])
    band = Series(label="band", x=x, y=[5.0, 2.0, 1.0], band=([4.0, 0.5, 0.9], [7.0, 9.0, 1.2]))
    bars = Series(label="bars", x=x, y=[4.0, 3.0, 2.0], spread=[0.5, 0.5, 0.5])
    reference = Series(label="Base", x=x, y=[9.0, 9.0, 9.0], reference=True)
    plain = Series(label="plain", x=x, y=[1.0, 2.0, 3.0], marker=None, color="black", linewidth=2.0)
    density, edges = np.histogram(np.random.default_rng(0).normal(size=200), bins=10, density=True)
    steps = Series(label="density", x=edges, y=density, steps=True)
    panels = [Panel(series=[band, bars, reference], xlabel="epsilon", ylabel="MSE", xlog=True, ylog=True,
                    legend_columns=2, legend_title="shaded: 10-90%"),
              Panel(series=[plain, steps], xlabel="x", ylabel="y", title="two", xticks=[0, 5, 10])]
    path = save_figure(tmp_path / "figure.png", panels)
    assert path == tmp_path / "figure.png"
    assert _size(path) == (round(2 * PANEL_SIZE[0] * DPI), round(PANEL_SIZE[1] * DPI))


def test_panel_size_sets_the_size_of_one_panel(tmp_path):
    panel = Panel(series=[Series(label="a", x=[0, 1], y=[1, 2])], xlabel="x", ylabel="y")
    path = save_figure(tmp_path / "one.png", [panel], panel_size=(8.0, 3.6))
    assert _size(path) == (960, 432)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (dict(x=[0, 1, 2], y=[1, 2]), r"x must hold as many values as y \(2\), got 3"),
        (dict(x=[0, 1], y=[1, 2], steps=True), r"x must hold len\(y\) \+ 1 bin edges \(3\), got 2"),
        (dict(x=[0, 1], y=[1, 2], spread=[1]), r"spread must have the shape of y \(2,\), got \(1,\)"),
        (dict(x=[0, 1, 2], y=[1, 2], steps=True, spread=[1, 1]), "a histogram outline takes no band and no spread"),
        (dict(x=[0, 1], y=[1, 2], band=([0, 1],)), r"band must be a pair \(low, high\), got 1 items"),
        (dict(x=[0, 1], y=[1, 2], band=([0, 1], [2])), r"both edges of band must have the shape of y \(2,\)"),
        (dict(x=[0, 1], y=[1, 2], band=([0, 3], [2, 2.5])), r"band must have low <= high, got 3 > 2.5 at point 1"),
    ],
)
def test_series_are_checked_when_made(options, message):
    with pytest.raises(ValueError, match=message):
        Series(label="s", **options)


def test_a_figure_needs_a_panel(tmp_path):
    with pytest.raises(ValueError, match="at least one panel"):
        save_figure(tmp_path / "none.png", [])
    assert not (tmp_path / "none.png").exists()


def test_outside_legends_and_stacked_panels_keep_the_figure_size(tmp_path):
    """A legend beside the axes takes its room from them, not from the page; stacked panels
    stand one above the other."""
    many = [Series(label=f"a rather long method name {k}", x=[0, 1], y=[k, k + 1]) for k in range(9)]
    outside = Panel(series=many, xlabel="x", ylabel="y", legend="outside", legend_title="line: mean\nshaded: 10-90%")
    path = save_figure(tmp_path / "outside.png", [outside], panel_size=(10.0, 4.8))
    assert _size(path) == (1200, 576)
    hidden = Panel(series=many[:1], xlabel="x", ylabel="y", legend="none")
    path = save_figure(tmp_path / "stacked.png", [outside, hidden], panel_size=(10.0, 2.5), stacked=True)
    assert _size(path) == (1200, 600)


def test_a_legend_goes_inside_outside_or_nowhere():
    with pytest.raises(ValueError, match="legend must be one of inside, outside, none, got 'left'"):
        Panel(series=[], xlabel="x", ylabel="y", legend="left")
