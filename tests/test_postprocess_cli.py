"""The ``postprocess`` and ``evaluate-postprocess`` commands."""

from __future__ import annotations

import json
import os
import stat

import numpy as np
import pytest
from click.testing import CliRunner

from dpstream.cli import cli
from dpstream.evaluation.postprocess import run_study, study_settings
from dpstream.postprocess import FIG3_MATRIX, LaplaceCounts, map_estimate, mle_estimate, simulate_counts


@pytest.fixture()
def files(tmp_path):
    truth = simulate_counts(FIG3_MATRIX, users=50, steps=40, seed=1)
    noisy = LaplaceCounts(epsilon=0.5, seed=2).release(truth)
    noisy_path = tmp_path / "noisy.csv"
    np.savetxt(noisy_path, noisy, delimiter=",", fmt="%.17g")
    transition_path = tmp_path / "T.csv"
    np.savetxt(transition_path, FIG3_MATRIX, delimiter=",", header="loc1,loc2,loc3", comments="")
    return tmp_path, noisy, noisy_path, transition_path


def _run(*args):
    return CliRunner().invoke(cli, [str(arg) for arg in args])


@pytest.mark.parametrize("method", ["map", "mle"])
def test_postprocess_writes_the_library_answer(files, method):
    tmp, noisy, noisy_path, transition_path = files
    out = tmp / "out.csv"
    result = _run("postprocess", noisy_path, "--transition", transition_path, "--users", 50, "--epsilon", 0.5,
                  "--method", method, "-o", out)
    assert result.exit_code == 0, result.output
    written = np.loadtxt(out, delimiter=",")
    if method == "map":
        expected = map_estimate(noisy, FIG3_MATRIX, users=50, epsilon=0.5).counts
    else:
        expected = mle_estimate(noisy, users=50).counts
    np.testing.assert_allclose(written, expected, rtol=1e-9, atol=1e-8)
    # No overwrite without --force; with --integer every row sums to n.
    again = _run("postprocess", noisy_path, "--transition", transition_path, "--users", 50, "--epsilon", 0.5,
                 "--integer", "-o", out)
    assert again.exit_code != 0 and "--force" in again.output
    forced = _run("postprocess", noisy_path, "--transition", transition_path, "--users", 50, "--epsilon", 0.5,
                  "--integer", "--prior", "uniform", "--form", "stirling", "-o", out, "--force")
    assert forced.exit_code == 0, forced.output
    rounded = np.loadtxt(out, delimiter=",", dtype=np.int64)
    assert rounded.shape == noisy.shape and np.all(rounded.sum(axis=1) == 50)


def test_postprocess_rejects_bad_inputs(files):
    tmp, _, noisy_path, _ = files
    bad = tmp / "bad.csv"
    bad.write_text("0.5,0.5,0\n0.2,0.2,0.2\n0,0,1\n")
    result = _run("postprocess", noisy_path, "--transition", bad, "--users", 50, "--epsilon", 1, "-o", tmp / "o.csv")
    assert result.exit_code != 0 and "row 2 sums to 0.6" in result.output
    square = tmp / "two.csv"
    square.write_text("1,0\n0,1\n")
    result = _run("postprocess", noisy_path, "--transition", square, "--users", 50, "--epsilon", 1, "-o", tmp / "o.csv")
    assert result.exit_code != 0 and "3 columns" in result.output
    ragged = tmp / "ragged.csv"
    ragged.write_text("1,2,3\n4,5\n")
    result = _run("postprocess", ragged, "--transition", files[3], "--users", 5, "--epsilon", 1, "-o", tmp / "o.csv")
    assert result.exit_code != 0 and "line 2 has 2 columns" in result.output
    text = tmp / "text.csv"
    text.write_text("1,2,3\n4,x,6\n")
    result = _run("postprocess", text, "--transition", files[3], "--users", 5, "--epsilon", 1, "-o", tmp / "o.csv")
    assert result.exit_code != 0 and "'x' is not a number" in result.output
    assert not (tmp / "o.csv").exists()


def test_evaluate_postprocess_small(tmp_path):
    result = _run("evaluate-postprocess", "--study", "epsilon", "--epsilons", "0.05,1", "--rounds", 2,
                  "--steps", 60, "--users", 30, "--out", tmp_path)
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "postprocess-epsilon.json").read_text())["summary"]
    methods = {row["method"] for row in summary}
    assert {"MLE", "MAP frequency (exact)", "MAP uniform (Stirling)", "Laplace (raw)"} <= methods
    assert all(row["kkt_residual_max"] <= 1e-9 for row in summary)
    assert (tmp_path / "postprocess-epsilon.png").stat().st_size > 0
    assert (tmp_path / "postprocess-epsilon-rounds.csv").exists()
    assert result.stdout.startswith("epsilon: mse_mean")  # the table is a result: stdout


