"""The stream studies (``dpstream.evaluation.streams``): dataset extension, the studies, their summaries
and figures."""

from __future__ import annotations

import numpy as np
import pytest

from dpstream.evaluation import ExperimentConfig, extend_stream, run_study, summarize
from dpstream.evaluation.streams import (
    BASE_LABEL,
    STUDIES,
    axis_label,
    interval_means,
    plot_metric,
    plot_moving_average,
)


def test_extend_stream_appends_reversed_then_forward():
    values = np.arange(5.0)
    extended, note = extend_stream(values, 13)
    assert extended.tolist() == [0, 1, 2, 3, 4, 4, 3, 2, 1, 0, 0, 1, 2]
    assert "reversed" in note
    same, note = extend_stream(values, 3)
    assert same.tolist() == [0, 1, 2] and "first 3" in note


SMALL = ExperimentConfig(hold=1000, max_range=4096, rounds=3, queries=50)


def test_run_study_records_and_base_error():
    rng = np.random.default_rng(4)
    values = rng.integers(0, 40, size=3000).astype(float)  # shorter than hold + max_range: extended
    messages: list[str] = []
    records = run_study("hierarchy", values, 100.0, epsilons=[0.5, 1.0], methods=["H16c", "Base"],
                        config=SMALL, seed=0, log=messages.append)
    assert len(records) == 3 * 2 * 2
    assert any("reversed" in m for m in messages) and any("NON-PRIVATE" in m for m in messages)
    base = [r for r in records if r["method"] == "Base"]
    assert all(r["mse"] > 0 for r in base)
    # Base answers 0, so its MSE is the mean squared true range sum: the same for both epsilons.
    by_round = {}
    for r in base:
        by_round.setdefault(r["round"], set()).add(r["mse"])
    assert all(len(v) == 1 for v in by_round.values())


def test_run_study_is_reproducible_and_summarized():
    values = np.random.default_rng(5).integers(0, 40, size=6000).astype(float)
    kwargs = dict(epsilons=[1.0], methods=["ToPS", "Base"], config=SMALL, seed=9)
    first = run_study("end-to-end", values, 100.0, **kwargs)
    second = run_study("end-to-end", values, 100.0, **kwargs)
    assert [r["mse"] for r in first] == [r["mse"] for r in second]
    rows = summarize(first)
    tops = next(row for row in rows if row["method"] == "ToPS")
    mses = np.array([r["mse"] for r in first if r["method"] == "ToPS"])
    assert tops["mse_mean"] == pytest.approx(mses.mean())
    assert tops["mse_std"] == pytest.approx(mses.std(ddof=1))
    assert tops["threshold_mean"] is not None and tops["threshold_source"] == "NM-E (private)"


def test_run_study_rejects_unknown_names():
    with pytest.raises(ValueError, match="study must be one of"):
        run_study("nope", np.ones(10), 1.0, epsilons=[1.0])
    with pytest.raises(ValueError, match="has no method 'H3'"):
        run_study("hierarchy", np.ones(10), 1.0, epsilons=[1.0], methods=["H3"])


def _stream(size, seed=0):
    return np.minimum(np.random.default_rng(seed).geometric(0.15, size), 500).astype(float)


@pytest.mark.parametrize("study", ["baselines", "percentiles", "threshold-methods"])
def test_baseline_studies_run_and_label_oracles(study):
    config = ExperimentConfig(hold=1024, max_range=2048, rounds=1, queries=20)
    records = run_study(study, _stream(4000), 500.0, epsilons=[0.5], config=config)
    methods = {record["method"] for record in records}
    assert "Base" in methods and all(np.isfinite(record["mse"]) for record in records)
    if study == "percentiles":
        assert {m for m in methods if m.startswith("true-")} == {
            f"true-p{p}-ORACLE" for p in ("85", "90", "95", "99.5", "99.9")
        }
        assert "NON-PRIVATE" in records[0]["threshold_source"]


def test_studies_are_declared_once_and_read_only():
    assert list(STUDIES) == ["end-to-end", "hierarchy", "topl", "baselines", "percentiles", "threshold-methods"]
    with pytest.raises(TypeError):
        STUDIES["mine"] = STUDIES["topl"]  # type: ignore[index]
    with pytest.raises(TypeError):
        STUDIES["topl"].methods["mine"] = STUDIES["topl"].methods["Base"]  # type: ignore[index]
    assert all(list(study.methods)[-1] == "Base" for study in STUDIES.values())


def test_fixed_budgets_of_figures_6_and_7_reach_the_threshold(monkeypatch):
    """Figure 6 gives NM-E 0.05 and the hierarchy the study's epsilon; Figure 7 the other way round."""
    import dpstream.evaluation.streams as streams

    seen = []
    real = streams.noisy_max_threshold

    def spy(held, **kwargs):
        seen.append((kwargs["epsilon"], kwargs["stream_epsilon"]))
        return real(held, **kwargs)

    monkeypatch.setattr(streams, "noisy_max_threshold", spy)
    config = ExperimentConfig(hold=512, max_range=1024, rounds=1, queries=5)
    run_study("percentiles", _stream(2000), 500.0, epsilons=[0.7], methods=["NM-E@0.05"], config=config)
    run_study("threshold-methods", _stream(2000), 500.0, epsilons=[0.7], methods=["NM-E+H16c+recent"],
              config=config)
    assert seen == [(streams.FIXED_EPSILON, 0.7), (0.7, streams.FIXED_EPSILON)]


