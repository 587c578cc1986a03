"""The figures whose lines lie on top of each other: the hierarchy's smoothers, MAP's exact and Stirling forms."""

from __future__ import annotations

import pytest

import dpstream.evaluation.postprocess as postprocess
import dpstream.evaluation.streams as streams

EPSILONS = (0.01, 0.05, 0.1)


@pytest.fixture
def panels(monkeypatch):
    """The panels a plot would save."""
    drawn = []

    def capture(path, figure_panels, **options):
        drawn.extend(figure_panels)
        return path

    monkeypatch.setattr(streams, "save_figure", capture)
    monkeypatch.setattr(postprocess, "save_figure", capture)
    return drawn


def _stream_rows(methods: dict[str, float], study: str = "hierarchy") -> list[dict]:
    return [{"study": study, "method": method, "epsilon": e, "rounds": 3, "mse_mean": level / e,
             "mse_q10": 0.9 * level / e, "mse_q90": 1.1 * level / e} for method, level in methods.items()
            for e in EPSILONS]


def test_close_smoothers_get_a_panel_relative_to_the_first(panels, tmp_path):
    close = streams.STUDIES["hierarchy"].close
    levels = {"H2": 100.0, "H16c": 10.0, **{name: 1.0 + 0.01 * k for k, name in enumerate(close)}, "Base": 1e4}
    streams.plot_metric(_stream_rows(levels), tmp_path / "h.png")
    main, relative = panels
    assert [s.label for s in relative.series] == list(close)
    for k, line in enumerate(relative.series):
        assert list(line.y) == pytest.approx([1.0 + 0.01 * k] * len(EPSILONS))
    markers = [s.marker for s in main.series if s.label in close]
    assert len(set(markers)) == len(close)  # told apart in the main panel too
    assert [s.color for s in main.series if s.label in close] == [s.color for s in relative.series]


def test_studies_without_close_lines_keep_one_panel(panels, tmp_path):
    streams.plot_metric(_stream_rows({"ToPS": 1.0, "Base": 100.0}, study="end-to-end"), tmp_path / "e.png")
    assert len(panels) == 1
    streams.plot_metric(_stream_rows({"H2": 3.0, "H16c+recent": 1.0}), tmp_path / "one.png")
    assert len(panels) == 2  # one close method alone needs no second panel


def _postprocess_rows(stirling_gap: float) -> list[dict]:
    levels = {"Laplace (raw)": 100.0, "MLE": 20.0, "MAP frequency (exact)": 5.0, "MAP uniform (exact)": 4.0,
              "MAP frequency (Stirling)": 5.0 * (1 + stirling_gap), "MAP uniform (Stirling)": 4.0 * (1 - stirling_gap)}
    return [{"study": "epsilon", "x": e, "epsilon": e, "method": method, "rounds": 5, "mse_mean": level / e,
             "mse_q10": level / e, "mse_q90": level / e} for method, level in levels.items() for e in EPSILONS]


def test_exact_and_stirling_that_agree_are_one_entry(panels, tmp_path):
    postprocess.plot_study(_postprocess_rows(1e-4), tmp_path / "p.png")
    labels = [s.label for s in panels[0].series]
    assert labels == ["Laplace (raw)", "MLE", "MAP frequency (exact and Stirling: within 0.01%)",
                      "MAP uniform (exact and Stirling: within 0.01%)"]


def test_exact_and_stirling_that_differ_are_two_styles_of_one_colour(panels, tmp_path):
    postprocess.plot_study(_postprocess_rows(0.05), tmp_path / "p.png")
    by_label = {s.label: s for s in panels[0].series}
    assert len(by_label) == 6
    for prior in ("MAP frequency", "MAP uniform"):
        exact, stirling = by_label[f"{prior} (exact)"], by_label[f"{prior} (Stirling)"]
        assert exact.color == stirling.color
        assert (exact.linestyle, exact.hollow) != (stirling.linestyle, stirling.hollow)
    assert by_label["MAP frequency (exact)"].color != by_label["MAP uniform (exact)"].color