def test_run_study_reports_the_rounds_done():
    settings = study_settings("epsilon", epsilons=[0.5, 1.0], steps=[], levels=[], users=20, default_steps=10,
                              default_epsilon=1.0, default_s={"epsilon": 0.0})
    calls: list[tuple[int, int]] = []
    records = run_study(iter(settings), 2, 7, progress=lambda done, total: calls.append((done, total)))
    assert calls == [(0, 4), (1, 4), (2, 4), (3, 4), (4, 4)]
    again = run_study(settings, 2, 7)  # reporting changes nothing but the timings
    assert [{**r, "seconds": 0} for r in records] == [{**r, "seconds": 0} for r in again]


def _postprocess(noisy_path, transition_path, out, *extra):
    return _run("postprocess", noisy_path, "--transition", transition_path, "--users", 50, "--epsilon", 0.5,
                "-o", out, *extra)


def test_dash_output_writes_the_counts_to_stdout(files, monkeypatch):
    tmp, noisy, noisy_path, transition_path = files
    monkeypatch.chdir(tmp)
    result = _postprocess(noisy_path, transition_path, "-", "--integer")
    assert result.exit_code == 0, result.output
    written = np.loadtxt(result.stdout.splitlines(), delimiter=",", dtype=np.int64)
    assert written.shape == noisy.shape and np.all(written.sum(axis=1) == 50)
    assert "wrote stdout" in result.stderr and not (tmp / "-").exists()
    assert _postprocess(noisy_path, transition_path, "-").exit_code == 0


@pytest.fixture()
def umask_027():
    old = os.umask(0o027)
    yield
    os.umask(old)


def test_output_gets_the_usual_mode(files, umask_027):
    tmp, _, noisy_path, transition_path = files
    result = _postprocess(noisy_path, transition_path, tmp / "out.csv")
    assert result.exit_code == 0, result.output
    assert stat.S_IMODE((tmp / "out.csv").stat().st_mode) == 0o640  # 0o666 & ~0o027
    assert [path.name for path in tmp.iterdir() if path.name.startswith(".")] == []


def test_header_row_is_copied_to_the_output(files):
    tmp, noisy, _, transition_path = files
    named = tmp / "named.csv"
    np.savetxt(named, noisy, delimiter=",", fmt="%.17g", header="home,work,shop", comments="")
    result = _postprocess(named, transition_path, tmp / "out.csv")
    assert result.exit_code == 0, result.output
    lines = (tmp / "out.csv").read_text().splitlines()
    assert lines[0] == "home,work,shop" and len(lines) == noisy.shape[0] + 1
    expected = map_estimate(noisy, FIG3_MATRIX, users=50, epsilon=0.5).counts
    np.testing.assert_allclose(np.loadtxt(tmp / "out.csv", delimiter=",", skiprows=1), expected,
                               rtol=1e-9, atol=1e-8)
    # without a header in the input, none in the output
    result = _postprocess(files[2], transition_path, tmp / "plain.csv")
    assert result.exit_code == 0 and np.loadtxt(tmp / "plain.csv", delimiter=",").shape == noisy.shape


def test_a_header_of_another_width_or_on_stdin_is_not_copied(files):
    tmp, noisy, _, transition_path = files
    named = tmp / "named.csv"
    np.savetxt(named, noisy, delimiter=",", fmt="%.17g", header="home,'work'", comments="")
    result = _postprocess(named, transition_path, tmp / "out.csv")
    assert result.exit_code == 0, result.output
    assert f"warning: the header of {str(named)!r} has 2 names for 3 columns; it is not copied." in result.stderr
    assert np.loadtxt(tmp / "out.csv", delimiter=",").shape == noisy.shape
    # The header of counts read from stdin is not copied either.
    np.savetxt(named, noisy, delimiter=",", fmt="%.17g", header="home,work,shop", comments="")
    result = CliRunner().invoke(cli, ["postprocess", "-", "--transition", str(transition_path), "--users", "50",
                                      "--epsilon", "0.5", "-o", str(tmp / "piped.csv")], input=named.read_text())
    assert result.exit_code == 0, result.output
    assert (tmp / "piped.csv").read_text() == (tmp / "out.csv").read_text()


