"""``dpstream release-locations``: the output is the library's, the post-processing reads the release's noise model,
``--state`` never releases a step twice, and bad inputs are one-line errors."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

import dpstream.cli.release_locations as command
import dpstream.io.rows as rows
from dpstream.cli import cli
from dpstream.datasets.trajectories import trajectories
from dpstream.postprocess import postprocess
from dpstream.release.locations import LocationCounts
from durable_faults import killed_until_finished

USERS, STEPS = 30, 48


@pytest.fixture
def data(tmp_path):
    """30 users on 4 locations for 48 hourly steps: rows.csv, locations.txt, transition.csv."""
    made = trajectories(users=USERS, locations=4, steps=STEPS, seed=6)
    made.write(tmp_path)
    return made


def _base(tmp_path, *extra):
    return [str(tmp_path / "rows.csv"), "--time-column", "time", "--user-column", "user", "--location-column",
            "location", "--locations", str(tmp_path / "locations.txt"), "--step", "1h", "--epsilon", "1",
            "--users", str(USERS), "--seed", "4", *map(str, extra)]


def _run(*args):
    return CliRunner().invoke(cli, ["release-locations", *map(str, args)])


def _read(path):
    lines = path.read_text().splitlines()
    return lines[0].split(","), [line.split(",")[0] for line in lines[1:]], \
        np.array([[float(v) for v in line.split(",")[1:]] for line in lines[1:]])


def test_the_output_is_the_librarys_release_and_the_estimates_use_its_noise_model(tmp_path, data):
    result = _run(*_base(tmp_path, "-o", tmp_path / "out.csv", "--w-event", 6, "--postprocess", "mean",
                         "--transition", tmp_path / "transition.csv", "--postprocessed", tmp_path / "mean.csv"))
    assert result.exit_code == 0, result.output
    header, steps, noisy = _read(tmp_path / "out.csv")
    assert header == ["step", *data.locations] and len(steps) == STEPS
    assert steps[0] == "2024-01-01T00:00:00Z" and steps[-1] == "2024-01-02T23:00:00Z"
    release = LocationCounts(epsilon=1.0, locations=data.locations, step=3600, users=USERS, w_event=6, seed=4)
    times = np.repeat(np.arange(STEPS, dtype=np.int64) * 3600 * 10**9 + 1704067200 * 10**9, USERS)
    out = release.release(times, np.tile(data.users, STEPS), np.array(data.locations)[data.path].ravel())
    assert np.array_equal(noisy, np.concatenate((out.counts, release.flush().counts)))
    expected = postprocess(noisy, data.matrix, users=USERS, method="mean", **release.noise_model()).counts
    header, steps_pp, estimates = _read(tmp_path / "mean.csv")
    assert header == ["step", *data.locations] and steps_pp == steps
    assert np.allclose(estimates, expected, rtol=1e-9, atol=1e-8)
    assert "each user's locations at any 6 consecutive steps: ε = 1; the whole trajectory of 48 steps: ε = 8 by " \
           "composition" in result.output
    assert "n = 30 from --users" in result.output and "discrete Laplace of scale 12 per cell" in result.output


def test_unbounded_estimates_n_from_the_released_counts(tmp_path, data):
    args = _base(tmp_path, "-o", tmp_path / "out.csv", "--postprocess", "map", "--transition",
                 tmp_path / "transition.csv", "--postprocessed", tmp_path / "map.csv", "--neighbours", "unbounded")
    refused = _run(*args)
    assert refused.exit_code == 2 and "not public under unbounded neighbours" in refused.output
    args.remove("--users"), args.remove(str(USERS))
    result = _run(*args)
    assert result.exit_code == 0, result.output
    noisy = _read(tmp_path / "out.csv")[2]
    assert f"n = {int(np.rint(noisy.sum(axis=1).mean())):,} from the mean released row sum" in result.output
    assert "differing in one user's rows at one time step, added or removed" in result.output


@pytest.mark.parametrize(("matrix", "message"), [
    ("L0,L1,L2\n1,0,0\n0,1,0\n0,0,1\n", "is 3 x 3, but --locations names 4 locations"),
    ("L0,L1,L2,L3\n1,0,0,0\n0,0.5,0,0\n0,0,1,0\n0,0,0,1\n", "row 2 sums to 0.5, not 1"),
    ("L0,L1,L3,L2\n1,0,0,0\n0,1,0,0\n0,0,1,0\n0,0,0,1\n", "has 'L3' in column 3 where --locations has 'L2'"),
])
def test_a_transition_matrix_that_does_not_match_the_locations_is_a_one_line_error(tmp_path, data, matrix, message):
    (tmp_path / "bad.csv").write_text(matrix)
    result = _run(*_base(tmp_path, "-o", tmp_path / "out.csv", "--postprocess", "map", "--transition",
                         tmp_path / "bad.csv", "--postprocessed", tmp_path / "map.csv"))
    assert result.exit_code == 1 and message in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "out.csv").exists()


@pytest.mark.parametrize(("edit", "message"), [
    (lambda lines: lines[:2] + [lines[1].rsplit(",", 1)[0] + ",L1"] + lines[2:],  # U00 twice in step 0
     "row 2: the user 'U00' has a second row in step 2024-01-01T00:00:00Z: one location per user per step"),
    (lambda lines: lines[:5] + [lines[5].rsplit(",", 1)[0] + ",L9"] + lines[6:],
     "row 5: the location 'L9' is not one of the 4"),
    (lambda lines: lines[:1] + lines[31:32] + lines[2:31] + lines[1:2] + lines[32:],
     "row 2: its step 2024-01-01T00:00:00Z is before step 2024-01-01T01:00:00Z"),
    (lambda lines: lines[:-1], "step 2024-01-02T23:00:00Z has 29 rows, but under bounded neighbours each of the 30"),
])
def test_bad_rows_are_one_line_errors(tmp_path, data, edit, message):
    lines = (tmp_path / "rows.csv").read_text().splitlines()
    (tmp_path / "rows.csv").write_text("\n".join(edit(lines)) + "\n")
    result = _run(*_base(tmp_path, "-o", tmp_path / "out.csv"))
    assert result.exit_code == 1 and message in result.output, result.output
    assert "Traceback" not in result.output and not (tmp_path / "out.csv").exists()


@pytest.mark.parametrize(("extra", "message"), [
    ([], "row 2: its time 2040-01-01T00:00:00Z comes 18262d after the newest step before it: the 26,297,280 "
         "steps up to it would all be released (52,594,560 values, more than the 4,194,304 a gap releases without "
         "--max-gap); --max-gap 18262d releases them."),
    (["--max-gap", "30d"], "comes 18262d after the newest step before it, more than --max-gap 30d"),
])
def test_a_long_gap_is_refused_before_any_work_naming_it_and_max_gap(tmp_path, extra, message):
    """Every step between two rows is released (time is public): 50 years of minutes would take minutes."""
    (tmp_path / "rows.csv").write_text("time,user,location\n1990-01-01T00:00:00Z,a,L1\n2040-01-01T00:00:00Z,a,L2\n")
    (tmp_path / "locations.txt").write_text("L1\nL2\n")
    result = _run(tmp_path / "rows.csv", "-o", tmp_path / "out.csv", "--time-column", "time", "--user-column", "user",
                  "--location-column", "location", "--locations", tmp_path / "locations.txt", "--step", "1m",
                  "--epsilon", "1", "--neighbours", "unbounded", *extra)
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert result.exit_code == 1 and len(errors) == 1 and message in errors[0], result.output
    assert "Traceback" not in result.output and not (tmp_path / "out.csv").exists()


@pytest.mark.parametrize(("extra", "message"), [
    (["--postprocess", "map"], "--postprocess needs --transition"),
    (["--prior", "uniform"], "--prior applies with --postprocess only"),
    (["--step", "90min"], "is not an integer and s, m, h or d"),
    (["--w-event", "0"], "0 is not in the range x>=1"),
    (["--checkpoint-seconds", "2"], "--checkpoint-seconds applies with --state only"),
])
def test_bad_options_are_usage_errors_before_any_reading(tmp_path, data, extra, message):
    result = _run(*_base(tmp_path, "-o", tmp_path / "out.csv", *extra))
    assert result.exit_code == 2 and message in result.output, result.output
    assert not (tmp_path / "out.csv").exists()


def test_a_location_listed_twice_is_named(tmp_path, data):
    names = (tmp_path / "locations.txt").read_text().split()
    (tmp_path / "locations.txt").write_text("\n".join([*names, names[2]]) + "\n")
    result = _run(*_base(tmp_path, "-o", tmp_path / "out.csv"))
    assert result.exit_code == 2 and f"names the location {names[2]!r} twice." in result.output, result.output


def _split(tmp_path, hours):
    """rows.csv cut after ``hours`` steps (a whole step: a run's end releases its last step)."""
    lines = (tmp_path / "rows.csv").read_text().splitlines()
    (tmp_path / "part.csv").write_text("\n".join(lines[:1 + hours * USERS]) + "\n")
    return lines


def test_state_never_releases_a_step_twice_and_a_continued_input_gives_one_runs_output(tmp_path, data):
    whole = _run(*_base(tmp_path, "-o", tmp_path / "whole.csv", "--state", tmp_path / "whole.state"))
    assert whole.exit_code == 0, whole.output
    expected = (tmp_path / "whole.csv").read_bytes()
    lines = _split(tmp_path, 20)
    state = ["--state", tmp_path / "s.state", "-o", tmp_path / "out.csv"]
    first = _run(*_base(tmp_path, *state)[1:], tmp_path / "part.csv")
    assert first.exit_code == 0 and "released 20 steps in this run (new release" in first.output, first.output
    (tmp_path / "part.csv").write_text("\n".join(lines) + "\n")  # the same rows, then more
    second = _run(*_base(tmp_path, *state)[1:], tmp_path / "part.csv")
    assert second.exit_code == 0 and "released 28 steps in this run (resumed" in second.output, second.output
    assert (tmp_path / "out.csv").read_bytes() == expected
    again = _run(*_base(tmp_path, *state)[1:], tmp_path / "part.csv")
    assert again.exit_code == 0 and "nothing new" in again.output
    assert (tmp_path / "out.csv").read_bytes() == expected
    lines[3] = lines[3].rsplit(",", 1)[0] + (",L0" if not lines[3].endswith("L0") else ",L1")  # changed
    (tmp_path / "part.csv").write_text("\n".join(lines) + "\n")
    changed = _run(*_base(tmp_path, *state)[1:], tmp_path / "part.csv")
    assert changed.exit_code == 1 and "the input differs from the one the state consumed" in changed.output
    assert (tmp_path / "out.csv").read_bytes() == expected
    assert "input values consumed" not in whole.output + second.output  # rows are data: never counted aloud


def test_kill_and_resume_with_state_writes_what_an_uninterrupted_run_writes(tmp_path, data, monkeypatch):
    options = ["--checkpoint-seconds", "0"]
    monkeypatch.setattr(rows, "_BLOCK", 1500)  # CSV batches of about 40 rows: many commits to kill
    monkeypatch.setattr(command, "_BATCH", 40)
    whole = _run(*_base(tmp_path, "-o", tmp_path / "whole.csv", "--state", tmp_path / "whole.state", *options))
    assert whole.exit_code == 0, whole.output
    expected = (tmp_path / "whole.csv").read_bytes()
    result, kills = killed_until_finished(
        monkeypatch, lambda: _run(*_base(tmp_path, "-o", tmp_path / "out.csv", "--state", tmp_path / "out.state",
                                         *options)), seed=5, tries=40)
    assert result.exit_code == 0 and kills >= 3, result.output
    assert (tmp_path / "out.csv").read_bytes() == expected


def test_postprocessing_reads_the_release_back_so_it_needs_a_file_and_its_own_output(tmp_path, data):
    post = ["--postprocess", "map", "--transition", tmp_path / "transition.csv"]
    to_stdout = _run(*_base(tmp_path, "-o", "-", *post, "--postprocessed", tmp_path / "map.csv"))
    assert to_stdout.exit_code == 2 and "--postprocessed reads the release back from -o" in to_stdout.output
    same = _run(*_base(tmp_path, "-o", tmp_path / "out.csv", *post, "--postprocessed", tmp_path / "out.csv"))
    assert same.exit_code == 2 and "--postprocessed and -o must name different files" in same.output
    over = _run(*_base(tmp_path, "-o", tmp_path / "locations.txt"))
    assert over.exit_code == 2 and "-o and --locations must name different files" in over.output
    assert not (tmp_path / "out.csv").exists() and not (tmp_path / "map.csv").exists()


def test_budget_of_a_state_shows_the_relation_and_never_the_rows_consumed(tmp_path, data):
    result = _run(*_base(tmp_path, "-o", tmp_path / "out.csv", "--state", tmp_path / "s.state", "--w-event", 4))
    assert result.exit_code == 0, result.output
    budget = CliRunner().invoke(cli, ["budget", str(tmp_path / "s.state")])
    assert budget.exit_code == 0, budget.output
    assert "locations" in budget.output and "at up to 4 consecutive time steps" in budget.output
    assert "how many rows were consumed is data" in budget.output and "1,440" not in budget.output