def test_study_figures_are_written(tmp_path):
    rows = [{"method": m, "epsilon": e, "rounds": 3, "mse_mean": v, "mse_q10": v / 2, "mse_q90": v * 2}
            for m, v in (("H16c", 10.0), ("Base", 100.0)) for e in (0.1, 1.0)]
    assert plot_metric(rows, tmp_path / "mse.png").read_bytes()[:4] == b"\x89PNG"
    truth = np.arange(100.0)
    assert plot_moving_average(truth, truth + 1, tmp_path / "ma.png", intervals=10).stat().st_size > 1000
    assert interval_means(truth, 4).tolist() == [12.0, 37.0, 62.0, 87.0]


def test_summary_band_is_the_10_90_percentile_of_rounds_and_stays_positive():
    """Per-round MSEs are skewed (a few long queries dominate): sd > mean puts mean - sd below 0,
    which a log axis cannot show; the 10th/90th percentiles over rounds stay inside the data."""
    mses = [1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 8.0, 13.0, 400.0]
    records = [{"study": "end-to-end", "dataset": "d", "method": "ToPS", "epsilon": 0.1, "round": k,
                "threshold_source": "x", "threshold": None, "smoothed_levels": None,
                "mse": v, "mae": v, "mmse": v, "mmae": v} for k, v in enumerate(mses)]
    (row,) = summarize(records)
    assert row["mse_mean"] - row["mse_std"] < 0  # the old band left the log axis
    assert row["mse_q10"] == pytest.approx(np.quantile(mses, 0.1))
    assert row["mse_q90"] == pytest.approx(np.quantile(mses, 0.9))
    assert min(mses) <= row["mse_q10"] <= row["mse_mean"] <= row["mse_q90"] <= max(mses)


def test_run_study_reports_progress_through_one_callback():
    calls = []
    config = ExperimentConfig(hold=512, max_range=1024, rounds=2, queries=5)
    records = run_study("end-to-end", _stream(2000), 500.0, epsilons=[0.5, 1.0], config=config,
                        progress=lambda done, total: calls.append((done, total)))
    total = 2 * 2 * 2  # rounds x epsilons x methods
    assert calls[0] == (0, total) and calls[-1] == (total, total) == (len(records), total)
    assert [done for done, _ in calls] == sorted(done for done, _ in calls)
    assert {of for _, of in calls} == {total}


def test_fixed_query_length_makes_every_query_that_long():
    """With every query of length L, the per-value metrics are exactly MSE / L^2 and MAE / L."""
    config = ExperimentConfig(hold=512, max_range=1024, rounds=2, queries=30, query_length=100)
    records = run_study("hierarchy", _stream(2000), 500.0, epsilons=[1.0], methods=["H16c", "Base"], config=config)
    for record in records:
        assert record["mmse"] == pytest.approx(record["mse"] / 100**2, rel=1e-12)
        assert record["mmae"] == pytest.approx(record["mae"] / 100, rel=1e-12)
    with pytest.raises(ValueError, match=r"query_length must be between 1 and the 1,024 positions .*, got 1025"):
        run_study("hierarchy", _stream(2000), 500.0, epsilons=[1.0], methods=["Base"],
                  config=ExperimentConfig(hold=512, max_range=1024, rounds=1, queries=5, query_length=1025))


def test_every_study_says_what_its_epsilon_is():
    config = ExperimentConfig(stream_epsilon=0.7, percentile=90.0)
    labels = {study: axis_label(study, config) for study in STUDIES}
    assert labels["topl"] == "ε of each threshold report (each stream report: ε = 0.7)"
    assert "hierarchy" in labels["hierarchy"] and "p90" in labels["hierarchy"] and "non-private" in labels["hierarchy"]
    assert labels["percentiles"].startswith("ε of the hierarchy") and "0.05" in labels["percentiles"]
    assert labels["threshold-methods"].startswith("ε of the threshold") and "0.05" in labels["threshold-methods"]
    assert all(label.startswith("ε of ") for label in labels.values())


@pytest.mark.parametrize(("study", "methods", "outside"), [("topl", ["SW-W", "SW", "Base"], False),
                                                           ("baselines", list(STUDIES["baselines"].methods), True)])
def test_the_study_plot_labels_its_axes_band_base_and_keeps_the_legend_off_the_curves(monkeypatch, tmp_path, study,
                                                                                      methods, outside):
    import dpstream.evaluation.streams as streams

    drawn = []
    monkeypatch.setattr(streams, "save_figure", lambda path, panels, **options: drawn.append(panels) or path)
    rows = [{"study": study, "method": m, "epsilon": e, "rounds": 7, "mse_mean": 2.0 + k, "mse_q10": 1.0 + k,
             "mse_q90": 5.0 + k} for k, m in enumerate(methods) for e in (0.2, 2.0)]
    config = ExperimentConfig(stream_epsilon=1.5, query_length=64)
    plot_metric(rows, tmp_path / "p.png", config=config)
    (panel,) = drawn[0]
    assert panel.xlabel == axis_label(study, config)
    assert panel.ylabel == "MSE of queries of 64 values (mean over rounds)"
    assert panel.legend == ("outside" if outside else "inside")
    assert "10th-90th percentile" in panel.legend_title and "7 rounds" in panel.legend_title
    base = panel.series[-1]
    assert base.label == BASE_LABEL and base.reference
    first = panel.series[0]
    assert list(first.band[0]) == [1.0, 1.0] and list(first.band[1]) == [5.0, 5.0]
    with pytest.raises(ValueError, match="metric must be one of"):
        plot_metric(rows, tmp_path / "p.png", metric="rmse")