def test_missing_output_directory_fails_before_any_work(files):
    tmp, _, noisy_path, transition_path = files
    result = _postprocess(noisy_path, transition_path, tmp / "no-such-dir" / "o.csv")
    assert result.exit_code == 1 and "no-such-dir" in result.output and "does not exist" in result.output
    assert len(result.output.strip().splitlines()) == 1


SMALL = ["--rounds", 1, "--steps", 20, "--users", 5, "--epsilons", 1, "--correlation-epsilons", 1]


@pytest.mark.parametrize("option, value, named", [
    ("--steps-grid", "10,0", "0"),
    ("--steps-grid", "10,2.5", "2.5"),
    ("--levels", "0.1,-1", "-1"),
    ("--epsilons", "1,0", "0"),
    ("--correlation-epsilons", "nan", "nan"),
    ("--epsilon", "-1", "-1"),
    ("--users", "0", "0"),
    ("--rounds", "0", "0"),
])
def test_evaluate_postprocess_checks_every_option_before_any_work(tmp_path, option, value, named):
    out = tmp_path / "results"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    result = _run("evaluate-postprocess", "--study", "all", *SMALL, "--steps-grid", 10, option, value, "--out", out)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert lines[-1].startswith("Error: Invalid value for") and option in lines[-1] and named in lines[-1]
    assert sorted(path.name for path in out.iterdir()) == ["keep.txt"]


def test_evaluate_commands_give_the_same_exit_code_for_the_same_mistake(tmp_path):
    (tmp_path / "postprocess-epsilon.csv").write_text("old")
    postprocess_result = _run("evaluate-postprocess", "--study", "epsilon", "--rounds", 0, "--out", tmp_path)
    counts_result = _run("evaluate-count-of-counts", "--runs", 0, "--out", tmp_path)
    assert postprocess_result.exit_code == counts_result.exit_code == 2
    assert "--rounds" in postprocess_result.output and "--runs" in counts_result.output


def test_evaluate_seed_help_names_the_experiment():
    assert "Seed of the experiment" in _run("evaluate-postprocess", "--help").output


def test_postprocess_plot_draws_the_noisy_and_the_cleaned_counts(files, monkeypatch):
    import dpstream.evaluation.postprocess as studies

    tmp, noisy, noisy_path, transition_path = files
    drawn = []
    real = studies.save_figure
    monkeypatch.setattr(studies, "save_figure", lambda path, panels, **kw: drawn.append(panels) or real(path, panels,
                                                                                                       **kw))
    result = _postprocess(noisy_path, transition_path, tmp / "out.csv", "--plot", tmp / "counts.png",
                          "--plot-locations", "2,0")
    assert result.exit_code == 0, result.output
    assert (tmp / "counts.png").read_bytes()[:4] == b"\x89PNG" and "plot: " in result.stderr
    cleaned = np.loadtxt(tmp / "out.csv", delimiter=",")
    (panels,) = drawn
    assert [panel.title.rsplit(": ", 1)[1] for panel in panels] == ["location 2", "location 0"]
    for panel, column in zip(panels, (2, 0)):
        noisy_line, cleaned_line = panel.series
        np.testing.assert_array_equal(noisy_line.y, noisy[:, column])
        np.testing.assert_allclose(cleaned_line.y, cleaned[:, column], rtol=1e-9, atol=1e-8)
        assert "noisy" in noisy_line.label and "MAP" in cleaned_line.label and panel.xlabel == "time step"
    # the plot is an output like any other: not replaced without --force
    again = _postprocess(noisy_path, transition_path, tmp / "again.csv", "--plot", tmp / "counts.png")
    assert again.exit_code == 1 and "counts.png exists" in again.output and not (tmp / "again.csv").exists()


@pytest.mark.parametrize(("extra", "message"), [
    (["--plot-locations", "1"], "--plot-locations needs --plot"),
    (["--plot", "counts.txt"], "must be a file name ending in .png"),
    (["--plot", "counts.png", "--plot-locations", "3"], "column numbers must be below the 3 columns"),
    (["--plot", "counts.png", "--plot-locations", "1.5"], "expected column numbers"),
])
def test_postprocess_plot_options_are_checked(files, monkeypatch, extra, message):
    tmp, _, noisy_path, transition_path = files
    monkeypatch.chdir(tmp)
    result = _postprocess(noisy_path, transition_path, tmp / "out.csv", *extra)
    assert result.exit_code == 2 and message in result.output
    assert not (tmp / "out.csv").exists() and not (tmp / "counts.png").exists()


def test_evaluate_postprocess_takes_the_users_own_matrix(tmp_path):
    """--transition: the users move by the given matrix, over as many locations as it has."""
    matrix = np.array([[0.7, 0.1, 0.1, 0.1], [0.0, 0.5, 0.5, 0.0], [0.2, 0.2, 0.2, 0.4], [0.25, 0.25, 0.25, 0.25]])
    path = tmp_path / "mine.csv"
    np.savetxt(path, matrix, delimiter=",")
    result = _run("evaluate-postprocess", "--study", "epsilon", "--epsilons", "1", "--rounds", 1, "--steps", 15,
                  "--users", 8, "--transition", path, "--out", tmp_path / "out")
    assert result.exit_code == 0, result.output
    record = json.loads((tmp_path / "out" / "postprocess-epsilon.json").read_text())
    assert record["transition"] == str(path)
    np.testing.assert_allclose(record["transition_matrix"], matrix, rtol=1e-12)
    bad = tmp_path / "bad.csv"
    np.savetxt(bad, [[0.5, 0.4], [0.5, 0.5]], delimiter=",")
    result = _run("evaluate-postprocess", "--study", "epsilon", "--rounds", 1, "--transition", bad,
                  "--out", tmp_path / "none")
    assert result.exit_code == 1 and "row 1 sums to 0.9" in result.output and not (tmp_path / "none").exists()


def test_the_correlation_table_keeps_its_columns_apart(tmp_path):
    result = _run("evaluate-postprocess", "--study", "correlation", "--correlation-epsilons", "0.05", "--levels",
                  "0.1,0.01", "--rounds", 1, "--steps", 10, "--users", 5, "--out", tmp_path)
    assert result.exit_code == 0, result.output
    header = result.stdout.splitlines()[1]
    assert header.split() == ["method", "eps=0.05,s=0.1", "eps=0.05,s=0.01"]
    assert "eps=0.05,s=0.1  " in header  # at least two spaces between columns, however long the labels
    rows = [line.split() for line in result.stdout.splitlines()[2:] if line.strip()]
    assert all(len(row) >= 3 for row in rows)


@pytest.mark.parametrize("method", ["mean", "kalman", "smooth"])
def test_non_integer_counts_under_the_discrete_likelihood_are_refused_in_one_whole_line(files, method):
    """The message quoted two names far apart; the error line cut the run between them in the middle."""
    tmp_path, noisy, _, transition_path = files
    fractional = tmp_path / "fractional.csv"
    fractional.write_text("10.5,20,20\n10,20,20\n")
    result = _run("postprocess", fractional, "--transition", transition_path, "--users", 50, "--epsilon", 0.5,
                  "--method", method, "--likelihood", "discrete_laplace", "-o", tmp_path / "o.csv")
    assert result.exit_code == 1 and not (tmp_path / "o.csv").exists()
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and "..." not in errors[0]
    assert "needs integer noisy counts; row 1, column 1 is 10.5 (for counts released with continuous Laplace " \
           "noise pass likelihood='laplace')." in errors[0]


@pytest.mark.parametrize("method", ["map", "mle", "mean", "kalman", "smooth"])
@pytest.mark.parametrize("value", ["1.7e308", "-1.7e308", "1e16"])
def test_counts_beyond_2_to_the_53_are_one_clean_error(files, method, value):
    """Such cells printed numpy's RuntimeWarnings (overflow, invalid values) and wrote nonsense."""
    tmp_path, _, _, transition_path = files
    huge = tmp_path / "huge.csv"
    huge.write_text(f"10,20,20\n10,{value},20\n")
    result = _run("postprocess", huge, "--transition", transition_path, "--users", 50, "--epsilon", 0.5,
                  "--method", method, "--likelihood", "laplace", "-o", tmp_path / "o.csv")
    assert result.exit_code == 1 and not (tmp_path / "o.csv").exists()
    assert "Warning" not in result.stderr and result.stderr.count("\n") == 1, result.stderr
    assert f"row 2, column 2 is {float(value):.6g}, beyond 2^53" in result.stderr
    fine = tmp_path / "fine.csv"
    fine.write_text("10,9e15,20\n10,20,20\n")  # at most 2^53: read, and no warning either
    result = _run("postprocess", fine, "--transition", transition_path, "--users", 50, "--epsilon", 0.5,
                  "--method", method, "--likelihood", "laplace", "-o", tmp_path / "o.csv")
    assert result.exit_code == 0 and "Warning" not in result.stderr, result.stderr
